"""Leader and ISR changes (Kafka's PartitionChangeBuilder without ELR) and AlterPartition validation."""

from __future__ import annotations

import uuid

import pytest

from quorum.controller.election import (
    LEADER_RECOVERY_RECOVERED,
    LEADER_RECOVERY_RECOVERING,
    PartitionState,
    alter_partition,
    build_change,
    elect_leader,
    elect_preferred,
    remove_from_isr,
)
from quorum.controller.records import NO_LEADER, NO_LEADER_CHANGE
from quorum.controller.results import INVALID_UPDATE_VERSION, ApiError
from quorum.wire import metadata_records as mr
from quorum.wire.errors import ErrorCode

TID = uuid.UUID(int=0xABC)


def state(replicas=(1, 2, 3), isr=(1, 2, 3), leader=1, leader_epoch=4, partition_epoch=9,
          recovery=LEADER_RECOVERY_RECOVERED) -> PartitionState:
    return PartitionState(TID, 0, tuple(replicas), tuple(isr), leader, leader_epoch, partition_epoch, recovery)


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


def test_follower_removed_keeps_the_leader_and_bumps_its_epoch() -> None:
    shrink = remove_from_isr(state(), 3, is_acceptable_leader=everyone)
    assert shrink is not None
    assert shrink.record.isr == [1, 2]
    assert shrink.record.leader == 1  # set though unchanged: an ISR change bumps the leader epoch (issue 5)
    assert (shrink.after.leader, shrink.after.leader_epoch, shrink.after.partition_epoch) == (1, 5, 10)
    assert not shrink.leader_changed


def test_merge_follows_the_images_replay_rule() -> None:
    assert state().merge(isr=[1], leader=NO_LEADER_CHANGE).leader_epoch == 5  # an ISR change bumps too
    assert state().merge(isr=None, leader=2).leader_epoch == 5
    assert state().merge(isr=None, leader=1).leader_epoch == 5  # a set Leader bumps even when it is the same
    unchanged = state().merge(isr=None, leader=NO_LEADER_CHANGE)
    assert (unchanged.leader, unchanged.leader_epoch, unchanged.partition_epoch) == (1, 4, 10)
    recovered = state(recovery=LEADER_RECOVERY_RECOVERING).merge(isr=None, leader=NO_LEADER_CHANGE,
                                                                  leader_recovery_state=LEADER_RECOVERY_RECOVERED)
    assert recovered.leader_recovery_state == LEADER_RECOVERY_RECOVERED


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


def test_isr_growth_bumps_both_epochs() -> None:
    grow = build_change(state(isr=(1, 2)), target_isr=(1, 2, 3), is_acceptable_leader=everyone)
    assert grow is not None
    assert (grow.record.leader, grow.record.isr, grow.record.leader_recovery_state) == (1, [1, 2, 3], -1)
    assert (grow.after.leader_epoch, grow.after.partition_epoch) == (5, 10)


# -- unclean election (KIP-704) ------------------------------------------------------------------

def test_unclean_election_takes_a_live_replica_outside_the_isr() -> None:
    offline = state(isr=(1,), leader=NO_LEADER)
    assert elect_leader(offline, is_acceptable_leader=lambda b: b != 1) is None  # clean: nobody
    change = elect_leader(offline, is_acceptable_leader=lambda b: b != 1, unclean=True)
    assert change is not None and change.unclean
    assert (change.record.leader, change.record.isr, change.record.leader_recovery_state) == (
        2, [2], LEADER_RECOVERY_RECOVERING)
    assert (change.after.leader, change.after.isr, change.after.leader_epoch, change.after.leader_recovery_state) == (
        2, (2,), 5, LEADER_RECOVERY_RECOVERING)


def test_unclean_election_prefers_a_live_isr_member() -> None:
    change = elect_leader(state(isr=(3,), leader=NO_LEADER), is_acceptable_leader=everyone, unclean=True)
    assert change is not None and not change.unclean
    assert (change.record.leader, change.record.isr, change.record.leader_recovery_state) == (3, None, -1)


def test_unclean_election_with_nobody_alive_changes_nothing() -> None:
    assert elect_leader(state(isr=(1,), leader=NO_LEADER), is_acceptable_leader=lambda b: False, unclean=True) is None


def test_fencing_the_last_isr_member_elects_uncleanly_when_allowed() -> None:
    change = remove_from_isr(state(isr=(1,)), 1, is_acceptable_leader=everyone, unclean=True)
    assert change is not None
    assert (change.record.leader, change.record.isr) == (2, [2])
    assert change.after.leader_recovery_state == LEADER_RECOVERY_RECOVERING
    clean = remove_from_isr(state(isr=(1,)), 1, is_acceptable_leader=everyone)
    assert clean is not None and (clean.record.leader, clean.record.isr) == (NO_LEADER, None)


# -- preferred election --------------------------------------------------------------------------

def test_preferred_election_moves_back_to_the_first_replica() -> None:
    change = elect_preferred(state(leader=2), is_acceptable_leader=everyone)
    assert change is not None
    assert (change.record.leader, change.record.isr) == (1, None)
    assert (change.after.leader, change.after.leader_epoch, change.after.partition_epoch) == (1, 5, 10)


@pytest.mark.parametrize("current", [
    state(),  # already the preferred leader
    state(isr=(2, 3), leader=2),  # preferred not in the ISR
])
def test_preferred_election_not_possible(current: PartitionState) -> None:
    assert elect_preferred(current, is_acceptable_leader=everyone) is None


def test_preferred_election_needs_an_acceptable_preferred_replica() -> None:
    assert elect_preferred(state(leader=2), is_acceptable_leader=lambda b: b != 1) is None


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
    ({"recovery": 1, "isr": (1,)}, ErrorCode.INVALID_REQUEST),  # RECOVERED -> RECOVERING
    ({"isr": ()}, ErrorCode.INVALID_REQUEST),  # an empty ISR lacks the leader (Kafka's answer too)
    ({"eligible": lambda b, e: b != 3}, ErrorCode.INELIGIBLE_REPLICA),
])
def test_alter_partition_refusals(kwargs: dict, code: int) -> None:
    with pytest.raises(ApiError) as info:
        alter(state(isr=(1, 2)), **kwargs)
    assert info.value.code == code


@pytest.mark.parametrize(("kwargs", "code"), [
    ({"broker": 2, "leader_epoch": 3}, ErrorCode.FENCED_LEADER_EPOCH),  # epoch first, as Kafka
    ({"broker": 2, "partition_epoch": 8}, ErrorCode.INVALID_REQUEST),  # then the leader, then the partition epoch
    ({"partition_epoch": 8, "isr": (4,)}, INVALID_UPDATE_VERSION),
    ({"isr": (1, 2, 3), "eligible": lambda b, e: False}, ErrorCode.INELIGIBLE_REPLICA),
])
def test_alter_partition_checks_in_kafkas_order(kwargs: dict, code: int) -> None:
    with pytest.raises(ApiError) as info:
        alter(state(isr=(1, 2)), **kwargs)
    assert info.value.code == code


def test_alter_partition_while_recovering() -> None:
    recovering = state(isr=(1,), recovery=LEADER_RECOVERY_RECOVERING)
    with pytest.raises(ApiError) as info:
        alter(recovering, isr=(1, 2), recovery=LEADER_RECOVERY_RECOVERING)
    assert info.value.code == ErrorCode.INVALID_REQUEST  # no follower joins while the leader recovers
    assert alter(recovering, isr=(1,), recovery=LEADER_RECOVERY_RECOVERING) is None
    # The leader says it recovered and adds a follower in the same request (Kafka's brokers do so).
    done = alter(recovering, isr=(1, 2), recovery=LEADER_RECOVERY_RECOVERED)
    assert done is not None
    assert (done.record.isr, done.record.leader, done.record.leader_recovery_state) == (
        [1, 2], 1, LEADER_RECOVERY_RECOVERED)
    assert (done.after.leader_epoch, done.after.partition_epoch, done.after.leader_recovery_state) == (
        5, 10, LEADER_RECOVERY_RECOVERED)
    only_recovered = alter(recovering, isr=(1,), recovery=LEADER_RECOVERY_RECOVERED)
    assert only_recovered is not None and only_recovered.record.isr is None


def test_alter_partition_checks_epochs_before_the_isr() -> None:
    with pytest.raises(ApiError) as info:
        alter(state(), leader_epoch=3, isr=(4,))
    assert info.value.code == ErrorCode.FENCED_LEADER_EPOCH
