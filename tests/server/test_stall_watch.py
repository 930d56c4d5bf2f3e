"""`quorum.debug.loop.stall.ms`: a loop held by a step that does not yield is reported with the
step's stack while it holds it, and again when the loop runs; a loop that runs is never reported.
(The setting's default and range: tests/server/test_config.py.)"""

from __future__ import annotations

import asyncio
import logging
import time

import pytest

from quorum.server.stall_watch import StallWatch


def hold_the_loop(seconds: float) -> None:
    time.sleep(seconds)  # a step that does not yield: a codec compiled, a long copy, a collection


def watched(threshold_s: float, body) -> StallWatch:  # noqa: ANN001 - an async callable
    watch = StallWatch(threshold_s)

    async def main() -> None:
        task = asyncio.create_task(watch.run())
        await asyncio.sleep(threshold_s)  # the watcher thread is up
        try:
            await body()
        finally:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)

    asyncio.run(main())
    return watch


def test_a_held_loop_is_reported_with_the_stack_that_holds_it(caplog: pytest.LogCaptureFixture) -> None:
    async def body() -> None:
        hold_the_loop(0.4)
        await asyncio.sleep(0.1)  # the loop runs again: the stall's end is reported

    with caplog.at_level(logging.WARNING, logger="quorum.server.stall_watch"):
        watch = watched(0.05, body)
    stalls = [r.getMessage() for r in caplog.records if "stalled" in r.getMessage()]
    assert watch.stalls == 1 and len(stalls) == 1, stalls
    innermost_first = stalls[0].split(", in: ")[1]
    assert innermost_first.startswith("hold_the_loop (test_stall_watch.py:") and " <- body (" in innermost_first, stalls
    assert any("ran again after a stall of at least" in r.getMessage() for r in caplog.records)


def test_a_loop_that_keeps_running_is_not_reported(caplog: pytest.LogCaptureFixture) -> None:
    async def body() -> None:
        for _ in range(30):
            await asyncio.sleep(0.01)

    with caplog.at_level(logging.WARNING, logger="quorum.server.stall_watch"):
        watch = watched(0.5, body)
    assert watch.stalls == 0 and not caplog.records
