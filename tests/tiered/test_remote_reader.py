"""Consumers' remote reads through the chunk cache on the reader pool (tiered_follower.remote_reader):
the same bytes as the local log, fetched ahead, within the cache's bound; and a Fetch answered
without its remote read when the pool is full or remote.fetch.max.wait.ms runs out."""

from __future__ import annotations

import asyncio
import threading
import time
from pathlib import Path

import pytest

from quorum.wire.records import iter_batches
from tests.tiered.test_remote_log_manager import BROKER, MemoryTier, leader_partition
from tiered_follower import remote_reads
from tiered_follower.chunk_cache import AHEAD_STREAMS, ChunkCache, ChunkCacheConfig, ChunkCacheConfigError
from tiered_follower.remote_log_manager import RemoteLogManager

SMALL_CHUNKS = {"rsm.config.chunk.size": "5000", "rsm.config.fetch.chunk.cache.size": "40000",
                "rsm.config.fetch.chunk.cache.prefetch.max.size": "15000"}  # fmt: skip


def uploaded(tmp_path: Path, batches: int = 80):
    partition = leader_partition(tmp_path, batches=batches)
    tier = MemoryTier()
    asyncio.run(RemoteLogManager(BROKER, tier, tier).run_once([partition]))
    assert partition.remote is not None and len(partition.remote.finished) >= 3
    return partition, tier


def direct_read(tier: MemoryTier, partition, offset: int) -> bytes:  # noqa: ANN001
    """The same read straight from the storage, no cache (the read path test_remote_reads checks
    against the local log); the local segments are gone (local.retention.bytes=0)."""
    segment = partition.remote.segment_for(offset)
    return remote_reads.read_batches(tier, remote_reads.RemoteIndexCache(tier), segment, offset, 3000)


async def consume_checked(manager: RemoteLogManager, tier: MemoryTier, partition, cache_bound: int) -> None:  # noqa: ANN001
    """A consumer reading every remote offset in 3 000-byte Fetches, each answer checked against a
    read straight from the storage, the chunk cache within `cache_bound` bytes after each."""
    offset, last = 0, partition.remote.finished[-1].end_offset
    while offset <= last:
        data = (await manager.read(partition, offset, 3000)).read()
        assert data == direct_read(tier, partition, offset)
        offset = list(iter_batches(data))[-1].next_offset
        await asyncio.sleep(0.01)  # the consumer's time: fetch-ahead runs meanwhile
        assert manager.reader.chunks.cached_bytes <= cache_bound


def test_reads_through_the_chunk_cache_are_the_local_logs_bytes_fetched_ahead_within_its_bound(tmp_path):
    partition, tier = uploaded(tmp_path)
    manager = RemoteLogManager(BROKER, tier, tier, SMALL_CHUNKS)
    assert partition.remote is not None
    fetched: list[tuple[int, int]] = []
    inner = tier.fetch_log
    tier.fetch_log = lambda segment, start, end: fetched.append((start, end)) or inner(segment, start, end)  # type: ignore[method-assign]

    asyncio.run(consume_checked(manager, tier, partition, cache_bound=40_000))
    stats = manager.reader.chunks.stats
    assert stats["ahead"] > 0 and stats["hits"] > stats["misses"]
    assert all(end - start <= 5000 for start, end in fetched)  # one chunk per GET
    asyncio.run(manager.close())
    partition.close()


def test_a_full_reader_queue_answers_at_once_with_nothing_and_a_slow_read_after_max_wait(tmp_path):
    partition, tier = uploaded(tmp_path, batches=40)
    manager = RemoteLogManager(BROKER, tier, tier, {**SMALL_CHUNKS, "remote.log.reader.threads": "1",
                                                    "remote.log.reader.max.pending.tasks": "1",
                                                    "remote.fetch.max.wait.ms": "50"})  # fmt: skip
    gate = threading.Event()
    inner = tier.fetch_log

    def slow_fetch_log(segment, start, end):  # noqa: ANN001, ANN202
        if not gate.wait(timeout=30):
            raise AssertionError("the test never opened the gate")
        return inner(segment, start, end)

    tier.fetch_log = slow_fetch_log  # type: ignore[method-assign]

    async def run() -> None:
        # three Fetches at once: the first read takes the reader thread and waits at the gate, the
        # second is queued (max.pending.tasks=1), the third finds the queue full and is answered at
        # once; the first two are answered empty after remote.fetch.max.wait.ms (50 ms)
        answers = await asyncio.gather(*(manager.read(partition, 0, 3000) for _ in range(3)))
        assert [answer.read() for answer in answers] == [b"", b"", b""]
        assert (manager.reader.stats["rejected"], manager.reader.stats["expired"]) == (1, 2)
        gate.set()
        # the expired read went on into the chunk cache: the consumer's next Fetch gets the records
        deadline = asyncio.get_running_loop().time() + 30
        while not (data := (await manager.read(partition, 0, 3000)).read()):
            assert asyncio.get_running_loop().time() < deadline, "the read never finished after the gate opened"
        tier.fetch_log = inner  # type: ignore[method-assign]
        assert data == direct_read(tier, partition, 0)
        await manager.close()

    asyncio.run(run())
    partition.close()


def test_a_cache_too_small_for_what_it_fetches_ahead_is_refused_by_name():
    with pytest.raises(ChunkCacheConfigError, match="fetch.chunk.cache.size"):
        ChunkCacheConfig.from_properties({"rsm.config.chunk.size": "4000", "rsm.config.fetch.chunk.cache.size": "5000"})
    with pytest.raises(ChunkCacheConfigError, match="rsm.config.chunk.size must be at least 1"):
        ChunkCacheConfig.from_properties({"rsm.config.chunk.size": "0"})


def test_reads_of_a_chunk_on_its_way_wait_for_that_get_instead_of_sending_another(tmp_path):
    partition, tier = uploaded(tmp_path, batches=20)
    segment = partition.remote.finished[0]
    started, gate, gets = threading.Event(), threading.Event(), []
    inner = tier.fetch_log

    def counted(segment, start, end):  # noqa: ANN001, ANN202
        gets.append((start, end))
        started.set()
        if not gate.wait(timeout=30):
            raise AssertionError("the test never opened the gate")
        return inner(segment, start, end)

    tier.fetch_log = counted  # type: ignore[method-assign]
    cache = ChunkCache(tier, ChunkCacheConfig(chunk_size=5000, cache_size=40_000, prefetch_max_size=0))
    results: list[bytes] = []
    readers = [threading.Thread(target=lambda: results.append(cache.fetch_log(segment, 10, 200))) for _ in range(3)]
    readers[0].start()
    assert started.wait(timeout=30), "the first read never sent its GET"
    for reader in readers[1:]:
        reader.start()
    time.sleep(0.3)  # the two others reach the chunk while its GET is held (a second GET would be counted)
    gate.set()
    for reader in readers:
        reader.join(timeout=30)
    assert results == [inner(segment, 10, 200)] * 3
    assert len(gets) == 1
    assert cache.stats["waited_ahead"] + cache.stats["hits"] == 2
    cache.close()
    partition.close()


def test_a_sequential_reader_needs_no_index_reads_cached_bytes_on_the_loop_and_fetches_ahead_across_segments(tmp_path):
    partition, tier = uploaded(tmp_path)
    # a fetch-ahead up to 30 000 bytes deep: several segments of ~5 000 here
    deep = {**SMALL_CHUNKS, "rsm.config.fetch.chunk.cache.size": "80000",
            "rsm.config.fetch.chunk.cache.prefetch.max.size": "30000"}  # fmt: skip
    manager = RemoteLogManager(BROKER, tier, tier, deep)
    assert partition.remote is not None
    segments = partition.remote.finished
    assert segments[0].size_in_bytes < 30_000
    last = segments[-1].end_offset
    indexes: list[object] = []  # the manager's index lookups (direct_read has its own)
    index_get = manager.reader.indexes.get
    manager.reader.indexes.get = lambda segment, kind: indexes.append(segment) or index_get(segment, kind)  # type: ignore[method-assign]
    reading = [0]  # the offset the consumer is reading at
    first_get: dict[int, int] = {}  # a segment's first offset -> where the consumer was when its first GET started

    class Counted:
        def fetch_log(self, segment, start, end):  # noqa: ANN001, ANN202
            first_get.setdefault(segment.start_offset, reading[0])
            return tier.fetch_log(segment, start, end)

    manager.reader.chunks._storage = Counted()  # type: ignore[assignment]

    async def consume() -> None:
        offset = 0
        while offset <= last:
            reading[0] = offset
            data = (await manager.read(partition, offset, 3000)).read()
            assert data == direct_read(tier, partition, offset)
            offset = list(iter_batches(data))[-1].next_offset
            await asyncio.sleep(0.02)  # the consumer's time: fetch-ahead runs meanwhile

    asyncio.run(consume())
    assert indexes == []  # each read went on from where the last ended, or started a segment at byte 0
    assert manager.reader.stats["cached"] > 0  # answered on the loop, every byte already in the cache
    # the fourth segment's first GET started while the consumer was still in the first one
    assert first_get[segments[3].start_offset] < segments[1].start_offset
    asyncio.run(manager.close())
    partition.close()


def test_a_read_elsewhere_looks_its_position_up_in_the_index_and_is_served_the_same_bytes(tmp_path):
    partition, tier = uploaded(tmp_path)
    manager = RemoteLogManager(BROKER, tier, tier, SMALL_CHUNKS)
    assert partition.remote is not None
    segment = partition.remote.finished[1]
    middle = (segment.start_offset + segment.end_offset) // 2

    async def run() -> None:
        first = (await manager.read(partition, 0, 3000)).read()
        assert first == direct_read(tier, partition, 0)
        for offset in (middle, middle, 0):  # a seek, a re-read of the same offset, back to the start
            assert (await manager.read(partition, offset, 3000)).read() == direct_read(tier, partition, offset)
        await manager.close()

    asyncio.run(run())
    partition.close()


def test_a_cold_read_gets_its_own_chunk_alone_and_fetches_ahead_once_answered(tmp_path):
    """The chunk a read starts in, neither cached nor on its way (a consumer's first Fetch, a
    seek), is fetched alone: GETs started together share the endpoint, and the one chunk the
    consumer waits for arrived as late as the others. The fetch-ahead starts when the read ends."""
    partition, tier = uploaded(tmp_path)
    manager = RemoteLogManager(BROKER, tier, tier, SMALL_CHUNKS)
    assert partition.remote is not None
    lock = threading.Lock()
    in_flight = [0]
    gets: list[tuple[int, int, int]] = []  # (segment's first offset, byte, GETs already in flight)

    class Slow:
        def fetch_log(self, segment, start, end):  # noqa: ANN001, ANN202
            with lock:
                gets.append((segment.start_offset, start, in_flight[0]))
                in_flight[0] += 1
            try:
                time.sleep(0.05)  # an S3 GET's latency: GETs started together overlap
                return tier.fetch_log(segment, start, end)
            finally:
                with lock:
                    in_flight[0] -= 1

    manager.reader.chunks._storage = Slow()  # type: ignore[assignment]

    async def run() -> None:
        assert (await manager.read(partition, 0, 3000)).read() == direct_read(tier, partition, 0)
        assert manager.reader.chunks.stats["ahead"] > 0  # the fetch-ahead is on its way
        await manager.close()

    asyncio.run(run())
    with lock:
        assert gets[0] == (0, 0, 0)  # the read's own chunk, nothing else in flight
        assert gets[1][2] == 0  # the first fetched ahead started after it ended
    partition.close()


def test_fetch_ahead_runs_two_gets_at_a_time_first_needed_first_a_run_of_chunks_per_get(tmp_path):
    """A deep fetch-ahead queues its chunks as runs of consecutive chunks, one GET each, and
    AHEAD_STREAMS GETs run at a time, in the reader's order: all at once, they shared the endpoint and
    the chunk needed next came as late as the last; a GET per chunk cost the endpoint and boto3
    twice as much per byte."""
    partition, tier = uploaded(tmp_path, batches=40)
    segments = partition.remote.finished
    assert len(segments) >= 4 and segments[0].size_in_bytes < 9 * 500
    lock = threading.Lock()
    in_flight, most, gets = [0], [0], []

    class Slow:
        def fetch_log(self, segment, start, end):  # noqa: ANN001, ANN202
            raise AssertionError("a fetch-ahead GETs its run of chunks with fetch_log_pieces")

        def fetch_log_pieces(self, segment, start, end, piece_size):  # noqa: ANN001, ANN202
            with lock:
                gets.append((segment.start_offset, start, end))
                in_flight[0] += 1
                most[0] = max(most[0], in_flight[0])
            try:
                for position in range(start, end, piece_size):
                    time.sleep(0.01)  # GETs started together overlap
                    yield tier.fetch_log(segment, position, min(end, position + piece_size))
            finally:
                with lock:
                    in_flight[0] -= 1

    cache = ChunkCache(Slow(), ChunkCacheConfig(chunk_size=500, cache_size=80_000, prefetch_max_size=20_000))  # type: ignore[arg-type]
    first = segments[0]
    # from byte 1000 of the first segment: the rest of it, then the next segments, whole
    started = cache.read_ahead(first, 1000, segments[1:])
    deadline = time.monotonic() + 30
    while cache._inflight:  # noqa: SLF001 (every run ended)
        assert time.monotonic() < deadline, "the fetch-ahead's GETs had not ended within 30 s"
        time.sleep(0.01)
    assert most[0] == AHEAD_STREAMS == 2
    assert gets[0] == (first.start_offset, 1000, first.size_in_bytes)  # one GET for the rest of a segment
    assert [get[0] for get in gets] == [segment.start_offset for segment in segments[: len(gets)]]
    assert all(get[1:] == (0, segment.size_in_bytes) for get, segment in zip(gets[1:-1], segments[1:], strict=False))
    assert started == cache.stats["ahead"] > 2 * len(gets) and cache.stats["ahead_gets"] == len(gets)
    assert cache.fetch_log(first, 1000, 4000) == tier.fetch_log(first, 1000, 4000)
    cache.close()
    partition.close()


def test_a_chunk_of_a_run_is_served_once_it_has_arrived_before_the_rest(tmp_path):
    partition, tier = uploaded(tmp_path, batches=20)
    segment = partition.remote.finished[0]
    gate = threading.Event()

    class Held:
        def fetch_log(self, segment, start, end):  # noqa: ANN001, ANN202
            raise AssertionError("the reader waits for the run's chunk instead of a GET of its own")

        def fetch_log_pieces(self, segment, start, end, piece_size):  # noqa: ANN001, ANN202
            yield tier.fetch_log(segment, start, start + piece_size)
            if not gate.wait(timeout=30):
                raise AssertionError("the test never opened the gate")
            for position in range(start + piece_size, end, piece_size):
                yield tier.fetch_log(segment, position, min(end, position + piece_size))

    cache = ChunkCache(Held(), ChunkCacheConfig(chunk_size=500, cache_size=40_000, prefetch_max_size=2000))  # type: ignore[arg-type]
    assert cache.read_ahead(segment, 0) == 4  # one run: chunks 0 to 3
    try:
        assert cache.fetch_log(segment, 10, 400) == tier.fetch_log(segment, 10, 400)  # while the run is held
    finally:
        gate.set()
    assert cache.fetch_log(segment, 600, 1900) == tier.fetch_log(segment, 600, 1900)
    assert cache.stats["ahead_gets"] == 1 and cache.stats["misses"] == 0
    cache.close()
    partition.close()


def test_the_fetch_ahead_near_the_end_of_the_remote_log_starts_what_is_left(tmp_path):
    """Half a window is never missing past the last segment: the rest is fetched at once, or the
    reader waited for a GET of the last chunk when it got there."""
    partition, tier = uploaded(tmp_path, batches=20)
    last = partition.remote.finished[-1]
    cache = ChunkCache(tier, ChunkCacheConfig(chunk_size=500, cache_size=40_000, prefetch_max_size=8000))
    position = last.size_in_bytes - 1200
    cache.fetch_log(last, position, position + 1)  # the chunk the reader is in: cached
    after = -(-last.size_in_bytes // 500) - (position // 500 + 1)  # the chunks after it: 2 or 3
    assert cache.read_ahead(last, position, (), depth=8000) == after > 0
    cache.close()
    partition.close()
