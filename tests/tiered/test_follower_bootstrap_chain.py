"""The bootstrap's whole chain in one process, with the remote tier in memory: a leader's upload
task writes the producer snapshots, the follower's plug-in reads the auxiliary state back, the
follower's log starts there as the fetcher manager would start it, and, made leader, it still
recognises an idempotent producer's retries of batches on both sides of the pending upload offset."""

from __future__ import annotations

import asyncio
from pathlib import Path

from quorum.broker.log_config import LogConfig
from quorum.broker.partition import Partition
from quorum.broker.replica_fetcher_out_of_range import StartAt
from quorum.log.epoch_cache import EpochEntry
from tests.broker.test_partition import T0, TOPIC_ID, client_batch
from tests.tiered.test_remote_log_manager import MemoryTier
from tiered_follower.bootstrap_plugin import FollowerBootstrapPlugin
from tiered_follower.follower_bootstrap import TIERED_OFFSET, AuxStateWork
from tiered_follower.remote_log_manager import RemoteLogManager

LEADER, FOLLOWER = 101, 102
CONFIG = LogConfig(segment_bytes=600, remote_storage_enable=True, local_retention_ms=None,
                   local_retention_bytes=None, retention_ms=None)  # fmt: skip


def partition(path: Path, broker: int) -> Partition:
    return Partition("orders", 0, TOPIC_ID, path / f"orders-0-{broker}", CONFIG, broker)


def bootstrap(tmp_path: Path, batches: int, others: int = 0) -> tuple[Partition, Partition, list[bytes], int]:
    """A leader with `batches` batches of producer 42 (two records each), then `others` of
    producer 43, its rolled segments uploaded; the follower bootstrapped from the pending upload
    offset and caught up."""
    leader = partition(tmp_path, LEADER)
    leader.update_state(LEADER, 3, (LEADER,))
    sent = [client_batch(2, pid=42, epoch=0, seq=2 * n, first=2 * n) for n in range(batches)]
    for data in sent:
        leader.append_as_leader(data, T0)
    for n in range(others):
        leader.append_as_leader(client_batch(2, pid=43, epoch=0, seq=2 * n), T0)
    leader.advance_high_watermark(leader.log_end_offset)
    tier = MemoryTier()
    asyncio.run(RemoteLogManager(LEADER, tier, tier).run_once([leader]))
    assert leader.remote is not None and leader.remote.highest_uploaded_offset is not None
    pending = leader.remote.highest_uploaded_offset + 1
    follower = partition(tmp_path, FOLLOWER)
    follower.update_state(LEADER, 3, (LEADER, FOLLOWER))
    manager = RemoteLogManager(FOLLOWER, tier, tier)
    manager._hosted = lambda: [follower]  # what the task's run() is given: the hosted partitions
    plugin = FollowerBootstrapPlugin(FOLLOWER, manager, metadata_wait_s=0)

    async def perform() -> object:
        step = await plugin.perform(("orders", 0), AuxStateWork(("orders", 0), TIERED_OFFSET, pending, 3, 0,
                                                                  leader.log_end_offset))
        if plugin._watcher is not None:
            plugin._watcher.cancel()
        return step

    step = asyncio.run(perform())
    assert isinstance(step, StartAt) and step.offset == pending and step.producer_snapshot
    follower.start_at(step.offset, [EpochEntry(e.epoch, e.start_offset) for e in step.leader_epochs],
                      step.producer_snapshot)  # what the fetcher manager does with the StartAt
    if leader.log_end_offset > pending:
        follower.append_as_follower(leader.read(pending, 1 << 20, leader.log_end_offset))
    follower.update_state(FOLLOWER, 4, (FOLLOWER,))  # the leader is gone: the follower leads
    return leader, follower, sent, pending


def test_a_retry_of_a_producers_last_batch_below_the_pending_upload_offset_is_recognised(tmp_path):
    """Its state comes from the remote segment's producer snapshot alone: the follower never
    fetched any of its batches."""
    leader, follower, sent, pending = bootstrap(tmp_path, 6, others=12)
    assert 2 * len(sent) <= pending  # all of producer 42's batches are below the start
    retry = follower.append_as_leader(sent[-1], T0)
    assert retry.duplicate and retry.base_offset == 2 * (len(sent) - 1)
    following = follower.append_as_leader(client_batch(2, pid=42, epoch=0, seq=2 * len(sent)), T0)
    assert not following.duplicate and following.base_offset == follower.log_end_offset - 2
    leader.close()
    follower.close()


def test_batches_straddling_the_pending_upload_offset_keep_their_sequence_after_the_bootstrap(tmp_path):
    leader, follower, sent, pending = bootstrap(tmp_path, 15)
    assert 0 < pending < follower.log_end_offset  # some of producer 42's batches are above the start
    retry = follower.append_as_leader(sent[-1], T0)  # the producer did not hear the answer: it retries
    assert retry.duplicate and retry.base_offset == 2 * (len(sent) - 1)
    following = follower.append_as_leader(client_batch(2, pid=42, epoch=0, seq=2 * len(sent)), T0)
    assert not following.duplicate and following.base_offset == 2 * len(sent)
    leader.close()
    follower.close()
