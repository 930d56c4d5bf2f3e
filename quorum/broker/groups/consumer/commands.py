"""KIP-848 groups inside the group coordinator: ConsumerGroupHeartbeat, ConsumerGroupDescribe, their
timers, and how a consumer group meets the classic APIs (Kafka's GroupMetadataManager around
consumerGroupHeartbeat, and ConsumerGroup.validateOffsetCommit / validateOffsetFetch).

Both kinds of group live in the same `__consumer_offsets` partitions (`PartitionState.groups` for
classic ones, `consumer_groups` for these) and share committed offsets; a group id is one kind or the
other. An empty group of one kind becomes the other kind when a member of the other kind joins (Kafka
deletes the empty group); a non-empty one refuses it: a consumer-protocol member of a classic group
gets GROUP_ID_NOT_FOUND, as from Kafka, and a classic member of a consumer group gets
INCONSISTENT_GROUP_PROTOCOL. Kafka's default `group.consumer.migration.policy` would instead let a
classic member with the consumer embedded protocol join the consumer group (online migration): not
done here, and the answer is the error Kafka gives when the member's protocols are not supported.

Every change to a consumer group is written to `__consumer_offsets` as Kafka's records
(`consumer.records`), and a heartbeat is answered once they are durable, so a coordinator that
loads the partition later resumes the group where it was. A heartbeat whose write fails is answered
with its error and its change is reverted, as Kafka's CoordinatorRuntime reverts its timeline to the
snapshot before a failed write: the group in memory stays what the log says, and the member, told
the error, sends its change again. Heartbeats of the same group answered after the failed one were
computed from the reverted state, so they are answered with the same error too (Kafka's revert
takes their changes back with it); their records, already on their way to the log, may still land
there (Kafka would not have written them), the one way the log and memory can differ. Session timers
are not reverted (Kafka's timers are not part of its timeline): a member whose heartbeat arrived
keeps the session it renewed. Expirations' writes are not tracked.
"""

from __future__ import annotations

import copy
import logging
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from quorum.broker.groups.config import GroupConfig
from quorum.broker.groups.consumer.assignors import TopicInfo
from quorum.broker.groups.consumer.events import (
    JOIN_EPOCH,
    ConsumerHeartbeat,
    ConsumerHeartbeatAnswer,
    DescribedConsumerGroup,
)
from quorum.broker.groups.consumer.group import ConsumerGroup
from quorum.broker.groups.consumer.records import image, records
from quorum.broker.groups.consumer.rules import ConsumerGroupRules, validate
from quorum.broker.groups.events import Output
from quorum.broker.groups.group import GroupState
from quorum.broker.groups.partition_state import PartitionState
from quorum.wire.consumer_offsets import GroupKey, encode_record
from quorum.wire.errors import ErrorCode

E = ErrorCode
OFFSET_COMMIT_MEMBER_EPOCH_VERSION = 9
"""OffsetCommit and OffsetFetch versions from which a consumer-protocol member sends its member epoch."""

log = logging.getLogger(__name__)


@dataclass(slots=True)
class PendingConsumerAnswer:
    """A heartbeat answer that waits for its group's records to be durable, and how to take the
    heartbeat's change back if they will not be."""

    handle: Any
    partition: int
    answer: ConsumerHeartbeatAnswer
    group: ConsumerGroup | None = None
    """The live group the heartbeat changed (None: nothing to revert)."""
    before: ConsumerGroup | None = None
    """A copy of `group` as it was before the heartbeat; None when the heartbeat created it."""
    token: int = 0


class ConsumerCommands:
    """The consumer-group half of `GroupCoordinator`, which holds the partitions and the output plumbing."""

    config: GroupConfig
    consumer_rules: ConsumerGroupRules
    topics: Mapping[str, TopicInfo]
    _partitions: dict[int, PartitionState]

    _pending: dict[int, Any]

    def _status(self, group_id: str | None) -> tuple[int, PartitionState | None]: ...
    def _answer(self, handle: Any, answer: Any) -> None: ...
    def _flush(self) -> Output: ...
    def _append(self, partition: int, records: list[tuple[bytes, bytes | None]]) -> int: ...
    def _reply(self, handle: Any, answer: Any) -> Output: ...

    def set_topics(self, topics: Mapping[str, TopicInfo]) -> None:
        """The broker's metadata changed: the topics (name -> id and partition count) assignments use."""
        self.topics = topics

    def consumer_group_heartbeat(self, handle: Any, request: ConsumerHeartbeat, now_ms: int) -> Output:
        refused = validate(request, self.config.group_consumer_assignors)
        if refused is not None:
            return self._reply(handle, refused)
        error, state = self._status(request.group_id)
        if error != E.NONE or state is None:
            return self._reply(handle, ConsumerHeartbeatAnswer(error))
        group = state.consumer_groups.get(request.group_id)
        if group is None:
            classic = state.groups.get(request.group_id)
            if classic is not None and (classic.members or request.member_epoch != JOIN_EPOCH):
                return self._reply(
                    handle,
                    ConsumerHeartbeatAnswer(E.GROUP_ID_NOT_FOUND, f"Group {request.group_id} is not a consumer group"),
                )
            if request.member_epoch != JOIN_EPOCH:
                return self._reply(
                    handle,
                    ConsumerHeartbeatAnswer(E.GROUP_ID_NOT_FOUND, f"Consumer group {request.group_id} not found."),
                )
            if classic is not None:  # Kafka's maybeDeleteEmptyClassicGroup
                del state.groups[request.group_id]
                classic.state = GroupState.DEAD
                self._append(state.partition, [encode_record(GroupKey(request.group_id), None)])
            group = state.consumer_groups[request.group_id] = ConsumerGroup(request.group_id)
            created = True
        else:
            created = False
        self._expire_consumer_group(state, group, now_ms)
        snapshot = None if created else copy.deepcopy(group)
        before = image(group)
        answer = self.consumer_rules.heartbeat(group, request, now_ms, self.topics)
        if group.group_epoch != before.group_epoch:
            log.info("group %s: group epoch %d (%d member(s))", group.group_id, group.group_epoch, len(group.members))
        written = records(group.group_id, before, image(group))
        if not written:
            return self._reply(handle, answer)
        token = self._append(state.partition, written)
        self._pending[token] = PendingConsumerAnswer(handle, state.partition, answer, group, snapshot, token)
        return self._flush()

    def _settle_consumer(self, pending: PendingConsumerAnswer, error: int) -> None:
        """A heartbeat's records are durable (NONE) or will not be (`error`): answer it; on an error, take its
        change back first (see the module docstring)."""
        if error != E.NONE and pending.group is not None:
            self._revert_consumer(pending, error)
        self._answer(pending.handle, pending.answer if error == E.NONE else ConsumerHeartbeatAnswer(error))

    def _revert_consumer(self, failed: PendingConsumerAnswer, error: int) -> None:
        """Put the group back as it was before the failed heartbeat (Kafka's revertLastWrittenOffset), in
        place, so that later heartbeats' pending answers still name it; those are answered `error` and
        revert nothing themselves (their snapshots hold the failed change). A group the heartbeat created
        is removed. Nothing is done when the partition or the group is no longer the one changed."""
        group = failed.group
        assert group is not None
        state = self._partitions.get(failed.partition)
        if state is None or state.loading or state.consumer_groups.get(group.group_id) is not group:
            return
        for later in self._pending.values():
            if isinstance(later, PendingConsumerAnswer) and later.group is group and later.token > failed.token:
                later.answer, later.group = ConsumerHeartbeatAnswer(error), None
        if failed.before is None:
            del state.consumer_groups[group.group_id]
            group.dead = True
            log.info("group %s: its creation could not be written (error %d); removed", group.group_id, error)
            return
        sessions = group.session_deadlines
        for name in ConsumerGroup.__slots__:
            setattr(group, name, getattr(failed.before, name))
        group.session_deadlines = {m: sessions.get(m, d) for m, d in group.session_deadlines.items()}
        log.info("group %s: a heartbeat's change could not be written (error %d); back to group epoch %d",
                 group.group_id, error, group.group_epoch)

    def _resume_consumer_groups(self, state: PartitionState, now_ms: int) -> None:
        """A loaded partition's consumer groups start their timers (`ConsumerGroupRules.resume`)."""
        for group in state.consumer_groups.values():
            self.consumer_rules.resume(group, now_ms)

    def describe_consumer_group(self, group_id: str) -> DescribedConsumerGroup:
        """ConsumerGroupDescribe for one group (a query: answered at once)."""
        if not group_id:
            return DescribedConsumerGroup(group_id, E.INVALID_GROUP_ID, "GroupId can't be empty.")
        error, state = self._status(group_id)
        if error != E.NONE or state is None:
            return DescribedConsumerGroup(group_id, error)
        group = state.consumer_groups.get(group_id)
        if group is None:
            message = (
                f"Group {group_id} is not a consumer group."
                if group_id in state.groups
                else f"Group {group_id} not found."
            )
            return DescribedConsumerGroup(group_id, E.GROUP_ID_NOT_FOUND, message)
        return self.consumer_rules.describe(group)

    def consumer_group(self, group_id: str) -> ConsumerGroup | None:
        """The consumer group's live state (for tests and tools)."""
        error, state = self._status(group_id)
        return state.consumer_groups.get(group_id) if state is not None else None

    # ----------------------------------------------------------------------------------------
    # Timers

    def _consumer_deadline(self) -> int | None:
        deadlines = [
            self.consumer_rules.next_deadline(group)
            for state in self._partitions.values()
            for group in state.consumer_groups.values()
        ]
        return min((d for d in deadlines if d is not None), default=None)

    def _expire_consumer_groups(self, now_ms: int) -> None:
        for state in self._partitions.values():
            if not state.loading:
                for group in state.consumer_groups.values():
                    self._expire_consumer_group(state, group, now_ms)

    def _expire_consumer_group(self, state: PartitionState, group: ConsumerGroup, now_ms: int) -> None:
        """Remove the members whose time is up, and write the group's records for it."""
        before = image(group)
        for member_id in self.consumer_rules.expire(group, now_ms):
            log.info(
                "group %s: member %s removed (session or rebalance timeout); group epoch %d",
                group.group_id,
                member_id,
                group.group_epoch,
            )
        written = records(group.group_id, before, image(group))
        if written:
            self._append(state.partition, written)

    # ----------------------------------------------------------------------------------------
    # The classic APIs meeting consumer groups

    def classic_join_error(self, state: PartitionState, group_id: str) -> int:
        """A classic JoinGroup to `group_id`: INCONSISTENT_GROUP_PROTOCOL when a consumer group with members
        holds the id; an empty one is deleted so the classic group can take its place (as Kafka converts it)."""
        group = state.consumer_groups.get(group_id)
        if group is None:
            return E.NONE
        if group.members:
            return E.INCONSISTENT_GROUP_PROTOCOL
        del state.consumer_groups[group_id]
        group.dead = True
        self._append(state.partition, records(group_id, image(group), None))
        return E.NONE

    def consumer_commit_error(
        self, state: PartitionState, group_id: str, member_id: str, member_epoch: int, version: int, now_ms: int
    ) -> int | None:
        """Kafka's ConsumerGroup.validateOffsetCommit for a commit to a consumer group (None: not one)."""
        group = state.consumer_groups.get(group_id)
        if group is None:
            return None
        self._expire_consumer_group(state, group, now_ms)
        if member_epoch < 0 and not group.members:
            return E.NONE
        member = group.members.get(member_id)
        if member is None:
            return E.UNKNOWN_MEMBER_ID
        if version < OFFSET_COMMIT_MEMBER_EPOCH_VERSION:
            return E.UNSUPPORTED_VERSION
        if member_epoch != member.member_epoch:
            return E.STALE_MEMBER_EPOCH
        return E.NONE

    def consumer_fetch_error(
        self, state: PartitionState, group_id: str, member_id: str | None, member_epoch: int
    ) -> int:
        """Kafka's ConsumerGroup.validateOffsetFetch: a fetch naming a member must come from a current one."""
        group = state.consumer_groups.get(group_id)
        if group is None or (member_id is None and member_epoch < 0):
            return E.NONE
        member = group.members.get(member_id or "")
        if member is None:
            return E.UNKNOWN_MEMBER_ID
        return E.NONE if member_epoch == member.member_epoch else E.STALE_MEMBER_EPOCH
