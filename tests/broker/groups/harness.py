"""A hand-driven group coordinator for unit tests: a fake log that makes appends durable on request,
handles that are plain counters, and helpers for the common join/sync dance."""

from __future__ import annotations

import itertools
from typing import Any

from quorum.broker.groups.config import GroupConfig
from quorum.broker.groups.coordinator import GroupCoordinator
from quorum.broker.groups.events import (
    Append,
    JoinAnswer,
    JoinGroup,
    Output,
    SyncAnswer,
    SyncGroup,
)

GROUP = "group-a"
SESSION_MS = 10_000
REBALANCE_MS = 30_000
PROTOCOLS = (("range", b"range-meta"), ("roundrobin", b"rr-meta"))


class Harness:
    def __init__(self, config: GroupConfig | None = None, now_ms: int = 1_000_000) -> None:
        ids = itertools.count(1)
        self.core = GroupCoordinator(config or GroupConfig(group_initial_rebalance_delay_ms=0),
                                     new_member_id=lambda prefix: f"{prefix or 'member'}-{next(ids)}")
        self.now = now_ms
        self.handles = itertools.count(1)
        self.answers: dict[int, Any] = {}
        self.pending_appends: list[Append] = []
        self.log: dict[int, list[tuple[bytes, bytes | None]]] = {}
        self.load_all()

    def load_all(self) -> None:
        for partition in range(self.core.config.offsets_topic_num_partitions):
            self.core.begin_loading(partition)
            self.core.replay(partition, self.log.get(partition, []))
            self.core.finish_loading(partition, self.now)

    def take(self, output: Output) -> Output:
        for handle, answer in output.answers:
            assert handle not in self.answers, f"handle {handle} answered twice"
            self.answers[handle] = answer
        self.pending_appends.extend(output.appends)
        return output

    def send(self, command: str, request: Any) -> int:
        """Call core.<command> with a fresh handle; the answer (if any yet) lands in self.answers."""
        handle = next(self.handles)
        self.take(getattr(self.core, command)(handle, request, self.now))
        return handle

    def flush(self) -> None:
        """Make every pending append durable, in order (as the log does)."""
        while self.pending_appends:
            append = self.pending_appends.pop(0)
            self.log.setdefault(append.partition, []).extend(append.records)
            self.take(self.core.append_done(append.token, self.now))

    def advance(self, ms: int) -> None:
        self.now += ms
        self.take(self.core.tick(self.now))

    def join(self, member_id: str = "", group: str = GROUP, protocols=PROTOCOLS, **kwargs: Any) -> int:
        request = JoinGroup(group, member_id, kwargs.pop("session_timeout_ms", SESSION_MS),
                            kwargs.pop("rebalance_timeout_ms", REBALANCE_MS), kwargs.pop("protocol_type", "consumer"),
                            protocols, **kwargs)
        return self.send("join_group", request)

    def join_new(self, group: str = GROUP, **kwargs: Any) -> str:
        """A dynamic member's two-step join (MEMBER_ID_REQUIRED, then join with the id): its member id."""
        first = self.answers[self.join(group=group, **kwargs)]
        assert isinstance(first, JoinAnswer) and first.error == 79, first
        return first.member_id

    def sync(self, member_id: str, generation: int, assignments: dict[str, bytes] | None = None,
             group: str = GROUP) -> int:
        return self.send("sync_group", SyncGroup(group, generation, member_id, tuple((assignments or {}).items())))

    def answer(self, handle: int) -> Any:
        return self.answers.get(handle)

    def stable_group(self, count: int) -> tuple[list[str], int]:
        """`count` members joined one after another (each newcomer first, then the others rejoin, as
        their heartbeats tell them to) and synced: (member ids in join order, generation)."""
        members: list[str] = []
        joins: dict[str, int] = {}
        for _ in range(count):
            newcomer = self.join_new()
            joins = {newcomer: self.join(newcomer)}
            joins.update({m: self.join(m) for m in members})
            members.append(newcomer)
        group = self.core.group(GROUP)
        assert group is not None
        answers = [self.answer(joins[m]) for m in members]
        assert all(isinstance(a, JoinAnswer) and a.error == 0 and a.generation == group.generation
                   for a in answers), answers
        assignments = {m: f"assignment-{m}".encode() for m in members}
        syncs = [self.sync(m, group.generation, assignments if m == group.leader else None) for m in members]
        self.flush()
        assert all(isinstance(self.answer(h), SyncAnswer) and self.answer(h).error == 0 for h in syncs)
        return members, group.generation
