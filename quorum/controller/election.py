"""Partition leader and ISR changes, as Kafka's PartitionChangeBuilder makes them (without ELR).

A change is a PartitionChangeRecord holding only what changed, `Isr` when the ISR changes, plus
`Leader` in every change (see below). Replaying it bumps the partition epoch by one, and the
leader epoch by one (Kafka's PartitionRegistration.merge: a record whose Leader is not -2 bumps
the leader epoch, even to the same leader).

Leader election (Kafka's ONLINE election): the current leader stays if it is still in the target
ISR and acceptable; otherwise the first replica, in replica order, that is in the target ISR and
acceptable; otherwise -1 (NO_LEADER). Acceptable means registered, unfenced and not in controlled
shutdown, as the caller's predicate says. Without ELR the ISR never becomes empty: when the last
member goes, the ISR keeps it and the leader becomes -1, so that the partition comes back with
that broker when it is unfenced (which then elects it, see `elect_leader`).

The leader epoch is bumped by every change of the leader *or* the ISR (KIP-631's IsrChangeRecord:
"an epoch that gets incremented each time we change the ISR"; KIP-232 clients compare
(topic_epoch, leader_epoch), so an ISR change must show in it). A record that changes only the
ISR therefore also sets Leader, to the current leader: Kafka's replay bumps the leader epoch for
it too (as Kafka before 3.6 did for ISR shrinks), and so does this project's image, which bumps
on a set Leader or a set Isr. Kafka from 3.6 (KAFKA-15021) bumps on leader changes only.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from quorum.controller import records
from quorum.controller.records import NO_LEADER, NO_LEADER_CHANGE
from quorum.controller.results import INVALID_UPDATE_VERSION, ApiError
from quorum.controller.view import PartitionView
from quorum.wire.errors import ErrorCode

LEADER_RECOVERY_RECOVERED = 0
LEADER_RECOVERY_RECOVERING = 1


@dataclass(frozen=True, slots=True)
class PartitionState:
    """The controller's working copy of one partition (what the image holds, or will once replayed)."""

    topic_id: uuid.UUID
    partition: int
    replicas: tuple[int, ...]
    isr: tuple[int, ...]
    leader: int
    leader_epoch: int
    partition_epoch: int

    @classmethod
    def of(cls, topic_id: uuid.UUID, view: PartitionView) -> PartitionState:
        return cls(topic_id, view.partition, tuple(view.replicas), tuple(view.isr), view.leader, view.leader_epoch,
                   view.partition_epoch)

    @property
    def key(self) -> tuple[uuid.UUID, int]:
        return self.topic_id, self.partition

    def merge(self, *, isr: Sequence[int] | None, leader: int) -> PartitionState:
        """The state after a PartitionChangeRecord with these Isr and Leader fields, as this
        project's image replays it: the leader epoch goes up when Leader or Isr is set."""
        bumped = leader != NO_LEADER_CHANGE or isr is not None
        return PartitionState(
            self.topic_id, self.partition, self.replicas, self.isr if isr is None else tuple(isr),
            self.leader if leader == NO_LEADER_CHANGE else leader,
            self.leader_epoch + 1 if bumped else self.leader_epoch, self.partition_epoch + 1)


@dataclass(frozen=True, slots=True)
class PartitionChange:
    """A PartitionChangeRecord and the partition before and after it is replayed."""

    record: Any
    before: PartitionState
    after: PartitionState

    @property
    def leader_changed(self) -> bool:
        return self.after.leader != self.before.leader


def build_change(state: PartitionState, *, is_acceptable_leader: Callable[[int], bool],
                 target_isr: Sequence[int] | None = None) -> PartitionChange | None:
    """The change to `target_isr` (default: the ISR unchanged) with a leader elected; None if nothing changes."""
    target = state.isr if target_isr is None else tuple(target_isr)
    if state.leader in target and is_acceptable_leader(state.leader):
        leader = state.leader
    else:
        leader = next((r for r in state.replicas if r in target and is_acceptable_leader(r)), NO_LEADER)
    new_isr = list(target) if target and target != state.isr else None  # never an empty ISR (no ELR)
    if leader == state.leader and new_isr is None:
        return None
    # Leader is set even when unchanged, so that Kafka's replay bumps the leader epoch as ours does.
    record = records.partition_change(state.topic_id, state.partition, isr=new_isr, leader=leader)
    return PartitionChange(record, state, state.merge(isr=new_isr, leader=leader))


def remove_from_isr(state: PartitionState, broker_id: int, *,
                    is_acceptable_leader: Callable[[int], bool]) -> PartitionChange | None:
    """`broker_id` is fenced, unregistered or shutting down: out of the ISR (unless it is the last
    member) and out of leadership; None if the partition does not change."""
    return build_change(
        state, target_isr=[r for r in state.isr if r != broker_id],
        is_acceptable_leader=lambda r: r != broker_id and is_acceptable_leader(r))


def elect_leader(state: PartitionState, *, is_acceptable_leader: Callable[[int], bool]) -> PartitionChange | None:
    """A leaderless partition gets the first acceptable ISR member as leader, if it has one."""
    if state.leader != NO_LEADER:
        return None
    return build_change(state, is_acceptable_leader=is_acceptable_leader)


def alter_partition(state: PartitionState, *, broker_id: int, leader_epoch: int, partition_epoch: int,
                    new_isr: Sequence[tuple[int, int]], leader_recovery_state: int,
                    is_eligible: Callable[[int, int], bool],
                    is_acceptable_leader: Callable[[int], bool]) -> PartitionChange | None:
    """An ISR change asked for by the partition leader (AlterPartition), checked as Kafka's
    ReplicationControlManager.validateAlterPartitionData does; raises ApiError for the partition.

    `new_isr` is (broker id, broker epoch) per proposed member, the epoch -1 when the request does
    not say it (AlterPartition v2). `is_eligible(broker, epoch)`: registered with that epoch (or
    epoch -1), unfenced and not in controlled shutdown. Returns None when the ISR is already that.
    """
    if leader_epoch > state.leader_epoch or partition_epoch > state.partition_epoch:
        # The leader knows a newer partition state than this controller: likely not the active one.
        raise ApiError(ErrorCode.NOT_CONTROLLER, "The partition state in the request is newer than the "
                       "controller's: it may no longer be the active controller.")
    if broker_id != state.leader:
        raise ApiError(ErrorCode.INVALID_REQUEST, f"Broker {broker_id} is not the leader of the partition "
                       f"(the leader is {state.leader}).")
    if leader_epoch < state.leader_epoch:
        raise ApiError(ErrorCode.FENCED_LEADER_EPOCH, f"Leader epoch {leader_epoch} is older than the current "
                       f"{state.leader_epoch}.")
    if partition_epoch < state.partition_epoch:
        raise ApiError(INVALID_UPDATE_VERSION, f"Partition epoch {partition_epoch} is older than the current "
                       f"{state.partition_epoch}.")
    members = [broker for broker, _ in new_isr]
    if len(set(members)) != len(members) or not set(members).issubset(state.replicas):
        raise ApiError(ErrorCode.INVALID_REQUEST, f"The new ISR {members} has duplicates or brokers that are not "
                       f"replicas {list(state.replicas)}.")
    if state.leader not in members:
        raise ApiError(ErrorCode.INVALID_REQUEST, f"The new ISR {members} does not contain the leader "
                       f"{state.leader}.")
    if leader_recovery_state == LEADER_RECOVERY_RECOVERING:
        # Partitions here are always RECOVERED (this controller never elects uncleanly), and
        # RECOVERED -> RECOVERING is refused by Kafka.
        raise ApiError(ErrorCode.INVALID_REQUEST, "A recovered partition cannot go back to RECOVERING.")
    ineligible = [broker for broker, epoch in new_isr if not is_eligible(broker, epoch)]
    if ineligible:
        raise ApiError(ErrorCode.INELIGIBLE_REPLICA, f"Replicas {ineligible} are not eligible to join the ISR: "
                       "not registered with that broker epoch, fenced, or in controlled shutdown.")
    return build_change(state, target_isr=members, is_acceptable_leader=is_acceptable_leader)


__all__ = [
    "LEADER_RECOVERY_RECOVERED", "LEADER_RECOVERY_RECOVERING", "PartitionChange",
    "PartitionState", "alter_partition", "build_change", "elect_leader", "remove_from_isr",
]
