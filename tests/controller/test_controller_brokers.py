"""QuorumController: broker registration, heartbeats, session expiry, controlled shutdown, unregistration."""

from __future__ import annotations

import random
import uuid

import pytest

from quorum.controller import ControllerConfig, QuorumController, TickOutcome
from quorum.controller.records import NO_LEADER
from quorum.wire import metadata_records as mr
from quorum.wire.errors import ErrorCode
from quorum.wire.protocol import APIS
from tests.controller.fakes import (
    Registration,
    brokers,
    create_topics_request,
    decoded,
    heartbeat_request,
    incarnation,
    of_type,
    registration_request,
    replay,
    topic,
    view,
)

TIMEOUT = 9000


def controller(**config) -> QuorumController:
    return QuorumController("cluster", ControllerConfig(**config), random.Random(42))


def test_registration_is_fenced_with_the_record_offset_as_epoch() -> None:
    qc = controller()
    result = qc.register_broker(registration_request(1, rack="r1"), now_ms=0, view=view(), next_offset=120)
    (record,) = decoded(result.records)
    assert isinstance(record, mr.RegisterBrokerRecord)
    assert (record.broker_id, record.broker_epoch, record.fenced, record.rack) == (1, 120, True, "r1")
    assert record.incarnation_id == incarnation(1)
    assert [(e.name, e.host, e.port) for e in record.end_points] == [("PLAINTEXT", "b1", 9092)]
    assert [(f.name, f.max_supported_version) for f in record.features] == [("metadata.version", 21)]
    assert (result.response.error_code, result.response.broker_epoch) == (0, 120)
    assert qc.heartbeats.last_contact_ms(1) == 0


def test_registration_with_another_cluster_id_is_refused() -> None:
    result = controller().register_broker(registration_request(1, cluster_id="other"), 0, view(), 5)
    assert result.records == ()
    assert (result.response.error_code, result.response.broker_epoch) == (ErrorCode.INCONSISTENT_CLUSTER_ID, -1)


def test_new_incarnation_refused_while_the_old_one_is_alive() -> None:
    qc = controller()
    current = view(registrations=brokers(1))
    new_process = registration_request(1, incarnation_id=uuid.uuid4())
    result = qc.register_broker(new_process, 0, current, 50)
    assert (result.records, result.response.error_code) == ((), ErrorCode.DUPLICATE_BROKER_REGISTRATION)
    result = qc.register_broker(new_process, TIMEOUT + 1, current, 50)
    assert result.response.error_code == 0


def test_new_incarnation_first_leaves_its_partitions() -> None:
    qc = controller()
    current = view(topic("t", ((1, 2), (1, 2), 1), ((2, 1), (2, 1), 2)), registrations=brokers(1, 2, fenced=(1,)))
    result = qc.register_broker(registration_request(1, incarnation_id=uuid.uuid4()), 0, current, 100)
    changes = decoded(result.records)
    assert [type(r) for r in changes] == [mr.PartitionChangeRecord, mr.PartitionChangeRecord, mr.RegisterBrokerRecord]
    assert [(r.partition_id, r.leader, r.isr) for r in changes[:2]] == [(0, 2, [2]), (1, 2, [2])]
    assert changes[2].broker_epoch == 102 == result.response.broker_epoch  # the offset of its own record


def test_same_incarnation_registering_again_keeps_its_partitions() -> None:
    current = view(topic("t", ((1, 2), (1, 2), 1)), registrations=brokers(1, 2, fenced=(1,)))
    result = controller().register_broker(registration_request(1), 0, current, 100)
    assert [type(r) for r in decoded(result.records)] == [mr.RegisterBrokerRecord]


def test_unfenced_broker_registering_again_gives_up_its_leaderships() -> None:
    current = view(topic("t", ((1, 2), (1, 2), 1)), registrations=brokers(1, 2))
    result = controller().register_broker(registration_request(1), 0, current, 100)
    records = decoded(result.records)
    assert [type(r) for r in records] == [mr.PartitionChangeRecord, mr.RegisterBrokerRecord]
    assert (records[0].leader, records[0].isr, records[1].broker_epoch) == (2, [2], 101)


def test_heartbeat_with_a_stale_epoch() -> None:
    qc = controller()
    current = view(registrations=brokers(1))
    for request in (heartbeat_request(1, 9, 100), heartbeat_request(2, 10, 100)):
        result = qc.heartbeat(request, 0, current, 200)
        assert result.records == ()
        response = result.response
        assert (response.error_code, response.is_fenced, response.is_caught_up) == (ErrorCode.STALE_BROKER_EPOCH,
                                                                                     True, False)


def test_fenced_broker_unfenced_once_caught_up_with_its_registration() -> None:
    qc = controller()
    current = view(registrations=brokers(1, fenced=(1,)))
    behind = qc.heartbeat(heartbeat_request(1, 10, 9), 0, current, 50)
    assert behind.records == ()
    assert (behind.response.is_caught_up, behind.response.is_fenced) == (False, True)
    wants_fence = qc.heartbeat(heartbeat_request(1, 10, 10, want_fence=True), 0, current, 50)
    assert (wants_fence.records, wants_fence.response.is_fenced) == ((), True)
    caught_up = qc.heartbeat(heartbeat_request(1, 10, 10), 0, current, 50)
    (record,) = decoded(caught_up.records)
    assert isinstance(record, mr.UnfenceBrokerRecord) and (record.id, record.epoch) == (1, 10)
    assert (caught_up.response.is_caught_up, caught_up.response.is_fenced, caught_up.response.should_shut_down) == (
        True, False, False)


def test_unfencing_elects_the_broker_where_it_is_the_isr() -> None:
    current = view(topic("t", ((1, 2), (1,), NO_LEADER), ((1, 2), (1, 2), 2), ((2, 3), (3,), NO_LEADER)),
                   registrations={**brokers(2, 3, fenced=(3,)), 1: Registration(1, incarnation(1), 10, fenced=True)})
    result = controller().heartbeat(heartbeat_request(1, 10, 10), 0, current, 50)
    records = decoded(result.records)
    assert isinstance(records[0], mr.UnfenceBrokerRecord)
    assert [(r.partition_id, r.leader, r.isr) for r in records[1:]] == [(0, 1, None)]


def test_session_expiry_fences_and_moves_leaders() -> None:
    qc = controller()
    current = view(topic("t", ((1, 2, 3), (1, 2, 3), 1), ((2, 1), (2, 1), 2), ((3, 2), (3,), 3)),
                   registrations=brokers(1, 2, 3))
    for broker in (1, 2, 3):
        qc.heartbeats.register(broker, 0)
    qc.heartbeats.touch(2, 5000, 0)
    qc.heartbeats.touch(3, 5000, 0)
    early = qc.tick(TIMEOUT, current)
    assert early.records == ()
    assert early.response == TickOutcome((), TIMEOUT + 1)
    result = qc.tick(TIMEOUT + 1, current)
    records = decoded(result.records)
    assert [type(r) for r in records] == [mr.PartitionChangeRecord, mr.PartitionChangeRecord, mr.FenceBrokerRecord]
    # Partition 1 only loses a follower: Leader is set anyway, the leader epoch shows the ISR change.
    assert [(r.partition_id, r.leader, r.isr) for r in records[:2]] == [(0, 2, [2, 3]), (1, 2, [2])]
    assert (records[2].id, records[2].epoch) == (1, 10)
    assert result.response == TickOutcome((1,), 5000 + TIMEOUT + 1)
    after = replay(current, result.records)
    assert after.registrations[1].fenced
    assert after.topics["t"].partitions[0].leader_epoch == 6  # was 5
    follower_lost = after.topics["t"].partitions[1]
    assert (follower_lost.leader_epoch, follower_lost.partition_epoch) == (6, 8)  # was (5, 7)


def test_brokers_expiring_together_are_not_elected_for_each_other() -> None:
    qc = controller()
    current = view(topic("t", ((1, 2, 3), (1, 2, 3), 1)), registrations=brokers(1, 2, 3))
    qc.heartbeats.register(1, 0)
    qc.heartbeats.register(2, 0)
    qc.heartbeats.register(3, 5000)
    result = qc.tick(TIMEOUT + 1, current)
    changes = of_type(result.records, mr.PartitionChangeRecord)
    # 3 is elected at once, never 2; the second shrink sets Leader 3 again (an ISR change bumps the epoch)
    assert [(r.leader, r.isr) for r in changes] == [(3, [2, 3]), (3, [3])]
    assert result.response.fenced == (1, 2)
    after = replay(current, result.records)
    assert (after.topics["t"].partitions[0].leader, after.topics["t"].partitions[0].isr) == (3, (3,))


def test_a_new_controller_gives_every_broker_a_full_session() -> None:
    qc = controller()
    current = view(registrations=brokers(1, 2))
    assert qc.tick(100_000, current).records == ()
    assert qc.tick(100_000 + TIMEOUT, current).records == ()
    assert qc.tick(100_000 + TIMEOUT + 1, current).response.fenced == (1, 2)


def test_fenced_brokers_are_not_watched() -> None:
    qc = controller(auto_leader_rebalance_enable=False)
    result = qc.tick(0, view(registrations=brokers(1, fenced=(1,))))
    assert result.response == TickOutcome((), None)
    # With leader rebalancing on (Kafka's default), the next imbalance check is the next deadline.
    assert controller().tick(0, view(registrations=brokers(1, fenced=(1,)))).response == TickOutcome((), 300_000)


def test_controlled_shutdown() -> None:
    qc = controller()
    pending = view(topic("t", ((1, 2), (1, 2), 1), ((2, 1), (2, 1), 2)), registrations=brokers(1, 2))
    asks = heartbeat_request(1, 10, 40, want_shut_down=True)
    first = qc.heartbeat(asks, 0, pending, next_offset=50)
    assert [(r.partition_id, r.leader, r.isr) for r in decoded(first.records)] == [(0, 2, [2]), (1, 2, [2])]
    assert (first.response.is_fenced, first.response.should_shut_down) == (False, False)
    assert qc.heartbeats.in_controlled_shutdown(1)
    pending = replay(pending, first.records)
    # Broker 2 has not replayed the leader moves (offsets 50-51) yet: broker 1 must wait.
    qc.heartbeat(heartbeat_request(2, 10, 50), 1, pending, 52)
    waiting = qc.heartbeat(asks, 2, pending, 52)
    assert waiting.records == ()
    assert (waiting.response.is_fenced, waiting.response.should_shut_down) == (False, False)
    qc.heartbeat(heartbeat_request(2, 10, 51), 3, pending, 52)
    done = qc.heartbeat(asks, 4, pending, 52)
    (fence,) = decoded(done.records)
    assert isinstance(fence, mr.FenceBrokerRecord)
    assert (done.response.is_fenced, done.response.should_shut_down) == (True, True)
    assert not qc.heartbeats.in_controlled_shutdown(1)


def test_a_broker_leading_nothing_shuts_down_at_once() -> None:
    current = view(topic("t", ((1, 2), (1, 2), 1)), registrations=brokers(1, 2))
    result = controller().heartbeat(heartbeat_request(2, 10, 0, want_shut_down=True), 0, current, 50)
    assert [type(r) for r in decoded(result.records)] == [mr.PartitionChangeRecord, mr.FenceBrokerRecord]
    assert (result.response.is_fenced, result.response.should_shut_down) == (True, True)


def test_a_broker_in_controlled_shutdown_is_not_elected() -> None:
    qc = controller()
    current = view(topic("t", ((1, 2, 3), (1, 2, 3), 1), ((2, 1, 3), (2, 1, 3), 2)), registrations=brokers(1, 2, 3))
    first = qc.heartbeat(heartbeat_request(2, 10, 0, want_shut_down=True), 0, current, 50)
    assert not first.response.is_fenced and qc.heartbeats.in_controlled_shutdown(2)
    # Before its leader moves are replayed, broker 2 is still in the ISR here, but never elected.
    result = qc.heartbeat(heartbeat_request(1, 10, 0, want_fence=True), 0, current, 52)
    # (partition 1 is still led by 2 in this view: an unacceptable leader is replaced too)
    assert [(r.partition_id, r.leader) for r in of_type(result.records, mr.PartitionChangeRecord)] == [(0, 3), (1, 3)]


def test_fenced_broker_asking_to_shut_down_may_go_now() -> None:
    result = controller().heartbeat(heartbeat_request(1, 10, 0, want_shut_down=True), 0,
                                    view(registrations=brokers(1, fenced=(1,))), 5)
    assert result.records == ()
    assert (result.response.is_fenced, result.response.should_shut_down) == (True, True)


def test_unfenced_broker_asking_to_be_fenced() -> None:
    current = view(topic("t", ((1, 2), (1, 2), 1)), registrations=brokers(1, 2))
    result = controller().heartbeat(heartbeat_request(1, 10, 0, want_fence=True), 0, current, 5)
    assert [type(r) for r in decoded(result.records)] == [mr.PartitionChangeRecord, mr.FenceBrokerRecord]
    assert result.response.is_fenced and not result.response.should_shut_down


def test_unregister() -> None:
    qc = controller()
    current = view(topic("t", ((1, 2), (1, 2), 1)), registrations=brokers(1, 2))
    result = qc.unregister_broker(1, current)
    records = decoded(result.records)
    assert [type(r) for r in records] == [mr.PartitionChangeRecord, mr.UnregisterBrokerRecord]
    assert (records[1].broker_id, records[1].broker_epoch) == (1, 10)
    assert result.response == 0
    assert qc.unregister_broker(3, current).response == ErrorCode.BROKER_ID_NOT_REGISTERED


def test_deactivate_forgets_sessions() -> None:
    qc = controller()
    qc.heartbeats.register(1, 0)
    qc.deactivate()
    assert not qc.heartbeats.known(1)


def test_a_broker_life_with_a_pending_view() -> None:
    """Register three brokers, unfence them, lose one, get it back: the records replay as the node will."""
    qc = controller()
    pending = view()
    offset = 0

    def apply(result):
        nonlocal pending, offset
        pending = replay(pending, result.records)
        offset += len(result.records)
        return result.response

    epochs = {b: apply(qc.register_broker(registration_request(b), 0, pending, offset)).broker_epoch for b in (1, 2, 3)}
    assert epochs == {1: 0, 2: 1, 3: 2}
    for b in (1, 2, 3):
        assert not apply(qc.heartbeat(heartbeat_request(b, epochs[b], offset - 1), 100, pending, offset)).is_fenced
    created = apply(qc.create_topics(create_topics_request(("orders", 6, 3)), pending))
    assert created.topics[0].error_code == 0
    before = {p.partition: p for p in pending.topics["orders"].partitions}
    for b in (2, 3):
        apply(qc.heartbeat(heartbeat_request(b, epochs[b], offset - 1), 5000, pending, offset))
    assert apply(qc.tick(9101, pending)).fenced == (1,)
    assert pending.registrations[1].fenced
    for p in pending.topics["orders"].partitions:
        assert 1 not in p.isr and p.leader in (2, 3)
        if before[p.partition].leader == 1:
            assert p.leader_epoch == before[p.partition].leader_epoch + 1
    back = apply(qc.heartbeat(heartbeat_request(1, epochs[1], offset - 1), 9200, pending, offset))
    assert not back.is_fenced and not pending.registrations[1].fenced


@pytest.mark.parametrize("key", [62, 63])
def test_responses_encode_at_every_version(key: int) -> None:
    qc = controller()
    current = view(registrations=brokers(1, fenced=(1,)))
    results = [qc.register_broker(registration_request(1), 0, current, 5),
               qc.register_broker(registration_request(1, cluster_id="x"), 0, current, 5)] if key == 62 else [
        qc.heartbeat(heartbeat_request(1, 10, 10), 0, current, 5), qc.heartbeat(heartbeat_request(1, 1, 1), 0,
                                                                                current, 5)]
    api = APIS[key]
    for result in results:
        for version in range(api.min_version, api.max_version + 1):
            assert api.response.decode(result.response.encode(version=version), version=version) is not None
