"""What a worker process runs for `python -m quorum.sim --jobs N`.

It lives outside `quorum.sim.__main__` because multiprocessing pickles functions by module and
name, and a worker never imports a package's `__main__` module (it would find no `_run_one` there).
"""

from __future__ import annotations

import logging

from quorum.sim.cluster import RunStats, SimulationFailure, run_seed

Outcome = RunStats | tuple[int, str, str]
"""A seed's stats, or its failure as (seed, reason, replay command): what a worker sends back."""


def run_one(job: tuple[int, int, int, str, int | None]) -> Outcome:
    """Run one (seed, voters, observers, scenario, duration_ms); a failure comes back as data."""
    seed, voters, observers, scenario, duration_ms = job
    try:
        return run_seed(seed, voters, observers, scenario, duration_ms)
    except SimulationFailure as failure:
        return failure.seed, failure.reason, failure.command


def quiet_logs() -> None:
    """A refused snapshot or a removed .part is logged by quorum.log and quorum.image as it would be
    on a node; in the simulator the trace and the summary tell of them, thousands of times over."""
    logging.getLogger("quorum").setLevel(logging.CRITICAL)
