"""What a broker needs from a remote tier (KIP-405 tiered storage), as small interfaces.

The broker hosts partitions whose oldest segments may live only in a remote store (S3). It never
talks to that store itself: `tiered_follower` implements these interfaces with boto3 and the
node's entry point composes the two, so `quorum` does not import `tiered_follower`.

* `RemoteSegmentMetadata` is Kafka's RemoteLogSegmentMetadata: one uploaded (or being uploaded)
  segment, its offsets, the leader epochs it covers, its size and largest timestamp, the broker
  that uploaded it, and its state (`RemoteSegmentState`, Kafka's ids). A segment counts as
  tiered only in COPY_SEGMENT_FINISHED, recorded after every object, manifest last, is stored.
* `RemoteLogState` is the sans-IO view of one partition's remote metadata that every broker
  hosting a replica keeps in memory: "which remote segment holds offset X", "highest uploaded
  offset", the remote log start, without asking the store on every request. The remote tier
  feeds it (`load`, `apply`); the partition, Fetch and ListOffsets read it.
* `RemoteStorage` (the segment's objects) and `RemoteLogMetadataStore` (the durable metadata)
  are blocking: the remote tier runs them on a thread pool, never on the event loop.
* `remote_tier_plugin.RemoteTier` is the plug-in the broker role is composed with: it reads
  remote segments for Fetch, answers timestamp lookups in remote time indexes, runs the leader's
  upload and retention task, and deletes a deleted topic's remote data.
"""

from __future__ import annotations

import bisect
import enum
import uuid
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace
from typing import Protocol

from quorum.log.epoch_cache import EpochEntry


class RemoteSegmentState(enum.IntEnum):
    """Kafka's RemoteLogSegmentState, with its ids; each state may only follow the one before it."""

    COPY_SEGMENT_STARTED = 0
    COPY_SEGMENT_FINISHED = 1
    DELETE_SEGMENT_STARTED = 2
    DELETE_SEGMENT_FINISHED = 3


@dataclass(frozen=True, slots=True, order=True)
class TopicIdPartition:
    """Kafka's TopicIdPartition: remote objects are named by topic name and id, so a re-created
    topic never reads the segments of the one it replaced."""

    topic: str
    topic_id: uuid.UUID
    partition: int

    def __str__(self) -> str:
        return f"{self.topic}-{self.partition} (topic id {self.topic_id})"


@dataclass(frozen=True, slots=True)
class RemoteSegmentMetadata:
    """Kafka's RemoteLogSegmentMetadata (and its update records, folded in: `state`, `broker_id`
    and `event_timestamp_ms` are those of the latest event)."""

    partition: TopicIdPartition
    segment_id: uuid.UUID
    start_offset: int
    end_offset: int
    """The segment's last offset (inclusive), as Kafka's endOffset."""
    leader_epochs: tuple[EpochEntry, ...]
    """The epochs of the segment's batches and where each starts inside it (the first at start_offset)."""
    size_in_bytes: int
    max_timestamp_ms: int
    broker_id: int
    event_timestamp_ms: int
    state: RemoteSegmentState = RemoteSegmentState.COPY_SEGMENT_STARTED
    copied: bool = False
    """Whether its copy ever finished: a deleted segment's offsets count as uploaded (KIP-1023's
    highest uploaded offset) only if so, not when it was an unfinished copy cleaned up."""
    custom_metadata: bytes | None = None
    """KIP-917: what the remote storage returned from copying the segment, recorded with
    COPY_SEGMENT_FINISHED and handed back to it on every read (None: it returned nothing)."""

    def __post_init__(self) -> None:
        if not 0 <= self.start_offset <= self.end_offset:
            raise ValueError(f"remote segment {self.segment_id} of {self.partition}: offsets "
                             f"{self.start_offset}..{self.end_offset} are not a range")
        if not self.leader_epochs or self.leader_epochs[0].start_offset != self.start_offset:
            raise ValueError(f"remote segment {self.segment_id} of {self.partition}: leader epochs "
                             f"{list(self.leader_epochs)} must start at its start offset {self.start_offset}")

    def moved_to(self, state: RemoteSegmentState, broker_id: int, now_ms: int) -> RemoteSegmentMetadata:
        """The same segment in `state`, recorded by `broker_id` at `now_ms`; raises ValueError
        for a state that does not follow this one (Kafka's RemoteLogSegmentState.isValidTransition)."""
        if not valid_transition(self.state, state):
            raise ValueError(f"remote segment {self.segment_id} of {self.partition}: {self.state.name} "
                             f"cannot move to {state.name}")
        copied = self.copied or state == RemoteSegmentState.COPY_SEGMENT_FINISHED
        return replace(self, state=state, broker_id=broker_id, event_timestamp_ms=now_ms, copied=copied)

    @property
    def next_offset(self) -> int:
        return self.end_offset + 1

    def epoch_at(self, offset: int) -> int:
        """The leader epoch of `offset` in this segment, -1 outside it."""
        if not self.start_offset <= offset <= self.end_offset:
            return -1
        starts = [entry.start_offset for entry in self.leader_epochs]
        return self.leader_epochs[bisect.bisect_right(starts, offset) - 1].epoch

    @property
    def object_name(self) -> str:
        """The stem of the segment's objects: Kafka's 20-digit base offset and the segment id."""
        return f"{self.start_offset:020d}-{self.segment_id}"


def valid_transition(current: RemoteSegmentState, new: RemoteSegmentState) -> bool:
    """Kafka's rule: STARTED -> FINISHED or DELETE_STARTED; FINISHED -> DELETE_STARTED;
    DELETE_STARTED -> DELETE_FINISHED; repeating a state is allowed (a retried publish)."""
    allowed = {
        RemoteSegmentState.COPY_SEGMENT_STARTED: {RemoteSegmentState.COPY_SEGMENT_FINISHED,
                                                  RemoteSegmentState.DELETE_SEGMENT_STARTED},
        RemoteSegmentState.COPY_SEGMENT_FINISHED: {RemoteSegmentState.DELETE_SEGMENT_STARTED},
        RemoteSegmentState.DELETE_SEGMENT_STARTED: {RemoteSegmentState.DELETE_SEGMENT_FINISHED},
        RemoteSegmentState.DELETE_SEGMENT_FINISHED: set(),
    }
    return new == current or new in allowed[current]


class RemoteLogState:
    """One partition's remote segments as this broker knows them (sans-IO); see the module docstring.

    Until the first `load` the highest uploaded offset is unknown (None): a new leader answers
    ListOffsets -6 from it only once it has learnt it (KIP-1023).
    """

    def __init__(self, partition: TopicIdPartition) -> None:
        self.partition = partition
        self._segments: dict[uuid.UUID, RemoteSegmentMetadata] = {}
        self._finished: list[RemoteSegmentMetadata] = []  # COPY_SEGMENT_FINISHED, by start offset
        self._highest_uploaded: int | None = None
        self.loaded = False
        self.ever_loaded = False
        """False until the first `load`: until then this broker does not know where the log starts
        (the remote segments may hold its head), so reads and ListOffsets below the local log
        start answer a retriable error instead of guessing."""

    def __repr__(self) -> str:
        return (f"RemoteLogState({self.partition}, finished={len(self._finished)}, "
                f"highest_uploaded={self._highest_uploaded}, loaded={self.loaded})")

    def load(self, segments: Iterable[RemoteSegmentMetadata]) -> None:
        """Replace what is known by the store's whole view (each segment in its latest state)."""
        self._segments = {}
        for segment in segments:
            self._check(segment)
            self._segments[segment.segment_id] = segment
        self.loaded = self.ever_loaded = True
        self._reindex()

    def invalidate(self) -> None:
        """This broker became the leader: what it knows may be stale until the next `load`, so
        the highest uploaded offset is unknown until then (KIP-1023: a new leader answers -6 from
        the metadata only once it has read it)."""
        self.loaded = False
        self._highest_uploaded = None

    def apply(self, segment: RemoteSegmentMetadata) -> None:
        """One event this broker published (or learnt of); an event older than the known state is ignored."""
        self._check(segment)
        known = self._segments.get(segment.segment_id)
        if known is not None and known.state > segment.state:
            return
        self._segments[segment.segment_id] = segment
        self._reindex()

    def _check(self, segment: RemoteSegmentMetadata) -> None:
        if segment.partition != self.partition:
            raise ValueError(f"remote segment {segment.segment_id} belongs to {segment.partition}, "
                             f"not {self.partition}")

    def _reindex(self) -> None:
        self._finished = sorted((s for s in self._segments.values()
                                 if s.state == RemoteSegmentState.COPY_SEGMENT_FINISHED),
                                key=lambda s: (s.start_offset, s.end_offset))  # fmt: skip
        uploaded = [s.end_offset for s in self._segments.values() if s.copied]
        if uploaded:
            self._highest_uploaded = max(uploaded)
        elif self.loaded:
            self._highest_uploaded = -1

    # -- queries --------------------------------------------------------------------------------

    @property
    def highest_uploaded_offset(self) -> int | None:
        """The last offset of the highest segment whose copy finished (deleted ones included: their
        offsets stay uploaded as far as KIP-1023 is concerned); -1 when none; None before `load`."""
        return self._highest_uploaded

    @property
    def start_offset(self) -> int | None:
        """The first offset a finished remote segment holds; None when none does."""
        return self._finished[0].start_offset if self._finished else None

    @property
    def finished(self) -> tuple[RemoteSegmentMetadata, ...]:
        """The readable segments, by start offset."""
        return tuple(self._finished)

    def segments(self, *states: RemoteSegmentState) -> list[RemoteSegmentMetadata]:
        """Every known segment in one of `states` (all when none is given), by start offset."""
        found = [s for s in self._segments.values() if not states or s.state in states]
        return sorted(found, key=lambda s: (s.start_offset, s.end_offset))

    def segment_for(self, offset: int) -> RemoteSegmentMetadata | None:
        """The finished segment holding `offset`; of two (an unclean election let two lineages
        upload), the one uploaded last, whose epochs are the current lineage's."""
        holding = [s for s in self._finished if s.start_offset <= offset <= s.end_offset]
        if not holding:
            return None
        return max(holding, key=lambda s: (max(e.epoch for e in s.leader_epochs), s.event_timestamp_ms))

    def segment_after(self, offset: int) -> RemoteSegmentMetadata | None:
        """The first finished segment starting above `offset` (reads skip a gap left by compaction)."""
        for segment in self._finished:
            if segment.start_offset > offset:
                return segment
        return None

    def epoch_for(self, offset: int) -> int:
        """The leader epoch of `offset` from any segment whose copy finished (deleted ones too),
        -1 when none holds it."""
        for segment in sorted(self._segments.values(), key=lambda s: -s.event_timestamp_ms):
            if segment.copied and segment.start_offset <= offset <= segment.end_offset:
                return segment.epoch_at(offset)
        return -1

    @property
    def size_in_bytes(self) -> int:
        return sum(segment.size_in_bytes for segment in self._finished)

    def epoch_entries_upto(self, offset: int) -> tuple[EpochEntry, ...]:
        """The leader-epoch history of the remote log below `offset`, from the finished segments."""
        entries: list[EpochEntry] = []
        for segment in self._finished:
            for entry in segment.leader_epochs:
                if entry.start_offset >= offset:
                    break
                if not entries or entry.epoch > entries[-1].epoch:
                    entries.append(entry)
        return tuple(entries)


# ---------------------------------------------------------------------------------------------
# The blocking interfaces tiered_follower implements (run on a thread pool)


class IndexType(enum.Enum):
    """Kafka's RemoteStorageManager.IndexType (what one `.indexes` object holds)."""

    OFFSET = "offset"
    TIMESTAMP = "timestamp"
    LEADER_EPOCH = "leader_epoch"
    PRODUCER_SNAPSHOT = "producer_snapshot"


@dataclass(frozen=True, slots=True)
class SegmentUpload:
    """What one segment uploads (Kafka's LogSegmentData): the `.log` file, its indexes, the
    leader-epoch checkpoint truncated to the segment's end, the producer snapshot at its next offset."""

    log_path: str
    log_size: int
    indexes: dict[IndexType, bytes]


class RemoteStorageError(Exception):
    """A remote storage operation failed for good; `retriable` when trying again later may work
    (a transient fault that outlasted the retries), not for a missing bucket or denied access."""

    def __init__(self, message: str, retriable: bool = False) -> None:
        super().__init__(message)
        self.retriable = retriable


class RemoteStorage(Protocol):
    """Kafka's RemoteStorageManager: a segment's objects."""

    def copy_segment(self, segment: RemoteSegmentMetadata, data: SegmentUpload) -> bytes | None:
        """Store the segment's objects, the commit marker (manifest) last; returns the custom
        metadata (KIP-917) to record with COPY_SEGMENT_FINISHED, or None."""
        ...

    def fetch_log(self, segment: RemoteSegmentMetadata, start_position: int, end_position: int) -> bytes:
        """Bytes [start_position, end_position) of the segment's `.log` (clipped to its size)."""
        ...

    def fetch_index(self, segment: RemoteSegmentMetadata, index: IndexType) -> bytes:
        ...

    def delete_segment(self, segment: RemoteSegmentMetadata) -> None:
        """Remove the segment's objects (the manifest first); missing objects are not an error."""
        ...

    def delete_partition(self, partition: TopicIdPartition) -> int:
        """Remove every object of the partition (topic deletion); returns how many were removed."""
        ...


class RemoteLogMetadataStore(Protocol):
    """Kafka's RemoteLogMetadataManager: where segment metadata events are kept durably."""

    def publish(self, segment: RemoteSegmentMetadata) -> None:
        """Record `segment` in its state, durably when this returns."""
        ...

    def list_segments(self, partition: TopicIdPartition) -> Sequence[RemoteSegmentMetadata]:
        """Every segment of the partition in its latest recorded state."""
        ...

    def delete_partition(self, partition: TopicIdPartition) -> int:
        ...
