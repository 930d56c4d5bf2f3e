"""A slice of the soak in the suite (issue 19): one round of every fault kind (kill -9 and restart of
a broker and of a controller, SIGSTOP/SIGCONT of each, a stale broker while a leader dies, a full
disk on one broker where tmpfs can be mounted) on the 3 + 3 cluster, under both producers, both
wrapped consumer groups and the replicator, then the soak's whole check: every acknowledged record
once at its offset, no rewind in either group or the replicator, replicas identical up to the high
watermark, no traceback in any node's log. `python -m benchmarks.soak` runs the same for an hour;
the soak's judges are tested on their own in tests/test_soak_checks.py."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DEADLINE_S = 420

pytestmark = pytest.mark.timeout(DEADLINE_S + 60)


def test_one_round_of_every_fault_loses_duplicates_and_rewinds_nothing(tmp_path):
    command = [sys.executable, "-m", "benchmarks.soak", "--rounds", "1", "--minutes", "5", "--fault-every-s", "2",
               "--hold-s", "3", "--rate", "30", "--members", "1", "--seed", "62", "--dir", str(tmp_path / "soak")]
    try:
        run = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=DEADLINE_S)
    except subprocess.TimeoutExpired as exc:
        output = exc.stderr.decode() if isinstance(exc.stderr, bytes) else exc.stderr or ""
        pytest.fail(f"the soak did not finish within {DEADLINE_S} s; its last lines:\n{output[-4000:]}")
    output = run.stdout + run.stderr
    assert run.returncode == 0, output[-8000:]
    assert "1 round(s) of every fault kind done" in output, output[-8000:]
    assert "result: OK (nothing lost, nothing duplicated, nothing rewound)" in run.stdout, output[-8000:]
