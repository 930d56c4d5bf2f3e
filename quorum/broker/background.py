"""Requests a sans-IO core's driver sends off the event loop's current path, and their cancellation.

The broker's drivers (the replica fetcher links, the leader's AlterPartition sender) start a task
per request so that feeding the core never waits on the network; once a driver stops, no task may
feed its core again, so a closed set refuses new work and cancels what is in flight.
"""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine
from typing import Any


class BackgroundTasks:
    """The tasks a driver started and has not seen finish."""

    def __init__(self) -> None:
        self._tasks: set[asyncio.Task[Any]] = set()
        self.closed = False

    def spawn(self, work: Coroutine[Any, Any, Any]) -> None:
        """Run `work` as a task, unless the set is closed (then it is dropped without running)."""
        if self.closed:
            work.close()
            return
        task = asyncio.get_running_loop().create_task(work)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    def close(self) -> None:
        """Refuse new work and cancel every task still running."""
        self.closed = True
        for task in list(self._tasks):
            task.cancel()
