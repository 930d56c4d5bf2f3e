"""The simulator's in-memory log: RaftLog reads, and a disk's flushed/unflushed split under crashes."""

from __future__ import annotations

import pytest

from quorum.raft.interface import OffsetAndEpoch
from quorum.sim.memory_log import LogError, MemoryLog
from tests.raft.harness import batch, log_with


def test_an_empty_log() -> None:
    log = MemoryLog()
    assert (log.start_offset, log.end_offset, log.flushed_offset, log.last_fetched_epoch()) == (0, 0, 0, 0)
    assert log.end_offset_for_epoch(0) == OffsetAndEpoch(0, 0)
    assert log.end_offset_for_epoch(5) == OffsetAndEpoch(0, 0)
    assert log.read(0, 100) == b""


def test_end_offset_for_epoch_is_offset_for_leader_epoch() -> None:
    log = log_with([1, 1, 3, 3, 3, 6])
    assert log.end_offset_for_epoch(7) == OffsetAndEpoch(6, 6)
    assert log.end_offset_for_epoch(6) == OffsetAndEpoch(6, 6)
    assert log.end_offset_for_epoch(5) == OffsetAndEpoch(5, 3)  # the largest epoch <= 5 is 3, which ends at 5
    assert log.end_offset_for_epoch(3) == OffsetAndEpoch(5, 3)
    assert log.end_offset_for_epoch(2) == OffsetAndEpoch(2, 1)
    assert log.end_offset_for_epoch(1) == OffsetAndEpoch(2, 1)
    assert log.end_offset_for_epoch(0) == OffsetAndEpoch(-1, -1)


def test_reads_return_whole_batches_and_at_least_one() -> None:
    log = MemoryLog()
    first, second = batch(0, 1, count=3), batch(3, 1)
    log.append(first + second)
    assert log.read(0, 1) == first
    assert log.read(0, 10_000) == first + second
    assert log.read(3, 10_000) == second
    with pytest.raises(LogError):
        log.read(1, 100)


def test_a_crash_keeps_only_what_was_flushed() -> None:
    log = MemoryLog()
    log.append(batch(0, 1))
    assert log.flush() == 1
    log.append(batch(1, 1) + batch(2, 2))
    assert (log.end_offset, log.flushed_offset) == (3, 1)
    log.crash()
    assert (log.end_offset, log.flushed_offset, log.last_fetched_epoch()) == (1, 1, 1)


def test_truncation_removes_the_tail_flushed_or_not() -> None:
    log = log_with([1, 1, 2, 2])
    log.append(batch(4, 2))
    log.truncate(2)
    assert (log.end_offset, log.flushed_offset, log.last_fetched_epoch()) == (2, 2, 1)
    log.append(batch(2, 3, count=3))
    with pytest.raises(LogError, match="not a batch boundary"):
        log.truncate(3)


def test_appends_must_continue_the_log_in_epoch_order() -> None:
    log = log_with([2])
    with pytest.raises(LogError, match="does not continue"):
        log.append(batch(5, 2))
    with pytest.raises(LogError, match="epoch 1 after epoch 2"):
        log.append(batch(1, 1))


def test_digests_tell_identical_prefixes_apart() -> None:
    a, b = log_with([1, 1, 2]), log_with([1, 1, 2])
    c = log_with([1, 1, 3])
    assert a.digest_at(3) == b.digest_at(3) != c.digest_at(3)
    assert a.digest_at(2) == c.digest_at(2)
    assert a.digest_at(0) == 0
    a.append(batch(3, 2))
    assert a.digest_at(4) is not None and a.digest_at(4, flushed_only=True) is None
