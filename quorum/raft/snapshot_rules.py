"""KIP-630's rules for the Raft layer, as pure functions of the log, the snapshots and the leader's view.

Kept apart from `core.py` so each rule can be read and tested beside the sentence of the spec it
follows: which (offset, epoch) a replica stands at for elections, when the leader may move its
log start offset up to a snapshot, and how far a follower or observer may move its own.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from quorum.raft.interface import OffsetAndEpoch, RaftLog, SnapshotStore
from quorum.raft.leader import UNKNOWN, ReplicaProgress


class NoSnapshots:
    """A SnapshotStore with nothing in it: for drivers and tests that never snapshot."""

    def snapshot_ids(self) -> tuple[OffsetAndEpoch, ...]:
        return ()

    def earliest_snapshot(self) -> OffsetAndEpoch | None:
        return None

    def latest_snapshot(self) -> OffsetAndEpoch | None:
        return None

    def snapshot_size(self, snapshot_id: OffsetAndEpoch) -> int | None:
        return None

    def read_snapshot(self, snapshot_id: OffsetAndEpoch, position: int, max_bytes: int) -> bytes:
        raise LookupError(f"no snapshot {snapshot_id}")


@dataclass(slots=True)
class SnapshotFetch:
    """A follower's transfer of the leader's snapshot: how much has been asked for and written.

    `completing` is set once the chunk reaching `size` has gone to the driver: nothing more is
    requested until the driver reports the file validated and renamed (or refused).
    """

    snapshot_id: OffsetAndEpoch
    leader_id: int
    epoch: int
    position: int = 0
    size: int | None = None
    completing: bool = False


def log_position(log: RaftLog, snapshots: SnapshotStore) -> OffsetAndEpoch:
    """Where this replica's history ends, for Vote requests and for granting votes.

    KIP-630, "Changes to Leader Election": the latest snapshot counts when it is newer than the
    log (a follower between fetching a snapshot and truncating its log holds exactly that), and
    "in the general case, the latest epoch and end offset for a replica is the latest snapshot or
    replicated log". Ordered as Raft orders logs: by epoch, then offset.
    """
    from_log = OffsetAndEpoch(log.end_offset, log.last_fetched_epoch())
    latest = snapshots.latest_snapshot()
    if latest is not None and (latest.epoch, latest.offset) > (from_log.epoch, from_log.offset):
        return latest
    return from_log


def leader_log_start_target(log: RaftLog, snapshots: SnapshotStore, replicas: Iterable[ReplicaProgress],
                            snapshot_seen_ms: int | None, now_ms: int, live_ms: int,
                            lag_time_max_ms: int) -> int | None:
    """The offset the leader may move its log start offset to now, or None.

    KIP-630, "When to Increase the LogStartOffset": only to the end offset X of a snapshot (the
    latest one: older ones would be deleted at the next step anyway), and only once every live
    replica, follower or observer, has replicated X, or X has waited
    `metadata.start.offset.lag.time.max.ms`: a replica that stopped fetching is not live and does
    not hold the log back, and one that is live but slow holds it back only that long. Live means
    it fetched within `live_ms` (the fetch timeout). `snapshot_seen_ms` is when the leader first
    knew of the latest snapshot.
    """
    latest = snapshots.latest_snapshot()
    if latest is None or latest.offset <= log.start_offset or latest.offset > log.end_offset:
        return None
    if snapshot_seen_ms is not None and now_ms - snapshot_seen_ms >= lag_time_max_ms:
        return latest.offset
    for progress in replicas:
        live = progress.last_fetch_ms != UNKNOWN and now_ms - progress.last_fetch_ms <= live_ms
        if live and progress.end_offset < latest.offset:
            return None
    return latest.offset


def follower_log_start_target(log: RaftLog, snapshots: SnapshotStore, leader_log_start: int) -> int | None:
    """The offset a follower or observer may move its log start offset to, or None.

    KIP-630: "the local log start offset is the minimum of the leader's log start offset and the
    largest local snapshot": never past a snapshot of its own, so the records it drops are always
    in a snapshot it can load. Of that bound we take the largest local snapshot at or below it,
    which keeps KIP-630's other rule, that a snapshot ends at every non-zero log start offset
    (a replica's snapshots need not line up with the leader's, so the minimum itself may fall
    between two of them, and the leader's Fetch check reads the oldest snapshot as the log start's).
    """
    bound = min(leader_log_start, log.end_offset)
    target = max((s.offset for s in snapshots.snapshot_ids() if s.offset <= bound), default=None)
    if target is None or target <= log.start_offset:
        return None
    return target
