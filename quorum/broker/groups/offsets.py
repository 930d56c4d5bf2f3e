"""The rules for one committed offset: what Kafka checks, and the KIP-232 check on top of it.

Kept apart from the membership state machine because they do not depend on it: given what is
committed (and in flight) for a partition and what a request wants to commit, decide the
partition's error or the value to store.
"""

from __future__ import annotations

import uuid

from quorum.broker.groups.config import GroupConfig
from quorum.broker.groups.events import NO_EPOCH, CommitEntry
from quorum.wire.consumer_offsets import OffsetValue
from quorum.wire.errors import ErrorCode
from quorum.wire.internal_metadata import InternalMetadata, InvalidInternalMetadataError, decode


def stored_internal(value: OffsetValue | None) -> InternalMetadata | None:
    """The internal metadata of what is committed, if any. Lenient: a stored string that does not
    parse (written by a foreign client that happened to use the prefix) counts as none, so it can
    never block later commits."""
    if value is None:
        return None
    try:
        return decode(value.metadata)[1]
    except InvalidInternalMetadataError:
        return None


def check_entry(entry: CommitEntry, latest: OffsetValue | None, config: GroupConfig) -> int:
    """The error for committing `entry` over `latest` (the newest committed or in-flight value), or NONE.

    Kafka's check first (metadata length), then KIP-232: internal metadata must parse, must name
    the topic's current id if it names one (an offset read from a deleted topic means nothing in
    the topic created again under its name), and must not be older than the latest internal
    metadata committed for the same topic id. A commit without internal metadata passes as it does
    on Apache Kafka, and so does every commit when the broker runs as Kafka (`config.kip232` off).
    """
    metadata = entry.metadata or ""
    if len(metadata) > config.offset_metadata_max_bytes:
        return ErrorCode.OFFSET_METADATA_TOO_LARGE
    if not config.kip232:
        return ErrorCode.NONE
    try:
        _, internal = decode(metadata)
    except InvalidInternalMetadataError:
        return ErrorCode.INVALID_INTERNAL_METADATA
    if internal is None:
        return ErrorCode.NONE
    if not same_topic(internal.topic_id, entry.topic_id):
        return ErrorCode.INVALID_INTERNAL_METADATA
    previous = stored_internal(latest)
    if previous is not None and latest is not None and same_topic(latest.topic_id, entry.topic_id) \
            and internal < previous:
        return ErrorCode.INVALID_INTERNAL_METADATA
    return ErrorCode.NONE


def same_topic(named: uuid.UUID | None, current: uuid.UUID | None) -> bool:
    """Whether an id something names is the topic's current one; an unknown id on either side is no
    evidence of another topic (older commits, clusters or clients without topic ids)."""
    return named is None or current is None or named == current


def is_stale(value: OffsetValue, current_topic_id: uuid.UUID | None) -> bool:
    """Whether a committed offset belongs to a topic that is gone: deleted (the topic has no current
    id: it is not in the metadata), or deleted and created again under its name (the offset's stored
    id is not the current one). Kafka deletes such offsets with the topic
    (GroupCoordinator.onPartitionsDeleted); keeping them would start the new topic's consumers at the
    old topic's position."""
    return current_topic_id is None or not same_topic(value.topic_id, current_topic_id)


def value_for(entry: CommitEntry, now_ms: int, retention_time_ms: int = -1, kip232: bool = True) -> OffsetValue:
    """The OffsetCommitValue to store for an accepted entry.

    With internal metadata the topic_epoch goes into the record's tag, and its leader_epoch fills
    in the committed leader epoch when the client sent none, so OffsetFetch returns it too. The
    topic's current id goes into its own tag, so a later load can tell whose offset it is. Without
    `kip232` the value is Kafka's: the metadata string and the client's leader epoch as they came,
    no tags (OffsetCommitValue v3, as Kafka writes it).
    """
    metadata = entry.metadata or ""
    expire = now_ms + retention_time_ms if retention_time_ms >= 0 else -1
    if not kip232:
        return OffsetValue(entry.offset, entry.leader_epoch, metadata, now_ms, -1, expire, None)
    internal = decode(metadata)[1]
    leader_epoch = entry.leader_epoch
    topic_epoch = -1
    if internal is not None:
        topic_epoch = internal.topic_epoch
        if leader_epoch == NO_EPOCH:
            leader_epoch = internal.leader_epoch
    return OffsetValue(entry.offset, leader_epoch, metadata, now_ms, topic_epoch, expire, entry.topic_id)


def storage_error_for_commit(code: int) -> int:
    """Kafka's mapping of an append failure to the error an OffsetCommit answers."""
    if code in (ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, ErrorCode.NOT_ENOUGH_REPLICAS,
                ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND, ErrorCode.REQUEST_TIMED_OUT):
        return ErrorCode.COORDINATOR_NOT_AVAILABLE
    if code in (ErrorCode.NOT_LEADER_OR_FOLLOWER, ErrorCode.KAFKA_STORAGE_ERROR):
        return ErrorCode.NOT_COORDINATOR
    if code in (ErrorCode.MESSAGE_TOO_LARGE, ErrorCode.RECORD_LIST_TOO_LARGE, ErrorCode.INVALID_FETCH_SIZE):
        return ErrorCode.INVALID_COMMIT_OFFSET_SIZE
    return code


def storage_error_for_group(code: int) -> int:
    """Kafka's mapping of an append failure to the error a SyncGroup answers."""
    if code in (ErrorCode.MESSAGE_TOO_LARGE, ErrorCode.RECORD_LIST_TOO_LARGE, ErrorCode.INVALID_FETCH_SIZE):
        return ErrorCode.UNKNOWN_SERVER_ERROR
    return storage_error_for_commit(code)
