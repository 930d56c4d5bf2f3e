"""Log compaction of a `__consumer_offsets` partition: its size and its coordinator load, before and after.

Run: `./run bench` (all benchmarks) or `.venv/bin/python -m benchmarks.bench_log_cleaner`.

The partition holds what the issue-19 soak's groups wrote in an hour: three groups committing 3
partitions each, once a second (one batch of 3 OffsetCommit records per commit, as the group
coordinator appends them), 10,800 commits, 32,400 records. "load" is what a broker does when it
becomes the partition's coordinator: read every batch and replay each record into a
GroupCoordinator (the soak's broker took 12 s for 71,800 records, on the event loop, before issue
19 made it yield). The goal printed beside the figures: after compaction, a load costs about what
the live keys cost (9 here), independent of how many commits were ever made, as in Kafka, where the
cleaner keeps one record per key; and the pass itself takes no longer than a load of the uncleaned
log. Kafka is not run here: its cleaner works on the same records in the JVM, and what is compared
is the shape (records and bytes left), not the JVM's speed.
"""

from __future__ import annotations

import sys
import tempfile
import time
from pathlib import Path

if __package__ in (None, ""):  # run as a script: make `benchmarks` and `quorum` importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.table import print_table, progress  # noqa: E402
from quorum.broker.groups.config import GroupConfig  # noqa: E402
from quorum.broker.groups.coordinator import GroupCoordinator  # noqa: E402
from quorum.log import Log  # noqa: E402
from quorum.log.cleaner import CleanerPolicy, clean  # noqa: E402
from quorum.wire.consumer_offsets import OffsetKey, OffsetValue, encode_record  # noqa: E402
from quorum.wire.records import Record, build_batch  # noqa: E402

GROUPS = ("soak-confluent", "soak-kafka-python", "soak-mirror")
PARTITIONS = 3
COMMITS = 3600  # per group: an hour, one a second
SEGMENT_BYTES = 256 << 10
T0 = 1_763_700_000_000
CONFIG = GroupConfig(group_initial_rebalance_delay_ms=0, offsets_topic_num_partitions=1)


def write_commits(log: Log) -> int:
    """The hour of commits; the number of records written."""
    written = 0
    for second in range(COMMITS):
        for group in GROUPS:
            now = T0 + second * 1000
            items = [encode_record(OffsetKey(group, "soak", p), OffsetValue(second * 100 + p, 5, "", now))
                     for p in range(PARTITIONS)]  # fmt: skip
            base = log.end_offset
            records = [Record(base + i, T0 + second * 1000, key, value) for i, (key, value) in enumerate(items)]
            log.append(build_batch(records, base_offset=base, partition_leader_epoch=0))
            written += len(records)
    log.flush()
    return written


def load(log: Log) -> tuple[float, int, int]:
    """Seconds to replay the whole partition into a coordinator, batches read, records replayed."""
    coordinator = GroupCoordinator(CONFIG)
    coordinator.begin_loading(0)
    started = time.perf_counter()
    batches = records = 0
    for batch in log.iter_batches():
        batches += 1
        pairs = [(record.key or b"", record.value) for record in batch.records()]
        records += len(pairs)
        coordinator.replay(0, pairs)
    coordinator.finish_loading(0, T0)
    return time.perf_counter() - started, batches, records


def main() -> int:
    with (tempfile.TemporaryDirectory(prefix="bench-cleaner-", dir=".") as directory,
          Log(Path(directory), segment_bytes=SEGMENT_BYTES, time_index=True) as log):
        progress(f"writing {COMMITS * len(GROUPS):,} commits of {PARTITIONS} partitions")
        written = write_commits(log)
        size_before = log.size_in_bytes
        load_before, batches_before, records_before = load(log)
        progress("compacting (one pass, as the broker's cleaner runs it)")
        started = time.perf_counter()
        result = clean(log, log.end_offset, log.start_offset, CleanerPolicy(), T0 + COMMITS * 1000)
        clean_s = time.perf_counter() - started
        load_after, batches_after, records_after = load(log)
        size_after = log.size_in_bytes
        segments = len(log.segment_base_offsets)
    live = len(GROUPS) * PARTITIONS
    print_table(
        f"__consumer_offsets after an hour of commits ({written:,} records, {segments} segments of "
        f"{SEGMENT_BYTES >> 10} KiB; the active one is never cleaned)",
        ["", "before", "after one pass", "goal"],
        [
            ["bytes", f"{size_before:,}", f"{size_after:,}", "the active segment's, plus a header per segment"],
            ["batches read by a load", f"{batches_before:,}", f"{batches_after:,}", ""],
            ["records replayed by a load", f"{records_before:,}", f"{records_after:,}",
             f"the live keys ({live}) plus the active segment's"],
            ["load (s)", f"{load_before:.3f}", f"{load_after:.3f}", ""],
            ["cleaning pass (s)", "", f"{clean_s:.3f}", f"about one uncleaned load ({load_before:.3f}), off the loop"],
            ["segments rewritten / read", "", f"{result.segments_rewritten} / {result.segments_read}", ""],
        ],
    )  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
