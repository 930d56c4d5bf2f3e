"""The node's `quorum-state` writes: a new epoch or vote durable before the node goes on, a new
leader id alone written a moment later, unless a newer state is written first.

Raft's safety rests on the durable epoch and vote: a node must not act on a vote (send it, or
campaign with it) before it is on disk. The leader's id is not part of it: a crash that loses it
restarts the node without a known leader in the same epoch, and it finds or elects one (issue 17
moved those writes off a failover's path). They still reached the disk at once, in the same few
milliseconds as the election's own writes: a graceful handover writes the resigned leader's state
and each voter's "no leader" beside the successor's vote for itself and the voters' votes, three
processes forcing journal commits on one disk, and each durable write then took 2.8-3.9 ms where
one alone takes 0.5 (bench_quorum's SIGTERM failover, traced). Worse, a durable write waited for
the background write before it. So a leader-id-only state waits LATER_S, is dropped when a durable
write (which holds the newer state) comes first, and only the last of several is written.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from pathlib import Path

from quorum.log.quorum_state import QuorumState, write_quorum_state

log = logging.getLogger(__name__)

LATER_S = 0.05
"""How long a leader-id-only state waits before it is written: longer than a handover's election
and first commit (~10-20 ms here), short enough that a restart soon after still finds it."""


class QuorumStateWriter:
    """See the module docstring. Used on one event loop; the writes run on worker threads."""

    def __init__(self, path: Path, durable_vote: tuple[int, int] | None,
                 failed: Callable[[OSError], None], later_s: float = LATER_S) -> None:
        self._path = path
        self._durable_vote = durable_vote
        self._failed = failed
        self._later_s = later_s
        self._pending: QuorumState | None = None
        self._writing = asyncio.Lock()  # one write of the file at a time, in the order asked
        self._later: asyncio.Task[None] | None = None

    async def persist(self, state: QuorumState) -> None:
        """Write `state`: durably before returning when its epoch or vote is new, else later."""
        vote = (state.leader_epoch, state.voted_id)
        if vote == self._durable_vote:
            self._pending = state
            if self._later is None or self._later.done():
                self._later = asyncio.create_task(self._write_later())
            return
        async with self._writing:
            self._pending = None  # this write holds a newer state than any waiting
            await asyncio.to_thread(write_quorum_state, self._path, state)
        self._durable_vote = vote

    async def flush(self) -> None:
        """Write the waiting state now (the node is stopping); OSError if that fails. The delayed
        write is not cancelled: cancelled in its write, its thread would go on beside this one; it
        finds nothing left when its wait ends (or asyncio.run cancels it while it waits)."""
        await self._write_pending()

    async def _write_later(self) -> None:
        await asyncio.sleep(self._later_s)
        try:
            await self._write_pending()
        except OSError as exc:
            self._failed(exc)

    async def _write_pending(self) -> None:
        async with self._writing:
            state, self._pending = self._pending, None
            if state is not None:
                await asyncio.to_thread(write_quorum_state, self._path, state)
