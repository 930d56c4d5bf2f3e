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
from tiered_follower.chunk_cache import ChunkCache, ChunkCacheConfig, ChunkCacheConfigError
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


def test_reads_through_the_chunk_cache_are_the_local_logs_bytes_fetched_ahead_within_its_bound(tmp_path):
    partition, tier = uploaded(tmp_path)
    manager = RemoteLogManager(BROKER, tier, tier, SMALL_CHUNKS)
    assert partition.remote is not None
    last = partition.remote.finished[-1].end_offset
    fetched: list[tuple[int, int]] = []
    inner = tier.fetch_log
    tier.fetch_log = lambda segment, start, end: fetched.append((start, end)) or inner(segment, start, end)  # type: ignore[method-assign]

    async def consume() -> None:
        offset = 0
        while offset <= last:
            data = await manager.read(partition, offset, 3000)
            assert data == direct_read(tier, partition, offset)
            offset = list(iter_batches(data))[-1].next_offset
            await asyncio.sleep(0.01)  # the consumer's time: fetch-ahead runs meanwhile
            assert manager.reader.chunks.cached_bytes <= 40_000

    asyncio.run(consume())
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
        assert answers == [b"", b"", b""]
        assert (manager.reader.stats["rejected"], manager.reader.stats["expired"]) == (1, 2)
        gate.set()
        # the expired read went on into the chunk cache: the consumer's next Fetch gets the records
        deadline = asyncio.get_running_loop().time() + 30
        while not (data := await manager.read(partition, 0, 3000)):
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
