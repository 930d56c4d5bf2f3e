"""A real crash with snapshots: a child appends, snapshots and advances its log start offset, and
dies by SIGKILL at a random moment, in the middle of any of those steps.

After each death, what a node does at start-up must give a consistent whole: partial snapshots
removed, every listed snapshot valid, the latest snapshot reported durable still there, the log
starting no later than the latest snapshot and no earlier than the last start offset reported,
and every flushed offset still in the log.
"""

from __future__ import annotations

import random
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from quorum.log import Log
from quorum.log.snapshot import SnapshotReader, clean_partial_snapshots, latest_snapshot, list_snapshots
from quorum.raft.interface import OffsetAndEpoch
from tests.log.helpers import check_batch_contents
from tests.log.snapshot_crash_child import SEGMENT_BYTES

CHILD = Path(__file__).with_name("snapshot_crash_child.py")
ROUNDS = 8


@dataclass
class Reported:
    """What the child said was durable before it died."""

    flushed: int = 0
    snapshot: OffsetAndEpoch | None = None
    start: int = 0

    def note(self, line: str) -> None:
        kind, *numbers = line.split()
        if kind == "flushed":
            self.flushed = int(numbers[0])
        elif kind == "snapshot":
            self.snapshot = OffsetAndEpoch(int(numbers[0]), int(numbers[1]))
        elif kind == "start":
            self.start = int(numbers[0])


def run_until_killed(directory: Path, seed: int) -> Reported:
    """Start the child, let it work a while, SIGKILL it; returns what it reported as durable."""
    rng = random.Random(seed)
    child = subprocess.Popen([sys.executable, str(CHILD), str(directory), str(seed)],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)  # fmt: skip
    reported = Reported()
    try:
        assert child.stdout is not None
        first = child.stdout.readline()
        assert first.startswith("opened "), first + child.stderr.read()
        for _ in range(rng.randint(20, 80)):
            line = child.stdout.readline()
            assert line, child.stderr.read()
            reported.note(line)
        time.sleep(rng.random() * 0.05)
        child.send_signal(signal.SIGKILL)
        for line in child.stdout:
            reported.note(line)
    finally:
        child.kill()
        child.wait(30)
    assert child.returncode == -signal.SIGKILL
    return reported


def test_snapshots_and_start_offsets_survive_sigkill(tmp_path: Path) -> None:
    directory = tmp_path / "__cluster_metadata-0"
    durable_start = 0
    durable_snapshot: OffsetAndEpoch | None = None
    snapshots_seen = starts_seen = 0
    for round_number in range(ROUNDS):
        reported = run_until_killed(directory, seed=round_number)
        durable_start = max(durable_start, reported.start)
        if reported.snapshot is not None:
            durable_snapshot = reported.snapshot
            snapshots_seen += 1
        starts_seen += reported.start > 0
        # start-up, as a node does it
        clean_partial_snapshots(directory)
        assert not list(directory.glob("*.part"))
        for snapshot_id in list_snapshots(directory):
            with SnapshotReader.open(directory, snapshot_id) as reader:
                assert set(reader) == {b"state up to %d" % snapshot_id.offset}
        latest = latest_snapshot(directory)
        if durable_snapshot is not None:
            assert latest is not None and (latest.epoch, latest.offset) >= (durable_snapshot.epoch,
                                                                            durable_snapshot.offset)
        with Log(directory, segment_bytes=SEGMENT_BYTES) as log:
            if latest is not None:
                assert not log.set_snapshot_boundary(latest), "snapshots are taken of flushed records"
                assert log.start_offset <= latest.offset
            assert log.start_offset >= durable_start
            assert log.end_offset >= reported.flushed
            expected = None
            for batch in log.iter_batches():
                check_batch_contents(batch)
                assert expected is None or batch.base_offset == expected
                expected = batch.next_offset
            assert expected is None or expected == log.end_offset
    assert snapshots_seen and starts_seen, "the test should have snapshotted and advanced the start"
