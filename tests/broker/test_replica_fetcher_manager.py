"""What the manager tells an out-of-range handler when a resolution begins (`TieringFacts`): live
values of the partition's topic config, the broker's remote tier switch and KIP-1023's flag; and a
partition whose log failed is followed again after a pause."""

from __future__ import annotations

import asyncio
import uuid

from quorum.broker import replica_fetcher_events as ev
from quorum.broker import replica_fetcher_manager as manager_module
from quorum.broker.log_config import BROKER_RESOURCE, FOLLOWER_FETCH_LAST_TIERED_OFFSET_ENABLE, LogConfig
from quorum.broker.partition import Partition
from quorum.broker.partition_view import AppendNotifier
from quorum.broker.replica_fetcher import FetchPhase
from quorum.broker.replica_fetcher_manager import ReplicaFetcherManager, _LeaderLink, monotonic_ms
from quorum.image.image import MetadataImage

FLAG = FOLLOWER_FETCH_LAST_TIERED_OFFSET_ENABLE
TIERED = LogConfig(remote_storage_enable=True)


def image(**configs: dict[str, str]) -> MetadataImage:
    """An image with dynamic broker configs: `default` is the cluster-wide one, `b<id>` a broker's."""
    keyed = {(BROKER_RESOURCE, "" if name == "default" else name[1:]): values for name, values in configs.items()}
    return MetadataImage("cluster", 1, configs=keyed)


def test_the_facts_are_live_values(tmp_path) -> None:
    async def run() -> None:
        manager = ReplicaFetcherManager(7, AppendNotifier(), lambda: 1, {"remote.log.storage.system.enable": "true"})
        partition = Partition("t", 0, uuid.uuid4(), tmp_path / "t-0", TIERED, broker_id=7)
        facts = manager.tiering_facts(partition)
        assert facts() == ev.TieringFacts(remote_storage_enabled=True)  # the flag's default is false
        manager.apply_image(image(default={FLAG: "true"}), [])
        assert facts() == ev.TieringFacts(remote_storage_enabled=True, fetch_from_tiered_offset=True)
        manager.apply_image(image(default={FLAG: "true"}, b7={FLAG: "false"}), [])
        assert facts().fetch_from_tiered_offset is False
        partition.apply_config(LogConfig(remote_storage_enable=True, compacted=True))
        assert facts().compacted is True
        partition.close()
        await manager.close()

    asyncio.run(run())


def test_a_topic_with_remote_storage_on_a_broker_without_a_remote_tier_is_not_tiered(tmp_path) -> None:
    async def run() -> None:
        manager = ReplicaFetcherManager(7, AppendNotifier(), lambda: 1, {FLAG: "true"})
        manager.apply_image(image(), [])
        partition = Partition("t", 0, uuid.uuid4(), tmp_path / "t-0", TIERED, broker_id=7)
        assert manager.tiering_facts(partition)() == ev.TieringFacts(fetch_from_tiered_offset=True)
        partition.close()
        await manager.close()

    asyncio.run(run())


def test_a_partition_whose_log_failed_is_followed_again_from_its_log_after_a_pause(tmp_path, monkeypatch) -> None:
    """Issue 19's soak: broker 103's disk filled, a follower append failed, and the partition stayed
    out of replication (and of the ISR) for good, since its leader epoch never changed again. It is
    followed again, in the same leader epoch, from what its log holds, once LOG_FAILURE_RETRY_S passed."""
    monkeypatch.setattr(manager_module, "LOG_FAILURE_RETRY_S", 0.05)

    async def run() -> None:
        link = _LeaderLink(ev.ReplicaFetcherConfig(7, 8), ("127.0.0.1", 1), AppendNotifier(), monotonic_ms)
        partition = Partition("t", 0, uuid.uuid4(), tmp_path / "t-0", LogConfig(), broker_id=7)
        tp = ("t", 0)
        link.follow([(partition, 3)], [])

        def full(records: bytes, crc_checked: bool = False) -> None:
            raise OSError(28, "No space left on device")

        partition.append_as_follower = full  # type: ignore[method-assign]
        link._feed(lambda now: [ev.AppendAsFollower(tp, b"batches", 5, 3)])
        failed = link.fetcher.state(tp)
        assert failed is not None and failed.phase is FetchPhase.FAILED and "No space left" in failed.reason
        await asyncio.sleep(0.5)
        again = link.fetcher.state(tp)
        assert again is not None and again.phase is not FetchPhase.FAILED
        assert (again.leader_epoch, again.fetch_offset) == (3, partition.log_end_offset)
        await link.close()
        partition.close()

    asyncio.run(run())


def test_the_fetch_built_with_a_failed_append_does_not_claim_the_records_it_could_not_write(tmp_path, monkeypatch):
    """Issue 19's one-round soak lost an acknowledged record: broker 103's follower append failed on a
    full disk, but the Fetch the core had built alongside it went out at the offset after those
    records; the leader counted them into its high watermark, 103 was then elected and truncated the
    others below it. The failed partition is left out of that request (the others still fetch); a
    request left with nothing is not sent, and the core hears of it as a failed send."""
    sent: list[ev.FetchRequest] = []

    async def fake_send(peer, request, versions):
        sent.append(request)
        raise manager_module.PeerUnavailable("test: nothing listens")

    monkeypatch.setattr(manager_module.rpc, "send", fake_send)

    async def run() -> None:
        link = _LeaderLink(ev.ReplicaFetcherConfig(7, 8), ("127.0.0.1", 1), AppendNotifier(), monotonic_ms)
        full_disk = Partition("t", 0, uuid.uuid4(), tmp_path / "t-0", LogConfig(), broker_id=7)
        healthy = Partition("t", 1, uuid.uuid4(), tmp_path / "t-1", LogConfig(), broker_id=7)
        link.follow([(full_disk, 3), (healthy, 3)], [])
        await asyncio.sleep(0.05)
        sent.clear()

        def full(records: bytes, crc_checked: bool = False) -> None:
            raise OSError(28, "No space left on device")

        full_disk.append_as_follower = full  # type: ignore[method-assign]
        claims = tuple(ev.FetchPartition((full_disk.topic, p.partition), p.topic_id, 3, 5, 3, 0, 1 << 20)
                       for p in (full_disk, healthy))
        request = ev.FetchRequest(7, 8, 500, 1, 1 << 20, claims)
        link._feed(lambda now: [ev.AppendAsFollower(("t", 0), b"batches", 5, 3), ev.Send(request)])
        await asyncio.sleep(0.05)
        assert [(part.topic_partition, part.fetch_offset) for part in sent[0].partitions] == [(("t", 1), 5)]
        assert not any(part.topic_partition == ("t", 0) for r in sent for part in r.partitions)
        sent.clear()
        lone = ev.FetchRequest(7, 8, 500, 1, 1 << 20, claims[1:])
        healthy.append_as_follower = full  # type: ignore[method-assign]
        link._feed(lambda now: [ev.AppendAsFollower(("t", 1), b"batches", 5, 3), ev.Send(lone)])
        await asyncio.sleep(0.05)
        assert not any(part.fetch_offset == 5 for r in sent for part in r.partitions)
        await link.close()
        full_disk.close()
        healthy.close()

    asyncio.run(run())
