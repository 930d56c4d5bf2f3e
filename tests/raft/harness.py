"""Helpers to feed a RaftCore events by hand: a core over a MemoryLog, and action filters.

`Node` carries out the log actions (append, truncate) and keeps what was persisted, the way a
driver would, but sends nothing anywhere: each test delivers exactly the messages it means to.
"""

from __future__ import annotations

import random
from collections.abc import Iterable, Sequence
from typing import TypeVar

from quorum.raft.core import RaftCore
from quorum.raft.interface import (
    AbandonSnapshotFetch,
    Action,
    AdvanceLogStartOffset,
    AppendBatches,
    InstallSnapshot,
    Message,
    OffsetAndEpoch,
    PersistState,
    QuorumConfig,
    Reply,
    Send,
    Truncate,
    VoteRequest,
    VoteResponse,
    WriteSnapshotChunk,
)
from quorum.raft.state import Candidate, Role
from quorum.sim.memory_log import MemoryLog
from quorum.wire.records import Record, build_batch

VOTERS = (1, 2, 3)
T = TypeVar("T")


def log_with(epochs: Sequence[int], flushed: bool = True) -> MemoryLog:
    """A log with one single-record batch per entry of `epochs` (the batch's leader epoch)."""
    log = MemoryLog()
    for offset, epoch in enumerate(epochs):
        log.append(build_batch([Record(offset, 1000 + offset, None, b"v%d" % offset, [])], base_offset=offset,
                               partition_leader_epoch=epoch))
    if flushed:
        log.flush()
    return log


def batch(offset: int, epoch: int, count: int = 1) -> bytes:
    return build_batch([Record(offset + i, 5000, None, b"x", []) for i in range(count)], base_offset=offset,
                       partition_leader_epoch=epoch)


def of_type(actions: Iterable[Action], kind: type[T]) -> list[T]:
    return [a for a in actions if isinstance(a, kind)]


def sent(actions: Iterable[Action], kind: type | None = None) -> list[Send]:
    return [a for a in of_type(actions, Send) if kind is None or isinstance(a.message, kind)]


def replied(actions: Iterable[Action], kind: type | None = None) -> list[Message]:
    return [a.message for a in of_type(actions, Reply) if kind is None or isinstance(a.message, kind)]


class MemorySnapshots:
    """Complete snapshots as bytes by id, and the ones being fetched: a SnapshotStore for tests."""

    def __init__(self, snapshots: dict[OffsetAndEpoch, bytes] | None = None) -> None:
        self.complete: dict[OffsetAndEpoch, bytes] = dict(snapshots or {})
        self.partial: dict[OffsetAndEpoch, bytearray] = {}

    def snapshot_ids(self) -> tuple[OffsetAndEpoch, ...]:
        return tuple(sorted(self.complete, key=lambda s: (s.offset, s.epoch)))

    def earliest_snapshot(self) -> OffsetAndEpoch | None:
        return min(self.complete, key=lambda s: (s.offset, s.epoch), default=None)

    def latest_snapshot(self) -> OffsetAndEpoch | None:
        return max(self.complete, key=lambda s: (s.offset, s.epoch), default=None)

    def snapshot_size(self, snapshot_id: OffsetAndEpoch) -> int | None:
        data = self.complete.get(snapshot_id)
        return None if data is None else len(data)

    def read_snapshot(self, snapshot_id: OffsetAndEpoch, position: int, max_bytes: int) -> bytes:
        return self.complete[snapshot_id][position:position + max_bytes]

    def write(self, chunk: WriteSnapshotChunk) -> bool:
        """Keep a chunk; True when it completes the snapshot (which becomes complete here)."""
        part = self.partial.setdefault(chunk.snapshot_id, bytearray())
        assert len(part) == chunk.position
        part += chunk.data
        if len(part) < chunk.size:
            return False
        self.complete[chunk.snapshot_id] = bytes(self.partial.pop(chunk.snapshot_id))
        return True


class Node:
    """A core plus its log; applies log actions and remembers quorum-state, like a driver."""

    def __init__(self, node_id: int = 1, voters: Sequence[int] = VOTERS, log: MemoryLog | None = None,
                 persisted: PersistState | None = None, cluster_id: str | None = None, seed: int = 0,
                 now: int = 0, snapshots: MemorySnapshots | None = None, **config: int) -> None:
        self.log = log if log is not None else MemoryLog()
        self.config = QuorumConfig(node_id=node_id, voters=tuple(voters), **config)
        self.persisted = persisted
        self.snapshots = snapshots if snapshots is not None else MemorySnapshots()
        self.completed: list[OffsetAndEpoch] = []  # fetched snapshots whose last chunk was written
        self.core = RaftCore(self.config, self.log, persisted, cluster_id, random.Random(seed), now, self.snapshots)
        self.now = now
        self.request_id = 0

    @property
    def id(self) -> int:
        return self.config.node_id

    def apply(self, actions: list[Action]) -> list[Action]:
        for action in actions:
            if isinstance(action, AppendBatches):
                self.log.append(action.batches)
            elif isinstance(action, Truncate):
                self.log.truncate(action.offset)
            elif isinstance(action, PersistState):
                self.persisted = action
            elif isinstance(action, WriteSnapshotChunk):
                if self.snapshots.write(action):
                    self.completed.append(action.snapshot_id)
            elif isinstance(action, AbandonSnapshotFetch):
                self.snapshots.partial.pop(action.snapshot_id, None)
            elif isinstance(action, InstallSnapshot):
                self.log.set_snapshot_boundary(action.snapshot_id)
            elif isinstance(action, AdvanceLogStartOffset):
                self.log.advance_start_offset(action.offset)
                for old in [s for s in self.snapshots.complete if s.offset < action.offset]:
                    del self.snapshots.complete[old]
        return actions

    def at(self, now: int) -> int:
        self.now = max(self.now, now)
        return self.now

    def start(self) -> list[Action]:
        return self.apply(self.core.start(self.now))

    def tick(self, now: int) -> list[Action]:
        return self.apply(self.core.tick(self.at(now)))

    def request(self, sender: int, message: Message, now: int | None = None) -> list[Action]:
        self.request_id += 1
        return self.apply(self.core.on_request(self.request_id, sender, message, self.at(now or self.now)))

    def response(self, sender: int, message: Message, request: Message, now: int | None = None) -> list[Action]:
        return self.apply(self.core.on_response(sender, message, self.at(now or self.now), request))

    def flush(self, now: int | None = None) -> list[Action]:
        self.log.flush()
        return self.apply(self.core.on_flushed(self.log.flushed_offset, self.at(now or self.now)))

    def propose(self, *values: bytes, now: int | None = None) -> tuple[int | None, list[Action]]:
        base, actions = self.core.propose(list(values), self.at(now or self.now))
        return base, self.apply(actions)

    def run_until_campaign(self, limit: int = 10_000) -> list[Action]:
        """Tick until the core sends vote requests (pre-votes or votes); returns those actions."""
        for now in range(self.now, self.now + limit, 10):
            actions = self.tick(now)
            if sent(actions, VoteRequest):
                return actions
        raise AssertionError("no campaign started")


def grant(node: Node, actions: list[Action], voters: Iterable[int] | None = None) -> list[Action]:
    """Answer the vote requests in `actions` with grants from `voters` (default: all of them)."""
    out: list[Action] = []
    for send in sent(actions, VoteRequest):
        if voters is not None and send.destination not in voters:
            continue
        request = send.message
        out += node.response(send.destination, VoteResponse(0, -1, request.candidate_epoch if not request.pre_vote
                                                            else node.core.epoch, True, request.pre_vote), request)
    return out


def elect(node: Node) -> list[Action]:
    """Make `node` leader: election timeout, pre-vote granted by all, vote granted by all."""
    if node.core.role is not Role.LEADER:
        actions = node.run_until_campaign()
        if node.core.role is Role.PROSPECTIVE:
            actions = grant(node, actions)
        actions = grant(node, actions)
        assert node.core.role is Role.LEADER, node.core.role
        return actions
    return []


def backing_off(node: Node) -> bool:
    """The node lost its vote round and waits out the backoff, still a candidate of its epoch
    (a late grant can still make it leader), before it pre-votes again."""
    state = node.core._state
    return isinstance(state, Candidate) and state.backoff_until_ms is not None
