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
    assert lines[-1].startswith("demo succeeded: all nine parts ran"), output[-6000:]
    for part in range(1, 10):
        assert f"== Part {part}:" in run.stdout, output[-6000:]
    assert "All three clients listed the node's metadata." in run.stdout
    assert "replicator exited 0; the target holds" in run.stdout
    assert "confluent-kafka read all 3000 messages from offset 0, byte for byte as produced" in run.stdout
    assert "is back in every ISR of inventory:" in run.stdout
    assert "alice produces to payments without ACLs: refused, TOPIC_AUTHORIZATION_FAILED" in run.stdout
    assert "alice read all 20 payments in group ledger and committed her offsets" in run.stdout


def test_a_wait_past_its_deadline_names_what_it_waited_for_and_the_logs_to_read(tmp_path):
    from examples.demo_waits import DemoFailure, wait_for

    log = tmp_path / "node-102" / "node.log"

    def refused():
        raise ConnectionRefusedError("127.0.0.1:9092 refused")

    with pytest.raises(DemoFailure) as failed:
        wait_for("broker 102 to be fenced", refused, 0.3, [log], interval_s=0.05)
    assert str(failed.value) == (f"waited 0.3 s for broker 102 to be fenced; last error: 127.0.0.1:9092 refused "
                                 f"(read {log})")
    assert wait_for("a value", lambda: 7, 0.3) == 7


def test_a_failed_part_keeps_its_directory_for_the_logs_and_a_successful_one_removes_it():
    from examples.demo_waits import DemoFailure, scratch_directory

    with pytest.raises(DemoFailure), scratch_directory("demo-test-") as kept:
        raise DemoFailure("something")
    assert Path(kept).is_dir()
    Path(kept).rmdir()
    with scratch_directory("demo-test-") as removed:
        (Path(removed) / "node.log").write_text("ok")
    assert not Path(removed).exists()
