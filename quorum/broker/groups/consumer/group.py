"""A KIP-848 consumer group's state: members, the group epoch, the target assignment and who owns
which partition at which epoch (Kafka's ConsumerGroup, without its records).

The group epoch goes up whenever what the assignment depends on changes (a member joins or leaves,
a subscription changes, a subscribed topic gains partitions); the target assignment is computed
again when the group epoch is ahead of it (its epoch is the `assignment_epoch`). `owners` holds every
partition a member owns or has yet to revoke, with that member's epoch: a partition is handed to
a new owner only once it is free in `owners`.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from quorum.broker.groups.consumer.assignors import (
    ASSIGNORS,
    AssignmentSpec,
    Partitions,
    TopicInfo,
    TopicPartition,
)
from quorum.broker.groups.consumer.member import ConsumerMember


class ConsumerGroupState(enum.Enum):
    """Kafka's ConsumerGroupState, with its names as DescribeGroups and ListGroups report them."""

    EMPTY = "Empty"
    ASSIGNING = "Assigning"
    RECONCILING = "Reconciling"
    STABLE = "Stable"
    DEAD = "Dead"


class OwnershipError(AssertionError):
    """A partition would get a second owner: a bug in the coordinator, never a client's doing."""


@dataclass(slots=True)
class ConsumerGroup:
    group_id: str
    group_epoch: int = 0
    assignment_epoch: int = 0
    members: dict[str, ConsumerMember] = field(default_factory=dict)
    target: dict[str, Partitions] = field(default_factory=dict)
    owners: dict[TopicPartition, tuple[str, int]] = field(default_factory=dict)
    """Partition -> (member id, member epoch) of its owner, including partitions pending revocation."""
    subscription_metadata: dict[str, TopicInfo] = field(default_factory=dict)
    """The subscribed topics as the target assignment last saw them."""
    session_deadlines: dict[str, int] = field(default_factory=dict)
    revocation_deadlines: dict[str, tuple[int, int]] = field(default_factory=dict)
    """Member id -> (deadline, epoch): a member still revoking at that epoch by then is fenced."""
    dead: bool = False

    @property
    def state(self) -> ConsumerGroupState:
        """Kafka's ConsumerGroup.maybeUpdateGroupState."""
        if self.dead:
            return ConsumerGroupState.DEAD
        if not self.members:
            return ConsumerGroupState.EMPTY
        if self.group_epoch > self.assignment_epoch:
            return ConsumerGroupState.ASSIGNING
        if any(not m.is_reconciled_to(self.assignment_epoch) for m in self.members.values()):
            return ConsumerGroupState.RECONCILING
        return ConsumerGroupState.STABLE

    def partition_epoch(self, tp: TopicPartition) -> int:
        owner = self.owners.get(tp)
        return -1 if owner is None else owner[1]

    def put_member(self, member: ConsumerMember) -> None:
        """Store the member's new state and move its partitions' owner epochs with it."""
        old = self.members.get(member.member_id)
        if old is not None:
            for tp in old.assigned | old.pending_revocation:
                self.owners.pop(tp, None)
        for tp in member.assigned | member.pending_revocation:
            holder = self.owners.get(tp)
            if holder is not None and holder[0] != member.member_id:
                raise OwnershipError(
                    f"group {self.group_id}: {tp} is owned by {holder[0]} at epoch {holder[1]}, "
                    f"and {member.member_id} would take it at epoch {member.member_epoch}"
                )
            self.owners[tp] = (member.member_id, member.member_epoch)
        self.members[member.member_id] = member

    def remove_member(self, member_id: str) -> ConsumerMember | None:
        """Drop a member (it left, or was fenced): its partitions are free and the group epoch goes up."""
        member = self.members.pop(member_id, None)
        if member is None:
            return None
        for tp in member.assigned | member.pending_revocation:
            if self.owners.get(tp, (None,))[0] == member_id:
                del self.owners[tp]
        self.target.pop(member_id, None)
        self.session_deadlines.pop(member_id, None)
        self.revocation_deadlines.pop(member_id, None)
        self.group_epoch += 1
        return member

    def static_member(self, instance_id: str) -> ConsumerMember | None:
        """The member holding a static member's instance id (KIP-345), if any."""
        return next((m for m in self.members.values() if m.instance_id == instance_id), None)

    def replace_member(self, old_id: str, member: ConsumerMember) -> None:
        """A static member rejoined under a new member id: it takes the old one's place, target and
        partitions, and the group epoch stays (Kafka's replaceMember)."""
        old = self.members.pop(old_id)
        for tp in old.assigned | old.pending_revocation:
            self.owners.pop(tp, None)
        target = self.target.pop(old_id, None)
        if target is not None:
            self.target[member.member_id] = target
        self.session_deadlines.pop(old_id, None)
        self.revocation_deadlines.pop(old_id, None)
        self.put_member(member)

    def subscribed_topics(self, names: Iterable[str]) -> frozenset[str]:
        """The topics among `names` that some member subscribes to, by name or regex."""
        names = tuple(names)
        return frozenset().union(*(m.topics(names) for m in self.members.values()))

    def choose_assignor(self, offered: tuple[str, ...]) -> str:
        """Kafka's defaultAssignor choice: the assignor most members ask for (ties to the earlier
        offered one), else the first offered (`group.consumer.assignors`)."""
        wanted = [m.server_assignor for m in self.members.values() if m.server_assignor in offered]
        if not wanted:
            return offered[0]
        return max(offered, key=lambda name: (wanted.count(name), -offered.index(name)))

    def compute_target(self, offered: tuple[str, ...], topics: Mapping[str, TopicInfo]) -> None:
        """A new target assignment at the group epoch, from the members' subscriptions and `topics`."""
        names = tuple(topics)
        specs = {
            member_id: AssignmentSpec(m.topics(names), self.target.get(member_id, frozenset()))
            for member_id, m in self.members.items()
        }
        assignor = ASSIGNORS[self.choose_assignor(offered)]
        self.target = assignor(specs, topics)
        self.assignment_epoch = self.group_epoch
