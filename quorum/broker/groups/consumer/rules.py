"""KIP-848's heartbeat rules for one consumer group (Kafka's GroupMetadataManager.consumerGroupHeartbeat).

A heartbeat is checked (`validate`), then applied to its group: a join (epoch 0) adds the member, a
known member's epoch must be its current one (or the previous one, when its owned partitions show
it merely missed the answer that moved it on: FENCED_MEMBER_EPOCH otherwise), its subscription is
updated, the group epoch goes up when the subscriptions or the subscribed topics' partition counts
changed, the target assignment is computed again when the group epoch is ahead of it, and the
member is moved toward its target (`member.reconcile`). A member whose session lapses, or that does
not revoke partitions within its rebalance timeout, is removed (`expire`). No clock or I/O: the
caller passes `now_ms` and the topics of its metadata.

A static member (InstanceId) that leaves for a while (epoch -2) keeps its partitions until its
session lapses; the next member with its instance id takes them over without a rebalance, and one
that comes while the instance id is still held is refused UNRELEASED_INSTANCE_ID.
"""

from __future__ import annotations

import logging
import re
import uuid
from collections.abc import Callable, Mapping
from dataclasses import replace

from quorum.broker.groups.config import GroupConfig
from quorum.broker.groups.consumer.assignors import Partitions, TopicInfo
from quorum.broker.groups.consumer.events import (
    JOIN_EPOCH,
    LEAVE_EPOCH,
    STATIC_LEAVE_EPOCH,
    ConsumerHeartbeat,
    ConsumerHeartbeatAnswer,
    DescribedConsumerGroup,
    DescribedConsumerMember,
)
from quorum.broker.groups.consumer.group import ConsumerGroup
from quorum.broker.groups.consumer.member import ConsumerMember, FencedMemberError, MemberState, compiled, reconcile
from quorum.wire.errors import ErrorCode

E = ErrorCode
log = logging.getLogger(__name__)


def random_member_id() -> str:
    """A member id for a client that sent none (KIP-1082 has the client pick one; older ones do not)."""
    return str(uuid.uuid4())


def validate(request: ConsumerHeartbeat, offered_assignors: tuple[str, ...]) -> ConsumerHeartbeatAnswer | None:
    """Kafka's throwIfConsumerGroupHeartbeatRequestIsInvalid: the refusal, or None when the request is well formed."""

    def invalid(message: str) -> ConsumerHeartbeatAnswer:
        return ConsumerHeartbeatAnswer(E.INVALID_REQUEST, message)

    if not request.group_id:
        return invalid("GroupId can't be empty.")
    if request.instance_id == "":
        return invalid("InstanceId can't be empty.")
    if request.rack_id == "":
        return invalid("RackId can't be empty.")
    epoch = request.member_epoch
    if epoch > 0 or epoch == LEAVE_EPOCH:
        if not request.member_id:
            return invalid("MemberId can't be empty.")
    elif epoch == JOIN_EPOCH:
        if request.rebalance_timeout_ms == -1:
            return invalid("RebalanceTimeoutMs must be provided in first request.")
        if request.owned is None or request.owned:
            return invalid("TopicPartitions must be empty when (re-)joining.")
        if not request.subscribed_topic_names and not request.subscribed_topic_regex:
            return invalid("SubscribedTopicNames or SubscribedTopicRegex must be set in first request.")
    elif epoch == STATIC_LEAVE_EPOCH:
        if not request.member_id:
            return invalid("MemberId can't be empty.")
        if request.instance_id is None:
            return invalid("InstanceId can't be null.")
    else:
        return invalid("MemberEpoch is invalid.")
    if request.subscribed_topic_regex:
        try:
            compiled(request.subscribed_topic_regex)
        except re.error as exc:
            return ConsumerHeartbeatAnswer(
                E.INVALID_REGULAR_EXPRESSION,
                f"SubscribedTopicRegex `{request.subscribed_topic_regex}` is not a valid regular expression: {exc}.",
            )
    if request.server_assignor is not None and request.server_assignor not in offered_assignors:
        return ConsumerHeartbeatAnswer(
            E.UNSUPPORTED_ASSIGNOR,
            f"ServerAssignor {request.server_assignor} is not supported. "
            f"Supported assignors: {', '.join(offered_assignors)}.",
        )
    return None


def assignment_text(partitions: Partitions) -> str:
    """Kafka's assignmentToString: topicId-[partitions] per topic, for the member transitions logged."""
    by_topic: dict[uuid.UUID, list[int]] = {}
    for topic_id, index in partitions:
        by_topic.setdefault(topic_id, []).append(index)
    return ", ".join(f"{topic_id}-{sorted(indexes)}" for topic_id, indexes in sorted(by_topic.items()))


class ConsumerGroupRules:
    """The heartbeat, expiry and describe rules, with the coordinator's settings."""

    def __init__(self, config: GroupConfig, new_member_id: Callable[[], str] = random_member_id) -> None:
        self.config = config
        self.new_member_id = new_member_id

    def answer(self, member: ConsumerMember, assignment: Partitions | None) -> ConsumerHeartbeatAnswer:
        return ConsumerHeartbeatAnswer(
            E.NONE,
            None,
            member.member_id,
            member.member_epoch,
            self.config.group_consumer_heartbeat_interval_ms,
            assignment,
        )

    def heartbeat(
        self, group: ConsumerGroup, request: ConsumerHeartbeat, now_ms: int, topics: Mapping[str, TopicInfo]
    ) -> ConsumerHeartbeatAnswer:
        """Apply a validated heartbeat to `group` (its due expirations already applied: `expire`)."""
        if request.member_epoch in (LEAVE_EPOCH, STATIC_LEAVE_EPOCH):
            return self._leave(group, request)
        found = self._member(group, request)
        if isinstance(found, ConsumerHeartbeatAnswer):
            return found
        member, is_new = found
        updated = replace(
            member,
            instance_id=request.instance_id if request.instance_id is not None else member.instance_id,
            rack_id=request.rack_id if request.rack_id is not None else member.rack_id,
            rebalance_timeout_ms=request.rebalance_timeout_ms
            if request.rebalance_timeout_ms != -1
            else member.rebalance_timeout_ms,
            server_assignor=request.server_assignor if request.server_assignor is not None else member.server_assignor,
            subscribed_topic_names=tuple(sorted(set(request.subscribed_topic_names)))
            if request.subscribed_topic_names is not None
            else member.subscribed_topic_names,
            subscribed_topic_regex=request.subscribed_topic_regex
            if request.subscribed_topic_regex is not None
            else member.subscribed_topic_regex,
            client_id=request.client_id,
            client_host=request.client_host,
        )
        bump = (
            is_new
            or updated.subscribed_topic_names != member.subscribed_topic_names
            or updated.subscribed_topic_regex != member.subscribed_topic_regex
            or updated.server_assignor != member.server_assignor
        )
        group.put_member(updated)
        subscribed = {name: topics[name] for name in sorted(group.subscribed_topics(topics))}
        if subscribed != group.subscription_metadata:
            group.subscription_metadata = subscribed
            bump = True
        if bump:
            group.group_epoch += 1
        if group.group_epoch > group.assignment_epoch:
            group.compute_target(self.config.group_consumer_assignors, group.subscription_metadata)
        try:
            reconciled = self._reconcile(group, updated, request.owned, now_ms)
        except FencedMemberError as exc:
            return ConsumerHeartbeatAnswer(E.FENCED_MEMBER_EPOCH, str(exc))
        group.session_deadlines[reconciled.member_id] = now_ms + self.config.group_consumer_session_timeout_ms
        full = request.member_epoch == JOIN_EPOCH or (
            request.rebalance_timeout_ms != -1
            and request.subscribed_topic_names is not None
            and request.owned is not None
        )
        changed = is_new or reconciled.assigned != member.assigned
        return self.answer(reconciled, reconciled.assigned if full or changed else None)

    def _reconcile(
        self, group: ConsumerGroup, member: ConsumerMember, owned: Partitions | None, now_ms: int
    ) -> ConsumerMember:
        """Kafka's maybeReconcile, and its rebalance timer for a member that has partitions to revoke."""
        if member.is_reconciled_to(group.assignment_epoch):
            return member
        target = group.target.get(member.member_id, frozenset())
        reconciled = reconcile(member, group.assignment_epoch, target, group.partition_epoch, owned)
        group.put_member(reconciled)
        if reconciled != member:
            log.info("group %s: member %s new assignment state: epoch=%d, previousEpoch=%d, state=%s, "
                     "assignedPartitions=%s, partitionsPendingRevocation=%s (its heartbeat said it owns %s)",
                     group.group_id, member.member_id, reconciled.member_epoch, reconciled.previous_member_epoch,
                     reconciled.state.name, assignment_text(reconciled.assigned),
                     assignment_text(reconciled.pending_revocation),
                     "nothing new" if owned is None else assignment_text(owned))
        if reconciled.state is MemberState.UNREVOKED_PARTITIONS:
            pending = group.revocation_deadlines.get(member.member_id)
            if pending is None or pending[1] != reconciled.member_epoch:
                group.revocation_deadlines[member.member_id] = (
                    now_ms + max(reconciled.rebalance_timeout_ms, 0),
                    reconciled.member_epoch,
                )
        else:
            group.revocation_deadlines.pop(member.member_id, None)
        return reconciled

    def _member(
        self, group: ConsumerGroup, request: ConsumerHeartbeat
    ) -> tuple[ConsumerMember, bool] | ConsumerHeartbeatAnswer:
        """The member a heartbeat is from and whether it is new (Kafka's getOrMaybeSubscribeDynamic/Static
        ConsumerGroupMember), or the refusal. A static member (InstanceId) that joins while its instance
        id's member is away (epoch -2) takes that member's place and its partitions, without a rebalance."""
        joining = request.member_epoch == JOIN_EPOCH
        if request.instance_id is not None:
            holder = group.static_member(request.instance_id)
            if joining and holder is not None:
                if holder.member_epoch != STATIC_LEAVE_EPOCH:
                    return ConsumerHeartbeatAnswer(
                        E.UNRELEASED_INSTANCE_ID,
                        f"Static member {request.member_id} with instance id {request.instance_id} cannot join the "
                        f"group because the instance id is owned by {holder.member_id} member.",
                    )
                member = replace(
                    holder, member_id=request.member_id or self.new_member_id(), member_epoch=0, previous_member_epoch=0
                )
                group.replace_member(holder.member_id, member)
                return member, False
            if not joining:
                refused = _static_error(holder, request)
                if refused is not None:
                    return refused
        member = group.members.get(request.member_id)
        if joining:
            if member is not None:  # a restart under the same id: it owns nothing now (validated)
                group.remove_member(member.member_id)
            elif len(group.members) >= self.config.group_consumer_max_size:
                return ConsumerHeartbeatAnswer(
                    E.GROUP_MAX_SIZE_REACHED,
                    "The consumer group has reached its "
                    f"maximum capacity of {self.config.group_consumer_max_size} members.",
                )
            return ConsumerMember(request.member_id or self.new_member_id()), True
        if member is None:
            return ConsumerHeartbeatAnswer(
                E.UNKNOWN_MEMBER_ID, f"Member {request.member_id} is not a member of group {group.group_id}."
            )
        fenced = _epoch_error(member, request.member_epoch, request.owned)
        if fenced is not None:
            return ConsumerHeartbeatAnswer(E.FENCED_MEMBER_EPOCH, fenced)
        return member, False

    def _leave(self, group: ConsumerGroup, request: ConsumerHeartbeat) -> ConsumerHeartbeatAnswer:
        """Kafka's consumerGroupLeave: the member's partitions are free at once and the group epoch goes
        up; a static member leaving for a while (epoch -2) keeps them until its session lapses."""
        if request.instance_id is not None:
            refused = _static_error(group.static_member(request.instance_id), request)
            if refused is not None:
                return refused
            if request.member_epoch == STATIC_LEAVE_EPOCH:
                member = group.members[request.member_id]
                group.put_member(replace(member, member_epoch=STATIC_LEAVE_EPOCH, pending_revocation=frozenset()))
                group.revocation_deadlines.pop(member.member_id, None)
                return ConsumerHeartbeatAnswer(E.NONE, None, member.member_id, STATIC_LEAVE_EPOCH)
        if group.remove_member(request.member_id) is None:
            return ConsumerHeartbeatAnswer(
                E.UNKNOWN_MEMBER_ID, f"Member {request.member_id} is not a member of group {group.group_id}."
            )
        return ConsumerHeartbeatAnswer(
            E.NONE, None, request.member_id, request.member_epoch, self.config.group_consumer_heartbeat_interval_ms
        )

    def expire(self, group: ConsumerGroup, now_ms: int) -> list[str]:
        """Remove members whose session lapsed or whose revocation outlived their rebalance timeout;
        their ids, for the log."""
        gone = [member_id for member_id, deadline in group.session_deadlines.items() if deadline <= now_ms]
        for member_id, (deadline, epoch) in list(group.revocation_deadlines.items()):
            if deadline > now_ms:
                continue
            del group.revocation_deadlines[member_id]  # due: it fences the member, or no longer applies
            member = group.members.get(member_id)
            still_revoking = (
                member is not None and member.member_epoch == epoch and member.state is MemberState.UNREVOKED_PARTITIONS
            )
            if still_revoking and member_id not in gone:
                gone.append(member_id)
        for member_id in gone:
            group.remove_member(member_id)
        return gone

    def resume(self, group: ConsumerGroup, now_ms: int) -> None:
        """A group a coordinator just loaded from its records: every member gets a fresh session (as
        Kafka's coordinator schedules them when it loads), and one still revoking a fresh rebalance timeout."""
        for member in group.members.values():
            group.session_deadlines[member.member_id] = now_ms + self.config.group_consumer_session_timeout_ms
            if member.state is MemberState.UNREVOKED_PARTITIONS:
                deadline = now_ms + max(member.rebalance_timeout_ms, 0)
                group.revocation_deadlines[member.member_id] = (deadline, member.member_epoch)

    @staticmethod
    def next_deadline(group: ConsumerGroup) -> int | None:
        deadlines = [*group.session_deadlines.values(), *(d for d, _ in group.revocation_deadlines.values())]
        return min(deadlines, default=None)

    def describe(self, group: ConsumerGroup) -> DescribedConsumerGroup:
        members = tuple(
            DescribedConsumerMember(
                m.member_id,
                m.instance_id,
                m.rack_id,
                m.member_epoch,
                m.client_id,
                m.client_host,
                m.subscribed_topic_names,
                m.subscribed_topic_regex or None,
                m.assigned,
                group.target.get(m.member_id, frozenset()),
            )
            for m in group.members.values()
        )
        assignor = group.choose_assignor(self.config.group_consumer_assignors)
        return DescribedConsumerGroup(
            group.group_id,
            E.NONE,
            None,
            group.state.value,
            group.group_epoch,
            group.assignment_epoch,
            assignor,
            members,
        )


def _static_error(holder: ConsumerMember | None, request: ConsumerHeartbeat) -> ConsumerHeartbeatAnswer | None:
    """Kafka's throwIfStaticMemberIsUnknown and throwIfInstanceIdIsFenced."""
    if holder is None:
        return ConsumerHeartbeatAnswer(E.UNKNOWN_MEMBER_ID, f"Instance id {request.instance_id} is unknown.")
    if holder.member_id != request.member_id:
        return ConsumerHeartbeatAnswer(
            E.FENCED_INSTANCE_ID,
            f"Static member {request.member_id} with instance id {request.instance_id} was fenced by member "
            f"{holder.member_id}.",
        )
    return None


def _epoch_error(member: ConsumerMember, received: int, owned: Partitions | None) -> str | None:
    """Kafka's throwIfConsumerGroupMemberEpochIsInvalid: why the epoch is refused, or None."""
    if received > member.member_epoch:
        return (
            f"The consumer group member has a greater member epoch ({received}) than the one known by the group "
            f"coordinator ({member.member_epoch}). The member must abandon all its partitions and rejoin."
        )
    if received < member.member_epoch and (
        received != member.previous_member_epoch or owned is None or not owned <= member.assigned
    ):
        return (
            f"The consumer group member has a smaller member epoch ({received}) than the one known by the group "
            f"coordinator ({member.member_epoch}). The member must abandon all its partitions and rejoin."
        )
    return None
