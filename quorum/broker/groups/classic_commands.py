"""The classic group protocol inside the group coordinator: JoinGroup, SyncGroup, Heartbeat and
LeaveGroup, the rebalance they drive, session and join timers, and DescribeGroups.

The membership rules follow Kafka's classic GroupCoordinator (3.x): JoinGroup answers wait until
the rebalance completes (every member rejoined, or the rebalance timeout passed, or for a group
that was empty the `group.initial.rebalance.delay.ms` passed), SyncGroup answers wait until the
leader's assignment is durable, and a member whose session expires is removed and the group
rebalances. Static members are `static_members`; which member may do what (and the error otherwise)
is `member_rules`. `GroupCoordinator` holds the partitions and the output plumbing these use.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from quorum.broker.groups.config import GroupConfig
from quorum.broker.groups.events import (
    DescribedGroup,
    DescribedMember,
    Heartbeat,
    HeartbeatAnswer,
    JoinAnswer,
    JoinGroup,
    JoinMember,
    LeaveAnswer,
    LeaveGroup,
    Output,
    SyncAnswer,
    SyncGroup,
)
from quorum.broker.groups.group import Group, GroupState, Member
from quorum.broker.groups.member_rules import membership_error, validate_member
from quorum.broker.groups.offsets import storage_error_for_group
from quorum.broker.groups.partition_state import PartitionState, group_value
from quorum.wire.consumer_offsets import GroupKey, encode_record
from quorum.wire.errors import ErrorCode

if TYPE_CHECKING:
    from collections.abc import Callable

NEW_MEMBER_JOIN_TIMEOUT_MS = 300_000
"""Kafka's GroupCoordinator.NewMemberJoinTimeoutMs: a new member's JoinGroup is dropped after this."""

E = ErrorCode

log = logging.getLogger("quorum.broker.groups.coordinator")
"""A group's rebalance steps at INFO, as Kafka's GroupCoordinator logs them: a member left waiting
(the soak's kafka-python member that never got its assignment) is traced from them. The coordinator's
logger, so that they read as one story."""


@dataclass(slots=True)
class PendingSync:
    """A leader's assignment on its way to the log: SyncGroup answers wait for it (Kafka stores it first)."""

    group_id: str
    partition: int
    generation: int
    assignments: dict[str, bytes]


@dataclass(slots=True)
class PendingGroupStore:
    """An emptied group's record on its way to the log: nobody waits, but its token is known."""

    group_id: str
    partition: int


class ClassicCommands:
    """The classic-group half of `GroupCoordinator` (state and plumbing are the coordinator's)."""

    config: GroupConfig
    _partitions: dict[int, PartitionState]
    _pending: dict[int, Any]
    _new_member_id: Callable[[str], str]

    if TYPE_CHECKING:  # the coordinator's; declared here only for type checkers, so they never shadow it

        def partition_for(self, group_id: str) -> int: ...
        def _status(self, group_id: str | None) -> tuple[int, PartitionState | None]: ...
        def classic_join_error(self, state: PartitionState, group_id: str) -> int: ...
        def _rejoin_static_member(
            self, handle: Any, group: Group, old_id: str, member_id: str, request: JoinGroup, now_ms: int
        ) -> None: ...
        def _append(self, partition: int, records: list[tuple[bytes, bytes | None]]) -> int: ...
        def _answer(self, handle: Any, answer: Any) -> None: ...
        def _reply(self, handle: Any, answer: Any) -> Output: ...
        def _flush(self) -> Output: ...

    def _sync_stored(self, pending: PendingSync, now_ms: int) -> None:
        """The leader's assignment is durable: the generation is Stable and every member is answered."""
        group = self._partitions[pending.partition].groups.get(pending.group_id)
        if (
            group is not None
            and group.state is GroupState.COMPLETING_REBALANCE
            and group.generation == pending.generation
        ):
            for member in group.members.values():
                member.assignment = pending.assignments.get(member.member_id, b"")
                self._answer_sync(member, SyncAnswer(E.NONE, group.protocol_type, group.protocol, member.assignment))
                # Kafka's propagateAssignment: each session starts again with its assignment. A sync
                # that waited on the durable write (a replica of the partition just killed) would
                # otherwise expire its member before the first heartbeat of its new generation.
                member.heartbeat_deadline_ms = now_ms + member.session_timeout_ms
            group.transition(GroupState.STABLE, now_ms)
            log.info("group %s: generation %d stable, its assignment stored", group.group_id, group.generation)
        else:
            log.info(
                "group %s: the assignment of generation %d was stored after the group moved on",
                pending.group_id,
                pending.generation,
            )

    def _sync_failed(self, pending: PendingSync, error: int, now_ms: int) -> None:
        """The leader's assignment could not be stored: the members are told and the group rebalances."""
        group = self._partitions[pending.partition].groups.get(pending.group_id)
        if (
            group is not None
            and group.state is GroupState.COMPLETING_REBALANCE
            and group.generation == pending.generation
        ):
            log.info(
                "group %s: the assignment of generation %d could not be stored (error %d); rebalancing",
                group.group_id,
                group.generation,
                error,
            )
            self._reset_syncs(group, storage_error_for_group(error))
            self._maybe_prepare_rebalance(group, now_ms)

    def _classic_deadlines(self) -> list[int]:
        """When the classic groups next have something due: rebalances, pending members, sessions."""
        deadlines: list[int] = []
        for state in self._partitions.values():
            for group in state.groups.values():
                if group.state is GroupState.PREPARING_REBALANCE and group.rebalance_deadline_ms is not None:
                    deadlines.append(group.rebalance_deadline_ms)
                deadlines.extend(group.pending_members.values())
                deadlines.extend(m.heartbeat_deadline_ms for m in group.members.values() if not _kept_alive(m))
        return deadlines

    def _expire_classic_groups(self, now_ms: int) -> None:
        for state in list(self._partitions.values()):
            if not state.loading:
                for group in list(state.groups.values()):
                    self._expire(group, now_ms)

    def _expire(self, group: Group, now_ms: int) -> None:
        """What is due in `group` by `now_ms`: pending members and sessions expire, a rebalance whose
        time is up completes.

        Every request applies this to its group first, so that it is judged against the group as it
        is at its own time, not as the last `tick` left it: Kafka's timers fire at the deadline on a
        thread of their own, while `tick` runs when the shell's timer gets its turn, which a request
        arriving at the same moment may beat. That race let a commit from a member whose session had
        just expired, or which had not rejoined by the rebalance deadline, be accepted in some runs
        and refused (UNKNOWN_MEMBER_ID) in others."""
        for member_id, deadline in list(group.pending_members.items()):
            if deadline <= now_ms:
                del group.pending_members[member_id]
        for member in list(group.members.values()):
            if not _kept_alive(member) and member.heartbeat_deadline_ms <= now_ms:
                self._remove_member(group, member, now_ms)
        self._try_complete_join(group, now_ms)

    def _group_at(self, state: PartitionState, group_id: str, now_ms: int) -> Group | None:
        """The group of a request at `now_ms`, its due expirations applied (`_expire`)."""
        group = state.groups.get(group_id)
        if group is not None:
            self._expire(group, now_ms)
        return group

    # ----------------------------------------------------------------------------------------
    # JoinGroup

    def join_group(self, handle: Any, request: JoinGroup, now_ms: int) -> Output:
        error, state = self._status(request.group_id)
        if not request.group_id:
            error = E.INVALID_GROUP_ID
        elif error == E.NONE and not (
            self.config.group_min_session_timeout_ms
            <= request.session_timeout_ms
            <= self.config.group_max_session_timeout_ms
        ):
            error = E.INVALID_SESSION_TIMEOUT
        if error == E.NONE and state is not None:
            error = self.classic_join_error(state, request.group_id)
        if error != E.NONE or state is None:
            return self._reply(handle, JoinAnswer(error, request.member_id))
        unknown = request.member_id == ""
        group = self._group_at(state, request.group_id, now_ms)
        if group is None:
            if not unknown:
                return self._reply(handle, JoinAnswer(E.UNKNOWN_MEMBER_ID, request.member_id))
            group = state.groups[request.group_id] = Group(request.group_id, state_timestamp_ms=now_ms)
        if not self._accepts_joining_member(group, request.member_id):
            return self._reply(handle, JoinAnswer(E.GROUP_MAX_SIZE_REACHED, request.member_id))
        if unknown:
            self._join_new_member(handle, group, request, now_ms)
        else:
            self._join_current_member(handle, group, request, now_ms)
        self._try_complete_join(group, now_ms)
        return self._flush()

    def _accepts_joining_member(self, group: Group, member_id: str) -> bool:
        limit = self.config.group_max_size
        member = group.members.get(member_id)
        if group.state in (GroupState.EMPTY, GroupState.DEAD):
            return True
        if group.state is GroupState.PREPARING_REBALANCE:
            awaiting = sum(1 for m in group.members.values() if m.awaiting_join)
            return (member is not None and member.awaiting_join) or awaiting < limit
        return member is not None or len(group.members) < limit

    def _join_new_member(self, handle: Any, group: Group, request: JoinGroup, now_ms: int) -> None:
        if group.state is GroupState.DEAD:
            self._answer(handle, JoinAnswer(E.COORDINATOR_NOT_AVAILABLE))
            return
        if not group.supports(request.protocol_type, request.protocols):
            self._answer(handle, JoinAnswer(E.INCONSISTENT_GROUP_PROTOCOL))
            return
        instance = request.group_instance_id
        member_id = self._new_member_id(instance if instance is not None else request.client_id)
        if instance is not None:
            old_id = group.current_member_for_instance(instance)
            if old_id is not None:
                self._rejoin_static_member(handle, group, old_id, member_id, request, now_ms)
            else:
                self._add_member_and_rebalance(handle, group, member_id, request, now_ms)
        elif request.version >= 4:
            group.pending_members[member_id] = now_ms + request.session_timeout_ms
            self._answer(handle, JoinAnswer(E.MEMBER_ID_REQUIRED, member_id))
        else:
            self._add_member_and_rebalance(handle, group, member_id, request, now_ms)

    def _join_current_member(self, handle: Any, group: Group, request: JoinGroup, now_ms: int) -> None:
        member_id = request.member_id
        if group.state is GroupState.DEAD:
            self._answer(handle, JoinAnswer(E.COORDINATOR_NOT_AVAILABLE, member_id))
            return
        if not group.supports(request.protocol_type, request.protocols):
            self._answer(handle, JoinAnswer(E.INCONSISTENT_GROUP_PROTOCOL, member_id))
            return
        if member_id in group.pending_members:
            del group.pending_members[member_id]
            self._add_member_and_rebalance(handle, group, member_id, request, now_ms)
            return
        error = validate_member(group, member_id, request.group_instance_id)
        if error != E.NONE:
            self._answer(handle, JoinAnswer(error, member_id))
            return
        member = group.members[member_id]
        state = group.state
        unchanged = member.matches(request.protocols)
        if state is GroupState.PREPARING_REBALANCE:
            self._update_member_and_rebalance(handle, group, member, request, now_ms)
        elif state is GroupState.COMPLETING_REBALANCE and unchanged:
            # A member that missed its JoinGroup answer asks again: the current generation's answer.
            self._answer(handle, self._join_answer(group, member))
        elif state is GroupState.STABLE and unchanged and group.leader != member_id:
            self._answer(handle, self._join_answer(group, member))
        elif state in (GroupState.COMPLETING_REBALANCE, GroupState.STABLE):
            # The leader rejoining forces a rebalance (its assignment may depend on topic metadata).
            self._update_member_and_rebalance(handle, group, member, request, now_ms)
        else:
            self._answer(handle, JoinAnswer(E.UNKNOWN_MEMBER_ID, member_id))

    def _add_member_and_rebalance(
        self, handle: Any, group: Group, member_id: str, request: JoinGroup, now_ms: int
    ) -> None:
        member = Member(
            member_id,
            request.group_instance_id,
            request.client_id,
            request.client_host,
            request.rebalance_timeout_ms,
            request.session_timeout_ms,
            request.protocol_type,
            request.protocols,
            heartbeat_deadline_ms=now_ms + NEW_MEMBER_JOIN_TIMEOUT_MS,
            join_handle=handle,
            is_new=True,
        )
        if group.state is GroupState.PREPARING_REBALANCE and group.generation == 0:
            group.new_member_added = True
        group.add(member)
        self._maybe_prepare_rebalance(group, now_ms)

    def _update_member_and_rebalance(
        self, handle: Any, group: Group, member: Member, request: JoinGroup, now_ms: int
    ) -> None:
        if member.join_handle is not None and member.join_handle != handle:
            # The member asked again (on another connection): only the newest request is answered.
            self._answer_join(member, JoinAnswer(E.REBALANCE_IN_PROGRESS, member.member_id))
        member.protocols = request.protocols
        member.rebalance_timeout_ms = request.rebalance_timeout_ms
        member.session_timeout_ms = request.session_timeout_ms
        member.join_handle = handle
        self._maybe_prepare_rebalance(group, now_ms)

    def _maybe_prepare_rebalance(self, group: Group, now_ms: int) -> None:
        if group.state in (GroupState.EMPTY, GroupState.COMPLETING_REBALANCE, GroupState.STABLE):
            self._prepare_rebalance(group, now_ms)

    def _prepare_rebalance(self, group: Group, now_ms: int) -> None:
        if group.state is GroupState.COMPLETING_REBALANCE:
            self._reset_syncs(group, E.REBALANCE_IN_PROGRESS)
        timeout = max((m.rebalance_timeout_ms for m in group.members.values()), default=0)
        if group.state is GroupState.EMPTY:
            delay = self.config.group_initial_rebalance_delay_ms
            group.in_initial_delay = True
            group.initial_delay_remaining_ms = max(timeout - delay, 0)
            group.rebalance_deadline_ms = now_ms + delay
            group.new_member_added = False
        else:
            group.in_initial_delay = False
            group.rebalance_deadline_ms = now_ms + timeout
        log.info(
            "group %s: preparing to rebalance in state %s with old generation %d",
            group.group_id,
            group.state.value,
            group.generation,
        )
        group.transition(GroupState.PREPARING_REBALANCE, now_ms)
        self._try_complete_join(group, now_ms)  # as Kafka's tryCompleteElseWatch: the last member may have left

    def _try_complete_join(self, group: Group, now_ms: int) -> None:
        if group.state is not GroupState.PREPARING_REBALANCE or group.rebalance_deadline_ms is None:
            return
        if group.in_initial_delay:
            while group.rebalance_deadline_ms <= now_ms:
                if group.new_member_added and group.initial_delay_remaining_ms > 0:
                    # Members are still arriving: wait another delay, within the rebalance timeout.
                    delay = min(self.config.group_initial_rebalance_delay_ms, group.initial_delay_remaining_ms)
                    group.new_member_added = False
                    group.initial_delay_remaining_ms = max(group.initial_delay_remaining_ms - delay, 0)
                    group.rebalance_deadline_ms += delay
                else:
                    self._complete_join(group, now_ms)
                    return
            return
        if group.all_members_joined() or group.rebalance_deadline_ms <= now_ms:
            self._complete_join(group, now_ms)

    def _complete_join(self, group: Group, now_ms: int) -> None:
        """Kafka's completeClassicGroupJoin: drop the dynamic members that did not rejoin (a static
        member stays: it may come back within its session with its instance id), elect a leader
        among those that did, start the next generation and answer the joins. When no member at all
        rejoined, the rebalance waits another rebalance timeout for the sessions to expire."""
        for member in [m for m in group.members.values() if not m.awaiting_join and m.group_instance_id is None]:
            self._remove_member_quietly(group, member)
        if group.members and not _elect_joined_leader(group):
            log.info("group %s: no member rejoined; waiting another rebalance timeout", group.group_id)
            group.in_initial_delay = False
            group.rebalance_deadline_ms = now_ms + max(m.rebalance_timeout_ms for m in group.members.values())
            return
        group.in_initial_delay = False
        group.rebalance_deadline_ms = None
        group.generation += 1
        if not group.members:
            group.protocol = None
            group.leader = None
            group.transition(GroupState.EMPTY, now_ms)
            self._store_group(group, None)
            return
        group.protocol = group.select_protocol()
        log.info(
            "group %s: generation %d with %d member(s), leader %s, protocol %s",
            group.group_id,
            group.generation,
            len(group.members),
            group.leader,
            group.protocol,
        )
        group.transition(GroupState.COMPLETING_REBALANCE, now_ms)
        for member in group.members.values():
            self._answer_join(member, self._join_answer(group, member))
            member.heartbeat_deadline_ms = now_ms + member.session_timeout_ms
            member.is_new = False

    def _join_answer(self, group: Group, member: Member) -> JoinAnswer:
        members: tuple[JoinMember, ...] = ()
        if group.leader == member.member_id and group.protocol is not None:
            members = tuple(
                JoinMember(m.member_id, m.group_instance_id, m.metadata(group.protocol)) for m in group.members.values()
            )
        return JoinAnswer(
            E.NONE, member.member_id, group.generation, group.protocol_type, group.protocol, group.leader or "", members
        )

    # ----------------------------------------------------------------------------------------
    # SyncGroup

    def sync_group(self, handle: Any, request: SyncGroup, now_ms: int) -> Output:
        error, state = self._status(request.group_id)
        if not request.group_id:
            error = E.INVALID_GROUP_ID
        elif error == E.COORDINATOR_LOAD_IN_PROGRESS:
            # The rebalance's state is lost with the old coordinator: start over at JoinGroup (as Kafka).
            error = E.REBALANCE_IN_PROGRESS
        if error != E.NONE or state is None:
            return self._reply(handle, SyncAnswer(error))
        group = self._group_at(state, request.group_id, now_ms)
        member = group.members.get(request.member_id) if group is not None else None
        error = membership_error(group, request.member_id, request.group_instance_id, request.generation)
        if error != E.NONE or group is None or member is None:
            return self._reply(handle, SyncAnswer(error))
        if (request.protocol_type is not None and request.protocol_type != group.protocol_type) or (
            request.protocol_name is not None and request.protocol_name != group.protocol
        ):
            return self._reply(handle, SyncAnswer(E.INCONSISTENT_GROUP_PROTOCOL))
        if group.state is GroupState.EMPTY:
            return self._reply(handle, SyncAnswer(E.UNKNOWN_MEMBER_ID))
        if group.state is GroupState.PREPARING_REBALANCE:
            return self._reply(handle, SyncAnswer(E.REBALANCE_IN_PROGRESS))
        if group.state is GroupState.STABLE:
            member.heartbeat_deadline_ms = now_ms + member.session_timeout_ms
            return self._reply(handle, SyncAnswer(E.NONE, group.protocol_type, group.protocol, member.assignment))
        # CompletingRebalance: wait for the leader's assignment to be durable.
        if member.sync_handle is not None and member.sync_handle != handle:
            self._answer_sync(member, SyncAnswer(E.REBALANCE_IN_PROGRESS))
        member.sync_handle = handle
        if group.leader == request.member_id:
            given = dict(request.assignments)
            assignments = {member_id: given.get(member_id, b"") for member_id in group.members}
            self._store_group(group, assignments)
        return self._flush()

    def _store_group(self, group: Group, assignments: dict[str, bytes] | None) -> None:
        partition = self.partition_for(group.group_id)
        record = encode_record(GroupKey(group.group_id), group_value(group, assignments))
        token = self._append(partition, [record])
        if assignments is None:
            self._pending[token] = PendingGroupStore(group.group_id, partition)
        else:
            self._pending[token] = PendingSync(group.group_id, partition, group.generation, assignments)

    def _reset_syncs(self, group: Group, error: int) -> None:
        for member in group.members.values():
            member.assignment = b""
            self._answer_sync(member, SyncAnswer(error))

    # ----------------------------------------------------------------------------------------
    # Heartbeat and LeaveGroup

    def heartbeat(self, handle: Any, request: Heartbeat, now_ms: int) -> Output:
        error, state = self._status(request.group_id)
        if not request.group_id:
            error = E.INVALID_GROUP_ID
        elif error == E.COORDINATOR_LOAD_IN_PROGRESS:
            error = E.NONE  # Kafka answers blindly while loading: the member learns the truth after.
        if error != E.NONE or state is None:
            return self._reply(handle, HeartbeatAnswer(error))
        group = self._group_at(state, request.group_id, now_ms)
        member = group.members.get(request.member_id) if group is not None else None
        error = membership_error(group, request.member_id, request.group_instance_id, request.generation)
        if error != E.NONE or group is None or member is None:
            return self._reply(handle, HeartbeatAnswer(error))
        if group.state is GroupState.EMPTY:
            return self._reply(handle, HeartbeatAnswer(E.UNKNOWN_MEMBER_ID))
        member.heartbeat_deadline_ms = now_ms + member.session_timeout_ms
        rebalancing = group.state is GroupState.PREPARING_REBALANCE
        return self._reply(handle, HeartbeatAnswer(E.REBALANCE_IN_PROGRESS if rebalancing else E.NONE))

    def leave_group(self, handle: Any, request: LeaveGroup, now_ms: int) -> Output:
        error, state = self._status(request.group_id)
        if not request.group_id:
            error = E.INVALID_GROUP_ID
        if error != E.NONE or state is None:
            return self._reply(handle, LeaveAnswer(error))
        group = self._group_at(state, request.group_id, now_ms)
        if group is None:
            return self._reply(handle, LeaveAnswer(E.NONE, tuple((m, E.UNKNOWN_MEMBER_ID) for m in request.members)))
        if group.state is GroupState.DEAD:
            return self._reply(handle, LeaveAnswer(E.COORDINATOR_NOT_AVAILABLE))
        results = []
        for leaving in request.members:
            code = E.NONE
            if leaving.member_id == "":
                # Administrative removal by group.instance.id alone.
                current = (
                    group.current_member_for_instance(leaving.group_instance_id or "")
                    if leaving.group_instance_id is not None
                    else None
                )
                if current is None:
                    code = E.UNKNOWN_MEMBER_ID
                else:
                    self._remove_member(group, group.members[current], now_ms)
            elif leaving.member_id in group.pending_members:
                del group.pending_members[leaving.member_id]
                self._try_complete_join(group, now_ms)
            else:
                code = validate_member(group, leaving.member_id, leaving.group_instance_id)
                if code == E.NONE:
                    self._remove_member(group, group.members[leaving.member_id], now_ms)
            results.append((leaving, code))
        return self._reply(handle, LeaveAnswer(E.NONE, tuple(results)))

    def _remove_member(self, group: Group, member: Member, now_ms: int) -> None:
        """Kafka's removeMemberAndUpdateGroup: a member left or expired; the group rebalances without it."""
        self._remove_member_quietly(group, member)
        if group.state in (GroupState.STABLE, GroupState.COMPLETING_REBALANCE):
            self._maybe_prepare_rebalance(group, now_ms)
        elif group.state is GroupState.PREPARING_REBALANCE:
            self._try_complete_join(group, now_ms)

    def _remove_member_quietly(self, group: Group, member: Member) -> None:
        self._answer_join(member, JoinAnswer(E.UNKNOWN_MEMBER_ID, ""))
        self._answer_sync(member, SyncAnswer(E.REBALANCE_IN_PROGRESS))
        group.remove(member.member_id)

    # ----------------------------------------------------------------------------------------
    # DescribeGroups

    def describe_group(self, group_id: str) -> DescribedGroup:
        error, state = self._status(group_id)
        if error != E.NONE or state is None:
            return DescribedGroup(group_id, error)
        group = state.groups.get(group_id)
        if group is None:
            return DescribedGroup(group_id, E.NONE)
        stable = group.state is GroupState.STABLE and group.protocol is not None
        members = tuple(
            DescribedMember(
                m.member_id,
                m.group_instance_id,
                m.client_id,
                m.client_host,
                m.metadata(group.protocol) if stable and group.protocol else b"",
                m.assignment if stable else b"",
            )
            for m in group.members.values()
        )
        return DescribedGroup(
            group_id,
            E.NONE,
            group.state.value,
            group.protocol_type or "",
            (group.protocol or "") if stable else "",
            members,
        )

    # ----------------------------------------------------------------------------------------
    # Answers waiting on a member

    def _answer_join(self, member: Member, answer: JoinAnswer) -> None:
        if member.join_handle is not None:
            self._answer(member.join_handle, answer)
            member.join_handle = None

    def _answer_sync(self, member: Member, answer: SyncAnswer) -> None:
        if member.sync_handle is not None:
            self._answer(member.sync_handle, answer)
            member.sync_handle = None


def _kept_alive(member: Member) -> bool:
    """Kafka's shouldKeepAlive: a member waiting on a join or sync answer is not expired (a new
    member's join only for NEW_MEMBER_JOIN_TIMEOUT_MS, which its heartbeat deadline holds)."""
    return member.awaiting_sync or (member.awaiting_join and not member.is_new)


def _elect_joined_leader(group: Group) -> bool:
    """Kafka's maybeElectNewJoinedLeader: keep a leader that rejoined, else take the first member
    that did; False when none did."""
    leader = group.members.get(group.leader) if group.leader is not None else None
    if leader is not None and leader.awaiting_join:
        return True
    joined = next((m.member_id for m in group.members.values() if m.awaiting_join), None)
    if joined is None:
        return False
    group.leader = joined
    return True
