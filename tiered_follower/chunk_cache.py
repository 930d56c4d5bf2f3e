"""A size-bounded cache of remote `.log` chunks, with fetch-ahead (Aiven's fetch chunk cache).

`ChunkCache.fetch_log` has `RemoteStorage.fetch_log`'s contract, so `remote_reads.read_batches`
reads through it unchanged: the bytes come from cached chunks, a chunk missing is fetched with
one range GET (and waited for, if a fetch-ahead of it is already on its way). `read_ahead`, called
when a read has ended, queues range GETs of the chunks after it, up to the prefetch size, into the
next segment when this one ends first (`fetch_ahead.plan_read` decides which), once half the
window is missing (`fetch_ahead.worth_starting`); consecutive chunks of a segment go out as one
ranged GET, each chunk usable as soon as its bytes have arrived (`log_pieces`), and AHEAD_STREAMS
GETs run at a time, in the order the reader will need them. A failed fetch-ahead is forgotten: the
read that needs the chunk GETs it again itself, with the S3 client's retries.

Settings, under `rsm.config.` (Aiven's names):

========================================== ===================================================
`chunk.size`                               bytes per range GET and cache entry (default 8 MiB)
`fetch.chunk.cache.class`                  where chunks are kept (`chunk_store`): `memory`
                                           (default) or `disk`, or Aiven's class names
                                           (`...fetch.cache.MemoryChunkCache`, `...DiskChunkCache`)
`fetch.chunk.cache.path`                   the directory of a disk cache's chunk files (needed
                                           with `disk`)
`fetch.chunk.cache.size`                   bytes of chunks kept, least recently used evicted
                                           (default 256 MiB)
`fetch.chunk.cache.prefetch.max.size`      bytes fetched ahead of a sequential reader at most
                                           (default 64 MiB; Aiven's default is 0, no
                                           fetch-ahead); a read elsewhere gets two chunks
                                           (`fetch_ahead.SequentialReads`)
========================================== ===================================================
"""

from __future__ import annotations

import contextlib
import logging
import threading
from collections.abc import Callable, Iterator, Mapping, Sequence
from concurrent.futures import CancelledError, Future, ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

from quorum.broker.remote_tier import RemoteSegmentMetadata, RemoteStorage, RemoteStorageError
from tiered_follower import fetch_ahead
from tiered_follower.chunk_store import ChunkKey, ChunkStore, DiskChunkStore, MemoryChunkStore
from tiered_follower.int_settings import int_setting
from tiered_follower.s3_client import DEFAULT_PREFIX

logger = logging.getLogger(__name__)

DEFAULT_CHUNK_SIZE = 8 << 20
DEFAULT_CACHE_SIZE = 256 << 20
DEFAULT_PREFETCH_SIZE = 64 << 20
AHEAD_STREAMS = 2
"""Fetch-ahead GETs running at once; the others queue, first needed first. Why not one per chunk
of the prefetch size (eight, before): GETs started together share the endpoint and the broker's
interpreter lock, so the chunk the reader needed next came as late as the seventh after it, and the
consumer stalled at every chunk boundary (bench_tiered's trace: eight 8 MiB GETs took 160-700 ms
each against 24 ms for one alone, 64 MiB in 0.7 s). Two keep one GET's request latency hidden
behind the other's body."""
WAIT_FOR_GET_S = 300
"""How long a read waits for another's GET of the chunk it needs: longer than the S3 client's own
worst case (8 attempts of 30 s with backoff), so it ends only if that GET is stuck."""


@runtime_checkable
class PieceReader(Protocol):
    """A storage that reads a range of a segment's `.log` with one request, in pieces as they arrive
    (`S3RemoteStorage`); any other storage is read a piece per `fetch_log`."""

    def fetch_log_pieces(
        self, segment: RemoteSegmentMetadata, start_position: int, end_position: int, piece_size: int
    ) -> Iterator[bytes]: ...


def log_pieces(
    storage: RemoteStorage, segment: RemoteSegmentMetadata, start_position: int, end_position: int, piece_size: int
) -> Iterator[bytes]:
    """Bytes [start, end) of the segment's `.log` in `piece_size` pieces (the last one shorter)."""
    if isinstance(storage, PieceReader):
        return storage.fetch_log_pieces(segment, start_position, end_position, piece_size)
    return (storage.fetch_log(segment, position, min(end_position, position + piece_size))
            for position in range(start_position, end_position, piece_size))  # fmt: skip


class ChunkCacheConfigError(ValueError):
    """A malformed chunk cache setting; names the key."""


CACHE_CLASSES = {
    "memory": "memory",
    "disk": "disk",
    "io.aiven.kafka.tieredstorage.fetch.cache.MemoryChunkCache": "memory",
    "io.aiven.kafka.tieredstorage.fetch.cache.DiskChunkCache": "disk",
}
"""`fetch.chunk.cache.class` values: ours, and Aiven's class names for the same two caches."""


@dataclass(frozen=True, slots=True)
class ChunkCacheConfig:
    chunk_size: int = DEFAULT_CHUNK_SIZE
    cache_size: int = DEFAULT_CACHE_SIZE
    prefetch_max_size: int = DEFAULT_PREFETCH_SIZE
    cache_class: str = "memory"
    cache_path: str | None = None

    def __post_init__(self) -> None:
        if self.cache_class not in ("memory", "disk"):
            raise ChunkCacheConfigError(f"fetch.chunk.cache.class must be memory or disk, got {self.cache_class!r}")
        if self.cache_class == "disk" and not self.cache_path:
            raise ChunkCacheConfigError("fetch.chunk.cache.class is disk but fetch.chunk.cache.path is not set")
        if self.cache_size and self.cache_size < self.chunk_size + self.prefetch_max_size:
            raise ChunkCacheConfigError(
                f"fetch.chunk.cache.size ({self.cache_size}) must hold at least one chunk (chunk.size "
                f"{self.chunk_size}) plus what is fetched ahead (fetch.chunk.cache.prefetch.max.size "
                f"{self.prefetch_max_size}), or fetched-ahead chunks evict each other before they are read"
            )

    @classmethod
    def from_properties(cls, properties: Mapping[str, str]) -> ChunkCacheConfig:
        prefix = properties.get("remote.log.storage.manager.impl.prefix", DEFAULT_PREFIX)

        def number(name: str, default: int, minimum: int) -> int:
            return int_setting(properties, prefix + name, default, minimum, ChunkCacheConfigError)

        named = (properties.get(prefix + "fetch.chunk.cache.class") or "memory").strip()
        if named not in CACHE_CLASSES:
            raise ChunkCacheConfigError(
                f"{prefix}fetch.chunk.cache.class must be one of {', '.join(CACHE_CLASSES)}, got {named!r}"
            )
        return cls(
            chunk_size=number("chunk.size", DEFAULT_CHUNK_SIZE, 1),
            cache_size=number("fetch.chunk.cache.size", DEFAULT_CACHE_SIZE, 0),
            prefetch_max_size=number("fetch.chunk.cache.prefetch.max.size", DEFAULT_PREFETCH_SIZE, 0),
            cache_class=CACHE_CLASSES[named],
            cache_path=(properties.get(prefix + "fetch.chunk.cache.path") or "").strip() or None,
        )

    def store(self) -> ChunkStore:
        if self.cache_class == "disk":
            assert self.cache_path is not None
            return DiskChunkStore(self.cache_path, self.cache_size)
        return MemoryChunkStore(self.cache_size)


class ChunkCache:
    """See the module docstring. Thread-safe: the reader pool's threads share it."""

    def __init__(
        self, storage: RemoteStorage, config: ChunkCacheConfig, name: str = "chunks", store: ChunkStore | None = None
    ) -> None:
        self._storage = storage
        self.config = config
        self.store = config.store() if store is None else store
        self._inflight: dict[ChunkKey, Future[bytes]] = {}
        self._lock = threading.RLock()  # a done-callback may run inside submit, under the lock
        self._ahead = ThreadPoolExecutor(max_workers=AHEAD_STREAMS, thread_name_prefix=f"{name}-ahead")
        self.stats = {"hits": 0, "misses": 0, "ahead": 0, "ahead_gets": 0, "waited_ahead": 0}
        """Chunk reads served from the cache, GET on demand, fetched ahead (chunks, and the GETs that
        fetched them), and waited for in flight (evictions and refused files: `store.stats`)."""

    @property
    def cached_bytes(self) -> int:
        return self.store.size

    # -- RemoteStorage.fetch_log, through the cache -------------------------------------------------

    def fetch_log(self, segment: RemoteSegmentMetadata, start_position: int, end_position: int) -> bytes | memoryview:
        """Bytes [start, end) of the segment's `.log`: a view of the cached chunk when one chunk holds
        them all (the common case: no copy of a megabyte per read), else the chunks' pieces joined."""
        size = segment.size_in_bytes
        end_position = min(end_position, size)
        if not 0 <= start_position <= end_position:
            raise RemoteStorageError(
                f"segment {segment.object_name} of {segment.partition}: bytes "
                f"[{start_position}, {end_position}) are outside its {size} bytes"
            )
        covering = fetch_ahead.chunks_covering(start_position, end_position, self.config.chunk_size)
        chunks = [(index, self._chunk(segment, index)) for index in covering]
        return self._range_of(chunks, start_position, end_position)

    def cached(
        self, segment: RemoteSegmentMetadata, start_position: int, end_position: int
    ) -> bytes | memoryview | None:
        """Bytes [start, end) of the segment's `.log` when every chunk holding them is cached, else
        None: never a GET, never a wait, so it may run on the event loop (`remote_reader`)."""
        end_position = min(end_position, segment.size_in_bytes)
        if not 0 <= start_position <= end_position:
            return None
        chunk_size = self.config.chunk_size
        chunks = []
        for index in fetch_ahead.chunks_covering(start_position, end_position, chunk_size):
            chunk = self.store.get((segment.segment_id, index), memory_only=True)
            if chunk is None:
                return None
            chunks.append((index, chunk))
        with self._lock:
            self.stats["hits"] += len(chunks)
        return self._range_of(chunks, start_position, end_position)

    def _range_of(self, chunks: list[tuple[int, bytes]], start_position: int, end_position: int) -> bytes | memoryview:
        """Bytes [start, end) of a segment from the chunks (index, bytes) that cover them: a view of
        the one chunk when one holds them all (no copy of a megabyte per read), else the pieces
        joined once. A view keeps its chunk alive (immutable bytes, so an eviction meanwhile
        changes nothing it holds)."""
        size = self.config.chunk_size
        parts = [memoryview(chunk)[max(start_position - index * size, 0) : end_position - index * size]
                 for index, chunk in chunks]
        return parts[0] if len(parts) == 1 else b"".join(parts)  # none: b""

    def _chunk(self, segment: RemoteSegmentMetadata, index: int) -> bytes:
        """Chunk `index` from the cache, else from the GET already on its way, else with a GET of
        our own (registered, so that a concurrent read of the same chunk waits for it)."""
        key = (segment.segment_id, index)
        while True:
            found = self.store.get(key)  # a disk store's file is read and checked: a refused one is a miss
            with self._lock:
                if found is not None:
                    self.stats["hits"] += 1
                    return found
                if key in self.store:
                    continue  # kept just now by a GET that has ended (it leaves the in-flight ones after)
                pending = self._inflight.get(key)
                if pending is None:
                    mine: Future[bytes] = Future()
                    mine.set_running_or_notify_cancel()  # close() cancels only fetch-ahead chunks not started
                    self._inflight[key] = mine
                    self.stats["misses"] += 1
            break
        if pending is not None:
            try:
                data = pending.result(timeout=WAIT_FOR_GET_S)
                with self._lock:
                    self.stats["waited_ahead"] += 1
                return data
            except FutureTimeout:
                raise RemoteStorageError(
                    f"chunk {index} of segment {segment.object_name} of {segment.partition}: "
                    f"its GET by another read has not ended after {WAIT_FOR_GET_S} s",
                    retriable=True,
                ) from None
            except (RemoteStorageError, CancelledError) as exc:
                logger.info(
                    "the GET of chunk %d of %s by another read failed (%s): reading it again",
                    index,
                    segment.object_name,
                    exc,
                )
                return self._get(segment, index)
        try:
            data = self._get(segment, index)
        except BaseException as exc:
            mine.set_exception(exc)
            mine.exception()  # retrieved: a waiter may never come
            raise
        else:
            mine.set_result(data)
        finally:
            self._done(key)
        return data

    def _get(self, segment: RemoteSegmentMetadata, index: int) -> bytes:
        start, end = fetch_ahead.chunk_bounds(index, self.config.chunk_size, segment.size_in_bytes)
        return self._kept(segment, index, self._storage.fetch_log(segment, start, end))

    def _kept(self, segment: RemoteSegmentMetadata, index: int, data: bytes) -> bytes:
        """Chunk `index`'s bytes, kept, once their length is checked."""
        start, end = fetch_ahead.chunk_bounds(index, self.config.chunk_size, segment.size_in_bytes)
        if len(data) != end - start:
            raise RemoteStorageError(
                f"segment {segment.object_name} of {segment.partition}: chunk {index} is "
                f"bytes [{start}, {end}), got {len(data)}",
                retriable=True,
            )
        self._keep((segment.segment_id, index), data)
        return data

    def _keep(self, key: ChunkKey, data: bytes) -> None:
        if not self.config.cache_size:
            return
        try:
            self.store.put(key, data)
        except OSError as exc:  # a full or failing disk: the read goes on with the bytes it has
            logger.warning("chunk %s of segment %s not kept in the chunk cache: %s", key[1], key[0], exc)

    # -- fetch-ahead ------------------------------------------------------------------------------

    def read_ahead(
        self,
        segment: RemoteSegmentMetadata,
        position: int,
        following: Sequence[RemoteSegmentMetadata] = (),
        depth: int | None = None,
    ) -> int:
        """Start fetching the chunks after byte `position` of `segment` (then of the `following`
        segments, in order) that are neither cached nor on their way, `depth` bytes of them (the
        prefetch size at most, and by default); returns how many started. Running on through
        several segments matters when the depth is larger than a segment: with one segment of
        look-ahead the GETs of a segment's first chunks started only once the reader was in the
        one before it, and it caught up with them at each segment boundary."""
        if not self.config.prefetch_max_size or not self.config.cache_size:
            return 0
        chunk_size = self.config.chunk_size
        budget = self.config.prefetch_max_size if depth is None else min(depth, self.config.prefetch_max_size)
        with self._lock:
            present = self._present_fn(segment)
            plan = fetch_ahead.plan_read(segment.size_in_bytes, chunk_size, position, position, budget, present)
            wanted = [(segment, plan.ahead)]
            if position < segment.size_in_bytes:
                next_missing = not present(position // chunk_size)
            else:
                next_missing = bool(following) and not self._present_fn(following[0])(0)
            left = plan.ahead_left
            for after in following:
                if left <= 0:
                    break
                wanted.append((after, fetch_ahead.plan_next_segment(after.size_in_bytes, chunk_size, left,
                                                                    self._present_fn(after))))  # fmt: skip
                left -= after.size_in_bytes
            missing = sum(self._chunk_length(after, index) for after, ahead in wanted for index in ahead)
            if not fetch_ahead.worth_starting(missing, budget, next_missing, at_end=left > 0):
                return 0
            return sum(self._start(after, ahead) for after, ahead in wanted)

    def _chunk_length(self, segment: RemoteSegmentMetadata, index: int) -> int:
        start, end = fetch_ahead.chunk_bounds(index, self.config.chunk_size, segment.size_in_bytes)
        return end - start

    def holds(self, segment: RemoteSegmentMetadata, position: int) -> bool:
        """Whether the chunk holding byte `position` of the segment is cached or on its way."""
        with self._lock:
            return self._present_fn(segment)(position // self.config.chunk_size)

    def _present_fn(self, segment: RemoteSegmentMetadata) -> Callable[[int], bool]:
        segment_id = segment.segment_id
        return lambda index: (segment_id, index) in self.store or (segment_id, index) in self._inflight

    def _start(self, segment: RemoteSegmentMetadata, indexes: tuple[int, ...]) -> int:
        """Queue the chunks' GETs, a run of consecutive chunks in one; called with the lock held."""
        started = 0
        for run in fetch_ahead.runs(indexes):
            futures: list[Future[bytes]] = [Future() for _ in run]
            try:
                self._ahead.submit(self._fetch_run, segment, run, futures)
            except RuntimeError:  # closed: the broker is stopping, nothing to fetch ahead for
                return started
            for index, future in zip(run, futures, strict=True):
                self._inflight[(segment.segment_id, index)] = future
            self.stats["ahead"] += len(run)
            self.stats["ahead_gets"] += 1
            started += len(run)
        return started

    def _fetch_run(self, segment: RemoteSegmentMetadata, run: range, futures: list[Future[bytes]]) -> None:
        """On a fetch-ahead stream: the run's chunks with one GET, each kept and handed to whoever
        waits for it as soon as its bytes have arrived, not when the whole run has; a failure fails
        the chunks not yet arrived (their readers GET them themselves)."""
        keys = [(segment.segment_id, index) for index in run]
        if not all([future.set_running_or_notify_cancel() for future in futures]):  # cancelled by close()
            closing = RemoteStorageError("the chunk cache closed before this chunk's fetch-ahead started")
            for key, future in zip(keys, futures, strict=True):
                if future.running():
                    future.set_exception(closing)
                    future.exception()
                self._done(key)
            return
        arrived = 0
        try:
            first = run.start * self.config.chunk_size
            _, end = fetch_ahead.chunk_bounds(run[-1], self.config.chunk_size, segment.size_in_bytes)
            for data in log_pieces(self._storage, segment, first, end, self.config.chunk_size):
                if arrived == len(run):
                    break
                futures[arrived].set_result(self._kept(segment, run[arrived], data))
                self._done(keys[arrived])
                arrived += 1
            if arrived < len(run):
                raise RemoteStorageError(
                    f"segment {segment.object_name} of {segment.partition}: chunks {run.start}..{run[-1]} "
                    f"ended after {arrived} of them",
                    retriable=True,
                )
        except BaseException as exc:
            for future in futures[arrived:]:
                future.set_exception(exc)
                future.exception()  # retrieved: a waiter may never come
        finally:
            for key in keys[arrived:]:
                self._done(key)

    def _done(self, key: ChunkKey) -> None:
        with self._lock:
            self._inflight.pop(key, None)

    def run_ahead(self, fn: Callable[..., object], *args: object) -> None:
        """`fn(*args)` on the fetch-ahead pool (the next segment's offset index, warmed before it is
        read); nothing once closed."""
        with contextlib.suppress(RuntimeError):  # closed: the broker is stopping
            self._ahead.submit(fn, *args)

    def close(self) -> None:
        """Queued fetch-ahead GETs are dropped and the chunks they were to fetch cancelled: a read
        waiting for one GETs it itself (the GETs under way end on their own)."""
        self._ahead.shutdown(wait=False, cancel_futures=True)
        with self._lock:
            waiting = list(self._inflight.values())
        for future in waiting:
            future.cancel()  # only those not started: a GET under way, or a read's own, is running

