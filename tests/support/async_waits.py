"""Waiting in a test's event loop for a condition other tasks make true, with a deadline that names it."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

DEADLINE_S = 60.0


async def until(check: Callable[[], bool], what: str, timeout_s: float = DEADLINE_S, poll_s: float = 0.005) -> None:
    """Return once `check()` holds; AssertionError naming `what` after `timeout_s`."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_s
    while not check():
        if loop.time() > deadline:
            raise AssertionError(f"not within {timeout_s:g}s: {what}")
        await asyncio.sleep(poll_s)
