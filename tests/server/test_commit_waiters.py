"""The answers a leader's pending writes get (quorum.server.commit_waiters)."""

from __future__ import annotations

import asyncio

import pytest

from quorum.log.epoch_cache import EpochEntry
from quorum.server.commit_waiters import CommitWaiters, NotLeaderError, epoch_at

ENTRIES = (EpochEntry(1, 0), EpochEntry(2, 10), EpochEntry(4, 25))


def test_epoch_at_reads_the_epoch_entries():
    assert [epoch_at(ENTRIES, offset) for offset in (0, 9, 10, 24, 25, 1000)] == [1, 1, 2, 2, 4, 4]
    assert epoch_at((EpochEntry(3, 5),), 4) is None


def run(test) -> None:
    asyncio.run(test())


def test_a_write_is_committed_when_the_high_watermark_passes_it_and_its_entry_is_still_its_own():
    async def test() -> None:
        waiters = CommitWaiters(1)
        mine = waiters.add(end_offset=30, epoch=4)
        waiters.committed(29, ENTRIES)
        assert not mine.done()
        waiters.committed(30, ENTRIES)
        assert mine.result() is None and len(waiters) == 0
    run(test)


def test_a_write_whose_offsets_another_epoch_committed_is_refused_not_called_committed():
    async def test() -> None:
        waiters = CommitWaiters(1)
        replaced = waiters.add(end_offset=20, epoch=3)  # epoch 3's entries were truncated; epoch 2's fill 10..24
        waiters.committed(25, ENTRIES)
        with pytest.raises(NotLeaderError, match="replaced by epoch 2's entries"):
            replaced.result()
    run(test)


def test_a_leader_that_stops_leading_answers_every_pending_write_at_once_naming_the_new_leader():
    async def test() -> None:
        waiters = CommitWaiters(1)
        first, second = waiters.add(40, 4), waiters.add(50, 4)
        waiters.leadership(4, True, 1)
        assert not first.done() and not second.done()
        waiters.leadership(5, False, 2)
        for future in (first, second):
            with pytest.raises(NotLeaderError, match="node 1 stopped leading epoch 4 .*node 2 leads epoch 5") as info:
                future.result()
            assert info.value.leader_id == 2
        assert len(waiters) == 0
    run(test)


def test_a_resigned_leader_in_the_same_epoch_answers_too_and_says_no_leader_is_known():
    async def test() -> None:
        waiters = CommitWaiters(3)
        pending = waiters.add(40, 4)
        waiters.leadership(4, False, -1)
        with pytest.raises(NotLeaderError, match="no leader known in epoch 4"):
            pending.result()
    run(test)


def test_a_write_that_timed_out_is_forgotten():
    async def test() -> None:
        waiters = CommitWaiters(1)
        waiter = waiters.add(40, 4)
        with pytest.raises(TimeoutError):
            await asyncio.wait_for(waiter, 0.01)
        waiters.committed(100, ENTRIES)
        waiters.leadership(5, False, 2)
        assert len(waiters) == 0
    run(test)


def test_writes_added_out_of_offset_order_are_answered_exactly_when_the_high_watermark_passes_each():
    """The waiters are kept by end offset, so a commit answers a prefix; a write whose coroutine
    resumed late (added after a later one) is still found."""
    async def test() -> None:
        waiters = CommitWaiters(1)
        later = waiters.add(end_offset=40, epoch=4)
        earlier = waiters.add(end_offset=30, epoch=4)
        last = waiters.add(end_offset=50, epoch=4)
        waiters.committed(35, ENTRIES)
        assert earlier.done() and not later.done() and not last.done() and len(waiters) == 2
        waiters.committed(50, ENTRIES)
        assert later.result() is None and last.result() is None and len(waiters) == 0
    run(test)


def test_writes_of_two_epochs_keep_the_current_epochs_and_answer_the_older_when_leadership_is_checked():
    async def test() -> None:
        waiters = CommitWaiters(1)
        old = waiters.add(end_offset=20, epoch=2)
        new = waiters.add(end_offset=30, epoch=4)
        waiters.leadership(4, True, 1)
        with pytest.raises(NotLeaderError, match="stopped leading epoch 2"):
            old.result()
        assert not new.done() and len(waiters) == 1
        waiters.leadership(4, True, 1)  # all of one epoch now: nothing to do
        assert not new.done()
        waiters.leadership(5, False, 2)
        with pytest.raises(NotLeaderError, match="node 2 leads epoch 5"):
            new.result()
    run(test)
