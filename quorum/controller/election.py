"""Partition leader and ISR changes, as Kafka's PartitionChangeBuilder makes them (without ELR).

A change is a PartitionChangeRecord holding only what changed: `Isr` when the ISR changes,
`LeaderRecoveryState` when that changes, and `Leader` whenever the leader or the ISR changes (see
below). Replaying it bumps the partition epoch by one, and the leader epoch by one when `Leader` is
set (Kafka's PartitionRegistration.merge: a record whose Leader is not -2 bumps the leader epoch,
even to the same leader).

The leader epoch is bumped by every change of the leader *or* the ISR (issue 5; KIP-631's
IsrChangeRecord: "an epoch that gets incremented each time we change the ISR"; KIP-232 clients
compare (topic_epoch, leader_epoch), so an ISR change must show in it). A record that changes the
ISR therefore also sets Leader, to the current leader: Kafka's replay bumps the leader epoch for it
too (as Kafka before 3.6 did for ISR shrinks), and so does this project's image, which bumps on a
set Leader or a set Isr. Kafka from 3.6 (KAFKA-15021) bumps on leader changes only, so that a live
leader's ISR changes do not fence its in-flight requests; here the leader learns its new epoch
from the AlterPartition answer and the image, and its followers from the image.

Elections (Kafka's electAnyLeader / electPreferredLeader):

* ONLINE: the current leader stays if it is in the target ISR and acceptable; otherwise the first
  replica, in replica order, that is in the target ISR and acceptable; otherwise, when unclean
  election is enabled for the topic, the first acceptable replica outside the ISR (the ISR becomes
  that replica alone and the leader recovery state RECOVERING, KIP-704); otherwise -1 (NO_LEADER).
* PREFERRED: the first replica when it is in the ISR and acceptable (used by leader rebalancing).

Acceptable means registered, unfenced and not in controlled shutdown, as the caller's predicate
says. Without ELR the ISR never becomes empty: when the last member goes, the ISR keeps it and
the leader becomes -1, so that the partition comes back with that broker when it is unfenced.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from quorum.controller import records
from quorum.controller.reassignment_replicas import ReassignmentReplicas, complete
from quorum.controller.records import NO_LEADER, NO_LEADER_CHANGE
from quorum.controller.results import INVALID_UPDATE_VERSION, ApiError
from quorum.controller.view import PartitionView
from quorum.wire.errors import ErrorCode

LEADER_RECOVERY_RECOVERED = 0
LEADER_RECOVERY_RECOVERING = 1
NO_RECOVERY_CHANGE = -1
"""PartitionChangeRecord.LeaderRecoveryState when it is unchanged."""


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
    leader_recovery_state: int = LEADER_RECOVERY_RECOVERED
    adding: tuple[int, ...] = ()
    """Replicas a reassignment is adding (KIP-455; `quorum.controller.reassignment_replicas`)."""
    removing: tuple[int, ...] = ()
    """Replicas a reassignment is removing."""
    short: frozenset[int] = frozenset()
    """Replicas whose local log is short (`quorum.controller.short_logs`): soft state, not metadata;
    elections prefer the others."""

    @classmethod
    def of(cls, topic_id: uuid.UUID, view: PartitionView, short: frozenset[int] = frozenset()) -> PartitionState:
        return cls(topic_id, view.partition, tuple(view.replicas), tuple(view.isr), view.leader, view.leader_epoch,
                   view.partition_epoch, view.leader_recovery_state, tuple(view.adding_replicas),
                   tuple(view.removing_replicas), short)

    @property
    def key(self) -> tuple[uuid.UUID, int]:
        return self.topic_id, self.partition

    @property
    def reassigning(self) -> bool:
        return bool(self.adding or self.removing)

    def merge(self, *, isr: Sequence[int] | None, leader: int, leader_recovery_state: int = NO_RECOVERY_CHANGE,
              replicas: Sequence[int] | None = None, adding: Sequence[int] | None = None,
              removing: Sequence[int] | None = None) -> PartitionState:
        """The state after a PartitionChangeRecord with these fields (None: unchanged), as this
        project's image replays it: the partition epoch always goes up, the leader epoch when Leader
        or Isr is set."""
        bumped = leader != NO_LEADER_CHANGE or isr is not None
        return PartitionState(
            self.topic_id, self.partition, self.replicas if replicas is None else tuple(replicas),
            self.isr if isr is None else tuple(isr),
            self.leader if leader == NO_LEADER_CHANGE else leader,
            self.leader_epoch + 1 if bumped else self.leader_epoch, self.partition_epoch + 1,
            self.leader_recovery_state if leader_recovery_state == NO_RECOVERY_CHANGE else leader_recovery_state,
            self.adding if adding is None else tuple(adding), self.removing if removing is None else tuple(removing),
            self.short)


@dataclass(frozen=True, slots=True)
class PartitionChange:
    """A PartitionChangeRecord and the partition before and after it is replayed."""

    record: Any
    before: PartitionState
    after: PartitionState

    @property
    def leader_changed(self) -> bool:
        return self.after.leader != self.before.leader

    @property
    def unclean(self) -> bool:
        """The new leader was not in the ISR: acknowledged writes may be lost (KIP-704)."""
        return self.after.leader != NO_LEADER and self.after.leader not in self.before.isr


def _elect(state: PartitionState, replicas: tuple[int, ...], target: tuple[int, ...],
           acceptable: Callable[[int], bool], unclean: bool) -> tuple[int, bool]:
    """Kafka's electAnyLeader over `replicas` (the target replica order): (leader, whether the
    election was unclean). Among the candidates, the first whose local log is not short; the first
    of them all when every one is short (availability wins)."""
    if state.leader in target and acceptable(state.leader):
        return state.leader, False
    clean = _first_long([r for r in replicas if r in target and acceptable(r)], state.short)
    if clean is not None:
        return clean, False
    if unclean:
        outside = _first_long([r for r in replicas if acceptable(r)], state.short)
        if outside is not None:
            return outside, True
    return NO_LEADER, False


def _first_long(candidates: list[int], short: frozenset[int]) -> int | None:
    """The first candidate whose local log is not short, else the first candidate, else None."""
    return next((r for r in candidates if r not in short), candidates[0] if candidates else None)


def _change(state: PartitionState, *, leader: int, isr: Sequence[int] | None,
            recovery: int = NO_RECOVERY_CHANGE, replicas: Sequence[int] | None = None,
            adding: Sequence[int] | None = None, removing: Sequence[int] | None = None) -> PartitionChange | None:
    """The record for what differs from `state` (None arguments: unchanged); None when nothing does."""
    new_leader = NO_LEADER_CHANGE if leader == state.leader else leader
    new_isr = None if isr is None or tuple(isr) == state.isr else list(isr)
    new_recovery = NO_RECOVERY_CHANGE if recovery == state.leader_recovery_state else recovery
    new_replicas = None if replicas is None or tuple(replicas) == state.replicas else list(replicas)
    new_adding = None if adding is None or tuple(adding) == state.adding else list(adding)
    new_removing = None if removing is None or tuple(removing) == state.removing else list(removing)
    if (new_leader == NO_LEADER_CHANGE and new_isr is None and new_recovery == NO_RECOVERY_CHANGE
            and new_replicas is None and new_adding is None and new_removing is None):
        return None
    if new_isr is not None or (new_replicas is not None and not set(state.replicas) <= set(new_replicas)):
        # Set even when unchanged, so that Kafka's replay bumps the leader epoch as ours does; and, as
        # Kafka's triggerLeaderEpochBumpForReplicaReassignmentIfNeeded, when a replica leaves the set.
        new_leader = leader
    record = records.partition_change(state.topic_id, state.partition, isr=new_isr, leader=new_leader,
                                      leader_recovery_state=new_recovery, replicas=new_replicas,
                                      adding=new_adding, removing=new_removing)
    return PartitionChange(record, state, state.merge(isr=new_isr, leader=new_leader,
                                                      leader_recovery_state=new_recovery, replicas=new_replicas,
                                                      adding=new_adding, removing=new_removing))


def build_change(state: PartitionState, *, is_acceptable_leader: Callable[[int], bool],
                 target_isr: Sequence[int] | None = None, unclean: bool = False,
                 target_recovery: int = NO_RECOVERY_CHANGE,
                 target: ReassignmentReplicas | None = None) -> PartitionChange | None:
    """The change to `target_isr` (default: the ISR unchanged) and to the reassignment `target`
    (default: the partition's own), with a leader elected (ONLINE, or UNCLEAN when `unclean`), and
    to `target_recovery` if given; None if nothing changes.

    As Kafka's PartitionChangeBuilder.build, every change first completes a reassignment in
    progress when the target ISR allows it (`reassignment_replicas.complete`), so that an ISR
    expansion, a fencing or a cancellation finishes it as soon as it can, and the leader is then
    elected among the target replicas (a removed leader hands over)."""
    isr = state.isr if target_isr is None else tuple(target_isr)
    moving = target or ReassignmentReplicas(state.replicas, state.adding, state.removing)
    replicas, adding, removing = moving.replicas, moving.adding, moving.removing
    completed = complete(replicas, isr, adding, removing)
    if completed is not None:
        (replicas, isr), adding, removing = completed, (), ()
    leader, was_unclean = _elect(state, replicas, isr, is_acceptable_leader, unclean)
    if was_unclean:
        # Kafka's tryElection: the ISR is forced to the new leader alone, which must recover first.
        isr, target_recovery = (leader,), LEADER_RECOVERY_RECOVERING
    return _change(state, leader=leader, isr=isr or None, recovery=target_recovery,  # never an empty ISR
                   replicas=replicas, adding=adding, removing=removing)


def remove_from_isr(state: PartitionState, broker_id: int, *, is_acceptable_leader: Callable[[int], bool],
                    unclean: bool = False) -> PartitionChange | None:
    """`broker_id` is fenced, unregistered or shutting down: out of the ISR (unless it is the last
    member) and out of leadership; None if the partition does not change."""
    return build_change(
        state, target_isr=[r for r in state.isr if r != broker_id], unclean=unclean,
        is_acceptable_leader=lambda r: r != broker_id and is_acceptable_leader(r))


def elect_leader(state: PartitionState, *, is_acceptable_leader: Callable[[int], bool],
                 unclean: bool = False) -> PartitionChange | None:
    """A leaderless partition gets the first acceptable ISR member as leader, if it has one, else
    (when `unclean`) the first acceptable replica outside the ISR."""
    if state.leader != NO_LEADER:
        return None
    return build_change(state, is_acceptable_leader=is_acceptable_leader, unclean=unclean)


def elect_preferred(state: PartitionState, *, is_acceptable_leader: Callable[[int], bool]) -> PartitionChange | None:
    """Leadership back to the preferred (first) replica, when it is in the ISR and acceptable and
    does not lead already; None otherwise (a preferred election never goes outside the ISR). Not
    while the preferred replica's local log is short and another acceptable ISR member's is not."""
    preferred = state.replicas[0] if state.replicas else NO_LEADER
    if preferred in (NO_LEADER, state.leader) or preferred not in state.isr or not is_acceptable_leader(preferred):
        return None
    if preferred in state.short and any(r not in state.short and is_acceptable_leader(r) for r in state.isr):
        return None
    return _change(state, leader=preferred, isr=None)


def alter_partition(state: PartitionState, *, broker_id: int, leader_epoch: int, partition_epoch: int,
                    new_isr: Sequence[tuple[int, int]], leader_recovery_state: int,
                    is_eligible: Callable[[int, int], bool], is_acceptable_leader: Callable[[int], bool],
                    unclean: bool = False) -> PartitionChange | None:
    """An ISR change asked for by the partition leader (AlterPartition), checked in the order of
    Kafka's ReplicationControlManager.validateAlterPartitionData; raises ApiError for the partition.

    `new_isr` is (broker id, broker epoch) per proposed member, the epoch -1 when the request does
    not say it (AlterPartition v2). `is_eligible(broker, epoch)`: registered with that epoch (or
    epoch -1), unfenced and not in controlled shutdown. Returns None when nothing changes (the
    answer is then the current state).
    """
    if leader_epoch > state.leader_epoch or partition_epoch > state.partition_epoch:
        # The leader knows a newer partition state than this controller: likely not the active one.
        raise ApiError(ErrorCode.NOT_CONTROLLER, "The partition state in the request is newer than the "
                       "controller's: it may no longer be the active controller.")
    if leader_epoch < state.leader_epoch:
        raise ApiError(ErrorCode.FENCED_LEADER_EPOCH, f"Leader epoch {leader_epoch} is older than the current "
                       f"{state.leader_epoch}.")
    if broker_id != state.leader:
        # Kafka answers INVALID_REQUEST here (not NOT_LEADER_OR_FOLLOWER): with the leader epoch
        # current, only a confused broker can be asking.
        raise ApiError(ErrorCode.INVALID_REQUEST, f"Broker {broker_id} is not the leader of the partition "
                       f"(the leader is {state.leader}).")
    if partition_epoch < state.partition_epoch:
        raise ApiError(INVALID_UPDATE_VERSION, f"Partition epoch {partition_epoch} is older than the current "
                       f"{state.partition_epoch}.")
    members = [broker for broker, _ in new_isr]
    if len(set(members)) != len(members) or not set(members).issubset(state.replicas):
        raise ApiError(ErrorCode.INVALID_REQUEST, f"The new ISR {members} has duplicates or brokers that are not "
                       f"replicas {list(state.replicas)}.")
    if state.leader not in members:
        # This is also the answer to an empty ISR (Kafka's: the ISR must always hold the leader).
        raise ApiError(ErrorCode.INVALID_REQUEST, f"The new ISR {members} does not contain the leader "
                       f"{state.leader}.")
    if leader_recovery_state == LEADER_RECOVERY_RECOVERING and len(members) > 1:
        raise ApiError(ErrorCode.INVALID_REQUEST, f"The new ISR {members} has more than one replica while the "
                       "leader is still recovering from an unclean leader election.")
    if state.leader_recovery_state == LEADER_RECOVERY_RECOVERED and leader_recovery_state == LEADER_RECOVERY_RECOVERING:
        raise ApiError(ErrorCode.INVALID_REQUEST, "The leader recovery state cannot change from RECOVERED to "
                       "RECOVERING.")
    ineligible = [broker for broker, epoch in new_isr if not is_eligible(broker, epoch)]
    if ineligible:
        raise ApiError(ErrorCode.INELIGIBLE_REPLICA, f"Replicas {ineligible} are not eligible to join the ISR: "
                       "not registered with that broker epoch, fenced, or in controlled shutdown.")
    return build_change(state, target_isr=members, is_acceptable_leader=is_acceptable_leader, unclean=unclean,
                        target_recovery=leader_recovery_state)


__all__ = [
    "LEADER_RECOVERY_RECOVERED", "LEADER_RECOVERY_RECOVERING", "NO_RECOVERY_CHANGE", "PartitionChange",
    "PartitionState", "alter_partition", "build_change", "elect_leader", "elect_preferred", "remove_from_isr",
]
