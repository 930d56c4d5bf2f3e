"""Consumers' reads of remote segments: Kafka's RemoteLogReader and its pool, and what bounds them.

A Fetch below the local log start is read on the reader pool (`remote.log.reader.threads`),
through the chunk cache with fetch-ahead (`chunk_cache`), and answered with what is ready rather
than making the broker wait. Only a read that needs no S3 call at all (its bytes all in the chunk
cache, where it starts known without the index) is answered on the event loop, as a local read is:

* the fetch quota (`remote.log.manager.fetch.max.bytes.per.second`, KIP-956) is checked first:
  while it is exceeded the partition is answered empty, as Kafka's ReplicaManager does, after
  waiting out the throttle time up to `remote.fetch.max.wait.ms` (Kafka parks such a Fetch in
  its purgatory for its MaxWaitMs; answering at once would make the consumer spin). The bytes
  a read returns are recorded when it ends;
* a read that finds `remote.log.reader.threads` busy and `remote.log.reader.max.pending.tasks`
  queued is not queued: the partition is answered empty at once (Kafka answers it with an error
  when its pool rejects the task; an empty answer is retried by every client without backoff);
* the fetch-ahead is as deep as the reader is sequential (`fetch_ahead.SequentialReads`): two
  chunks for a read that starts somewhere new, doubled on each read that goes on where the last
  one ended, up to `fetch.chunk.cache.prefetch.max.size`;
* a read that has not finished after `remote.fetch.max.wait.ms` (KIP-1018) is answered empty;
  if it had not started it is cancelled, else it runs on into the chunk cache, where the
  consumer's next Fetch finds it.

`stats` counts what happened ("reads", "bytes", "throttled", "rejected", "expired", "errors",
"cached": reads answered from the cache on the event loop).
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections import Counter
from collections.abc import Awaitable, Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from typing import TypeVar

from quorum.broker.remote_tier import RemoteSegmentMetadata, RemoteStorage, RemoteStorageError
from quorum.wire.spliced import BufferRecords
from tiered_follower import remote_reads
from tiered_follower.chunk_cache import ChunkCache, ChunkCacheConfig
from tiered_follower.fetch_ahead import ReadStart, SequentialReads
from tiered_follower.rlm_config import RemoteLogManagerConfig
from tiered_follower.rlm_quota import ByteRateQuota

logger = logging.getLogger(__name__)

T = TypeVar("T")

BASE_AHEAD_CHUNKS = 2
"""Chunks fetched ahead of a read that does not continue its partition's previous one (the depth a
sequential reader starts from, doubled on each read that continues, up to the prefetch size)."""


class ReaderQueueFull(Exception):
    """Every reader thread is busy and `remote.log.reader.max.pending.tasks` reads are queued."""


def wall_clock_ms() -> int:
    return int(time.time() * 1000)


class RemoteReader:
    """See the module docstring."""

    def __init__(
        self,
        storage: RemoteStorage,
        config: RemoteLogManagerConfig,
        chunks: ChunkCacheConfig,
        name: str = "remote-reader",
        clock_ms: Callable[[], int] = wall_clock_ms,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
    ) -> None:
        self.config = config
        self._clock_ms = clock_ms
        self._sleep = sleep
        self._pool = ThreadPoolExecutor(max_workers=config.reader_threads, thread_name_prefix=name)
        self._limit = config.reader_threads + config.reader_max_pending
        self._outstanding = 0
        self._lock = threading.Lock()
        self.indexes = remote_reads.RemoteIndexCache(storage)
        self.chunks = ChunkCache(storage, chunks, name)
        self._sequential = SequentialReads(BASE_AHEAD_CHUNKS * chunks.chunk_size, chunks.prefetch_max_size)
        """Each partition's last read: how deep to fetch ahead, where the next read starts."""
        self.fetch_quota = ByteRateQuota(config.fetch_quota)
        self.stats: Counter[str] = Counter()

    # -- the pool, bounded ------------------------------------------------------------------------

    def submit(self, fn: Callable[..., T], *args: object) -> Future[T]:
        """`fn(*args)` on the reader pool; ReaderQueueFull when it holds its threads' and
        `reader_max_pending` tasks already."""
        with self._lock:
            if self._outstanding >= self._limit:
                raise ReaderQueueFull(
                    f"{self.config.reader_threads} remote reader threads busy and "
                    f"{self.config.reader_max_pending} reads queued"
                )
            self._outstanding += 1
        try:
            future = self._pool.submit(fn, *args)
        except BaseException:
            self._release()
            raise
        future.add_done_callback(lambda _f: self._release())
        return future

    def _release(self) -> None:
        with self._lock:
            self._outstanding -= 1

    async def run(self, fn: Callable[..., T], *args: object) -> T:
        """`fn(*args)` on the reader pool, awaited (timestamp lookups); raises ReaderQueueFull."""
        return await asyncio.wrap_future(self.submit(fn, *args))

    # -- the fetch quota ----------------------------------------------------------------------------

    def fetch_throttle_ms(self) -> int:
        with self._lock:
            return self.fetch_quota.throttle_ms(self._clock_ms())

    def _record_fetch(self, size: int, failed: bool = False) -> None:
        with self._lock:
            self.fetch_quota.record(size, self._clock_ms())
            self.stats["errors" if failed else "reads"] += 1
            self.stats["bytes"] += size

    # -- reads --------------------------------------------------------------------------------------

    async def read(
        self, segment: RemoteSegmentMetadata, following: Sequence[RemoteSegmentMetadata], offset: int, max_bytes: int
    ) -> BufferRecords:
        """Whole batches from `segment` at `offset` (see `remote_reads.read_batches`), or none when
        the quota, the pool or `remote.fetch.max.wait.ms` says to answer without them; raises
        RemoteStorageError when the read failed. The batches are views of the cached chunks, which
        the Fetch answer writes to the socket as they are (`quorum.wire.spliced`), as a local read
        hands its file span to sendfile: copying each megabyte through the response encoder cost
        the broker three times a local read's CPU (bench_tiered's profile)."""
        throttle_ms = self.fetch_throttle_ms()
        if throttle_ms > 0:
            self.stats["throttled"] += 1
            await self._sleep(min(throttle_ms, self.config.fetch_max_wait_ms) / 1000)
            return BufferRecords(())
        data = self._read_cached(segment, following, offset, max_bytes)
        if data is not None:
            return data
        try:
            future = self.submit(self._read, segment, following, offset, max_bytes)
        except ReaderQueueFull as exc:
            self.stats["rejected"] += 1
            logger.debug("%s at offset %d answered empty: %s", segment.partition, offset, exc)
            return BufferRecords(())
        waiting = asyncio.wrap_future(future)
        try:
            return await asyncio.wait_for(asyncio.shield(waiting), self.config.fetch_max_wait_ms / 1000)
        except TimeoutError:
            self.stats["expired"] += 1
            future.cancel()  # only if it has not started; else it fills the chunk cache
            waiting.add_done_callback(_retrieve)
            return BufferRecords(())

    def _read_cached(
        self, segment: RemoteSegmentMetadata, following: Sequence[RemoteSegmentMetadata], offset: int, max_bytes: int
    ) -> BufferRecords | None:
        """The read on the caller's thread (the event loop) when it needs no S3 call: where it starts
        is known without the index and every byte it returns is in the chunk cache; else None (read
        it on the pool). Why: such a read is ~1 ms of slicing and CRC checks, as a local read, while
        its hop to a reader thread and back cost more than that under load (a backfill's timeline:
        0.74 s of 3.6 s between the Fetch handler asking and getting its cached bytes)."""
        start, position = self._start_of(segment, offset)
        if position is None:
            return None
        try:
            read = remote_reads.read_batches_at(
                _CachedOnly(self.chunks), self.indexes, segment, offset, max_bytes, position
            )
        except _NotCached:
            return None
        except RemoteStorageError:
            return None  # read again on the pool, which GETs the chunk afresh and reports it
        self._ended(segment, following, read, start.depth, (offset, position))
        self.stats["cached"] += 1
        return BufferRecords(read.parts)

    def _start_of(self, segment: RemoteSegmentMetadata, offset: int) -> tuple[ReadStart, int | None]:
        """How deep this read fetches ahead, and the byte where it starts when that is known without
        the offset index: where the partition's previous read ended, or 0 at the segment's start."""
        with self._lock:
            start = self._sequential.start(segment.partition, segment.segment_id, offset)
        if start.position is None and offset <= segment.start_offset:
            return start, 0
        return start, start.position

    def _ended(
        self,
        segment: RemoteSegmentMetadata,
        following: Sequence[RemoteSegmentMetadata],
        read: remote_reads.BatchesRead,
        depth: int,
        start: tuple[int, int],
    ) -> None:
        """A read is done: where it started and ended kept for the partition's next read (offset
        and byte), its bytes counted against the fetch quota, and the fetch-ahead run on from its end."""
        with self._lock:
            self._sequential.ended(segment.partition, segment.segment_id, read.next_offset, read.end, depth, start)
        self._record_fetch(read.size)
        self.chunks.read_ahead(segment, read.end, following, depth)

    def _read(
        self, segment: RemoteSegmentMetadata, following: Sequence[RemoteSegmentMetadata], offset: int, max_bytes: int
    ) -> BufferRecords:
        """On a reader thread: the read through the chunk cache, its bytes recorded against the
        quota, with fetch-ahead as deep as the reader's history says (`fetch_ahead.SequentialReads`).

        Where the read starts is known without the offset index when it continues the partition's
        previous read (or repeats it) or starts the segment, else the index says. When the chunk
        it starts in is neither cached nor on its way (a cold start, a seek), that chunk is fetched
        alone and the fetch-ahead starts when the read ends: GETs in parallel share the S3
        endpoint, so the one chunk the consumer waits for came last with the others (bench_tiered:
        the first records after 160-190 ms, the first chunk's GET beside the second's). Otherwise
        the fetch-ahead is started before the read, so a chunk the read still lacks is fetched
        beside the ones after it. After the read, the fetch-ahead runs on from where it ended. A
        sequential reader never needs the next segment's index (it starts that segment at its
        first offset, byte 0), so none is fetched."""
        start, position = self._start_of(segment, offset)
        try:
            if position is None:
                position = self.indexes.position_for(segment, offset)
            if self.chunks.holds(segment, position):
                self.chunks.read_ahead(segment, position, following, start.depth)
            read = remote_reads.read_batches_at(self.chunks, self.indexes, segment, offset, max_bytes, position)
        except Exception:
            self._record_fetch(0, failed=True)
            raise
        self._ended(segment, following, read, start.depth, (offset, position))
        return BufferRecords(read.parts)

    def close(self) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)
        self.chunks.close()


def _retrieve(future: asyncio.Future[object]) -> None:
    """An expired read's outcome, taken so that asyncio does not log it as never retrieved."""
    if not future.cancelled():
        future.exception()


class _NotCached(Exception):
    """A byte range `_CachedOnly` does not hold: the read goes to the reader pool instead."""


class _CachedOnly:
    """`remote_reads.LogReader` over the chunk cache's cached chunks only: no GET, no wait."""

    def __init__(self, chunks: ChunkCache) -> None:
        self._chunks = chunks

    def fetch_log(
        self, segment: RemoteSegmentMetadata, start_position: int, end_position: int
    ) -> bytes | memoryview:
        data = self._chunks.cached(segment, start_position, end_position)
        if data is None:
            raise _NotCached
        return data
