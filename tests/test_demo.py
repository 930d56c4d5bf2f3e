"""`./run demo` end to end, as a new user runs it: it finishes, with a deadline, and says it succeeded.

The demo starts its own clusters (a standalone node, 3 controllers with 2 brokers, a target
cluster for the replicator), so this test shares nothing; it is the suite's one run of all of them
together, in the order a user meets them.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DEADLINE_S = 540

pytestmark = pytest.mark.timeout(DEADLINE_S + 60)


def test_the_demo_runs_every_part_and_says_it_succeeded(kcat):
    try:
        run = subprocess.run([sys.executable, "-m", "examples.demo"], cwd=ROOT, capture_output=True, text=True,
                             timeout=DEADLINE_S)
    except subprocess.TimeoutExpired as exc:
        output = exc.stdout.decode() if isinstance(exc.stdout, bytes) else exc.stdout or ""
        pytest.fail(f"the demo did not finish within {DEADLINE_S} s; its last output:\n{output[-4000:]}")
    output = run.stdout + run.stderr
    assert run.returncode == 0, output[-6000:]
    lines = run.stdout.rstrip().splitlines()
    assert lines[-1].startswith("demo succeeded: all five parts ran"), output[-6000:]
    for part in range(1, 6):
        assert f"== Part {part}:" in run.stdout, output[-6000:]
    assert "All three clients listed the node's metadata." in run.stdout
    assert "replicator exited 0; the target holds" in run.stdout
