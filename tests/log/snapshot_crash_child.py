"""Child process of test_snapshot_crash: a Raft log's life with snapshots, until SIGKILL.

Run as `python snapshot_crash_child.py DIRECTORY SEED`. At start-up it does what a node does
(clean partial snapshots, open the log, give it the latest snapshot, delete snapshots below the
log start); then it appends and flushes, and now and then freezes a snapshot at the flushed end
and advances the log start offset to it. Each line it prints is reported only after the step is
durable: "flushed N", "snapshot OFFSET EPOCH", "start N".
"""

from __future__ import annotations

import random
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from quorum.log import Log  # noqa: E402
from quorum.log.snapshot import (  # noqa: E402
    SnapshotWriter,
    clean_partial_snapshots,
    delete_snapshots_below,
    latest_snapshot,
)
from quorum.raft.interface import OffsetAndEpoch  # noqa: E402
from tests.log.helpers import make_batch  # noqa: E402

SEGMENT_BYTES = 64 << 10


def main() -> None:
    directory, seed = Path(sys.argv[1]), int(sys.argv[2])
    rng = random.Random(seed)
    clean_partial_snapshots(directory)
    log = Log(directory, segment_bytes=SEGMENT_BYTES)
    latest = latest_snapshot(directory)
    if latest is not None:
        log.set_snapshot_boundary(latest)
    delete_snapshots_below(directory, log.start_offset)
    epoch = log.last_fetched_epoch() + 1
    print(f"opened {log.start_offset} {log.end_offset}", flush=True)
    while True:
        for _ in range(rng.randint(1, 4)):
            log.append(make_batch(log.end_offset, rng.randint(1, 5), epoch, rng.choice((100, 1000, 20_000))))
        flushed = log.flush()
        print(f"flushed {flushed}", flush=True)
        if rng.random() < 0.3:
            snapshot_id = OffsetAndEpoch(flushed, log.last_fetched_epoch())
            with SnapshotWriter(directory, snapshot_id, 0, max_batch_bytes=2048) as writer:
                for _ in range(rng.randint(1, 20)):
                    writer.append([b"state up to %d" % flushed] * rng.randint(1, 200))
                writer.freeze()
            log.set_snapshot_boundary(snapshot_id)
            print(f"snapshot {snapshot_id.offset} {snapshot_id.epoch}", flush=True)
            if rng.random() < 0.7:
                log.advance_start_offset(snapshot_id.offset)
                print(f"start {snapshot_id.offset}", flush=True)
                delete_snapshots_below(directory, snapshot_id.offset)


if __name__ == "__main__":
    main()
