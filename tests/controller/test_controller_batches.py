"""The controller service's batches (issue 17): requests that arrive together are decided against
the pending view and committed as one batch, and give the same topics, partitions and answers as
the same requests decided and committed one at a time.

The service runs on a small fake node: its image is a real `ImageState` that each commit replays
into, as the node replays before it wakes commit waiters.
"""

from __future__ import annotations

import asyncio
import random
import uuid
from types import SimpleNamespace
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from quorum.controller import ControllerConfig, QuorumController
from quorum.controller import records as rec
from quorum.image.image import MetadataImage
from quorum.image.image_state import ImageState
from quorum.image.metrics import NodeMetrics
from quorum.net.dispatch import Dispatcher
from quorum.server.commit_waiters import NotLeaderError
from quorum.server.controller_service import ControllerService
from quorum.wire.errors import ErrorCode
from quorum.wire.framing import RequestHeader
from quorum.wire.protocol import APIS, Request
from tests.controller.fakes import (
    create_partitions_request,
    create_topics_request,
    delete_topics_request,
    heartbeat_request,
)

CLUSTER = "MkU3OEVBNTcwNTJENDM2Qg"
BROKERS = (1, 2, 3, 4)
CREATE_TOPICS, DELETE_TOPICS, CREATE_PARTITIONS, BROKER_HEARTBEAT = 19, 20, 37, 63


class FakeNode:
    """What ControllerService uses of a node: an image replayed from what `commit` appended."""

    def __init__(self) -> None:
        self.image_state = ImageState(listener="PLAINTEXT", cluster_id=CLUSTER)
        self.log = SimpleNamespace(end_offset=0)
        self.metrics = NodeMetrics()
        self.config = SimpleNamespace(node_id=1)
        self.core = SimpleNamespace(leader_committed=True, cluster_id=CLUSTER, epoch=1)
        self.dispatcher = Dispatcher()
        self.commits: list[int] = []  # records per commit
        self.fail: Exception | None = None
        for broker in BROKERS:
            self._append([rec.encode(rec.register_broker(
                broker_id=broker, incarnation_id=uuid.UUID(int=broker), broker_epoch=self.log.end_offset,
                endpoints=[("PLAINTEXT", "127.0.0.1", 9000 + broker, 0)], features=[], rack=None))])  # fmt: skip
        for broker, registration in self.image.registrations.items():
            self._append([rec.encode(rec.unfence_broker(broker, registration.broker_epoch))])

    @property
    def image(self) -> MetadataImage:
        return self.image_state.image

    @staticmethod
    def now_ms() -> int:
        return 1_000

    async def commit(self, values: list[bytes], timeout_s: float) -> int:
        await asyncio.sleep(0)  # the requests sent with this one queue meanwhile, as behind an fsync
        if self.fail is not None:
            raise self.fail
        base = self.log.end_offset
        self.commits.append(len(values))
        self._append(values)
        return base

    def _append(self, values: list[bytes]) -> None:
        for value in values:
            self.image_state.apply(self.log.end_offset, value)
            self.log.end_offset += 1


def service(seed: int) -> tuple[FakeNode, dict[int, Any]]:
    """A controller service on a fake node, its controller's random source seeded; its handlers by API key."""
    node = FakeNode()
    controller_service = ControllerService(node, ControllerConfig())  # type: ignore[arg-type]
    controller_service._controller = QuorumController(CLUSTER, ControllerConfig(), random.Random(seed))
    controller_service.register(node.dispatcher)
    return node, {key: node.dispatcher._handlers[key]
                  for key in (CREATE_TOPICS, DELETE_TOPICS, CREATE_PARTITIONS, BROKER_HEARTBEAT)}


def request(key: int, body: Any, version: int) -> Request:
    return Request(RequestHeader(key, version, 1, "test"), APIS[key], body)


def topics_of(image: MetadataImage) -> dict[str, Any]:
    """What the creations made: each topic's id, epoch, partitions and configs."""
    return {name: (t.topic_id, t.topic_epoch, [(p.partition, tuple(p.replicas), tuple(p.isr), p.leader,
                                                p.leader_epoch) for p in t.partitions],
                   dict(image.configs.get((2, name), {})))
            for name, t in image.topics.items()}  # fmt: skip


NAMES = st.sampled_from(["orders", "payments", "a.b", "a_b", "x" * 250, "", "bad name", "__consumer_offsets"])
CONFIGS = st.sampled_from([{}, {"retention.ms": "1000"}, {"cleanup.policy": "nonsense"}, {"no.such.key": "1"}])
CREATE = st.lists(st.tuples(NAMES, st.sampled_from([-1, 0, 1, 3]), st.sampled_from([-1, 0, 1, 3, 5]),
                            st.just({}), CONFIGS), min_size=1, max_size=3)  # fmt: skip
OPERATION = st.one_of(
    st.builds(lambda topics, only: (CREATE_TOPICS, 5, create_topics_request(*topics, validate_only=only)),
              CREATE, st.booleans()),
    st.builds(lambda names: (DELETE_TOPICS, 6, delete_topics_request(names=names)), st.lists(NAMES, max_size=2)),
    st.builds(lambda name, count: (CREATE_PARTITIONS, 3, create_partitions_request((name, count))),
              NAMES, st.sampled_from([1, 2, 4])),
)


@settings(max_examples=60, deadline=None)
@given(st.lists(OPERATION, min_size=1, max_size=12), st.integers(0, 2**32))
def test_batched_requests_give_what_one_by_one_gives(operations: list[tuple[int, int, Any]], seed: int) -> None:
    async def one_by_one() -> tuple[FakeNode, list[Any]]:
        node, handlers = service(seed)
        replies = [await handlers[key](request(key, body, version)) for key, version, body in operations]
        return node, replies

    async def together() -> tuple[FakeNode, list[Any]]:
        node, handlers = service(seed)
        replies = await asyncio.gather(*(handlers[key](request(key, body, version))
                                         for key, version, body in operations))  # fmt: skip
        return node, list(replies)

    alone_node, alone = asyncio.run(one_by_one())
    batch_node, batched = asyncio.run(together())
    assert [r.body.to_dict() for r in batched] == [r.body.to_dict() for r in alone]
    assert topics_of(batch_node.image) == topics_of(alone_node.image)
    assert batch_node.image.topic_epoch == alone_node.image.topic_epoch
    assert len(batch_node.commits) <= 1  # all in one commit (none when nothing was written)
    assert sum(batch_node.commits) == sum(alone_node.commits)


def test_a_failed_commit_answers_every_writer_of_the_batch() -> None:
    """Requests before the first one that wrote records keep their answers (they saw nothing
    uncommitted); it and every request after it get the commit's error."""
    async def go() -> list[Any]:
        node, handlers = service(7)
        node.fail = NotLeaderError("node 1 is not the leader", None)
        asked = [(DELETE_TOPICS, 6, delete_topics_request(names=["missing"])),
                 (CREATE_TOPICS, 5, create_topics_request(("orders", 1, 1))),
                 (CREATE_TOPICS, 5, create_topics_request(("orders", 1, 1)))]
        replies = await asyncio.gather(*(handlers[k](request(k, b, v)) for k, v, b in asked))
        assert node.commits == [] and "orders" not in node.image.topics
        return list(replies)

    deleted, created, again = asyncio.run(go())
    assert [r.error_code for r in deleted.body.responses] == [ErrorCode.UNKNOWN_TOPIC_OR_PARTITION]
    assert [t.error_code for t in created.body.topics] == [ErrorCode.NOT_CONTROLLER]
    assert [t.error_code for t in again.body.topics] == [ErrorCode.NOT_CONTROLLER]


def test_a_batch_stops_at_the_record_limit(monkeypatch: Any) -> None:
    """Past MAX_RECORDS_PER_BATCH records the rest of the queue waits for the next commit, in order."""
    monkeypatch.setattr("quorum.server.controller_service.MAX_RECORDS_PER_BATCH", 4)

    async def go() -> tuple[FakeNode, list[Any]]:
        node, handlers = service(3)
        replies = await asyncio.gather(*(handlers[CREATE_TOPICS](request(
            CREATE_TOPICS, create_topics_request((f"t{n}", 2, 1)), 5)) for n in range(5)))
        return node, list(replies)

    node, replies = asyncio.run(go())
    assert node.commits == [6, 6, 3]  # a topic is 3 records; the first request always goes
    assert all(t.error_code == 0 for r in replies for t in r.body.topics)
    assert [node.image.topics[f"t{n}"].topic_epoch for n in range(5)] == [1, 2, 3, 4, 5]


def test_a_request_whose_decision_fails_is_answered_alone(monkeypatch: Any) -> None:
    """A bug in deciding one request answers it UNKNOWN_SERVER_ERROR; the rest of its batch commits."""
    decide = QuorumController.create_topics

    def failing(self: QuorumController, request: Any, view: Any, *quota: Any) -> Any:
        if request.topics[0].name == "bug":
            raise RuntimeError("a bug")
        return decide(self, request, view, *quota)

    monkeypatch.setattr(QuorumController, "create_topics", failing)

    async def go() -> tuple[FakeNode, list[Any]]:
        node, handlers = service(5)
        replies = await asyncio.gather(*(handlers[CREATE_TOPICS](request(
            CREATE_TOPICS, create_topics_request((name, 1, 1)), 5)) for name in ("before", "bug", "after")))
        return node, list(replies)

    node, replies = asyncio.run(go())
    assert [r.body.topics[0].error_code for r in replies] == [0, ErrorCode.UNKNOWN_SERVER_ERROR, 0]
    assert node.commits == [4] and {"before", "after"} <= set(node.image.topics) and "bug" not in node.image.topics


def test_a_heartbeat_behind_a_flood_of_admin_requests_goes_in_the_first_batch(monkeypatch: Any) -> None:
    """Lifecycle requests go ahead of the admin requests queued before them, and a batch takes at most
    MAX_ADMIN_REQUESTS_PER_BATCH admin requests: a heartbeat that arrives behind a flood of CreateTopics is
    answered with the first batch, not after the flood (the fuzzer's direct controller traffic made the
    broker's heartbeats wait until its session expired)."""
    monkeypatch.setattr("quorum.server.controller_service.MAX_ADMIN_REQUESTS_PER_BATCH", 5)
    answered: list[str] = []

    async def go() -> tuple[FakeNode, Any]:
        node, handlers = service(11)
        epoch = node.image.registrations[1].broker_epoch

        async def ask(key: int, body: Any, version: int, name: str) -> Any:
            reply = await handlers[key](request(key, body, version))
            answered.append(name)
            return reply

        asked = [ask(CREATE_TOPICS, create_topics_request((f"t{n}", 1, 1)), 5, f"t{n}") for n in range(12)]
        asked.append(ask(BROKER_HEARTBEAT, heartbeat_request(1, epoch, node.log.end_offset), 1, "heartbeat"))
        replies = await asyncio.gather(*asked)
        return node, replies[-1]

    node, heartbeat = asyncio.run(go())
    assert heartbeat.body.error_code == 0
    assert answered[:6] == ["heartbeat", "t0", "t1", "t2", "t3", "t4"], answered
    assert node.commits == [10, 10, 4]  # 5 + 5 + 2 topics of 2 records each, in arrival order
    assert [node.image.topics[f"t{n}"].topic_epoch for n in range(12)] == list(range(1, 13))
