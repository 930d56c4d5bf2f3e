"""Whether a replica's local log is *short*: it holds less than the topic's local retention keeps.

A follower bootstrapped from the tiered offset (KIP-1023) starts its local log at the leader's
earliest pending upload offset, so it holds only what is not yet in the remote tier, where the
others keep `local.retention.*` worth of log. Led by it, consumers reading below its local start go
to S3, and its disk holds no copy of recent history should the remote tier be slow. The issue's rule
(the KIP leaves it open): such a replica is not made leader while another in-sync replica with a
longer local log exists, until its own local log reaches local retention. This module says which
replicas are short; the broker reports them to the controller in its BrokerHeartbeat
(`quorum.wire.kraft_messages`' ShortLocalLogs tag), and the controller's elections
(`quorum.controller.election`) prefer the others.

A local log has reached local retention (is not short) when any of these holds:

* it starts where the whole log starts (nothing of the log lives only in the remote tier, or the
  partition is not tiered at all);
* `local.retention.bytes` is set and the local log is within one segment of it: size-based
  retention deletes whole segments, so a replica in steady state holds between
  local.retention.bytes - segment.bytes and local.retention.bytes;
* `local.retention.ms` is set and its oldest local record is older than now - local.retention.ms
  (time-based retention deletes a segment only once its newest record is that old, so a replica in
  steady state always has a first record at least that old).

With neither limit set (both -1: keep everything locally), only the first rule can free a replica,
which is right: the others then hold the whole log.
"""

from __future__ import annotations

import uuid
import weakref
from collections.abc import Callable, Iterable

from quorum.broker.log_answers import OffsetOutOfRange
from quorum.broker.partition import Partition
from quorum.log.errors import LogError
from quorum.wire.records import BATCH_HEADER_SIZE, RecordBatch, TimestampType


def is_short(*, log_start_offset: int, local_log_start_offset: int, local_size_bytes: int,
             oldest_local_timestamp_ms: int | None, now_ms: int, local_retention_bytes: int | None,
             local_retention_ms: int | None, segment_bytes: int) -> bool:
    """The rule of the module docstring; `oldest_local_timestamp_ms` is None for an empty local log."""
    if local_log_start_offset <= log_start_offset:
        return False
    if local_retention_bytes is not None and local_retention_bytes >= 0 and (
            local_size_bytes + segment_bytes > local_retention_bytes):
        return False
    return not (local_retention_ms is not None and local_retention_ms >= 0 and oldest_local_timestamp_ms is not None
                and oldest_local_timestamp_ms <= now_ms - local_retention_ms)


def replica_is_short(replica: Partition, now_ms: int,
                     oldest_timestamp: Callable[[Partition], int | None] | None = None) -> bool:
    """`is_short` for one hosted replica, from the Partition's public properties. Its first local
    batch (`oldest_timestamp`, default: read it) is needed only for a replica whose local log starts
    above the log start (a tiered one) and that has not reached local.retention.bytes."""
    start, log_start = replica.local_log_start_offset, replica.log_start_offset
    if start <= log_start:
        return False
    config = replica.config
    size = replica.log.size_in_bytes
    if config.local_retention_bytes is not None and 0 <= config.local_retention_bytes < size + config.segment_bytes:
        return False
    oldest = (oldest_timestamp or oldest_local_timestamp)(replica)
    return is_short(log_start_offset=log_start, local_log_start_offset=start, local_size_bytes=size,
                    oldest_local_timestamp_ms=oldest, now_ms=now_ms, local_retention_bytes=config.local_retention_bytes,
                    local_retention_ms=config.local_retention_ms, segment_bytes=config.segment_bytes)


class LocalLogLengths:
    """What a broker reports in each heartbeat: `short(replicas, now_ms)`, topic id -> the
    partitions (sorted) whose local log is short. The oldest local timestamp of a replica is read
    once per local log start (a read of its first batch, which may be large) and kept while that
    start does not move; replicas that are closed and dropped leave the cache with them."""

    def __init__(self) -> None:
        self._oldest: weakref.WeakKeyDictionary[Partition, tuple[int, int]] = weakref.WeakKeyDictionary()

    def short(self, replicas: Iterable[Partition], now_ms: int) -> dict[uuid.UUID, list[int]]:
        found: dict[uuid.UUID, list[int]] = {}
        for replica in replicas:
            if replica_is_short(replica, now_ms, self._oldest_timestamp):
                found.setdefault(replica.topic_id, []).append(replica.partition)
        return {topic_id: sorted(partitions) for topic_id, partitions in found.items()}

    def _oldest_timestamp(self, replica: Partition) -> int | None:
        start = replica.local_log_start_offset
        cached = self._oldest.get(replica)
        if cached is not None and cached[0] == start:
            return cached[1]
        timestamp = oldest_local_timestamp(replica)
        if timestamp is not None:
            self._oldest[replica] = (start, timestamp)
        return timestamp


def oldest_local_timestamp(replica: Partition) -> int | None:
    """The timestamp of the first local record (its batch's, or the broker's append time), None when
    the local log is empty or its start moved meanwhile."""
    start, end = replica.local_log_start_offset, replica.log_end_offset
    if start >= end:
        return None
    try:
        data = replica.read(start, 1, end)
    except (OffsetOutOfRange, LogError):  # the log moved (retention, truncation, deletion): next heartbeat
        return None
    if len(data) < BATCH_HEADER_SIZE:
        return None
    batch = RecordBatch(data)
    return batch.max_timestamp if batch.timestamp_type == TimestampType.LOG_APPEND_TIME else batch.base_timestamp


__all__ = ["LocalLogLengths", "is_short", "oldest_local_timestamp", "replica_is_short"]
