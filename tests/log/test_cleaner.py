"""Log compaction (`quorum.log.cleaner`): each key's latest record survives, every offset stays
covered by a batch, the log reopens the same after a pass or a crash in one, and what must stay
(records above the high watermark, young records, transactions, producer state) stays."""

from __future__ import annotations

import pytest

from quorum.log.cleaner import CleanerPolicy, clean
from quorum.log.log import Log
from quorum.wire.records import Compression, Record, RecordBatch, build_batch, build_control_batch, rebuild_batch

T0 = 1_763_700_000_000
NOW = T0 + 10 * 86_400_000
EAGER = CleanerPolicy(min_cleanable_dirty_ratio=0.0)


def open_log(path, **kwargs) -> Log:
    kwargs.setdefault("segment_bytes", 1500)
    kwargs.setdefault("index_interval_bytes", 200)
    kwargs.setdefault("verify_all_segments", True)
    return Log(path, time_index=True, **kwargs)


def put(log: Log, items: list[tuple[bytes, bytes | None]], timestamp: int = T0, **batch_fields) -> None:
    base = log.end_offset
    records = [Record(base + i, timestamp, key, value) for i, (key, value) in enumerate(items)]
    log.append(build_batch(records, base_offset=base, partition_leader_epoch=1, **batch_fields))


def fill(log: Log, rounds: int, keys: int = 10, per_batch: int = 2) -> dict[bytes, bytes]:
    """`rounds` values of each key; returns each key's latest value."""
    latest = {}
    for round_number in range(rounds):
        for first in range(0, keys, per_batch):
            items = [(b"key-%d" % k, b"value-%d-%d" % (k, round_number)) for k in range(first, first + per_batch)]
            put(log, items)
            latest.update(items)
    return latest


def read_back(log: Log) -> tuple[list[RecordBatch], dict[bytes, bytes | None], int]:
    """The batches (checked to cover every offset), each key's last value, and the record count."""
    batches = list(log.iter_batches())
    expected = log.start_offset
    for batch in batches:
        assert batch.base_offset == expected, "batches cover every offset"
        batch.validate()
        expected = batch.next_offset
    assert expected == log.end_offset
    values = {}
    count = 0
    for batch in batches:
        for record in batch:
            values[record.key] = record.value
            count += 1
    return batches, values, count


def test_each_keys_latest_value_survives_and_the_superseded_ones_go(tmp_path):
    with open_log(tmp_path) as log:
        latest = fill(log, 30)
        size, end = log.size_in_bytes, log.end_offset
        result = clean(log, log.end_offset, log.start_offset, EAGER, NOW)
        assert result.skipped is None and result.segments_rewritten > 3
        assert result.records_removed > 200 and result.bytes_after < result.bytes_before
        assert log.size_in_bytes < size / 3
        _, values, count = read_back(log)
        assert values == latest and log.end_offset == end
        active = log.segment_base_offsets[-1]
        rolled_keys = [r.key for b in log.iter_batches(upto=active) for r in b]
        assert len(rolled_keys) == len(set(rolled_keys)), "one record per key in the cleaned segments"
        assert count < 60
    with open_log(tmp_path) as log:  # recovery CRC-scans every segment and accepts the cleaned ones
        assert read_back(log)[1] == latest
        assert not list(tmp_path.glob("*.cleaned"))


def test_a_second_pass_without_new_records_is_skipped_and_a_clean_log_is_not_rewritten(tmp_path):
    with open_log(tmp_path) as log:
        fill(log, 20)
        first = clean(log, log.end_offset, log.start_offset, CleanerPolicy(), NOW)
        assert first.skipped is None
        again = clean(log, log.end_offset, first.first_dirty, CleanerPolicy(), NOW)
        assert again.skipped is not None and "dirty" in again.skipped
        files = {p.name: p.stat().st_mtime_ns for p in tmp_path.glob("*.log")}
        restart = clean(log, log.end_offset, log.start_offset, EAGER, NOW)  # a restart forgets first_dirty
        assert restart.segments_rewritten == 0 and restart.segments_read > 0
        assert {p.name: p.stat().st_mtime_ns for p in tmp_path.glob("*.log")} == files


def test_nothing_at_or_above_the_high_watermark_supersedes_or_is_cleaned(tmp_path):
    with open_log(tmp_path) as log:
        fill(log, 10)
        upto = log.end_offset
        put(log, [(b"key-0", b"uncommitted")])
        fill(log, 10)  # roll past it, so segments above `upto` exist
        before = [bytes(b.raw) for b in log.iter_batches(upto)]
        clean(log, upto, log.start_offset, EAGER, NOW)
        assert [bytes(b.raw) for b in log.iter_batches(upto)] == before
        below = {r.key: r.value for b in log.iter_batches(upto=upto) for r in b}
        assert below[b"key-0"] == b"value-0-9", "the latest committed value stays below the high watermark"


def test_tombstones_go_after_delete_retention_and_take_the_key_with_them(tmp_path):
    with open_log(tmp_path) as log:
        fill(log, 10)
        put(log, [(b"key-1", None)], timestamp=T0)  # old
        put(log, [(b"key-2", None)], timestamp=NOW - 1000)  # recent
        fill(log, 5, keys=2, per_batch=2)  # keys 0 and 1 only; key-1 written again after its delete
        put(log, [(b"key-3", None)], timestamp=T0)
        fill(log, 10, keys=2, per_batch=1)  # keys 0 and 1 again, to roll past the tombstones
        clean(log, log.end_offset, log.start_offset, EAGER, NOW)
        _, values, _ = read_back(log)
        assert values[b"key-1"] == b"value-1-9", "a later write after a delete stays"
        assert values[b"key-2"] is None, "a tombstone younger than delete.retention.ms stays"
        assert b"key-3" not in values, "an old tombstone goes, with every older value of its key"
        assert values[b"key-4"] == b"value-4-9"


def test_young_segments_wait_for_the_minimum_compaction_lag(tmp_path):
    with open_log(tmp_path) as log:
        fill(log, 10)
        before = [bytes(b.raw) for b in log.iter_batches()]
        result = clean(log, log.end_offset, log.start_offset,
                       CleanerPolicy(min_cleanable_dirty_ratio=0.0, min_compaction_lag_ms=NOW - T0 + 1), NOW)
        assert result.skipped is not None
        assert [bytes(b.raw) for b in log.iter_batches()] == before


def test_transactions_stay_whole_and_an_idempotent_producers_batches_keep_their_sequences(tmp_path):
    with open_log(tmp_path) as log:
        put(log, [(b"t", b"in-a-transaction")], producer_id=7, producer_epoch=0, base_sequence=0,
            is_transactional=True)
        commit_marker = (b"\x00\x00\x00\x01", b"\x00\x00\x00\x00\x00\x00")  # version 0, COMMIT; coordinator epoch 0
        log.append(build_control_batch(*commit_marker, log.end_offset, 1, T0, producer_id=7, producer_epoch=0))
        put(log, [(b"p", b"old"), (b"q", b"old")], producer_id=9, producer_epoch=2, base_sequence=0)
        fill(log, 5)
        put(log, [(b"p", b"new"), (b"q", b"new"), (b"t", b"plain")])
        fill(log, 10)
        clean(log, log.end_offset, log.start_offset, EAGER, NOW)
        batches, values, _ = read_back(log)
        transactional = [b for b in batches if b.is_transactional]
        assert [r.value for r in transactional[0]] == [b"in-a-transaction"] and transactional[1].is_control
        idempotent = next(b for b in batches if b.producer_id == 9)
        assert idempotent.records_count == 0, "both records superseded"
        assert (idempotent.producer_epoch, idempotent.base_sequence, idempotent.last_offset_delta) == (2, 0, 1)
        assert values[b"p"] == b"new" and values[b"t"] == b"plain"


def test_a_crash_before_the_swap_leaves_the_segment_whole_and_after_it_indexes_are_rebuilt(tmp_path):
    with open_log(tmp_path) as log:
        latest = fill(log, 20)
        first = log.rolled_segments()[0]
    (tmp_path / f"{first.log_path.name}.cleaned").write_bytes(b"half a cleaned segment")
    with open_log(tmp_path, verify_all_segments=False) as log:
        assert not list(tmp_path.glob("*.cleaned")), "an unfinished cleaning is deleted at open"
        assert read_back(log)[1] == latest
        clean(log, log.end_offset, log.start_offset, EAGER, NOW)
        cleaned = log.rolled_segments()[0]
    cleaned.index_path.unlink()  # as a crash between the swap and the new indexes leaves it
    cleaned.time_index_path.unlink()
    with open_log(tmp_path, verify_all_segments=False) as log:
        assert read_back(log)[1] == latest
        first_record = next(r.offset for b in log.iter_batches() for r in b)
        assert log.offset_for_timestamp(T0) == (T0, first_record)
        assert cleaned.index_path.exists()


def test_a_segment_that_changed_while_it_was_cleaned_is_not_replaced(tmp_path):
    with open_log(tmp_path) as log:
        fill(log, 20)
        stale = log.rolled_segments()[1]
        log.truncate_to(stale.base_offset + 2)
        cleaned = tmp_path / "x.cleaned"
        cleaned.write_bytes(b"anything")
        assert log.replace_rolled_segment(stale, cleaned) is False
        assert not cleaned.exists()


@pytest.mark.parametrize("codec", [Compression.NONE, Compression.LZ4, Compression.ZSTD])
def test_a_rebuilt_batch_keeps_its_offsets_producer_fields_and_codec(codec):
    records = [Record(100 + i, T0 + i, b"k%d" % i, b"v%d" % i) for i in range(5)]
    original = RecordBatch(build_batch(records, 100, 4, codec, producer_id=3, producer_epoch=1, base_sequence=50))
    rebuilt = RecordBatch(rebuild_batch(original, [records[1], records[3]]))
    rebuilt.validate()
    assert (rebuilt.base_offset, rebuilt.last_offset, rebuilt.partition_leader_epoch) == (100, 104, 4)
    assert (rebuilt.producer_id, rebuilt.producer_epoch, rebuilt.base_sequence) == (3, 1, 50)
    assert rebuilt.compression is codec and [r.offset for r in rebuilt] == [101, 103]
    empty = RecordBatch(rebuild_batch(original, []))
    empty.validate()
    assert (empty.records_count, empty.last_offset, empty.compression) == (0, 104, Compression.NONE)
    assert empty.max_timestamp == original.max_timestamp


def test_a_run_of_emptied_batches_becomes_one_empty_batch_per_segment(tmp_path):
    """One key rewritten 300 times, a record per batch: what stays of each rolled segment is one
    batch over all its offsets, not a header per superseded record."""
    with open_log(tmp_path) as log:
        for number in range(300):
            put(log, [(b"hot", b"value-%d" % number)])
        put(log, [(b"cold", b"only")])
        segments = len(log.segment_base_offsets)
        clean(log, log.end_offset, log.start_offset, EAGER, NOW)
        batches, values, _ = read_back(log)
        assert values == {b"hot": b"value-299", b"cold": b"only"}
        active = log.segment_base_offsets[-1]
        rolled = [b for b in batches if b.next_offset <= active]
        # One empty batch per rolled segment, and the latest "hot" record where it was rolled.
        assert len(rolled) <= segments and sum(b.records_count for b in rolled) <= 1
        again = clean(log, log.end_offset, log.start_offset, EAGER, NOW)
        assert again.segments_rewritten == 0, "merged runs are left alone by the next pass"
    with open_log(tmp_path) as log:
        assert read_back(log)[1] == {b"hot": b"value-299", b"cold": b"only"}
