"""A node's stop, watched: a step that takes long is named, with what every task is waiting on.

A node stops in steps (close the listeners, the peer connections, the broker's work, the
metadata log), each of which awaits other tasks. One that never finishes left a stopped broker
serving nothing while its process lived on, which nobody restarts (the soak's full-disk fault
found it). So the stop reports itself every `STOP_REPORT_S` once it is slow, naming its step and
the innermost await of every other task, and a fatal stop (a failed log dir, a diverged image)
that has not finished after `FATAL_STOP_HALT_S` halts the process with exit 1, as Kafka halts
(`Exit.halt`) rather than shutting down cleanly when its log dir failed. A stop asked for by
SIGTERM is only reported: its controlled shutdown may legitimately take a while.
"""

from __future__ import annotations

import asyncio
import logging
import os
import sys
import time
from collections.abc import Callable

log = logging.getLogger(__name__)

STOP_REPORT_S = 10.0
FATAL_STOP_HALT_S = 30.0


class StopWatch:
    """The step a stopping node is at, and the task that reports (and halts) a slow stop."""

    def __init__(self, node_id: int, fatal: Callable[[], str | None]) -> None:
        self._node_id = node_id
        self._fatal = fatal
        self._started = time.monotonic()
        self.step = "starting to stop"

    def begin(self, step: str) -> None:
        """The stop moved on to `step` (what a report names)."""
        self.step = step

    async def watch(self, report_s: float = STOP_REPORT_S, halt_s: float = FATAL_STOP_HALT_S) -> None:
        """Report a slow stop every `report_s`; halt a fatal one after `halt_s`. Cancelled when the stop ends."""
        while True:
            await asyncio.sleep(report_s)
            elapsed = time.monotonic() - self._started
            log.warning("stopping for %.0f s, still %s; waiting: %s", elapsed, self.step, "; ".join(waits()))
            reason = self._fatal()
            if reason is not None and elapsed >= halt_s:
                log.critical("halting: the stop (%s) did not finish in %.0f s, still %s", reason, elapsed, self.step)
                print(f"node {self._node_id} halted: {reason}", flush=True)
                logging.shutdown()
                sys.stderr.flush()
                os._exit(1)


def waits() -> list[str]:
    """Each other task of the loop with the innermost coroutine it is suspended in and what that awaits."""
    current = asyncio.current_task()
    return [awaited_by(task) for task in asyncio.all_tasks() if task is not current and not task.done()]


def awaited_by(task: asyncio.Task[object]) -> str:
    """`name: outer() -> ... -> inner() at file:line awaiting <what>`, following the coroutines' awaits."""
    chain: list[str] = []
    coro: object = task.get_coro()
    while coro is not None and hasattr(coro, "cr_frame"):
        frame = coro.cr_frame  # type: ignore[attr-defined]
        name = coro.__qualname__  # type: ignore[attr-defined]
        if frame is not None:
            name += f" at {os.path.basename(frame.f_code.co_filename)}:{frame.f_lineno}"
        chain.append(name)
        awaited = coro.cr_await  # type: ignore[attr-defined]
        if awaited is None or not hasattr(awaited, "cr_frame"):
            if awaited is not None:
                chain.append(type(awaited).__name__)
            break
        coro = awaited
    return f"{task.get_name()}: " + " -> ".join(chain)
