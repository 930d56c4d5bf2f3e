"""Child process of test_crash: appends and flushes forever, reporting each flushed offset.

Run as `python crash_child.py DIRECTORY SEED SEGMENT_BYTES`; prints one line per flush,
"<flushed offset>", only after `Log.flush` returned, which is exactly what a node may
acknowledge. The parent kills it with SIGKILL at a random moment.
"""

from __future__ import annotations

import random
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from quorum.log import Log  # noqa: E402
from tests.log.helpers import make_batch  # noqa: E402


def main() -> None:
    directory, seed, segment_bytes = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    rng = random.Random(seed)
    log = Log(directory, segment_bytes=segment_bytes)
    epoch = log.last_fetched_epoch() + 1  # a new leader epoch per life, as after an election
    print(f"start {log.end_offset}", flush=True)
    while True:
        for _ in range(rng.randint(1, 4)):
            # mostly small batches, sometimes a big one whose write a kill may interrupt
            size = rng.choice((100, 1000, 20_000, 300_000))
            log.append(make_batch(log.end_offset, rng.randint(1, 5), epoch, size))
        print(log.flush(), flush=True)


if __name__ == "__main__":
    main()
