"""AlterPartitionReassignments and ListPartitionReassignments (KIP-455), as Kafka's KRaft controller
(ReplicationControlManager) answers them.

A reassignment moves a partition from its replicas to a target list in three steps, each a
PartitionChangeRecord: (1) this request writes replicas = target + the current replicas leaving,
AddingReplicas and RemovingReplicas (`reassignment_replicas`); (2) the brokers act on the image:
an adding broker creates the replica and follows the leader, which adds it to the ISR through
AlterPartition once it has caught up; (3) the change that brings the last target replica into the
ISR completes the move (`election.build_change`): replicas = target, ISR without the removed
brokers, a new leader if the old one left. The removed brokers then stop fetching and delete their
local log (`quorum.broker.replica_manager`); a tiered topic's remote data stays, the topic lives on.

A null target cancels a reassignment in progress (Kafka's PartitionReassignmentRevert): the adding
replicas go, and the partition is back on its original replicas. A cancellation that would need
an unclean election (only adding replicas in the ISR) is refused unless the topic allows one.

Errors, per partition and with Kafka's messages: UNKNOWN_TOPIC_OR_PARTITION for a topic or
partition that does not exist; INVALID_REPLICA_ASSIGNMENT for an empty target, a broker named twice
or a broker that is not registered; NO_REASSIGNMENT_IN_PROGRESS for cancelling where nothing moves;
INVALID_REPLICATION_FACTOR when the request (v1, KIP-860) forbids changing the replication factor
and the target has another length. The request is applied partition by partition, and the records
of the partitions that succeeded go out together.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Collection, Iterable
from typing import Any, Protocol

from quorum.controller.election import PartitionChange, PartitionState, build_change
from quorum.controller.reassignment_replicas import ReassignmentReplicas, Revert
from quorum.controller.results import ApiError
from quorum.controller.validation import check_manual_replicas
from quorum.controller.view import ControllerView, TopicView
from quorum.wire.errors import ErrorCode
from quorum.wire.protocol import APIS

log = logging.getLogger(__name__)

ALTER_PARTITION_REASSIGNMENTS, LIST_PARTITION_REASSIGNMENTS = 45, 46


class PartitionStates(Protocol):
    """The controller's partitions with the changes made earlier in the same result laid over them."""

    def get(self, topic: TopicView, index: int) -> PartitionState | None: ...

    def apply(self, change: PartitionChange) -> None: ...


def change_reassignment(state: PartitionState, target: Collection[int], *, registered: Collection[int],
                        is_acceptable_leader: Callable[[int], bool],
                        allow_replication_factor_change: bool = True) -> PartitionChange | None:
    """Start (or replace) a reassignment of the partition to `target`: Kafka's
    changePartitionReassignment. A target that the ISR already allows completes at once (reordering
    the same replicas, or dropping some); None when nothing changes. The election, if the leader
    leaves, is a clean one (Kafka's builder default), whatever the topic's unclean setting."""
    check_manual_replicas(list(target), registered=registered, replication_factor=None)
    original = [broker for broker in state.replicas if broker not in state.adding]
    if not allow_replication_factor_change and len(target) != len(original):
        raise ApiError(ErrorCode.INVALID_REPLICATION_FACTOR,
                       f"The replication factor is changed from {len(original)} to {len(target)} but "
                       "AllowReplicationFactorChange is false.")
    return build_change(state, target=ReassignmentReplicas.of(state.replicas, list(target), state.adding),
                        is_acceptable_leader=is_acceptable_leader)


def cancel_reassignment(state: PartitionState, name: str, *, is_acceptable_leader: Callable[[int], bool],
                        unclean: bool = False) -> PartitionChange | None:
    """Cancel the reassignment in progress: back to the replicas it started from (Kafka's
    cancelPartitionReassignment)."""
    if not state.reassigning:
        raise ApiError(ErrorCode.NO_REASSIGNMENT_IN_PROGRESS, "No partition reassignment is in progress for "
                       f"{name}-{state.partition}.")
    revert = Revert.of(state.replicas, state.isr, state.adding)
    if revert.unclean and not unclean:
        raise ApiError(ErrorCode.INVALID_REPLICA_ASSIGNMENT, f"Unable to revert partition assignment for "
                       f"{name}:{state.partition} because it would require an unclean leader election.")
    return build_change(state, target_isr=revert.isr, target=ReassignmentReplicas(revert.replicas, (), ()),
                        is_acceptable_leader=is_acceptable_leader, unclean=unclean)


def alter_partition_reassignments(request: Any, view: ControllerView, partitions: PartitionStates, *,
                                  is_acceptable_leader: Callable[[int], bool],
                                  unclean_topics: Collection[str]) -> tuple[list[Any], Any]:
    """The records and the AlterPartitionReassignments response for `request`."""
    schema = APIS[ALTER_PARTITION_REASSIGNMENTS].response
    topic_result = schema.ReassignableTopicResponse
    partition_result = topic_result.ReassignablePartitionResponse
    allow_change = getattr(request, "allow_replication_factor_change", True)
    out: list[Any] = []
    topics = []
    succeeded = total = 0
    for asked in request.topics:
        answers = []
        for part in asked.partitions:
            total += 1
            try:
                state = _partition(view, partitions, asked.name, part.partition_index)
                if part.replicas is None:
                    change = cancel_reassignment(state, asked.name, is_acceptable_leader=is_acceptable_leader,
                                                 unclean=asked.name in unclean_topics)
                else:
                    change = change_reassignment(state, part.replicas, registered=view.registrations.keys(),
                                                 is_acceptable_leader=is_acceptable_leader,
                                                 allow_replication_factor_change=allow_change)
            except ApiError as error:
                log.info("Unable to alter partition reassignment for %s:%d: %s", asked.name, part.partition_index,
                         error)
                answers.append(partition_result(partition_index=part.partition_index, error_code=error.code,
                                                error_message=error.message))
                continue
            if change is not None:
                out.append(change.record)
                partitions.apply(change)
            succeeded += 1
            answers.append(partition_result(partition_index=part.partition_index, error_code=0, error_message=None))
        topics.append(topic_result(name=asked.name, partitions=answers))
    log.info("Successfully altered %d out of %d partition reassignment(s).", succeeded, total)
    return out, schema(throttle_time_ms=0, allow_replication_factor_change=allow_change, error_code=0,
                       error_message=None, responses=topics)


def list_partition_reassignments(request: Any, view: ControllerView) -> Any:
    """The ListPartitionReassignments response: every partition of the named ones (all partitions
    of the cluster when Topics is null) that is being reassigned; unknown names are left out."""
    schema = APIS[LIST_PARTITION_REASSIGNMENTS].response
    topic_result = schema.OngoingTopicReassignment
    partition_result = topic_result.OngoingPartitionReassignment
    if request.topics is None:
        asked: Iterable[tuple[TopicView, Collection[int] | None]] = ((t, None) for t in view.topics.values())
    else:
        asked = ((view.topics[t.name], set(t.partition_indexes)) for t in request.topics if t.name in view.topics)
    topics = []
    for topic, indexes in asked:
        ongoing = [partition_result(partition_index=p.partition, replicas=list(p.replicas),
                                    adding_replicas=list(p.adding_replicas),
                                    removing_replicas=list(p.removing_replicas))
                   for p in topic.partitions
                   if (indexes is None or p.partition in indexes) and (p.adding_replicas or p.removing_replicas)]
        if ongoing:
            topics.append(topic_result(name=topic.name, partitions=ongoing))
    return schema(throttle_time_ms=0, error_code=0, error_message=None, topics=topics)


def _partition(view: ControllerView, partitions: PartitionStates, name: str, index: int) -> PartitionState:
    topic = view.topics.get(name)
    if topic is None:
        raise ApiError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"Unable to find a topic named {name}.")
    state = partitions.get(topic, index)
    if state is None:
        raise ApiError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"Unable to find partition {name}:{index}.")
    return state


__all__ = ["alter_partition_reassignments", "cancel_reassignment", "change_reassignment",
           "list_partition_reassignments"]
