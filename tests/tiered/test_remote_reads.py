"""Reading batches and timestamps out of remote segments (tiered_follower.remote_reads) against moto's
server: a real log's segments uploaded by the remote log task, read back as the local log reads them."""

from __future__ import annotations

import asyncio
import os
import uuid
from pathlib import Path

import pytest

from quorum.broker.log_config import LogConfig
from quorum.broker.partition import Partition
from quorum.wire.records import Record, build_batch, iter_batches, patch_base_offset
from tiered_follower import remote_reads
from tiered_follower.embedded_s3 import EmbeddedS3
from tiered_follower.remote_log_manager import RemoteLogManager

BROKER = 101


@pytest.fixture
def uploaded(s3_server: EmbeddedS3, bucket: str, tmp_path: Path):
    """A leader partition of mixed batch sizes (some far above remote_reads.READ_CHUNK), its rolled
    segments uploaded by one run of the remote log task."""
    partition = Partition("reads", 0, uuid.uuid4(), tmp_path / "reads-0",
                          LogConfig(segment_bytes=1 << 19, index_interval_bytes=1024, remote_storage_enable=True,
                                    local_retention_ms=None, retention_ms=None), BROKER)
    partition.update_state(BROKER, 2, (BROKER,))
    offset = 0
    sequences = {7: 0, 9: 0}  # two idempotent producers (ids 7 and 9) among plain batches
    for number in range(120):
        size = 300_000 if number % 17 == 5 else 2_000
        count = 1 + number % 4
        producer = (7, 9, -1)[number % 3]
        sequence = sequences.get(producer, -1)
        batch = bytearray(build_batch([Record(i, 1_000_000 + 10 * (offset + i), b"", os.urandom(size // count))
                                       for i in range(count)], partition_leader_epoch=1 + number // 60,
                                      producer_id=producer, producer_epoch=0 if producer >= 0 else -1,
                                      base_sequence=sequence))
        if producer >= 0:
            sequences[producer] += count
        patch_base_offset(batch, 0, offset)
        partition.append_as_follower(bytes(batch))
        offset += count
    partition.advance_high_watermark(partition.log_end_offset)
    manager = RemoteLogManager(BROKER, *_storage(s3_server, bucket), properties={})
    manager.partition_opened(partition)
    asyncio.run(manager.run_once([partition]))
    assert partition.remote is not None and len(partition.remote.finished) >= 3
    yield partition, manager
    partition.close()


@pytest.fixture(scope="module")
def s3_server(each_s3: EmbeddedS3) -> EmbeddedS3:
    """Upload, read, retention and deletion against moto and against s3rver (`conftest.each_s3`)."""
    return each_s3


def _storage(s3_server: EmbeddedS3, bucket: str):
    manager = RemoteLogManager.from_properties(BROKER, s3_server.properties(bucket))
    return manager.storage, manager.metadata


def test_remote_reads_return_what_the_local_log_returns(uploaded):
    partition, manager = uploaded
    assert partition.remote is not None
    indexes = remote_reads.RemoteIndexCache(manager.storage)
    for segment in partition.remote.finished:
        for offset in range(segment.start_offset, segment.end_offset + 1, 3):
            for max_bytes in (1, 50_000, 1 << 20):
                remote = remote_reads.read_batches(manager.storage, indexes, segment, offset, max_bytes)
                local = partition.log.read(offset, max_bytes, segment.end_offset + 1)
                assert remote == local, (segment.object_name, offset, max_bytes)
                first = next(iter(iter_batches(remote)))
                assert first.base_offset <= offset <= first.last_offset


def test_remote_timestamps_match_the_local_log(uploaded):
    partition, manager = uploaded
    assert partition.remote is not None
    indexes = remote_reads.RemoteIndexCache(manager.storage)
    for segment in partition.remote.finished:
        for offset in (segment.start_offset, (segment.start_offset + segment.end_offset) // 2, segment.end_offset):
            found = remote_reads.offset_for_timestamp(manager.storage, indexes, segment, 1_000_000 + 10 * offset - 3)
            assert found is not None and (found.offset, found.timestamp) == (offset, 1_000_000 + 10 * offset)
    last = partition.remote.finished[-1]
    assert remote_reads.offset_for_timestamp(manager.storage, indexes, last, 10**15) is None


def test_uploaded_indexes_carry_the_epoch_history_and_producer_snapshot(uploaded):
    from quorum.broker.producer_state import ProducerStateManager
    from quorum.broker.remote_tier import IndexType
    from quorum.log.epoch_cache import decode_checkpoint
    from quorum.wire.producer_snapshot import decode_producer_snapshot

    partition, manager = uploaded
    assert partition.remote is not None
    last = partition.remote.finished[-1]
    history = decode_checkpoint(manager.storage.fetch_index(last, IndexType.LEADER_EPOCH), "remote")
    expected = [e for e in partition.log.epoch_entries if e.start_offset <= last.end_offset]
    assert history == expected
    for segment in partition.remote.finished:
        # the producers' last batches below the segment's end, as a replay of the log finds them
        replayed = ProducerStateManager()
        for batch in partition.log.iter_batches(0, segment.end_offset + 1):
            replayed.replay(batch.producer_id, batch.producer_epoch, batch.base_sequence, batch.last_offset_delta,
                            batch.base_offset, batch.max_timestamp)
        snapshot = decode_producer_snapshot(manager.storage.fetch_index(segment, IndexType.PRODUCER_SNAPSHOT))
        assert snapshot == replayed.snapshot() and {e.producer_id for e in snapshot} == {7, 9}


def test_a_new_leader_continues_the_producer_snapshots_from_the_last_uploaded_one(uploaded, s3_server, bucket):
    from quorum.broker.producer_state import ProducerStateManager
    from quorum.broker.remote_tier import IndexType
    from quorum.wire.producer_snapshot import decode_producer_snapshot

    partition, _ = uploaded
    assert partition.remote is not None
    before = len(partition.remote.finished)
    offset = partition.log_end_offset
    for number in range(60):  # producer 11 appears only now; 7 goes on from its last sequence
        producer, sequence = (11, number) if number % 2 else (7, 10_000 + number)
        batch = bytearray(build_batch([Record(0, 2_000_000, b"", os.urandom(20_000))], partition_leader_epoch=3,
                                      producer_id=producer, producer_epoch=0, base_sequence=sequence))
        patch_base_offset(batch, 0, offset)
        partition.append_as_follower(bytes(batch))
        offset += 1
    partition.update_state(BROKER, 3, (BROKER,))
    partition.advance_high_watermark(partition.log_end_offset)
    fresh = RemoteLogManager(BROKER, *_storage(s3_server, bucket), properties={})  # the next leader
    asyncio.run(fresh.run_once([partition]))
    assert len(partition.remote.finished) > before
    segment = partition.remote.finished[-1]
    replayed = ProducerStateManager()
    for batch in partition.log.iter_batches(0, segment.end_offset + 1):
        replayed.replay(batch.producer_id, batch.producer_epoch, batch.base_sequence, batch.last_offset_delta,
                        batch.base_offset, batch.max_timestamp)
    snapshot = decode_producer_snapshot(fresh.storage.fetch_index(segment, IndexType.PRODUCER_SNAPSHOT))
    assert snapshot == replayed.snapshot() and {e.producer_id for e in snapshot} == {7, 9, 11}


def test_retention_then_topic_deletion_remove_the_objects(uploaded):
    """Remote retention (`retention.ms`) deletes expired segments' objects, keeping only their last
    metadata event; the topic's deletion removes everything under the partition's prefix."""
    from dataclasses import replace

    from quorum.broker.remote_tier import RemoteSegmentState

    partition, manager = uploaded
    assert partition.remote is not None
    expired = partition.remote.finished
    client = manager.storage.client
    assert len([k for k in client.list_keys("") if k.endswith(".rsm-manifest")]) == len(expired)
    partition.apply_config(replace(partition.config, retention_ms=1))  # every record is older than 1 ms
    asyncio.run(manager.run_once([partition]))
    assert partition.remote.finished == ()
    keys = client.list_keys("")
    assert not [k for k in keys if k.endswith((".log", ".indexes", ".rsm-manifest"))]
    events = [k for k in keys if "/remote_log_metadata/" in k]
    assert len(events) == len(expired) and all(k.endswith("DELETE_SEGMENT_FINISHED") for k in events)
    listed = manager.metadata.list_segments(partition.remote.partition)
    assert {s.state for s in listed} == {RemoteSegmentState.DELETE_SEGMENT_FINISHED}
    assert manager.storage.delete_partition(partition.remote.partition) == len(events)
    assert client.list_keys("") == []
