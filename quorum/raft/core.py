"""The sans-IO KRaft core (KIP-595, with KIP-996 pre-vote): events in, actions out.

`RaftCore` holds one replica's epoch state and reacts to what its driver feeds it: requests and
responses from peers, time passing, writes becoming durable, proposals from the state machine.
It never touches a socket, a clock or a file: it reads the log through `RaftLog` and asks for
everything else with actions (see `interface.py` for the contract). The same object runs inside
the asyncio node and inside the deterministic simulator, which is what lets the simulator vouch
for the node.

Replication is pull-based: followers and observers send Fetch(FetchOffset, LastFetchedEpoch); the
leader either returns records or a DivergingEpoch, at which the follower truncates (never below
its high watermark). The high watermark is the offset a majority of voters has durably reached,
moved only once a record of the leader's own epoch is committed. A follower reports progress only
for data it has flushed: it sends its next Fetch once its appends are durable, so a leader never
counts a record toward the high watermark that a crash could still take away.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence

from quorum.raft.cluster_id import ClusterIdTracker, ids_conflict
from quorum.raft.control import build_leader_change_batch, scan_batches
from quorum.raft.divergence import check_fetch, truncation_offset
from quorum.raft.interface import (
    AbandonSnapshotFetch,
    Action,
    AdvanceLogStartOffset,
    AppendBatches,
    BeginQuorumEpochRequest,
    BeginQuorumEpochResponse,
    ClusterIdCommitted,
    EndQuorumEpochRequest,
    EndQuorumEpochResponse,
    Fatal,
    FetchRequest,
    FetchResponse,
    FetchSnapshotRequest,
    FetchSnapshotResponse,
    HighWatermarkAdvanced,
    InstallSnapshot,
    LeaderChanged,
    Message,
    OffsetAndEpoch,
    PersistState,
    QuorumConfig,
    QuorumDescription,
    RaftLog,
    ReplicaDescription,
    Reply,
    Send,
    SnapshotStore,
    Truncate,
    VoteRequest,
    VoteResponse,
    WriteSnapshotChunk,
)
from quorum.raft.leader import LeaderState, ParkedFetch
from quorum.raft.snapshot_bytes import spread_response_bytes
from quorum.raft.snapshot_rules import (
    NoSnapshots,
    SnapshotFetch,
    follower_log_start_target,
    leader_log_start_target,
    log_position,
)
from quorum.raft.state import (
    NO_NODE,
    Campaign,
    Candidate,
    Election,
    Fetching,
    Follower,
    Prospective,
    Resigned,
    Role,
    Unattached,
)
from quorum.raft.timing import binary_exponential_backoff, randomized_election_timeout, strict_exponential_backoff
from quorum.wire.errors import ErrorCode
from quorum.wire.records import CorruptRecordError, build_values_batch

State = Unattached | Follower | Prospective | Candidate | LeaderState | Resigned

_MAX_TRANSITIONS_PER_POLL = 16
GONE_LEADER_JITTER_MS = 50
"""A follower whose leader's connection was refused or reset starts its pre-vote within this many
ms (uniformly at random): loopback round trips take well under one on an idle machine, so two
followers rarely tie there. On a loaded one they often do (issue 38: most kill -9 failovers under
load split the vote in the first epoch); `_vote_undelivered` makes such a split cost a backoff,
not an election timeout."""
# Answers to FetchSnapshot after which the follower goes back to Fetch to learn what to fetch now.
_SNAPSHOT_REFETCH_ERRORS = frozenset({ErrorCode.SNAPSHOT_NOT_FOUND, ErrorCode.POSITION_OUT_OF_RANGE,
                                      ErrorCode.NOT_LEADER_OR_FOLLOWER})


class RaftCore:
    """One replica of the metadata quorum, voter or observer.

    `persisted` is what `quorum-state` held at start (None for a new node); `cluster_id` is the
    committed id from meta.properties (None if unknown). `rng` supplies every random choice.
    `snapshots` are the complete KIP-630 snapshots (none when omitted); the log already starts
    at the latest one's end offset if that was ahead of it (the driver's start-up does that).
    """

    def __init__(self, config: QuorumConfig, log: RaftLog, persisted: PersistState | None, cluster_id: str | None,
                 rng: random.Random, now_ms: int, snapshots: SnapshotStore | None = None) -> None:
        self._config = config
        self._log = log
        self._snapshots: SnapshotStore = snapshots if snapshots is not None else NoSnapshots()
        self._snapshot_fetch: SnapshotFetch | None = None
        latest = self._snapshots.latest_snapshot()
        self._snapshot_seen: tuple[OffsetAndEpoch, int] | None = (latest, now_ms) if latest else None
        self._leader_log_start: int | None = None  # as the leader's last Fetch answer gave it
        self._log_start_asked = 0  # the last AdvanceLogStartOffset emitted
        self._rng = rng
        self._id = config.node_id
        self._voters = tuple(config.voters)
        self._is_voter = config.is_voter
        self._majority = len(self._voters) // 2 + 1
        self._now = now_ms
        self._actions: list[Action] = []
        self._fatal: str | None = None
        self._cluster = ClusterIdTracker(cluster_id, log, self._snapshots)  # the rule: quorum/raft/cluster_id.py
        # What a snapshot holds is committed: the high watermark starts at least there.
        self._high_watermark = max(log.start_offset, latest.offset if latest else 0)
        self._pending_append_end: int | None = None  # asked to append, not yet reported durable
        self._log_stale = False  # actions of this call change the log: do not read it for a Fetch
        self._resigned_leader: tuple[int, int] | None = None  # (epoch, leader) known to have stepped down
        self._stopping = False  # `shutdown` was called: this replica never starts an election again
        self._announced: tuple[int, int] | None = None
        election = Election(persisted.epoch, persisted.voted_id, persisted.leader_id) if persisted else Election(0)
        self._persisted = election
        self._state: State = self._initial_state(election)

    # -----------------------------------------------------------------------------------------
    # What the driver and the state machine may read.

    @property
    def node_id(self) -> int:
        return self._id

    @property
    def role(self) -> Role:
        return self._state.role

    @property
    def epoch(self) -> int:
        return self._state.epoch

    @property
    def leader_id(self) -> int:
        """The leader this replica knows for its epoch, -1 if none (a resigned leader reports none).

        A prospective replica still knows the leader it lost touch with, as Kafka's ProspectiveState
        does: it doubts that leader, it has not learnt of another, so a peer naming that same leader
        in that same epoch tells it nothing new (and must not send it back to following).
        """
        state = self._state
        if isinstance(state, LeaderState):
            return self._id
        if isinstance(state, (Follower, Prospective)) and state.leader_id != self._id:
            return state.leader_id  # a prospective that was the leader (resigned) knows none
        return NO_NODE

    @property
    def high_watermark(self) -> int:
        return self._high_watermark

    @property
    def leader_committed(self) -> bool:
        """This replica leads, and a record of its own epoch is committed: everything committed
        before its election is below the high watermark (what an active controller must have
        replayed before it acts, KIP-631)."""
        state = self._state
        return isinstance(state, LeaderState) and self._high_watermark > state.epoch_start_offset

    @property
    def cluster_id(self) -> str | None:
        """The cluster id known to be committed (what belongs in meta.properties), or None."""
        return self._cluster.committed

    @property
    def is_voter(self) -> bool:
        return self._is_voter

    @property
    def fatal(self) -> str | None:
        """Why the core stopped, once it has emitted Fatal; it ignores every event after that."""
        return self._fatal

    def describe(self, now_ms: int) -> QuorumDescription:
        """What DescribeQuorum answers; only a leader knows the replicas' progress."""
        state = self._state
        if isinstance(state, LeaderState):
            state.update_local(self._log.flushed_offset, max(self._now, now_ms))
            voters = tuple(state.voters[v].describe() for v in self._voters)
            observers = tuple(state.observers[o].describe() for o in sorted(state.observers))
        else:
            voters = tuple(ReplicaDescription(v, -1, -1, -1) for v in self._voters)
            observers = ()
        return QuorumDescription(self.leader_id, self.epoch, self._high_watermark, voters, observers)

    def next_deadline_ms(self) -> int | None:
        """When `tick` next has something to do (None: only an event can change anything)."""
        if self._fatal:
            return None
        state = self._state
        deadlines: list[int | None] = []
        if isinstance(state, Unattached):
            deadlines.append(self._election_timer(state.election_deadline_ms))
            if state.fetching is not None:
                deadlines.append(self._fetch_deadline(state.fetching))
        elif isinstance(state, Follower):
            fetch_timeout = self._election_timer(state.fetch_deadline_ms) if self._is_voter else state.fetch_deadline_ms
            deadlines += [fetch_timeout, self._fetch_deadline(state.fetching)]
        elif isinstance(state, Prospective):
            deadlines.append(state.deadline_ms if state.started else state.start_ms)
        elif isinstance(state, Candidate):
            deadlines.append(state.deadline_ms if state.backoff_until_ms is None
                             else self._election_timer(state.backoff_until_ms))
        elif isinstance(state, LeaderState):
            deadlines += [state.next_deadline_ms(), self._check_quorum_deadline(state), self._log_start_deadline(),
                          *(self._begin_quorum_due(state, v) for v in state.voters if v != self._id)]
        elif isinstance(state, Resigned):
            deadlines.append(self._election_timer(state.election_deadline_ms))
            if state.unacked and state.end_sent_ms is not None:
                deadlines.append(state.end_sent_ms + self._config.request_timeout_ms)
        return min((d for d in deadlines if d is not None), default=None)

    # -----------------------------------------------------------------------------------------
    # Events.

    def start(self, now_ms: int) -> list[Action]:
        """First call after construction: announces the state and starts fetching or campaigning."""
        self._begin(now_ms)
        conflict = self._cluster.start_conflict()
        if conflict is not None:
            self._die(conflict)
            return self._take()
        self._announce()
        if isinstance(self._state, Resigned):
            self._send_end_quorum(self._state)
        if self._is_voter and self._voters == (self._id,) and not isinstance(self._state, LeaderState):
            self._become_candidate(retries=1)
        return self._finish()

    def tick(self, now_ms: int) -> list[Action]:
        """Time has passed: timeouts, retries, long-polled Fetches whose wait is over."""
        self._begin(now_ms)
        return self._finish()

    def on_request(self, request_id: int, sender_id: int, message: Message, now_ms: int) -> list[Action]:
        """A request from a peer; the answer is a Reply(request_id, ...), now or (Fetch) later."""
        self._begin(now_ms)
        if self._fatal:
            return []
        if isinstance(message, VoteRequest):
            self._on_vote_request(request_id, message)
        elif isinstance(message, BeginQuorumEpochRequest):
            self._on_begin_quorum_epoch(request_id, message)
        elif isinstance(message, EndQuorumEpochRequest):
            self._on_end_quorum_epoch(request_id, message)
        elif isinstance(message, FetchRequest):
            self._on_fetch_request(request_id, sender_id, message)
        elif isinstance(message, FetchSnapshotRequest):
            self._on_fetch_snapshot_request(request_id, message)
        else:
            raise TypeError(f"not a Raft request: {type(message).__name__}")
        return self._finish()

    def on_response(self, sender_id: int, message: Message, now_ms: int,
                    request: Message | None = None) -> list[Action]:
        """A response from `sender_id` to `request` (the object this core sent).

        Without `request` the core assumes the response answers the latest request of its kind
        to that peer, which is right only when the transport never duplicates or reorders.
        """
        self._begin(now_ms)
        if self._fatal:
            return []
        if isinstance(message, VoteResponse):
            self._on_vote_response(sender_id, message, request)
        elif isinstance(message, FetchResponse):
            self._on_fetch_response(sender_id, message, request)
        elif isinstance(message, FetchSnapshotResponse):
            self._on_fetch_snapshot_response(sender_id, message, request)
        elif isinstance(message, BeginQuorumEpochResponse):
            if not self._handle_common_response(message.leader_id, message.leader_epoch):
                state = self._state
                if isinstance(state, LeaderState) and message.leader_epoch == state.epoch and sender_id in state.voters:
                    state.voters[sender_id].acknowledged = True
        elif isinstance(message, EndQuorumEpochResponse):
            state = self._state
            if isinstance(state, Resigned):
                state.unacked.discard(sender_id)
            self._handle_common_response(message.leader_id, message.leader_epoch)
        else:
            raise TypeError(f"not a Raft response: {type(message).__name__}")
        return self._finish()

    def on_send_failed(self, destination: int, message: Message, now_ms: int, peer_gone: bool = False) -> list[Action]:
        """A request could not be delivered or timed out: retry the Fetch after a backoff.

        Votes, BeginQuorumEpoch and EndQuorumEpoch are not retried here: their rounds and
        periodic resends cover a lost one. A candidate's Vote that failed counts as not granted in
        its round, though (`_vote_undelivered`). `peer_gone`: the destination's connection was refused,
        reset or closed (the kernel's word that its process is gone, as right after a `kill -9`).
        A voter following that leader does not wait out `quorum.fetch.timeout.ms` then: it starts
        a pre-vote at once (issue 17). A false alarm stays harmless, as KIP-996 means it to: voters
        still fetching from a live leader refuse the pre-vote, and this replica follows it again.
        """
        self._begin(now_ms)
        if self._fatal:
            return []
        state = self._state
        if (peer_gone and self._is_voter and not self._stopping and isinstance(state, Follower)
                and destination == state.leader_id and isinstance(message, FetchRequest)
                and state.fetching.outstanding is message):
            state.fetch_deadline_ms = min(state.fetch_deadline_ms, self._now)
            state.fetching.outstanding = None
            # Every follower of the dead leader hears of it in the same millisecond: a random head
            # start keeps them from all campaigning at once and splitting the vote.
            self._become_prospective(retries=1, delay_ms=self._rng.randrange(GONE_LEADER_JITTER_MS))
            return self._finish()
        if isinstance(message, VoteRequest) and isinstance(state, Candidate):
            self._vote_undelivered(state, destination, message)
            return self._finish()
        fetching = self._fetching()
        if (isinstance(message, (FetchRequest, FetchSnapshotRequest)) and fetching is not None
                and fetching.outstanding is message):
            fetching.outstanding = None
            fetching.retry_at_ms = self._now + self._config.retry_backoff_ms
            if isinstance(self._state, Unattached):
                fetching.destination = NO_NODE  # an observer looking for the leader asks someone else
            elif isinstance(state, Follower) and destination == state.leader_id:
                self._leader_fetch_failed(fetching)
        return self._finish()

    def _leader_fetch_failed(self, fetching: Fetching) -> None:
        """An observer's Fetch to its leader failed or timed out: while the leader backs off, it asks
        the other voters at once (Kafka's observer fetches from any voter then), so it learns of a
        new leader as soon as one is elected instead of retrying a dead one every
        quorum.retry.backoff.ms until quorum.fetch.timeout.ms (2 s) runs out. Voters do not: they
        keep to their leader, and its death starts their pre-vote."""
        if not self._is_voter and self._snapshot_fetch is None:
            fetching.leader_backoff_until_ms = self._now + self._config.retry_backoff_ms
            fetching.retry_at_ms = self._now

    def on_appended(self, now_ms: int) -> list[Action]:
        """The log holds what AppendBatches asked for, not yet durable (the driver flushes next).

        A leader answers the Fetches parked for new data now, so that its followers append and
        fsync while it fsyncs: the two disk waits overlap instead of following each other (issue
        17). That is safe: the leader counts its own log toward the high watermark only once it is
        durable (`on_flushed`), and a follower reports only durable progress.
        """
        self._begin(now_ms)
        if self._fatal:
            return []
        state = self._state
        if isinstance(state, LeaderState) and state.parked:
            end = self._log.end_offset
            self._answer_parked(state, lambda parked: parked.request.fetch_offset < end)
        return self._finish()

    def on_flushed(self, end_offset: int, now_ms: int) -> list[Action]:
        """The log is durable up to `end_offset`: progress may be reported and counted now."""
        self._begin(now_ms)
        if self._fatal:
            return []
        flushed = self._log.flushed_offset
        if self._pending_append_end is not None and flushed >= self._pending_append_end:
            self._pending_append_end = None
        state = self._state
        if isinstance(state, LeaderState):
            self._maybe_advance_leader_high_watermark(state)
            end = self._log.end_offset
            self._answer_parked(state, lambda parked: parked.request.fetch_offset < end)
        elif isinstance(state, Follower):
            self._update_follower_high_watermark(state)
        return self._finish()

    def on_snapshot_created(self, snapshot_id: OffsetAndEpoch, now_ms: int) -> list[Action]:
        """The state machine finished a snapshot (KIP-630: "notify when snapshot finished").

        It is the latest snapshot now: the log start offset may move up to it, on the leader once
        the live replicas have it, on a follower as far as the leader's log start offset.
        """
        self._begin(now_ms)
        if self._fatal:
            return []
        if snapshot_id.offset > self._high_watermark:
            raise ValueError(f"snapshot {snapshot_id} ends past the high watermark {self._high_watermark}: "
                             "only committed records may be in a snapshot")
        self._note_snapshot(snapshot_id)
        return self._finish()

    def on_snapshot_fetched(self, snapshot_id: OffsetAndEpoch, error: str | None, now_ms: int,
                            cluster_id: str | None = None) -> list[Action]:
        """The driver wrote the last chunk of `snapshot_id`: validated and renamed, or refused (`error`).

        A complete snapshot is installed (InstallSnapshot: the log restarts at its end offset and
        the state machine loads it), unless this replica leads by now: a leader never loads a
        fetched snapshot, its own log already holds everything committed. `cluster_id` is the one
        the snapshot's header carries, if any: committed, as everything in a snapshot is.
        """
        self._begin(now_ms)
        if self._fatal:
            return []
        fetch = self._snapshot_fetch
        if fetch is None or fetch.snapshot_id != snapshot_id or not fetch.completing:
            return self._finish()  # abandoned meanwhile: the driver's file is complete or gone, nothing to do
        self._snapshot_fetch = None
        fetching = self._fetching()
        if error is not None:
            if fetching is not None:
                fetching.retry_at_ms = self._now + self._config.retry_backoff_ms
            return self._finish()
        if cluster_id is not None:
            self._learn_committed_cluster_id(cluster_id)
            if self._fatal:
                return self._take()
        if not isinstance(self._state, LeaderState):
            self._install(snapshot_id)
        return self._finish()

    def propose(self, values: Sequence[bytes], now_ms: int) -> tuple[int | None, list[Action]]:
        """Append `values` as one batch of this leader's epoch; returns its base offset.

        None when this replica is not the leader: the caller must find the leader and ask it.
        """
        if not values:
            raise ValueError("propose needs at least one value")
        self._begin(now_ms)
        state = self._state
        if self._fatal or not isinstance(state, LeaderState):
            return None, self._finish()
        base = self._next_offset()
        batch = build_values_batch([bytes(value) for value in values], base, state.epoch, self._now)
        self._append(batch, base + len(values))
        return base, self._finish()

    def resign(self, now_ms: int) -> list[Action]:
        """Step down gracefully: EndQuorumEpoch names the successors, most advanced log first."""
        self._begin(now_ms)
        state = self._state
        if not self._fatal and isinstance(state, LeaderState):
            self._resign(state)
        return self._finish()

    def shutdown(self, now_ms: int) -> list[Action]:
        """The process is stopping: resign if leading, and never start an election again.

        As Kafka's graceful shutdown (KafkaRaftClient.shutdown): while it lasts the replica still
        answers votes, fetches and EndQuorumEpoch, but no timer makes it a prospective or a
        candidate, and a candidate already campaigning that wins resigns at once. Without this a
        resigned leader that granted its successor's vote and did not hear of the win within an
        election timeout (a loaded machine) campaigned itself in the next epoch, won, and then
        exited as the leader: the graceful failover became an unplanned one, 5 s later.
        """
        self._begin(now_ms)
        self._stopping = True
        state = self._state
        if not self._fatal:
            if isinstance(state, LeaderState):
                self._resign(state)
            elif isinstance(state, Prospective):
                self._transition(self._unattached(state.epoch, state.voted_id))
        return self._finish()

    # -----------------------------------------------------------------------------------------
    # Plumbing.

    def _begin(self, now_ms: int) -> None:
        # The driver has carried out the previous actions: the log is current again.
        self._now = max(self._now, now_ms)
        self._log_stale = False

    def _finish(self) -> list[Action]:
        self._poll()
        return self._take()

    def _take(self) -> list[Action]:
        actions, self._actions = self._actions, []
        return actions

    def _emit(self, action: Action) -> None:
        self._actions.append(action)

    def _send(self, destination: int, message: Message) -> None:
        self._emit(Send(destination, message))

    def _reply(self, request_id: int, message: Message) -> None:
        self._emit(Reply(request_id, message))

    def _die(self, reason: str) -> None:
        if self._fatal is None:
            self._fatal = reason
            self._emit(Fatal(reason))

    def _append(self, batches: bytes, end_offset: int) -> None:
        self._emit(AppendBatches(batches, end_offset))
        self._pending_append_end = end_offset
        self._log_stale = True

    def _next_offset(self) -> int:
        end = self._log.end_offset
        return end if self._pending_append_end is None else max(end, self._pending_append_end)

    def _fetching(self) -> Fetching | None:
        state = self._state
        if isinstance(state, Follower):
            return state.fetching
        if isinstance(state, Unattached):
            return state.fetching
        return None

    def _log_up_to_date(self, last_epoch: int, last_offset: int) -> bool:
        """Raft's election restriction: the candidate's log ends at or after ours."""
        ours = log_position(self._log, self._snapshots)
        return (last_epoch, last_offset) >= (ours.epoch, ours.offset)

    # -----------------------------------------------------------------------------------------
    # Transitions.

    def _initial_state(self, election: Election) -> State:
        """Kafka's QuorumState.initialize: a leader comes back resigned, a follower following."""
        if self._is_voter and election.leader_id == self._id:
            others = {v for v in self._voters if v != self._id}
            return Resigned(election.epoch, self._id, (), self._now + self._election_timeout(), others)
        if election.leader_id not in (NO_NODE, self._id):
            return Follower(election.epoch, election.leader_id, election.voted_id,
                            self._now + self._config.fetch_timeout_ms)
        return self._unattached(election.epoch, election.voted_id if self._is_voter else NO_NODE)

    def _unattached(self, epoch: int, voted_id: int = NO_NODE, deadline_ms: int | None = None) -> Unattached:
        if not self._is_voter:
            return Unattached(epoch, fetching=Fetching())
        if deadline_ms is None:
            deadline_ms = self._now + self._election_timeout()
        return Unattached(epoch, voted_id, deadline_ms)

    def _election_timeout(self) -> int:
        return randomized_election_timeout(self._config, self._rng)

    def _election_timer(self, deadline_ms: int | None) -> int | None:
        """A deadline whose end starts an election: none while stopping (`shutdown`)."""
        return None if self._stopping else deadline_ms

    def _election_due(self, deadline_ms: int | None) -> bool:
        timer = self._election_timer(deadline_ms)
        return timer is not None and self._now >= timer

    def _transition(self, new: State) -> None:
        old = self._state
        if new.epoch < old.epoch:
            raise AssertionError(f"epoch would go back from {old.epoch} to {new.epoch}")
        self._state = new
        election = new.election()
        if election != self._persisted:
            self._persisted = election
            self._emit(PersistState(election.epoch, election.voted_id, election.leader_id))
        if isinstance(old, LeaderState) and new is not old:
            self._answer_parked(old, lambda parked: True)  # they learn of the new state, persisted first
        fetch = self._snapshot_fetch
        if fetch is not None and (self.leader_id, self.epoch) != (fetch.leader_id, fetch.epoch):
            self._abandon_snapshot_fetch()  # only from the leader that named it (a completing one stays)
        self._announce()

    def _announce(self) -> None:
        current = (self.leader_id, self.epoch)
        if current != self._announced:
            self._announced = current
            self._emit(LeaderChanged(*current))

    def _become_follower(self, epoch: int, leader_id: int) -> None:
        voted = self._state.election().voted_id if epoch == self.epoch else NO_NODE
        self._transition(Follower(epoch, leader_id, voted, self._now + self._config.fetch_timeout_ms))

    def _become_prospective(self, retries: int, delay_ms: int = 0) -> None:
        election = self._state.election()
        self._transition(Prospective(election.epoch, election.voted_id, election.leader_id, retries,
                                     start_ms=self._now + delay_ms, deadline_ms=self._now + delay_ms))

    def _become_candidate(self, retries: int) -> None:
        candidate = Candidate(self.epoch + 1, self._id, retries, self._now + self._election_timeout())
        self._transition(candidate)
        candidate.campaign.granted.add(self._id)
        if len(candidate.campaign.granted) >= self._majority:
            self._become_leader(candidate)
            return
        self._send_votes(candidate.campaign, candidate.epoch, pre_vote=False)

    def _become_leader(self, candidate: Candidate) -> None:
        start = self._next_offset()
        leader = LeaderState(self._id, candidate.epoch, self._voters, start, candidate.campaign.granted, self._now)
        self._transition(leader)
        cluster_id = self._cluster.for_new_leader(start, self._log, self._snapshots, self._rng)
        for voter in self._voters:
            if voter != self._id:
                self._send_begin_quorum_epoch(leader, voter)
        batch = build_leader_change_batch(start, leader.epoch, self._id, self._voters, leader.granting_voters,
                                          cluster_id, self._now)
        self._append(batch, start + 1)
        leader.update_local(self._log.flushed_offset, self._now)

    def _resign(self, leader: LeaderState) -> None:
        others = {v for v in self._voters if v != self._id}
        resigned = Resigned(leader.epoch, self._id, leader.preferred_successors(),
                            self._now + self._election_timeout(), others)
        # The parked Fetches are answered after EndQuorumEpoch is sent: a successor that heard the
        # Fetch error first would persist "no leader" and only then campaign (issue 17's failover).
        parked, leader.parked = leader.parked, []
        self._transition(resigned)
        self._send_end_quorum(resigned)
        for fetch in parked:
            self._reply(fetch.request_id, self._fetch_error(self._epoch_error(fetch.request.current_leader_epoch)))

    def _send_end_quorum(self, resigned: Resigned) -> None:
        for voter in sorted(resigned.unacked):
            self._send(voter, EndQuorumEpochRequest(self._cluster.committed, self._id, resigned.epoch,
                                                    resigned.preferred_successors))
        resigned.end_sent_ms = self._now

    def _handle_common_response(self, leader_id: int, epoch: int) -> bool:
        """Learn from any response's (leader, epoch); True when that changed the state.

        A higher epoch always wins; in our own epoch, a leader we did not know about is followed
        (a candidate that hears of one has lost). A leader known to have resigned is not.
        """
        state = self._state
        known_resigned = (epoch, leader_id) == self._resigned_leader
        if epoch > state.epoch:
            if leader_id not in (NO_NODE, self._id) and not known_resigned:
                self._become_follower(epoch, leader_id)
            else:
                self._transition(self._unattached(epoch))
            return True
        if (epoch == state.epoch and leader_id not in (NO_NODE, self._id) and self.leader_id == NO_NODE
                and not isinstance(state, (LeaderState, Resigned)) and not known_resigned):
            self._become_follower(epoch, leader_id)
            return True
        return False

    # -----------------------------------------------------------------------------------------
    # Time-driven work.

    def _poll(self) -> None:
        for _ in range(_MAX_TRANSITIONS_PER_POLL):
            if self._fatal:
                return
            before = self._state
            self._poll_state(before)
            if self._state is before:
                return

    def _poll_state(self, state: State) -> None:
        now = self._now
        if isinstance(state, Unattached):
            if self._election_due(state.election_deadline_ms):
                self._become_prospective(retries=1)
            elif state.fetching is not None:
                self._poll_fetching(state.fetching, NO_NODE)
        elif isinstance(state, Follower):
            if self._is_voter and self._election_due(state.fetch_deadline_ms):
                self._become_prospective(retries=1)
            elif not self._is_voter and now >= state.fetch_deadline_ms:
                self._transition(self._unattached(state.epoch))
            else:
                self._poll_fetching(state.fetching, state.leader_id)
        elif isinstance(state, Prospective):
            self._poll_prospective(state)
        elif isinstance(state, Candidate):
            if state.backoff_until_ms is not None:
                if self._election_due(state.backoff_until_ms):
                    self._become_prospective(state.retries + 1)
            elif now >= state.deadline_ms:
                self._lose_vote(state)
        elif isinstance(state, LeaderState):
            if self._stopping:
                self._resign(state)  # elected by a campaign begun before `shutdown`: hand over at once
            else:
                self._poll_leader(state)
        elif isinstance(state, Resigned):
            if self._election_due(state.election_deadline_ms):
                self._become_prospective(retries=1)
            elif (state.unacked and state.end_sent_ms is not None
                  and now >= state.end_sent_ms + self._config.request_timeout_ms):
                self._send_end_quorum(state)

    def _backoff(self, retries: int) -> int:
        return binary_exponential_backoff(self._config, self._rng, retries)

    # -----------------------------------------------------------------------------------------
    # Elections: pre-vote, vote.

    def _poll_prospective(self, state: Prospective) -> None:
        now = self._now
        if not state.started:
            if now < state.start_ms:
                return
            state.started = True
            state.deadline_ms = now + self._election_timeout()
            state.campaign.granted.add(self._id)
            if len(state.campaign.granted) >= self._majority:
                self._become_candidate(state.retries)
                return
            self._send_votes(state.campaign, state.epoch + 1, pre_vote=True)
        elif now >= state.deadline_ms:
            self._lose_pre_vote(state)

    def _lose_pre_vote(self, state: Prospective) -> None:
        """The pre-vote was refused by too many voters, or timed out (KIP-996).

        With a leader known in this epoch it goes back to following it, as Kafka does: the leader
        may be alive after all (the voters that refused still hear from it), and if it is not, the
        fetch timeout brings the replica back here, while as a follower that has not reached its
        leader it grants other voters' pre-votes meanwhile. With no leader known it tries again
        after a backoff.
        """
        if self.leader_id != NO_NODE:
            self._become_follower(state.epoch, self.leader_id)
            return
        self._transition(Prospective(state.epoch, state.voted_id, state.leader_id, state.retries + 1,
                                     start_ms=self._now + self._backoff(state.retries),
                                     deadline_ms=self._now))

    def _send_votes(self, campaign: Campaign, candidate_epoch: int, pre_vote: bool) -> None:
        ours = log_position(self._log, self._snapshots)
        request = VoteRequest(self._cluster.committed, candidate_epoch, self._id, ours.epoch, ours.offset, pre_vote)
        for voter in self._voters:
            if voter != self._id:
                campaign.sent[voter] = request
                self._send(voter, request)

    def _on_vote_request(self, request_id: int, request: VoteRequest) -> None:
        def answer(granted: bool, error: int = ErrorCode.NONE) -> None:
            self._reply(request_id, VoteResponse(int(error), self.leader_id, self.epoch, granted, request.pre_vote))

        if ids_conflict(request.cluster_id, self._cluster.committed):
            answer(False, ErrorCode.INCONSISTENT_CLUSTER_ID)  # a vote rejection, never fatal: we may be the odd one
            return
        candidate = request.candidate_id
        # Kafka's validateVoterOnlyRequest (3.x, voters from controller.quorum.voters), in its order: an
        # older epoch is fenced, a negative id is no request, and an observer or a candidate outside the
        # voter set is INCONSISTENT_VOTER_SET, so the sender learns why rather than only that it lost.
        if request.candidate_epoch < self.epoch:
            answer(False, ErrorCode.FENCED_LEADER_EPOCH)
            return
        if candidate < 0:
            answer(False, ErrorCode.INVALID_REQUEST)
            return
        if not self._is_voter or candidate not in self._voters:
            answer(False, ErrorCode.INCONSISTENT_VOTER_SET)  # observers never vote, and only voters may lead
            return
        if candidate == self._id:
            answer(False)
            return
        up_to_date = self._log_up_to_date(request.last_epoch, request.last_offset)
        if request.pre_vote:
            # No state change at all: a pre-vote must not bump anyone's epoch.
            answer(up_to_date and self._grants_pre_vote() and not self._voted_otherwise(request))
            return
        if request.candidate_epoch > self.epoch:
            self._transition(self._unattached(request.candidate_epoch))
        state = self._state
        voted = state.election().voted_id
        if isinstance(state, LeaderState):
            granted = False
        elif voted == candidate:
            granted = True  # a repeated request: same answer
        elif voted != NO_NODE or self.leader_id != NO_NODE:
            granted = False  # a vote in an epoch that has a leader, or already cast
        elif isinstance(state, (Unattached, Prospective)):
            granted = up_to_date
        else:
            granted = False
        if granted and isinstance(state, (Unattached, Prospective)):
            # Persisted before the reply leaves (PersistState comes first in the actions).
            self._transition(self._unattached(state.epoch, candidate))
        answer(granted)

    def _voted_otherwise(self, request: VoteRequest) -> bool:
        """A pre-vote for the epoch this replica has already voted in, for another candidate (itself,
        as a candidate): the real vote would be refused, so the pre-vote is too. Granting it made the
        two survivors of a kill -9 both candidates of one epoch whenever the second's pre-vote came
        before the first's Vote (the first persists its vote in between): a split vote, a backoff
        and two more rounds (issue 37's SIGKILL failovers over 0.3 s)."""
        voted = self._state.election().voted_id
        return request.candidate_epoch == self.epoch and voted not in (NO_NODE, request.candidate_id)

    def _grants_pre_vote(self) -> bool:
        """KIP-996: refuse only while a leader is known to be alive, so a rejoining node cannot unseat it.

        Alive means a Fetch from it succeeded within the fetch timeout: a follower whose timeout
        has run out (whether or not a tick has made it prospective yet) grants, and so does a
        prospective replica, though it still names the leader it lost touch with.
        """
        state = self._state
        if isinstance(state, LeaderState):
            return False
        if isinstance(state, Follower):
            return not (state.has_fetched and self._now < state.fetch_deadline_ms)
        return True

    def _on_vote_response(self, sender_id: int, response: VoteResponse, request: Message | None) -> None:
        if self._handle_common_response(response.leader_id, response.leader_epoch):
            return
        state = self._state
        if isinstance(state, Prospective) and state.started:
            campaign, expected_epoch, pre_vote = state.campaign, state.epoch + 1, True
        elif isinstance(state, Candidate):
            campaign, expected_epoch, pre_vote = state.campaign, state.epoch, False
        else:
            return
        sent = campaign.sent.get(sender_id)
        if sent is None or (request is not None and request is not sent):
            return  # an answer to an earlier round
        if sent.candidate_epoch != expected_epoch or sent.pre_vote != pre_vote:
            return
        if response.error == ErrorCode.NONE and response.vote_granted:
            campaign.granted.add(sender_id)
        else:
            campaign.rejected.add(sender_id)  # INCONSISTENT_CLUSTER_ID included: a rejection, not fatal
        if len(campaign.granted) >= self._majority:
            if isinstance(state, Prospective):
                self._become_candidate(state.retries)
            else:
                self._become_leader(state)
        elif isinstance(state, Candidate) and state.backoff_until_ms is not None:
            return  # lost already: backing off, only a late grant still counts
        elif self._out_of_reach(campaign):
            if isinstance(state, Prospective):
                self._lose_pre_vote(state)
            else:
                self._lose_vote(state)

    def _lose_vote(self, state: Candidate) -> None:
        """Too many voters refused (or cannot answer), or the election timeout ran out: back off,
        then pre-vote again, as Kafka's candidate backs off when its vote is rejected (at once, not
        after the election timeout). It stays a candidate of its epoch while it backs off, so a
        grant still on its way wins the round (`Candidate.backoff_until_ms`)."""
        state.backoff_until_ms = self._now + self._backoff(state.retries)

    def _vote_undelivered(self, state: Candidate, voter: int, request: VoteRequest) -> None:
        """The Vote of this round to `voter` failed (refused, reset, timed out): no answer can come.

        Votes are sent once per round, so that voter's grant is out of this round's reach: counted
        with the refusals. After kill -9 of the leader the two survivors of a 3-voter quorum often
        pre-vote for each other at the same moment (they learn of the death from the same reset)
        and split the vote; each then refused the other while the dead voter never answered, and
        both waited out a whole election timeout before trying again (issue 38: "leader of epoch
        3" after most loaded failovers). With the dead voter counted, the split is a lost round at
        once and the randomized, doubling backoff (Kafka's binaryExponentialElectionBackoffMs)
        separates the two, which is what Kafka's candidate does when its vote is rejected.
        """
        campaign = state.campaign
        if campaign.sent.get(voter) is not request or voter in campaign.granted or voter in campaign.rejected:
            return  # an earlier round's, or already answered
        if state.backoff_until_ms is not None:
            return  # lost already
        campaign.rejected.add(voter)
        if self._out_of_reach(campaign):
            self._lose_vote(state)

    def _out_of_reach(self, campaign: Campaign) -> bool:
        """So many voters refused this round that the others cannot make a majority any more."""
        return len(campaign.rejected) > len(self._voters) - self._majority

    # -----------------------------------------------------------------------------------------
    # BeginQuorumEpoch and EndQuorumEpoch.

    def _begin_quorum_interval(self) -> int:
        return max(self._config.fetch_timeout_ms // 2, 1)

    def _send_begin_quorum_epoch(self, leader: LeaderState, voter: int) -> None:
        leader.begin_quorum_sent_ms[voter] = self._now
        self._send(voter, BeginQuorumEpochRequest(self._cluster.committed, self._id, leader.epoch))

    def _on_begin_quorum_epoch(self, request_id: int, request: BeginQuorumEpochRequest) -> None:
        def answer(error: int = ErrorCode.NONE) -> None:
            self._reply(request_id, BeginQuorumEpochResponse(int(error), self.leader_id, self.epoch))

        if ids_conflict(request.cluster_id, self._cluster.committed):
            # Refused, never fatal, as Kafka's handleBeginQuorumEpochRequest: a leader of another
            # cluster whose voter address is now one of ours (reused ports) must not stop this node.
            answer(ErrorCode.INCONSISTENT_CLUSTER_ID)
            return
        if request.leader_epoch < self.epoch:
            answer(ErrorCode.FENCED_LEADER_EPOCH)
            return
        if request.leader_id not in self._voters:
            # Kafka's validateVoterOnlyRequest: only a voter can have been elected. The protocol fuzzer's forged
            # BeginQuorumEpoch (leader 9, epoch 65535) otherwise made a lone controller follow nobody.
            answer(ErrorCode.INCONSISTENT_VOTER_SET)
            return
        if request.leader_id == self._id or (request.leader_epoch, request.leader_id) == self._resigned_leader:
            answer()
            return
        state = self._state
        if request.leader_epoch == state.epoch:
            if isinstance(state, (LeaderState, Resigned)) or self.leader_id not in (NO_NODE, request.leader_id):
                answer(ErrorCode.INVALID_REQUEST)  # two leaders in one epoch: never follow the second
                return
            if isinstance(state, Follower):
                answer()
                return
        self._become_follower(request.leader_epoch, request.leader_id)
        answer()

    def _on_end_quorum_epoch(self, request_id: int, request: EndQuorumEpochRequest) -> None:
        def answer(error: int = ErrorCode.NONE) -> None:
            self._reply(request_id, EndQuorumEpochResponse(int(error), self.leader_id, self.epoch))

        if ids_conflict(request.cluster_id, self._cluster.committed):
            answer(ErrorCode.INCONSISTENT_CLUSTER_ID)
            return
        if request.leader_epoch < self.epoch:
            answer(ErrorCode.FENCED_LEADER_EPOCH)
            return
        if request.leader_id not in self._voters:  # as BeginQuorumEpoch: only a voter can resign a leadership
            answer(ErrorCode.INCONSISTENT_VOTER_SET)
            return
        if request.leader_id == self._id:
            answer()
            return
        state = self._state
        same_epoch = request.leader_epoch == state.epoch
        if same_epoch and (isinstance(state, (LeaderState, Resigned, Candidate))
                           or self.leader_id not in (NO_NODE, request.leader_id)):
            answer()  # not about a leader we follow
            return
        self._resigned_leader = (request.leader_epoch, request.leader_id)
        voted = state.election().voted_id if same_epoch else NO_NODE
        successors = request.preferred_successors
        if not self._is_voter:
            self._transition(self._unattached(request.leader_epoch))
        elif self._stopping:
            self._transition(self._unattached(request.leader_epoch, voted))  # stopping: campaigns never
        elif self._id in successors and successors.index(self._id) == 0:
            # The leader's first choice campaigns at once, skipping pre-vote: the leader is gone by
            # its own word, so nobody has a live leader to protect.
            # Its votes go out before the answer, and the two state changes have nothing sent between
            # them, so the driver writes quorum-state once (issue 17's failover path). The answer names
            # the resigned epoch, as before campaigning: the new one would make the resigned leader
            # persist it before it grants the vote.
            self._transition(self._unattached(request.leader_epoch, voted, self._now))
            resigned = EndQuorumEpochResponse(ErrorCode.NONE, self.leader_id, self.epoch)
            self._become_candidate(retries=1)
            self._reply(request_id, resigned)
            return
        elif self._id in successors:
            delay = strict_exponential_backoff(self._config, successors.index(self._id), len(successors))
            self._transition(self._unattached(request.leader_epoch, voted, self._now + delay))
        else:
            self._transition(self._unattached(request.leader_epoch, voted))
        answer()

    # -----------------------------------------------------------------------------------------
    # The leader: Fetch, the high watermark, the zombie check.

    def _poll_leader(self, state: LeaderState) -> None:
        now = self._now
        if not state.quorum_alive(now, self._config.fetch_timeout_ms):
            # The zombie leader: nobody has fetched for a fetch timeout, perhaps they elected another.
            self._resign(state)
            return
        if state.parked:
            self._answer_parked(state, lambda parked: parked.deadline_ms <= now)
        self._maybe_advance_log_start()
        for voter in state.voters:
            if voter != self._id and now >= self._begin_quorum_due(state, voter):
                self._send_begin_quorum_epoch(state, voter)

    def _begin_quorum_due(self, state: LeaderState, voter: int) -> int:
        """When to repeat BeginQuorumEpoch to `voter`: every fetch timeout / 2 until it fetches,
        and again once it has not fetched for a fetch timeout (it may be campaigning in vain)."""
        due = state.begin_quorum_sent_ms.get(voter, self._now) + self._begin_quorum_interval()
        progress = state.voters[voter]
        if progress.acknowledged and progress.last_fetch_ms >= 0:
            due = max(due, progress.last_fetch_ms + self._config.fetch_timeout_ms)
        return due

    def _check_quorum_deadline(self, state: LeaderState) -> int | None:
        """The earliest time the zombie check could fail, given the fetches seen so far."""
        if len(self._voters) == 1:
            return None
        timeout = self._config.fetch_timeout_ms
        needed = state.majority - 1  # besides the leader
        recent = sorted((p.last_fetch_ms for v, p in state.voters.items() if v != self._id), reverse=True)
        limit = recent[needed - 1] + timeout + 1 if needed > 0 and recent[needed - 1] >= 0 else self._now
        return max(limit, state.became_leader_ms + timeout)

    def _on_fetch_request(self, request_id: int, sender_id: int, request: FetchRequest) -> None:
        state = self._state
        if not isinstance(state, LeaderState):
            self._reply(request_id, self._fetch_error(self._epoch_error(request.current_leader_epoch)))
            return
        if ids_conflict(request.cluster_id, self._cluster.known()):
            self._reply(request_id, self._fetch_error(ErrorCode.INCONSISTENT_CLUSTER_ID))
            return
        if request.current_leader_epoch != state.epoch:
            self._reply(request_id, self._fetch_error(self._epoch_error(request.current_leader_epoch)))
            return
        progress = state.progress(request.replica_id)
        verdict = check_fetch(self._log, self._snapshots, request.fetch_offset, request.last_fetched_epoch)
        if verdict.diverging is not None or verdict.snapshot is not None:
            progress.last_fetch_ms = self._now
            progress.acknowledged = True
            self._reply(request_id, FetchResponse(ErrorCode.NONE, self._id, state.epoch, self._high_watermark,
                                                  self._log.start_offset, diverging_epoch=verdict.diverging,
                                                  snapshot_id=verdict.snapshot))
            return
        progress.record_fetch(request.fetch_offset, self._log.end_offset, self._now)
        if request.replica_id in state.voters:
            self._maybe_advance_leader_high_watermark(state)
        self._maybe_advance_log_start()
        parked = ParkedFetch(request_id, sender_id, request, self._now + max(request.max_wait_ms, 0))
        if (request.max_wait_ms <= 0 or request.fetch_offset < self._log.end_offset
                or self._high_watermark > progress.last_sent_high_watermark):
            self._answer_fetch(state, parked)
        else:
            state.parked.append(parked)

    def _epoch_error(self, request_epoch: int) -> ErrorCode:
        if request_epoch < self.epoch:
            return ErrorCode.FENCED_LEADER_EPOCH
        if request_epoch > self.epoch:
            return ErrorCode.UNKNOWN_LEADER_EPOCH
        return ErrorCode.NOT_LEADER_OR_FOLLOWER

    def _fetch_error(self, error: int) -> FetchResponse:
        return FetchResponse(int(error), self.leader_id, self.epoch, self._high_watermark, self._log.start_offset)

    def _answer_fetch(self, state: LeaderState, parked: ParkedFetch) -> None:
        request = parked.request
        progress = state.progress(request.replica_id)
        records = b""
        if request.fetch_offset < self._log.end_offset:
            records = self._log.read(request.fetch_offset, min(request.max_bytes, self._config.fetch_max_bytes))
        progress.last_sent_high_watermark = self._high_watermark
        self._reply(parked.request_id, FetchResponse(ErrorCode.NONE, self._id, state.epoch, self._high_watermark,
                                                     self._log.start_offset, records))

    def _answer_parked(self, state: LeaderState, which: Callable[[ParkedFetch], bool]) -> None:
        """Answer the parked fetches `which` selects: with data if still leading, else with an error."""
        keep = []
        for parked in state.parked:
            if not which(parked):
                keep.append(parked)
            elif self._state is state:
                self._answer_fetch(state, parked)
            else:
                error = self._epoch_error(parked.request.current_leader_epoch)
                self._reply(parked.request_id, self._fetch_error(error))
        state.parked = keep

    def _maybe_advance_leader_high_watermark(self, state: LeaderState) -> None:
        state.update_local(self._log.flushed_offset, self._now)
        new = state.next_high_watermark(self._high_watermark)
        if new is not None:
            self._advance_high_watermark(new)
            if state.parked:
                self._answer_parked(state, lambda parked: True)

    def _advance_high_watermark(self, new: int) -> None:
        if new <= self._high_watermark:
            return
        self._high_watermark = new
        committed = self._cluster.high_watermark(new)
        if committed is not None:
            # First: a snapshot taken at this high watermark must carry the id in its header.
            self._emit(ClusterIdCommitted(committed))
        self._emit(HighWatermarkAdvanced(new))

    # -----------------------------------------------------------------------------------------
    # Followers and observers: fetching, appending, truncating.

    def _fetch_deadline(self, fetching: Fetching) -> int | None:
        if fetching.outstanding is not None:
            return fetching.sent_ms + self._config.request_timeout_ms
        if self._pending_append_end is not None:
            return None  # on_flushed comes first
        return fetching.retry_at_ms

    def _poll_fetching(self, fetching: Fetching, leader_id: int) -> None:
        now = self._now
        if fetching.outstanding is not None:
            if now < fetching.sent_ms + self._config.request_timeout_ms:
                return
            fetching.outstanding = None  # timed out: whatever answers it later is ignored
            if leader_id == NO_NODE:
                fetching.destination = NO_NODE
            elif fetching.destination == leader_id:
                self._leader_fetch_failed(fetching)
        if now < fetching.retry_at_ms or self._log_stale or self._pending_append_end is not None:
            return
        if self._log.flushed_offset < self._log.end_offset:
            return  # progress is reported for durable data only; on_flushed will come
        destination = leader_id
        if destination != NO_NODE and now < fetching.leader_backoff_until_ms and self._snapshot_fetch is None:
            others = [v for v in self._voters if v not in (self._id, leader_id)]
            if not others:
                # No other voter to ask: wait out the leader's backoff, as Kafka's maybeSendAnyVoterFetch
                # does when no voter is ready (backoffBeforeAvailableBootstrapServer). Retrying at once
                # made an observer of a single controller that died fetch in a tight loop (~1 a ms).
                fetching.retry_at_ms = fetching.leader_backoff_until_ms
                return
            destination = self._rng.choice(others)
        if destination == NO_NODE:
            destination = fetching.destination
            if destination == NO_NODE:
                candidates = [v for v in self._voters if v != self._id]
                if not candidates:
                    return
                destination = self._rng.choice(candidates)
        request: FetchRequest | FetchSnapshotRequest
        fetch = self._snapshot_fetch
        if fetch is not None:
            if fetch.completing or destination != fetch.leader_id:
                return  # the driver is finishing the file; or (briefly) the leader changed and it will be abandoned
            request = FetchSnapshotRequest(self._cluster.committed, self._id, self.epoch, fetch.snapshot_id,
                                           fetch.position, self._config.snapshot_fetch_max_bytes)
        else:
            request = FetchRequest(self._cluster.committed, self._id, self.epoch, self._log.end_offset,
                                   self._log.last_fetched_epoch(), self._config.fetch_max_bytes,
                                   self._config.fetch_max_wait_ms)
        fetching.outstanding = request
        fetching.destination = destination
        fetching.sent_ms = now
        self._send(destination, request)

    def _answered(self, sender_id: int, request: Message | None, kind: type) -> tuple[Fetching, Message] | None:
        """The fetching state and the outstanding request of `kind` that a response answers, now
        no longer outstanding; None for a duplicate or an answer to a request given up on."""
        fetching = self._fetching()
        if fetching is None or fetching.outstanding is None:
            return None
        if request is None:
            if sender_id != fetching.destination:
                return None
            request = fetching.outstanding
        elif request is not fetching.outstanding:
            return None
        if not isinstance(request, kind):
            return None
        fetching.outstanding = None
        return fetching, request

    def _on_fetch_response(self, sender_id: int, response: FetchResponse, request: Message | None) -> None:
        answered = self._answered(sender_id, request, FetchRequest)
        if answered is None:
            return
        fetching, request = answered
        assert isinstance(request, FetchRequest)
        state = self._after_fetch_answer(fetching, sender_id, response.error, response.leader_id,
                                         response.leader_epoch)
        if state is None:
            return
        fetching = state.fetching  # a new one if the answer made this observer a follower
        if response.diverging_epoch is not None:
            state.leader_high_watermark = None
            self._truncate_to_divergence(response.diverging_epoch)
            fetching.retry_at_ms = self._now
            return
        if response.high_watermark >= 0:
            state.leader_high_watermark = max(response.high_watermark, state.leader_high_watermark or 0)
        if response.snapshot_id is not None:
            self._start_snapshot_fetch(response.snapshot_id, state)
            fetching.retry_at_ms = self._now
            return
        if response.log_start_offset >= 0:
            self._leader_log_start = response.log_start_offset
        if response.records:
            self._append_fetched(response.records, request.fetch_offset)
        self._update_follower_high_watermark(state)
        self._maybe_advance_log_start()

    def _after_fetch_answer(self, fetching: Fetching, sender_id: int, error: int, leader_id: int,
                            leader_epoch: int) -> Follower | None:
        """What Fetch and FetchSnapshot answers have in common: the cluster id check, learning the
        leader and epoch, errors; returns the follower state when the answer is our leader's data."""
        if error == ErrorCode.INCONSISTENT_CLUSTER_ID:
            # Kafka's KafkaRaftClient logs it (handleUnexpectedError) and fetches again after the
            # backoff, learning nothing from the answer: the node that gave it belongs to another
            # cluster (a port a stale process of another cluster still holds, as test clusters'
            # ports get reused), which says nothing about ours. It used to stop this node.
            fetching.retry_at_ms = self._now + self._config.retry_backoff_ms
            state = self._state
            if isinstance(state, Follower) and sender_id == state.leader_id:
                self._leader_fetch_failed(fetching)
            elif not isinstance(state, Follower):
                fetching.destination = NO_NODE
            return None
        epoch_before, knew_leader = self.epoch, self.leader_id != NO_NODE
        if self._handle_common_response(leader_id, leader_epoch):
            # Kafka's maybeHandleCommonResponse: an observer that learns the leader of its own epoch
            # from that leader's successful answer appends its data at once, "to discover the leader
            # and append to the log in the same Fetch request". Dropped, the next Fetch had to go and
            # come back again: where that round trip outlasts the request timeout (the simulator's
            # 300-1500 ms delays) an observer found the leader again and again and never caught up.
            state = self._state
            if not (error == ErrorCode.NONE and leader_epoch == epoch_before and not knew_leader
                    and isinstance(state, Follower) and state.leader_id == sender_id):
                return None
        state = self._state
        if error != ErrorCode.NONE:
            fetching.retry_at_ms = self._now + self._config.retry_backoff_ms
            if isinstance(state, Follower):
                from_our_leader = sender_id == state.leader_id and leader_epoch == state.epoch
                if from_our_leader and leader_id == NO_NODE:
                    # Our leader says it no longer leads this epoch: it resigned or restarted.
                    self._resigned_leader = (state.epoch, state.leader_id)
                    self._transition(self._unattached(state.epoch, state.voted_id))
            else:
                fetching.destination = NO_NODE
            return None
        if not isinstance(state, Follower) or sender_id != state.leader_id or leader_epoch != state.epoch:
            return None
        state.has_fetched = True
        state.fetch_deadline_ms = self._now + self._config.fetch_timeout_ms
        return state

    def _truncate_to_divergence(self, diverging: OffsetAndEpoch) -> None:
        """Truncate where the leader says our log leaves its own (Kafka's truncateToEndOffset)."""
        log = self._log
        offset = truncation_offset(log, diverging)
        if offset < self._high_watermark:
            self._die(f"the leader asked to truncate to {offset}, below the high watermark {self._high_watermark}")
            return
        if offset >= log.end_offset:
            return
        self._emit(Truncate(offset))
        self._log_stale = True
        self._cluster.truncated(offset)

    def _append_fetched(self, records: bytes, fetch_offset: int) -> None:
        """Append the whole batches that continue our log exactly where the fetch started."""
        if fetch_offset != self._log.end_offset:
            return
        expected = fetch_offset
        size = 0
        try:
            for info in scan_batches(records):
                if info.base_offset != expected or info.epoch > self.epoch:
                    break
                if info.leader_change is not None and info.leader_change.cluster_id is not None:
                    conflict = self._cluster.fetched(info.base_offset, info.leader_change.cluster_id)
                    if conflict is not None:
                        self._die(conflict)
                        return
                expected = info.next_offset
                size += info.size
        except CorruptRecordError:
            pass  # keep the good prefix; the rest is fetched again
        if size:
            self._append(bytes(records[:size]), expected)

    # -----------------------------------------------------------------------------------------
    # KIP-630 snapshots: serving and fetching them, installing, the log start offset.

    def _on_fetch_snapshot_request(self, request_id: int, request: FetchSnapshotRequest) -> None:
        def answer(error: int, size: int = -1, position: int = -1, data: bytes = b"") -> None:
            self._reply(request_id, FetchSnapshotResponse(int(error), self.leader_id, self.epoch, request.snapshot_id,
                                                          size, position, data))

        state = self._state
        if not isinstance(state, LeaderState):
            answer(self._epoch_error(request.current_leader_epoch))
            return
        if ids_conflict(request.cluster_id, self._cluster.known()):
            answer(ErrorCode.INCONSISTENT_CLUSTER_ID)
            return
        if request.current_leader_epoch != state.epoch:
            answer(self._epoch_error(request.current_leader_epoch))
            return
        progress = state.progress(request.replica_id)
        progress.last_fetch_ms = self._now  # alive (the zombie check), though not at any log offset yet
        progress.acknowledged = True
        size = self._snapshots.snapshot_size(request.snapshot_id)
        if size is None:
            answer(ErrorCode.SNAPSHOT_NOT_FOUND)
            return
        if not 0 <= request.position < size:
            answer(ErrorCode.POSITION_OUT_OF_RANGE, size)
            return
        response_max_bytes = min(max(request.max_bytes, 0), self._config.snapshot_fetch_max_bytes)
        [length] = spread_response_bytes([size - request.position], response_max_bytes)
        try:
            data = self._snapshots.read_snapshot(request.snapshot_id, request.position, length)
        except (LookupError, OSError):
            answer(ErrorCode.SNAPSHOT_NOT_FOUND)  # deleted between the two calls: the follower asks again
            return
        answer(ErrorCode.NONE, size, request.position, data)

    def _on_fetch_snapshot_response(self, sender_id: int, response: FetchSnapshotResponse,
                                    request: Message | None) -> None:
        answered = self._answered(sender_id, request, FetchSnapshotRequest)
        if answered is None:
            return
        fetching, request = answered
        assert isinstance(request, FetchSnapshotRequest)
        state = self._after_fetch_answer(fetching, sender_id, response.error, response.leader_id,
                                         response.leader_epoch)
        fetch = self._snapshot_fetch
        if fetch is None or fetch.completing or fetch.snapshot_id != request.snapshot_id:
            return
        if state is None:
            if response.error != ErrorCode.NONE:
                # SNAPSHOT_NOT_FOUND, POSITION_OUT_OF_RANGE, NOT_LEADER_OR_FOLLOWER (KIP-630) and the
                # epoch errors alike: a Fetch finds out what, and from whom, to fetch now.
                self._abandon_snapshot_fetch()
            return
        fetching = state.fetching
        data = response.data
        consistent = (response.snapshot_id == fetch.snapshot_id and response.position == fetch.position
                      and response.size > 0 and fetch.size in (None, response.size)
                      and 0 < len(data) <= response.size - fetch.position)
        if not consistent:
            self._abandon_snapshot_fetch()
            fetching.retry_at_ms = self._now + self._config.retry_backoff_ms
            return
        self._emit(WriteSnapshotChunk(fetch.snapshot_id, fetch.position, bytes(data), response.size))
        fetch.position += len(data)
        fetch.size = response.size
        fetch.completing = fetch.position == fetch.size
        fetching.retry_at_ms = self._now

    def _start_snapshot_fetch(self, snapshot_id: OffsetAndEpoch, state: Follower) -> None:
        """The leader answered a Fetch with SnapshotId: fetching the log pauses, the snapshot is pulled."""
        fetch = self._snapshot_fetch
        if fetch is not None:
            if fetch.completing:
                return  # its outcome comes first
            if fetch.snapshot_id == snapshot_id and (fetch.leader_id, fetch.epoch) == (state.leader_id, state.epoch):
                return
            self._abandon_snapshot_fetch()
        if self._snapshots.snapshot_size(snapshot_id) is not None:
            self._install(snapshot_id)  # already here, complete (fetched before a crash, say)
            return
        self._snapshot_fetch = SnapshotFetch(snapshot_id, state.leader_id, state.epoch)

    def _abandon_snapshot_fetch(self) -> None:
        fetch = self._snapshot_fetch
        if fetch is not None and not fetch.completing:
            self._snapshot_fetch = None
            self._emit(AbandonSnapshotFetch(fetch.snapshot_id))

    def _install(self, snapshot_id: OffsetAndEpoch) -> None:
        """The log restarts at the snapshot (if it was behind it) and the state machine loads it;
        fetching resumes from its end offset and epoch. The log's own cluster id record below the
        snapshot's end no longer counts (quorum/raft/cluster_id.py, rule 3)."""
        self._cluster.installed(snapshot_id, self._log.last_fetched_epoch())
        self._emit(InstallSnapshot(snapshot_id))
        self._log_stale = True
        self._snapshot_seen = (snapshot_id, self._now)
        self._advance_high_watermark(snapshot_id.offset)  # a snapshot holds committed records only
        fetching = self._fetching()
        if fetching is not None:
            fetching.retry_at_ms = self._now

    def _learn_committed_cluster_id(self, cluster_id: str) -> None:
        committed, conflict = self._cluster.from_snapshot(cluster_id)
        if conflict is not None:
            self._die(conflict)
        elif committed is not None:
            self._emit(ClusterIdCommitted(committed))

    def _note_snapshot(self, snapshot_id: OffsetAndEpoch) -> None:
        seen = self._snapshot_seen
        if seen is None or (snapshot_id.offset, snapshot_id.epoch) > (seen[0].offset, seen[0].epoch):
            self._snapshot_seen = (snapshot_id, self._now)  # an older one (overtaken by a fetch) changes nothing
        self._maybe_advance_log_start()

    def _maybe_advance_log_start(self) -> None:
        """KIP-630: the leader moves its log start offset to its latest snapshot once every live
        replica has it (or it has waited the lag time); the others move as far as the leader's,
        never past a snapshot of their own."""
        state = self._state
        if isinstance(state, LeaderState):
            others = [p for v, p in state.voters.items() if v != self._id] + list(state.observers.values())
            seen = self._snapshot_seen[1] if self._snapshot_seen else None
            target = leader_log_start_target(self._log, self._snapshots, others, seen, self._now,
                                             self._config.fetch_timeout_ms, self._config.start_offset_lag_time_max_ms)
        elif self._leader_log_start is not None:
            target = follower_log_start_target(self._log, self._snapshots, self._leader_log_start)
        else:
            return
        if target is not None and target > max(self._log_start_asked, self._log.start_offset):
            self._log_start_asked = target
            self._emit(AdvanceLogStartOffset(target))

    def _log_start_deadline(self) -> int | None:
        """When the leader's latest snapshot will have waited metadata.start.offset.lag.time.max.ms."""
        seen = self._snapshot_seen
        if seen is None or seen[0].offset <= self._log.start_offset:
            return None
        return seen[1] + self._config.start_offset_lag_time_max_ms

    def _update_follower_high_watermark(self, state: Follower) -> None:
        """min(leader's high watermark, what we hold durably): never claim what a crash could lose."""
        if state.leader_high_watermark is not None:
            self._advance_high_watermark(min(state.leader_high_watermark, self._log.flushed_offset))
