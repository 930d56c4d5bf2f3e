"""Durable log: appends per second with an fsync per append, beside the disk's raw write+fsync rate.

Run: `./run bench` (all benchmarks), `.venv/bin/python -m benchmarks.bench_log`, or
`.venv/bin/python benchmarks/bench_log.py`. Set BENCH_LOG_DIR to measure another filesystem
(the default is a temporary directory under the current one, i.e. the disk the project is on).

"raw" is the floor any durable log pays: `os.write` of the same bytes to a plain file, then
`os.fsync`, in the same run on the same filesystem. "Log.append + flush" is what the Raft driver
does for each AppendBatches action (validate, write, index, fsync), so its ratio to raw is the
cost of everything `quorum.log` adds. "no flush" shows the write path without waiting for the
disk (on a slow disk the kernel's dirty-page writeback throttles it too). The recovery table
shows what opening a log costs with and without CRC-scanning every segment
(`verify_all_segments`).
"""

from __future__ import annotations

import os
import sys
import tempfile
import time
from pathlib import Path

if __package__ in (None, ""):  # run as a script: make `benchmarks` and `quorum` importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.table import print_table, progress, rate  # noqa: E402
from quorum.log import Log  # noqa: E402
from quorum.wire.records import Record, build_batch, patch_base_offset  # noqa: E402

BATCH_SIZES = (1 << 10, 64 << 10)
SECONDS_PER_MEASUREMENT = 0.5
#: Raw and log measurements alternate this many times and the best of each is kept, so a burst of
#: background I/O on a shared disk does not land on one side only.
ROUNDS = 5
RECORDS_PER_BATCH = 8
RECOVERY_LOG_BYTES = 256 << 20
RECOVERY_SEGMENT_BYTES = 64 << 20


def make_batch(target_size: int, records: int = RECORDS_PER_BATCH) -> bytearray:
    """A batch of about `target_size` bytes whose base offset is patched per append (outside the CRC)."""
    overhead = len(build_batch([Record(i, 0, b"k", b"") for i in range(records)]))
    value = os.urandom(max(target_size - overhead, records) // records)
    return bytearray(build_batch([Record(i, 1_763_700_000_000, b"k", value) for i in range(records)],
                                 partition_leader_epoch=1))  # fmt: skip


def raw_rate(directory: Path, data: bytes) -> float:
    fd = os.open(directory / "raw.bin", os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:

        def write_and_fsync() -> None:
            os.write(fd, data)
            os.fsync(fd)

        return rate(write_and_fsync, SECONDS_PER_MEASUREMENT)
    finally:
        os.close(fd)


def log_rate(directory: Path, batch: bytearray, flush: bool) -> float:
    log = Log(directory / ("flushed" if flush else "unflushed"))
    log.truncate_to(log.start_offset)  # each round starts from an empty log, as the raw file does
    try:

        def append() -> None:
            patch_base_offset(batch, 0, log.end_offset)
            log.append(batch)
            if flush:
                log.flush()

        return rate(append, SECONDS_PER_MEASUREMENT)
    finally:
        log.close()


def measure(directory: Path, size: int) -> list[tuple[object, ...]]:
    batch = make_batch(size)
    label = f"{len(batch) / 1024:,.0f} KiB"
    progress(f"{label} batches: raw write+fsync, Log.append+flush, Log.append")
    raw = durable = cached = 0.0
    for _ in range(ROUNDS):
        raw = max(raw, raw_rate(directory, bytes(batch)))
        durable = max(durable, log_rate(directory, batch, flush=True))
        cached = max(cached, log_rate(directory, batch, flush=False))
    megabytes = len(batch) / 1e6
    return [
        (label, "os.write + os.fsync (plain file)", raw, raw * megabytes, "1.00x"),
        (label, "Log.append + Log.flush", durable, durable * megabytes, f"{durable / raw:.2f}x"),
        (label, "Log.append, no flush (page cache)", cached, cached * megabytes, "-"),
    ]


def measure_recovery(directory: Path) -> list[tuple[object, ...]]:
    """Open time of a log of RECOVERY_LOG_BYTES in 64 KiB batches, CRC-scanning all or the last segment."""
    path = directory / "recovery"
    batch = make_batch(64 << 10)
    progress(f"writing a {RECOVERY_LOG_BYTES >> 20} MiB log for the recovery measurement")
    with Log(path, segment_bytes=RECOVERY_SEGMENT_BYTES) as log:
        while (log.end_offset // RECORDS_PER_BATCH) * len(batch) < RECOVERY_LOG_BYTES:
            patch_base_offset(batch, 0, log.end_offset)
            log.append(batch)
        segments = len(log.segment_base_offsets)
    rows = []
    for verify_all in (True, False):
        start = time.perf_counter()
        Log(path, segment_bytes=RECOVERY_SEGMENT_BYTES, verify_all_segments=verify_all).close()
        elapsed = time.perf_counter() - start
        scanned = RECOVERY_LOG_BYTES if verify_all else RECOVERY_LOG_BYTES // segments
        rows.append((
            "verify_all_segments=True (default)" if verify_all else "verify_all_segments=False",
            f"{RECOVERY_LOG_BYTES >> 20} MiB / {segments} segments", elapsed * 1000, scanned / elapsed / 1e6,
        ))  # fmt: skip
    return rows


def main() -> None:
    base = Path(os.environ.get("BENCH_LOG_DIR", "."))
    with tempfile.TemporaryDirectory(prefix="bench-log-", dir=base) as name:
        directory = Path(name)
        progress(f"measuring in {directory.resolve()}")
        rows = [row for size in BATCH_SIZES for row in measure(directory, size)]
        recovery = measure_recovery(directory)
    print_table(
        f"Durable appends: one batch per append, fsync per append (best of {ROUNDS} alternating runs)",
        ["batch", "path", "appends/s", "MB/s", "vs raw"],
        rows,
    )
    print_table(
        "Opening (recovering) a log: CRC scan of every segment or of the last one (page cache warm)",
        ["mode", "log", "open ms", "MB/s scanned"],
        recovery,
    )


if __name__ == "__main__":
    main()
