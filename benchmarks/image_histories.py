"""10,000 random metadata histories through the incremental image, a record-by-record image, a full
replay and a restart from a snapshot: equal after every step (issue 21). The suite runs 250
(`tests/image/test_image_histories.py`); this is the longer run, a few minutes, which is why it is
not named bench_*.py (`./run bench` runs those).

    .venv/bin/python -m benchmarks.image_histories [--histories N] [--steps N]

The machine is `tests/image/histories.py`. A difference fails the run (exit 1) with hypothesis's
shrunk history and the first field that differs; otherwise it prints what ran: histories, steps,
committed batches and records, snapshots taken, and the time.
"""

from __future__ import annotations

import argparse
import sys
import time

from hypothesis import HealthCheck, settings
from hypothesis.stateful import run_state_machine_as_test

from benchmarks.table import ROOT, print_table

sys.path.insert(0, str(ROOT))  # tests.image.histories, when run as a file

from tests.image.histories import COUNTS, ImageHistories  # noqa: E402


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--histories", type=int, default=10_000, help="random histories to run (default 10,000)")
    parser.add_argument("--steps", type=int, default=50, help="most rules per history (default 50)")
    args = parser.parse_args()
    started = time.perf_counter()
    run_state_machine_as_test(
        ImageHistories,
        settings=settings(
            max_examples=args.histories,
            stateful_step_count=args.steps,
            deadline=None,
            database=None,
            suppress_health_check=list(HealthCheck),
        ),
    )
    elapsed = time.perf_counter() - started
    print_table(
        f"Image histories (issue 21): incremental = stepped = replayed = restarted from a snapshot, "
        f"after every step, up to {args.steps} steps each",
        ["histories", "batches committed", "records", "snapshots", "seconds", "differences"],
        [[COUNTS["histories"], COUNTS["commits"], COUNTS["records"], COUNTS["snapshots"], round(elapsed, 1), 0]],
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
