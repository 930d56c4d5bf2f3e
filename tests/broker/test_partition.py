"""The leader append of a partition: validation, offsets and epochs stamped in place, idempotence."""

from __future__ import annotations

import contextlib
import uuid

import pytest
from crc32c import crc32c
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from quorum.broker.log_answers import OffsetOutOfRange
from quorum.broker.log_config import LogConfig
from quorum.broker.partition import AppendError, Partition
from quorum.log.epoch_cache import EpochEntry
from quorum.wire.errors import ErrorCode
from quorum.wire.producer_snapshot import CorruptProducerSnapshotError, encode_producer_snapshot
from quorum.wire.records import (
    Compression,
    CorruptRecordError,
    InvalidRecordError,
    Record,
    RecordTooLargeError,
    TimestampType,
    build_batch,
    iter_batches,
    validate_produced_batch,
)

T0 = 1_763_700_000_000
TOPIC_ID = uuid.UUID(int=0xABC)


def client_batch(count: int = 3, pid: int = -1, epoch: int = -1, seq: int = -1, first: int = 0,
                 compression: Compression = Compression.NONE, value: bytes = b"value") -> bytes:
    """A batch as a producer sends it: base offset 0, no leader epoch."""
    records = [Record(i, T0 + i, b"key-%d" % (first + i), value + b"-%d" % (first + i), [("h", b"%d" % i)])
               for i in range(count)]  # fmt: skip
    return build_batch(records, producer_id=pid, producer_epoch=epoch, base_sequence=seq, compression=compression)


def open_partition(path, config: LogConfig | None = None, leader: bool = True) -> Partition:
    partition = Partition("orders", 0, TOPIC_ID, path / "orders-0", config or LogConfig(), broker_id=1)
    partition.update_state(1 if leader else 2, 7, (1,))
    return partition


def test_offsets_and_leader_epoch_are_stamped_in_place(tmp_path):
    partition = open_partition(tmp_path)
    sent = [client_batch(3, compression=Compression.LZ4), client_batch(2),
            client_batch(1, compression=Compression.GZIP)]
    results = [partition.append_as_leader(data, T0) for data in sent]
    assert [r.base_offset for r in results] == [0, 3, 5]
    assert partition.log_end_offset == partition.high_watermark == 6
    stored = list(iter_batches(partition.read(0, 1 << 20, partition.high_watermark)))
    for data, batch, result in zip(sent, stored, results, strict=True):
        assert batch.base_offset == result.base_offset
        assert batch.partition_leader_epoch == 7
        assert bytes(batch.raw)[12:16] != data[12:16] and bytes(batch.raw)[16:] == data[16:], "CRC part untouched"
        batch.validate()
        assert [r.offset for r in batch] == list(range(result.base_offset, result.last_offset + 1))
    assert partition.end_offset_for_epoch(7).end_offset == 6
    assert partition.end_offset_for_epoch(8).leader_epoch == -1
    partition.close()


def test_log_append_time_topics_stamp_the_brokers_time(tmp_path):
    partition = open_partition(tmp_path, LogConfig(log_append_time=True))
    result = partition.append_as_leader(client_batch(2, compression=Compression.LZ4), T0 + 5000)
    assert result.log_append_time == T0 + 5000
    (batch,) = iter_batches(partition.read(0, 1 << 20, 2))
    batch.validate()
    assert batch.timestamp_type is TimestampType.LOG_APPEND_TIME
    assert [r.timestamp for r in batch] == [T0 + 5000] * 2
    partition.close()


@pytest.mark.parametrize(("data", "code"), [
    (client_batch()[:-1], ErrorCode.CORRUPT_MESSAGE),
    (client_batch()[:30], ErrorCode.CORRUPT_MESSAGE),
    (client_batch()[:-1] + b"\x01", ErrorCode.CORRUPT_MESSAGE),
    (client_batch() + client_batch(), ErrorCode.INVALID_RECORD),
    (client_batch()[:16] + b"\x01" + client_batch()[17:], ErrorCode.INVALID_RECORD),
    (build_batch([Record(5, T0, b"k", b"v")], base_offset=5), ErrorCode.INVALID_RECORD),
    (build_batch([Record(0, T0, b"k", b"v"), Record(2, T0, b"k", b"v")]), ErrorCode.INVALID_RECORD),
    (build_batch([Record(0, T0, b"k", b"v")], producer_id=5, producer_epoch=0), ErrorCode.INVALID_RECORD),
    (build_batch([Record(0, T0, b"k", b"v")], is_control=True), ErrorCode.INVALID_RECORD),
    (build_batch([Record(0, T0, b"k", b"v")], producer_id=5, producer_epoch=0, base_sequence=0,
                 is_transactional=True), ErrorCode.INVALID_RECORD),
    (build_batch([]), ErrorCode.INVALID_RECORD),
    (client_batch(value=b"x" * 2000), ErrorCode.MESSAGE_TOO_LARGE),
    (None, ErrorCode.INVALID_RECORD),
])  # fmt: skip
def test_bad_batches_are_refused_with_kafkas_codes_and_nothing_is_written(tmp_path, data, code):
    partition = open_partition(tmp_path, LogConfig(max_message_bytes=1000))
    with pytest.raises(AppendError) as caught:
        partition.append_as_leader(data, T0)
    assert caught.value.code == code, caught.value.message
    assert partition.log_end_offset == 0
    assert partition.append_as_leader(client_batch(), T0).base_offset == 0
    partition.close()


def test_records_with_non_consecutive_offsets_name_the_record(tmp_path):
    data = build_batch([Record(0, T0, b"k", b"v"), Record(1, T0, b"k", b"v"), Record(3, T0, b"k", b"v")])
    data = data[:23] + (2).to_bytes(4, "big") + data[27:]  # lastOffsetDelta agrees with the count...
    data = data[:17] + crc32c(data[21:]).to_bytes(4, "big") + data[21:]  # ... and the CRC is right
    with pytest.raises(InvalidRecordError) as caught:
        validate_produced_batch(data, 1 << 20)
    assert caught.value.record_index == 2


def test_not_leader_is_refused(tmp_path):
    partition = open_partition(tmp_path, leader=False)
    with pytest.raises(AppendError) as caught:
        partition.append_as_leader(client_batch(), T0)
    assert caught.value.code == ErrorCode.NOT_LEADER_OR_FOLLOWER
    partition.close()


def test_read_outside_the_log_raises_offset_out_of_range(tmp_path):
    partition = open_partition(tmp_path)
    partition.append_as_leader(client_batch(), T0)
    with pytest.raises(OffsetOutOfRange):
        partition.read(4, 100, 3)
    assert partition.read(3, 100, 3) == b""
    assert partition.offset_for_timestamp(T0 + 1).offset == 1
    assert partition.max_timestamp().offset == 2
    partition.close()


# -- idempotent producers ------------------------------------------------------------------------


def test_duplicate_of_a_recent_batch_returns_the_original_offsets(tmp_path):
    partition = open_partition(tmp_path)
    sent = [client_batch(2, pid=42, epoch=0, seq=2 * n, first=2 * n) for n in range(7)]
    offsets = [partition.append_as_leader(data, T0).base_offset for data in sent]
    assert offsets == [0, 2, 4, 6, 8, 10, 12]
    for n in range(2, 7):  # the last five are remembered
        result = partition.append_as_leader(sent[n], T0)
        assert result.duplicate and result.base_offset == offsets[n]
    assert partition.log_end_offset == 14
    with pytest.raises(AppendError) as caught:  # older than the last five: out of order
        partition.append_as_leader(sent[1], T0)
    assert caught.value.code == ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER
    partition.close()


def test_gap_old_epoch_and_new_epoch_rules(tmp_path):
    partition = open_partition(tmp_path)
    partition.append_as_leader(client_batch(2, pid=42, epoch=3, seq=10), T0)  # unknown producer: any sequence
    with pytest.raises(AppendError) as caught:
        partition.append_as_leader(client_batch(1, pid=42, epoch=3, seq=13), T0)
    assert caught.value.code == ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER
    with pytest.raises(AppendError) as caught:
        partition.append_as_leader(client_batch(1, pid=42, epoch=2, seq=12), T0)
    assert caught.value.code == ErrorCode.INVALID_PRODUCER_EPOCH
    with pytest.raises(AppendError) as caught:
        partition.append_as_leader(client_batch(1, pid=42, epoch=4, seq=5), T0)
    assert caught.value.code == ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER
    assert partition.append_as_leader(client_batch(1, pid=42, epoch=3, seq=12), T0).base_offset == 2
    assert partition.append_as_leader(client_batch(1, pid=42, epoch=4, seq=0), T0).base_offset == 3
    assert partition.log_end_offset == 4
    partition.close()


def _full_disk(*args, **kwargs):
    raise OSError(28, "No space left on device")


def test_batches_behind_one_the_disk_failed_are_refused_as_retriable_not_out_of_order(tmp_path, monkeypatch):
    """A full disk under batch 2..3: batch 4..5, already in flight behind it, gets KAFKA_STORAGE_ERROR
    (not written, retry) rather than OUT_OF_ORDER_SEQUENCE_NUMBER, on which librdkafka bumps the
    producer's epoch on every partition and writes a retry its old leader had written again; the
    producer's retry of 2..3 is then taken, and 4..5 after it, with no gap."""
    partition = open_partition(tmp_path)
    partition.append_as_leader(client_batch(2, pid=42, epoch=0, seq=0), T0)
    log_append = partition.log.append
    monkeypatch.setattr(partition.log, "append", _full_disk)
    with pytest.raises(AppendError) as caught:
        partition.append_as_leader(client_batch(2, pid=42, epoch=0, seq=2), T0)
    assert caught.value.code == ErrorCode.KAFKA_STORAGE_ERROR
    monkeypatch.setattr(partition.log, "append", log_append)  # the disk is freed
    with pytest.raises(AppendError) as caught:
        partition.append_as_leader(client_batch(2, pid=42, epoch=0, seq=4), T0)
    assert caught.value.code == ErrorCode.KAFKA_STORAGE_ERROR and "sequence 2" in str(caught.value)
    other = partition.append_as_leader(client_batch(1, pid=7, epoch=0, seq=0), T0)  # other producers go on
    assert other.base_offset == 2
    assert partition.append_as_leader(client_batch(2, pid=42, epoch=0, seq=2), T0).base_offset == 3
    assert partition.append_as_leader(client_batch(2, pid=42, epoch=0, seq=4), T0).base_offset == 5
    with pytest.raises(AppendError) as caught:  # a real gap is still one
        partition.append_as_leader(client_batch(1, pid=42, epoch=0, seq=9), T0)
    assert caught.value.code == ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER
    partition.close()


def test_a_new_epoch_after_a_failed_append_starts_at_zero_as_usual(tmp_path, monkeypatch):
    partition = open_partition(tmp_path)
    partition.append_as_leader(client_batch(2, pid=42, epoch=0, seq=0), T0)
    log_append = partition.log.append
    monkeypatch.setattr(partition.log, "append", _full_disk)
    with pytest.raises(AppendError):
        partition.append_as_leader(client_batch(2, pid=42, epoch=0, seq=2), T0)
    monkeypatch.setattr(partition.log, "append", log_append)
    assert partition.append_as_leader(client_batch(2, pid=42, epoch=1, seq=0), T0).base_offset == 2
    partition.close()


def test_sequences_wrap_at_int32_max(tmp_path):
    partition = open_partition(tmp_path)
    partition.append_as_leader(client_batch(2, pid=9, epoch=0, seq=2**31 - 2), T0)
    assert partition.append_as_leader(client_batch(1, pid=9, epoch=0, seq=0), T0).base_offset == 2
    partition.close()


def test_producer_state_is_rebuilt_from_the_log_at_open(tmp_path):
    partition = open_partition(tmp_path, LogConfig(segment_bytes=400))
    sent = [client_batch(2, pid=42, epoch=1, seq=2 * n) for n in range(6)]
    for data in sent:
        partition.append_as_leader(data, T0)
    partition.append_as_leader(client_batch(1, pid=77, epoch=0, seq=0), T0)
    assert len(partition.log.segment_base_offsets) > 1
    partition.close()
    partition = open_partition(tmp_path, LogConfig(segment_bytes=400))
    result = partition.append_as_leader(sent[-1], T0)
    assert result.duplicate and result.base_offset == 10
    with pytest.raises(AppendError) as caught:
        partition.append_as_leader(client_batch(1, pid=42, epoch=1, seq=20), T0)
    assert caught.value.code == ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER
    assert partition.append_as_leader(client_batch(1, pid=42, epoch=1, seq=12), T0).base_offset == 13
    assert partition.append_as_leader(client_batch(1, pid=77, epoch=0, seq=1), T0).base_offset == 14
    partition.close()


def test_partition_metadata_names_the_topic_id(tmp_path):
    open_partition(tmp_path).close()
    text = (tmp_path / "orders-0" / "partition.metadata").read_text()
    assert text.startswith("version: 0\ntopic_id: ")
    with pytest.raises(Exception, match="holds topic id"):
        Partition("orders", 0, uuid.uuid4(), tmp_path / "orders-0", LogConfig(), 1)


# -- garbage in, a clean error out ----------------------------------------------------------------


@settings(max_examples=400, suppress_health_check=[HealthCheck.too_slow])
@given(st.binary(max_size=300))
def test_validator_on_garbage_raises_only_corrupt_record_errors(data):
    with contextlib.suppress(CorruptRecordError):
        validate_produced_batch(data, 1 << 20)


@settings(max_examples=400, suppress_health_check=[HealthCheck.too_slow])
@given(st.data())
def test_validator_on_mutated_batches_raises_only_documented_errors(data):
    original = bytearray(client_batch(3, pid=5, epoch=0, seq=0,
                                      compression=data.draw(st.sampled_from(list(Compression)))))  # fmt: skip
    for _ in range(data.draw(st.integers(1, 4))):
        position = data.draw(st.integers(0, len(original) - 1))
        original[position] = data.draw(st.integers(0, 255))
    cut = data.draw(st.integers(0, len(original)))
    try:
        batch = validate_produced_batch(bytes(original[:cut]), data.draw(st.integers(0, 1 << 20)))
    except (CorruptRecordError, InvalidRecordError, RecordTooLargeError):
        return
    assert batch.records_count == len(batch.records())


def leader_with_producer(path, batches: int = 5) -> tuple[Partition, list[bytes]]:
    """A leader at epoch 7 holding `batches` batches of producer 42 (epoch 0, two records each)."""
    leader = open_partition(path)
    sent = [client_batch(2, pid=42, epoch=0, seq=2 * n, first=2 * n) for n in range(batches)]
    for data in sent:
        leader.append_as_leader(data, T0)
    return leader, sent


def test_start_at_restores_the_leaders_epochs_and_producers_and_a_restart_keeps_them(tmp_path):
    leader, sent = leader_with_producer(tmp_path / "leader")
    snapshot = encode_producer_snapshot(leader.producers.snapshot())  # the state at offset 10, as S3 holds it
    follower = open_partition(tmp_path / "follower", LogConfig(segment_bytes=400), leader=False)
    follower.append_as_follower(leader.read(0, 1 << 20, 4))  # an old log, replaced below
    follower.start_at(10, [EpochEntry(3, 0), EpochEntry(7, 6)], snapshot)
    assert (follower.log_start_offset, follower.log_end_offset, follower.high_watermark) == (10, 10, 10)
    # the leader goes on: a batch of producer 42 above the bootstrap offset, fetched by the follower
    leader.append_as_leader(client_batch(2, pid=42, epoch=0, seq=10, first=10), T0)
    follower.append_as_follower(leader.read(10, 1 << 20, 12))
    follower.close()
    follower = open_partition(tmp_path / "follower", LogConfig(segment_bytes=400), leader=False)
    assert follower.log.epoch_entries == (EpochEntry(3, 0), EpochEntry(7, 6))
    assert follower.end_offset_for_epoch(3).end_offset == 6
    follower.update_state(1, 8, (1,))  # it leads now: an idempotent producer's retries are still recognised
    retry = follower.append_as_leader(client_batch(2, pid=42, epoch=0, seq=10, first=10), T0)
    assert retry.duplicate and retry.base_offset == 10
    with pytest.raises(AppendError) as caught:  # a known producer: a gap is refused, not taken as new
        follower.append_as_leader(client_batch(1, pid=42, epoch=0, seq=20), T0)
    assert caught.value.code == ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER
    assert follower.append_as_leader(client_batch(1, pid=42, epoch=0, seq=12), T0).base_offset == 12
    leader.close()
    follower.close()


def test_the_snapshot_from_below_the_start_is_kept_when_the_start_moves_past_it(tmp_path):
    leader, _ = leader_with_producer(tmp_path / "leader")
    snapshot = encode_producer_snapshot(leader.producers.snapshot())
    follower = open_partition(tmp_path / "follower", LogConfig(segment_bytes=200), leader=False)
    follower.start_at(10, [EpochEntry(7, 0)], snapshot)
    for n in range(4):  # another producer's batches roll segments above the bootstrap offset
        leader.append_as_leader(client_batch(2, pid=77, epoch=0, seq=2 * n), T0)
    follower.append_as_follower(leader.read(10, 1 << 20, 18))
    follower.set_follower_high_watermark(18)
    follower.increment_log_start_offset(16)  # the leader's retention moved its start
    assert follower.log.start_offset > 10
    follower.close()
    follower = open_partition(tmp_path / "follower", LogConfig(segment_bytes=200))
    follower.update_state(1, 8, (1,))
    assert follower.append_as_leader(client_batch(2, pid=42, epoch=0, seq=8, first=8), T0).duplicate
    assert follower.append_as_leader(client_batch(2, pid=77, epoch=0, seq=6), T0).duplicate
    leader.close()
    follower.close()


def test_a_damaged_producer_snapshot_is_refused_before_the_log_changes(tmp_path):
    partition, _ = leader_with_producer(tmp_path)
    snapshot = bytearray(encode_producer_snapshot(partition.producers.snapshot()))
    snapshot[-1] ^= 1
    with pytest.raises(CorruptProducerSnapshotError, match="CRC mismatch"):
        partition.start_at(100, [EpochEntry(7, 0)], bytes(snapshot))
    assert (partition.log_start_offset, partition.log_end_offset) == (0, 10)
    partition.close()


def test_a_leader_keeps_its_remote_state_through_an_isr_change_but_not_after_another_leader(tmp_path):
    from quorum.broker.remote_tier import RemoteLogState, TopicIdPartition

    partition = open_partition(tmp_path)  # leader in epoch 7
    partition.remote = RemoteLogState(TopicIdPartition(partition.topic, partition.topic_id, partition.partition))
    partition.remote.load([])
    partition.update_state(1, 8, (1, 2))  # the ISR grew: the same leader, one epoch on
    assert partition.remote.loaded and partition.remote.highest_uploaded_offset == -1
    partition.update_state(1, 10, (1, 2))  # epoch 9 may have had another leader
    assert not partition.remote.loaded and partition.remote.highest_uploaded_offset is None
    partition.remote.load([])
    partition.update_state(2, 11, (1, 2))
    partition.update_state(1, 12, (1, 2))  # leader again after broker 2
    assert not partition.remote.loaded


@pytest.mark.parametrize(("compacted", "deletes", "deleted"), [(True, False, False), (True, True, True),
                                                              (False, True, True)])  # fmt: skip
def test_retention_deletes_segments_only_when_the_cleanup_policy_says_delete(tmp_path, compacted: bool,
                                                                            deletes: bool, deleted: bool) -> None:
    """A `compact`-only topic keeps every key's latest record however old (Kafka's `config.delete`)."""
    config = LogConfig(segment_bytes=200, retention_ms=1000, compacted=compacted, deletes=deletes)
    partition = open_partition(tmp_path, config)
    for first in range(0, 30, 3):
        partition.append_as_leader(client_batch(3, first=first), T0 + first)
    assert len(partition.log.segment_base_offsets) > 2
    removed = partition.delete_old_segments(T0 + 10_000_000)
    assert (removed > 0) is deleted
    assert (partition.log.start_offset > 0) is deleted
    partition.close()


def test_the_cleaner_compacts_a_compacted_partition_and_remembers_where_it_stopped(tmp_path) -> None:
    """A restart does not take the whole log for dirty again (`cleaner-offset`, Kafka's checkpoint)."""
    config = LogConfig(segment_bytes=300, compacted=True, deletes=False)
    partition = open_partition(tmp_path, config)
    for first in range(60):
        partition.append_as_leader(client_batch(3, first=first % 4), T0 + first)
    assert partition.clean(T0).segments_rewritten > 0
    stopped = partition.clean(T0)
    assert stopped.skipped is not None
    partition.close()
    partition = open_partition(tmp_path, config)
    assert partition.clean(T0).skipped is not None, "nothing dirty after a restart either"
    assert open_partition(tmp_path / "other", LogConfig(segment_bytes=300)).clean(T0) is None, "not compacted"
    partition.close()
