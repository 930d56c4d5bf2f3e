"""The epoch states of a KRaft replica, as Kafka's QuorumState has them, plus KIP-996's prospective.

Each state is a small record of what the replica knows and waits for in one epoch. Transitions
are the core's business (`core.py`); the states only answer "what would be persisted" and "what
deadline am I waiting for", so the rules live in one place.

    unattached --(vote granted)--> voted          follower --(fetch timeout)--> prospective
    unattached/voted --(election timeout)--> prospective --(pre-vote majority)--> candidate
    prospective --(pre-vote refused or timed out)--> follower of the leader it knew, else prospective again
    candidate --(vote majority)--> leader --(resign / zombie)--> resigned --(timeout)--> prospective
    any --(higher epoch seen)--> unattached or follower

Observers (non-voters) are only ever unattached or follower.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum

from quorum.raft.interface import FetchRequest, FetchSnapshotRequest, VoteRequest

NO_NODE = -1


class Role(Enum):
    UNATTACHED = "unattached"
    VOTED = "voted"
    FOLLOWER = "follower"
    PROSPECTIVE = "prospective"
    CANDIDATE = "candidate"
    LEADER = "leader"
    RESIGNED = "resigned"


@dataclass(frozen=True, slots=True)
class Election:
    """What `quorum-state` holds: the epoch, the vote cast in it and the leader known for it."""

    epoch: int
    voted_id: int = NO_NODE
    leader_id: int = NO_NODE


@dataclass(slots=True)
class Fetching:
    """The one Fetch a follower (or an observer looking for the leader) has in flight.

    One at a time, as Kafka does: the fetch offset is the replica's progress, and a second fetch
    racing the first would report a position the first may yet change.
    """

    outstanding: FetchRequest | FetchSnapshotRequest | None = None
    destination: int = NO_NODE
    sent_ms: int = 0
    retry_at_ms: int = 0
    leader_backoff_until_ms: int = 0
    """An observer whose Fetch to its leader failed asks the other voters until then (Kafka's
    pollFollowerAsObserver while the leader's connection backs off)."""


@dataclass(slots=True)
class Unattached:
    """No leader known in `epoch`; `voted_id` set makes it Kafka's voted state."""

    epoch: int
    voted_id: int = NO_NODE
    election_deadline_ms: int | None = None  # None for observers, which never campaign
    fetching: Fetching | None = None  # observers look for the leader by fetching from voters

    @property
    def role(self) -> Role:
        return Role.VOTED if self.voted_id != NO_NODE else Role.UNATTACHED

    def election(self) -> Election:
        return Election(self.epoch, self.voted_id)


@dataclass(slots=True)
class Follower:
    """Replicating from `leader_id` in `epoch`."""

    epoch: int
    leader_id: int
    voted_id: int
    fetch_deadline_ms: int
    fetching: Fetching = field(default_factory=Fetching)
    leader_high_watermark: int | None = None
    has_fetched: bool = False  # a Fetch succeeded in this state: the leader is alive, refuse pre-votes

    role = Role.FOLLOWER

    def election(self) -> Election:
        return Election(self.epoch, self.voted_id, self.leader_id)


@dataclass(slots=True)
class Campaign:
    """Votes gathered in one round of pre-vote or vote."""

    sent: dict[int, VoteRequest] = field(default_factory=dict)
    granted: set[int] = field(default_factory=set)
    rejected: set[int] = field(default_factory=set)


@dataclass(slots=True)
class Prospective:
    """KIP-996 pre-vote: asks whether it could win `epoch + 1` before bumping any epoch.

    `leader_id` is the leader of `epoch` it lost touch with (NO_NODE if none; itself if it resigned).
    Like Kafka's ProspectiveState it still counts as this epoch's known leader: kept in quorum-state,
    reported in responses, and a peer naming that same leader tells it nothing new. Only losing the
    pre-vote sends it back to following that leader; a higher epoch, or BeginQuorumEpoch from that
    leader, ends it as for any state.
    """

    epoch: int
    voted_id: int
    leader_id: int
    retries: int
    start_ms: int  # pre-votes go out at this time (after a backoff)
    deadline_ms: int
    campaign: Campaign = field(default_factory=Campaign)
    started: bool = False

    role = Role.PROSPECTIVE

    def election(self) -> Election:
        return Election(self.epoch, self.voted_id, self.leader_id)


@dataclass(slots=True)
class Candidate:
    """Voted for itself in `epoch` and asks the other voters for theirs."""

    epoch: int
    node_id: int
    retries: int
    deadline_ms: int
    campaign: Campaign = field(default_factory=Campaign)
    backoff_until_ms: int | None = None
    """Set once the round is lost (refused, or its election timeout ran out): the candidate waits
    until then before its next pre-vote, and a grant that still arrives meanwhile wins the round,
    as Kafka's CandidateState counts votes while it backs off. Where a round trip is as long as an
    election timeout, the grants of a round arrive just after it ends."""

    role = Role.CANDIDATE

    def election(self) -> Election:
        return Election(self.epoch, self.node_id)


@dataclass(slots=True)
class Resigned:
    """A leader that stepped down in `epoch` (gracefully, at restart, or as a zombie).

    It writes nothing more, tells the voters with EndQuorumEpoch, and campaigns itself only after
    an election timeout, giving its preferred successors the first chance.
    """

    epoch: int
    node_id: int
    preferred_successors: tuple[int, ...]
    election_deadline_ms: int
    unacked: set[int] = field(default_factory=set)
    end_sent_ms: int | None = None

    role = Role.RESIGNED

    def election(self) -> Election:
        return Election(self.epoch, self.node_id, self.node_id)
