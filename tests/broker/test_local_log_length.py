"""Which replicas have a short local log (issue 15's leader preference for bootstrapped replicas):
the rule, and the rule read off a real Partition that starts above the log start as a KIP-1023
bootstrap leaves it."""

from __future__ import annotations

import uuid

import pytest

from quorum.broker.local_log_length import LocalLogLengths, is_short, replica_is_short
from quorum.broker.log_config import LogConfig
from quorum.broker.partition import Partition
from quorum.broker.remote_tier import RemoteLogState, RemoteSegmentMetadata, RemoteSegmentState, TopicIdPartition
from quorum.log.epoch_cache import EpochEntry
from quorum.wire.records import Record, build_batch

NOW = 1_763_700_000_000
HOUR = 3_600_000
MB = 1 << 20
TOPIC_ID = uuid.UUID(int=0xBEEF)


def rule(**overrides: object) -> bool:
    """A tiered replica whose local log starts at 500 of a log starting at 0, 10 MB, oldest record an
    hour old, with local.retention.bytes 100 MB and local.retention.ms 1 day, 1 MB segments."""
    args: dict[str, object] = dict(log_start_offset=0, local_log_start_offset=500, local_size_bytes=10 * MB,
                                   oldest_local_timestamp_ms=NOW - HOUR, now_ms=NOW, local_retention_bytes=100 * MB,
                                   local_retention_ms=24 * HOUR, segment_bytes=MB)
    args.update(overrides)
    return is_short(**args)  # type: ignore[arg-type]


def test_a_local_log_below_both_local_retentions_is_short() -> None:
    assert rule()


@pytest.mark.parametrize("overrides", [
    {"local_log_start_offset": 0},  # nothing of the log lives only in the remote tier
    {"local_size_bytes": 99 * MB + 1},  # within a segment of local.retention.bytes: retention's steady state
    {"local_size_bytes": 100 * MB},
    {"oldest_local_timestamp_ms": NOW - 24 * HOUR},  # holds local.retention.ms worth
    {"oldest_local_timestamp_ms": NOW - 25 * HOUR},
])
def test_any_one_reached_limit_makes_it_long(overrides: dict[str, object]) -> None:
    assert not rule(**overrides)


def test_unset_limits_do_not_count() -> None:
    assert rule(local_retention_bytes=None, local_retention_ms=None)
    assert rule(local_retention_bytes=None, local_size_bytes=1000 * MB)
    assert rule(local_retention_ms=None, oldest_local_timestamp_ms=0)
    assert rule(local_retention_bytes=-1, local_retention_ms=-1, local_size_bytes=1000 * MB,
                oldest_local_timestamp_ms=0)


def test_an_empty_local_log_above_the_log_start_is_short() -> None:
    assert rule(oldest_local_timestamp_ms=None, local_size_bytes=0)


def tiered(tmp_path, config: LogConfig, start: int, timestamps: list[int]) -> Partition:
    """A follower that started its local log at `start` (KIP-1023's bootstrap), with one batch per
    timestamp after it, and a remote tier holding [0, start)."""
    partition = Partition("t", 0, TOPIC_ID, tmp_path / "t-0", config, broker_id=2)
    partition.update_state(1, 3, (1, 2))
    partition.start_at(start, (EpochEntry(0, 0),))
    offset = start
    for timestamp in timestamps:
        partition.append_as_follower(build_batch([Record(offset, timestamp, None, b"x" * 100, [])], base_offset=offset,
                                                 partition_leader_epoch=3))
        offset += 1
    remote = RemoteLogState(TopicIdPartition(TOPIC_ID, 0, "t"))
    remote.load([RemoteSegmentMetadata(
        TopicIdPartition(TOPIC_ID, 0, "t"), uuid.uuid4(), 0, start - 1, (EpochEntry(0, 0),), 1000, NOW - 48 * HOUR,
        1, NOW, RemoteSegmentState.COPY_SEGMENT_FINISHED, True)])
    partition.remote = remote
    return partition


def test_a_bootstrapped_partition_is_short_until_it_holds_local_retention(tmp_path) -> None:
    config = LogConfig(remote_storage_enable=True, local_retention_ms=24 * HOUR, local_retention_bytes=None)
    young = tiered(tmp_path / "young", config, 500, [NOW - HOUR, NOW])
    assert (young.log_start_offset, young.local_log_start_offset) == (0, 500)
    assert replica_is_short(young, NOW)
    assert not replica_is_short(young, NOW + 24 * HOUR)  # its oldest record is now a day old
    old = tiered(tmp_path / "old", config, 500, [NOW - 30 * HOUR, NOW])
    assert not replica_is_short(old, NOW)
    lengths = LocalLogLengths()
    assert lengths.short([young, old], NOW) == {TOPIC_ID: [0]}
    assert lengths.short([young, old], NOW + 24 * HOUR) == {}  # from the timestamps read at the first report


def test_a_partition_without_a_remote_tier_is_never_short(tmp_path) -> None:
    partition = Partition("t", 0, TOPIC_ID, tmp_path / "t-0", LogConfig(), broker_id=2)
    partition.update_state(1, 3, (1, 2))
    partition.start_at(500)  # the leader's log start moved past us: local start == log start
    assert not replica_is_short(partition, NOW)
    assert LocalLogLengths().short([partition], NOW) == {}


def test_the_oldest_timestamp_is_read_again_when_the_local_start_moves(tmp_path) -> None:
    config = LogConfig(remote_storage_enable=True, local_retention_ms=24 * HOUR, local_retention_bytes=None)
    replica = tiered(tmp_path, config, 500, [NOW - 30 * HOUR, NOW])
    lengths = LocalLogLengths()
    assert lengths.short([replica], NOW) == {}
    replica.increment_log_start_offset(501)  # the old record is gone from the local log
    assert replica.local_log_start_offset == 501
    assert lengths.short([replica], NOW) == {TOPIC_ID: [0]}
