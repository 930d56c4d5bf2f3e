"""Real clients consume through the read path: kafka-python (assign + seek, with a fetch session),
confluent-kafka (assign from the beginning: ListOffsets, then sessionless Fetch at its newest
version, by topic id) and kcat, against an in-process listener serving Metadata from a fixed image
and Fetch, ListOffsets and OffsetForLeaderEpoch from fake partitions pre-filled with records.

Records appended while a client waits in a long poll reach it too: the append and the notifier
run on the server's loop, as the write path's will.

librdkafka enables record batch v2 (and so any Fetch at all) only when the broker advertises
Produce v3+ as well as Fetch v4+, so the broker here advertises a Produce it never gets asked.
"""

from __future__ import annotations

import subprocess
import time
from collections.abc import Iterator

import pytest
from confluent_kafka import OFFSET_BEGINNING, Consumer
from confluent_kafka import TopicPartition as ConfluentPartition
from kafka import KafkaConsumer
from kafka.structs import TopicPartition

from quorum.broker.fetch import register_read_path
from quorum.broker.partition_view import AppendNotifier
from quorum.image.image import single_node_image
from quorum.server.listener import KafkaListener
from quorum.server.standalone import metadata_dispatcher
from tests.broker.fake_partitions import FakeLookup, FakePartition
from tests.support.background_loop import BackgroundServer

pytestmark = pytest.mark.timeout(120)

TOPIC = "events"
PER_PARTITION = 30
PRODUCE = 0


class ReadPathBroker(BackgroundServer):
    """Node 1 leading both partitions of `events`, each holding PER_PARTITION records in batches of 3."""

    def __init__(self) -> None:
        super().__init__()
        self.lookup = FakeLookup()
        self.versions: dict[int, set[int]] = {}

    async def _serve(self) -> None:
        dispatcher, holder = metadata_dispatcher()
        dispatcher.register(PRODUCE, self._no_produce)
        self.notifier = AppendNotifier()
        path = register_read_path(dispatcher, self.lookup, self.notifier, lambda: holder[0])
        for key, handler in ((1, path.fetch.handle), (2, path.offsets.list_offsets),
                             (23, path.offsets.offset_for_leader_epoch)):
            dispatcher.register(key, self._recording(key, handler))
        listener = KafkaListener(dispatcher, "127.0.0.1", 0)
        await listener.start()
        image = single_node_image(1, "127.0.0.1", listener.port, {TOPIC: 2})
        holder.append(image)
        for index in range(2):
            partition = self.lookup.add(FakePartition(TOPIC, index, image.topics[TOPIC].topic_id))
            for _ in range(PER_PARTITION // 3):
                partition.append(3)
        self.port = listener.port
        self._ready.set()
        await self._stop.wait()
        await listener.close()

    @staticmethod
    async def _no_produce(request):
        raise AssertionError("a consumer test got a Produce request")

    def _recording(self, key, handler):
        async def recorded(request):
            self.versions.setdefault(key, set()).add(request.version)
            return await handler(request)
        return recorded

    def append(self, index: int, count: int) -> None:
        """Append `count` records to partition `index` on the server's loop, and wake waiting fetches."""
        def run() -> None:
            self.lookup.get(TOPIC, index).append(count)
            self.notifier.appended()
        self._loop.call_soon_threadsafe(run)


@pytest.fixture
def broker() -> Iterator[ReadPathBroker]:
    with ReadPathBroker() as server:
        yield server


def expected(index: int, upto: int = PER_PARTITION) -> list[tuple[int, bytes]]:
    return [(offset, b"k%d" % offset) for offset in range(upto)]


def test_kafka_python_consumes_with_a_fetch_session(broker):
    consumer = KafkaConsumer(bootstrap_servers=broker.address, enable_auto_commit=False, fetch_max_wait_ms=200,
                             consumer_timeout_ms=15_000)
    try:
        partitions = [TopicPartition(TOPIC, 0), TopicPartition(TOPIC, 1)]
        consumer.assign(partitions)
        consumer.seek(partitions[0], 0)
        consumer.seek(partitions[1], 10)
        got = {0: [], 1: []}
        deadline = time.monotonic() + 30
        while (len(got[0]) < PER_PARTITION or len(got[1]) < PER_PARTITION - 10) and time.monotonic() < deadline:
            for tp, records in consumer.poll(timeout_ms=500).items():
                got[tp.partition].extend((r.offset, r.key) for r in records)
        assert got[0] == expected(0)
        assert got[1] == expected(1)[10:]
        broker.append(1, 4)  # while the consumer long-polls at the end of the log
        more = []
        while len(more) < 4 and time.monotonic() < deadline:
            for records in consumer.poll(timeout_ms=500).values():
                more.extend(r.offset for r in records)
        assert more == [30, 31, 32, 33]
        assert consumer.end_offsets(partitions) == {partitions[0]: PER_PARTITION, partitions[1]: PER_PARTITION + 4}
        assert consumer.beginning_offsets(partitions) == {partitions[0]: 0, partitions[1]: 0}
    finally:
        consumer.close()
    assert max(broker.versions[1]) == 12  # kafka-python's newest Fetch


def test_confluent_kafka_consumes_from_the_beginning(broker):
    consumer = Consumer({"bootstrap.servers": broker.address, "group.id": "read-path", "enable.auto.commit": False,
                         "fetch.wait.max.ms": 200})
    try:
        consumer.assign([ConfluentPartition(TOPIC, 0, OFFSET_BEGINNING), ConfluentPartition(TOPIC, 1, 25)])
        got = {0: [], 1: []}
        deadline = time.monotonic() + 30
        while (len(got[0]) < PER_PARTITION or len(got[1]) < 5) and time.monotonic() < deadline:
            message = consumer.poll(0.5)
            if message is None or message.error():
                continue
            got[message.partition()].append((message.offset(), message.key()))
        assert got[0] == expected(0)
        assert got[1] == expected(1)[25:]
        broker.append(0, 2)
        more = []
        while len(more) < 2 and time.monotonic() < deadline:
            message = consumer.poll(0.5)
            if message is not None and not message.error():
                more.append(message.offset())
        assert more == [30, 31]
        low, high = consumer.get_watermark_offsets(ConfluentPartition(TOPIC, 1), timeout=10)
        assert (low, high) == (0, PER_PARTITION)
    finally:
        consumer.close()
    assert 2 in broker.versions  # ListOffsets for OFFSET_BEGINNING and the watermarks
    assert max(broker.versions[1]) >= 13  # librdkafka fetches by topic id


def test_kcat_consumes_a_partition(broker, kcat):
    out = subprocess.run([kcat, "-C", "-b", broker.address, "-t", TOPIC, "-p", "1", "-o", "beginning", "-e",
                          "-f", "%o:%k\n"], capture_output=True, text=True, timeout=60, check=True)
    assert out.stdout.splitlines() == [f"{offset}:k{offset}" for offset in range(PER_PARTITION)]

