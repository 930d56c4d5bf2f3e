"""KIP-630 snapshots: write and load the metadata of 100,000 topics x 10 partitions (KIP-630's
sizing example), each step beside the raw sequential read rate of the same file, measured in the
same run on the same disk.

Run: `./run bench` (all benchmarks), `.venv/bin/python -m benchmarks.bench_snapshot`, or
`.venv/bin/python benchmarks/bench_snapshot.py`. Set BENCH_SNAPSHOT_DIR to measure another
filesystem (the default is a temporary directory under the current one).

The snapshot holds one TopicRecord (v0, with this project's KIP-232 topic epoch tag) per topic and
one PartitionRecord (v0, 3 replicas out of 100 brokers, all in sync) per partition, each encoded
with `encode_metadata_record` and written by `SnapshotWriter` (its default 1 MiB batches,
uncompressed). Generation and loading each run in a child process, so that the peak
resident memory (`ru_maxrss`) reported is the step's own; a child that only imports the same
modules gives the interpreter's baseline.

"raw read" is `os.read` of the same file in 1 MiB chunks. Dropping a file from the page cache
needs no root: `posix_fadvise(POSIX_FADV_DONTNEED)` asks the kernel to evict its clean pages, so
the "cold" figures read from the disk where the kernel honours the advice (some container
filesystems do not; then cold and warm come out alike; on a virtual machine the host may still
cache the disk image). The load is measured cold the same way:
validation reads the file from the disk, iteration then reads it again from the page cache.
"""

from __future__ import annotations

import json
import os
import random
import resource
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

if __package__ in (None, ""):  # run as a script: make `benchmarks` and `quorum` importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.table import print_table, progress  # noqa: E402
from quorum.log.snapshot import SnapshotReader, SnapshotWriter, snapshot_path  # noqa: E402
from quorum.raft.interface import OffsetAndEpoch  # noqa: E402
from quorum.wire.metadata_records import (  # noqa: E402
    PartitionRecord,
    TopicRecord,
    decode_metadata_record,
    encode_metadata_record,
)

TOPICS = 100_000
PARTITIONS = 10
BROKERS = 100
REPLICATION = 3
SNAPSHOT_ID = OffsetAndEpoch(5_120_793, 2)
READ_CHUNK = 1 << 20
ROOT = Path(__file__).resolve().parent.parent


# -- children ---------------------------------------------------------------------------------------


def peak_rss_mb() -> float:
    """This process's peak resident set size (Linux reports KiB)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024 / 1e6


def generate(directory: Path) -> dict[str, float]:
    """Write the snapshot; times encoding and the writer (batching, writes, fsync, validation) apart."""
    rng = random.Random(630)
    encode_seconds = write_seconds = 0.0
    records = 0
    start = time.perf_counter()
    writer = SnapshotWriter(directory, SNAPSHOT_ID, last_contained_log_timestamp=1_763_700_000_000)
    for topic in range(TOPICS):
        began = time.perf_counter()
        topic_id = uuid.UUID(int=rng.getrandbits(128))
        values = [encode_metadata_record(TopicRecord(version=0, name=f"topic-{topic:06d}", topic_id=topic_id,
                                                     topic_epoch=topic + 1))]  # fmt: skip
        for partition in range(PARTITIONS):
            replicas = rng.sample(range(BROKERS), REPLICATION)
            values.append(encode_metadata_record(PartitionRecord(
                version=0, partition_id=partition, topic_id=topic_id, replicas=replicas, isr=replicas,
                removing_replicas=[], adding_replicas=[], leader=replicas[0], leader_epoch=0, partition_epoch=0,
            )))  # fmt: skip
        wrote = time.perf_counter()
        writer.append(values)
        write_seconds += time.perf_counter() - wrote
        encode_seconds += wrote - began
        records += len(values)
        if (topic + 1) % 25_000 == 0:
            progress(f"generate: {topic + 1:,} topics encoded")
    frozen = time.perf_counter()
    size = writer.freeze()
    freeze_seconds = time.perf_counter() - frozen
    return {
        "total": time.perf_counter() - start, "encode": encode_seconds, "write": write_seconds + freeze_seconds,
        "freeze": freeze_seconds, "size": size, "records": records, "peak_rss_mb": peak_rss_mb(),
    }  # fmt: skip


def load(path: Path) -> dict[str, float]:
    """Validate, then stream the values (batch decoding) and decode every metadata record,
    dropping each: a metadata image would keep them, which is the image's cost, not the file's."""
    clock = time.perf_counter
    start = clock()
    reader = SnapshotReader(path)
    validated = clock()
    decode_seconds = 0.0
    kinds: dict[str, int] = {}
    for number, value in enumerate(reader):
        began = clock()
        name = type(decode_metadata_record(value)).__name__
        decode_seconds += clock() - began
        kinds[name] = kinds.get(name, 0) + 1
        if (number + 1) % 275_000 == 0:
            progress(f"load: {number + 1:,} records decoded")
    done = clock()
    reader.close()
    assert kinds == {"TopicRecord": TOPICS, "PartitionRecord": TOPICS * PARTITIONS}, kinds
    return {
        "validate": validated - start, "iterate": done - validated - decode_seconds, "decode": decode_seconds,
        "total": done - start, "records": sum(kinds.values()), "batches": reader.batch_count,
        "peak_rss_mb": peak_rss_mb(),
    }  # fmt: skip


def child_main(mode: str, argument: str) -> None:
    if mode == "generate":
        result = generate(Path(argument))
    elif mode == "load":
        result = load(Path(argument))
    else:
        result = {"peak_rss_mb": peak_rss_mb()}
    print(json.dumps(result), flush=True)


def run_child(mode: str, argument: str) -> dict[str, float]:
    output = subprocess.run([sys.executable, "-m", "benchmarks.bench_snapshot", "--child", mode, argument],
                            cwd=ROOT, stdout=subprocess.PIPE, text=True, check=True).stdout  # fmt: skip
    return json.loads(output.strip().splitlines()[-1])


# -- the parent ---------------------------------------------------------------------------------------


def drop_from_cache(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)  # only clean pages can be dropped
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    finally:
        os.close(fd)


def raw_read_seconds(path: Path) -> float:
    fd = os.open(path, os.O_RDONLY)
    try:
        start = time.perf_counter()
        while os.read(fd, READ_CHUNK):
            pass
        return time.perf_counter() - start
    finally:
        os.close(fd)


def cold_read_seconds(path: Path) -> float:
    drop_from_cache(path)
    return raw_read_seconds(path)


def ratio(seconds: float, raw: float) -> str:
    value = seconds / raw
    return f"{value:,.0f}x" if value >= 10 else f"{value:.1f}x"


def main() -> None:
    base = Path(os.environ.get("BENCH_SNAPSHOT_DIR", "."))
    with tempfile.TemporaryDirectory(prefix="bench-snapshot-", dir=base) as name:
        directory = Path(name)
        path = snapshot_path(directory, SNAPSHOT_ID)
        progress(f"measuring in {directory.resolve()}: {TOPICS:,} topics x {PARTITIONS} partitions")
        baseline = run_child("baseline", "-")
        progress("generate (a child process)")
        made = run_child("generate", str(directory))
        size = made["size"]
        progress(f"snapshot written: {size / 1e6:,.1f} MB; raw reads of it")
        cold = min(cold_read_seconds(path) for _ in range(3))
        warm = min(raw_read_seconds(path) for _ in range(3))
        progress("load (a child process, file dropped from the page cache first)")
        drop_from_cache(path)
        loaded = run_child("load", str(path))
    megabytes = size / 1e6

    def row(step: str, seconds: float, raw: float, note: str) -> tuple[object, ...]:
        return step, seconds, megabytes / seconds, megabytes / raw, ratio(seconds, raw), note

    print_table(
        f"Snapshot of {TOPICS:,} topics x {PARTITIONS} partitions: {made['records']:,} records, "
        f"{megabytes:,.1f} MB, beside raw reads of the same file",
        ["step", "seconds", "MB/s", "raw read MB/s", "time vs raw read", "what"],
        [
            row("raw read, cold", cold, cold, "os.read 1 MiB chunks after POSIX_FADV_DONTNEED (best of 3)"),
            row("raw read, warm", warm, warm, "os.read 1 MiB chunks from the page cache (best of 3)"),
            row("generate", made["total"], cold, "encode + SnapshotWriter, fsync, validate, rename"),
            row("  encode records", made["encode"], cold, "build and encode_metadata_record"),
            row("  SnapshotWriter", made["write"], cold, "batches, writes, freeze (fsync, validate, rename)"),
            row("load", loaded["total"], cold, "validate + iterate + decode (file cold)"),
            row("  validate", loaded["validate"], cold, "framing, CRC, header, footer (disk read)"),
            row("  iterate values", loaded["iterate"], warm, "CRC again + batch decoding (page cache)"),
            row("  decode records", loaded["decode"], warm, "decode_metadata_record per value"),
        ],
    )
    print_table(
        "Size and peak memory (peak RSS of each child process; baseline = interpreter + imports)",
        ["figure", "value"],
        [
            ("file size, MB", megabytes),
            ("records", int(made["records"])),
            ("batches (header and footer included)", int(loaded["batches"])),
            ("bytes per record", size / made["records"]),
            ("peak RSS, baseline child, MB", baseline["peak_rss_mb"]),
            ("peak RSS, generate, MB", made["peak_rss_mb"]),
            ("peak RSS, load (streamed: each record decoded, then dropped), MB", loaded["peak_rss_mb"]),
        ],
    )


if __name__ == "__main__":
    if len(sys.argv) == 4 and sys.argv[1] == "--child":
        child_main(sys.argv[2], sys.argv[3])
    else:
        main()
