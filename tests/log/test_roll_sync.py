"""A full segment's fsync off the appending thread (issue 20): `Log(roll_sync_in_background=True)`.

The append that fills a segment starts its fsync on a background thread and returns; appends go
on into that segment until the fsync is done, and the next one rolls. A segment is still durable
before its successor exists, and nothing is lost or reordered. The fsync is held by a gate here,
so what is checked does not depend on how fast the disk is.
"""

from __future__ import annotations

import threading
import uuid
from pathlib import Path

import pytest

from quorum.broker.log_config import LogConfig
from quorum.broker.partition import BACKGROUND_ROLL_SYNC_BYTES, Partition
from quorum.log import Log, LogError
from quorum.log.segment import LogSegment
from tests.log.helpers import make_batch

BATCH = len(make_batch(0, 3))
TOPIC_ID = uuid.UUID(int=0x20)


class GatedFsync:
    """LogSegment.flush that waits for `gate` when called from the background thread."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch, fail: bool = False) -> None:
        self.gate = threading.Event()
        self.started = threading.Event()
        self.synced: list[Path] = []
        self.fail = fail
        original = LogSegment.flush

        def flush(segment: LogSegment) -> None:
            if threading.current_thread().name.startswith("segment-roll-fsync"):
                self.started.set()
                assert self.gate.wait(60), "the test never opened the fsync gate"
                if self.fail:
                    raise OSError("fsync failed (injected)")
                self.synced.append(segment.path)
            original(segment)

        monkeypatch.setattr(LogSegment, "flush", flush)
        monkeypatch.setattr("quorum.log.log.BACKGROUND_SYNC_MIN_BYTES", 0)  # this test's segments are tiny


def append(log: Log, batches: int) -> None:
    for _ in range(batches):
        log.append(make_batch(log.end_offset, 3))


def test_a_full_segment_takes_appends_while_its_fsync_runs_then_rolls(tmp_path: Path, monkeypatch) -> None:
    fsync = GatedFsync(monkeypatch)
    with Log(tmp_path, segment_bytes=BATCH * 4, roll_sync_in_background=True) as log:
        append(log, 5)  # the fifth would not fit: its append starts the segment's fsync and returns
        assert fsync.started.wait(60), "waiting for the background fsync of the full segment to start"
        append(log, 3)  # the fsync still runs: the segment takes these too
        assert log.segment_base_offsets == [0]
        fsync.gate.set()
        log._segments[0].pending_sync.result(60)  # waiting for the background fsync to finish
        append(log, 1)  # the first append after it rolls
        assert log.segment_base_offsets == [0, 24]
        assert fsync.synced == [tmp_path / "00000000000000000000.log"]
        assert (tmp_path / "00000000000000000000.log").stat().st_size == BATCH * 8
        expected = [batch.base_offset for batch in log.iter_batches()]
    assert expected == list(range(0, 27, 3))
    with Log(tmp_path, segment_bytes=BATCH * 4) as reopened:
        assert [batch.base_offset for batch in reopened.iter_batches()] == expected
        assert reopened.end_offset == 27


def test_a_failed_background_fsync_makes_the_log_refuse_writes_and_tells_its_owner_once(
        tmp_path: Path, monkeypatch) -> None:
    fsync = GatedFsync(monkeypatch, fail=True)
    told: list[tuple[Path, BaseException]] = []
    with Log(tmp_path, segment_bytes=BATCH * 4, roll_sync_in_background=True) as log:
        log.on_failure = lambda directory, exc: told.append((directory, exc))
        append(log, 5)
        fsync.gate.set()
        with pytest.raises(OSError, match="injected"):
            log._segments[0].pending_sync.result(60)
        assert told == []  # the background fsync's failure counts when the roll meets it
        with pytest.raises(OSError, match="injected"):
            append(log, 1)  # the roll finds the failure
        with pytest.raises(LogError, match="refuses writes"):
            append(log, 1)
    assert [(directory, str(exc)) for directory, exc in told] == [(tmp_path, "fsync failed (injected)")]


def test_a_truncation_that_cannot_write_its_checkpoint_makes_the_log_refuse_writes(tmp_path: Path, monkeypatch) -> None:
    """The soak (seed 19): a follower truncated on a full disk; its epoch checkpoint was not written,
    and its log refused every write after, out of the ISR for good, with no one told."""
    told: list[BaseException] = []
    with Log(tmp_path) as log:
        log.on_failure = lambda _, exc: told.append(exc)
        append(log, 4)

        def full(*_: object) -> None:
            raise OSError(28, "No space left on device")

        monkeypatch.setattr("quorum.log.log.write_checkpoint", full)
        with pytest.raises(OSError, match="No space left"):
            log.truncate_to(6)
        with pytest.raises(LogError, match="refuses writes"):
            append(log, 1)
    assert [exc.errno for exc in told] == [28]


def test_without_it_a_segment_rolls_at_once(tmp_path: Path) -> None:
    with Log(tmp_path, segment_bytes=BATCH * 4) as log:
        append(log, 5)
        assert log.segment_base_offsets == [0, 12]


def test_partition_logs_of_large_segments_sync_in_the_background(tmp_path: Path) -> None:
    big = Partition("t", 0, TOPIC_ID, tmp_path / "t-0", LogConfig(segment_bytes=BACKGROUND_ROLL_SYNC_BYTES),
                    broker_id=1)
    small = Partition("t", 1, TOPIC_ID, tmp_path / "t-1", LogConfig(segment_bytes=1 << 20), broker_id=1)
    try:
        assert big.log.roll_sync_in_background and not small.log.roll_sync_in_background
    finally:
        big.close()
        small.close()


def test_a_small_segment_due_rolls_at_once_without_waiting_for_a_background_fsync(tmp_path: Path,
                                                                                   monkeypatch) -> None:
    """Below BACKGROUND_SYNC_MIN_BYTES the roll is fsynced inline: a segment.ms roll of a small
    segment happens on the append that finds it due, however slow the background thread is (under
    load, ten one-batch appends with segment.ms=1 all went into one segment, and retention had
    nothing to delete)."""
    fsync = GatedFsync(monkeypatch)
    monkeypatch.setattr("quorum.log.log.BACKGROUND_SYNC_MIN_BYTES", BATCH * 100)
    with Log(tmp_path, segment_bytes=BATCH * 4, roll_sync_in_background=True) as log:
        append(log, 9)
        assert log.segment_base_offsets == [0, 12, 24]
        assert not fsync.started.is_set()


def test_much_appended_during_the_background_fsync_gets_another_before_the_roll(tmp_path: Path,
                                                                                 monkeypatch) -> None:
    """The roll fsyncs on the appending thread (the event loop) what came during the background fsync;
    a fast producer put ~400 MB there during a GiB segment's, and the roll's fsync of it stopped the
    loop for 0.18 s. More than ROLL_UNSYNCED_BYTES meanwhile starts another background fsync first,
    MAX_BACKGROUND_SYNCS of them at most."""
    fsync = GatedFsync(monkeypatch)
    monkeypatch.setattr("quorum.log.log.ROLL_UNSYNCED_BYTES", BATCH * 2)
    with Log(tmp_path, segment_bytes=BATCH * 4, roll_sync_in_background=True) as log:
        append(log, 5)  # starts the first background fsync
        assert fsync.started.wait(60)
        append(log, 3)  # more than ROLL_UNSYNCED_BYTES while it runs
        fsync.gate.set()
        log._segments[0].pending_sync.result(60)
        append(log, 1)  # starts a second background fsync instead of rolling
        second = log._segments[0].pending_sync
        assert log.segment_base_offsets == [0] and log._segments[0].background_syncs == 2
        second.result(60)
        append(log, 1)  # one batch came during the second: the roll fsyncs it
        assert log.segment_base_offsets == [0, 27]
        assert fsync.synced == [tmp_path / "00000000000000000000.log"] * 2
    monkeypatch.setattr("quorum.log.log.MAX_BACKGROUND_SYNCS", 1)
    with Log(tmp_path / "capped", segment_bytes=BATCH * 4, roll_sync_in_background=True) as log:
        append(log, 5)
        append(log, 3)
        log._segments[0].pending_sync.result(60)
        append(log, 1)  # as much came meanwhile, but one background fsync is the most: it rolls
        assert log.segment_base_offsets == [0, 24]


def test_an_index_flushed_beside_an_append_writes_only_whole_entries(tmp_path: Path) -> None:
    """The background fsync writes the indexes while the event loop appends to them: an entry whose
    offset is in but whose position is not yet (`append` adds them one after the other) waits for
    the next flush; a truncation meanwhile waits for the flush's write."""
    from quorum.log.index import OffsetIndex
    from quorum.log.time_index import TimeIndex

    index = OffsetIndex(tmp_path / "0.index", 0, [(1, 0)])
    index._relative.append(5)  # append's first half, as the sync thread sees it between the two
    index.flush()
    assert OffsetIndex.read(index.path, 10_000) == [(1, 0)]
    index._positions.append(4096)
    index.flush()
    assert OffsetIndex.read(index.path, 10_000) == [(1, 0), (5, 4096)]
    index.close()
    times = TimeIndex(tmp_path / "0.timeindex", 0, [(100, 1)])
    times._timestamps.append(200)
    times.flush()
    assert TimeIndex.read(times.path) == [(100, 1)]
    times._relative.append(5)
    times.flush()
    assert TimeIndex.read(times.path) == [(100, 1), (200, 5)]
    times.close()
