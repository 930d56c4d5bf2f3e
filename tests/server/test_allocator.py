"""The node's allocator thresholds (quorum.server.allocator) are ones glibc accepts: mallopt refuses an
mmap threshold above its maximum (32 MiB on 64-bit), and a refused one would silently leave the page
faults the tuning is for (perf: a quarter of a broker's CPU under lz4 produce)."""

from __future__ import annotations

import platform

import pytest

from quorum.server.allocator import MMAP_THRESHOLD_BYTES, keep_freed_buffers


@pytest.mark.skipif(platform.libc_ver()[0] != "glibc", reason="mallopt is glibc's")
def test_glibc_takes_the_thresholds() -> None:
    assert MMAP_THRESHOLD_BYTES <= 32 * 1024 * 1024
    assert keep_freed_buffers()
