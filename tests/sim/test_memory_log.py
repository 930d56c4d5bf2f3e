"""The simulator's in-memory log: RaftLog reads, and a disk's flushed/unflushed split under crashes."""

from __future__ import annotations

import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from quorum.log import Log
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


# -- KIP-630: the log start offset, the snapshot boundary, and reading for the state machine -----


def test_iter_batches_yields_record_batches_below_upto() -> None:
    log = MemoryLog()
    log.append(batch(0, 1, count=3) + batch(3, 1) + batch(4, 2, count=2))
    assert [(b.base_offset, b.next_offset) for b in log.iter_batches()] == [(0, 3), (3, 4), (4, 6)]
    assert [b.base_offset for b in log.iter_batches(3)] == [3, 4]
    assert [b.base_offset for b in log.iter_batches(1)] == [0, 3, 4], "from the batch holding the offset, as Log"
    assert [b.base_offset for b in log.iter_batches(0, upto=4)] == [0, 3]
    assert [b.base_offset for b in log.iter_batches(0, upto=3)] == [0]
    assert list(log.iter_batches(6)) == [] and list(log.iter_batches(3, upto=3)) == []
    assert [record.value for record in next(iter(log.iter_batches(3)))] == [b"x"]
    with pytest.raises(LogError, match="outside the log"):
        list(log.iter_batches(7))


def test_advance_start_offset_drops_whole_batches_below_it() -> None:
    log = log_with([1, 1, 2, 2, 3])
    assert not log.advance_start_offset(0)
    assert log.advance_start_offset(2)
    assert (log.start_offset, log.end_offset, log.flushed_offset) == (2, 5, 5)
    assert [b.base_offset for b in log.batches] == [2, 3, 4]
    assert log.end_offset_for_epoch(1) == OffsetAndEpoch(-1, -1), "epoch 1 is gone from the log"
    assert log.end_offset_for_epoch(2) == OffsetAndEpoch(4, 2)
    assert log.read(2, 1) == log.batches[0].data
    with pytest.raises(LogError, match="outside the log"):
        log.read(1, 100)
    with pytest.raises(LogError, match="past its end offset"):
        log.advance_start_offset(6)
    assert not log.advance_start_offset(2)


def test_advance_start_offset_inside_a_batch_keeps_that_batch() -> None:
    log = MemoryLog()
    log.append(batch(0, 1, count=3) + batch(3, 1))
    log.flush()
    assert log.advance_start_offset(1)
    assert log.start_offset == 1 and [b.base_offset for b in log.batches] == [0, 3]
    assert log.read(1, 1) == log.batches[0].data
    assert [b.base_offset for b in log.iter_batches()] == [0, 3]


def test_advance_start_offset_flushes_first() -> None:
    log = log_with([1], flushed=False)
    log.append(batch(1, 1))
    assert log.advance_start_offset(1)
    log.crash()
    assert (log.start_offset, log.end_offset, log.flushed_offset) == (1, 2, 2), "the records above the start survive"


def test_the_digest_chain_goes_on_past_an_advanced_start() -> None:
    a, b = log_with([1, 1, 2]), log_with([1, 1, 2])
    a.advance_start_offset(2)
    assert a.digest_at(2) == b.digest_at(2) and a.digest_at(3) == b.digest_at(3)
    a.advance_start_offset(3)
    assert a.batches == [] and a.digest_at(3) == b.digest_at(3)
    a.append(batch(3, 2))
    b.append(batch(3, 2))
    assert a.digest_at(4) == b.digest_at(4) is not None


def test_an_empty_log_at_the_snapshot_answers_with_the_snapshot_epoch() -> None:
    log = log_with([1, 1, 2])
    log.advance_start_offset(3)
    assert log.last_fetched_epoch() == 0, "no boundary: as Log, 0"
    assert not log.set_snapshot_boundary(OffsetAndEpoch(3, 2))
    assert log.last_fetched_epoch() == 2
    assert log.end_offset_for_epoch(5) == OffsetAndEpoch(3, 2)
    assert log.end_offset_for_epoch(2) == OffsetAndEpoch(3, 2)
    assert log.end_offset_for_epoch(1) == OffsetAndEpoch(-1, -1)
    log.append(batch(3, 4))
    assert log.last_fetched_epoch() == 4
    assert log.end_offset_for_epoch(3) == OffsetAndEpoch(3, 2), "below the log's epochs: the snapshot's"
    assert log.end_offset_for_epoch(1) == OffsetAndEpoch(-1, -1)


def test_truncate_fully_and_start_at_replaces_the_log() -> None:
    log = log_with([1, 1, 2])
    log.append(batch(3, 2))
    log.truncate_fully_and_start_at(10, 3)
    assert (log.start_offset, log.end_offset, log.flushed_offset, log.last_fetched_epoch()) == (10, 10, 10, 3)
    assert log.snapshot_boundary == OffsetAndEpoch(10, 3)
    assert log.end_offset_for_epoch(3) == OffsetAndEpoch(10, 3)
    assert log.end_offset_for_epoch(2) == OffsetAndEpoch(-1, -1)
    assert log.read(10, 100) == b"" and list(log.iter_batches()) == []
    log.append(batch(10, 3))
    assert log.end_offset == 11
    log.crash()
    assert (log.start_offset, log.end_offset, log.snapshot_boundary) == (10, 10, OffsetAndEpoch(10, 3)), \
        "the start offset and the boundary are durable at once"


def test_a_fetched_snapshot_keeps_the_digest_chain_when_told_the_prefix_digest() -> None:
    leader = log_with([1, 1, 2, 2])
    follower = log_with([1])
    follower.truncate_fully_and_start_at(4, 2, prefix_digest=leader.digest_at(4))
    assert follower.digest_at(4) == leader.digest_at(4)
    leader.append(batch(4, 2))
    follower.append(batch(4, 2))
    assert follower.digest_at(5) == leader.digest_at(5)
    lost = log_with([1])
    lost.truncate_fully_and_start_at(4, 2)
    lost.append(batch(4, 2))
    assert lost.digest_at(4) is None and lost.digest_at(5) != leader.digest_at(5)


@pytest.mark.parametrize(("epochs", "snapshot", "ahead"), [
    ([1, 1, 2], OffsetAndEpoch(2, 2), False),   # inside the log
    ([1, 1, 2], OffsetAndEpoch(3, 2), False),   # at its end
    ([1, 1, 2], OffsetAndEpoch(5, 2), True),    # same epoch, past the end
    ([1, 1, 2], OffsetAndEpoch(2, 3), True),    # a later epoch: this log diverged
    ([], OffsetAndEpoch(4, 1), True),
])
def test_set_snapshot_boundary_truncates_a_log_behind_the_snapshot(epochs: list[int], snapshot: OffsetAndEpoch,
                                                                   ahead: bool) -> None:
    log = log_with(epochs)
    end = log.end_offset
    assert log.set_snapshot_boundary(snapshot) is ahead
    assert log.snapshot_boundary == snapshot
    if ahead:
        assert (log.start_offset, log.end_offset, log.last_fetched_epoch()) == (snapshot.offset, snapshot.offset,
                                                                                snapshot.epoch)
    else:
        assert (log.start_offset, log.end_offset) == (0, end)


def test_set_snapshot_boundary_refuses_a_snapshot_below_the_start() -> None:
    log = log_with([1, 1, 2])
    log.advance_start_offset(2)
    with pytest.raises(LogError, match="below the log start offset"):
        log.set_snapshot_boundary(OffsetAndEpoch(1, 1))
    with pytest.raises(ValueError, match="invalid snapshot id"):
        log.set_snapshot_boundary(OffsetAndEpoch(-1, -1))


def test_no_truncation_below_the_snapshot_boundary() -> None:
    log = log_with([1, 1, 2, 2])
    log.set_snapshot_boundary(OffsetAndEpoch(3, 2))
    with pytest.raises(LogError, match="below the end offset of the latest snapshot"):
        log.truncate(2)
    log.truncate(3)
    assert log.end_offset == 3


# -- the same answers as the durable log ---------------------------------------------------------

_OPERATIONS = st.lists(st.one_of(
    st.tuples(st.just("append"), st.integers(1, 3), st.integers(0, 1)),
    st.tuples(st.just("flush")),
    st.tuples(st.just("advance"), st.integers(0, 12)),
    st.tuples(st.just("boundary"), st.integers(0, 12), st.integers(0, 4)),
    st.tuples(st.just("start_at"), st.integers(0, 12), st.integers(0, 4)),
), max_size=10)


def _apply(log: Log | MemoryLog, operation: tuple) -> object:
    """Carry out one operation; a refusal is any ValueError (LogError here, InvalidOffsetError there)."""
    try:
        match operation:
            case ("append", count, bump):
                epoch = max(log.last_fetched_epoch(), 1) + bump
                return log.append(batch(log.end_offset, epoch, count=count))
            case ("flush",):
                return log.flush()
            case ("advance", offset):
                return log.advance_start_offset(offset)
            case ("boundary", offset, epoch):
                return log.set_snapshot_boundary(OffsetAndEpoch(offset, epoch))
            case ("start_at", offset, epoch):
                return log.truncate_fully_and_start_at(offset, epoch)
    except ValueError:
        return "refused"
    raise AssertionError(operation)


def _answers(log: Log | MemoryLog) -> tuple:
    return (log.start_offset, log.end_offset, log.flushed_offset, log.last_fetched_epoch(), log.snapshot_boundary,
            [log.end_offset_for_epoch(epoch) for epoch in range(-1, 8)],
            [(b.base_offset, b.next_offset, b.partition_leader_epoch) for b in log.iter_batches()])


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(operations=_OPERATIONS)
def test_memory_log_answers_as_the_durable_log_does(operations: list[tuple]) -> None:
    with tempfile.TemporaryDirectory() as directory, Log(Path(directory) / "log") as durable:
        memory = MemoryLog()
        for operation in operations:
            assert _apply(memory, operation) == _apply(durable, operation), operation
            assert _answers(memory) == _answers(durable), operation
