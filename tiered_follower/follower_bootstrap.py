"""The follower's bootstrap from the remote tier (KIP-405's gap and KIP-1023), sans-IO.

The replica fetcher consults an `OutOfRangeHandler` when the leader refuses its fetch offset
(OFFSET_OUT_OF_RANGE, OFFSET_MOVED_TO_TIERED_STORAGE) and once before the first fetch of an empty
replica (error NONE); `TieredOutOfRangeHandler` is the one a broker with a remote tier gets. It
keeps no state: each call reads what the fetcher learnt so far (`situation.leader_offsets`) and
names the next step.

* **KIP-1023 (the tiered offset).** An empty replica (log end 0) of a topic with remote storage,
  not compacted, with `follower.fetch.last.tiered.offset.enable` on, whose leader's log is not
  empty, asks the leader its log start (-2) and earliest pending upload offset (-6, ListOffsets
  v11). -1 means the leader has not learnt its highest uploaded offset, or nothing is uploaded:
  it asks the earliest local offset (-4) and starts at the log start only when the two are equal
  (nothing is tiered); otherwise it backs off and asks again, never guessing. A pending upload
  offset below the log start means no valid remote segment (tiered storage was off for a while):
  it replicates everything the leader has locally. Otherwise the auxiliary state for
  [log start, pending upload offset) is read from the remote tier (`Defer(AuxStateWork)`, which
  the plug-in's `perform` carries out) and the follower starts at the pending upload offset.
  A leader that does not know -6 (UNSUPPORTED_VERSION) sends it down KIP-405's path.
* **KIP-405 (the local log start).** Any follower told OFFSET_MOVED_TO_TIERED_STORAGE asks the
  leader's log start (-2) and earliest local offset (-4) and builds the auxiliary state for
  [log start, local log start), as Kafka's TierStateMachine does. This is also what a tiered
  topic gets with the flag off.
* Everything else (no remote storage, a compacted topic, OFFSET_OUT_OF_RANGE without KIP-1023)
  is Kafka's default, `KafkaOutOfRangeHandler`.

The auxiliary state comes from ONE remote segment, the one holding `target - 1` in the current
lineage (`current_lineage_segment`): its `.indexes` object holds the leader-epoch checkpoint of
the whole history up to its end and the producer snapshot at its next offset (Kafka's
RemoteLogManager.fetchRemoteLogSegmentMetadata(tp, epoch, offset)). As in Kafka the follower
then starts at that segment's next offset, where the snapshot is exact.
"""

from __future__ import annotations

import bisect
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace

from quorum.broker.remote_tier import RemoteSegmentMetadata
from quorum.broker.replica_fetcher_events import EpochStart, TopicPartition
from quorum.broker.replica_fetcher_out_of_range import (
    EARLIEST_LOCAL_TIMESTAMP,
    EARLIEST_PENDING_UPLOAD_TIMESTAMP,
    EARLIEST_TIMESTAMP,
    LATEST_TIERED_TIMESTAMP,
    LATEST_TIMESTAMP,
    AskLeaderOffset,
    Defer,
    KafkaOutOfRangeHandler,
    LeaderOffset,
    OutOfRange,
    Retry,
    StartAt,
    Step,
    TruncateTo,
)
from quorum.log.epoch_cache import EpochEntry
from quorum.wire.errors import ErrorCode

TIERED_OFFSET = "tiered-offset"
"""KIP-1023's path: start at the earliest pending upload offset."""
LOCAL_LOG_START = "local-log-start"
"""KIP-405's path: start at the leader's local log start offset."""

_EMPTY_OR_REFUSED = frozenset({ErrorCode.NONE, ErrorCode.OFFSET_OUT_OF_RANGE, ErrorCode.OFFSET_MOVED_TO_TIERED_STORAGE})


@dataclass(frozen=True, slots=True)
class AuxStateWork:
    """Build the auxiliary state below `target` from the remote tier and start there: the
    leader-epoch entries and producer state of the remote segment holding `target - 1`."""

    topic_partition: TopicPartition
    path: str  # TIERED_OFFSET or LOCAL_LOG_START
    target: int
    target_epoch: int
    """The leader's epoch of `target` (its ListOffsets answer): the segment holding `target - 1`
    must be of an epoch no newer, which keeps a newer stale lineage out."""
    leader_log_start: int
    leader_log_end: int | None
    """The leader's log end (ListOffsets -1) when it was asked (KIP-1023's path), else None."""
    epoch_below: int = -1
    """The leader's epoch of `target - 1` when it said it (ListOffsets -5, its last tiered offset,
    is `target - 1` on KIP-1023's path): the lineage is then exact, as Kafka's OffsetForLeaderEpoch
    to the leader makes it; -1 when unknown."""

    def describe(self) -> str:
        where = "earliest pending upload offset" if self.path == TIERED_OFFSET else "local log start offset"
        return (f"{self.topic_partition[0]}-{self.topic_partition[1]}: the leader's {where} {self.target} "
                f"(epoch {self.target_epoch}), log start {self.leader_log_start}")


class TieredOutOfRangeHandler:
    """See the module docstring. Stateless: everything it needs is in the `OutOfRange`."""

    def __init__(self, default: KafkaOutOfRangeHandler | None = None) -> None:
        self._default = default or KafkaOutOfRangeHandler()

    def next_step(self, situation: OutOfRange) -> Step:
        if kip_1023_applies(situation):
            return self._tiered_offset(situation)
        return self._without_tiered_offset(situation)

    # -- the paths --------------------------------------------------------------------------------

    def _without_tiered_offset(self, s: OutOfRange) -> Step:
        """The flag off, or a leader without -6: KIP-405 on OMTS, Kafka's rules otherwise."""
        if s.error == ErrorCode.OFFSET_MOVED_TO_TIERED_STORAGE and s.remote_storage_enabled:
            return self._local_log_start(s)
        return self._default.next_step(s)

    def _local_log_start(self, s: OutOfRange) -> Step:
        asked = _ask(s, EARLIEST_TIMESTAMP, EARLIEST_LOCAL_TIMESTAMP)
        if isinstance(asked, AskLeaderOffset):
            return asked
        start, local = asked
        if local.offset <= start.offset:
            # Nothing below the leader's local log start is tiered (after all, it moved on between
            # its answer and ours): Kafka's rules for an offset out of range.
            return self._default.next_step(replace(s, error=ErrorCode.OFFSET_OUT_OF_RANGE))
        return Defer(AuxStateWork(s.topic_partition, LOCAL_LOG_START, local.offset, local.leader_epoch, start.offset,
                                  None))

    def _tiered_offset(self, s: OutOfRange) -> Step:
        asked = _ask(s, LATEST_TIMESTAMP)
        if isinstance(asked, AskLeaderOffset):
            return asked
        (latest,) = asked
        if latest.offset <= 0:
            return self._without_tiered_offset(s)  # the leader's log is empty too: nothing to skip
        asked = _ask(s, EARLIEST_TIMESTAMP, EARLIEST_PENDING_UPLOAD_TIMESTAMP)
        if isinstance(asked, AskLeaderOffset):
            return asked
        start, pending = asked
        if pending.error == ErrorCode.UNSUPPORTED_VERSION:
            return self._without_tiered_offset(s)
        if pending.offset < 0:
            asked = _ask(s, EARLIEST_LOCAL_TIMESTAMP)
            if isinstance(asked, AskLeaderOffset):
                return asked
            (local,) = asked
            if local.offset == start.offset:
                return _start_at_leader_offset(s, start.offset)  # nothing is tiered yet
            return Retry(f"{_name(s)}: the leader has not learnt its earliest pending upload offset yet (its log "
                         f"start {start.offset} is below its local log start {local.offset}); asking again")
        if pending.offset < start.offset:
            # KIP-1023: no valid remote segment (tiered storage was off for a while); replicate
            # what the leader has locally, from its local log start.
            asked = _ask(s, EARLIEST_LOCAL_TIMESTAMP)
            if isinstance(asked, AskLeaderOffset):
                return asked
            (local,) = asked
            if local.offset <= start.offset:
                return _start_at_leader_offset(s, start.offset)
            return Defer(AuxStateWork(s.topic_partition, LOCAL_LOG_START, local.offset, local.leader_epoch,
                                      start.offset, latest.offset))
        if pending.offset == start.offset:
            return _start_at_leader_offset(s, start.offset)  # nothing below it to build
        asked = _ask(s, LATEST_TIERED_TIMESTAMP)  # its epoch is the lineage's at pending - 1
        if isinstance(asked, AskLeaderOffset):
            return asked
        (tiered,) = asked
        below = tiered.leader_epoch if tiered.offset == pending.offset - 1 else -1
        return Defer(AuxStateWork(s.topic_partition, TIERED_OFFSET, pending.offset, pending.leader_epoch, start.offset,
                                  latest.offset, below))


def kip_1023_applies(s: OutOfRange) -> bool:
    """An empty replica of a non-compacted topic with remote storage, the flag on (the leader's
    log end is asked next: an empty leader leaves nothing to skip)."""
    return (s.error in _EMPTY_OR_REFUSED and s.log_end_offset == 0 and s.fetch_from_tiered_offset
            and s.remote_storage_enabled and not s.compacted)


def _ask(s: OutOfRange, *timestamps: int) -> AskLeaderOffset | tuple[LeaderOffset, ...]:
    """The leader's answers for `timestamps`, or the first one still to ask."""
    for timestamp in timestamps:
        if timestamp not in s.leader_offsets:
            return AskLeaderOffset(timestamp)
    return tuple(s.leader_offsets[timestamp] for timestamp in timestamps)


def _start_at_leader_offset(s: OutOfRange, offset: int) -> Step:
    """Replicate from `offset` with no auxiliary state (nothing below it is tiered)."""
    return TruncateTo(s.log_end_offset) if offset == s.log_end_offset else StartAt(offset)


def _name(s: OutOfRange) -> str:
    return f"{s.topic_partition[0]}-{s.topic_partition[1]}"


# ---------------------------------------------------------------------------------------------
# The auxiliary state


def current_lineage_segment(finished: Iterable[RemoteSegmentMetadata], offset: int, epoch_at_or_above: int,
                            epoch: int = -1) -> RemoteSegmentMetadata | None:
    """The finished remote segment holding `offset` in the current lineage.

    After an unclean election two lineages may both have uploaded a segment holding `offset`.
    When the leader said its epoch of `offset` (`epoch`), only a segment of that epoch there is
    the leader's (records of one epoch are the same on every replica that has them). Otherwise
    the current lineage has, at `offset`, the highest epoch that is not newer than the leader's
    epoch of the offset after it (`epoch_at_or_above`, from its ListOffsets answer; -1 when it
    gave none). Of two segments of that epoch (a range uploaded again by the next leader, with
    other segment boundaries), the one recorded last.
    """
    holding = [s for s in finished if s.start_offset <= offset <= s.end_offset
               and (epoch_at_or_above < 0 or s.epoch_at(offset) <= epoch_at_or_above)
               and (epoch < 0 or s.epoch_at(offset) == epoch)]
    if not holding:
        return None
    return max(holding, key=lambda s: (s.epoch_at(offset), s.event_timestamp_ms))


class AuxStateError(ValueError):
    """The remote segment's leader-epoch checkpoint does not fit the segment (names it)."""


def epochs_below(checkpoint: Sequence[EpochEntry], segment: RemoteSegmentMetadata) -> tuple[EpochStart, ...]:
    """The checkpoint's entries below the segment's next offset, as the follower's epoch cache
    gets them; AuxStateError when they disagree with the segment's own epochs."""
    entries = [entry for entry in checkpoint if entry.start_offset < segment.next_offset]
    if not entries:
        raise AuxStateError(f"the leader-epoch checkpoint of remote segment {segment.object_name} of "
                            f"{segment.partition} has no entry below offset {segment.next_offset}")
    starts = [entry.start_offset for entry in entries]
    last = segment.end_offset
    found = entries[bisect.bisect_right(starts, last) - 1].epoch
    if found != segment.epoch_at(last):
        raise AuxStateError(f"the leader-epoch checkpoint of remote segment {segment.object_name} of "
                            f"{segment.partition} gives epoch {found} to its last offset {last}, its metadata "
                            f"{segment.epoch_at(last)}")
    return tuple(EpochStart(entry.epoch, entry.start_offset) for entry in entries)


def bytes_in_remote_below(finished: Iterable[RemoteSegmentMetadata], offset: int) -> int:
    """The bytes of the remote log below `offset` (each offset counted once, the current lineage's
    segment where two overlap): what a follower starting at `offset` does not fetch."""
    total = 0
    covered = -1  # the last offset counted
    for segment in sorted(finished, key=lambda s: (s.start_offset, -s.event_timestamp_ms)):
        if segment.end_offset >= offset or segment.end_offset <= covered:
            continue
        if segment.start_offset > covered:
            total += segment.size_in_bytes
            covered = segment.end_offset
    return total
