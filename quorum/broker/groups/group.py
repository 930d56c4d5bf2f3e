"""One classic consumer group's membership state, as Kafka's GroupMetadata and MemberMetadata keep it.

Plain data plus the rules that only look at the group itself (protocol selection, which state
may follow which). The coordinator decides when things happen; this module only knows what a
group is. Nothing here knows about time except the deadlines the coordinator stores in it.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field, replace
from enum import Enum
from typing import Any


class GroupState(Enum):
    """Kafka's classic group states; `value` is the name DescribeGroups and ListGroups report."""

    EMPTY = "Empty"
    PREPARING_REBALANCE = "PreparingRebalance"
    COMPLETING_REBALANCE = "CompletingRebalance"
    STABLE = "Stable"
    DEAD = "Dead"


_VALID_PREVIOUS = {
    GroupState.EMPTY: {GroupState.PREPARING_REBALANCE},
    GroupState.PREPARING_REBALANCE: {GroupState.STABLE, GroupState.COMPLETING_REBALANCE, GroupState.EMPTY},
    GroupState.COMPLETING_REBALANCE: {GroupState.PREPARING_REBALANCE},
    GroupState.STABLE: {GroupState.COMPLETING_REBALANCE},
    GroupState.DEAD: set(GroupState),
}
"""Kafka's GroupState.validPreviousStates: a transition outside them is a coordinator bug."""


@dataclass(slots=True)
class Member:
    """A member of a classic group. `join_handle`/`sync_handle` are the requests it is waiting on."""

    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    rebalance_timeout_ms: int
    session_timeout_ms: int
    protocol_type: str
    protocols: tuple[tuple[str, bytes], ...]
    assignment: bytes = b""
    heartbeat_deadline_ms: int = 0
    join_handle: Any = None
    sync_handle: Any = None
    is_new: bool = False

    @property
    def awaiting_join(self) -> bool:
        return self.join_handle is not None

    @property
    def awaiting_sync(self) -> bool:
        return self.sync_handle is not None

    def metadata(self, protocol: str) -> bytes:
        for name, metadata in self.protocols:
            if name == protocol:
                return metadata
        raise KeyError(f"member {self.member_id} does not support protocol {protocol}")

    def matches(self, protocols: tuple[tuple[str, bytes], ...]) -> bool:
        """Same protocols, same order, same metadata: a rejoin that changes nothing (Kafka's `matches`)."""
        return self.protocols == protocols


@dataclass(slots=True)
class Group:
    """A classic group: its state, generation, members and the rebalance in progress, if any."""

    group_id: str
    state: GroupState = GroupState.EMPTY
    generation: int = 0
    protocol_type: str | None = None
    protocol: str | None = None
    leader: str | None = None
    members: dict[str, Member] = field(default_factory=dict)
    pending_members: dict[str, int] = field(default_factory=dict)
    """Member ids handed out with MEMBER_ID_REQUIRED, not yet joined: id -> deadline (ms)."""
    static_members: dict[str, str] = field(default_factory=dict)
    """group.instance.id -> the member id that currently holds it."""
    state_timestamp_ms: int = -1
    rebalance_deadline_ms: int | None = None
    initial_delay_remaining_ms: int = 0
    """While in the initial rebalance delay: how much of the rebalance timeout is left to extend into."""
    in_initial_delay: bool = False
    new_member_added: bool = False

    def transition(self, state: GroupState, now_ms: int) -> None:
        if self.state not in _VALID_PREVIOUS[state]:
            raise AssertionError(f"group {self.group_id}: {self.state.value} cannot become {state.value}")
        self.state = state
        self.state_timestamp_ms = now_ms

    def is_empty(self) -> bool:
        return not self.members and not self.pending_members

    def add(self, member: Member) -> None:
        if not self.members:
            self.protocol_type = member.protocol_type
        if self.leader is None:
            self.leader = member.member_id
        self.members[member.member_id] = member
        if member.group_instance_id is not None:
            self.static_members[member.group_instance_id] = member.member_id

    def remove(self, member_id: str) -> Member | None:
        member = self.members.pop(member_id, None)
        if member is None:
            return None
        if member.group_instance_id is not None and self.static_members.get(member.group_instance_id) == member_id:
            del self.static_members[member.group_instance_id]
        if self.leader == member_id:
            self.leader = next(iter(self.members), None)
        return member

    def supports(self, protocol_type: str, protocols: tuple[tuple[str, bytes], ...]) -> bool:
        """Kafka's supportsProtocols: an empty group takes anything non-empty; else the type must match
        and at least one of the offered protocols must be supported by every member."""
        if not protocol_type or not protocols:
            return False
        if not self.members:
            return True
        if protocol_type != self.protocol_type:
            return False
        return bool({name for name, _ in protocols} & self.candidate_protocols())

    def candidate_protocols(self) -> set[str]:
        """Protocols every member supports."""
        sets = [{name for name, _ in m.protocols} for m in self.members.values()]
        return set.intersection(*sets) if sets else set()

    def select_protocol(self) -> str:
        """Kafka's selectProtocol: each member votes for its most preferred candidate; most votes wins.

        Ties go to the protocol that comes first in a member's preference order, which is what
        Kafka's `maxBy` over the vote counts yields in practice for a common member list.
        """
        candidates = self.candidate_protocols()
        if not candidates:
            raise AssertionError(f"group {self.group_id} has no protocol common to all members")
        votes: Counter[str] = Counter()
        order: dict[str, int] = {}
        for member in self.members.values():
            choice = next(name for name, _ in member.protocols if name in candidates)
            votes[choice] += 1
            order.setdefault(choice, len(order))
        return max(votes, key=lambda name: (votes[name], -order[name]))

    def all_members_joined(self) -> bool:
        return not self.pending_members and all(m.awaiting_join for m in self.members.values())

    def current_member_for_instance(self, instance_id: str) -> str | None:
        return self.static_members.get(instance_id)

    def replace_static_member(self, instance_id: str, old_id: str, new_id: str) -> tuple[Member, Member]:
        """Kafka's replaceStaticMember: the member of `instance_id` goes on under `new_id`, with
        everything else it had (protocols, timeouts, assignment; the leadership if it led), and
        `old_id` is no longer a member. Returns (the old member, the new one); the caller answers
        whatever the old one still waits for."""
        old = self.members.pop(old_id)
        new = replace(old, member_id=new_id, join_handle=None, sync_handle=None, is_new=False)
        self.members[new_id] = new
        self.static_members[instance_id] = new_id
        if self.leader == old_id:
            self.leader = new_id
        return old, new
