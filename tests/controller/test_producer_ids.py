"""The controller's producer id blocks (KIP-730): AllocateProducerIds through the controller service
on a fake node whose image replays what it commits, as a real node's does.

Blocks are disjoint whether requests come one by one or in one batch; a broker that is not
registered with that epoch is refused STALE_BROKER_EPOCH; the next producer id survives replay,
snapshots and a failover (a standby that replayed the same log, or loaded a snapshot, continues
after the last committed block); a block whose commit failed is not answered, and not skipped.
"""

from __future__ import annotations

import asyncio
from typing import Any

from quorum.controller import ControllerConfig
from quorum.controller import records as rec
from quorum.controller.producer_ids import ALLOCATE_PRODUCER_IDS, BLOCK_SIZE, FIRST_PRODUCER_ID
from quorum.image.delta import MetadataDelta
from quorum.image.image_state import ImageState
from quorum.server.commit_waiters import NotLeaderError
from quorum.server.controller_service import ControllerService
from quorum.wire.errors import ErrorCode
from quorum.wire.metadata_records import MetadataRecordType, metadata_record_key
from tests.controller.test_controller_batches import CLUSTER, FakeNode, request

API = ALLOCATE_PRODUCER_IDS


class RecordingNode(FakeNode):
    """A fake node that also keeps its committed log, for a standby to replay."""

    def __init__(self) -> None:
        self.values: list[bytes] = []
        super().__init__()

    def _append(self, values: list[bytes]) -> None:
        self.values += values
        super()._append(values)


def serve(node: FakeNode) -> Any:
    service = ControllerService(node, ControllerConfig())  # type: ignore[arg-type]
    service.register(node.dispatcher)
    return node.dispatcher._handlers[API]


def allocate(broker: int, epoch: int) -> Any:
    from quorum.wire.protocol import APIS

    return request(API, APIS[API].request(broker_id=broker, broker_epoch=epoch), 0)


def epoch_of(node: FakeNode, broker: int) -> int:
    return node.image.registrations[broker].broker_epoch


def blocks(replies: list[Any]) -> list[tuple[int, int]]:
    assert all(reply.body.error_code == ErrorCode.NONE for reply in replies), [r.body for r in replies]
    return [(reply.body.producer_id_start, reply.body.producer_id_len) for reply in replies]


def assert_disjoint(got: list[tuple[int, int]]) -> None:
    spans = sorted(got)
    assert all(start + length <= following for (start, length), (following, _) in zip(spans, spans[1:], strict=False))


def test_consecutive_blocks_are_disjoint_and_start_above_the_old_per_broker_ids() -> None:
    async def go() -> tuple[list[Any], FakeNode]:
        node = FakeNode()
        handle = serve(node)
        replies = [await handle(allocate(broker, epoch_of(node, broker))) for broker in (1, 2, 1, 3)]
        return replies, node

    replies, node = asyncio.run(go())
    got = blocks(replies)
    assert got == [(FIRST_PRODUCER_ID + n * BLOCK_SIZE, BLOCK_SIZE) for n in range(4)]
    assert node.image.next_producer_id == FIRST_PRODUCER_ID + 4 * BLOCK_SIZE
    assert FIRST_PRODUCER_ID > (2**31 - 1 << 31) | (2**31 - 1), "above (n << 31) | broker for every n < 2^31"


def test_requests_in_one_batch_get_disjoint_blocks_in_one_commit() -> None:
    async def go() -> tuple[list[Any], FakeNode]:
        node = FakeNode()
        handle = serve(node)
        commits_before = len(node.commits)
        replies = await asyncio.gather(*(handle(allocate(broker, epoch_of(node, broker)))
                                         for broker in (1, 2, 3, 4) * 3))  # fmt: skip
        assert len(node.commits) == commits_before + 1
        return list(replies), node

    replies, node = asyncio.run(go())
    got = blocks(replies)
    assert len(set(got)) == 12
    assert_disjoint(got)
    assert node.image.next_producer_id == max(start for start, _ in got) + BLOCK_SIZE


def test_a_broker_not_registered_with_that_epoch_is_refused_stale_broker_epoch() -> None:
    async def go() -> tuple[list[Any], FakeNode, int]:
        node = FakeNode()
        handle = serve(node)
        offset = node.log.end_offset
        replies = [await handle(allocate(1, epoch_of(node, 1) + 1)), await handle(allocate(99, 0)),
                   await handle(allocate(2, -1))]
        return replies, node, offset

    replies, node, offset = asyncio.run(go())
    assert [reply.body.error_code for reply in replies] == [ErrorCode.STALE_BROKER_EPOCH] * 3
    assert all(reply.body.producer_id_len == 0 for reply in replies)
    assert node.log.end_offset == offset, "nothing written"
    assert node.image.next_producer_id == -1


def test_the_next_producer_id_survives_a_snapshot_and_a_failover_to_a_standby() -> None:
    async def first_controller() -> tuple[list[Any], RecordingNode]:
        node = RecordingNode()
        handle = serve(node)
        return [await handle(allocate(broker, epoch_of(node, broker))) for broker in (1, 2, 3)], node

    replies, active = asyncio.run(first_controller())
    given = blocks(replies)

    # A standby replayed the same committed log; another node loaded a snapshot of the image.
    standby = ImageState(listener="PLAINTEXT", cluster_id=CLUSTER)
    for offset, value in enumerate(active.values):
        standby.apply(offset, value)
    snapshot = list(active.image_state.snapshot_values())
    types = [metadata_record_key(value).record_type for value in snapshot]
    assert types.count(MetadataRecordType.PRODUCER_IDS) == 1 and len(snapshot) == len(active.image_state)
    loaded = ImageState(listener="PLAINTEXT", cluster_id=CLUSTER)
    loaded.load(snapshot, offset=active.log.end_offset - 1)
    for state in (standby, loaded):
        assert state.image.next_producer_id == active.image.next_producer_id
        assert state.image == active.image

    async def new_active(state: ImageState) -> list[Any]:
        node = RecordingNode()
        node.image_state = state  # the standby's image, now active
        node.log.end_offset = active.log.end_offset
        handle = serve(node)
        return [await handle(allocate(broker, epoch_of(node, broker))) for broker in (4, 1)]

    for state in (standby, loaded):
        later = blocks(asyncio.run(new_active(state)))
        assert later[0][0] == max(start for start, _ in given) + BLOCK_SIZE, "continues after the last committed block"
        assert_disjoint(given + later)


def test_a_block_whose_commit_failed_is_not_answered_and_is_given_again() -> None:
    async def go() -> tuple[Any, Any]:
        node = FakeNode()
        handle = serve(node)
        node.fail = NotLeaderError("lost leadership")
        failed = await handle(allocate(1, epoch_of(node, 1)))
        node.fail = None
        return failed, await handle(allocate(1, epoch_of(node, 1)))

    failed, retried = asyncio.run(go())
    assert failed.body.error_code == ErrorCode.NOT_CONTROLLER
    assert blocks([retried]) == [(FIRST_PRODUCER_ID, BLOCK_SIZE)], "nothing was committed, so nobody got those ids"


def test_replay_never_moves_the_next_producer_id_back() -> None:
    state = ImageState()
    delta = MetadataDelta(state.image)
    assert delta.replay(rec.encode(rec.producer_ids(1, 5, 5000)))
    assert not delta.replay(rec.encode(rec.producer_ids(2, 6, 4000))), "a lower one is ignored"
    assert not delta.replay(rec.encode(rec.producer_ids(2, 6, 5000))), "so is the same one"
    assert delta.replay(rec.encode(rec.producer_ids(2, 6, 6000)))
    assert delta.apply().next_producer_id == 6000


def test_a_changed_next_producer_id_counts_once_towards_the_next_snapshot() -> None:
    state = ImageState()
    state.apply(0, rec.encode(rec.producer_ids(1, 5, 1000)))
    assert state.changed_records == 0, "created"
    for offset, next_id in enumerate((2000, 3000, 4000), start=1):
        state.apply(offset, rec.encode(rec.producer_ids(1, 5, next_id)))
    assert state.changed_records == 1 and len(state) == 1
