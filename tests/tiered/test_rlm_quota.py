"""KIP-956's quotas (tiered_follower.rlm_quota, sans-IO) as Kafka's SimpleRate measures them, and
the remote log manager honouring them in virtual time: a copy quota and a fetch quota of N bytes/s
hold within 10% over a (virtual) minute."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from tests.tiered.test_remote_log_manager import BROKER, MemoryTier, leader_partition
from tiered_follower.remote_log_manager import RemoteLogManager
from tiered_follower.rlm_config import RemoteLogManagerConfig, RemoteLogManagerConfigError
from tiered_follower.rlm_quota import UNLIMITED, ByteRateQuota, QuotaConfig, QuotaConfigError


def test_an_unlimited_quota_never_throttles():
    quota = ByteRateQuota(QuotaConfig())
    quota.record(10**12, 0)
    assert quota.throttle_ms(0) == 0


def test_the_rate_is_never_taken_over_less_than_one_window_and_the_throttle_is_kafkas():
    quota = ByteRateQuota(QuotaConfig(bytes_per_second=1000, samples=11, window_ms=1000))
    quota.record(2000, 0)
    assert quota.rate(0) == 2000  # 2000 bytes over one window (SimpleRate), not over 0 ms
    # QuotaUtils.throttleTime: (rate - bound) / bound * window
    assert quota.throttle_ms(0) == 1000
    # a span shorter than one window still counts as one: at t=1000 the rate is still 2000 B/s
    assert quota.throttle_ms(1000) == 1000
    assert quota.rate(2000) == 1000 and quota.throttle_ms(2000) == 0


def test_the_throttle_brings_the_rate_back_to_the_quota():
    quota = ByteRateQuota(QuotaConfig(bytes_per_second=1000, samples=11, window_ms=1000))
    quota.record(5000, 0)
    wait = quota.throttle_ms(0)
    assert wait == 4000
    # Kafka's formula counts the wait on top of the one-window minimum already in the span, so
    # the copier, looking again, waits once more: 5000 bytes over 5 s
    assert quota.rate(wait) == 1250 and quota.throttle_ms(wait) == 1000
    assert quota.rate(5000) == 1000 and quota.throttle_ms(5000) == 0


def test_samples_older_than_the_measured_span_are_forgotten():
    quota = ByteRateQuota(QuotaConfig(bytes_per_second=1000, samples=2, window_ms=1000))
    quota.record(10_000, 0)
    assert quota.throttle_ms(500) > 0
    assert quota.rate(2000) == 0  # 2 samples x 1 s without an event: gone
    assert quota.throttle_ms(2000) == 0


def test_a_copier_waiting_out_the_throttle_holds_the_quota_over_a_minute():
    """Kafka's copier loop in virtual time: wait (a second at most) while throttled, record, copy."""
    quota = ByteRateQuota(QuotaConfig(bytes_per_second=100_000))
    now, copied = 0, 0
    while True:
        while (wait := quota.throttle_ms(now)) > 0:
            now += min(wait, 1000)
        if now >= 60_000:
            break
        quota.record(30_000, now)
        copied += 30_000
    assert copied == pytest.approx(100_000 * 60, rel=0.10)


def test_settings_are_kafkas_and_bad_ones_are_named():
    config = RemoteLogManagerConfig.from_properties({
        "remote.log.manager.copy.max.bytes.per.second": "1048576",
        "remote.log.manager.fetch.quota.window.num": "5",
        "remote.log.manager.thread.pool.size": "3",
        "remote.log.manager.copier.thread.pool.size": "2",
    })  # fmt: skip
    assert config.copy_quota == QuotaConfig(1_048_576, 11, 1000)
    assert config.fetch_quota == QuotaConfig(UNLIMITED, 5, 1000)
    assert (config.copier_threads, config.expiration_threads, config.follower_threads) == (2, 3, 3)
    assert (config.reader_threads, config.reader_max_pending, config.fetch_max_wait_ms) == (10, 100, 500)
    with pytest.raises(QuotaConfigError, match="remote.log.manager.fetch.max.bytes.per.second"):
        RemoteLogManagerConfig.from_properties({"remote.log.manager.fetch.max.bytes.per.second": "fast"})
    with pytest.raises(RemoteLogManagerConfigError, match="remote.log.manager.expiration.thread.pool.size"):
        RemoteLogManagerConfig.from_properties({"remote.log.manager.expiration.thread.pool.size": "0"})
    with pytest.raises(RemoteLogManagerConfigError, match="remote.log.reader.max.pending.tasks"):
        RemoteLogManagerConfig.from_properties({"remote.log.reader.max.pending.tasks": "-3"})


class VirtualTime:
    """The manager's clock and sleep: sleeping moves the clock, nothing waits."""

    def __init__(self) -> None:
        self.now_ms = 1_700_000_000_000

    def clock_ms(self) -> int:
        return self.now_ms

    async def sleep(self, seconds: float) -> None:
        self.now_ms += round(seconds * 1000)
        await asyncio.sleep(0)

    def manager(self, tier: MemoryTier, properties: dict[str, str]) -> RemoteLogManager:
        """A remote log manager over `tier` living in this virtual time."""
        return RemoteLogManager(BROKER, tier, tier, properties, clock_ms=self.clock_ms, sleep=self.sleep)


def test_the_remote_log_task_holds_its_copy_quota_over_a_minute(tmp_path: Path):
    partition = leader_partition(tmp_path, batches=260)
    segment_sizes = [s.size for s in partition.log.rolled_segments()]
    quota = sum(segment_sizes) // 120  # the whole log in two minutes: half of it in the first
    time, tier = VirtualTime(), MemoryTier()
    copied_at: list[tuple[int, int]] = []
    tier.on_copy = lambda segment: copied_at.append((time.now_ms, segment.size_in_bytes))
    manager = time.manager(tier, {"remote.log.manager.copy.max.bytes.per.second": str(quota)})
    asyncio.run(manager.run_once([partition]))
    assert len(copied_at) == len(segment_sizes)  # everything was copied, at last
    start = copied_at[0][0]
    in_first_minute = sum(size for at, size in copied_at if at - start < 60_000)
    assert in_first_minute == pytest.approx(quota * 60, rel=0.10)
    assert time.now_ms - start >= 110_000  # the task waited (in virtual time) instead of copying at once
    partition.close()


def test_remote_reads_hold_the_fetch_quota_over_a_minute_and_are_answered_empty_when_throttled(tmp_path: Path):
    partition = leader_partition(tmp_path, batches=60)
    tier = MemoryTier()
    asyncio.run(RemoteLogManager(BROKER, tier, tier).run_once([partition]))
    assert partition.remote is not None
    last = partition.remote.finished[-1].end_offset
    quota = 20_000
    time = VirtualTime()
    manager = time.manager(tier, {"remote.log.manager.fetch.max.bytes.per.second": str(quota)})

    async def consume_for_a_minute() -> tuple[int, int]:
        served = empty = 0
        offset = 0
        start = time.now_ms
        while time.now_ms - start < 60_000:
            data = await manager.read(partition, offset, 8192)
            time.now_ms += 5  # the consumer's own time between fetches
            if not data:
                empty += 1
                continue
            served += len(data)
            offset += len(data) // 1000  # about one record of 900 bytes per 1000 bytes of batch
            offset = 0 if offset > last else offset
        await manager.close()
        return served, empty

    served, empty = asyncio.run(consume_for_a_minute())
    assert served == pytest.approx(quota * 60, rel=0.10)
    assert empty > 0 and manager.reader.stats["throttled"] == empty
    partition.close()
