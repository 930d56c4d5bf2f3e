"""Which chunks of remote `.log` objects to GET for a read, and which to fetch ahead: sans-IO.

Why: a consumer reading tiered data asks for ~1 MiB per Fetch, one after the other; a range GET
of each, in series, waits out S3's per-request latency every time (moto: ~15 ms a request, so a
sequential reader got 18 MB/s from an endpoint that serves 190 MB/s in 8 MiB GETs). As in Aiven's
tiered-storage plug-in, a segment's `.log` is read in fixed chunks (`rsm.config.chunk.size`), kept
in a size-bounded cache (`fetch.chunk.cache.size`), and when a read ends the chunks that follow it,
up to `fetch.chunk.cache.prefetch.max.size` bytes, are fetched in parallel while the consumer
handles what it got, running on into the next segment when the read is near the end of this one.
How deep depends on the reader (`SequentialReads`): a reader that goes on where its last read
ended gets a deeper fetch-ahead each time, up to the prefetch size; any other starts shallow.

Chunk `i` of a `size`-byte object covers bytes [i * chunk_size, min(size, (i + 1) * chunk_size)).
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Hashable
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


def worth_starting(missing: int, depth: int, next_missing: bool, at_end: bool = False) -> bool:
    """Whether a read's fetch-ahead starts its `missing` bytes of chunks now, `depth` being the
    window it keeps ahead of the reader: when the chunk right after the read is missing (the reader
    would wait for it), or half the window is, or the window reaches past the last segment (`at_end`:
    what is missing will never grow to half of it); else it waits until the reader has consumed that
    much.

    Why: the window slides with every ~1 MiB read, so started at once each read's new chunk went out
    on its own, a GET per chunk; waiting for half the window sends the chunks the reader consumed
    meanwhile as runs of consecutive chunks, one ranged GET each (`runs`), and per byte a GET of
    several chunks costs the broker (botocore's request) and the endpoint (moto reads the whole
    object for any range) about half what a GET of one does (20 MiB objects: client 10 ms against
    17-20, moto 12 ms against 28-30)."""
    return missing > 0 and (next_missing or at_end or 2 * missing >= depth)


def runs(indexes: tuple[int, ...]) -> list[range]:
    """`indexes` (ascending) as runs of consecutive chunks: one ranged GET each."""
    found: list[range] = []
    for index in indexes:
        if found and found[-1].stop == index:
            found[-1] = range(found[-1].start, index + 1)
        else:
            found.append(range(index, index + 1))
    return found


def plan_next_segment(size: int, chunk_size: int, budget: int, present: Callable[[int], bool]) -> tuple[int, ...]:
    """The first chunks of the following segment that the leftover prefetch `budget` covers."""
    return plan_read(size, chunk_size, 0, 0, budget, present).ahead


@dataclass(frozen=True, slots=True)
class ReadStart:
    """Where a read starts, as far as the reader's history says: `position` is the byte where the
    stream's previous read ended when this read continues it in the same segment (the offset index
    is not needed), else None; `depth` is how many bytes to fetch ahead of this read."""

    position: int | None
    depth: int


@dataclass(frozen=True, slots=True)
class _LastRead:
    next_offset: int
    segment_id: Hashable
    position: int
    depth: int
    start_offset: int
    start_position: int


class SequentialReads:
    """Each stream's (a partition's) last read, to tell a sequential reader from a random one:
    a read starting at the offset where the stream's previous read ended continues it, and its
    fetch-ahead depth doubles, from `base` up to `maximum` bytes (Linux's readahead window does
    the same); any other read starts again at `base`.

    Why: a backfilling consumer reads a cached chunk in ~1 ms and a chunk's GET takes 100-250 ms,
    so with a fixed shallow depth (two chunks) the reader caught up with the GETs at every chunk
    boundary and waited for them (bench_tiered: 0.59-0.74x the local disk); a deep fetch-ahead
    for every read would GET megabytes nobody reads when a consumer seeks around. The previous
    read's end is also where the next one starts, which saves the offset index lookup.

    Bounded to `streams` streams, the least recently read forgotten. Sans-IO, not thread-safe:
    the caller holds its lock."""

    def __init__(self, base: int, maximum: int, streams: int = 1024) -> None:
        if streams <= 0:
            raise ValueError(f"streams must be positive, got {streams}")
        self.base = max(0, min(base, maximum))
        self.maximum = max(0, maximum)
        self._streams = streams
        self._last: OrderedDict[Hashable, _LastRead] = OrderedDict()

    def start(self, stream: Hashable, segment_id: Hashable, offset: int) -> ReadStart:
        """A read of `stream` at `offset` in segment `segment_id`: see ReadStart."""
        last = self._last.get(stream)
        if last is not None and last.start_offset == offset and last.segment_id == segment_id:
            # the same read again: its answer never reached the consumer (remote.fetch.max.wait.ms
            # ran out, the connection broke), which asks again from where it was
            return ReadStart(last.start_position, last.depth)
        if last is None or last.next_offset != offset:
            return ReadStart(None, self.base)
        depth = min(self.maximum, max(last.depth * 2, self.base, 1))
        return ReadStart(last.position if last.segment_id == segment_id else None, depth)

    def ended(
        self,
        stream: Hashable,
        segment_id: Hashable,
        next_offset: int,
        position: int,
        depth: int,
        start: tuple[int, int] = (-1, -1),
    ) -> None:
        """The read that `start` planned with `depth` ended before `next_offset`, at byte `position`
        of segment `segment_id`; it started at offset `start[0]`, byte `start[1]` (remembered for a
        read of the same offset again)."""
        self._last[stream] = _LastRead(next_offset, segment_id, position, depth, *start)
        self._last.move_to_end(stream)
        while len(self._last) > self._streams:
            self._last.popitem(last=False)
