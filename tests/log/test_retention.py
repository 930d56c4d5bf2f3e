"""Retention of partition logs (retention.ms, retention.bytes) and time-based rolling (log.roll.ms)."""

from __future__ import annotations

from quorum.log.log import Log
from tests.log.test_time_index import T0, batch, fill, open_log


def test_retention_ms_deletes_old_segments_but_never_the_active_one(tmp_path):
    with open_log(tmp_path) as log:
        fill(log, 40)
        bases = log.segment_base_offsets
        assert len(bases) >= 4
        # Everything is older than a 1 ms retention: all but the active segment go.
        now = T0 + 10_000_000
        assert log.delete_old_segments(now, retention_ms=1, retention_bytes=None) == len(bases) - 1
        assert log.segment_base_offsets == [bases[-1]]
        assert log.start_offset == bases[-1]
        assert log.delete_old_segments(now, retention_ms=1, retention_bytes=None) == 0
    with open_log(tmp_path) as log:
        assert log.start_offset == bases[-1]


def test_retention_ms_stops_at_the_first_recent_segment(tmp_path):
    with open_log(tmp_path) as log:
        fill(log, 40)
        bases = log.segment_base_offsets
        # Segment 1's largest timestamp is that of offset bases[2] - 1.
        newest_of_second = T0 + (bases[2] - 1) * 10
        assert log.delete_old_segments(newest_of_second + 100, retention_ms=100, retention_bytes=None) == 1
        assert log.start_offset == bases[1]
        assert log.delete_old_segments(newest_of_second + 101, retention_ms=100, retention_bytes=None) == 1
        assert log.start_offset == bases[2]


def test_retention_bytes_keeps_at_least_that_many_bytes(tmp_path):
    with open_log(tmp_path) as log:
        fill(log, 40)
        total = log.size_in_bytes
        deleted = log.delete_old_segments(T0, retention_ms=None, retention_bytes=total // 2)
        assert deleted >= 1
        assert log.size_in_bytes >= total // 2
        assert log.delete_old_segments(T0, retention_ms=None, retention_bytes=-1) == 0
        # Nothing is deleted at or above `upto` (the high watermark).
        assert log.delete_old_segments(T0, retention_ms=None, retention_bytes=0, upto=log.start_offset) == 0


def test_roll_ms_rolls_when_the_records_are_that_much_newer(tmp_path):
    with Log(tmp_path, time_index=True, roll_ms=1000) as log:
        log.append(batch(0, [T0]))
        log.append(batch(1, [T0 + 1000]))
        assert log.segment_base_offsets == [0]
        log.append(batch(2, [T0 + 1001]))
        assert log.segment_base_offsets == [0, 2]
