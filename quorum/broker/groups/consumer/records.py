"""A consumer group as Kafka 4 writes it to `__consumer_offsets`, and back.

`image` takes what the records hold of a group; `records` turns the difference between two images
into the records Kafka writes for it (member subscriptions, the subscribed topics' metadata, the
group epoch, the target assignment and its epoch, each member's current assignment, and tombstones
for members that left or a group that went away). `GroupLoader` replays them, in log order, into the
group they describe, so that a coordinator that loads the partition resumes every group where the
last one left it: same epochs, members, targets and owners; only session timers start afresh.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace

from quorum.broker.groups.consumer.assignors import Partitions, TopicInfo
from quorum.broker.groups.consumer.group import ConsumerGroup
from quorum.broker.groups.consumer.member import ConsumerMember, MemberState
from quorum.wire.consumer_group_records import (
    CURRENT_MEMBER_ASSIGNMENT,
    GROUP_EPOCH,
    MEMBER_METADATA,
    SUBSCRIPTION_METADATA,
    TARGET_ASSIGNMENT_EPOCH,
    TARGET_ASSIGNMENT_MEMBER,
    ConsumerGroupKey,
    ConsumerGroupValue,
    CurrentAssignmentValue,
    GroupEpochValue,
    MemberMetadataValue,
    SubscriptionMetadataValue,
    TargetAssignmentEpochValue,
    TargetAssignmentMemberValue,
)
from quorum.wire.consumer_offsets import encode_record

Record = tuple[bytes, bytes | None]
STATE_BYTES = {
    MemberState.STABLE: 0,
    MemberState.UNREVOKED_PARTITIONS: 1,
    MemberState.UNRELEASED_PARTITIONS: 2,
    MemberState.UNKNOWN: 127,
}
"""Kafka's MemberState values on disk."""
_STATES = {byte: state for state, byte in STATE_BYTES.items()}


@dataclass(frozen=True, slots=True)
class GroupImage:
    """What the records hold of a group, at one moment."""

    group_epoch: int = 0
    assignment_epoch: int = 0
    subscription_metadata: tuple[tuple[str, TopicInfo], ...] = ()
    members: Mapping[str, ConsumerMember] = field(default_factory=dict)
    target: Mapping[str, Partitions] = field(default_factory=dict)


def image(group: ConsumerGroup) -> GroupImage:
    return GroupImage(
        group.group_epoch,
        group.assignment_epoch,
        tuple(sorted(group.subscription_metadata.items())),
        dict(group.members),
        dict(group.target),
    )


def _metadata(member: ConsumerMember) -> MemberMetadataValue:
    return MemberMetadataValue(
        member.instance_id,
        member.rack_id,
        member.client_id,
        member.client_host,
        member.subscribed_topic_names,
        member.subscribed_topic_regex or None,
        member.rebalance_timeout_ms,
        member.server_assignor,
    )


def _assignment(member: ConsumerMember) -> CurrentAssignmentValue:
    return CurrentAssignmentValue(
        member.member_epoch,
        member.previous_member_epoch,
        STATE_BYTES[member.state],
        member.assigned,
        member.pending_revocation,
    )


def records(group_id: str, before: GroupImage, after: GroupImage | None) -> list[Record]:
    """The records that take the log from `before` to `after` (None: the group is deleted)."""
    out: list[tuple[ConsumerGroupKey, ConsumerGroupValue | None]] = []

    def put(kind: int, value: ConsumerGroupValue | None, member_id: str | None = None) -> None:
        out.append((ConsumerGroupKey(kind, group_id, member_id), value))

    now = after or GroupImage()
    for member_id in before.members.keys() - now.members.keys():
        put(CURRENT_MEMBER_ASSIGNMENT, None, member_id)
        put(TARGET_ASSIGNMENT_MEMBER, None, member_id)
        put(MEMBER_METADATA, None, member_id)
    for member_id, member in now.members.items():
        old = before.members.get(member_id)
        if old is None or _metadata(old) != _metadata(member):
            put(MEMBER_METADATA, _metadata(member), member_id)
    if after is None:
        put(SUBSCRIPTION_METADATA, None)
        put(TARGET_ASSIGNMENT_EPOCH, None)
        put(GROUP_EPOCH, None)
        return [encode_record(key, value) for key, value in out]
    if now.subscription_metadata != before.subscription_metadata:
        put(
            SUBSCRIPTION_METADATA,
            SubscriptionMetadataValue(
                tuple((name, info.topic_id, info.partitions) for name, info in now.subscription_metadata)
            ),
        )
    if now.group_epoch != before.group_epoch:
        put(GROUP_EPOCH, GroupEpochValue(now.group_epoch))
    for member_id in now.members:
        target = now.target.get(member_id)
        if target is not None and target != before.target.get(member_id):
            put(TARGET_ASSIGNMENT_MEMBER, TargetAssignmentMemberValue(target), member_id)
    if now.assignment_epoch != before.assignment_epoch:
        put(TARGET_ASSIGNMENT_EPOCH, TargetAssignmentEpochValue(now.assignment_epoch))
    for member_id, member in now.members.items():
        old = before.members.get(member_id)
        if old is None or _assignment(old) != _assignment(member):
            put(CURRENT_MEMBER_ASSIGNMENT, _assignment(member), member_id)
    return [encode_record(key, value) for key, value in out]


@dataclass(slots=True)
class _Loaded:
    epoch: int | None = None
    assignment_epoch: int = 0
    subscription: SubscriptionMetadataValue | None = None
    metadata: dict[str, MemberMetadataValue] = field(default_factory=dict)
    targets: dict[str, Partitions] = field(default_factory=dict)
    current: dict[str, CurrentAssignmentValue] = field(default_factory=dict)


class GroupLoader:
    """Consumer groups rebuilt from their records, replayed in log order (the last value of a key wins)."""

    def __init__(self) -> None:
        self._groups: dict[str, _Loaded] = {}

    def replay(self, key: ConsumerGroupKey, value: ConsumerGroupValue | None) -> None:
        loaded = self._groups.setdefault(key.group, _Loaded())
        member_id = key.member_id or ""
        if key.kind == GROUP_EPOCH:
            loaded.epoch = value.epoch if isinstance(value, GroupEpochValue) else None
        elif key.kind == SUBSCRIPTION_METADATA:
            loaded.subscription = value if isinstance(value, SubscriptionMetadataValue) else None
        elif key.kind == TARGET_ASSIGNMENT_EPOCH:
            loaded.assignment_epoch = value.assignment_epoch if isinstance(value, TargetAssignmentEpochValue) else 0
        elif key.kind == MEMBER_METADATA:
            _put(loaded.metadata, member_id, value if isinstance(value, MemberMetadataValue) else None)
        elif key.kind == TARGET_ASSIGNMENT_MEMBER:
            _put(
                loaded.targets, member_id, value.partitions if isinstance(value, TargetAssignmentMemberValue) else None
            )
        elif key.kind == CURRENT_MEMBER_ASSIGNMENT:
            _put(loaded.current, member_id, value if isinstance(value, CurrentAssignmentValue) else None)

    def groups(self) -> dict[str, ConsumerGroup]:
        """The groups whose epoch record stands (a deleted group's epoch is a tombstone)."""
        built = {}
        for group_id, loaded in self._groups.items():
            if loaded.epoch is None:
                continue
            group = ConsumerGroup(group_id, loaded.epoch, loaded.assignment_epoch)
            if loaded.subscription is not None:
                group.subscription_metadata = {
                    name: TopicInfo(topic_id, count) for name, topic_id, count in loaded.subscription.topics
                }
            for member_id, meta in loaded.metadata.items():
                current = loaded.current.get(member_id)
                member = ConsumerMember(
                    member_id,
                    instance_id=meta.instance_id,
                    rack_id=meta.rack_id,
                    client_id=meta.client_id,
                    client_host=meta.client_host,
                    rebalance_timeout_ms=meta.rebalance_timeout_ms,
                    subscribed_topic_names=meta.subscribed_topic_names,
                    subscribed_topic_regex=meta.subscribed_topic_regex or "",
                    server_assignor=meta.server_assignor,
                )
                if current is not None:
                    member = replace(
                        member,
                        member_epoch=current.member_epoch,
                        previous_member_epoch=current.previous_member_epoch,
                        state=_STATES.get(current.state, MemberState.UNKNOWN),
                        assigned=current.assigned,
                        pending_revocation=current.pending_revocation,
                    )
                group.put_member(member)
            group.target = {m: p for m, p in loaded.targets.items() if m in group.members}
            built[group_id] = group
        return built


def _put(table: dict, member_id: str, value: object) -> None:
    if value is None:
        table.pop(member_id, None)
    else:
        table[member_id] = value
