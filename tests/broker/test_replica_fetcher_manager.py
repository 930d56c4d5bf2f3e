"""What the manager tells an out-of-range handler when a resolution begins (`TieringFacts`): live
values of the partition's topic config, the broker's remote tier switch and KIP-1023's flag."""

from __future__ import annotations

import asyncio
import uuid

from quorum.broker import replica_fetcher_events as ev
from quorum.broker.log_config import BROKER_RESOURCE, FOLLOWER_FETCH_LAST_TIERED_OFFSET_ENABLE, LogConfig
from quorum.broker.partition import Partition
from quorum.broker.partition_view import AppendNotifier
from quorum.broker.replica_fetcher_manager import ReplicaFetcherManager
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
