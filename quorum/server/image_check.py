"""The test image check (`quorum.test.verify.image`) off the Raft lock.

The check compares the node's image with a replay of its snapshot plus log (`quorum.image.verify`).
It ran inside the catch-up action, on a worker thread but awaited under the core lock: in a 3+3
process test 136 checks took 7 ms at the median and up to 270 ms (a full replay), and every one
of those milliseconds the node answered no Fetch, Vote or commit, on every node of every test
cluster (issue 38's stalls; a replay grows with the log).

Here the catch-up only captures what it built (the image, which is immutable, and the offset it
reaches) and hands it to `BackgroundImageCheck`, which checks on a worker thread while the core
goes on. One check runs at a time and, when catch-ups outpace it, only the latest capture is
checked: the reference replay advances over every record either way, so no record goes
unchecked, only some intermediate images are not compared. What changes the log below what the
check reads (a log start offset that moves and deletes segments and snapshots, a snapshot
installed in place of the log) first waits for the running check (`idle`).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Generic, TypeVar

T = TypeVar("T")


class BackgroundImageCheck(Generic[T]):
    """Runs `check(capture)` on a worker thread for the latest capture submitted; a difference it
    returns goes to `on_divergence` (which stops the node), and no check runs after that."""

    def __init__(self, check: Callable[[T], str | None], on_divergence: Callable[[str], None]) -> None:
        self._check = check
        self._on_divergence = on_divergence
        self._pending: T | None = None
        self._task: asyncio.Task[None] | None = None
        self._diverged = False
        self.checked = 0
        self.superseded = 0

    def submit(self, capture: T) -> None:
        """Check `capture` soon; a capture still waiting is replaced (it is older)."""
        if self._diverged:
            return
        if self._pending is not None:
            self.superseded += 1
        self._pending = capture
        if self._task is None or self._task.done():
            self._task = asyncio.create_task(self._run(), name="image-check")

    async def _run(self) -> None:
        while self._pending is not None and not self._diverged:
            capture, self._pending = self._pending, None
            try:
                divergence = await asyncio.to_thread(self._check, capture)
            except Exception as exc:  # a check that cannot run is a finding too: the node stops naming it
                divergence = f"the image check failed: {exc!r}"
            self.checked += 1
            if divergence is not None:
                self._diverged = True
                self._pending = None
                self._on_divergence(divergence)

    async def idle(self) -> None:
        """Return once no check is running or waiting (before the log below the checked offset
        changes, and before the log closes)."""
        while self._task is not None and not self._task.done():
            await asyncio.shield(self._task)
