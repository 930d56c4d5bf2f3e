"""What the coordinator holds for one `__consumer_offsets` partition it leads, and how records rebuild it.

Loading replays the partition's records in log order: the last value of each key wins and a
tombstone deletes it, as Kafka's GroupMetadataManager.loadGroupsAndOffsets does. Group metadata
becomes a live group at the end of the load (a group with members comes back Stable in its
generation, each member given a fresh session timeout to heartbeat in), and a group with offsets
but no metadata comes back Empty, as a group of a consumer that commits without group management.
KIP-848 consumer groups come back from their own records (`consumer.records.GroupLoader`).
The records themselves are produced by `group_value` and the commit path, so a replay yields
exactly the state that wrote them.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Collection
from dataclasses import dataclass, field

from quorum.broker.groups.consumer.group import ConsumerGroup
from quorum.broker.groups.consumer.records import GroupLoader
from quorum.broker.groups.group import Group, GroupState, Member
from quorum.broker.groups.offsets import is_stale
from quorum.wire.consumer_group_records import ConsumerGroupKey
from quorum.wire.consumer_offsets import (
    GroupKey,
    GroupValue,
    MemberValue,
    OffsetKey,
    OffsetValue,
    UnknownRecordTypeError,
    decode_record,
    encode_record,
)

TopicPartition = tuple[str, int]


@dataclass(slots=True)
class PartitionState:
    partition: int
    loading: bool = True
    groups: dict[str, Group] = field(default_factory=dict)
    consumer_groups: dict[str, ConsumerGroup] = field(default_factory=dict)
    """KIP-848 groups (a group id is in `groups` or here, never both); kept in memory only for now."""
    offsets: dict[str, dict[TopicPartition, OffsetValue]] = field(default_factory=dict)
    loaded_groups: dict[str, GroupValue] = field(default_factory=dict)
    """Group metadata read while loading, turned into groups when the load finishes."""
    consumer_loader: GroupLoader = field(default_factory=GroupLoader)
    """KIP-848 group records read while loading, turned into consumer groups when the load finishes."""
    skipped_records: int = 0
    """Records of types this project does not use (Kafka 4's KIP-848 records), skipped while loading."""

    def replay(self, key: bytes, value: bytes | None) -> None:
        """Apply one record of the partition; ConsumerOffsetsRecordError for a corrupt one."""
        try:
            decoded_key, decoded_value = decode_record(key, value)
        except UnknownRecordTypeError:
            self.skipped_records += 1
            return
        if isinstance(decoded_key, OffsetKey):
            offsets = self.offsets.setdefault(decoded_key.group, {})
            tp = (decoded_key.topic, decoded_key.partition)
            if decoded_value is None:
                offsets.pop(tp, None)
            else:
                assert isinstance(decoded_value, OffsetValue)
                offsets[tp] = decoded_value
        elif isinstance(decoded_key, ConsumerGroupKey):
            self.consumer_loader.replay(decoded_key, decoded_value)  # type: ignore[arg-type]
        elif isinstance(decoded_key, GroupKey):
            if decoded_value is None:
                self.loaded_groups.pop(decoded_key.group, None)
            else:
                assert isinstance(decoded_value, GroupValue)
                self.loaded_groups[decoded_key.group] = decoded_value

    def finish_loading(self, now_ms: int) -> None:
        for group_id, value in self.loaded_groups.items():
            self.groups[group_id] = group_from_value(group_id, value, now_ms)
        self.consumer_groups = self.consumer_loader.groups()
        self.consumer_loader = GroupLoader()
        for group_id, offsets in self.offsets.items():
            if offsets and group_id not in self.groups and group_id not in self.consumer_groups:
                self.groups[group_id] = Group(group_id, state_timestamp_ms=now_ms)
        self.offsets = {group_id: offsets for group_id, offsets in self.offsets.items() if offsets}
        self.loaded_groups = {}
        self.loading = False

    def drop_stale_offsets(self, current_topic_id: Callable[[str], uuid.UUID | None],
                           busy_groups: Collection[str] = (),
                           deleted_names: Collection[str] = ()) -> list[tuple[bytes, bytes | None]]:
        """Forget the offsets of topics that are gone (`offsets.is_stale`; `current_topic_id` names a
        topic's id, None when it does not exist), and those stored without a topic id whose topic is in
        `deleted_names` (just deleted, whether or not created again), and return their tombstones, as
        Kafka's cleanupGroupMetadata does for deleted partitions. An Empty group left without offsets is
        removed too (a group tombstone), unless it is in `busy_groups` (commits in flight)."""
        records: list[tuple[bytes, bytes | None]] = []
        for group_id, offsets in list(self.offsets.items()):
            stale = [tp for tp, value in offsets.items() if is_stale(value, current_topic_id(tp[0]))
                     or (value.topic_id is None and tp[0] in deleted_names)]
            for tp in stale:
                del offsets[tp]
                records.append(encode_record(OffsetKey(group_id, tp[0], tp[1]), None))
            if offsets or not stale:
                continue
            del self.offsets[group_id]
            group = self.groups.get(group_id)
            if group is not None and group.state is GroupState.EMPTY and group_id not in busy_groups:
                group.state = GroupState.DEAD
                del self.groups[group_id]
                records.append(encode_record(GroupKey(group_id), None))
        return records


def group_from_value(group_id: str, value: GroupValue, now_ms: int) -> Group:
    group = Group(group_id, generation=value.generation, protocol_type=value.protocol_type or None,
                  protocol=value.protocol, state_timestamp_ms=now_ms)
    for m in value.members:
        protocols = ((value.protocol, m.subscription),) if value.protocol is not None else ()
        member = Member(m.member_id, m.group_instance_id, m.client_id, m.client_host, m.rebalance_timeout,
                        m.session_timeout, value.protocol_type, protocols, m.assignment,
                        heartbeat_deadline_ms=now_ms + m.session_timeout)
        group.add(member)
    group.protocol_type = value.protocol_type or None
    group.leader = value.leader if value.leader in group.members else next(iter(group.members), None)
    group.state = GroupState.STABLE if group.members else GroupState.EMPTY
    return group


def group_value(group: Group, assignments: dict[str, bytes] | None = None) -> GroupValue:
    """The GroupMetadataValue for a group, with `assignments` replacing the members' current ones."""
    members = []
    for member in group.members.values():
        subscription = member.metadata(group.protocol) if group.protocol is not None else b""
        assignment = assignments.get(member.member_id, b"") if assignments is not None else member.assignment
        members.append(MemberValue(member.member_id, member.group_instance_id, member.client_id,
                                   member.client_host, member.rebalance_timeout_ms, member.session_timeout_ms,
                                   subscription, assignment))
    return GroupValue(group.protocol_type or "", group.generation, group.protocol,
                      group.leader if group.members else None, group.state_timestamp_ms, tuple(members))
