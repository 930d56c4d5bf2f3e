"""Writes waiting to be committed by the Raft quorum, and the answer each gets.

A leader's write is committed when the high watermark passes it *and* the entry at its offset is
still the one it wrote, i.e. stamped with the epoch it was proposed in: a leader that loses its
epoch may see its uncommitted entries truncated and the same offsets committed with another
leader's records, and waiting for the high watermark alone would call those writes committed.
And a leader that stops leading (it lost an election, was fenced, or resigned to write a snapshot)
answers its waiting writes at once instead of letting them wait out their timeout: the writer
can retry on the new leader right away (issue 17's hang of 30 s after a resignation).
"""

from __future__ import annotations

import asyncio
import bisect
from collections.abc import Sequence
from dataclasses import dataclass

from quorum.log.epoch_cache import EpochEntry

NO_LEADER = -1
_MIXED = -2  # CommitWaiters: the waiting writes were proposed in more than one epoch


class NotLeaderError(Exception):
    """This node cannot commit the write: it is not the leader, or stopped leading before the
    write was committed (the write may still be committed by the next leader, or lost)."""

    def __init__(self, message: str, leader_id: int = NO_LEADER) -> None:
        super().__init__(message)
        self.leader_id = leader_id


@dataclass(slots=True)
class _Waiter:
    end_offset: int
    epoch: int
    future: asyncio.Future[None]


def epoch_at(entries: Sequence[EpochEntry], offset: int, starts: Sequence[int] | None = None) -> int | None:
    """The epoch of the entry at `offset` by the log's epoch entries; None below the first.
    `starts`: the entries' start offsets, when the caller looks up many offsets."""
    if starts is None:
        starts = [entry.start_offset for entry in entries]
    index = bisect.bisect_right(starts, offset) - 1
    return entries[index].epoch if index >= 0 else None


class CommitWaiters:
    """The writes a leader proposed and has not answered yet, by end offset.

    Each event costs the writes it answers, not every write waiting: with 500 writers waiting a
    leader sees thousands of events a second (issue 17's profile found the old full scans).
    """

    def __init__(self, node_id: int) -> None:
        self._node_id = node_id
        self._waiting: list[_Waiter] = []  # sorted by end_offset
        self._epoch = _MIXED  # the epoch every waiting write was proposed in, or _MIXED

    def __len__(self) -> int:
        return len(self._waiting)

    def add(self, end_offset: int, epoch: int) -> asyncio.Future[None]:
        """Wait for the entries below `end_offset`, proposed in `epoch`, to be committed."""
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        waiting = self._waiting
        if not waiting:
            self._epoch = epoch
        elif epoch != self._epoch:
            self._epoch = _MIXED
        waiter = _Waiter(end_offset, epoch, future)
        if not waiting or waiting[-1].end_offset <= end_offset:
            waiting.append(waiter)
        else:
            bisect.insort_right(waiting, waiter, key=_end_offset)
        return future

    def committed(self, high_watermark: int, entries: Sequence[EpochEntry]) -> None:
        """The high watermark moved: writes below it succeed if their last entry is still theirs."""
        waiting = self._waiting
        if not waiting or waiting[0].end_offset > high_watermark:
            return
        done = bisect.bisect_right(waiting, high_watermark, key=_end_offset)
        starts = [entry.start_offset for entry in entries]
        for waiter in waiting[:done]:
            if waiter.future.done():  # the writer gave up (its timeout)
                continue
            found = epoch_at(entries, waiter.end_offset - 1, starts)
            if found is None or found == waiter.epoch:  # None: below the log's epochs, i.e. in a snapshot
                waiter.future.set_result(None)
            else:
                waiter.future.set_exception(NotLeaderError(
                    f"node {self._node_id}'s write at offsets below {waiter.end_offset} in epoch {waiter.epoch} was "
                    f"replaced by epoch {found}'s entries before it was committed"))
        del waiting[:done]

    def leadership(self, epoch: int, is_leader: bool, leader_id: int) -> None:
        """After every change of the core: a write proposed in another epoch, or by a node that is
        no longer leading, is answered now (the leader it names, when known)."""
        if not self._waiting or (is_leader and self._epoch == epoch):
            return
        still = []
        for waiter in self._waiting:
            if waiter.future.done():
                continue
            if is_leader and waiter.epoch == epoch:
                still.append(waiter)
                continue
            known = f"node {leader_id} leads epoch {epoch}" if leader_id >= 0 else f"no leader known in epoch {epoch}"
            waiter.future.set_exception(NotLeaderError(
                f"node {self._node_id} stopped leading epoch {waiter.epoch} before its write below offset "
                f"{waiter.end_offset} was committed ({known})", leader_id))
        self._waiting = still
        self._epoch = epoch if still else _MIXED


def _end_offset(waiter: _Waiter) -> int:
    return waiter.end_offset
