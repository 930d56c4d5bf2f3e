"""Kafka 4's KIP-848 records in `__consumer_offsets` (key versions 3 to 8), as Apache Kafka writes them.

A consumer group is six kinds of record, each keyed by the group (and member): its epoch (3), the
subscribed topics' metadata (4), each member's subscription (5), the target assignment's epoch (6)
and each member's target (7), and each member's current assignment with its epochs and state (8).
A null value deletes the key. `consumer_offsets` reads the key version and hands these versions here,
so that there is one codec for the whole log; the payload coding is the schema engine's.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from typing import Any

from kafka.protocol.api_data import ApiData

from quorum.wire.metadata_records import decode_payload, encode_payload
from quorum.wire.schema import define_data

GROUP_EPOCH, SUBSCRIPTION_METADATA, MEMBER_METADATA = 3, 4, 5
TARGET_ASSIGNMENT_EPOCH, TARGET_ASSIGNMENT_MEMBER, CURRENT_MEMBER_ASSIGNMENT = 6, 7, 8
_NAMES = {
    GROUP_EPOCH: "ConsumerGroupMetadata",
    SUBSCRIPTION_METADATA: "ConsumerGroupPartitionMetadata",
    MEMBER_METADATA: "ConsumerGroupMemberMetadata",
    TARGET_ASSIGNMENT_EPOCH: "ConsumerGroupTargetAssignmentMetadata",
    TARGET_ASSIGNMENT_MEMBER: "ConsumerGroupTargetAssignmentMember",
    CURRENT_MEMBER_ASSIGNMENT: "ConsumerGroupCurrentMemberAssignment",
}
_SCHEMAS = {kind: (define_data(f"{name}Key"), define_data(f"{name}Value")) for kind, name in _NAMES.items()}
KEY_VERSIONS = frozenset(_NAMES)
"""The record key versions of a consumer group."""
_MEMBER_KINDS = frozenset({MEMBER_METADATA, TARGET_ASSIGNMENT_MEMBER, CURRENT_MEMBER_ASSIGNMENT})

TopicPartitions = frozenset[tuple[uuid.UUID, int]]


@dataclass(frozen=True, slots=True)
class ConsumerGroupKey:
    """A KIP-848 record key: its kind (the key version), the group, and for member records the member."""

    kind: int
    group: str
    member_id: str | None = None


@dataclass(frozen=True, slots=True)
class GroupEpochValue:
    epoch: int


@dataclass(frozen=True, slots=True)
class SubscriptionMetadataValue:
    topics: tuple[tuple[str, uuid.UUID, int], ...]
    """(name, id, partition count) of each subscribed topic."""


@dataclass(frozen=True, slots=True)
class MemberMetadataValue:
    instance_id: str | None
    rack_id: str | None
    client_id: str
    client_host: str
    subscribed_topic_names: tuple[str, ...]
    subscribed_topic_regex: str | None
    rebalance_timeout_ms: int
    server_assignor: str | None


@dataclass(frozen=True, slots=True)
class TargetAssignmentEpochValue:
    assignment_epoch: int


@dataclass(frozen=True, slots=True)
class TargetAssignmentMemberValue:
    partitions: TopicPartitions


@dataclass(frozen=True, slots=True)
class CurrentAssignmentValue:
    member_epoch: int
    previous_member_epoch: int
    state: int
    """Kafka's MemberState byte: 0 stable, 1 unrevoked partitions, 2 unreleased partitions, 127 unknown."""
    assigned: TopicPartitions
    pending_revocation: TopicPartitions


ConsumerGroupValue = (
    GroupEpochValue
    | SubscriptionMetadataValue
    | MemberMetadataValue
    | TargetAssignmentEpochValue
    | TargetAssignmentMemberValue
    | CurrentAssignmentValue
)
_VALUE_KINDS: dict[type, int] = {
    GroupEpochValue: GROUP_EPOCH,
    SubscriptionMetadataValue: SUBSCRIPTION_METADATA,
    MemberMetadataValue: MEMBER_METADATA,
    TargetAssignmentEpochValue: TARGET_ASSIGNMENT_EPOCH,
    TargetAssignmentMemberValue: TARGET_ASSIGNMENT_MEMBER,
    CurrentAssignmentValue: CURRENT_MEMBER_ASSIGNMENT,
}


def by_topic(partitions: TopicPartitions) -> dict[uuid.UUID, list[int]]:
    """Topic id -> its partitions in order: how KIP-848's records and RPCs list a set of partitions."""
    grouped: dict[uuid.UUID, list[int]] = {}
    for topic_id, partition in sorted(partitions):
        grouped.setdefault(topic_id, []).append(partition)
    return grouped


def _grouped(partitions: TopicPartitions, item: Any) -> list[Any]:
    return [item(topic_id=topic_id, partitions=parts) for topic_id, parts in by_topic(partitions).items()]


def _flat(entries: Any) -> TopicPartitions:
    return frozenset((entry.topic_id, p) for entry in entries for p in entry.partitions)


def encode_key(key: ConsumerGroupKey, error: type[ValueError]) -> bytes:
    """The key payload (without its int16 version, which is `key.kind`)."""
    schema = _SCHEMAS[key.kind][0]
    if (key.member_id is not None) != (key.kind in _MEMBER_KINDS):
        raise error(f"{schema.__name__} {'needs' if key.kind in _MEMBER_KINDS else 'has no'} member id")
    fields = {"group_id": key.group}
    if key.kind in _MEMBER_KINDS:
        fields["member_id"] = key.member_id
    return encode_payload(schema(**fields), key.kind, error=error)


def decode_key(kind: int, payload: bytes, error: type[ValueError]) -> ConsumerGroupKey:
    data = decode_payload(_SCHEMAS[kind][0], payload, kind, error=error)
    return ConsumerGroupKey(kind, data.group_id, data.member_id if kind in _MEMBER_KINDS else None)


def encode_value(key: ConsumerGroupKey, value: ConsumerGroupValue, error: type[ValueError]) -> bytes:
    """The value payload at version 0 (without its int16 version)."""
    if _VALUE_KINDS.get(type(value)) != key.kind:
        raise error(f"{type(value).__name__} cannot be the value of a {_NAMES[key.kind]}Key")
    schema = _SCHEMAS[key.kind][1]
    if isinstance(value, GroupEpochValue):
        data = schema(epoch=value.epoch)
    elif isinstance(value, SubscriptionMetadataValue):
        data = schema(
            topics=[
                schema.TopicMetadata(topic_id=topic_id, topic_name=name, num_partitions=count, partition_metadata=[])
                for name, topic_id, count in value.topics
            ]
        )
    elif isinstance(value, MemberMetadataValue):
        data = schema(
            instance_id=value.instance_id,
            rack_id=value.rack_id,
            client_id=value.client_id,
            client_host=value.client_host,
            subscribed_topic_names=list(value.subscribed_topic_names),
            subscribed_topic_regex=value.subscribed_topic_regex,
            rebalance_timeout_ms=value.rebalance_timeout_ms,
            server_assignor=value.server_assignor,
            classic_member_metadata=None,
        )
    elif isinstance(value, TargetAssignmentEpochValue):
        data = schema(assignment_epoch=value.assignment_epoch)
    elif isinstance(value, TargetAssignmentMemberValue):
        data = schema(topic_partitions=_grouped(value.partitions, schema.TopicPartition))
    else:
        item = _SCHEMAS[CURRENT_MEMBER_ASSIGNMENT][1].TopicPartitions
        data = schema(
            member_epoch=value.member_epoch,
            previous_member_epoch=value.previous_member_epoch,
            state=value.state,
            assigned_partitions=_grouped(value.assigned, item),
            partitions_pending_revocation=_grouped(value.pending_revocation, item),
        )
    return encode_payload(data, 0, error=error)


def decode_value(key: ConsumerGroupKey, version: int, payload: bytes, error: type[ValueError]) -> ConsumerGroupValue:
    schema: type[ApiData] = _SCHEMAS[key.kind][1]
    low, high = schema.valid_versions
    if not low <= version <= high:
        raise error(f"{schema.__name__} v{version} is not supported (versions {low}-{high})")
    v = decode_payload(schema, payload, version, error=error)
    if key.kind == GROUP_EPOCH:
        return GroupEpochValue(v.epoch)
    if key.kind == SUBSCRIPTION_METADATA:
        return SubscriptionMetadataValue(tuple((t.topic_name, t.topic_id, t.num_partitions) for t in v.topics))
    if key.kind == MEMBER_METADATA:
        return MemberMetadataValue(
            v.instance_id,
            v.rack_id,
            v.client_id,
            v.client_host,
            tuple(v.subscribed_topic_names),
            v.subscribed_topic_regex,
            v.rebalance_timeout_ms,
            v.server_assignor,
        )
    if key.kind == TARGET_ASSIGNMENT_EPOCH:
        return TargetAssignmentEpochValue(v.assignment_epoch)
    if key.kind == TARGET_ASSIGNMENT_MEMBER:
        return TargetAssignmentMemberValue(_flat(v.topic_partitions))
    return CurrentAssignmentValue(
        v.member_epoch,
        v.previous_member_epoch,
        v.state,
        _flat(v.assigned_partitions),
        _flat(v.partitions_pending_revocation),
    )
