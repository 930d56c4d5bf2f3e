"""What a megabyte written into new page-cache pages costs this machine: the floor under every
append a broker makes (Kafka's defaults: no fsync, an append reaches the page cache).

On this project's VMs the figure moves by 10x with the machine's memory: 0.2 ms of CPU per MB into
pages the kernel recycles, 2.4 ms into pages the host must back anew (the guest reports free memory
to its host, `/sys/module/page_reporting`), and the brokers' appends move with it, within a run too.
The benchmarks that write print it beside their rows, so a run's figures can be read against the
memory it had.

The other thing that moves a write-heavy row: once a run holds more dirty pages than the kernel's
background threshold (`vm.dirty_background_ratio`, 10% of the memory it can dirty), the flusher writes
back as fast as the broker dirties, and every later row runs at that threshold; a run's first rows
stay under it. `DirtyPages` records the dirty pages at the end of each row, for a line under the table.
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


def dirty_mb() -> float | None:
    """The machine's dirty page-cache pages now, in MB (`nr_dirty` of /proc/vmstat; None off Linux)."""
    try:
        for line in Path("/proc/vmstat").read_text().splitlines():
            name, _, pages = line.partition(" ")
            if name == "nr_dirty":
                return int(pages) * os.sysconf("SC_PAGE_SIZE") / 1e6
    except OSError:
        return None
    return None


def background_threshold_mb() -> float | None:
    """About where the kernel starts writing dirty pages back: `vm.dirty_background_ratio` percent of
    the memory available now (the kernel counts free and reclaimable file pages; MemAvailable is
    close). None where either is not readable, or when a byte count (`dirty_background_bytes`) rules."""
    try:
        if int(Path("/proc/sys/vm/dirty_background_bytes").read_text()) > 0:
            return None
        ratio = int(Path("/proc/sys/vm/dirty_background_ratio").read_text())
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return ratio / 100 * int(line.split()[1]) * 1024 / 1e6
    except (OSError, ValueError):
        return None
    return None


class DirtyPages:
    """The dirty page-cache pages at the end of each row a benchmark names, and the threshold beside them."""

    def __init__(self) -> None:
        self.threshold = background_threshold_mb()
        self.rows: list[tuple[str, float]] = []

    def mark(self, row: str) -> None:
        dirty = dirty_mb()
        if dirty is not None:
            self.rows.append((row, dirty))

    def line(self) -> str | None:
        """One line for under the table, or None when nothing was read."""
        if not self.rows:
            return None
        threshold = "" if self.threshold is None else f" (background writeback from ~{self.threshold:,.0f} MB)"
        rows = "; ".join(f"{row} {dirty:,.0f}" for row, dirty in self.rows)
        return f"dirty page cache at each write row's end, MB{threshold}: {rows}"
