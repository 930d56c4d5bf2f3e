"""Where two logs part: the leader's DivergingEpoch answer and the follower's truncation point.

Pure functions of a `RaftLog`, so the rules of KIP-595's Fetch validation can be read (and
tested) apart from the state machine that uses them.
"""

from __future__ import annotations

from dataclasses import dataclass

from quorum.raft.interface import OffsetAndEpoch, RaftLog, SnapshotStore


@dataclass(frozen=True, slots=True)
class FetchCheck:
    """The leader's verdict on a Fetch position: read the log (both None), truncate to
    `diverging`, or fetch the snapshot `snapshot` first."""

    diverging: OffsetAndEpoch | None = None
    snapshot: OffsetAndEpoch | None = None


def check_fetch(log: RaftLog, snapshots: SnapshotStore, fetch_offset: int, last_fetched_epoch: int) -> FetchCheck:
    """KIP-595's Fetch validation extended by KIP-630 (Kafka's validateOffsetAndEpoch).

    The latest snapshot is the answer when the leader holds a snapshot and the position cannot
    be served from its log: the offset is below the log start offset, or at it with an epoch
    other than the oldest snapshot's (the replica's history there is not the leader's), or the
    epoch is older than the oldest snapshot (the log no longer knows where that epoch ended).
    Otherwise it is KIP-595's DivergingEpoch rule.
    """
    if log.start_offset == 0 and fetch_offset == 0:
        return FetchCheck()
    earliest = snapshots.earliest_snapshot()
    if earliest is not None and (
        fetch_offset < log.start_offset
        or (fetch_offset == log.start_offset and last_fetched_epoch != earliest.epoch)
        or last_fetched_epoch < earliest.epoch
    ):
        latest = snapshots.latest_snapshot()
        return FetchCheck(snapshot=latest if latest is not None else earliest)
    return FetchCheck(diverging=diverging_epoch(log, fetch_offset, last_fetched_epoch))


def diverging_epoch(log: RaftLog, fetch_offset: int, last_fetched_epoch: int) -> OffsetAndEpoch | None:
    """The leader's check of a Fetch: None when (FetchOffset, LastFetchedEpoch) lies on its log.

    KIP-595: FetchOffset must not pass the end of LastFetchedEpoch in the leader's log. If it does
    (or the leader never had that epoch), the answer is the largest epoch <= LastFetchedEpoch the
    leader has, with its end offset: the follower truncates there, which may take a few rounds
    when several epochs diverged. An epoch below everything in the log sends it to the start.
    """
    if fetch_offset <= log.start_offset:
        return None
    found = log.end_offset_for_epoch(last_fetched_epoch)
    if found.epoch == last_fetched_epoch and fetch_offset <= found.offset:
        return None
    if found.epoch < 0:
        # Older than every epoch the log still holds (Kafka's LeaderEpochFileCache.endOffsetFor): that
        # epoch ended, at the latest, where the log now starts. Naming the follower's own epoch lets it
        # keep its records of that epoch up to there; epoch 0 would send it below its high watermark.
        return OffsetAndEpoch(log.start_offset, last_fetched_epoch)
    return OffsetAndEpoch(found.offset, found.epoch)


def truncation_offset(log: RaftLog, diverging: OffsetAndEpoch) -> int:
    """Where a follower truncates on DivergingEpoch (Kafka's truncateToEndOffset).

    When our log has the diverging epoch, keep no more of it than the leader has: both got those
    batches from the same leader, so the leader's end offset is a batch boundary here too. When
    it does not, keep up to our end of the largest epoch below it, and let the next Fetch find
    out whether that is still too much. (Cutting at the leader's offset there would be wrong:
    our older batches need not end where the leader's do.)
    """
    local = log.end_offset_for_epoch(diverging.epoch) if diverging.epoch >= 0 else OffsetAndEpoch(-1, -1)
    if local.epoch < 0 or local.offset < 0:
        return log.start_offset
    if local.epoch == diverging.epoch:
        return min(local.offset, diverging.offset)
    return local.offset
