"""Where a node's event loop was when it stopped running for a while: `quorum.debug.loop.stall.ms`.

Everything a node does runs on one asyncio loop, so a step that takes long (a codec compiled at its
first use, a full garbage collection, a large copy into a socket, a process the scheduler left
waiting) delays every request behind it, and nothing says so: asyncio's own slow-callback report
needs debug mode, which slows everything and names only the task. With the setting above 0, a
task marks the loop as running every quarter of it, and a thread checks the mark: when the loop has
not run for that long, the thread logs the loop thread's stack as it is at that moment (what is
stalling it), once per stall, and the stall's length when the loop runs again. Two sessions found
issue 37's failover stalls (garbage collections, codecs compiled mid-failover) with a patch doing
this; it is here so that the next one does not need the patch. Off by default: the thread wakes
every eighth of the threshold.
"""

from __future__ import annotations

import asyncio
import logging
import sys
import threading
import time
import traceback
from collections.abc import Callable
from types import FrameType

log = logging.getLogger(__name__)

STACK_FRAMES = 16
"""Innermost frames of the loop thread's stack a stall's line shows."""


def describe_stack(frame: FrameType | None, frames: int = STACK_FRAMES) -> str:
    """The innermost `frames` frames, innermost first, as `function (file:line)`; "?" without a frame."""
    if frame is None:
        return "?"
    stack = reversed(traceback.extract_stack(frame)[-frames:])
    return " <- ".join(f"{entry.name} ({entry.filename.rsplit('/', 2)[-1]}:{entry.lineno})" for entry in stack)


class StallWatch:
    """Marks the loop as running (`run`, a task) and, on its own thread, logs stalls past `threshold_s`."""

    def __init__(self, threshold_s: float, clock: Callable[[], float] = time.monotonic) -> None:
        self.threshold_s = threshold_s
        self._clock = clock
        self._last_run = clock()
        self._loop_thread = threading.get_ident()
        self._stopped = threading.Event()
        self.stalls = 0

    async def run(self) -> None:
        """Mark the loop as running every quarter of the threshold, and watch from a thread until cancelled."""
        self._loop_thread = threading.get_ident()
        self._last_run = self._clock()
        watcher = threading.Thread(target=self._watch, name="loop-stall-watch", daemon=True)
        watcher.start()
        try:
            while True:
                self._last_run = self._clock()
                await asyncio.sleep(self.threshold_s / 4)
        finally:
            self._stopped.set()

    def _watch(self) -> None:
        reported: float | None = None  # the mark of the stall already logged
        while not self._stopped.wait(self.threshold_s / 8):
            mark = self._last_run
            stalled = self._clock() - mark
            if reported is not None and mark != reported:
                log.warning("event loop ran again after a stall of at least %.0f ms", (mark - reported) * 1000)
                reported = None
            if stalled > self.threshold_s and reported is None:
                reported = mark
                self.stalls += 1
                frame = sys._current_frames().get(self._loop_thread)
                log.warning("event loop stalled for %.0f ms so far, in: %s", stalled * 1000, describe_stack(frame))
