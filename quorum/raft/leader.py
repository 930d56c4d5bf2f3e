"""The leader's view of its epoch: replica progress, the high watermark, parked fetches.

The rules here are KIP-595's: a voter's progress is the offset it fetches from (the end of its
durable log, which the leader has just checked against its own), the leader's own progress is
its flushed offset, and the high watermark is the largest offset a majority of voters has reached,
moved only once that offset lies beyond the start of the leader's epoch (so a record of its own
epoch is committed) and never backwards. Like a follower's, it never passes the leader's own
flushed offset.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from quorum.raft.interface import FetchRequest, ReplicaDescription
from quorum.raft.state import Election, Role

UNKNOWN = -1


@dataclass(slots=True)
class ReplicaProgress:
    """How far one replica has got, as its fetches tell the leader."""

    replica_id: int
    end_offset: int = UNKNOWN
    last_fetch_ms: int = UNKNOWN
    last_caught_up_ms: int = UNKNOWN
    leader_end_at_last_fetch: int = UNKNOWN
    last_sent_high_watermark: int = UNKNOWN
    acknowledged: bool = False  # fetched or answered BeginQuorumEpoch in this epoch

    def record_fetch(self, fetch_offset: int, leader_end: int, now_ms: int) -> None:
        """Kafka's ReplicaState update: caught up when at the leader's end, or at where the end
        was at the previous fetch (then it was caught up as of that fetch)."""
        if fetch_offset >= leader_end:
            self.last_caught_up_ms = now_ms
        elif self.leader_end_at_last_fetch != UNKNOWN and fetch_offset >= self.leader_end_at_last_fetch:
            self.last_caught_up_ms = max(self.last_caught_up_ms, self.last_fetch_ms)
        self.end_offset = fetch_offset
        self.last_fetch_ms = now_ms
        self.leader_end_at_last_fetch = leader_end
        self.acknowledged = True

    def describe(self) -> ReplicaDescription:
        return ReplicaDescription(self.replica_id, self.end_offset, self.last_fetch_ms, self.last_caught_up_ms)


@dataclass(slots=True)
class ParkedFetch:
    """A Fetch with nothing to return yet, held until data, a new high watermark or its deadline."""

    request_id: int
    sender_id: int
    request: FetchRequest
    deadline_ms: int


class LeaderState:
    """Leading `epoch`; the log from `epoch_start_offset` on is this leader's."""

    role = Role.LEADER

    def __init__(self, node_id: int, epoch: int, voters: Iterable[int], epoch_start_offset: int,
                 granting_voters: Iterable[int], now_ms: int) -> None:
        self.node_id = node_id
        self.epoch = epoch
        self.epoch_start_offset = epoch_start_offset
        self.granting_voters = tuple(sorted(granting_voters))
        self.became_leader_ms = now_ms
        self.voters = {v: ReplicaProgress(v) for v in voters}
        self.observers: dict[int, ReplicaProgress] = {}
        self.parked: list[ParkedFetch] = []
        self.begin_quorum_sent_ms: dict[int, int] = {}
        local = self.voters[node_id]
        local.acknowledged = True

    def election(self) -> Election:
        return Election(self.epoch, self.node_id, self.node_id)

    @property
    def majority(self) -> int:
        return len(self.voters) // 2 + 1

    def progress(self, replica_id: int) -> ReplicaProgress:
        """The voter's progress, or the observer's (created on its first fetch)."""
        found = self.voters.get(replica_id)
        if found is None:
            found = self.observers.get(replica_id)
            if found is None:
                found = self.observers[replica_id] = ReplicaProgress(replica_id)
        return found

    def update_local(self, flushed_offset: int, now_ms: int) -> None:
        """The leader's own progress counts only what is durable on its disk."""
        local = self.voters[self.node_id]
        local.end_offset = max(local.end_offset, flushed_offset)
        local.last_fetch_ms = now_ms
        local.last_caught_up_ms = now_ms

    def majority_offset(self) -> int:
        """The largest offset that at least a majority of voters has reached."""
        offsets = sorted((p.end_offset for p in self.voters.values()), reverse=True)
        return offsets[self.majority - 1]

    def next_high_watermark(self, current: int) -> int | None:
        """The new high watermark if it may move forward now, else None.

        Not before a batch of this epoch is on a majority: until then the leader cannot tell
        whether older entries it holds are committed (Raft's figure 8).
        """
        # Bounded by the leader's own durable end too: no replica reports as committed what a crash
        # could take from it (the others may be ahead of the leader's flush).
        candidate = min(self.majority_offset(), self.voters[self.node_id].end_offset)
        if candidate > self.epoch_start_offset and candidate > current:
            return candidate
        return None

    def quorum_alive(self, now_ms: int, fetch_timeout_ms: int) -> bool:
        """Whether a majority of voters (the leader among them) fetched within the fetch timeout.

        A leader that cannot say so may be a zombie: the others may have moved on without it.
        A fresh leader gets one full timeout before it is judged.
        """
        if len(self.voters) == 1 or now_ms - self.became_leader_ms < fetch_timeout_ms:
            return True
        alive = sum(1 for v, p in self.voters.items()
                    if v == self.node_id
                    or (p.last_fetch_ms != UNKNOWN and now_ms - p.last_fetch_ms <= fetch_timeout_ms))
        return alive >= self.majority

    def preferred_successors(self) -> tuple[int, ...]:
        """The other voters, most advanced log first (ties: most recent fetch, then id)."""
        others = [p for v, p in self.voters.items() if v != self.node_id]
        others.sort(key=lambda p: (-p.end_offset, -p.last_fetch_ms, p.replica_id))
        return tuple(p.replica_id for p in others)

    def next_deadline_ms(self) -> int | None:
        return min((p.deadline_ms for p in self.parked), default=None)
