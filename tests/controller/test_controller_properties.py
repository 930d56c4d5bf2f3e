"""Random operation sequences through the controller, replayed into a pending view after each one.

Invariants checked after every step: every ISR is non-empty and within the replicas; a leader is
in its ISR and active (registered, unfenced); a leaderless partition has no active ISR member (an
unfenced broker would have been elected); leader, partition and topic epochs never go back; the
cluster topic_epoch counter is at least every topic's epoch and grows with each topic created,
deleted or widened.
"""

from __future__ import annotations

import random
import uuid

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from quorum.controller import ControllerConfig, QuorumController
from quorum.controller.records import NO_LEADER
from tests.controller.fakes import (
    View,
    alter_partition_request,
    create_partitions_request,
    create_topics_request,
    delete_topics_request,
    heartbeat_request,
    registration_request,
    replay,
    view,
)

BROKERS = st.integers(1, 4)
NAMES = st.sampled_from(["a", "b", "c"])
OPS = st.one_of(
    st.tuples(st.just("register"), BROKERS, st.booleans()),
    st.tuples(st.just("heartbeat"), BROKERS, st.booleans(), st.booleans()),
    st.tuples(st.just("tick"), st.integers(0, 12_000)),
    st.tuples(st.just("create"), NAMES, st.integers(1, 4), st.integers(1, 3)),
    st.tuples(st.just("delete"), NAMES),
    st.tuples(st.just("widen"), NAMES, st.integers(1, 3)),
    st.tuples(st.just("expand"), NAMES),
    st.tuples(st.just("unregister"), BROKERS),
)


class Driver:
    def __init__(self, seed: int) -> None:
        self.qc = QuorumController("cluster", ControllerConfig(session_timeout_ms=9000), random.Random(seed))
        self.pending: View = view()
        self.offset = 0
        self.now = 0
        self.bumps = 0  # topic epoch bumps expected

    def apply(self, result):
        self.pending = replay(self.pending, result.records)
        self.offset += len(result.records)
        return result.response

    def run(self, op: tuple) -> None:
        kind = op[0]
        qc, pending = self.qc, self.pending
        if kind == "register":
            incarnation = uuid.uuid4() if op[2] else None  # None: the broker's usual incarnation id
            self.apply(qc.register_broker(registration_request(op[1], incarnation_id=incarnation), self.now, pending,
                                          self.offset))
        elif kind == "heartbeat":
            registration = pending.registrations.get(op[1])
            epoch = registration.broker_epoch if registration else 0
            self.apply(qc.heartbeat(heartbeat_request(op[1], epoch, self.offset - 1, want_fence=op[2] and op[3]),
                                    self.now, pending, self.offset))
        elif kind == "tick":
            self.now += op[1]
            self.apply(qc.tick(self.now, pending))
        elif kind == "create":
            response = self.apply(qc.create_topics(create_topics_request((op[1], op[2], op[3])), pending))
            self.bumps += sum(t.error_code == 0 for t in response.topics)
        elif kind == "delete":
            response = self.apply(qc.delete_topics(delete_topics_request(names=[op[1]]), pending))
            self.bumps += sum(t.error_code == 0 for t in response.responses)
        elif kind == "widen":
            topic = pending.topics.get(op[1])
            count = len(topic.partitions) + op[2] if topic else 1
            response = self.apply(qc.create_partitions(create_partitions_request((op[1], count)), pending))
            self.bumps += sum(t.error_code == 0 for t in response.results)
        elif kind == "expand":
            topic = pending.topics.get(op[1])
            if topic is None:
                return
            for p in topic.partitions:
                leader = pending.registrations.get(p.leader)
                if leader is None:
                    continue
                isr = [r for r in p.replicas if r in p.isr or self.active(r)]
                self.apply(qc.alter_partition(alter_partition_request(
                    p.leader, leader.broker_epoch, topic.topic_id, (p.partition, p.leader_epoch, p.partition_epoch,
                                                                    isr)), self.pending))
        elif kind == "unregister":
            self.apply(qc.unregister_broker(op[1], pending))

    def active(self, broker: int) -> bool:
        registration = self.pending.registrations.get(broker)
        return registration is not None and not registration.fenced \
            and not self.qc.heartbeats.in_controlled_shutdown(broker)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(ops=st.lists(OPS, max_size=40), seed=st.integers(0, 100))
def test_invariants_hold_after_every_step(ops: list[tuple], seed: int) -> None:
    driver = Driver(seed)
    epochs: dict[tuple[uuid.UUID, int], tuple[int, int]] = {}
    topic_epochs: dict[uuid.UUID, int] = {}
    for op in ops:
        driver.run(op)
        state = driver.pending
        assert max(state.topic_epoch, 0) == driver.bumps
        for topic in state.topics.values():
            assert topic.topic_epoch <= state.topic_epoch
            assert topic.topic_epoch >= topic_epochs.get(topic.topic_id, -1)
            topic_epochs[topic.topic_id] = topic.topic_epoch
            assert [p.partition for p in topic.partitions] == list(range(len(topic.partitions)))
            for p in topic.partitions:
                assert p.isr and set(p.isr) <= set(p.replicas) and len(set(p.isr)) == len(p.isr)
                if p.leader == NO_LEADER:
                    assert not any(driver.active(r) for r in p.isr), (op, p)
                else:
                    assert p.leader in p.isr and driver.active(p.leader), (op, p)
                key = (topic.topic_id, p.partition)
                old_leader_epoch, old_partition_epoch = epochs.get(key, (0, 0))
                assert p.leader_epoch >= old_leader_epoch and p.partition_epoch >= old_partition_epoch
                epochs[key] = (p.leader_epoch, p.partition_epoch)
