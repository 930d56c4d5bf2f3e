"""A real crash: a child appends and flushes in a loop and dies by SIGKILL at a random moment.

After each death the log must open, be valid from end to end (every batch's CRC and records,
contiguous offsets, epochs agreeing with the epoch cache), and hold every offset the child
reported as flushed. The child reopens the same directory in the next round, so recovery also
runs on logs that were already recovered and rolled.
"""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

from quorum.log import Log
from quorum.log.epoch_cache import EpochEntry
from tests.log.helpers import check_batch_contents

CHILD = Path(__file__).with_name("crash_child.py")
ROUNDS = 6
SEGMENT_BYTES = 1 << 20


def run_until_killed(directory: Path, seed: int) -> tuple[int, int]:
    """Start the child, let it flush a while, SIGKILL it; returns (start offset, highest flushed)."""
    rng = random.Random(seed)
    child = subprocess.Popen(
        [sys.executable, str(CHILD), str(directory), str(seed), str(SEGMENT_BYTES)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        assert child.stdout is not None
        first = child.stdout.readline()
        assert first.startswith("start "), first + child.stderr.read()
        start = int(first.split()[1])
        flushed = start
        wanted = rng.randint(5, 60)
        for _ in range(wanted):
            line = child.stdout.readline()
            assert line, child.stderr.read()
            flushed = max(flushed, int(line))
        time.sleep(rng.random() * 0.05)  # die somewhere inside an append or a flush
        child.send_signal(signal.SIGKILL)
        # reports written before the kill still count: they were acknowledged
        for line in child.stdout:
            flushed = max(flushed, int(line))
    finally:
        child.kill()
        child.wait(30)
    assert child.returncode == -signal.SIGKILL
    return start, flushed


def check_log(directory: Path, flushed: int) -> int:
    with Log(directory, segment_bytes=SEGMENT_BYTES) as log:
        assert log.end_offset >= flushed, f"flushed offset {flushed} lost: the log ends at {log.end_offset}"
        expected_offset = 0
        epochs: list[EpochEntry] = []
        for batch in log.iter_batches():
            check_batch_contents(batch)
            assert batch.base_offset == expected_offset
            expected_offset = batch.next_offset
            epoch = batch.partition_leader_epoch
            if not epochs or epoch > epochs[-1].epoch:
                epochs.append(EpochEntry(epoch, batch.base_offset))
        assert expected_offset == log.end_offset
        assert list(log.epoch_entries) == epochs
        return log.end_offset


def test_flushed_offsets_survive_sigkill(tmp_path: Path) -> None:
    directory = tmp_path / "__cluster_metadata-0"
    previous_end = 0
    for round_number in range(ROUNDS):
        start, flushed = run_until_killed(directory, seed=round_number)
        assert start == previous_end  # the child's own recovery found what the last check found
        assert flushed > start
        previous_end = check_log(directory, flushed)
    assert len(list(directory.glob("*.log"))) > 1, "the test should have rolled segments"
    assert os.path.exists(directory / "leader-epoch-checkpoint")
