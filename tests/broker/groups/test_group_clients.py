"""Real clients run the group protocol against the coordinator: kafka-python and confluent-kafka
subscribe (FindCoordinator, JoinGroup, SyncGroup, Heartbeat), commit offsets with metadata and
read them back (OffsetCommit, OffsetFetch), and leave (LeaveGroup).

The broker is in-process: a listener whose dispatcher serves Metadata from a fixed one-node
image (with `__consumer_offsets`), and the group APIs over an in-memory offsets log. The read
path serves empty fake partitions, because kafka-python looks up a start offset (ListOffsets)
and fetches as soon as it has an assignment without committed offsets. A second coordinator
loaded from the same log then serves the same offsets.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator

import pytest
from confluent_kafka import Consumer
from confluent_kafka import TopicPartition as ConfluentPartition
from kafka import KafkaConsumer, OffsetAndMetadata
from kafka.structs import TopicPartition

from quorum.broker.fetch import register_read_path
from quorum.broker.groups.config import OFFSETS_TOPIC, GroupConfig
from quorum.broker.groups.coordinator import GroupCoordinator
from quorum.broker.groups.events import OffsetFetch
from quorum.broker.groups.find_coordinator import image_locator
from quorum.broker.groups.handlers import register_group_apis
from quorum.broker.groups.offsets_log import InMemoryOffsetsLog
from quorum.broker.groups.shell import GroupCoordinatorShell
from quorum.broker.partition_view import AppendNotifier
from quorum.image.image import single_node_image
from quorum.server.listener import KafkaListener
from quorum.server.standalone import metadata_dispatcher
from quorum.wire.internal_metadata import InternalMetadata, decode, encode
from tests.broker.fake_partitions import FakeLookup, FakePartition
from tests.support.background_loop import BackgroundServer

pytestmark = pytest.mark.timeout(120)

TOPIC = "orders"
PARTITIONS = 3
CONFIG = GroupConfig(group_initial_rebalance_delay_ms=0, offsets_topic_num_partitions=5)


class GroupBroker(BackgroundServer):
    """Node 1 leading `orders` and every `__consumer_offsets` partition."""

    def __init__(self, log: InMemoryOffsetsLog | None = None) -> None:
        super().__init__()
        self.log = log or InMemoryOffsetsLog()

    async def _serve(self) -> None:
        dispatcher, holder = metadata_dispatcher()
        listener = KafkaListener(dispatcher, "127.0.0.1", 0)
        await listener.start()
        holder.append(single_node_image(1, "127.0.0.1", listener.port,
                                        {TOPIC: PARTITIONS, OFFSETS_TOPIC: CONFIG.offsets_topic_num_partitions}))
        topic_id = holder[0].topics[TOPIC].topic_id
        lookup = FakeLookup(*(FakePartition(TOPIC, index, topic_id) for index in range(PARTITIONS)))
        register_read_path(dispatcher, lookup, AppendNotifier(), lambda: holder[0])
        self.shell = GroupCoordinatorShell(GroupCoordinator(CONFIG), self.log, image_locator(lambda: holder[0]))
        for partition in range(CONFIG.offsets_topic_num_partitions):
            assert await self.shell.become_leader(partition)
        self.shell.start()
        register_group_apis(dispatcher, self.shell)
        self.port = listener.port
        self._ready.set()
        await self._stop.wait()
        await self.shell.close()
        await listener.close()

    def on_loop(self, function):
        """`function()` run on the server's loop, where the coordinator lives."""
        async def run():
            return function()
        return asyncio.run_coroutine_threadsafe(run(), self._loop).result(10)

    def fetch(self, group_id: str):
        """The coordinator's answer for every committed offset of the group."""
        return self.on_loop(lambda: self.shell.core.offset_fetch(OffsetFetch(group_id)))

    def describe(self, group_id: str):
        return self.on_loop(lambda: self.shell.core.describe_group(group_id))


@pytest.fixture
def broker() -> Iterator[GroupBroker]:
    with GroupBroker() as server:
        yield server


def wait_for(condition, timeout: float = 90.0, poll=lambda: None, what: str = "the condition") -> None:
    """Until `condition()`, polling the client meanwhile; 90 s, since a loaded machine has taken 30."""
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"timed out after {timeout:.0f} s waiting for {what}"
        poll()


def test_kafka_python_consumer_joins_commits_with_metadata_and_reads_back(broker: GroupBroker) -> None:
    internal = InternalMetadata(topic_epoch=1, leader_epoch=0)
    consumer = KafkaConsumer(bootstrap_servers=broker.address, group_id="kp-group", enable_auto_commit=False,
                             session_timeout_ms=10000,
                             heartbeat_interval_ms=500,
                             metadata_max_age_ms=5000)  # see test_client_compat.kafka_python_consumer
    try:
        consumer.subscribe([TOPIC])
        # kafka-python 3.0.12 loses a join that completes after poll() gave up on it when the rejoin was
        # asked by its own metadata check (base.join_group_async loops only `while need_rejoin()`, and
        # the assignment it just made cleared that): the SyncGroup answer with all 3 partitions arrives,
        # the assignment is never applied and heartbeats stay off (1 run in 11 under load). That rejoin
        # comes when the leader's first assignment saw no metadata for the topic ('No partition metadata
        # for topic orders'): so the topic's metadata is fetched before the first poll joins.
        assert consumer.partitions_for_topic(TOPIC) == set(range(PARTITIONS))
        wait_for(lambda: len(consumer.assignment()) == PARTITIONS, poll=lambda: consumer.poll(timeout_ms=200),
                 what=f"kafka-python's consumer assigned all {PARTITIONS} partitions of {TOPIC} in kp-group")
        tp = TopicPartition(TOPIC, 1)
        consumer.commit({tp: OffsetAndMetadata(42, encode("user data", internal), -1)})
        committed = consumer.committed(tp, metadata=True)
        assert committed.offset == 42
        assert decode(committed.metadata) == ("user data", internal)
    finally:
        consumer.close()
    offsets = {(o.topic, o.partition): o for o in broker.fetch("kp-group").offsets}
    assert offsets[(TOPIC, 1)].offset == 42
    group = broker.describe("kp-group")
    assert group.state == "Empty", "close() sends LeaveGroup"


def test_confluent_consumer_joins_commits_with_metadata_and_reads_back(broker: GroupBroker) -> None:
    assigned: list = []
    consumer = Consumer({"bootstrap.servers": broker.address, "group.id": "ck-group", "enable.auto.commit": False,
                         "session.timeout.ms": 10000, "heartbeat.interval.ms": 500})
    try:
        consumer.subscribe([TOPIC], on_assign=lambda c, parts: assigned.extend(parts))
        wait_for(lambda: len(assigned) == PARTITIONS, poll=lambda: consumer.poll(0.2))
        metadata = encode("mine", InternalMetadata(topic_epoch=2, leader_epoch=5))
        consumer.commit(offsets=[ConfluentPartition(TOPIC, 2, 17, metadata=metadata)], asynchronous=False)
        [committed] = consumer.committed([ConfluentPartition(TOPIC, 2)], timeout=10)
        assert committed.offset == 17
        assert decode(committed.metadata) == ("mine", InternalMetadata(2, 5))
    finally:
        consumer.close()
    offsets = {(o.topic, o.partition): o for o in broker.fetch("ck-group").offsets}
    assert offsets[(TOPIC, 2)].offset == 17
    assert offsets[(TOPIC, 2)].leader_epoch == 5, "internal leader epoch fills the committed leader epoch"


def test_two_confluent_consumers_share_the_partitions(broker: GroupBroker) -> None:
    """Two members rebalance: the second join moves the first through PreparingRebalance again.

    (kafka-python 3.0.12 with two consumers in one process now and then stalls after receiving
    its SyncGroup answer, on the client side, so the two-member case uses librdkafka.)"""
    assigned: list[set] = [set(), set()]

    def tracker(index: int):
        def on_assign(consumer, parts) -> None:
            assigned[index] = {(p.topic, p.partition) for p in parts}

        def on_revoke(consumer, parts) -> None:
            assigned[index] = set()
        return {"on_assign": on_assign, "on_revoke": on_revoke}

    consumers = [Consumer({"bootstrap.servers": broker.address, "group.id": "shared", "session.timeout.ms": 10000,
                           "heartbeat.interval.ms": 300, "enable.auto.commit": False}) for _ in range(2)]
    try:
        for index, consumer in enumerate(consumers):
            consumer.subscribe([TOPIC], **tracker(index))

        def split() -> bool:
            return all(assigned) and len(assigned[0] | assigned[1]) == PARTITIONS and not assigned[0] & assigned[1]

        def stable() -> bool:
            group = broker.describe("shared")
            return group.state == "Stable" and len(group.members) == 2

        wait_for(lambda: split() and stable(), poll=lambda: [c.poll(0.1) for c in consumers])
        group = broker.describe("shared")
        assert all(member.assignment for member in group.members)
        assert group.protocol_data == "range"
    finally:
        for consumer in consumers:
            consumer.close()


def test_offsets_survive_a_coordinator_restart_from_the_log(broker: GroupBroker) -> None:
    consumer = Consumer({"bootstrap.servers": broker.address, "group.id": "durable", "enable.auto.commit": False})
    try:
        consumer.commit(offsets=[ConfluentPartition(TOPIC, 0, 7, metadata="m0")], asynchronous=False)
    finally:
        consumer.close()
    with GroupBroker(broker.log) as restarted:
        consumer = Consumer({"bootstrap.servers": restarted.address, "group.id": "durable"})
        try:
            [committed] = consumer.committed([ConfluentPartition(TOPIC, 0)], timeout=10)
        finally:
            consumer.close()
    assert (committed.offset, committed.metadata) == (7, "m0")
