"""The rules for one committed offset: what Kafka checks, and the KIP-232 check on top of it.

Kept apart from the membership state machine because they do not depend on it: given what is
committed (and in flight) for a partition and what a request wants to commit, decide the
partition's error or the value to store.
"""

from __future__ import annotations

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

    Kafka's check first (metadata length), then KIP-232: internal metadata must parse, and must
    not be older than the latest internal metadata committed for the partition. A commit without
    internal metadata passes as it does on Apache Kafka.
    """
    metadata = entry.metadata or ""
    if len(metadata) > config.offset_metadata_max_bytes:
        return ErrorCode.OFFSET_METADATA_TOO_LARGE
    try:
        _, internal = decode(metadata)
    except InvalidInternalMetadataError:
        return ErrorCode.INVALID_INTERNAL_METADATA
    if internal is not None:
        previous = stored_internal(latest)
        if previous is not None and internal < previous:
            return ErrorCode.INVALID_INTERNAL_METADATA
    return ErrorCode.NONE


def value_for(entry: CommitEntry, now_ms: int, retention_time_ms: int = -1) -> OffsetValue:
    """The OffsetCommitValue to store for an accepted entry.

    With internal metadata the topic_epoch goes into the record's tag, and its leader_epoch fills
    in the committed leader epoch when the client sent none, so OffsetFetch returns it too.
    """
    metadata = entry.metadata or ""
    internal = decode(metadata)[1]
    leader_epoch = entry.leader_epoch
    topic_epoch = -1
    if internal is not None:
        topic_epoch = internal.topic_epoch
        if leader_epoch == NO_EPOCH:
            leader_epoch = internal.leader_epoch
    expire = now_ms + retention_time_ms if retention_time_ms >= 0 else -1
    return OffsetValue(entry.offset, leader_epoch, metadata, now_ms, topic_epoch, expire)


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
