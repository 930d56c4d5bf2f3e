"""Find the partition a read request (Fetch, ListOffsets, OffsetForLeaderEpoch) names, or its error.

The error codes are the ones Kafka's ReplicaManager and Partition give, checked in Kafka's order,
because clients act on them: UNKNOWN_TOPIC_OR_PARTITION / UNKNOWN_TOPIC_ID (the topic or partition
does not exist: refresh metadata, maybe give up), NOT_LEADER_OR_FOLLOWER (it exists but is not led
here: refresh metadata and go to the leader), then the leader epoch fencing of KIP-320
(FENCED_LEADER_EPOCH: the client's metadata is older than the broker's; UNKNOWN_LEADER_EPOCH: the
broker's is older than the client's, so the client retries here).
"""

from __future__ import annotations

import uuid
from collections.abc import Callable

from quorum.broker.partition_view import PartitionLookup, ServedPartition
from quorum.image.image import MetadataImage
from quorum.wire.errors import ErrorCode

ImageProvider = Callable[[], MetadataImage]
"""Gives the broker's current metadata image."""

NO_LEADER_EPOCH = -1
"""A request's CurrentLeaderEpoch when the client does not know it: the epoch check is skipped."""


def find_partition(lookup: PartitionLookup, image: MetadataImage, topic: str | uuid.UUID,
                   index: int) -> tuple[ServedPartition | None, ErrorCode]:
    """The hosted partition, or why there is none: a topic the image does not know is
    UNKNOWN_TOPIC_OR_PARTITION by name and UNKNOWN_TOPIC_ID by id; a partition index the topic
    lacks is UNKNOWN_TOPIC_OR_PARTITION; one that exists but is hosted elsewhere NOT_LEADER_OR_FOLLOWER."""
    if isinstance(topic, uuid.UUID):
        served = lookup.get_by_id(topic, index)
        info = image.topic_by_id(topic)
        unknown = ErrorCode.UNKNOWN_TOPIC_ID
    else:
        served = lookup.get(topic, index)
        info = image.topics.get(topic)
        unknown = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    if served is not None:
        return served, ErrorCode.NONE
    if info is None:
        return None, unknown
    if not any(p.partition == index for p in info.partitions):
        return None, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    return None, ErrorCode.NOT_LEADER_OR_FOLLOWER


def check_leader(partition: ServedPartition, current_leader_epoch: int, require_leader: bool = True) -> ErrorCode:
    """KIP-320 fencing, then leadership (Kafka's Partition.localLogWithEpochOrThrow order)."""
    if current_leader_epoch != NO_LEADER_EPOCH:
        epoch = partition.leader_epoch
        if current_leader_epoch < epoch:
            return ErrorCode.FENCED_LEADER_EPOCH
        if current_leader_epoch > epoch:
            return ErrorCode.UNKNOWN_LEADER_EPOCH
    if require_leader and not partition.is_leader:
        return ErrorCode.NOT_LEADER_OR_FOLLOWER
    return ErrorCode.NONE


def leader_partition(lookup: PartitionLookup, image: MetadataImage, topic: str | uuid.UUID, index: int,
                     current_leader_epoch: int,
                     require_leader: bool = True) -> tuple[ServedPartition | None, ErrorCode]:
    """The partition when this broker may answer for it, else None and the error to answer."""
    partition, error = find_partition(lookup, image, topic, index)
    if partition is None:
        return None, error
    error = check_leader(partition, current_leader_epoch, require_leader)
    return (partition, error) if error == ErrorCode.NONE else (None, error)
