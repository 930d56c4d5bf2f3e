"""ListOffsets (API 2) and OffsetForLeaderEpoch (API 23): which offset answers a consumer's question.

ListOffsets maps a target timestamp to an offset, as Kafka's Partition.fetchOffsetForTimestamp does:

* -1 LATEST: the high watermark (READ_UNCOMMITTED) or the last stable offset (READ_COMMITTED), with
  the current leader epoch; the log end offset for a follower or debugging request, which has no
  isolation level.
* -2 EARLIEST: the log start offset, remote segments included. -4 EARLIEST_LOCAL (KIP-405): the
  first offset in the local log, which is the log start offset until a remote tier holds the head
  of the log.
* -3 MAX_TIMESTAMP (KIP-734): the record with the largest timestamp.
* -5 LATEST_TIERED (KIP-1005): the highest offset uploaded to the remote tier; -1 when the topic is
  not tiered or nothing is uploaded (or not known yet).
* -6 EARLIEST_PENDING_UPLOAD (KIP-1023, v11): the next offset to upload, by the KIP's rules: -1
  when the topic is not tiered; when the highest uploaded offset is unknown (a new leader that has
  not read the remote metadata yet, or nothing uploaded), the log start offset if the local log
  starts there (nothing can be in the remote tier alone), else -1; otherwise max(highest uploaded
  + 1, log start offset). Its epoch is the leader epoch of that offset.
* a timestamp >= 0: the first offset whose record timestamp is >= it, in the remote segments'
  time indexes first, then the local log.

Found offsets come with the leader epoch of the batch holding them (clients keep it to validate
their position after a leader change, KIP-320). For a consumer, an offset at or past what it may
read (the high watermark or last stable offset) is not revealed: the answer is offset -1, as is the
answer when no record qualifies. A partition named twice in one request gets INVALID_REQUEST.
A tiered partition whose remote metadata this broker has not read yet (just after a start-up)
answers every lookup but -1, -4 and -6 (which is then -1) with OFFSET_NOT_AVAILABLE: where its log
starts is not known. A leader whose high watermark has not yet reached the offset where its epoch
began (the log end when it was elected) answers a consumer's LATEST, and a lookup it cannot answer below the high
watermark, with OFFSET_NOT_AVAILABLE, which clients retry: the high watermark it knows may be
older than the one the previous leader already showed, and a consumer must not be sent back.

OffsetForLeaderEpoch answers KIP-101/279/320's "where did epoch E end?" from the partition's
leader-epoch cache, so a consumer can tell whether its position survived a truncation. Both
require the leader (ReplicaId -2, "debugging", may ask ListOffsets of a follower) and check
CurrentLeaderEpoch as Fetch does.
"""

from __future__ import annotations

import logging
from collections import Counter
from typing import Any

from quorum.broker.fetch_resolve import ImageProvider, leader_partition
from quorum.broker.log_answers import OffsetOutOfRange, TimestampOffset
from quorum.broker.partition_view import PartitionLookup, ServedPartition
from quorum.broker.remote_tier_plugin import RemoteReadError, RemoteTier
from quorum.net.dispatch import Reply
from quorum.wire.errors import ErrorCode
from quorum.wire.protocol import APIS, Request
from quorum.wire.records import BATCH_HEADER_SIZE, RecordBatch

log = logging.getLogger(__name__)

LIST_OFFSETS = APIS[2]
OFFSET_FOR_LEADER_EPOCH = APIS[23]
_ListResponse = LIST_OFFSETS.response
_ListTopic = _ListResponse.ListOffsetsTopicResponse
_ListPartition = _ListTopic.ListOffsetsPartitionResponse
_EpochResponse = OFFSET_FOR_LEADER_EPOCH.response
_EpochTopic = _EpochResponse.OffsetForLeaderTopicResult
_EpochPartition = _EpochTopic.EpochEndOffset

LATEST_TIMESTAMP = -1
EARLIEST_TIMESTAMP = -2
MAX_TIMESTAMP = -3
EARLIEST_LOCAL_TIMESTAMP = -4
LATEST_TIERED_TIMESTAMP = -5
EARLIEST_PENDING_UPLOAD_TIMESTAMP = -6

CONSUMER_REPLICA_ID = -1
DEBUGGING_REPLICA_ID = -2
READ_COMMITTED = 1
UNKNOWN = -1
"""Kafka's UNKNOWN_TIMESTAMP, UNKNOWN_OFFSET and NO_PARTITION_LEADER_EPOCH are all -1."""


def epoch_at(partition: ServedPartition, offset: int) -> int:
    """The leader epoch of the batch holding `offset`, -1 when the log holds no such batch;
    from the remote segment's metadata below the local log."""
    remote = partition.remote
    if remote is not None and offset < partition.local_log_start_offset:
        return remote.epoch_for(offset)
    try:
        data = partition.read(offset, 1, partition.log_end_offset)
    except OffsetOutOfRange:
        return UNKNOWN
    if len(data) < BATCH_HEADER_SIZE:
        return UNKNOWN
    return RecordBatch(data).partition_leader_epoch


class OffsetNotAvailable(Exception):
    """The leader's high watermark is below the start of its epoch (OFFSET_NOT_AVAILABLE)."""


def epoch_start_offset(partition: ServedPartition) -> int:
    """Where the current leader epoch began: the end of the epoch before it (-1 when none)."""
    return partition.end_offset_for_epoch(partition.leader_epoch - 1).end_offset


def offset_for(partition: ServedPartition, timestamp: int, isolation_level: int | None) -> tuple[int, int, int]:
    """(timestamp, offset, leader epoch) answering `timestamp` for a partition this broker may
    answer for; `isolation_level` None for a follower or debugging request. Raises
    OffsetNotAvailable as Kafka's Partition.fetchOffsetForTimestamp does."""
    if isolation_level is None:
        fetchable = partition.log_end_offset
        not_available = False
    else:
        fetchable = partition.last_stable_offset if isolation_level == READ_COMMITTED else partition.high_watermark
        not_available = epoch_start_offset(partition) > partition.high_watermark
    if timestamp == LATEST_TIMESTAMP:
        if not_available:
            raise OffsetNotAvailable
        return UNKNOWN, fetchable, partition.leader_epoch
    remote = partition.remote
    if remote is not None and not remote.ever_loaded and timestamp not in (EARLIEST_LOCAL_TIMESTAMP,
                                                                            EARLIEST_PENDING_UPLOAD_TIMESTAMP):
        raise OffsetNotAvailable  # the log start is not known before the remote metadata is read
    if timestamp in (EARLIEST_TIMESTAMP, EARLIEST_LOCAL_TIMESTAMP):
        start = partition.log_start_offset if timestamp == EARLIEST_TIMESTAMP else partition.local_log_start_offset
        return UNKNOWN, start, epoch_at(partition, start)
    if timestamp == LATEST_TIERED_TIMESTAMP:
        uploaded = partition.remote.highest_uploaded_offset if partition.remote is not None else None
        if uploaded is None or uploaded < 0:
            return UNKNOWN, UNKNOWN, UNKNOWN
        return UNKNOWN, uploaded, epoch_at(partition, uploaded)
    if timestamp == EARLIEST_PENDING_UPLOAD_TIMESTAMP:
        pending = earliest_pending_upload_offset(partition)
        if pending < 0:
            return UNKNOWN, UNKNOWN, UNKNOWN
        epoch = partition.leader_epoch if pending >= partition.log_end_offset else epoch_at(partition, pending)
        return UNKNOWN, pending, epoch
    found: TimestampOffset | None
    found = partition.max_timestamp() if timestamp == MAX_TIMESTAMP else partition.offset_for_timestamp(timestamp)
    if found is None or (isolation_level is not None and found.offset >= fetchable):
        if not_available:
            raise OffsetNotAvailable
        return UNKNOWN, UNKNOWN, UNKNOWN
    return found.timestamp, found.offset, epoch_at(partition, found.offset)


def earliest_pending_upload_offset(partition: ServedPartition) -> int:
    """KIP-1023's -6 (see the module docstring); -1 when it cannot be answered."""
    remote = partition.remote
    if remote is None or not remote.ever_loaded:
        return UNKNOWN
    uploaded = remote.highest_uploaded_offset
    log_start = partition.log_start_offset
    if uploaded is None or uploaded < 0:
        return log_start if partition.local_log_start_offset == log_start else UNKNOWN
    return max(uploaded + 1, log_start)


class ListOffsetsHandler:
    """Answers ListOffsets and OffsetForLeaderEpoch from the partitions `lookup` finds; `image`
    gives the broker's metadata image, to tell an unknown partition from one led elsewhere."""

    def __init__(self, lookup: PartitionLookup, image: ImageProvider, remote: RemoteTier | None = None) -> None:
        self._lookup = lookup
        self._image = image
        self._remote = remote

    async def list_offsets(self, request: Request) -> Reply:
        body, version = request.body, request.version
        image = self._image()
        replica = body.replica_id
        isolation = body.isolation_level if replica == CONSUMER_REPLICA_ID else None
        counts = Counter((t.name, p.partition_index) for t in body.topics for p in t.partitions)
        topics = []
        for topic in body.topics:
            answers = []
            for p in topic.partitions:
                if counts[(topic.name, p.partition_index)] > 1:
                    answers.append(_list_error(p.partition_index, ErrorCode.INVALID_REQUEST))
                    continue
                partition, error = leader_partition(self._lookup, image, topic.name, p.partition_index,
                                                    p.current_leader_epoch,
                                                    require_leader=replica != DEBUGGING_REPLICA_ID)
                if partition is None:
                    answers.append(_list_error(p.partition_index, error))
                    continue
                try:
                    found = await self._remote_offset_for(partition, p.timestamp)
                    timestamp, offset, epoch = found if found else offset_for(partition, p.timestamp, isolation)
                except RemoteReadError as exc:
                    log.warning("%s-%d: looking up timestamp %d in the remote tier failed: %s", topic.name,
                                p.partition_index, p.timestamp, exc)  # fmt: skip
                    answers.append(_list_error(p.partition_index, ErrorCode.KAFKA_STORAGE_ERROR))
                    continue
                except OffsetNotAvailable:
                    answers.append(_list_error(p.partition_index, ErrorCode.OFFSET_NOT_AVAILABLE))
                    continue
                answers.append(_ListPartition(partition_index=p.partition_index, error_code=ErrorCode.NONE,
                                              old_style_offsets=[], timestamp=timestamp, offset=offset,
                                              leader_epoch=epoch))
            topics.append(_ListTopic(name=topic.name, partitions=answers))
        return Reply(_ListResponse(throttle_time_ms=0, topics=topics), version)

    async def _remote_offset_for(self, partition: ServedPartition, timestamp: int) -> tuple[int, int, int] | None:
        """A timestamp's answer from the remote segments' time indexes, None to look locally."""
        remote = partition.remote
        if timestamp < 0 or remote is None or self._remote is None:
            return None
        local_start = partition.local_log_start_offset
        if not any(s.max_timestamp_ms >= timestamp and s.start_offset < local_start for s in remote.finished):
            return None
        found = await self._remote.offset_for_timestamp(partition, timestamp)
        if found is None or found.offset >= local_start:
            return None
        return found.timestamp, found.offset, epoch_at(partition, found.offset)

    async def offset_for_leader_epoch(self, request: Request) -> Reply:
        body, version = request.body, request.version
        image = self._image()
        topics = []
        for topic in body.topics:
            answers = []
            for p in topic.partitions:
                partition, error = leader_partition(self._lookup, image, topic.topic, p.partition,
                                                    p.current_leader_epoch)
                if partition is None:
                    answers.append(_EpochPartition(error_code=error, partition=p.partition, leader_epoch=UNKNOWN,
                                                   end_offset=UNKNOWN))
                    continue
                found = partition.end_offset_for_epoch(p.leader_epoch)
                answers.append(_EpochPartition(error_code=ErrorCode.NONE, partition=p.partition,
                                               leader_epoch=found.leader_epoch, end_offset=found.end_offset))
            topics.append(_EpochTopic(topic=topic.topic, partitions=answers))
        return Reply(_EpochResponse(throttle_time_ms=0, topics=topics), version)


def _list_error(index: int, error: int) -> Any:
    return _ListPartition(partition_index=index, error_code=error, old_style_offsets=[], timestamp=UNKNOWN,
                          offset=UNKNOWN, leader_epoch=UNKNOWN)
