"""The contract between the sans-IO Raft core and its drivers (the node shell, the simulator).

Modelled on etcd-io/raft's Ready/Advance: the driver feeds events into `RaftCore` methods, each
of which returns a list of actions. The driver carries the actions out *in order*: an action that
persists state (PersistState, AppendBatches, Truncate) must be durable before any later Send in the
same list leaves the node, which is how a vote or an acknowledgement never outruns the disk.

Messages between nodes are the dataclasses below, not wire objects: the shell translates them to
and from Kafka RPCs (Vote, BeginQuorumEpoch, EndQuorumEpoch, Fetch, with the KIP-595 fields) in
`quorum/server`, and the simulator passes them as they are. The log is read through `RaftLog`;
the core never writes it, it asks the driver to.

The calls a driver makes (see `quorum.raft.core.RaftCore`): `start`, `tick`, `on_request`,
`on_response`, `on_send_failed`, `on_flushed`, `propose`, `resign`, and for KIP-630 snapshots
`on_snapshot_created` (the state machine finished one) and `on_snapshot_fetched` (the last chunk
of a fetched one was written). Three rules hold them together:

- Before the driver feeds the core another event, it has applied every AppendBatches, Truncate,
  InstallSnapshot and AdvanceLogStartOffset the core returned so far, so the log the core reads
  at the start of a call is the one it asked for. (The rest of a list may still be pending:
  reporting `on_flushed` as soon as an append is durable is fine. The core counts an append only
  once `on_flushed` says so, which lets a driver flush in the background, as long as it flushes
  before a later Send of the same list leaves.)
- `on_response` gets back the request object the response answers (the shell keeps it by
  correlation id, the simulator carries it along). The core matches it by identity, which is how a
  duplicated, reordered or late response to an abandoned request is told apart from a fresh one.
- `next_deadline_ms()` says when `tick` has something to do; calling `tick` more often is harmless.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol

# ---------------------------------------------------------------------------------------------
# The log as the core sees it: read-only.


@dataclass(frozen=True, slots=True)
class OffsetAndEpoch:
    offset: int
    epoch: int


class RaftLog(Protocol):
    """What the core may read. Offsets are Kafka offsets: `end_offset` is the next offset to write."""

    @property
    def start_offset(self) -> int: ...

    @property
    def end_offset(self) -> int: ...

    @property
    def flushed_offset(self) -> int:
        """End offset of what is durable on disk: only this counts toward the high watermark."""
        ...

    def last_fetched_epoch(self) -> int:
        """Epoch of the last batch in the log (or of the snapshot the log starts from); 0 when empty."""
        ...

    def end_offset_for_epoch(self, epoch: int) -> OffsetAndEpoch:
        """The largest epoch <= `epoch` in the log and the end offset of that epoch (KIP-595, OffsetForLeaderEpoch).

        Returns (end_offset, last_epoch) when `epoch` is at or above the last epoch; (-1, -1) when
        `epoch` is below every epoch in the log.
        """
        ...

    def read(self, offset: int, max_bytes: int) -> bytes:
        """Whole record batches from `offset` (which is a batch boundary), at least one batch if any."""
        ...


class SnapshotStore(Protocol):
    """The complete KIP-630 snapshots of this replica, as the core may read them.

    Only complete snapshots count: a `.checkpoint.part` being written or fetched is invisible
    here until the driver has validated and renamed it.
    """

    def snapshot_ids(self) -> tuple[OffsetAndEpoch, ...]:
        """Every complete snapshot, oldest first."""
        ...

    def earliest_snapshot(self) -> OffsetAndEpoch | None:
        """The oldest complete snapshot (the one at the log start offset once it is above 0)."""
        ...

    def latest_snapshot(self) -> OffsetAndEpoch | None:
        """The newest complete snapshot, by (end offset, epoch)."""
        ...

    def snapshot_size(self, snapshot_id: OffsetAndEpoch) -> int | None:
        """The size in bytes of a complete snapshot, None when there is no such snapshot."""
        ...

    def read_snapshot(self, snapshot_id: OffsetAndEpoch, position: int, max_bytes: int) -> bytes:
        """Up to `max_bytes` raw bytes of a complete snapshot from `position` (0 <= position < size)."""
        ...


# ---------------------------------------------------------------------------------------------
# Messages between nodes.


@dataclass(frozen=True, slots=True)
class VoteRequest:
    cluster_id: str | None
    candidate_epoch: int
    candidate_id: int
    last_epoch: int
    last_offset: int  # the candidate's log end offset
    pre_vote: bool = False


@dataclass(frozen=True, slots=True)
class VoteResponse:
    error: int  # ErrorCode: NONE, INCONSISTENT_CLUSTER_ID, ...
    leader_id: int
    leader_epoch: int
    vote_granted: bool
    pre_vote: bool = False


@dataclass(frozen=True, slots=True)
class BeginQuorumEpochRequest:
    cluster_id: str | None
    leader_id: int
    leader_epoch: int


@dataclass(frozen=True, slots=True)
class BeginQuorumEpochResponse:
    error: int
    leader_id: int
    leader_epoch: int


@dataclass(frozen=True, slots=True)
class EndQuorumEpochRequest:
    cluster_id: str | None
    leader_id: int
    leader_epoch: int
    preferred_successors: tuple[int, ...]


@dataclass(frozen=True, slots=True)
class EndQuorumEpochResponse:
    error: int
    leader_id: int
    leader_epoch: int


@dataclass(frozen=True, slots=True)
class FetchRequest:
    cluster_id: str | None
    replica_id: int  # voters and observers give their node id
    current_leader_epoch: int
    fetch_offset: int
    last_fetched_epoch: int
    max_bytes: int = 1 << 20
    max_wait_ms: int = 500


@dataclass(frozen=True, slots=True)
class FetchResponse:
    error: int
    leader_id: int
    leader_epoch: int
    high_watermark: int
    log_start_offset: int
    records: bytes = b""
    diverging_epoch: OffsetAndEpoch | None = None  # truncate to this end offset of this epoch
    snapshot_id: OffsetAndEpoch | None = None  # KIP-630: the offset is below our log start, fetch this snapshot


@dataclass(frozen=True, slots=True)
class FetchSnapshotRequest:
    """KIP-630 FetchSnapshot for `__cluster_metadata-0`: bytes of `snapshot_id` from `position`."""

    cluster_id: str | None
    replica_id: int
    current_leader_epoch: int
    snapshot_id: OffsetAndEpoch
    position: int
    max_bytes: int


@dataclass(frozen=True, slots=True)
class FetchSnapshotResponse:
    """One chunk of a snapshot: `data` starts at `position`; `size` is the whole file's size."""

    error: int  # NONE, SNAPSHOT_NOT_FOUND, POSITION_OUT_OF_RANGE, NOT_LEADER_OR_FOLLOWER, epoch errors
    leader_id: int
    leader_epoch: int
    snapshot_id: OffsetAndEpoch
    size: int = -1
    position: int = -1
    data: bytes = b""


Message = (VoteRequest | VoteResponse | BeginQuorumEpochRequest | BeginQuorumEpochResponse
           | EndQuorumEpochRequest | EndQuorumEpochResponse | FetchRequest | FetchResponse
           | FetchSnapshotRequest | FetchSnapshotResponse)


# ---------------------------------------------------------------------------------------------
# Actions: what the driver must do, in order.


@dataclass(frozen=True, slots=True)
class PersistState:
    """Write `quorum-state` durably (epoch, vote, leader) before anything after it."""

    epoch: int
    voted_id: int  # -1 for none
    leader_id: int  # -1 for none


@dataclass(frozen=True, slots=True)
class AppendBatches:
    """Append these record batches (already carrying their base offsets and epochs) and fsync them.

    When the data is durable the driver calls `RaftCore.on_flushed(end_offset)`.
    """

    batches: bytes
    end_offset: int


@dataclass(frozen=True, slots=True)
class Truncate:
    """Remove everything at and after `offset` (a divergence found by Fetch)."""

    offset: int


@dataclass(frozen=True, slots=True)
class Send:
    destination: int
    message: Message


@dataclass(frozen=True, slots=True)
class Reply:
    """Answer the request identified by `request_id` (the driver's handle from `on_request`)."""

    request_id: int
    message: Message


@dataclass(frozen=True, slots=True)
class HighWatermarkAdvanced:
    """Records below `high_watermark` are committed: the state machine may apply them."""

    high_watermark: int


@dataclass(frozen=True, slots=True)
class ClusterIdCommitted:
    """The cluster id is known to be committed: write it to `meta.properties`."""

    cluster_id: str


@dataclass(frozen=True, slots=True)
class Fatal:
    """A condition the spec names as fatal (INCONSISTENT_CLUSTER_ID from an elected leader): stop the node."""

    reason: str


@dataclass(frozen=True, slots=True)
class LeaderChanged:
    """For observers of the core (metrics, the controller): who leads which epoch now."""

    leader_id: int
    epoch: int


@dataclass(frozen=True, slots=True)
class WriteSnapshotChunk:
    """Write `data` at `position` of the fetched snapshot's `<id>.checkpoint.part`.

    The chunk that reaches `size` completes the file: the driver fsyncs and validates it (the
    Size and every batch's CRC), renames it to `<id>.checkpoint`, and reports the outcome with
    `RaftCore.on_snapshot_fetched(snapshot_id, error)`; a file that fails validation is deleted.
    A chunk that cannot be written is reported the same way, with the error.
    """

    snapshot_id: OffsetAndEpoch
    position: int
    data: bytes
    size: int


@dataclass(frozen=True, slots=True)
class AbandonSnapshotFetch:
    """Give up fetching `snapshot_id`: delete its `.checkpoint.part` (a new leader, a refusal)."""

    snapshot_id: OffsetAndEpoch


@dataclass(frozen=True, slots=True)
class InstallSnapshot:
    """A fetched snapshot is complete: the log now starts at its end offset (everything the log
    held below it, or diverging from it, goes: `Log.set_snapshot_boundary`), and the state
    machine loads it and replays the log from there. Durable before anything after it."""

    snapshot_id: OffsetAndEpoch


@dataclass(frozen=True, slots=True)
class AdvanceLogStartOffset:
    """Make `offset` (a snapshot's end offset) the log start offset and delete the snapshots
    below it (KIP-630, "When to Increase the LogStartOffset" and "When to Delete Snapshots")."""

    offset: int


Action = (PersistState | AppendBatches | Truncate | Send | Reply | HighWatermarkAdvanced | ClusterIdCommitted
          | Fatal | LeaderChanged | WriteSnapshotChunk | AbandonSnapshotFetch | InstallSnapshot
          | AdvanceLogStartOffset)


@dataclass(frozen=True, slots=True)
class QuorumConfig:
    """Kafka's quorum.* settings, with Kafka's defaults (milliseconds)."""

    node_id: int
    voters: tuple[int, ...]
    election_timeout_ms: int = 1000
    fetch_timeout_ms: int = 2000
    election_backoff_max_ms: int = 1000
    request_timeout_ms: int = 2000
    fetch_max_bytes: int = 1 << 20
    fetch_max_wait_ms: int = 500
    """How long the leader may hold a Fetch that has nothing new to return (Kafka's KRaft uses 500)."""
    retry_backoff_ms: int = 20
    """controller.quorum.retry.backoff.ms: pause before retrying a failed request."""
    snapshot_fetch_max_bytes: int = 10 * 1024 * 1024
    """replica.fetch.response.max.bytes: the most snapshot bytes asked for, or sent, in one FetchSnapshot."""
    start_offset_lag_time_max_ms: int = 7 * 24 * 60 * 60 * 1000
    """metadata.start.offset.lag.time.max.ms: how long the leader waits for every live replica to
    reach a snapshot before it moves the log start offset there anyway (KIP-630)."""
    extra: dict[str, str] = field(default_factory=dict)

    @property
    def is_voter(self) -> bool:
        return self.node_id in self.voters


# ---------------------------------------------------------------------------------------------
# What DescribeQuorum (KIP-595) reports.


@dataclass(frozen=True, slots=True)
class ReplicaDescription:
    """One replica as the leader sees it; -1 where the leader has not heard from it in this epoch."""

    replica_id: int
    log_end_offset: int
    last_fetch_timestamp: int
    last_caught_up_timestamp: int


@dataclass(frozen=True, slots=True)
class QuorumDescription:
    """The answer to DescribeQuorum: only a leader fills in the replicas' progress."""

    leader_id: int
    leader_epoch: int
    high_watermark: int
    voters: tuple[ReplicaDescription, ...]
    observers: tuple[ReplicaDescription, ...]
