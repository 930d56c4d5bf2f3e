"""Where two logs part: the leader's DivergingEpoch answer and the follower's truncation point.

Pure functions of a `RaftLog`, so the rules of KIP-595's Fetch validation can be read (and
tested) apart from the state machine that uses them.
"""

from __future__ import annotations

from quorum.raft.interface import OffsetAndEpoch, RaftLog


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
        return OffsetAndEpoch(log.start_offset, 0)
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
