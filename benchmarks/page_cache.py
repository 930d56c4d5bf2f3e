"""What a megabyte written into new page-cache pages costs this machine now: the floor under every
append a broker makes (Kafka's defaults: no fsync, an append reaches the page cache).

On this project's VMs the figure moves by 10x with the machine's memory: 0.2 ms of CPU per MB into
pages the kernel recycles, 2.4 ms into pages the host must back anew (the guest reports free memory
to its host, `/sys/module/page_reporting`), and the brokers' appends move with it. The benchmarks
that write print it beside their rows, so a run's figures can be read against the memory it had.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

FLOOR_BYTES = 256 << 20
"""Written after a benchmark's rows (before them, the pages it frees would make the first rows' appends
cheaper): enough to run past the few hundred megabytes of pages just freed."""
CHUNK_BYTES = 10 << 20
"""replica.fetch.response.max.bytes (Kafka's default): what a catching-up follower appends at a time."""


def raw_write(directory: Path, size: int, chunk_bytes: int = CHUNK_BYTES) -> tuple[float, float]:
    """`size` bytes written into a new file in `directory` in `chunk_bytes` writes (a loop, as
    Log.append's), not fsynced, the file removed after: (seconds, CPU seconds of this process, the
    kernel's copy into the page cache included)."""
    chunk = os.urandom(chunk_bytes)
    path = directory / "raw-write-floor.tmp"
    try:
        started, cpu = time.perf_counter(), time.process_time()
        with open(path, "wb", buffering=0) as out:
            left = size
            while left > 0:
                view = memoryview(chunk)[:min(left, len(chunk))]
                while view:
                    view = view[out.write(view):]
                left -= len(chunk)
        return time.perf_counter() - started, time.process_time() - cpu
    finally:
        path.unlink(missing_ok=True)


def floor_line(directory: Path, where: str) -> str:
    """FLOOR_BYTES written into `directory` now, as one line to print under a table."""
    seconds, cpu = raw_write(directory, FLOOR_BYTES)
    mb = FLOOR_BYTES / 1e6
    return (f"page cache floor, after the rows: {mb:.0f} MB written to a new file {where} at {mb / seconds:,.0f} "
            f"MB/s, {1000 * cpu / mb:.2f} ms of CPU per MB (the kernel's copy into new pages: benchmarks/page_cache)")
