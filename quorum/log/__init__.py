"""Durable storage: the segmented record-batch log, its leader-epoch cache, KIP-630 snapshot files
(`quorum.log.snapshot`), and the small state files a KRaft node keeps (`quorum-state`,
`meta.properties`), all in Apache Kafka's layouts.

Everything here follows design principle 4: what a node acknowledges survives `kill -9`
(fsync before acknowledging, atomic file replacement), and recovery finds torn tails by CRC and
truncates them rather than loading them.
"""

from quorum.log.atomic import atomic_write, fsync_directory
from quorum.log.epoch_cache import CHECKPOINT_NAME, EpochEntry, LeaderEpochCache, read_checkpoint, write_checkpoint
from quorum.log.errors import (
    CorruptFileError,
    CorruptLogError,
    CorruptSnapshotError,
    InvalidAppendError,
    InvalidOffsetError,
    LogError,
    OffsetOutOfRangeError,
    PositionOutOfRangeError,
    SnapshotChunkError,
    SnapshotError,
    SnapshotExistsError,
    SnapshotNotFoundError,
)
from quorum.log.index import DEFAULT_INDEX_INTERVAL_BYTES
from quorum.log.log import Log
from quorum.log.meta_properties import (
    META_PROPERTIES_NAME,
    MetaProperties,
    random_kafka_uuid,
    read_meta_properties,
    write_meta_properties,
)
from quorum.log.quorum_state import QUORUM_STATE_NAME, QuorumState, read_quorum_state, write_quorum_state
from quorum.log.segment import DEFAULT_SEGMENT_BYTES
from quorum.log.snapshot import (
    SnapshotDirectory,
    SnapshotFetchWriter,
    SnapshotReader,
    SnapshotWriter,
    clean_partial_snapshots,
    delete_snapshots_below,
    latest_snapshot,
    list_snapshots,
    read_snapshot_chunk,
    snapshot_path,
)
from quorum.log.start_offset import START_OFFSET_NAME

__all__ = [
    "CHECKPOINT_NAME",
    "DEFAULT_INDEX_INTERVAL_BYTES",
    "DEFAULT_SEGMENT_BYTES",
    "META_PROPERTIES_NAME",
    "QUORUM_STATE_NAME",
    "START_OFFSET_NAME",
    "CorruptFileError",
    "CorruptLogError",
    "CorruptSnapshotError",
    "EpochEntry",
    "InvalidAppendError",
    "InvalidOffsetError",
    "LeaderEpochCache",
    "Log",
    "LogError",
    "MetaProperties",
    "OffsetOutOfRangeError",
    "PositionOutOfRangeError",
    "QuorumState",
    "SnapshotChunkError",
    "SnapshotDirectory",
    "SnapshotError",
    "SnapshotExistsError",
    "SnapshotFetchWriter",
    "SnapshotNotFoundError",
    "SnapshotReader",
    "SnapshotWriter",
    "atomic_write",
    "clean_partial_snapshots",
    "delete_snapshots_below",
    "fsync_directory",
    "latest_snapshot",
    "list_snapshots",
    "random_kafka_uuid",
    "read_checkpoint",
    "read_meta_properties",
    "read_quorum_state",
    "read_snapshot_chunk",
    "snapshot_path",
    "write_checkpoint",
    "write_meta_properties",
    "write_quorum_state",
]
