"""The plug-in point of the replica fetcher: what a follower does when its fetch offset is refused.

A leader answers OFFSET_OUT_OF_RANGE when the follower's position is outside its log (a follower
that was away while retention deleted the old segments, or a log that outgrew an uncleanly
elected leader), and OFFSET_MOVED_TO_TIERED_STORAGE (KIP-405) when the records are only in the
remote tier. What to do differs: Kafka's default truncates and restarts from the leader's log
start or end; a tiered follower (KIP-1023, `tiered_follower`) instead starts near the end of the
tiered data after restoring the leader-epoch cache from the remote tier. So the fetcher asks an
`OutOfRangeHandler` and only carries out its steps, and a broker composes whichever handler it
wants without the fetcher knowing `tiered_follower` exists.

A handler is consulted step by step: it gets an `OutOfRange` with everything known so far (the
follower's log, the leader's answers to the ListOffsets it asked for) and returns the next step.
It should keep no per-partition state of its own: the fetcher keeps it in `leader_offsets`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol

from quorum.broker.replica_fetcher_events import EpochStart, TopicPartition
from quorum.wire.errors import ErrorCode

LATEST_TIMESTAMP = -1
EARLIEST_TIMESTAMP = -2
EARLIEST_LOCAL_TIMESTAMP = -4  # KIP-405
LATEST_TIERED_TIMESTAMP = -5  # KIP-1005
EARLIEST_PENDING_UPLOAD_TIMESTAMP = -6  # KIP-1023


@dataclass(frozen=True, slots=True)
class LeaderOffset:
    """The leader's ListOffsets answer for one timestamp spec."""

    offset: int
    leader_epoch: int
    error: int = ErrorCode.NONE
    """UNSUPPORTED_VERSION when the leader cannot answer this timestamp spec (a leader without
    ListOffsets v11 asked for -6): the offsets are then -1 and the handler picks another path.
    Any other error ends the resolution (the fetcher backs off) instead of reaching the handler."""


@dataclass(frozen=True, slots=True)
class OutOfRange:
    """A refused fetch position and what has been learnt about it."""

    topic_partition: TopicPartition
    error: int
    """OFFSET_OUT_OF_RANGE or OFFSET_MOVED_TO_TIERED_STORAGE from the leader; NONE for an empty
    replica consulted once before its first fetch (KIP-1023 may apply even when the leader still
    has offset 0 locally); the default handler keeps today's behaviour then (`TruncateTo(0)`)."""
    current_leader_epoch: int
    fetch_offset: int
    log_start_offset: int
    log_end_offset: int
    high_watermark: int
    latest_epoch: int | None
    leader_offsets: dict[int, LeaderOffset] = field(default_factory=dict)
    """Timestamp spec -> the leader's answer, for every AskLeaderOffset answered so far."""
    remote_storage_enabled: bool = False
    """The topic's `remote.storage.enable` and the broker's `remote.log.storage.system.enable`."""
    compacted: bool = False
    """The topic's `cleanup.policy` contains `compact` (KIP-1023 then takes the normal path)."""
    fetch_from_tiered_offset: bool = False
    """The broker's `follower.fetch.last.tiered.offset.enable` when the resolution began (dynamic)."""


# ---------------------------------------------------------------------------------------------
# Steps


@dataclass(frozen=True, slots=True)
class AskLeaderOffset:
    """Send ListOffsets(timestamp) to the leader; the handler is consulted again with the answer."""

    timestamp: int


@dataclass(frozen=True, slots=True)
class TruncateTo:
    """Keep the log below `offset` (at most its end; the end itself keeps it all) and fetch from there."""

    offset: int


@dataclass(frozen=True, slots=True)
class StartAt:
    """Replace the log by an empty one at `offset` (with these leader epochs) and fetch from there."""

    offset: int
    leader_epochs: tuple[EpochStart, ...] = ()
    """The leader-epoch entries below `offset` (Kafka's EpochEntry start offsets), restored into
    the leader-epoch cache; the last one's epoch is the first fetch's LastFetchedEpoch."""
    producer_snapshot: bytes | None = None
    """The producer state at `offset` (`quorum.wire.producer_snapshot` bytes), restored and kept
    across restarts, so an idempotent producer's retry after the bootstrap is still recognised."""


@dataclass(frozen=True, slots=True)
class Retry:
    """Back off (replica.fetch.backoff.ms), then fetch the same position again."""

    reason: str = ""


@dataclass(frozen=True, slots=True)
class Fail:
    """Stop fetching the partition until the next leader epoch; `reason` is logged and reported."""

    reason: str


@dataclass(frozen=True, slots=True)
class Defer:
    """Work outside the core is needed (`OutOfRangeWork` carries `work` to the shell), which
    answers with `ReplicaFetcher.resolve_out_of_range` when it is done."""

    work: object


Step = AskLeaderOffset | TruncateTo | StartAt | Retry | Fail | Defer


class OutOfRangeHandler(Protocol):
    def next_step(self, situation: OutOfRange) -> Step: ...


class KafkaOutOfRangeHandler:
    """Kafka's AbstractFetcherThread.fetchOffsetAndTruncate, and a clear stop for tiered offsets.

    Leader's log end below ours (an unclean election let a shorter log lead): truncate to it.
    Leader's log start above our end (we were away while retention ran): start over empty at
    the leader's log start. Otherwise the position is in range by now (the leader moved on
    between our fetch and its ListOffsets): back off and fetch it again. An empty replica before
    its first fetch (error NONE) keeps its log as it is and fetches from 0.
    """

    def next_step(self, situation: OutOfRange) -> Step:
        if situation.error == ErrorCode.NONE:
            return TruncateTo(situation.log_end_offset)  # an empty replica: fetch from its (empty) end
        if situation.error == ErrorCode.OFFSET_MOVED_TO_TIERED_STORAGE:
            return Fail(f"the leader has moved offset {situation.fetch_offset} of {situation.topic_partition} to "
                        "tiered storage and this broker has no remote-tier follower plug-in to fetch it from there")
        latest = situation.leader_offsets.get(LATEST_TIMESTAMP)
        if latest is None:
            return AskLeaderOffset(LATEST_TIMESTAMP)
        if latest.offset < situation.log_end_offset:
            return TruncateTo(latest.offset)
        earliest = situation.leader_offsets.get(EARLIEST_TIMESTAMP)
        if earliest is None:
            return AskLeaderOffset(EARLIEST_TIMESTAMP)
        if earliest.offset > situation.log_end_offset:
            return StartAt(earliest.offset)
        return Retry(f"offset {situation.fetch_offset} is within the leader's log [{earliest.offset}, "
                     f"{latest.offset}] by now")


class OutOfRangePlugin(Protocol):
    """What a broker is composed with to change its followers' out-of-range behaviour (a remote
    tier, KIP-1023): the handler the fetchers consult, and the work its `Defer` steps ask for, run
    by the broker off the fetcher's path (reading the remote tier is slow). `perform` returns the
    next step for that partition; an exception counts as `Fail`."""

    handler: OutOfRangeHandler

    async def perform(self, topic_partition: TopicPartition, work: object) -> Step: ...

