"""Preferred leader rebalancing: which partitions move (`plan`) and when the check is due."""

from __future__ import annotations

import uuid

import pytest

from quorum.controller.balance import LeaderBalancer, plan
from quorum.controller.election import PartitionState

TID = uuid.UUID(int=0xBA1)


def part(index: int, replicas: tuple[int, ...], leader: int, isr: tuple[int, ...] | None = None) -> PartitionState:
    return PartitionState(TID, index, replicas, isr if isr is not None else replicas, leader, 3, 8)


def everyone(_: int) -> bool:
    return True


def test_moves_every_imbalanced_partition_of_a_broker_above_the_ratio() -> None:
    parts = [part(0, (1, 2), 2), part(1, (1, 2), 2), part(2, (1, 2), 1), part(3, (2, 1), 2)]
    changes, more = plan(parts, percentage=10, is_acceptable_leader=everyone)
    assert [(c.after.partition, c.after.leader, c.after.leader_epoch, c.record.isr) for c in changes] == [
        (0, 1, 4, None), (1, 1, 4, None)]
    assert not more


@pytest.mark.parametrize(("led", "percentage", "moved"), [
    (9, 10, 0),  # 1 of 10 not led: 10% is not above 10%
    (8, 10, 2),  # 20% is
    (9, 0, 1),  # 0: any imbalance (Kafka KRaft)
    (0, 100, 0),  # 100: never
])
def test_ratio(led: int, percentage: int, moved: int) -> None:
    parts = [part(i, (1, 2), 1 if i < led else 2) for i in range(10)]
    changes, _ = plan(parts, percentage=percentage, is_acceptable_leader=everyone)
    assert len(changes) == moved


def test_preferred_replica_must_be_acceptable_and_in_the_isr() -> None:
    parts = [part(0, (1, 2), 2, isr=(2,)), part(1, (3, 2), 2)]
    assert plan(parts, percentage=0, is_acceptable_leader=lambda b: b != 3) == ([], False)


def test_offline_partitions_count_as_imbalanced() -> None:
    changes, _ = plan([part(0, (1, 2), -1)], percentage=0, is_acceptable_leader=everyone)
    assert [c.after.leader for c in changes] == [1]


def test_limit() -> None:
    parts = [part(i, (1, 2), 2) for i in range(5)]
    changes, more = plan(parts, percentage=0, is_acceptable_leader=everyone, limit=3)
    assert (len(changes), more) == (3, True)


def test_balancer_schedule() -> None:
    balancer = LeaderBalancer(True, 100)
    assert balancer.next_check_ms is None
    assert not balancer.due(50)  # first call schedules at 150
    assert balancer.next_check_ms == 150
    assert not balancer.due(149) and balancer.due(150)
    balancer.checked(150, more=False)
    assert balancer.next_check_ms == 250
    balancer.checked(250, more=True)
    assert balancer.due(250)  # more to do: again at the next tick
    balancer.clear()
    assert not balancer.due(1000) and balancer.next_check_ms == 1100
    off = LeaderBalancer(False, 100)
    assert not off.due(10**9) and off.next_check_ms is None
    with pytest.raises(ValueError):
        LeaderBalancer(True, 0)
