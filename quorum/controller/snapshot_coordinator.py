"""The active controller's say over when each replica snapshots (KIP-631 "Snapshot Implementation").

KIP-630 lets every replica snapshot on its own policy; KIP-631 has the active controller
coordinate them, so that the quorum never has two members busy snapshotting at once. Each
replica tells the active controller, in its periodic heartbeat, where its latest snapshot ends,
how many log bytes it has applied since, whether its own KIP-630 policy says a snapshot is due,
and whether one is being written; the answer to that heartbeat says whether it may begin. The
heartbeat every replica already sends the active controller is its Raft Fetch (voters and
observers fetch from the leader at least every `quorum.fetch.timeout.ms`), so the report and the
grant ride there as KIP-482 tagged fields (`quorum.server.raft_rpc`, README "Protocol
extensions"). All of this is soft state: nothing is written to the log, and a new active
controller starts from nothing and learns it from the next round of fetches.

The rules, as the KIP gives them:

* One snapshot at a time among the voters. A voter is not told to begin while another voter is
  snapshotting or unavailable (not heard from within the fetch timeout).
* When losing one more voter would cost the quorum its majority, voters snapshot less often: a
  separate, larger threshold (`metadata.log.max.record.bytes.between.snapshots.degraded`) must
  be reached as well. Refusing outright would let the log of a quorum with a dead member grow
  without bound; this project's snapshots are written off the Raft path, so a snapshotting voter
  still votes and fetches, and the larger threshold keeps such snapshots rare.
* The active controller that wants a snapshot itself first gives up the leadership, when another
  voter can take it over; it snapshots in place only when it is the quorum's only available voter
  (or it resigned for a snapshot a moment ago and was elected again).
* Observers (brokers) cannot cost the quorum its availability; they take turns among themselves,
  one at a time, in a lane of their own, so that a hundred brokers do not wait behind the voters.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable
from dataclasses import dataclass

NO_SNAPSHOT = -1

DEGRADED_BYTES_CONFIG = "metadata.log.max.record.bytes.between.snapshots.degraded"
DEGRADED_BYTES_FACTOR = 4
"""Without the setting, the degraded threshold is this many times the normal one."""


@dataclass(frozen=True, slots=True)
class SnapshotReport:
    """What a replica says of its snapshots in each heartbeat."""

    latest_snapshot_offset: int  # end offset of its latest snapshot, NO_SNAPSHOT without one
    bytes_since_snapshot: int  # log bytes applied since that snapshot
    due: bool  # its own KIP-630 policy says a snapshot should be taken
    in_progress: bool  # a snapshot is being written


class OwnSnapshot(enum.Enum):
    """What the active controller does about a snapshot of its own."""

    WAIT = "wait"
    SNAPSHOT = "snapshot"  # in place: no other voter can take the leadership
    RESIGN = "resign"  # give up the leadership first; snapshot once a follower


@dataclass(slots=True)
class _Replica:
    report: SnapshotReport
    last_seen_ms: int


@dataclass(slots=True)
class _Grant:
    node_id: int
    granted_ms: int
    latest_at_grant: int
    started: bool = False


class SnapshotCoordinator:
    """One leadership's view of the replicas' snapshots: who may begin one now.

    `node_id` is the active controller's own id and `voters` the quorum's voters (with it);
    a replica not in `voters` is an observer. `fetch_timeout_ms` is `quorum.fetch.timeout.ms`:
    a voter not heard from for that long is unavailable, and a grant whose holder stops
    fetching lapses. A grant also lapses when its holder has not begun within `start_timeout_ms`.
    `degraded_min_bytes` is the larger threshold of a quorum one failure away from losing its
    majority. `resigned_recently` says this controller gave up the leadership for a snapshot a
    moment ago and was elected again: resigning once more would only go round in circles.
    """

    def __init__(self, node_id: int, voters: Iterable[int], fetch_timeout_ms: int, degraded_min_bytes: int,
                 start_timeout_ms: int | None = None, resigned_recently: bool = False) -> None:
        self.node_id = node_id
        self.voters = frozenset(voters)
        self.fetch_timeout_ms = fetch_timeout_ms
        self.degraded_min_bytes = degraded_min_bytes
        self.start_timeout_ms = 2 * fetch_timeout_ms if start_timeout_ms is None else start_timeout_ms
        self.resigned_recently = resigned_recently
        self._replicas: dict[int, _Replica] = {}
        self._grants: dict[bool, _Grant] = {}  # by lane: True for the voters', False for the observers'

    # -- what the node asks ---------------------------------------------------------------------

    def on_report(self, replica_id: int, report: SnapshotReport, now_ms: int) -> bool:
        """A replica's heartbeat: whether it may begin (or go on with) a snapshot."""
        self._replicas[replica_id] = _Replica(report, now_ms)
        voter = replica_id in self.voters
        grant = self._current_grant(voter, now_ms)
        if grant is not None:
            return grant.node_id == replica_id
        if not report.due or report.in_progress:
            return False
        if voter and not self._voter_may_begin(replica_id, report, now_ms):
            return False
        self._grants[voter] = _Grant(replica_id, now_ms, report.latest_snapshot_offset)
        return True

    def own_turn(self, report: SnapshotReport, now_ms: int) -> OwnSnapshot:
        """The active controller's own snapshot: wait, take it in place, or resign first."""
        self._replicas[self.node_id] = _Replica(report, now_ms)
        grant = self._current_grant(True, now_ms)
        if grant is not None:
            return OwnSnapshot.SNAPSHOT if grant.node_id == self.node_id and report.due else OwnSnapshot.WAIT
        if not report.due or report.in_progress:
            return OwnSnapshot.WAIT
        if not self._voter_may_begin(self.node_id, report, now_ms):
            return OwnSnapshot.WAIT
        if self._available_voters(now_ms) - {self.node_id} and not self.resigned_recently:
            return OwnSnapshot.RESIGN
        self._grants[True] = _Grant(self.node_id, now_ms, report.latest_snapshot_offset)
        return OwnSnapshot.SNAPSHOT

    def snapshotting(self, now_ms: int) -> dict[str, int]:
        """Who holds each lane's grant now ("voters", "observers"): for logs and tests."""
        held = {}
        for voter, name in ((True, "voters"), (False, "observers")):
            grant = self._current_grant(voter, now_ms)
            if grant is not None:
                held[name] = grant.node_id
        return held

    # -- the rules ------------------------------------------------------------------------------

    def _voter_may_begin(self, voter_id: int, report: SnapshotReport, now_ms: int) -> bool:
        """No other voter snapshotting (the grant is checked before) or unavailable; when one more
        failure would lose the majority, only past the degraded threshold."""
        available = self._available_voters(now_ms)
        others_available = (self.voters - {voter_id}) <= available
        if others_available:
            return True
        return report.bytes_since_snapshot >= self.degraded_min_bytes and len(available) > len(self.voters) // 2

    def _available_voters(self, now_ms: int) -> set[int]:
        """The voters heard from within the fetch timeout and not writing a snapshot (this node counts)."""
        available = {self.node_id} if self.node_id in self.voters else set()
        for node_id, replica in self._replicas.items():
            if node_id in self.voters and node_id != self.node_id and not replica.report.in_progress \
                    and now_ms - replica.last_seen_ms <= self.fetch_timeout_ms:
                available.add(node_id)
        return available

    def _current_grant(self, voter_lane: bool, now_ms: int) -> _Grant | None:
        """The lane's grant, if it still holds: its replica is heard from, has begun (or may still),
        and has not finished (its latest snapshot moved) nor given up (no longer due nor writing)."""
        grant = self._grants.get(voter_lane)
        if grant is None:
            return None
        replica = self._replicas.get(grant.node_id)
        report = replica.report if replica is not None else None
        if report is not None and report.in_progress:
            grant.started = True
        lapsed = (
            replica is None
            or (grant.node_id != self.node_id and now_ms - replica.last_seen_ms > self.fetch_timeout_ms)
            or (not grant.started and now_ms - grant.granted_ms > self.start_timeout_ms)
            or (report is not None and not report.in_progress
                and (report.latest_snapshot_offset != grant.latest_at_grant or (grant.started or not report.due)))
        )
        if lapsed:
            del self._grants[voter_lane]
            return None
        return grant
