"""Run the quorum simulator from the command line.

    python -m quorum.sim --seeds 1000 --voters 3 --observers 1            # many seeds, a summary
    python -m quorum.sim --seeds 200 --scenario all                       # every scenario
    python -m quorum.sim --seed 42 --voters 3 --observers 1 --scenario chaos   # replay one, traced
    python -m quorum.sim --seeds 10000 --scenario snapshot --jobs 2          # seeds spread over 2 processes
    python -m quorum.sim --seeds 10000 --scenario chaos,failover,snapshot,snapshot-crash,partition --jobs 2

A failing seed prints its reason and the one-line command that replays it; the exit status is 1.
"""

from __future__ import annotations

import argparse
import multiprocessing
import statistics
import sys
import time
from collections.abc import Iterator, Sequence
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool

from quorum.sim.cluster import RunStats, SimulationFailure, run_seed
from quorum.sim.scenarios import SCENARIOS
from quorum.sim.workers import Outcome, quiet_logs, run_one


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m quorum.sim", description=__doc__.split("\n\n")[0])
    which = parser.add_mutually_exclusive_group()
    which.add_argument("--seeds", type=int, default=100, help="how many seeds to run (from --first)")
    which.add_argument("--seed", type=int, help="replay this one seed with its event trace")
    parser.add_argument("--first", type=int, default=0, help="first seed of a --seeds run")
    parser.add_argument("--voters", type=int, default=3)
    parser.add_argument("--observers", type=int, default=0)
    parser.add_argument("--scenario", default="chaos", type=_scenarios,
                        help=f"'all', or one or more of {', '.join(SCENARIOS)} separated by commas")
    parser.add_argument("--duration-ms", type=int, default=None,
                        help="simulated time with faults (default: the scenario's)")
    parser.add_argument("--quiet", action="store_true", help="with --seed: no event trace, only the outcome")
    parser.add_argument("--fail-fast", action="store_true", help="stop at the first failing seed")
    parser.add_argument("--jobs", type=_positive, default=1,
                        help="with --seeds: run seeds on this many processes (the table is the same as with 1)")
    return parser


def _positive(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"--jobs must be at least 1, not {value}")
    return value


def _scenarios(text: str) -> list[str]:
    if text == "all":
        return list(SCENARIOS)
    names = [name.strip() for name in text.split(",") if name.strip()]
    unknown = [name for name in names if name not in SCENARIOS]
    if unknown or not names:
        raise argparse.ArgumentTypeError(f"unknown scenario(s) {unknown or [text]}: choose 'all' or from "
                                         f"{', '.join(SCENARIOS)}")
    return names


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    scenarios = args.scenario
    if args.seed is not None:
        return _replay(args, scenarios)
    return _many(args, scenarios)


def _replay(args: argparse.Namespace, scenarios: list[str]) -> int:
    status = 0
    for scenario in scenarios:
        trace = None if args.quiet else print
        try:
            stats = run_seed(args.seed, args.voters, args.observers, scenario, args.duration_ms, trace)
        except SimulationFailure as failure:
            print(f"FAILED {failure}", file=sys.stderr)
            status = 1
            continue
        print(f"ok: {scenario} seed {args.seed}: {_describe(stats)}")
    return status


def _many(args: argparse.Namespace, scenarios: list[str]) -> int:
    rows = []
    failures: list[SimulationFailure] = []
    total = args.seeds * len(scenarios)
    done = 0
    started = time.perf_counter()
    interactive = sys.stderr.isatty()  # a live progress line on a terminal, a line per 5% in a log
    broken = ""
    for scenario in scenarios:
        results: list[RunStats] = []
        scenario_failures = 0
        scenario_started = time.perf_counter()
        outcomes = _outcomes(args, scenario)
        while True:
            try:
                outcome = next(outcomes)
            except StopIteration:
                break
            except BrokenProcessPool as exc:
                seed = args.first + len(results) + scenario_failures
                broken = (f"a worker process died while running {scenario} seeds from {seed} on ({exc}); "
                          f"the table holds the seeds that ran before it")
                print(f"\n{broken}", file=sys.stderr)
                break
            if isinstance(outcome, RunStats):
                results.append(outcome)
            else:
                failure = SimulationFailure(*outcome)
                failures.append(failure)
                scenario_failures += 1
                print(f"\nFAILED {failure}", file=sys.stderr)
                if args.fail_fast:
                    break
            done += 1
            if interactive or done % max(total // 20, 1) == 0 or done == total:
                elapsed = time.perf_counter() - started
                line = f"[{done}/{total}] {scenario:<16} {done / elapsed:6.1f} seeds/s  failures: {len(failures)}"
                print(f"\r{line}" if interactive else line, end="" if interactive else "\n", file=sys.stderr,
                      flush=True)
        rows.append(_row(scenario, results, scenario_failures, time.perf_counter() - scenario_started))
        if (failures and args.fail_fast) or broken:
            break
    if interactive:
        print(file=sys.stderr)
    _table(rows, args)
    if broken:
        print(f"\nNOT COMPLETE: {broken}")
        return 1
    if failures:
        print(f"\n{len(failures)} failing seed(s); replay with:")
        for failure in failures:
            print(f"  {failure.command}")
        return 1
    return 0


def _outcomes(args: argparse.Namespace, scenario: str) -> Iterator[Outcome]:
    """Each seed's outcome in seed order, run here or spread over `--jobs` worker processes
    (each seed is deterministic on its own, so the outcomes do not depend on how many)."""
    jobs = [(seed, args.voters, args.observers, scenario, args.duration_ms)
            for seed in range(args.first, args.first + args.seeds)]
    if args.jobs == 1:
        yield from map(run_one, jobs)
        return
    # concurrent.futures, not multiprocessing.Pool: a worker that dies (kill -9, the OOM killer) breaks
    # the pool and the run ends naming it, where Pool quietly started another and waited for ever for
    # the seeds the dead one held (a 10,000-seed run hung so after a worker was killed).
    pool = ProcessPoolExecutor(args.jobs, mp_context=multiprocessing.get_context("spawn"), initializer=quiet_logs)
    try:
        yield from pool.map(run_one, jobs, chunksize=4)
    finally:  # --fail-fast or a broken pool: the seeds not started are dropped, not run to the end
        pool.shutdown(wait=True, cancel_futures=True)


def _row(scenario: str, results: list[RunStats], failed: int, seconds: float) -> list[str]:
    runs = len(results) + failed

    def mean(values: list[int]) -> str:
        return f"{statistics.fmean(values):.1f}" if values else "-"

    return [
        scenario, str(runs), str(failed), str(sum(r.events for r in results)), f"{seconds:.0f}",
        f"{runs / seconds:.1f}" if seconds else "-",
        mean([r.elections for r in results]), str(max((r.elections for r in results), default=0)),
        str(max((r.max_epoch for r in results), default=0)),
        mean([r.committed_offset for r in results]), str(min((r.committed_offset for r in results), default=0)),
        mean([r.faults for r in results]),
        mean([r.recovery_ms for r in results]), str(max((r.recovery_ms for r in results), default=0)),
        str(sum(r.failovers for r in results)), str(max((r.max_failover_ms for r in results), default=0)),
        mean([r.events for r in results]),
        mean([r.snapshots_taken for r in results]), str(sum(r.snapshots_installed for r in results)),
        str(sum(1 for r in results if r.snapshots_installed)), mean([r.log_start_advances for r in results]),
        str(sum(r.corrupt_snapshots_refused for r in results)),
        str(sum(r.fetch_crashes + r.write_crashes for r in results)),
        str(sum(r.partial_snapshots_cleaned for r in results)),
    ]


def _table(rows: list[list[str]], args: argparse.Namespace) -> None:
    header = ["scenario", "seeds", "violations", "events", "seconds", "seeds/s", "elections", "max", "max epoch",
              "committed", "min", "faults", "recovery ms", "max", "failovers", "max ms", "events/seed", "snapshots",
              "installs", "inst seeds", "lso moves", "refused", "snap kills", ".part cleaned"]
    widths = [max(len(header[i]), *(len(r[i]) for r in rows)) for i in range(len(header))]
    print(f"{args.voters} voter(s), {args.observers} observer(s), seeds {args.first}..{args.first + args.seeds - 1}")
    print("  ".join(h.ljust(w) if i == 0 else h.rjust(w) for i, (h, w) in enumerate(zip(header, widths, strict=True))))
    for row in rows:
        print("  ".join(c.ljust(w) if i == 0 else c.rjust(w) for i, (c, w) in enumerate(zip(row, widths, strict=True))))


def _describe(stats: RunStats) -> str:
    failovers = (f", {stats.failovers} failover(s) (longest {stats.max_failover_ms} ms)" if stats.failovers else "")
    snapshots = (f"; snapshots: {stats.snapshots_taken} taken, {stats.snapshots_fetched} fetched, "
                 f"{stats.snapshots_installed} installed, {stats.log_start_advances} log start moves, "
                 f"{stats.corrupt_snapshots_refused} refused as corrupt ({stats.corrupt_chunks} chunks damaged), "
                 f"{stats.fetch_crashes} killed fetching, {stats.write_crashes} killed writing, "
                 f"{stats.partial_snapshots_cleaned} .part cleaned" if stats.snapshots_taken else "")
    return (f"{stats.elections} election(s), max epoch {stats.max_epoch}, committed offset {stats.committed_offset}, "
            f"{stats.proposals} proposals, {stats.faults} faults, {stats.events} events, "
            f"recovered in {stats.recovery_ms} ms{failovers}{snapshots}")


if __name__ == "__main__":
    quiet_logs()
    sys.exit(main())
