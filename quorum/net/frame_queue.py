"""Whole frames of one connection, waiting for the task that takes them, then the connection's failure.

The part of `quorum.net.frame_reader.FrameReader` (which both ends of a Kafka connection read
with: the listener its requests, a peer client its answers) that does not touch bytes: the queue
the protocol callbacks fill, and the coroutine the connection's task awaits.
"""

from __future__ import annotations

import asyncio
from collections import deque


class FrameQueue:
    """Frames in arrival order; once they are taken, the failure that ended the connection."""

    def __init__(self) -> None:
        self._frames: deque[bytearray] = deque()
        self._failure: BaseException | None = None
        self._waiter: asyncio.Future[None] | None = None

    def _deliver(self, frame: bytearray) -> None:
        self._frames.append(frame)
        self._wake()

    def _fail(self, failure: BaseException) -> None:
        """The first failure wins: an end of stream after a bad frame size still reports the bad size."""
        if self._failure is None:
            self._failure = failure
        self._wake()

    def _wake(self) -> None:
        if self._waiter is not None and not self._waiter.done():
            self._waiter.set_result(None)

    async def _next_queued(self) -> bytearray:
        """The next whole frame; with none left, the connection's failure is raised."""
        while not self._frames:
            if self._failure is not None:
                raise self._failure
            self._waiter = asyncio.get_running_loop().create_future()
            try:
                await self._waiter
            finally:
                self._waiter = None
        return self._frames.popleft()
