"""A real client reading tiered data gets exactly what was produced, now that the broker answers
remote reads with views of its cached chunks (`quorum.wire.spliced.BufferRecords`) written to the
socket as they are, never copied into the encoded answer.

One in-process broker per chunk size: a real partition of mixed batches (plain and lz4, 10 B to
10 KiB values) in 256 KiB segments, its rolled segments uploaded to an in-memory tier and deleted
locally, behind the real listener and read path with the remote log manager as its remote tier.
Chunks of 1 MiB hold whole segments, so each answer is one view of a chunk, large enough to be
written apart from the pieces around it; chunks of 5 000 bytes cut batches, so every read joins
pieces of several chunks. confluent-kafka reads from offset 0, across segment boundaries, into
the local log.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import OFFSET_BEGINNING, Consumer
from confluent_kafka import TopicPartition as ConfluentPartition

from quorum.broker.fetch import register_read_path
from quorum.broker.log_config import LogConfig
from quorum.broker.partition import Partition
from quorum.broker.partition_view import AppendNotifier
from quorum.image.image import single_node_image
from quorum.server.listener import KafkaListener
from quorum.server.reply_writer import WRITE_APART_FROM
from quorum.server.standalone import metadata_dispatcher
from quorum.wire.records import iter_batches
from tests.broker.fake_partitions import FakeLookup
from tests.broker.test_zero_copy_fetch import T0, produced_batches
from tests.support.background_loop import BackgroundServer
from tests.tiered.test_remote_log_manager import MemoryTier
from tiered_follower.remote_log_manager import RemoteLogManager

pytestmark = pytest.mark.timeout(180)

TOPIC = "tiered-views"
SEGMENT_BYTES = 256 << 10
FETCH_BYTES = 100_000
"""max.partition.fetch.bytes: answers of ~100 KB, more than WRITE_APART_FROM"""
assert FETCH_BYTES > WRITE_APART_FROM


class TieredBroker(BackgroundServer):
    """Node 1 leading `tiered-views`-0, whose rolled segments are only in the remote tier."""

    def __init__(self, directory: Path, chunk_size: int) -> None:
        super().__init__()
        self.directory = directory
        self.chunk_size = chunk_size
        self.log_bytes = b""

    async def _serve(self) -> None:
        dispatcher, holder = metadata_dispatcher()
        dispatcher.register(0, self._no_produce)  # librdkafka fetches only from a broker with Produce v3+
        lookup = FakeLookup()
        tier = MemoryTier()
        self.manager = RemoteLogManager(1, tier, tier, {"rsm.config.chunk.size": str(self.chunk_size)})
        register_read_path(dispatcher, lookup, AppendNotifier(), lambda: holder[0], remote=self.manager)
        listener = KafkaListener(dispatcher, "127.0.0.1", 0)
        await listener.start()
        image = single_node_image(1, "127.0.0.1", listener.port, {TOPIC: 1})
        holder.append(image)
        config = LogConfig(segment_bytes=SEGMENT_BYTES, index_interval_bytes=1024, remote_storage_enable=True,
                           local_retention_ms=None, local_retention_bytes=0, retention_ms=None)  # fmt: skip
        self.partition = Partition(TOPIC, 0, image.topics[TOPIC].topic_id, self.directory / f"{TOPIC}-0", config,
                                   broker_id=1)  # fmt: skip
        self.partition.update_state(1, 0, (1,))  # the image's leader epoch
        for data in produced_batches():
            self.partition.append_as_leader(data, T0)
        self.partition.advance_high_watermark(self.partition.log_end_offset)
        self.log_bytes = b"".join(path.read_bytes() for path in sorted(self.partition.log.directory.glob("*.log")))
        self.manager.partition_opened(self.partition)
        await self.manager.run_once([self.partition])  # uploads the rolled segments, then deletes them locally
        lookup.add(self.partition)  # type: ignore[arg-type]
        self._started(listener.port)
        await self._stop.wait()
        await listener.close()
        await self.manager.close()
        self.partition.close()

    @staticmethod
    async def _no_produce(request):  # noqa: ANN001, ANN205
        raise AssertionError("a consumer test got a Produce request")


@pytest.fixture(scope="module", params=[1 << 20, 5000], ids=["chunk-holds-segments", "chunks-cut-batches"])
def broker(request, tmp_path_factory) -> Iterator[TieredBroker]:  # noqa: ANN001
    with TieredBroker(tmp_path_factory.mktemp("tiered-views"), request.param) as server:
        remote = server.partition.remote
        assert remote is not None and len(remote.finished) >= 5, "several segments should be only in the tier"
        assert server.partition.local_log_start_offset > server.partition.log_end_offset // 2
        yield server


def test_confluent_kafka_reads_the_tiered_partition_byte_for_byte(broker):
    want = [(record.key, record.value) for batch in iter_batches(broker.log_bytes) for record in batch]
    consumer = Consumer({"bootstrap.servers": broker.address, "group.id": "tiered-views", "enable.auto.commit": False,
                         "fetch.wait.max.ms": 200, "max.partition.fetch.bytes": FETCH_BYTES})  # fmt: skip
    got: list[tuple[bytes | None, bytes | None]] = []
    try:
        consumer.assign([ConfluentPartition(TOPIC, 0, OFFSET_BEGINNING)])
        deadline = time.monotonic() + 60
        while len(got) < len(want) and time.monotonic() < deadline:
            for message in consumer.consume(500, 0.5):
                assert message.error() is None, message.error()
                assert message.offset() == len(got), (message.offset(), len(got))
                got.append((message.key(), message.value()))
    finally:
        consumer.close()
    assert len(got) == len(want), f"confluent-kafka read {len(got)} of {len(want)} records within 60 s"
    assert got == want
    stats = broker.manager.reader.stats
    assert stats["reads"] > 5 and stats["errors"] == 0  # the records below the local log came from the tier
