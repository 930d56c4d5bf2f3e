"""The sans-IO classic group coordinator: Kafka's GroupCoordinator for the partitions this broker leads.

Events in (a request with the shell's handle, "records are durable", "time is now", "this
partition is mine / no longer mine"), an `Output` out (answers to send, records to append). No
clock, socket, thread or file: `now_ms` comes with every event and `next_deadline()` tells the
shell when to call `tick()`.

The membership rules follow Kafka's classic GroupCoordinator (3.x): JoinGroup answers wait until
the rebalance completes (every member rejoined, or the rebalance timeout passed, or for a group
that was empty the `group.initial.rebalance.delay.ms` passed), SyncGroup answers wait until the
leader's assignment is durable, and a member whose session expires is removed and the group
rebalances. Static membership (KIP-345, group.instance.id) follows Kafka's GroupMetadataManager: a
static member that restarts within its session replaces its old member id (fenced from then on,
FENCED_INSTANCE_ID) and gets the current generation back without a rebalance when the group is
Stable, and a static member that misses a rebalance stays in the group (`static_members`). Which
member may do what (and the error otherwise) is `member_rules`. OffsetCommit and OffsetFetch are
`coordinator_offsets`.

Offsets live beside the groups per partition; a commit answers when its records are durable.
KIP-232: a commit whose internal metadata is older than the partition's latest, or names a topic id
that is not the topic's current one, is refused with INVALID_INTERNAL_METADATA for that partition
(see `offsets.check_entry`). The offsets of a deleted topic are deleted with it (`topics_deleted`,
Kafka's onPartitionsDeleted), and a partition loaded later drops any it still holds
(`drop_stale_offsets`), so a topic created again under the name starts without them.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Callable, Collection, Iterable
from dataclasses import dataclass
from typing import Any

from quorum.broker.groups.config import GroupConfig, partition_for
from quorum.broker.groups.consumer.assignors import TopicInfo
from quorum.broker.groups.consumer.commands import ConsumerCommands, PendingConsumerAnswer
from quorum.broker.groups.consumer.rules import ConsumerGroupRules
from quorum.broker.groups.coordinator_offsets import OffsetCommands, PendingCommit
from quorum.broker.groups.events import (
    Append,
    DescribedGroup,
    DescribedMember,
    Heartbeat,
    HeartbeatAnswer,
    JoinAnswer,
    JoinGroup,
    JoinMember,
    LeaveAnswer,
    LeaveGroup,
    ListAnswer,
    ListedGroup,
    Output,
    SyncAnswer,
    SyncGroup,
)
from quorum.broker.groups.group import Group, GroupState, Member
from quorum.broker.groups.member_rules import membership_error, validate_member
from quorum.broker.groups.offsets import (
    storage_error_for_commit,
    storage_error_for_group,
)
from quorum.broker.groups.partition_state import PartitionState, group_value
from quorum.broker.groups.static_members import PendingStaticRejoin, StaticMembers
from quorum.wire.consumer_offsets import GroupKey, encode_record
from quorum.wire.errors import ErrorCode

NEW_MEMBER_JOIN_TIMEOUT_MS = 300_000
"""Kafka's GroupCoordinator.NewMemberJoinTimeoutMs: a new member's JoinGroup is dropped after this."""

E = ErrorCode

log = logging.getLogger(__name__)
"""A group's rebalance steps at INFO, as Kafka's GroupCoordinator logs them: a member left waiting
(the soak's kafka-python member that never got its assignment) is traced from them."""


@dataclass(slots=True)
class _PendingSync:
    group_id: str
    partition: int
    generation: int
    assignments: dict[str, bytes]


@dataclass(slots=True)
class _PendingGroupStore:
    group_id: str
    partition: int


def random_member_id(prefix: str) -> str:
    """Kafka's member id: the client id (or instance id) and a random UUID."""
    return f"{prefix}-{uuid.uuid4()}"


class GroupCoordinator(ConsumerCommands, OffsetCommands, StaticMembers):
    def __init__(self, config: GroupConfig | None = None,
                 new_member_id: Callable[[str], str] = random_member_id) -> None:
        self.config = config or GroupConfig()
        self._new_member_id = new_member_id
        self._partitions: dict[int, PartitionState] = {}
        self._pending: dict[int, PendingCommit | _PendingSync | _PendingGroupStore | PendingStaticRejoin
                            | PendingConsumerAnswer] = {}
        self._next_token = 0
        self._out = Output()
        self._deleted_topic_ids: set[uuid.UUID] = set()
        """Ids of topics deleted while this coordinator ran: a commit to one still in flight is dropped."""
        self._elected: frozenset[int] = frozenset()
        """Partitions the broker's newest metadata says it leads (`elected`), loaded or not."""
        self.consumer_rules = ConsumerGroupRules(self.config)
        self.topics: dict[str, TopicInfo] = {}
        """The broker's topics for KIP-848 assignments (`set_topics`)."""

    # ----------------------------------------------------------------------------------------
    # Partition ownership and loading

    def partition_for(self, group_id: str) -> int:
        return partition_for(group_id, self.config.offsets_topic_num_partitions)

    def elected(self, partitions: Collection[int]) -> None:
        """The broker's newest metadata names it the leader of `partitions` (and of no other): call
        on every metadata change, before the partitions' logs are open.

        Kafka's coordinator takes a partition on as loading the moment its metadata names it the
        leader (onElection): from then on its groups answer COORDINATOR_LOAD_IN_PROGRESS, which
        clients retry, until loaded. Here the partition is loaded only once the broker has applied
        that image (its logs opened, off the event loop), so a partition named here but not begun
        yet answers as loading too, not NOT_COORDINATOR, which tells a client to look for the
        coordinator again and which librdkafka's committed() gives up on. A broker whose metadata
        does not name it yet answers NOT_COORDINATOR, as Kafka's does."""
        self._elected = frozenset(partitions)

    def begin_loading(self, partition: int) -> None:
        """This broker now leads `partition`: its groups answer COORDINATOR_LOAD_IN_PROGRESS until loaded."""
        self._partitions[partition] = PartitionState(partition)

    def replay(self, partition: int, records: Iterable[tuple[bytes, bytes | None]]) -> None:
        """Apply the partition's records, in log order (may be called several times while loading).

        Raises ConsumerOffsetsRecordError for a corrupt record; the shell should then `unload`.
        """
        state = self._partitions[partition]
        assert state.loading, f"partition {partition} is not loading"
        for key, value in records:
            state.replay(key, value)

    def finish_loading(self, partition: int, now_ms: int) -> None:
        self._partitions[partition].finish_loading(now_ms)
        self._resume_consumer_groups(self._partitions[partition], now_ms)

    def unload(self, partition: int) -> Output:
        """This broker no longer leads `partition` (or could not load it): forget its groups and answer
        their waiting requests. It answers NOT_COORDINATOR from now on, as Kafka's coordinator does
        once it resigned or failed to load, until the metadata names this broker its leader again."""
        self._elected = self._elected - {partition}
        state = self._partitions.pop(partition, None)
        if state is not None:
            for group in state.groups.values():
                for member in group.members.values():
                    self._answer_join(member, JoinAnswer(E.NOT_COORDINATOR, member.member_id))
                    self._answer_sync(member, SyncAnswer(E.NOT_COORDINATOR))
                group.state = GroupState.DEAD
        for token, pending in list(self._pending.items()):
            if pending.partition == partition:
                del self._pending[token]
                if isinstance(pending, PendingCommit):
                    self._commit_failed(pending, E.NOT_COORDINATOR)
                elif isinstance(pending, PendingConsumerAnswer):
                    self._settle_consumer(pending, E.NOT_COORDINATOR)
        return self._flush()

    @property
    def partitions(self) -> dict[int, bool]:
        """Partitions led here -> True once loaded."""
        return {p: not s.loading for p, s in self._partitions.items()}

    def _status(self, group_id: str | None) -> tuple[int, PartitionState | None]:
        """Kafka's validateGroupStatus: a null group id first (INVALID_GROUP_ID: it has no partition;
        a string the schema does not let be null still decodes as one), then NOT_COORDINATOR and
        COORDINATOR_LOAD_IN_PROGRESS."""
        if group_id is None:
            return E.INVALID_GROUP_ID, None
        partition = self.partition_for(group_id)
        state = self._partitions.get(partition)
        if state is None:
            return (E.COORDINATOR_LOAD_IN_PROGRESS if partition in self._elected else E.NOT_COORDINATOR), None
        if state.loading:
            return E.COORDINATOR_LOAD_IN_PROGRESS, None
        return E.NONE, state

    # ----------------------------------------------------------------------------------------
    # Durability and time

    def append_done(self, token: int, now_ms: int) -> Output:
        """The records of the Append with this token are durable."""
        pending = self._pending.pop(token, None)
        if isinstance(pending, PendingCommit):
            self._commit_stored(pending)
        elif isinstance(pending, PendingConsumerAnswer):
            self._settle_consumer(pending, E.NONE)
        elif isinstance(pending, PendingStaticRejoin):
            self._static_rejoin_stored(pending, E.NONE)
        elif isinstance(pending, _PendingSync):
            group = self._partitions[pending.partition].groups.get(pending.group_id)
            if group is not None and group.state is GroupState.COMPLETING_REBALANCE \
                    and group.generation == pending.generation:
                for member in group.members.values():
                    member.assignment = pending.assignments.get(member.member_id, b"")
                    self._answer_sync(member, SyncAnswer(E.NONE, group.protocol_type, group.protocol,
                                                         member.assignment))
                    # Kafka's propagateAssignment: each session starts again with its assignment. A sync
                    # that waited on the durable write (a replica of the partition just killed) would
                    # otherwise expire its member before the first heartbeat of its new generation.
                    member.heartbeat_deadline_ms = now_ms + member.session_timeout_ms
                group.transition(GroupState.STABLE, now_ms)
                log.info("group %s: generation %d stable, its assignment stored", group.group_id, group.generation)
            else:
                log.info("group %s: the assignment of generation %d was stored after the group moved on",
                         pending.group_id, pending.generation)
        return self._flush()

    def append_failed(self, token: int, error: int, now_ms: int) -> Output:
        """The Append with this token failed with `error` (a Kafka error code from the partition log)."""
        pending = self._pending.pop(token, None)
        if isinstance(pending, PendingCommit):
            self._commit_failed(pending, storage_error_for_commit(error))
        elif isinstance(pending, PendingConsumerAnswer):
            self._settle_consumer(pending, storage_error_for_group(error))
        elif isinstance(pending, PendingStaticRejoin):
            self._static_rejoin_stored(pending, storage_error_for_group(error))
        elif isinstance(pending, _PendingSync):
            group = self._partitions[pending.partition].groups.get(pending.group_id)
            if group is not None and group.state is GroupState.COMPLETING_REBALANCE \
                    and group.generation == pending.generation:
                log.info("group %s: the assignment of generation %d could not be stored (error %d); rebalancing",
                         group.group_id, group.generation, error)
                self._reset_syncs(group, storage_error_for_group(error))
                self._maybe_prepare_rebalance(group, now_ms)
        return self._flush()

    def next_deadline(self) -> int | None:
        """The earliest time at which `tick` has something to do, or None."""
        deadlines: list[int] = []
        for state in self._partitions.values():
            for group in state.groups.values():
                if group.state is GroupState.PREPARING_REBALANCE and group.rebalance_deadline_ms is not None:
                    deadlines.append(group.rebalance_deadline_ms)
                deadlines.extend(group.pending_members.values())
                deadlines.extend(m.heartbeat_deadline_ms for m in group.members.values() if not _kept_alive(m))
        consumer = self._consumer_deadline()
        return min(deadlines if consumer is None else [*deadlines, consumer], default=None)

    def tick(self, now_ms: int) -> Output:
        """Expire sessions and pending members, and complete rebalances whose time is up."""
        for state in list(self._partitions.values()):
            if not state.loading:
                for group in list(state.groups.values()):
                    self._expire(group, now_ms)
        self._expire_consumer_groups(now_ms)
        return self._flush()

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
        elif error == E.NONE and not (self.config.group_min_session_timeout_ms <= request.session_timeout_ms
                                      <= self.config.group_max_session_timeout_ms):
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

    def _add_member_and_rebalance(self, handle: Any, group: Group, member_id: str, request: JoinGroup,
                                  now_ms: int) -> None:
        member = Member(member_id, request.group_instance_id, request.client_id, request.client_host,
                        request.rebalance_timeout_ms, request.session_timeout_ms, request.protocol_type,
                        request.protocols, heartbeat_deadline_ms=now_ms + NEW_MEMBER_JOIN_TIMEOUT_MS,
                        join_handle=handle, is_new=True)
        if group.state is GroupState.PREPARING_REBALANCE and group.generation == 0:
            group.new_member_added = True
        group.add(member)
        self._maybe_prepare_rebalance(group, now_ms)

    def _update_member_and_rebalance(self, handle: Any, group: Group, member: Member, request: JoinGroup,
                                     now_ms: int) -> None:
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
        log.info("group %s: preparing to rebalance in state %s with old generation %d", group.group_id,
                 group.state.value, group.generation)
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
        log.info("group %s: generation %d with %d member(s), leader %s, protocol %s", group.group_id,
                 group.generation, len(group.members), group.leader, group.protocol)
        group.transition(GroupState.COMPLETING_REBALANCE, now_ms)
        for member in group.members.values():
            self._answer_join(member, self._join_answer(group, member))
            member.heartbeat_deadline_ms = now_ms + member.session_timeout_ms
            member.is_new = False

    def _join_answer(self, group: Group, member: Member) -> JoinAnswer:
        members: tuple[JoinMember, ...] = ()
        if group.leader == member.member_id and group.protocol is not None:
            members = tuple(JoinMember(m.member_id, m.group_instance_id, m.metadata(group.protocol))
                            for m in group.members.values())
        return JoinAnswer(E.NONE, member.member_id, group.generation, group.protocol_type, group.protocol,
                          group.leader or "", members)

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
        if (request.protocol_type is not None and request.protocol_type != group.protocol_type) or \
                (request.protocol_name is not None and request.protocol_name != group.protocol):
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
            self._pending[token] = _PendingGroupStore(group.group_id, partition)
        else:
            self._pending[token] = _PendingSync(group.group_id, partition, group.generation, assignments)

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
                current = group.current_member_for_instance(leaving.group_instance_id or "") \
                    if leaving.group_instance_id is not None else None
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
    # DescribeGroups and ListGroups

    def describe_group(self, group_id: str) -> DescribedGroup:
        error, state = self._status(group_id)
        if error != E.NONE or state is None:
            return DescribedGroup(group_id, error)
        group = state.groups.get(group_id)
        if group is None:
            return DescribedGroup(group_id, E.NONE)
        stable = group.state is GroupState.STABLE and group.protocol is not None
        members = tuple(DescribedMember(m.member_id, m.group_instance_id, m.client_id, m.client_host,
                                        m.metadata(group.protocol) if stable and group.protocol else b"",
                                        m.assignment if stable else b"")
                        for m in group.members.values())
        return DescribedGroup(group_id, E.NONE, group.state.value, group.protocol_type or "",
                              (group.protocol or "") if stable else "", members)

    def list_groups(self, states: Iterable[str] = (), types: Iterable[str] = ()) -> ListAnswer:
        """Groups of the loaded partitions; COORDINATOR_LOAD_IN_PROGRESS too while any is loading."""
        wanted_states = {s.lower() for s in states}
        wanted_types = {t.lower() for t in types}
        loading = bool(self._elected - self._partitions.keys())
        groups = []
        for state in self._partitions.values():
            loading = loading or state.loading
            for group in state.groups.values() if not wanted_types or "classic" in wanted_types else ():
                if not wanted_states or group.state.value.lower() in wanted_states:
                    groups.append(ListedGroup(group.group_id, group.protocol_type or "", group.state.value))
            for consumer in state.consumer_groups.values() if not wanted_types or "consumer" in wanted_types else ():
                if not wanted_states or consumer.state.value.lower() in wanted_states:
                    groups.append(ListedGroup(consumer.group_id, "consumer", consumer.state.value, "consumer"))
        error = E.COORDINATOR_LOAD_IN_PROGRESS if loading else E.NONE
        return ListAnswer(error, tuple(sorted(groups, key=lambda g: g.group_id)))

    def group(self, group_id: str) -> Group | None:
        """The group's live state (for tests and tools)."""
        state = self._partitions.get(self.partition_for(group_id))
        return state.groups.get(group_id) if state is not None else None

    # ----------------------------------------------------------------------------------------
    # Output plumbing

    def _append(self, partition: int, records: list[tuple[bytes, bytes | None]]) -> int:
        self._next_token += 1
        self._out.appends.append(Append(self._next_token, partition, tuple(records)))
        return self._next_token

    def _answer(self, handle: Any, answer: Any) -> None:
        self._out.answers.append((handle, answer))

    def _answer_join(self, member: Member, answer: JoinAnswer) -> None:
        if member.join_handle is not None:
            self._answer(member.join_handle, answer)
            member.join_handle = None

    def _answer_sync(self, member: Member, answer: SyncAnswer) -> None:
        if member.sync_handle is not None:
            self._answer(member.sync_handle, answer)
            member.sync_handle = None

    def _reply(self, handle: Any, answer: Any) -> Output:
        self._answer(handle, answer)
        return self._flush()

    def _flush(self) -> Output:
        out, self._out = self._out, Output()
        return out


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
