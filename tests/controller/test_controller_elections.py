"""QuorumController: what fencing does to ISRs, unclean leader election per topic, preferred leader
election on tick, and AlterPartition through the controller (errors and leader recovery)."""

from __future__ import annotations

import random

import pytest

from quorum.controller import ControllerConfig, QuorumController
from quorum.controller.configs import BROKER, TOPIC, OpType
from quorum.controller.election import LEADER_RECOVERY_RECOVERED, LEADER_RECOVERY_RECOVERING
from quorum.controller.records import NO_LEADER
from quorum.wire import metadata_records as mr
from quorum.wire.errors import ErrorCode
from tests.controller.fakes import (
    View,
    alter_configs_request,
    alter_partition_request,
    brokers,
    heartbeat_request,
    of_type,
    replay,
    topic,
    view,
)

TIMEOUT = 9000
UNCLEAN = "unclean.leader.election.enable"


def controller(**config) -> QuorumController:
    config.setdefault("auto_leader_rebalance_enable", False)
    return QuorumController("cluster", ControllerConfig(**config), random.Random(7))


def expire(qc: QuorumController, current: View, dying: int) -> tuple[View, object]:
    """Tick past the session of `dying` while every other registered broker stays alive."""
    for broker in current.registrations:
        qc.heartbeats.register(broker, 0 if broker == dying else TIMEOUT)
    result = qc.tick(TIMEOUT + 1, current)
    assert result.response.fenced == (dying,)
    return replay(current, result.records), result


def part(v: View, name: str, index: int = 0):
    return v.topics[name].partitions[index]


# -- fencing and the ISR -----------------------------------------------------------------------

def test_fencing_removes_the_broker_from_isrs_it_follows_in() -> None:
    current = view(topic("t", ((1, 2, 3), (1, 2, 3), 1), ((3, 1), (3,), 3), leader_epoch=5, partition_epoch=7),
                   registrations=brokers(1, 2, 3))
    after, result = expire(controller(), current, 3)
    followed, led_alone = of_type(result.records, mr.PartitionChangeRecord)
    assert (followed.partition_id, followed.isr, followed.leader) == (0, [1, 2], 1)
    assert (led_alone.partition_id, led_alone.isr, led_alone.leader) == (1, None, NO_LEADER)
    p0, p1 = part(after, "t", 0), part(after, "t", 1)
    assert (p0.leader, p0.isr, p0.leader_epoch, p0.partition_epoch) == (1, (1, 2), 6, 8)  # an ISR change bumps
    # The last ISR member stays in the ISR (no ELR), the partition is offline with a new leader epoch.
    assert (p1.leader, p1.isr, p1.leader_epoch, p1.partition_epoch) == (NO_LEADER, (3,), 6, 8)
    assert after.registrations[3].fenced


def test_unclean_election_is_off_by_default() -> None:
    current = view(topic("t", ((3, 1), (3,), 3)), registrations=brokers(1, 3))
    qc = controller()
    after, result = expire(qc, current, 3)
    assert result.response.unclean_elections == ()
    assert part(after, "t").leader == NO_LEADER
    assert qc.tick(TIMEOUT + 2, after).records == ()  # and stays so


# -- unclean leader election -------------------------------------------------------------------

def offline_cluster(configs=None) -> View:
    """Topics u and c, each with one partition whose only ISR member 3 just died; 1 and 2 are alive."""
    return view(topic("u", ((3, 1, 2), (3,), 3)), topic("c", ((3, 2, 1), (3,), 3)),
                registrations=brokers(1, 2, 3), configs=configs or {})


def test_unclean_election_per_topic_at_fencing() -> None:
    after, result = expire(controller(), offline_cluster({(TOPIC, "u"): {UNCLEAN: "true"}}), 3)
    u, c = part(after, "u"), part(after, "c")
    assert (u.leader, u.isr, u.leader_epoch, u.leader_recovery_state) == (1, (1,), 6, LEADER_RECOVERY_RECOVERING)
    assert (c.leader, c.isr) == (NO_LEADER, (3,))
    (record,) = [r for r in of_type(result.records, mr.PartitionChangeRecord) if r.leader == 1]
    assert (record.isr, record.leader_recovery_state) == ([1], LEADER_RECOVERY_RECOVERING)


@pytest.mark.parametrize(("configs", "static", "elected"), [
    ({(BROKER, ""): {UNCLEAN: "true"}}, False, {"u", "c"}),  # the cluster-wide dynamic default
    ({(BROKER, ""): {UNCLEAN: "true"}, (TOPIC, "c"): {UNCLEAN: "false"}}, False, {"u"}),  # the topic wins
    ({}, True, {"u", "c"}),  # the controller's static unclean.leader.election.enable
    ({(BROKER, ""): {UNCLEAN: "false"}}, True, set()),  # dynamic over static
    ({(BROKER, "3"): {UNCLEAN: "true"}}, False, set()),  # one broker's config is not a topic default
])
def test_unclean_election_defaults(configs: dict, static: bool, elected: set[str]) -> None:
    after, result = expire(controller(unclean_leader_election_enable=static), offline_cluster(configs), 3)
    assert {name for name in ("u", "c") if part(after, name).leader != NO_LEADER} == elected
    assert {name for name, _ in result.response.unclean_elections} == elected


def test_turning_unclean_election_on_elects_at_the_next_tick() -> None:
    qc = controller()
    current, _ = expire(qc, offline_cluster(), 3)
    assert qc.tick(TIMEOUT + 2, current).records == ()
    turned_on = qc.incremental_alter_configs(alter_configs_request((TOPIC, "c", [(UNCLEAN, OpType.SET, "true")])),
                                             current)
    assert of_type(turned_on.records, mr.PartitionChangeRecord) == []  # the config change alone, as Kafka
    current = replay(current, turned_on.records)
    result = qc.tick(TIMEOUT + 3, current)
    assert result.response.unclean_elections == (("c", 0),)
    c = part(replay(current, result.records), "c")
    assert (c.leader, c.isr, c.leader_recovery_state) == (2, (2,), LEADER_RECOVERY_RECOVERING)
    assert part(current, "u").leader == NO_LEADER


def test_cluster_wide_unclean_election_turned_on_later() -> None:
    qc = controller()
    current, _ = expire(qc, offline_cluster(), 3)
    turned_on = qc.incremental_alter_configs(alter_configs_request((BROKER, "", [(UNCLEAN, OpType.SET, "true")])),
                                             current)
    result = qc.tick(TIMEOUT + 3, replay(current, turned_on.records))
    assert sorted(result.response.unclean_elections) == [("c", 0), ("u", 0)]


def test_unclean_election_waits_for_a_live_replica() -> None:
    qc = controller()
    current = view(topic("u", ((3, 1), (3,), NO_LEADER)), registrations=brokers(1, 3, fenced=(1, 3)),
                   configs={(TOPIC, "u"): {UNCLEAN: "true"}})
    assert qc.tick(0, current).records == ()
    # Broker 1, not in the ISR, is unfenced: it is elected in the same batch as its unfencing.
    unfenced = qc.heartbeat(heartbeat_request(1, 10, 10), 1, current, next_offset=20)
    records = of_type(unfenced.records, mr.PartitionChangeRecord)
    assert [(r.leader, r.isr, r.leader_recovery_state) for r in records] == [(1, [1], LEADER_RECOVERY_RECOVERING)]


def test_an_isr_member_coming_back_is_elected_cleanly_even_with_unclean_on() -> None:
    qc = controller()
    current = view(topic("u", ((1, 3), (3,), NO_LEADER)), registrations=brokers(1, 3, fenced=(3,)),
                   configs={(TOPIC, "u"): {UNCLEAN: "true"}})
    # Broker 1 is alive: the tick elects it uncleanly; had 3 come back first, 3 would have been chosen.
    back = qc.heartbeat(heartbeat_request(3, 10, 10), 1, current, next_offset=20)
    (record,) = of_type(back.records, mr.PartitionChangeRecord)
    assert (record.leader, record.isr, record.leader_recovery_state) == (3, None, -1)


def test_recovering_leader_reports_recovered_through_alter_partition() -> None:
    qc = controller()
    current, _ = expire(qc, offline_cluster({(TOPIC, "u"): {UNCLEAN: "true"}}), 3)
    u = part(current, "u")
    topic_id = current.topics["u"].topic_id
    too_soon = qc.alter_partition(alter_partition_request(1, 10, topic_id, (0, u.leader_epoch, u.partition_epoch,
                                                                            [1, 2]), recovery=1), current)
    assert too_soon.response.topics[0].partitions[0].error_code == ErrorCode.INVALID_REQUEST
    done = qc.alter_partition(alter_partition_request(1, 10, topic_id, (0, u.leader_epoch, u.partition_epoch,
                                                                        [1, 2]), recovery=0), current)
    answer = done.response.topics[0].partitions[0]
    assert (answer.error_code, answer.isr, answer.leader_recovery_state, answer.leader_epoch,
            answer.partition_epoch) == (0, [1, 2], LEADER_RECOVERY_RECOVERED, u.leader_epoch + 1,
                                        u.partition_epoch + 1)
    u = part(replay(current, done.records), "u")
    assert (u.isr, u.leader_recovery_state) == ((1, 2), LEADER_RECOVERY_RECOVERED)


# -- preferred leader election -----------------------------------------------------------------

def returned_cluster() -> View:
    """Broker 1 came back: it is in the ISR of the partitions it prefers, but 2 still leads them."""
    return view(topic("t", ((1, 2), (2, 1), 2), ((1, 2), (2, 1), 2), ((2, 1), (2, 1), 2), leader_epoch=3),
                registrations=brokers(1, 2))


def test_preferred_leaders_come_back_at_the_check() -> None:
    qc = controller(auto_leader_rebalance_enable=True, leader_imbalance_check_interval_ms=1000)
    current = returned_cluster()
    first = qc.tick(0, current)
    assert (first.records, first.response.next_tick_ms) == ((), 1000)
    assert qc.tick(999, current).records == ()
    result = qc.tick(1000, current)
    assert result.response.preferred_elections == (("t", 0), ("t", 1))
    assert [(r.partition_id, r.leader, r.isr) for r in of_type(result.records, mr.PartitionChangeRecord)] == [
        (0, 1, None), (1, 1, None)]
    after = replay(current, result.records)
    assert [(p.leader, p.leader_epoch) for p in after.topics["t"].partitions] == [(1, 4), (1, 4), (2, 3)]
    assert result.response.next_tick_ms == 2000
    assert qc.tick(2000, after).records == ()  # balanced now


def test_preferred_replica_must_be_in_the_isr_and_active() -> None:
    qc = controller(auto_leader_rebalance_enable=True, leader_imbalance_check_interval_ms=10)
    not_in_isr = view(topic("t", ((1, 2), (2,), 2)), registrations=brokers(1, 2))
    qc.tick(0, not_in_isr)
    assert qc.tick(10, not_in_isr).records == ()
    fenced = view(topic("t", ((1, 2), (2, 1), 2)), registrations=brokers(1, 2, fenced=(1,)))
    assert qc.tick(20, fenced).records == ()


def test_imbalance_below_the_percentage_is_left_alone() -> None:
    # Broker 1 prefers 10 partitions and leads 9: 10% is not above leader.imbalance.per.broker.percentage=10.
    partitions = [((1, 2), (1, 2), 1)] * 9 + [((1, 2), (1, 2), 2)]
    current = view(topic("t", *partitions), registrations=brokers(1, 2))
    qc = controller(auto_leader_rebalance_enable=True, leader_imbalance_check_interval_ms=10)
    qc.tick(0, current)
    assert qc.tick(10, current).records == ()
    strict = controller(auto_leader_rebalance_enable=True, leader_imbalance_check_interval_ms=10,
                        leader_imbalance_per_broker_percentage=0)  # Kafka KRaft's behaviour: any imbalance
    strict.tick(0, current)
    assert strict.tick(10, current).response.preferred_elections == (("t", 9),)


def test_rebalance_off() -> None:
    qc = controller(auto_leader_rebalance_enable=False, leader_imbalance_check_interval_ms=10)
    current = returned_cluster()
    assert qc.tick(0, current).records == () and qc.tick(5000, current).records == ()


def test_a_new_active_controller_waits_a_full_interval() -> None:
    qc = controller(auto_leader_rebalance_enable=True, leader_imbalance_check_interval_ms=1000)
    qc.tick(0, returned_cluster())
    qc.deactivate()
    assert qc.tick(5000, returned_cluster()).records == ()
    assert qc.tick(6000, returned_cluster()).response.preferred_elections == (("t", 0), ("t", 1))


def test_config_from_properties() -> None:
    config = ControllerConfig.from_properties({
        "auto.leader.rebalance.enable": "false", "leader.imbalance.check.interval.seconds": "5",
        "leader.imbalance.per.broker.percentage": "20", "unclean.leader.election.enable": "true"})
    assert (config.auto_leader_rebalance_enable, config.leader_imbalance_check_interval_ms,
            config.leader_imbalance_per_broker_percentage, config.unclean_leader_election_enable) == (
        False, 5000, 20, True)
    default = ControllerConfig.from_properties({})
    assert (default.auto_leader_rebalance_enable, default.leader_imbalance_check_interval_ms,
            default.leader_imbalance_per_broker_percentage, default.unclean_leader_election_enable) == (
        True, 300_000, 10, False)


# -- AlterPartition through the controller -----------------------------------------------------

T = topic("a", ((1, 2, 3), (1, 2), 1), leader_epoch=5, partition_epoch=7)


def error_of(qc: QuorumController, request, current: View) -> int:
    result = qc.alter_partition(request, current)
    if result.response.error_code:
        return result.response.error_code
    assert result.records == ()
    return result.response.topics[0].partitions[0].error_code


@pytest.mark.parametrize(("broker", "epoch", "leader_epoch", "partition_epoch", "isr", "code"), [
    (1, 9, 5, 7, [1, 2, 3], ErrorCode.STALE_BROKER_EPOCH),
    (4, 10, 5, 7, [1, 2, 3], ErrorCode.STALE_BROKER_EPOCH),  # not registered at all
    (1, 10, 4, 7, [1, 2, 3], ErrorCode.FENCED_LEADER_EPOCH),
    (1, 10, 5, 6, [1, 2, 3], 95),  # INVALID_UPDATE_VERSION
    (2, 10, 5, 7, [1, 2, 3], ErrorCode.INVALID_REQUEST),  # not from the leader (Kafka: INVALID_REQUEST)
    (1, 10, 5, 7, [], ErrorCode.INVALID_REQUEST),  # an empty ISR lacks the leader
    (1, 10, 6, 7, [1, 2, 3], ErrorCode.NOT_CONTROLLER),  # newer than this controller knows
])
def test_alter_partition_errors(broker: int, epoch: int, leader_epoch: int, partition_epoch: int, isr: list[int],
                                code: int) -> None:
    current = view(T, registrations=brokers(1, 2, 3))
    request = alter_partition_request(broker, epoch, T.topic_id, (0, leader_epoch, partition_epoch, isr))
    assert error_of(controller(), request, current) == code


def test_alter_partition_ineligible_members() -> None:
    request = alter_partition_request(1, 10, T.topic_id, (0, 5, 7, [1, 2, 3]))
    fenced = view(T, registrations=brokers(1, 2, 3, fenced=(3,)))
    assert error_of(controller(), request, fenced) == ErrorCode.INELIGIBLE_REPLICA
    unregistered = view(T, registrations=brokers(1, 2))
    assert error_of(controller(), request, unregistered) == ErrorCode.INELIGIBLE_REPLICA
    shutting_down = controller()
    shutting_down.heartbeats.register(3, 0)
    shutting_down.heartbeats.enter_controlled_shutdown(3, 0)
    assert error_of(shutting_down, request, view(T, registrations=brokers(1, 2, 3))) == ErrorCode.INELIGIBLE_REPLICA
    stale_member = alter_partition_request(1, 10, T.topic_id, (0, 5, 7, [1, 2, 3]), with_epochs={1: 10, 2: 10, 3: 4})
    assert error_of(controller(), stale_member, view(T, registrations=brokers(1, 2, 3))) == ErrorCode.INELIGIBLE_REPLICA
