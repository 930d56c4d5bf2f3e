"""Keep freed megabyte buffers in the node's heap instead of handing them back to the kernel.

A broker allocates and frees buffers of about a megabyte all the time: each Produce request's frame,
each decompressed batch the leader checks, each segment read. glibc serves those either from fresh
`mmap`s or from heap it then trims back to the kernel once the top of the heap is free, so the next
buffer comes back as new pages: a page fault and a zeroed page for every 4 KiB. perf on a broker under
lz4 produce showed page faults and page clearing at a quarter of its CPU, and which mode glibc fell
into changed from run to run (2.3 against 1.2 ms of CPU per MB). With buffers up to
`MMAP_THRESHOLD_BYTES` taken from the heap and `TRIM_THRESHOLD_BYTES` of free heap kept, those
pages are reused; the JVM does the same for Kafka with its own heap. The cost is memory a node keeps
after a burst: at most the trim threshold above what it uses.

Only glibc has `mallopt`; elsewhere this does nothing.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import logging

log = logging.getLogger(__name__)

M_TRIM_THRESHOLD = -1  # glibc's <malloc.h>
M_MMAP_THRESHOLD = -3
MMAP_THRESHOLD_BYTES = 8 * 1024 * 1024
TRIM_THRESHOLD_BYTES = 64 * 1024 * 1024


def keep_freed_buffers() -> bool:
    """Set the thresholds above for this process; False where the C library has no mallopt."""
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        mallopt = libc.mallopt
    except (OSError, AttributeError):
        return False
    mallopt.argtypes = (ctypes.c_int, ctypes.c_int)
    mallopt.restype = ctypes.c_int
    done = bool(mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD_BYTES)) and bool(mallopt(M_TRIM_THRESHOLD,
                                                                                   TRIM_THRESHOLD_BYTES))
    if not done:
        log.info("mallopt refused the allocator thresholds; freed buffers may go back to the kernel")
    return done
