"""A KIP-848 consumer group member and how it moves toward its target assignment (Kafka's
ConsumerGroupMember and CurrentAssignmentBuilder).

A member owns `assigned` partitions at `member_epoch`. When the group's target assignment (at the
target epoch) takes partitions away from it, the member first goes to UNREVOKED_PARTITIONS: its
epoch stays, the partitions to give up are `pending_revocation` (still counted as its own), and its
heartbeat answers omit them. Only once a heartbeat shows it no longer owns them does it move on to
the target epoch. Partitions the target gives it that another member still holds (their partition
epoch is set) are withheld: the member is UNRELEASED_PARTITIONS until their owner lets go. This is
what makes the protocol incremental and what guarantees that no partition has two owners.
"""

from __future__ import annotations

import enum
import functools
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass, replace

from quorum.broker.groups.consumer.assignors import Partitions, TopicPartition


class MemberState(enum.Enum):
    STABLE = "stable"
    UNREVOKED_PARTITIONS = "unrevoked_partitions"
    UNRELEASED_PARTITIONS = "unreleased_partitions"
    UNKNOWN = "unknown"


class FencedMemberError(Exception):
    """The member's view cannot be reconciled (FENCED_MEMBER_EPOCH): it must drop its partitions and rejoin."""


@dataclass(frozen=True, slots=True)
class ConsumerMember:
    member_id: str
    member_epoch: int = 0
    previous_member_epoch: int = -1
    state: MemberState = MemberState.STABLE
    instance_id: str | None = None
    rack_id: str | None = None
    client_id: str = ""
    client_host: str = ""
    rebalance_timeout_ms: int = -1
    subscribed_topic_names: tuple[str, ...] = ()
    subscribed_topic_regex: str = ""
    """KIP-848's SubscribedTopicRegex ("" for none): topics whose whole name matches are subscribed too."""
    server_assignor: str | None = None
    assigned: Partitions = frozenset()
    pending_revocation: Partitions = frozenset()

    def topics(self, names: Iterable[str]) -> frozenset[str]:
        """The member's subscribed topics among `names` (the broker's topics): named ones and regex matches."""
        names = set(names)
        subscribed = names.intersection(self.subscribed_topic_names)
        if self.subscribed_topic_regex:
            pattern = compiled(self.subscribed_topic_regex)
            subscribed.update(name for name in names if pattern.fullmatch(name))
        return frozenset(subscribed)

    def is_reconciled_to(self, target_epoch: int) -> bool:
        return self.state is MemberState.STABLE and self.member_epoch == target_epoch

    def with_epoch(self, epoch: int, **changes: object) -> ConsumerMember:
        """Kafka's Builder.updateMemberEpoch: the old epoch becomes the previous one."""
        return replace(self, member_epoch=epoch, previous_member_epoch=self.member_epoch, **changes)  # type: ignore[arg-type]


@functools.lru_cache(maxsize=256)
def compiled(regex: str) -> re.Pattern[str]:
    """A subscription regex, compiled once (Kafka uses RE2/J; Python's syntax agrees on the common subset)."""
    return re.compile(regex)


PartitionEpoch = Callable[[TopicPartition], int]
"""The epoch at which a partition is owned now (by any member), -1 when free."""


def reconcile(
    member: ConsumerMember,
    target_epoch: int,
    target: Partitions,
    partition_epoch: PartitionEpoch,
    owned: Partitions | None,
) -> ConsumerMember:
    """Kafka's CurrentAssignmentBuilder.build: the member's next state given the target assignment.

    `owned` is what the member's heartbeat says it owns (None when the heartbeat did not say)."""
    if member.state is MemberState.STABLE:
        if member.member_epoch != target_epoch:
            return _next(member, member.member_epoch, target_epoch, target, partition_epoch, owned)
        return member
    if member.state is MemberState.UNREVOKED_PARTITIONS:
        if _owns_any(owned, member.pending_revocation):
            return member
        return _next(member, member.member_epoch + 1, target_epoch, target, partition_epoch, owned)
    if member.state is MemberState.UNRELEASED_PARTITIONS:
        return _next(member, member.member_epoch, target_epoch, target, partition_epoch, owned)
    if owned is None or owned:
        raise FencedMemberError("the member is in an unknown state: it must drop its partitions and rejoin")
    return _next(member, target_epoch, target_epoch, target, partition_epoch, owned)


def _owns_any(owned: Partitions | None, partitions: Partitions) -> bool:
    """Kafka's ownsRevokedPartitions: without an owned list the member is assumed to still own them."""
    return owned is None or not owned.isdisjoint(partitions)


def _next(
    member: ConsumerMember,
    epoch: int,
    target_epoch: int,
    target: Partitions,
    partition_epoch: PartitionEpoch,
    owned: Partitions | None,
) -> ConsumerMember:
    """Kafka's computeNextAssignment."""
    kept = member.assigned & target
    revoke = member.assigned - kept
    pending = target - kept
    unreleased = frozenset(tp for tp in pending if partition_epoch(tp) != -1)
    pending -= unreleased
    if revoke and _owns_any(owned, revoke):
        return member.with_epoch(
            epoch, state=MemberState.UNREVOKED_PARTITIONS, assigned=kept, pending_revocation=revoke
        )
    state = MemberState.UNRELEASED_PARTITIONS if unreleased else MemberState.STABLE
    return member.with_epoch(target_epoch, state=state, assigned=kept | pending, pending_revocation=frozenset())
