"""Which chunks of remote `.log` objects to GET for a read, and which to fetch ahead: sans-IO.

Why: a consumer reading tiered data asks for ~1 MiB per Fetch, one after the other; a range GET
of each, in series, waits out S3's per-request latency every time (moto: ~15 ms a request, so a
sequential reader got 18 MB/s from an endpoint that serves 190 MB/s in 8 MiB GETs). As in Aiven's
tiered-storage plug-in, a segment's `.log` is read in fixed chunks (`rsm.config.chunk.size`), kept
in a size-bounded cache (`fetch.chunk.cache.size`), and when a read ends the chunks that follow it,
up to `fetch.chunk.cache.prefetch.max.size` bytes, are fetched in parallel while the consumer
handles what it got, running on into the next segment when the read is near the end of this one.

Chunk `i` of a `size`-byte object covers bytes [i * chunk_size, min(size, (i + 1) * chunk_size)).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class ChunkPlan:
    """What one read needs: `needed` chunks now (those not already cached or on their way), and
    `ahead` chunks to fetch in the background; `ahead_left` is the prefetch budget this segment
    did not use (bytes), for the next segment's first chunks."""

    needed: tuple[int, ...]
    ahead: tuple[int, ...]
    ahead_left: int


def chunk_bounds(index: int, chunk_size: int, size: int) -> tuple[int, int]:
    """Bytes [start, end) of chunk `index` of a `size`-byte object; ValueError past its end."""
    start = index * chunk_size
    if index < 0 or start >= size:
        raise ValueError(f"chunk {index} of {chunk_size} bytes is outside an object of {size} bytes")
    return start, min(size, start + chunk_size)


def chunks_covering(start: int, end: int, chunk_size: int) -> range:
    """The chunks holding bytes [start, end) (empty when end <= start)."""
    if chunk_size <= 0:
        raise ValueError(f"chunk size must be positive, got {chunk_size}")
    if end <= start:
        return range(0)
    return range(start // chunk_size, (end - 1) // chunk_size + 1)


def plan_read(
    size: int, chunk_size: int, start: int, end: int, prefetch_bytes: int, present: Callable[[int], bool]
) -> ChunkPlan:
    """The chunks to read bytes [start, end) of a `size`-byte object, and those after them to
    fetch ahead: up to `prefetch_bytes` counted from `end` (the rest of the chunk holding `end`
    counts for what it holds past it); `present(i)` is whether chunk i is cached or in flight."""
    end = min(end, size)
    covering = chunks_covering(start, end, chunk_size)
    needed = tuple(i for i in covering if not present(i))
    ahead: list[int] = []
    budget = max(prefetch_bytes, 0)
    index = end // chunk_size  # the chunk holding the first byte after the read
    while budget > 0 and index * chunk_size < size:
        chunk_start, chunk_end = chunk_bounds(index, chunk_size, size)
        if index not in covering and not present(index):
            ahead.append(index)
        budget -= chunk_end - max(chunk_start, end)
        index += 1
    return ChunkPlan(needed, tuple(ahead), max(budget, 0))


def plan_next_segment(size: int, chunk_size: int, budget: int, present: Callable[[int], bool]) -> tuple[int, ...]:
    """The first chunks of the following segment that the leftover prefetch `budget` covers."""
    return plan_read(size, chunk_size, 0, 0, budget, present).ahead
