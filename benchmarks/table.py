"""Timing and table printing shared by the benchmark scripts."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent


def rate(
    fn: Callable[[], object],
    min_seconds: float = 1.0,
    min_runs: int = 3,
    clock: Callable[[], float] = time.perf_counter,
) -> float:
    """Calls per second of `fn`, timed over at least `min_seconds` and `min_runs` calls after a warm-up.

    `clock=time.process_time` counts this process's CPU seconds instead: on a shared machine the
    figure to compare between runs, where wall-clock rates move with the other load."""
    fn()
    runs = 0
    start = clock()
    elapsed = 0.0
    while elapsed < min_seconds or runs < min_runs:
        fn()
        runs += 1
        elapsed = clock() - start
    return runs / elapsed


def print_table(title: str, header: Sequence[str], rows: Sequence[Sequence[object]], left: Sequence[int] = ()) -> None:
    """A plain aligned table: first column left-aligned, figures right-aligned; the columns whose
    indexes are in `left` (text, say) are left-aligned too."""
    cells = [[str(h) for h in header]] + [[_fmt(c) for c in row] for row in rows]
    widths = [max(len(row[i]) for row in cells) for i in range(len(header))]
    lefts = {0, *(i % len(header) for i in left)}
    print(f"\n{title}")
    for number, row in enumerate(cells):
        line = [c.ljust(w) if i in lefts else c.rjust(w) for i, (c, w) in enumerate(zip(row, widths, strict=True))]
        print("  ".join(line).rstrip())
        if number == 0:
            print("  ".join("-" * w for w in widths))


def _fmt(value: object) -> str:
    if isinstance(value, float):
        return f"{value:,.2f}" if value < 100 else f"{value:,.0f}"
    if isinstance(value, int):
        return f"{value:,}"
    return str(value)


def progress(message: str) -> None:
    print(f"... {message}", flush=True)


def run_child(module: str, *arguments: str, timeout_s: float | None = None) -> dict[str, Any]:
    """Run `python -m module --child arguments...` (a step that must have its own process: its own
    peak memory, a clean heap, no interpreter lock shared with a server); its progress lines ("... ")
    are passed on as they come, its last line is its JSON result. A child still running after
    `timeout_s` is killed, so a stuck client fails the benchmark instead of hanging it."""
    process = subprocess.Popen([sys.executable, "-m", module, "--child", *arguments], cwd=ROOT,
                               stdout=subprocess.PIPE, text=True)  # fmt: skip
    timer = threading.Timer(timeout_s, process.kill) if timeout_s is not None else None
    if timer is not None:
        timer.start()
    try:
        assert process.stdout is not None
        last = ""
        for line in process.stdout:
            if line.startswith("... "):
                print(line, end="", flush=True)
            elif line.strip():
                last = line
        code = process.wait()
    finally:
        if timer is not None:
            timer.cancel()
        if process.poll() is None:
            process.kill()
            process.wait()
    if code != 0:
        why = f"killed after {timeout_s:.0f} s" if code == -9 and timeout_s is not None else f"exit {code}"
        raise RuntimeError(f"the child step {module} {' '.join(arguments)[:200]} failed ({why}; its error is above)")
    return json.loads(last)
