"""Static members (KIP-345) rejoining after a restart: the part of the classic group coordinator
that replaces a static member's old member id (Kafka's
GroupMetadataManager.updateStaticMemberThenRebalanceOrCompleteJoin). `GroupCoordinator`
(coordinator.py) mixes this in and owns the state and the rest of the membership rules.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

from quorum.broker.groups.events import JoinAnswer, JoinGroup, Output, SyncAnswer
from quorum.broker.groups.group import Group, GroupState, Member
from quorum.broker.groups.partition_state import PartitionState, group_value
from quorum.wire.consumer_offsets import GroupKey, encode_record
from quorum.wire.errors import ErrorCode

E = ErrorCode

log = logging.getLogger("quorum.broker.groups.coordinator")
"""The coordinator's logger: a group's rebalance steps read as one story."""


@dataclass(slots=True)
class PendingStaticRejoin:
    """A static member that rejoined a Stable group under a new member id: its JoinGroup is answered
    once the group record naming the new id is durable (or the replacement undone if it fails)."""

    group_id: str
    partition: int
    instance_id: str
    old_id: str
    new_id: str
    previous: tuple[tuple[tuple[str, bytes], ...], int, int]
    """The member's protocols, rebalance and session timeouts before this join changed them."""
    previous_leader: str | None
    version: int


class StaticMembers:
    """The static-member half of `GroupCoordinator` (state and plumbing are the coordinator's)."""

    _partitions: dict[int, PartitionState]
    _pending: dict[int, Any]

    def partition_for(self, group_id: str) -> int: ...
    def _append(self, partition: int, records: list[tuple[bytes, bytes | None]]) -> int: ...
    def _answer(self, handle: Any, answer: Any) -> None: ...
    def _answer_join(self, member: Member, answer: JoinAnswer) -> None: ...
    def _answer_sync(self, member: Member, answer: SyncAnswer) -> None: ...
    def _prepare_rebalance(self, group: Group, now_ms: int) -> None: ...
    def _join_answer(self, group: Group, member: Member) -> JoinAnswer: ...
    def _flush(self) -> Output: ...

    def _rejoin_static_member(self, handle: Any, group: Group, old_id: str, new_id: str, request: JoinGroup,
                              now_ms: int) -> None:
        """Kafka's updateStaticMemberThenRebalanceOrCompleteJoin (KIP-345): a static member that joins
        without a member id while its instance id is held (it restarted within its session) takes
        the member's place under a new id; the old id is fenced (FENCED_INSTANCE_ID from now on).

        In a Stable group whose selected protocol would stay the same, nothing rebalances: the group
        record is stored with the new id and the member gets the current generation back, its
        assignment coming from SyncGroup, while the others see nothing. Up to JoinGroup v8 the answer
        names the leader as it was before the replacement, so a restarted leader does not take itself
        for the leader and assign again (the group would not pass a Stable group's assignment on);
        from v9 the leader is told who it is with SkipAssignment set. In CompletingRebalance the group
        rebalances again (the leader may be assigning to the old id); in PreparingRebalance the member
        simply counts as rejoined."""
        instance = request.group_instance_id
        assert instance is not None
        previous_leader = group.leader
        old, member = group.replace_static_member(instance, old_id, new_id)
        self._answer_join(old, JoinAnswer(E.FENCED_INSTANCE_ID, old_id))
        self._answer_sync(old, SyncAnswer(E.FENCED_INSTANCE_ID))
        log.info("group %s: static member %s rejoined in state %s; member %s replaces %s", group.group_id, instance,
                 group.state.value, new_id, old_id)
        member.heartbeat_deadline_ms = now_ms + member.session_timeout_ms
        previous = (member.protocols, member.rebalance_timeout_ms, member.session_timeout_ms)
        member.protocols = request.protocols
        member.rebalance_timeout_ms = request.rebalance_timeout_ms
        member.session_timeout_ms = request.session_timeout_ms
        member.join_handle = handle
        if group.state is GroupState.STABLE:
            if group.select_protocol() != group.protocol:
                self._prepare_rebalance(group, now_ms)
                return
            partition = self.partition_for(group.group_id)
            token = self._append(partition, [encode_record(GroupKey(group.group_id), group_value(group))])
            self._pending[token] = PendingStaticRejoin(group.group_id, partition, instance, old_id, new_id,
                                                        previous, previous_leader, request.version)
        elif group.state is GroupState.COMPLETING_REBALANCE:
            self._prepare_rebalance(group, now_ms)

    def _static_rejoin_stored(self, pending: PendingStaticRejoin, error: int) -> None:
        """The group record of a static member's replacement is durable (`error` NONE) or failed."""
        state = self._partitions.get(pending.partition)
        group = state.groups.get(pending.group_id) if state is not None else None
        member = group.members.get(pending.new_id) if group is not None else None
        if group is None or member is None:
            return
        if error != E.NONE:
            log.info("group %s: the replacement of static member %s could not be stored (error %d); undone",
                     group.group_id, pending.instance_id, error)
            answer = JoinAnswer(error, "", group.generation, group.protocol_type, group.protocol,
                                pending.previous_leader or "")
            handle, member.join_handle = member.join_handle, None
            member.protocols, member.rebalance_timeout_ms, member.session_timeout_ms = pending.previous
            group.replace_static_member(pending.instance_id, pending.new_id, pending.old_id)
            if handle is not None:
                self._answer(handle, answer)
            return
        if pending.version >= 9:
            leading = group.leader == member.member_id
            answer = self._join_answer(group, member)
            self._answer_join(member, JoinAnswer(E.NONE, answer.member_id, answer.generation, answer.protocol_type,
                                                 answer.protocol_name, answer.leader, answer.members, leading))
        else:
            self._answer_join(member, JoinAnswer(E.NONE, member.member_id, group.generation, group.protocol_type,
                                                 group.protocol, pending.previous_leader or ""))

