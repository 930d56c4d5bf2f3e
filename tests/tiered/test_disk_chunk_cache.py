"""The fetch chunk cache on local disk (`fetch.chunk.cache.class=disk`, tiered_follower.chunk_store):
within `fetch.chunk.cache.size` bytes of chunk files, least recently used evicted; a chunk file
that is damaged, cut short or grown is refused and the chunk fetched again, its bytes never
served; a consumer reading through it gets what the remote segments hold."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from tests.tiered.test_remote_reader import consume_checked, uploaded
from tiered_follower.chunk_cache import ChunkCache, ChunkCacheConfig, ChunkCacheConfigError
from tiered_follower.chunk_store import DiskChunkStore
from tiered_follower.remote_log_manager import RemoteLogManager
from tiered_follower.rsm_config import refuse_unknown

CHUNK = 1000


def disk_cache(tmp_path: Path, tier, cache_size: int = 2400, front_chunks: int = 0) -> ChunkCache:  # noqa: ANN001
    """A disk cache of 1 000-byte chunks, no fetch-ahead; without a memory front, so that every
    read of a cached chunk reads (and checks) its file."""
    config = ChunkCacheConfig(chunk_size=CHUNK, cache_size=cache_size, prefetch_max_size=0, cache_class="disk",
                              cache_path=str(tmp_path / "chunks"))  # fmt: skip
    return ChunkCache(tier, config, store=DiskChunkStore(config.cache_path or "", cache_size, front_chunks))


def counting(tier) -> list[tuple[int, int]]:  # noqa: ANN001
    gets: list[tuple[int, int]] = []
    inner = tier.fetch_log
    tier.fetch_log = lambda segment, start, end: gets.append((start, end)) or inner(segment, start, end)
    return gets


def test_the_files_stay_within_the_size_and_the_least_recently_used_go_first(tmp_path):
    partition, tier = uploaded(tmp_path)
    segment = partition.remote.finished[0]
    assert segment.size_in_bytes > 3 * CHUNK
    cache = disk_cache(tmp_path, tier, cache_size=2400)  # two chunks of 1 000 fit, three do not
    gets = counting(tier)
    expected = tier.objects[(segment.segment_id, "log")]
    for index in (0, 1, 0, 2):  # chunk 1 is the least recently used when chunk 2 comes
        assert cache.fetch_log(segment, index * CHUNK, index * CHUNK + 100) == expected[index * CHUNK:][:100]
    files = sorted(path.name for path in (tmp_path / "chunks").iterdir())
    assert files == [f"{segment.segment_id}-0.chunk", f"{segment.segment_id}-2.chunk"]
    assert sum(path.stat().st_size for path in (tmp_path / "chunks").iterdir()) <= 2400 + 2 * 16  # + headers
    assert cache.cached_bytes == 2 * CHUNK and cache.store.stats["evicted"] == 1
    assert gets == [(0, CHUNK), (CHUNK, 2 * CHUNK), (2 * CHUNK, 3 * CHUNK)]  # chunk 0 read again from disk
    assert cache.fetch_log(segment, CHUNK, CHUNK + 10) == expected[CHUNK:CHUNK + 10]  # evicted: GET again
    assert gets[-1] == (CHUNK, 2 * CHUNK)
    cache.close()
    partition.close()


@pytest.mark.parametrize("damage", ["a flipped byte", "cut short", "grown", "emptied"])
def test_a_damaged_chunk_file_is_refused_and_the_chunk_fetched_again(tmp_path, damage):
    partition, tier = uploaded(tmp_path)
    segment = partition.remote.finished[0]
    cache = disk_cache(tmp_path, tier)
    gets = counting(tier)
    expected = tier.objects[(segment.segment_id, "log")][:CHUNK]
    assert cache.fetch_log(segment, 0, CHUNK) == expected
    path = tmp_path / "chunks" / f"{segment.segment_id}-0.chunk"
    data = bytearray(path.read_bytes())
    if damage == "a flipped byte":
        data[-100] ^= 0x40
    elif damage == "cut short":
        del data[-1:]
    elif damage == "grown":
        data += b"\0"
    else:
        data.clear()
    path.write_bytes(bytes(data))
    assert cache.fetch_log(segment, 0, CHUNK) == expected  # the right bytes, not the file's
    assert gets == [(0, CHUNK), (0, CHUNK)]  # fetched again
    assert cache.store.stats["refused"] == 1
    assert path.read_bytes() != bytes(data) and cache.fetch_log(segment, 0, CHUNK) == expected  # a good file again
    assert len(gets) == 2
    cache.close()
    partition.close()


def test_a_consumer_reads_the_remote_segments_through_a_disk_cache(tmp_path):
    partition, tier = uploaded(tmp_path)
    properties = {"rsm.config.chunk.size": str(CHUNK), "rsm.config.fetch.chunk.cache.size": "40000",
                  "rsm.config.fetch.chunk.cache.prefetch.max.size": "15000",
                  "rsm.config.fetch.chunk.cache.class": "io.aiven.kafka.tieredstorage.fetch.cache.DiskChunkCache",
                  "rsm.config.fetch.chunk.cache.path": str(tmp_path / "cache")}  # fmt: skip
    refuse_unknown(properties, "rsm.config.")  # the remote tier knows every one of these settings
    manager = RemoteLogManager(101, tier, tier, properties)
    assert isinstance(manager.reader.chunks.store, DiskChunkStore)
    asyncio.run(consume_checked(manager, tier, partition, cache_bound=40_000))
    asyncio.run(manager.close())
    assert manager.reader.chunks.cached_bytes > 0
    assert len(list((tmp_path / "cache").glob("*.chunk"))) > 1
    partition.close()


def test_a_previous_runs_chunk_files_are_removed_and_nothing_else(tmp_path):
    directory = tmp_path / "chunks"
    directory.mkdir()
    (directory / "11111111-2222-3333-4444-555555555555-0.chunk").write_bytes(b"old")
    (directory / "x.chunk.tmp-1").write_bytes(b"half written")
    (directory / "notes.txt").write_text("not the cache's")
    DiskChunkStore(directory, 10_000)
    assert sorted(path.name for path in directory.iterdir()) == ["notes.txt"]


def test_disk_or_memory_and_where_are_checked_by_name():
    with pytest.raises(ChunkCacheConfigError, match="rsm.config.fetch.chunk.cache.class must be one of"):
        ChunkCacheConfig.from_properties({"rsm.config.fetch.chunk.cache.class": "ssd"})
    with pytest.raises(ChunkCacheConfigError, match="fetch.chunk.cache.path is not set"):
        ChunkCacheConfig.from_properties({"rsm.config.fetch.chunk.cache.class": "disk"})
    memory = ChunkCacheConfig.from_properties(
        {"rsm.config.fetch.chunk.cache.class": "io.aiven.kafka.tieredstorage.fetch.cache.MemoryChunkCache"}
    )
    assert memory.cache_class == "memory" and ChunkCacheConfig.from_properties({}).cache_class == "memory"
