"""What a megabyte written into new page-cache pages costs this machine: the floor under every
append a broker makes (Kafka's defaults: no fsync, an append reaches the page cache).

On this project's VMs the figure moves by 10x with the machine's memory: 0.2 ms of CPU per MB into
pages the kernel recycles, 2.4 ms into pages the host must back anew (the guest reports free memory
to its host, `/sys/module/page_reporting`), and the brokers' appends move with it, within a run too.
The benchmarks that write print it beside their rows, so a run's figures can be read against the
memory it had.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

FLOOR_BYTES = 256 << 20
"""Enough to run past the few hundred megabytes of pages a machine has just freed."""
CHUNK_BYTES = 10 << 20
"""replica.fetch.response.max.bytes (Kafka's default): what a catching-up follower appends at a time."""


def write_file(path: Path, size: int, chunk_bytes: int = CHUNK_BYTES) -> tuple[float, float]:
    """`size` bytes written into the new file `path` in `chunk_bytes` writes (a loop, as Log.append's),
    not fsynced: (seconds, CPU seconds of this process, the kernel's copy into the page cache included)."""
    chunk = os.urandom(chunk_bytes)
    started, cpu = time.perf_counter(), time.process_time()
    with open(path, "wb", buffering=0) as out:
        left = size
        while left > 0:
            view = memoryview(chunk)[:min(left, len(chunk))]
            while view:
                view = view[out.write(view):]
            left -= len(chunk)
    return time.perf_counter() - started, time.process_time() - cpu


def raw_write(directory: Path, size: int, chunk_bytes: int = CHUNK_BYTES) -> tuple[float, float]:
    """`write_file` into a new file in `directory`, removed after."""
    path = directory / "raw-write.tmp"
    try:
        return write_file(path, size, chunk_bytes)
    finally:
        path.unlink(missing_ok=True)


class PageCacheFloor:
    """FLOOR_BYTES written beside a benchmark's logs before its rows, into a file kept until `close`:
    removed at once, its pages (just backed) would go to the first rows' appends and make them cheaper
    than the memory the machine had."""

    def __init__(self, directory: Path, where: str) -> None:
        self.path = directory / "page-cache-floor.tmp"
        seconds, cpu = write_file(self.path, FLOOR_BYTES)
        mb = FLOOR_BYTES / 1e6
        self.line = (f"page cache floor, before the rows: {mb:.0f} MB written to a new file {where} at "
                     f"{mb / seconds:,.0f} MB/s, {1000 * cpu / mb:.2f} ms of CPU per MB (the kernel's copy into new "
                     "pages: benchmarks/page_cache)")

    def close(self) -> None:
        self.path.unlink(missing_ok=True)
