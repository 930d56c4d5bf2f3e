"""A log that starts above offset 0 (KIP-630): advancing the start offset, full truncation to a
fetched snapshot, the snapshot boundary in epoch answers, and recovery of all three after a restart."""

from __future__ import annotations

import logging
import os
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from quorum.log import (
    START_OFFSET_NAME,
    CorruptFileError,
    CorruptLogError,
    InvalidOffsetError,
    Log,
    OffsetOutOfRangeError,
)
from quorum.log.epoch_cache import CHECKPOINT_NAME, EpochEntry
from quorum.log.start_offset import decode_start_offset, encode_start_offset, write_start_offset
from quorum.raft.interface import OffsetAndEpoch
from tests.log.helpers import check_batch_contents, make_batch, segment_files

BATCH = len(make_batch(0, 3))


def fill(log: Log, epochs: list[int]) -> None:
    """One batch of 3 records per epoch given, then flushed."""
    for epoch in epochs:
        log.append(make_batch(log.end_offset, 3, epoch))
    log.flush()


def three_segment_log(directory: Path, verify_all: bool = True) -> Log:
    """Offsets 0-20 in segments based 0, 9 and 18; epochs 1 (0-5), 2 (6-14), 4 (15-20)."""
    log = Log(directory, segment_bytes=BATCH * 3, verify_all_segments=verify_all)
    fill(log, [1, 1, 2, 2, 2, 4, 4])
    assert log.segment_base_offsets == [0, 9, 18]
    return log


def read_offsets(log: Log, offset: int) -> list[int]:
    return [batch.base_offset for batch in log.iter_batches(offset)]


@pytest.mark.parametrize("verify_all", [True, False])
def test_advancing_the_start_deletes_whole_segments_below_it_and_survives_restart(
    tmp_path: Path, verify_all: bool
) -> None:
    with three_segment_log(tmp_path, verify_all) as log:
        assert not log.advance_start_offset(0)
        assert log.advance_start_offset(12)
        assert log.start_offset == 12 and log.end_offset == 21
        assert log.segment_base_offsets == [9, 18]
        assert [p.name for p in segment_files(tmp_path)] == ["00000000000000000009.log", "00000000000000000018.log"]
        assert not (tmp_path / "00000000000000000000.index").exists()
        assert (tmp_path / START_OFFSET_NAME).read_text() == "0\n12\n"
        # epochs that ended below the start are forgotten; the one spanning it starts there
        assert log.epoch_entries == (EpochEntry(2, 12), EpochEntry(4, 15))
        assert (tmp_path / CHECKPOINT_NAME).read_text() == "0\n2\n2 12\n4 15\n"
        assert read_offsets(log, 12) == [12, 15, 18]
        assert not log.advance_start_offset(12) and not log.advance_start_offset(3)
    with Log(tmp_path, segment_bytes=BATCH * 3, verify_all_segments=verify_all) as log:
        assert (log.start_offset, log.end_offset) == (12, 21)
        assert log.epoch_entries == (EpochEntry(2, 12), EpochEntry(4, 15))
        assert read_offsets(log, log.start_offset) == [12, 15, 18]
        with pytest.raises(OffsetOutOfRangeError, match="offset 11 is below the log start offset 12") as caught:
            log.read(11, 1000)
        assert (caught.value.offset, caught.value.start_offset, caught.value.end_offset) == (11, 12, 21)
        assert str(tmp_path) in str(caught.value)
        log.append(make_batch(21, 2, 5))
        assert log.end_offset_for_epoch(2) == OffsetAndEpoch(15, 2)


def test_the_start_may_fall_inside_a_batch_and_reads_return_that_batch_whole(tmp_path: Path) -> None:
    with three_segment_log(tmp_path, verify_all=False) as log:
        log.advance_start_offset(13)
        assert log.start_offset == 13 and log.epoch_entries == (EpochEntry(2, 13), EpochEntry(4, 15))
        assert [batch.base_offset for batch in log.iter_batches()] == [12, 15, 18]
    for verify_all in (False, True):
        with Log(tmp_path, segment_bytes=BATCH * 3, verify_all_segments=verify_all) as log:
            assert log.start_offset == 13 and log.epoch_entries == (EpochEntry(2, 13), EpochEntry(4, 15))
            for batch in log.iter_batches():
                check_batch_contents(batch)


def test_reads_past_the_end_name_the_end(tmp_path: Path) -> None:
    with three_segment_log(tmp_path) as log, pytest.raises(OffsetOutOfRangeError, match="22 is past the end"):
        log.read(22, 10)


def test_advancing_past_the_end_is_refused_and_unflushed_records_are_flushed_first(tmp_path: Path) -> None:
    with Log(tmp_path) as log:
        log.append(make_batch(0, 3) + make_batch(3, 3))
        assert log.flushed_offset == 0
        with pytest.raises(InvalidOffsetError, match="past its end offset 6"):
            log.advance_start_offset(7)
        assert log.advance_start_offset(6)  # the whole log is below the start: it stays, empty above
        assert (log.start_offset, log.end_offset, log.flushed_offset) == (6, 6, 6)
        assert log.read(6, 100) == b"" and log.epoch_entries == ()
        # no record is left to say which epoch the log ends in; the snapshot at the start does
        assert log.last_fetched_epoch() == 0
        log.set_snapshot_boundary(OffsetAndEpoch(6, 1))
        assert log.last_fetched_epoch() == 1 and log.end_offset_for_epoch(1) == OffsetAndEpoch(6, 1)
        log.append(make_batch(6, 1, 2))
    with Log(tmp_path) as log:
        assert (log.start_offset, log.end_offset) == (6, 7)
        assert log.epoch_entries == (EpochEntry(2, 6),)


def test_truncating_fully_starts_an_empty_log_at_the_snapshot(tmp_path: Path) -> None:
    with three_segment_log(tmp_path) as log:
        log.truncate_fully_and_start_at(100, 7)
        assert (log.start_offset, log.end_offset, log.flushed_offset) == (100, 100, 100)
        assert log.snapshot_boundary == OffsetAndEpoch(100, 7)
        assert [p.name for p in segment_files(tmp_path)] == ["00000000000000000100.log"]
        assert log.epoch_entries == () and (tmp_path / CHECKPOINT_NAME).read_text() == "0\n0\n"
        # KIP-630: an empty log above a snapshot fetches and votes with the snapshot's epoch
        assert log.last_fetched_epoch() == 7
        assert log.end_offset_for_epoch(7) == OffsetAndEpoch(100, 7)
        assert log.end_offset_for_epoch(9) == OffsetAndEpoch(100, 7)
        assert log.end_offset_for_epoch(6) == OffsetAndEpoch(-1, -1)
        assert log.read(100, 1000) == b""
        with pytest.raises(OffsetOutOfRangeError, match="below the log start offset 100"):
            log.read(99, 1000)
        log.append(make_batch(100, 2, 8))
        log.flush()
        assert log.last_fetched_epoch() == 8
        assert log.end_offset_for_epoch(7) == OffsetAndEpoch(100, 7)
    with Log(tmp_path) as log:
        assert (log.start_offset, log.end_offset) == (100, 102)
        assert log.snapshot_boundary is None  # the owner tells it again at start-up
        assert not log.set_snapshot_boundary(OffsetAndEpoch(100, 7))
        assert log.end_offset_for_epoch(7) == OffsetAndEpoch(100, 7)


def test_a_snapshot_ahead_of_the_log_truncates_it_fully(tmp_path: Path) -> None:
    with three_segment_log(tmp_path) as log:
        assert not log.set_snapshot_boundary(OffsetAndEpoch(15, 4))  # inside the log: just remembered
        assert log.snapshot_boundary == OffsetAndEpoch(15, 4) and log.end_offset == 21
        assert log.set_snapshot_boundary(OffsetAndEpoch(30, 4))  # same epoch, past the end
        assert (log.start_offset, log.end_offset, log.last_fetched_epoch()) == (30, 30, 4)
        fill(log, [4, 5])
        # a snapshot of a later epoch than the log's last, even below its end: the log diverged
        assert log.set_snapshot_boundary(OffsetAndEpoch(33, 6))
        assert (log.start_offset, log.end_offset, log.last_fetched_epoch()) == (33, 33, 6)
        with pytest.raises(InvalidOffsetError, match=r"ends below the log start offset 33"):
            log.set_snapshot_boundary(OffsetAndEpoch(32, 6))


def test_truncation_below_the_snapshot_is_refused(tmp_path: Path) -> None:
    with three_segment_log(tmp_path) as log:
        log.set_snapshot_boundary(OffsetAndEpoch(12, 2))
        with pytest.raises(InvalidOffsetError, match=r"below the end offset of the latest snapshot"):
            log.truncate_to(9)
        log.truncate_to(12)
        assert log.end_offset == 12


def test_epoch_answers_use_the_snapshot_below_the_first_epoch(tmp_path: Path) -> None:
    with three_segment_log(tmp_path) as log:
        log.set_snapshot_boundary(OffsetAndEpoch(15, 2))
        log.advance_start_offset(15)
        assert log.epoch_entries == (EpochEntry(4, 15),)
        assert log.end_offset_for_epoch(4) == OffsetAndEpoch(21, 4)
        assert log.end_offset_for_epoch(3) == OffsetAndEpoch(15, 2)  # the snapshot's epoch ends at its offset
        assert log.end_offset_for_epoch(2) == OffsetAndEpoch(15, 2)
        assert log.end_offset_for_epoch(1) == OffsetAndEpoch(-1, -1)  # below everything the log knows


def test_recovery_finishes_an_interrupted_advance(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    with three_segment_log(tmp_path) as log:
        pass
    # a crash after the start offset was recorded, before the segments below it were deleted
    write_start_offset(tmp_path / START_OFFSET_NAME, 18)
    with caplog.at_level(logging.WARNING, logger="quorum.log"), Log(tmp_path, segment_bytes=BATCH * 3) as log:
        assert (log.start_offset, log.end_offset, log.segment_base_offsets) == (18, 21, [18])
        assert log.epoch_entries == (EpochEntry(4, 18),)
    assert "segment 00000000000000000000.log is below the log start offset 18, deleted" in caplog.text
    assert [p.name for p in segment_files(tmp_path)] == ["00000000000000000018.log"]


def test_recovery_finishes_an_interrupted_full_truncation(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    with three_segment_log(tmp_path) as log:
        pass
    # a crash after the start offset was recorded and the last segment deleted, before the rest
    write_start_offset(tmp_path / START_OFFSET_NAME, 40)
    for suffix in (".log", ".index"):
        os.unlink(tmp_path / f"00000000000000000018{suffix}")
    with caplog.at_level(logging.WARNING, logger="quorum.log"), Log(tmp_path, segment_bytes=BATCH * 3) as log:
        assert (log.start_offset, log.end_offset, log.segment_base_offsets) == (40, 40, [40])
        assert log.epoch_entries == ()
        log.set_snapshot_boundary(OffsetAndEpoch(40, 4))
        assert log.last_fetched_epoch() == 4
    assert "the log ends at 18, below its start offset 40: emptied to start there" in caplog.text
    assert [p.name for p in segment_files(tmp_path)] == ["00000000000000000040.log"]
    # and after every segment was deleted, before the new one was created
    for path in tmp_path.glob("0*"):
        path.unlink()
    with Log(tmp_path) as log:
        assert (log.start_offset, log.end_offset) == (40, 40)


def test_missing_records_between_the_start_and_the_first_segment_are_refused(tmp_path: Path) -> None:
    with three_segment_log(tmp_path) as log:
        log.advance_start_offset(12)
    for suffix in (".log", ".index"):
        os.unlink(tmp_path / f"00000000000000000009{suffix}")
    with pytest.raises(CorruptLogError, match="starts at offset 12 .* first segment at 18: the records in between"):
        Log(tmp_path, segment_bytes=BATCH * 3)


def test_a_damaged_start_offset_file_falls_back_to_the_segments(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    with three_segment_log(tmp_path) as log:
        log.advance_start_offset(12)
    (tmp_path / START_OFFSET_NAME).write_bytes(b"0\nnot a number\n")
    with caplog.at_level(logging.WARNING, logger="quorum.log"), Log(tmp_path, segment_bytes=BATCH * 3) as log:
        assert log.start_offset == 9
    assert f"{tmp_path / START_OFFSET_NAME}: line 2: 'not a number' is not an offset" in caplog.text


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=40))
def test_start_offset_file_garbage_gives_a_clean_error(data: bytes) -> None:
    path = Path("/nonexistent/log-start-offset")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        return
    try:
        offset = decode_start_offset(text, path)
    except CorruptFileError as exc:
        assert exc.path == path
    else:
        assert offset >= 0 and encode_start_offset(offset).decode().split() == text.split()[:2]
