"""A stopping node names the step it is stuck at and what its tasks wait on, and a fatal stop that
does not finish halts the process (exit 1), as Kafka halts when its log dir failed."""

from __future__ import annotations

import asyncio
import logging
import subprocess
import sys
import textwrap

import pytest

from quorum.server.stop_watch import StopWatch, awaited_by

pytestmark = pytest.mark.timeout(60)


async def _waits_for_ever(event: asyncio.Event) -> None:
    await event.wait()


def test_a_slow_stop_reports_its_step_and_what_each_task_awaits(caplog: pytest.LogCaptureFixture) -> None:
    async def main() -> None:
        never = asyncio.Event()
        stuck = asyncio.create_task(_waits_for_ever(never), name="applier")
        watch = StopWatch(103, lambda: None)
        watch.begin("closing the broker's work")
        watching = asyncio.create_task(watch.watch(report_s=0.1, halt_s=0.2))
        await asyncio.sleep(0.35)
        assert not watching.done(), "a stop asked for (no fatal reason) is never halted"
        assert "applier: _waits_for_ever at test_stop_watch.py" in awaited_by(stuck)
        watching.cancel()
        stuck.cancel()

    with caplog.at_level(logging.WARNING, logger="quorum.server.stop_watch"):
        asyncio.run(main())
    reports = [r.getMessage() for r in caplog.records if "still closing the broker's work" in r.getMessage()]
    assert len(reports) >= 2
    assert "applier: _waits_for_ever at test_stop_watch.py" in reports[0] and "Event.wait" in reports[0]


def test_a_fatal_stop_that_does_not_finish_halts_the_process_with_exit_1() -> None:
    script = textwrap.dedent("""
        import asyncio, logging
        from quorum.server.stop_watch import StopWatch
        logging.basicConfig(level=logging.INFO)

        async def main():
            watch = StopWatch(103, lambda: "the log of soak-1 refuses writes")
            watch.begin("closing the broker's work")
            asyncio.create_task(watch.watch(report_s=0.1, halt_s=0.3))
            await asyncio.Event().wait()  # a step that never ends

        asyncio.run(main())
        print("returned", flush=True)
    """)
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=30)
    assert done.returncode == 1, done
    assert done.stdout.strip() == "node 103 halted: the log of soak-1 refuses writes"
    assert "halting: the stop (the log of soak-1 refuses writes) did not finish" in done.stderr
    assert "still closing the broker's work" in done.stderr
