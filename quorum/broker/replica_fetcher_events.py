"""What goes into the replica fetcher core and what comes out of it: plain data, no wire classes.

The fetcher (`quorum.broker.replica_fetcher.ReplicaFetcher`) speaks to one leader broker with
three RPCs: Fetch (with ReplicaId and the KIP-903 replica epoch), OffsetForLeaderEpoch and
ListOffsets. Their requests and responses are the dataclasses below, holding only the fields the
core reads or writes; the shell translates them to and from Kafka RPCs (a sessionless full Fetch,
isolation level READ_UNCOMMITTED, the versions the leader's ApiVersions allow) and the simulator
passes them as they are. A response comes back with the request object it answers (the shell
keeps it by correlation id), which the core matches by identity: that is how a late answer to an
abandoned request is told apart from the current one.

The follower's log is read through `FollowerLog`; the core never writes it, it returns actions
(`AppendAsFollower`, `Truncate`, ...) that the driver carries out in order, before it feeds the
core its next event (the same rule as `quorum.raft.interface`).
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

from quorum.raft.interface import OffsetAndEpoch

TopicPartition = tuple[str, int]
NO_EPOCH = -1

# ---------------------------------------------------------------------------------------------
# The follower's log, read-only


class FollowerLog(Protocol):
    """What the fetcher reads of one follower partition: always the log as it is now.

    Adapting `quorum.broker.partition.Partition`: the offsets are the log's; `latest_epoch` is
    the epoch of the last entry of the leader-epoch cache (`Log.epoch_entries`), not the Raft
    `last_fetched_epoch` (which answers 0 for a log without epochs).
    """

    @property
    def log_start_offset(self) -> int: ...

    @property
    def log_end_offset(self) -> int: ...

    @property
    def high_watermark(self) -> int: ...

    def latest_epoch(self) -> int | None:
        """The epoch of the last batch in the log; None when the log holds no epoch at all."""
        ...

    def end_offset_for_epoch(self, epoch: int) -> OffsetAndEpoch | None:
        """The largest epoch <= `epoch` in the log and where it ends (the log end offset for the
        latest epoch); None when `epoch` is below every epoch the log holds, or it holds none."""
        ...


# ---------------------------------------------------------------------------------------------
# Configuration


@dataclass(frozen=True, slots=True)
class ReplicaFetcherConfig:
    """One fetcher: this broker fetching from `leader_id`, with Kafka's replica.fetch.* defaults."""

    broker_id: int
    leader_id: int
    broker_epoch: int = -1
    """KIP-903's ReplicaEpoch: this broker's registration epoch, so the leader can fence a stale one."""
    fetch_backoff_ms: int = 1000
    """replica.fetch.backoff.ms: how long a partition waits after an error."""
    fetch_max_bytes: int = 1 << 20
    """replica.fetch.max.bytes: PartitionMaxBytes of each partition."""
    fetch_response_max_bytes: int = 10 << 20
    """replica.fetch.response.max.bytes: MaxBytes of the whole response."""
    fetch_wait_max_ms: int = 500
    """replica.fetch.wait.max.ms."""
    fetch_min_bytes: int = 1
    """replica.fetch.min.bytes."""
    truncate_on_fetch: bool = True
    """Fetch v12+ (KIP-595's DivergingEpoch): find divergence from Fetch answers. False for a
    leader without it: partitions then start each leader epoch with OffsetForLeaderEpoch."""


# ---------------------------------------------------------------------------------------------
# Events in


@dataclass(frozen=True, slots=True)
class TieringFacts:
    """What an out-of-range handler must know of a partition besides its log to choose KIP-1023's
    path, read when a resolution begins (they are dynamic configs and may change at any time)."""

    remote_storage_enabled: bool = False
    """The topic's `remote.storage.enable` and the broker's `remote.log.storage.system.enable`."""
    compacted: bool = False
    """The topic's `cleanup.policy` contains `compact`."""
    fetch_from_tiered_offset: bool = False
    """The broker's `follower.fetch.last.tiered.offset.enable` (KIP-1023), its live value."""


def no_tiering() -> TieringFacts:
    return TieringFacts()


@dataclass(frozen=True, slots=True)
class AddPartition:
    """Follow `topic_partition` from this fetcher's leader in `leader_epoch` (from the image)."""

    topic_partition: TopicPartition
    topic_id: uuid.UUID
    leader_epoch: int
    log: FollowerLog
    facts: Callable[[], TieringFacts] = no_tiering
    """Read at the start of each out-of-range resolution (plain in-memory lookups, no I/O)."""


# ---------------------------------------------------------------------------------------------
# Requests and responses


@dataclass(frozen=True, slots=True)
class FetchPartition:
    topic_partition: TopicPartition
    topic_id: uuid.UUID
    current_leader_epoch: int
    fetch_offset: int
    last_fetched_epoch: int  # NO_EPOCH: the leader skips the divergence check
    log_start_offset: int
    partition_max_bytes: int


@dataclass(frozen=True, slots=True, eq=False)
class FetchRequest:
    replica_id: int
    replica_epoch: int
    max_wait_ms: int
    min_bytes: int
    max_bytes: int
    partitions: tuple[FetchPartition, ...]


@dataclass(frozen=True, slots=True)
class FetchedPartition:
    """One partition of a Fetch response; an error answer carries -1 offsets and no records."""

    topic_partition: TopicPartition
    error: int
    high_watermark: int = -1
    log_start_offset: int = -1
    records: bytes = b""
    diverging_epoch: OffsetAndEpoch | None = None  # KIP-595/Fetch v12: (end offset, epoch)


@dataclass(frozen=True, slots=True)
class FetchResponse:
    error: int  # the top-level error: anything but NONE fails every partition of the request
    partitions: tuple[FetchedPartition, ...]


@dataclass(frozen=True, slots=True)
class EpochQuery:
    topic_partition: TopicPartition
    current_leader_epoch: int
    leader_epoch: int  # where does this epoch end in your log?


@dataclass(frozen=True, slots=True, eq=False)
class OffsetsForLeaderEpochRequest:
    replica_id: int
    partitions: tuple[EpochQuery, ...]


@dataclass(frozen=True, slots=True)
class EpochAnswer:
    topic_partition: TopicPartition
    error: int
    leader_epoch: int = -1
    end_offset: int = -1


@dataclass(frozen=True, slots=True)
class OffsetsForLeaderEpochResponse:
    error: int
    partitions: tuple[EpochAnswer, ...]


@dataclass(frozen=True, slots=True)
class OffsetQuery:
    topic_partition: TopicPartition
    current_leader_epoch: int
    timestamp: int  # ListOffsets' spec: -1 latest, -2 earliest, -4 earliest local, -5 latest tiered, ...


@dataclass(frozen=True, slots=True, eq=False)
class ListOffsetsRequest:
    """ListOffsets from a replica (ReplicaId = this broker: the leader answers its log end, not its HW)."""

    replica_id: int
    partitions: tuple[OffsetQuery, ...]


@dataclass(frozen=True, slots=True)
class ListedOffset:
    topic_partition: TopicPartition
    error: int  # UNSUPPORTED_VERSION too when the leader serves no ListOffsets version carrying the timestamp
    offset: int = -1
    leader_epoch: int = -1
    timestamp: int = -1


@dataclass(frozen=True, slots=True)
class ListOffsetsResponse:
    error: int
    partitions: tuple[ListedOffset, ...]


Request = FetchRequest | OffsetsForLeaderEpochRequest | ListOffsetsRequest


# ---------------------------------------------------------------------------------------------
# Actions out, carried out in order


@dataclass(frozen=True, slots=True)
class Send:
    """Send `request` to the fetcher's leader; answer with the matching `on_*_response` or
    `on_send_failed` (a timeout, a lost connection)."""

    request: Request


@dataclass(frozen=True, slots=True)
class AppendAsFollower:
    """Append these whole batches (offsets and epochs assigned by the leader, CRCs checked) to the
    log; afterwards the log ends at `end_offset` and its last epoch is `last_epoch`. A failure is
    reported with `on_log_failed`."""

    topic_partition: TopicPartition
    records: bytes
    end_offset: int
    last_epoch: int


@dataclass(frozen=True, slots=True)
class Truncate:
    """Remove everything at and after `offset` (leader-epoch cache and its checkpoint included).

    An offset inside a batch (only after an unclean election, from the out-of-range rules) takes
    that whole batch, as Kafka's LogSegment.truncateTo does; the core re-reads the log afterwards.
    `offset` may be the log end offset: nothing goes but epoch entries starting there (Kafka's
    UnifiedLog.truncateTo; `quorum.log.Log` never has such entries, so it is a no-op there).
    """

    topic_partition: TopicPartition
    offset: int


@dataclass(frozen=True, slots=True)
class EpochStart:
    epoch: int
    start_offset: int


@dataclass(frozen=True, slots=True)
class TruncateFullyAndStartAt:
    """Replace the log by an empty one starting at `offset` (Kafka's truncateFullyAndStartAt); the
    leader-epoch cache is emptied, then holds `leader_epochs` (entries below `offset`, which a
    remote-tier handler restores) and the producer state is `producer_snapshot`'s (none: empty).
    Durable and crash-safe: after a crash the log is the old one or this one, never a mix."""

    topic_partition: TopicPartition
    offset: int
    leader_epochs: tuple[EpochStart, ...] = ()
    producer_snapshot: bytes | None = None


@dataclass(frozen=True, slots=True)
class UpdateHighWatermark:
    """The follower's high watermark is now `high_watermark` (the leader's, capped at the log end)."""

    topic_partition: TopicPartition
    high_watermark: int


@dataclass(frozen=True, slots=True)
class IncrementLogStartOffset:
    """The leader's log start moved (retention, DeleteRecords): follow it up to `offset`."""

    topic_partition: TopicPartition
    offset: int


@dataclass(frozen=True, slots=True)
class PartitionFailed:
    """The fetcher stopped fetching the partition until it is added again (a new leader epoch)."""

    topic_partition: TopicPartition
    reason: str


@dataclass(frozen=True, slots=True)
class OutOfRangeWork:
    """An out-of-range handler needs work done outside the core (e.g. reading a remote tier):
    the shell hands `work` to whoever supplied the handler, then calls
    `ReplicaFetcher.resolve_out_of_range(topic_partition, step)` with the outcome."""

    topic_partition: TopicPartition
    leader_epoch: int
    work: object


Action = (Send | AppendAsFollower | Truncate | TruncateFullyAndStartAt | UpdateHighWatermark | IncrementLogStartOffset
          | PartitionFailed | OutOfRangeWork)
