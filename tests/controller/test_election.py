"""Leader and ISR changes (Kafka's PartitionChangeBuilder without ELR) and AlterPartition validation."""

from __future__ import annotations

import uuid

import pytest

from quorum.controller.election import (
    PartitionState,
    alter_partition,
    build_change,
    elect_leader,
    remove_from_isr,
)
from quorum.controller.records import NO_LEADER, NO_LEADER_CHANGE
from quorum.controller.results import INVALID_UPDATE_VERSION, ApiError
from quorum.wire import metadata_records as mr
from quorum.wire.errors import ErrorCode

TID = uuid.UUID(int=0xABC)


def state(replicas=(1, 2, 3), isr=(1, 2, 3), leader=1, leader_epoch=4, partition_epoch=9) -> PartitionState:
    return PartitionState(TID, 0, tuple(replicas), tuple(isr), leader, leader_epoch, partition_epoch)


def everyone(_: int) -> bool:
    return True


def test_fencing_the_leader_elects_the_first_acceptable_isr_replica() -> None:
    change = remove_from_isr(state(replicas=(1, 2, 3), isr=(1, 3, 2)), 1, is_acceptable_leader=everyone)
    assert change is not None
    record = change.record
    assert isinstance(record, mr.PartitionChangeRecord)
    assert (record.topic_id, record.partition_id) == (TID, 0)
    assert (record.leader, record.isr) == (2, [3, 2])  # replica order decides, not ISR order
    assert (change.after.leader, change.after.leader_epoch, change.after.partition_epoch) == (2, 5, 10)
    assert change.leader_changed


def test_an_unacceptable_replica_is_skipped() -> None:
    change = remove_from_isr(state(), 1, is_acceptable_leader=lambda b: b != 2)
    assert change is not None and change.record.leader == 3


def test_follower_removed_keeps_the_leader_and_bumps_the_leader_epoch() -> None:
    shrink = remove_from_isr(state(), 3, is_acceptable_leader=everyone)
    assert shrink is not None
    assert shrink.record.isr == [1, 2]
    assert shrink.record.leader == 1  # Leader set to the same broker: Kafka's replay bumps the epoch too
    assert (shrink.after.leader, shrink.after.leader_epoch, shrink.after.partition_epoch) == (1, 5, 10)
    assert not shrink.leader_changed


def test_merge_follows_the_project_replay_rule() -> None:
    assert state().merge(isr=[1], leader=NO_LEADER_CHANGE).leader_epoch == 5  # an ISR change alone bumps
    assert state().merge(isr=None, leader=2).leader_epoch == 5
    unchanged = state().merge(isr=None, leader=NO_LEADER_CHANGE)
    assert (unchanged.leader, unchanged.leader_epoch, unchanged.partition_epoch) == (1, 4, 10)


def test_last_isr_member_stays_in_the_isr_and_the_leader_goes() -> None:
    change = remove_from_isr(state(isr=(2,), leader=2), 2, is_acceptable_leader=everyone)
    assert change is not None
    assert change.record.isr is None
    assert change.record.leader == NO_LEADER
    assert (change.after.isr, change.after.leader, change.after.leader_epoch) == ((2,), NO_LEADER, 5)


def test_remaining_isr_member_not_acceptable_leaves_no_leader() -> None:
    change = remove_from_isr(state(isr=(1, 2)), 1, is_acceptable_leader=lambda b: b != 2)
    assert change is not None
    assert (change.record.isr, change.record.leader) == ([2], NO_LEADER)


def test_nothing_to_change() -> None:
    assert remove_from_isr(state(isr=(1, 2)), 3, is_acceptable_leader=everyone) is None
    assert remove_from_isr(state(isr=(2,), leader=NO_LEADER), 2, is_acceptable_leader=everyone) is None
    assert build_change(state(), is_acceptable_leader=everyone) is None


def test_unfenced_broker_leads_leaderless_partitions_with_it_in_the_isr() -> None:
    leaderless = state(isr=(2,), leader=NO_LEADER)
    assert elect_leader(leaderless, is_acceptable_leader=lambda b: False) is None
    change = elect_leader(leaderless, is_acceptable_leader=lambda b: b == 2)
    assert change is not None
    assert (change.record.leader, change.record.isr) == (2, None)
    assert (change.after.leader, change.after.leader_epoch) == (2, 5)
    assert elect_leader(state(), is_acceptable_leader=everyone) is None  # it has a leader


def test_isr_growth_bumps_the_leader_epoch_too() -> None:
    grow = build_change(state(isr=(1, 2)), target_isr=(1, 2, 3), is_acceptable_leader=everyone)
    assert grow is not None
    assert (grow.record.leader, grow.record.isr, grow.after.leader_epoch) == (1, [1, 2, 3], 5)


def alter(current: PartitionState, *, broker=1, leader_epoch=4, partition_epoch=9, isr=(1, 2, 3), recovery=0,
          eligible=lambda b, e: True, acceptable=everyone):
    return alter_partition(current, broker_id=broker, leader_epoch=leader_epoch, partition_epoch=partition_epoch,
                           new_isr=[(b, -1) for b in isr], leader_recovery_state=recovery,
                           is_eligible=eligible, is_acceptable_leader=acceptable)


def test_alter_partition_expands_the_isr() -> None:
    change = alter(state(isr=(1, 2)), isr=(1, 2, 3))
    assert change is not None
    assert change.record.isr == [1, 2, 3]
    assert (change.after.isr, change.after.partition_epoch) == ((1, 2, 3), 10)


def test_alter_partition_same_isr_is_no_change() -> None:
    assert alter(state()) is None


@pytest.mark.parametrize(("kwargs", "code"), [
    ({"leader_epoch": 5}, ErrorCode.NOT_CONTROLLER),
    ({"partition_epoch": 10}, ErrorCode.NOT_CONTROLLER),
    ({"broker": 2}, ErrorCode.INVALID_REQUEST),
    ({"leader_epoch": 3}, ErrorCode.FENCED_LEADER_EPOCH),
    ({"partition_epoch": 8}, INVALID_UPDATE_VERSION),
    ({"isr": (1, 4)}, ErrorCode.INVALID_REQUEST),
    ({"isr": (1, 2, 2)}, ErrorCode.INVALID_REQUEST),
    ({"isr": (2, 3)}, ErrorCode.INVALID_REQUEST),
    ({"recovery": 1}, ErrorCode.INVALID_REQUEST),
    ({"eligible": lambda b, e: b != 3}, ErrorCode.INELIGIBLE_REPLICA),
])
def test_alter_partition_refusals(kwargs: dict, code: int) -> None:
    with pytest.raises(ApiError) as info:
        alter(state(isr=(1, 2)), **kwargs)
    assert info.value.code == code


def test_alter_partition_checks_epochs_before_the_isr() -> None:
    with pytest.raises(ApiError) as info:
        alter(state(), leader_epoch=3, isr=(4,))
    assert info.value.code == ErrorCode.FENCED_LEADER_EPOCH
