"""Consumers' reads of remote segments: Kafka's RemoteLogReader and its pool, and what bounds them.

A Fetch below the local log start is read on the reader pool (`remote.log.reader.threads`),
through the chunk cache with fetch-ahead (`chunk_cache`), never on the event loop, and answered
with what is ready rather than making the broker wait:

* the fetch quota (`remote.log.manager.fetch.max.bytes.per.second`, KIP-956) is checked first:
  while it is exceeded the partition is answered empty, as Kafka's ReplicaManager does, after
  waiting out the throttle time up to `remote.fetch.max.wait.ms` (Kafka parks such a Fetch in
  its purgatory for its MaxWaitMs; answering at once would make the consumer spin). The bytes
  a read returns are recorded when it ends;
* a read that finds `remote.log.reader.threads` busy and `remote.log.reader.max.pending.tasks`
  queued is not queued: the partition is answered empty at once (Kafka answers it with an error
  when its pool rejects the task; an empty answer is retried by every client without backoff);
* a read that has not finished after `remote.fetch.max.wait.ms` (KIP-1018) is answered empty;
  if it had not started it is cancelled, else it runs on into the chunk cache, where the
  consumer's next Fetch finds it.

`stats` counts what happened ("reads", "bytes", "throttled", "rejected", "expired", "errors").
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections import Counter
from collections.abc import Awaitable, Callable
from concurrent.futures import Future, ThreadPoolExecutor
from typing import TypeVar

from quorum.broker.remote_tier import IndexType, RemoteSegmentMetadata, RemoteStorage
from tiered_follower import remote_reads
from tiered_follower.chunk_cache import ChunkCache, ChunkCacheConfig
from tiered_follower.rlm_config import RemoteLogManagerConfig
from tiered_follower.rlm_quota import ByteRateQuota

logger = logging.getLogger(__name__)

T = TypeVar("T")


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
        self, segment: RemoteSegmentMetadata, following: RemoteSegmentMetadata | None, offset: int, max_bytes: int
    ) -> bytes:
        """Whole batches from `segment` at `offset` (see `remote_reads.read_batches`), or b"" when
        the quota, the pool or `remote.fetch.max.wait.ms` says to answer without them; raises
        RemoteStorageError when the read failed."""
        throttle_ms = self.fetch_throttle_ms()
        if throttle_ms > 0:
            self.stats["throttled"] += 1
            await self._sleep(min(throttle_ms, self.config.fetch_max_wait_ms) / 1000)
            return b""
        try:
            future = self.submit(self._read, segment, following, offset, max_bytes)
        except ReaderQueueFull as exc:
            self.stats["rejected"] += 1
            logger.debug("%s at offset %d answered empty: %s", segment.partition, offset, exc)
            return b""
        waiting = asyncio.wrap_future(future)
        try:
            return await asyncio.wait_for(asyncio.shield(waiting), self.config.fetch_max_wait_ms / 1000)
        except TimeoutError:
            self.stats["expired"] += 1
            future.cancel()  # only if it has not started; else it fills the chunk cache
            waiting.add_done_callback(_retrieve)
            return b""

    def _read(
        self, segment: RemoteSegmentMetadata, following: RemoteSegmentMetadata | None, offset: int, max_bytes: int
    ) -> bytes:
        """On a reader thread: the read through the chunk cache, its bytes recorded against the
        quota, then fetch-ahead from where it ended (and the next segment's index, when near its end)."""
        try:
            data, end = remote_reads.read_batches_at(self.chunks, self.indexes, segment, offset, max_bytes)
        except Exception:
            self._record_fetch(0, failed=True)
            raise
        self._record_fetch(len(data))
        self.chunks.read_ahead(segment, end, following)
        if following is not None and segment.size_in_bytes - end < self.chunks.config.prefetch_max_size:
            self.chunks.run_ahead(self.indexes.get, following, IndexType.OFFSET)
        return data

    def close(self) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)
        self.chunks.close()


def _retrieve(future: asyncio.Future[object]) -> None:
    """An expired read's outcome, taken so that asyncio does not log it as never retrieved."""
    if not future.cancelled():
        future.exception()
