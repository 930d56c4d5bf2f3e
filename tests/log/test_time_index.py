"""Partition logs' time indexes: Kafka's layout, lookups by timestamp, and recovery after a crash."""

from __future__ import annotations

import os
import struct

from quorum.log.log import Log
from quorum.wire.records import Record, build_batch

T0 = 1_763_700_000_000


def batch(base: int, timestamps: list[int], value_size: int = 100) -> bytes:
    records = [Record(base + i, ts, b"k%d" % (base + i), b"v" * value_size) for i, ts in enumerate(timestamps)]
    return build_batch(records, base_offset=base, partition_leader_epoch=1)


def fill(log: Log, count: int, step: int = 10, per_batch: int = 2) -> None:
    """`count` batches; record i has timestamp T0 + i * step."""
    for _ in range(count):
        base = log.end_offset
        log.append(batch(base, [T0 + (base + i) * step for i in range(per_batch)]))


def open_log(path, **kwargs) -> Log:
    kwargs.setdefault("segment_bytes", 2000)
    kwargs.setdefault("index_interval_bytes", 300)
    return Log(path, verify_all_segments=False, time_index=True, **kwargs)


def read_entries(path) -> list[tuple[int, int]]:
    data = path.read_bytes()
    assert len(data) % 12 == 0
    return list(struct.iter_unpack(">qi", data))


def test_time_index_files_follow_kafkas_layout_and_are_sealed_at_roll(tmp_path):
    with open_log(tmp_path) as log:
        fill(log, 30)
        bases = log.segment_base_offsets
    assert len(bases) > 2
    for base in bases:
        assert (tmp_path / f"{base:020d}.timeindex").exists()
    first = read_entries(tmp_path / f"{bases[0]:020d}.timeindex")
    assert first, "a rolled segment has entries"
    timestamps = [ts for ts, _ in first]
    assert timestamps == sorted(set(timestamps))
    # The sealing last entry holds the segment's largest timestamp: that of its last record.
    last_offset = bases[1] - 1
    assert first[-1] == (T0 + last_offset * 10, last_offset - bases[0])


def test_offset_for_timestamp_finds_the_first_record_at_or_after(tmp_path):
    with open_log(tmp_path) as log:
        fill(log, 40)
        end = log.end_offset
        for offset in (0, 1, 7, 33, end - 1):
            assert log.offset_for_timestamp(T0 + offset * 10) == (T0 + offset * 10, offset)
            assert log.offset_for_timestamp(T0 + offset * 10 - 3) == (T0 + offset * 10, offset)
        assert log.offset_for_timestamp(0) == (T0, 0)
        assert log.offset_for_timestamp(T0 + end * 10) is None
        assert log.max_timestamp() == (T0 + (end - 1) * 10, end - 1)


def test_out_of_order_timestamps_and_max_timestamp(tmp_path):
    with open_log(tmp_path) as log:
        log.append(batch(0, [T0 + 50, T0 + 10]))
        log.append(batch(2, [T0 + 20, T0 + 60, T0 + 5]))
        assert log.offset_for_timestamp(T0 + 15) == (T0 + 50, 0)
        assert log.offset_for_timestamp(T0 + 55) == (T0 + 60, 3)
        assert log.max_timestamp() == (T0 + 60, 3)


def test_offset_for_timestamp_skips_records_below_the_log_start(tmp_path):
    with open_log(tmp_path) as log:
        fill(log, 40)
        start = log.segment_base_offsets[1] + 1
        log.advance_start_offset(start)
        assert log.offset_for_timestamp(0) == (T0 + start * 10, start)


def test_missing_or_corrupt_time_index_of_an_older_segment_is_rebuilt(tmp_path):
    with open_log(tmp_path) as log:
        fill(log, 40)
        bases = log.segment_base_offsets
    originals = {base: (tmp_path / f"{base:020d}.timeindex").read_bytes() for base in bases}
    (tmp_path / f"{bases[0]:020d}.timeindex").unlink()
    (tmp_path / f"{bases[1]:020d}.timeindex").write_bytes(b"\x00" * 12 * 3)  # not increasing
    (tmp_path / f"{bases[2]:020d}.timeindex").write_bytes(originals[bases[2]][:-5])  # torn
    with open_log(tmp_path) as log:
        for base in bases:
            assert (tmp_path / f"{base:020d}.timeindex").read_bytes() == originals[base], base
        assert log.offset_for_timestamp(T0 + 25 * 10) == (T0 + 250, 25)


def test_stale_time_index_that_lost_its_last_entries_is_rebuilt(tmp_path):
    with open_log(tmp_path) as log:
        fill(log, 40)
        bases = log.segment_base_offsets
    path = tmp_path / f"{bases[0]:020d}.timeindex"
    original = path.read_bytes()
    path.write_bytes(original[:12])  # valid, but below the segment's largest timestamp
    with open_log(tmp_path):
        assert path.read_bytes() == original


def test_torn_tail_truncated_and_time_index_rebuilt(tmp_path):
    with open_log(tmp_path, segment_bytes=1 << 20) as log:
        fill(log, 20)
        log.flush()
        end = log.end_offset
        segment = tmp_path / "00000000000000000000.log"
    intact = (tmp_path / "00000000000000000000.timeindex").read_bytes()
    size = segment.stat().st_size
    with open(segment, "r+b") as f:  # kill -9 in the middle of the last append: half a batch
        f.truncate(size - 40)
    (tmp_path / "00000000000000000000.timeindex").write_bytes(intact + b"\xff" * 7)
    with open_log(tmp_path, segment_bytes=1 << 20) as log:
        assert log.end_offset == end - 2
        assert log.max_timestamp() == (T0 + (end - 3) * 10, end - 3)
        assert log.offset_for_timestamp(T0 + (end - 1) * 10) is None
        entries = read_entries(tmp_path / "00000000000000000000.timeindex")
        assert all(offset < end - 2 for _, offset in entries)
        fill(log, 1)
        assert log.offset_for_timestamp(T0 + (end - 1) * 10) == (T0 + (end - 1) * 10, end - 1)


def test_truncate_to_cuts_the_time_index(tmp_path):
    with open_log(tmp_path) as log:
        fill(log, 40)
        cut = log.segment_base_offsets[2] + 4
        log.truncate_to(cut)
        assert log.max_timestamp() == (T0 + (cut - 1) * 10, cut - 1)
        assert log.offset_for_timestamp(T0 + cut * 10) is None
        fill(log, 1)
        assert log.offset_for_timestamp(T0 + cut * 10) == (T0 + cut * 10, cut)
    with open_log(tmp_path) as log:
        assert log.offset_for_timestamp(T0 + cut * 10) == (T0 + cut * 10, cut)


def test_orphan_time_index_is_deleted(tmp_path):
    with open_log(tmp_path) as log:
        fill(log, 3)
    orphan = tmp_path / "00000000000000000099.timeindex"
    orphan.write_bytes(b"")
    with open_log(tmp_path):
        assert not orphan.exists()


def test_metadata_log_keeps_no_time_index(tmp_path):
    with Log(tmp_path, segment_bytes=2000) as log:
        fill(log, 30)
    assert not [name for name in os.listdir(tmp_path) if name.endswith(".timeindex")]


def test_a_reopen_keeps_the_rolled_segments_time_indexes_as_written(tmp_path, caplog):
    """Loading a rolled segment's offset index once emptied its `.timeindex` file before it was read,
    so every restart rebuilt every time index from the batch headers, with a warning per segment."""
    with open_log(tmp_path) as log:
        fill(log, 30)
        rolled = log.segment_base_offsets[:-1]
    before = {base: (tmp_path / f"{base:020d}.timeindex").read_bytes() for base in rolled}
    assert all(before.values())
    with caplog.at_level("WARNING"), open_log(tmp_path) as log:
        assert log.offset_for_timestamp(T0 + 100) == (T0 + 100, 10)
    assert "rebuilding" not in caplog.text
    assert {base: (tmp_path / f"{base:020d}.timeindex").read_bytes() for base in rolled} == before
