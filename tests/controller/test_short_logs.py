"""Leader preference for replicas with a short local log (issue 15, on KIP-1023): the soft state the
controller keeps from heartbeats, the election rules, and a broker's heartbeat carrying the
ShortLocalLogs tag through the wire into the controller's elections."""

from __future__ import annotations

import asyncio
import random
import uuid
from typing import Any

from quorum.controller import ControllerConfig, QuorumController
from quorum.controller.balance import plan
from quorum.controller.election import PartitionState, elect_leader, elect_preferred, remove_from_isr
from quorum.controller.short_logs import ShortLocalLogs
from quorum.server.broker_lifecycle import BrokerLifecycle
from quorum.wire import metadata_records as mr
from quorum.wire.protocol import APIS
from tests.controller.fakes import View, brokers, heartbeat_request, of_type, replay, topic, view

TID = uuid.UUID(int=0x5407)
HEARTBEAT = APIS[63]


def state(replicas: tuple[int, ...], isr: tuple[int, ...], leader: int, short: set[int]) -> PartitionState:
    return PartitionState(TID, 0, replicas, isr, leader, 3, 8, short=frozenset(short))


def everyone(_: int) -> bool:
    return True


# -- the soft state ------------------------------------------------------------------------------


def test_each_heartbeat_replaces_what_the_broker_said_before() -> None:
    logs = ShortLocalLogs()
    assert not logs
    logs.report(1, [(TID, 0), (TID, 1)])
    logs.report(2, [(TID, 0)])
    assert (logs.replicas(TID, 0), logs.replicas(TID, 1)) == ({1, 2}, {1})
    logs.report(1, [(TID, 1)])  # partition 0 of broker 1 reached local retention
    assert (logs.replicas(TID, 0), logs.replicas(TID, 1)) == ({2}, {1})
    logs.forget(2)
    assert logs.replicas(TID, 0) == frozenset()
    logs.clear()
    assert not logs and logs.replicas(TID, 1) == frozenset()


# -- elections -----------------------------------------------------------------------------------


def test_online_election_skips_a_short_isr_member_while_a_long_one_is_acceptable() -> None:
    change = remove_from_isr(state((1, 2, 3), (1, 2, 3), 1, {2}), 1, is_acceptable_leader=everyone)
    assert change is not None and change.after.leader == 3
    leaderless = elect_leader(state((1, 2, 3), (2, 3), -1, {2}), is_acceptable_leader=everyone)
    assert leaderless is not None and leaderless.after.leader == 3


def test_availability_wins_when_only_short_ones_remain() -> None:
    change = remove_from_isr(state((1, 2, 3), (1, 2, 3), 1, {2, 3}), 1, is_acceptable_leader=everyone)
    assert change is not None and change.after.leader == 2
    long_but_fenced = remove_from_isr(state((1, 2, 3), (1, 2, 3), 1, {2}), 1,
                                      is_acceptable_leader=lambda b: b != 3)
    assert long_but_fenced is not None and long_but_fenced.after.leader == 2


def test_a_short_current_leader_is_not_moved() -> None:
    assert elect_leader(state((1, 2), (1, 2), 1, {1}), is_acceptable_leader=everyone) is None


def test_unclean_election_prefers_a_long_replica_too() -> None:
    change = elect_leader(state((1, 2, 3), (1,), -1, {2}), is_acceptable_leader=lambda b: b != 1, unclean=True)
    assert change is not None and change.after.leader == 3 and change.unclean


def test_preferred_election_waits_for_a_short_preferred_replica() -> None:
    assert elect_preferred(state((1, 2), (1, 2), 2, {1}), is_acceptable_leader=everyone) is None
    both_short = elect_preferred(state((1, 2), (1, 2), 2, {1, 2}), is_acceptable_leader=everyone)
    assert both_short is not None and both_short.after.leader == 1
    long_again = elect_preferred(state((1, 2), (1, 2), 2, set()), is_acceptable_leader=everyone)
    assert long_again is not None and long_again.after.leader == 1


def test_rebalancing_leaves_partitions_whose_preferred_replica_is_short() -> None:
    parts = [PartitionState(TID, i, (1, 2), (1, 2), 2, 3, 8, short=frozenset({1}) if i == 0 else frozenset())
             for i in range(2)]
    changes, more = plan(parts, percentage=0, is_acceptable_leader=everyone)
    assert [c.after.partition for c in changes] == [1] and not more


# -- through the controller and the wire ---------------------------------------------------------


class WireToController:
    """A PeerClient stand-in: encodes the broker's request at the version it asked, decodes it as the
    controller's node does, and answers with the controller's response (replayed into `current`)."""

    def __init__(self, controller: QuorumController, current: View) -> None:
        self.controller = controller
        self.current = current

    async def request(self, api: Any, version: int, body: Any) -> Any:
        decoded = api.request.decode(body.encode(version=version), version=version)
        result = self.controller.heartbeat(decoded, 0, self.current, 100)
        self.current = replay(self.current, result.records)
        return result.response


def test_a_brokers_heartbeat_reports_short_logs_and_elections_follow() -> None:
    t = topic("t", ((1, 2, 3), (1, 2, 3), 1), topic_id=TID)
    qc = QuorumController("cluster", ControllerConfig(auto_leader_rebalance_enable=False), random.Random(3))
    current = view(t, registrations=brokers(1, 2, 3))
    wire = WireToController(qc, current)
    reports: dict[uuid.UUID, list[int]] = {TID: [0]}
    lifecycle = BrokerLifecycle(2, (), None, lambda: "cluster", lambda: None, lambda: 100,
                                short_local_logs=lambda: reports)
    lifecycle.state.broker_epoch = 10
    asyncio.run(lifecycle._heartbeat(wire))  # noqa: SLF001 - one heartbeat, without the loop's timers
    assert qc.short_logs.replicas(TID, 0) == {2}

    fenced = qc.heartbeat(heartbeat_request(1, 10, 100, want_fence=True), 0, current, 100)
    (change,) = of_type(fenced.records, mr.PartitionChangeRecord)
    assert change.leader == 3  # not 2, the first ISR member in replica order: its local log is short

    reports.clear()  # broker 2 reached local retention: its next heartbeat lists nothing
    asyncio.run(lifecycle._heartbeat(wire))  # noqa: SLF001
    assert qc.short_logs.replicas(TID, 0) == frozenset()
    again = qc.heartbeat(heartbeat_request(1, 10, 100, want_fence=True), 0, current, 100)
    assert of_type(again.records, mr.PartitionChangeRecord)[0].leader == 2


def test_a_new_active_controller_starts_without_short_logs() -> None:
    qc = QuorumController("cluster", ControllerConfig(), random.Random(3))
    request = HEARTBEAT.request(broker_id=2, broker_epoch=10, current_metadata_offset=100, want_fence=False,
                                want_shut_down=False, short_local_logs=[
                                    HEARTBEAT.request.ShortLocalLogTopic(topic_id=TID, partitions=[0])])
    current = view(topic("t", ((1, 2), (1, 2), 1), topic_id=TID), registrations=brokers(1, 2))
    qc.heartbeat(request, 0, current, 100)
    assert qc.short_logs.replicas(TID, 0) == {2}
    qc.deactivate()  # it lost leadership: the soft state goes, the next active one learns it anew
    assert qc.short_logs.replicas(TID, 0) == frozenset()


def test_a_heartbeat_without_the_tag_reports_nothing() -> None:
    """Apache Kafka's brokers do not send the tag: every replica counts as long."""
    qc = QuorumController("cluster", ControllerConfig(), random.Random(3))
    current = view(topic("t", ((1, 2), (1, 2), 1), topic_id=TID), registrations=brokers(1, 2))
    qc.short_logs.report(2, [(TID, 0)])
    plain = HEARTBEAT.request.decode(heartbeat_request(2, 10, 100).encode(version=1), version=1)
    qc.heartbeat(plain, 0, current, 100)
    assert qc.short_logs.replicas(TID, 0) == frozenset()
