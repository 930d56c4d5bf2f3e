"""Partition reassignment (KIP-455): the replica-set rules, AlterPartitionReassignments and
ListPartitionReassignments on the controller, and completion through AlterPartition and fencing."""

from __future__ import annotations

import random
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from quorum.controller import ControllerConfig, QuorumController
from quorum.controller.reassignment_replicas import ReassignmentReplicas, Revert, complete
from quorum.wire import metadata_records as mr
from quorum.wire.errors import ErrorCode
from quorum.wire.protocol import APIS
from tests.controller.fakes import (
    View,
    alter_partition_request,
    brokers,
    decoded,
    heartbeat_request,
    replay,
    topic,
    view,
)

T = topic("t", ((1, 2), (1, 2), 1), ((2, 3), (2, 3), 2), leader_epoch=5, partition_epoch=7)


def controller() -> QuorumController:
    return QuorumController("cluster", ControllerConfig(), random.Random(1))


def start(registrations: Any = None) -> View:
    return view(T, registrations=registrations or brokers(1, 2, 3, 4))


def alter_request(*partitions: tuple[str, int, list[int] | None], allow_rf_change: bool = True) -> Any:
    schema = APIS[45].request
    by_topic: dict[str, list[Any]] = {}
    for name, index, replicas in partitions:
        by_topic.setdefault(name, []).append(
            schema.ReassignableTopic.ReassignablePartition(partition_index=index, replicas=replicas))
    return schema(timeout_ms=60000, allow_replication_factor_change=allow_rf_change, topics=[
        schema.ReassignableTopic(name=name, partitions=parts) for name, parts in by_topic.items()])


def list_request(topics: dict[str, list[int]] | None = None) -> Any:
    schema = APIS[46].request
    return schema(timeout_ms=60000, topics=None if topics is None else [
        schema.ListPartitionReassignmentsTopics(name=name, partition_indexes=indexes)
        for name, indexes in topics.items()])


def errors(result: Any) -> list[tuple[str, int, int]]:
    return [(t.name, p.partition_index, p.error_code) for t in result.response.responses for p in t.partitions]


def partition(current: View, index: int = 0) -> Any:
    return current.topics["t"].partitions[index]


def reassign(current: View, index: int, target: list[int] | None) -> View:
    result = controller().alter_partition_reassignments(alter_request(("t", index, target)), current)
    assert errors(result) == [("t", index, 0)]
    return replay(current, result.records)


# -- the replica-set rules ------------------------------------------------------------------------


def test_replicas_are_target_then_leaving_ones_adding_and_removing_sorted() -> None:
    moving = ReassignmentReplicas.of([1, 2, 5], [4, 2, 3])
    assert moving == ReassignmentReplicas((4, 2, 3, 1, 5), (3, 4), (1, 5))
    assert moving.in_progress
    assert not ReassignmentReplicas.of([3, 2, 1], [1, 2, 3]).in_progress  # a reorder adds and removes nobody


def test_completion_needs_every_target_replica_in_the_isr_and_a_non_empty_isr() -> None:
    assert complete((2, 3, 1), (1, 2), adding=(3,), removing=(1,)) is None  # 3 not caught up yet
    assert complete((2, 3, 1), (1, 2, 3), adding=(3,), removing=(1,)) == ((2, 3), (2, 3))
    assert complete((2, 3, 1), (1, 3), adding=(3,), removing=(1,)) is None  # target replica 2 out of the ISR
    assert complete((2, 1), (1,), adding=(), removing=(1,)) is None  # the ISR would be empty
    assert complete((1, 2), (1, 2), adding=(), removing=()) is None  # nothing in progress


def test_revert_keeps_the_original_replicas_and_is_unclean_when_only_adding_ones_are_in_sync() -> None:
    assert Revert.of((2, 3, 1), (1, 2), adding=(3,)) == Revert((2, 1), (1, 2), False)
    assert Revert.of((3, 4, 1), (3,), adding=(3, 4)) == Revert((1,), (1,), True)


# -- AlterPartitionReassignments -----------------------------------------------------------------


def test_start_writes_replicas_adding_and_removing_and_keeps_the_leader() -> None:
    current = start()
    result = controller().alter_partition_reassignments(alter_request(("t", 0, [2, 3])), current)
    assert errors(result) == [("t", 0, 0)]
    (record,) = decoded(result.records)
    assert isinstance(record, mr.PartitionChangeRecord)
    assert (record.replicas, record.adding_replicas, record.removing_replicas, record.isr) == ([2, 3, 1], [3], [1],
                                                                                              None)
    # The replica set only grows: no leader epoch bump (Kafka bumps when a replica leaves the set).
    assert record.leader == -2
    after = partition(replay(current, result.records))
    assert (after.replicas, after.isr, after.leader, after.adding_replicas, after.removing_replicas,
            after.leader_epoch, after.partition_epoch) == ((2, 3, 1), (1, 2), 1, (3,), (1,), 5, 8)


def test_adding_replica_joining_the_isr_completes_and_hands_over_leadership() -> None:
    moving = reassign(start(), 0, [2, 3])
    state = partition(moving)
    result = controller().alter_partition(
        alter_partition_request(1, 10, T.topic_id, (0, state.leader_epoch, state.partition_epoch, [1, 2, 3])), moving)
    (record,) = decoded(result.records)
    assert (record.replicas, record.isr, record.adding_replicas, record.removing_replicas) == ([2, 3], [2, 3], [], [])
    assert record.leader == 2  # the old leader left: the first target replica in the ISR leads
    answer = result.response.topics[0].partitions[0]
    assert answer.error_code == ErrorCode.NEW_LEADER_ELECTED
    done = partition(replay(moving, result.records))
    assert (done.replicas, done.isr, done.leader, done.adding_replicas, done.removing_replicas) == (
        (2, 3), (2, 3), 2, (), ())


def test_a_reassignment_the_isr_already_allows_completes_at_once() -> None:
    reordered = partition(reassign(start(), 0, [2, 1]))
    assert (reordered.replicas, reordered.isr, reordered.leader, reordered.adding_replicas) == ((2, 1), (1, 2), 1, ())
    shrunk = partition(reassign(start(), 1, [3]), 1)
    assert (shrunk.replicas, shrunk.isr, shrunk.leader, shrunk.removing_replicas) == ((3,), (3,), 3, ())


def test_the_same_target_again_changes_nothing() -> None:
    moving = reassign(start(), 0, [2, 3])
    result = controller().alter_partition_reassignments(alter_request(("t", 0, [2, 3])), moving)
    assert errors(result) == [("t", 0, 0)]
    assert result.records == ()


def test_a_new_target_replaces_one_in_progress() -> None:
    moving = partition(reassign(reassign(start(), 0, [2, 3]), 0, [2, 4]))
    assert (moving.replicas, moving.adding_replicas, moving.removing_replicas) == ((2, 4, 1, 3), (4,), (1, 3))
    # A broker the earlier reassignment was adding and the new target keeps is still being added.
    wider = partition(reassign(reassign(start(), 0, [2, 3]), 0, [2, 3, 4]))
    assert (wider.replicas, wider.adding_replicas, wider.removing_replicas) == ((2, 3, 4, 1), (3, 4), (1,))


def test_cancel_goes_back_to_the_original_replicas() -> None:
    moving = reassign(start(), 0, [2, 3])
    cancelled = partition(reassign(moving, 0, None))
    assert (cancelled.replicas, cancelled.isr, cancelled.leader, cancelled.adding_replicas,
            cancelled.removing_replicas) == ((2, 1), (1, 2), 1, (), ())


def test_cancel_that_needs_an_unclean_election_is_refused_unless_the_topic_allows_it() -> None:
    moving = reassign(start(), 0, [3, 4])
    isr_of_adding = replay(moving, ())
    parts = list(isr_of_adding.topics["t"].partitions)
    parts[0] = type(parts[0])(0, 3, 9, (3, 4, 1, 2), (3,), 10, 0, (3, 4), (1, 2))
    only_adding = view(type(T)("t", T.topic_id, tuple(parts), T.topic_epoch), registrations=brokers(1, 2, 3, 4))
    refused = controller().alter_partition_reassignments(alter_request(("t", 0, None)), only_adding)
    assert errors(refused) == [("t", 0, ErrorCode.INVALID_REPLICA_ASSIGNMENT)]
    assert refused.records == ()
    allowed = view(only_adding.topics["t"], registrations=brokers(1, 2, 3, 4),
                   configs={(2, "t"): {"unclean.leader.election.enable": "true"}})
    reverted = controller().alter_partition_reassignments(alter_request(("t", 0, None)), allowed)
    assert errors(reverted) == [("t", 0, 0)]
    back = partition(replay(allowed, reverted.records))
    assert (back.replicas, back.isr, back.leader, back.adding_replicas, back.removing_replicas) == (
        (1, 2), (1, 2), 1, (), ())


@pytest.mark.parametrize(("target", "code"), [
    ([], ErrorCode.INVALID_REPLICA_ASSIGNMENT),
    ([2, 2], ErrorCode.INVALID_REPLICA_ASSIGNMENT),
    ([2, 9], ErrorCode.INVALID_REPLICA_ASSIGNMENT),
])
def test_invalid_targets(target: list[int], code: int) -> None:
    result = controller().alter_partition_reassignments(alter_request(("t", 0, target)), start())
    assert errors(result) == [("t", 0, code)]
    assert result.records == ()
    assert result.response.responses[0].partitions[0].error_message


def test_unknown_topic_or_partition_and_cancelling_nothing() -> None:
    result = controller().alter_partition_reassignments(
        alter_request(("nope", 0, [1]), ("t", 7, [1]), ("t", 0, None), ("t", 1, [3, 4])), start())
    assert errors(result) == [("nope", 0, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION),
                              ("t", 7, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION),
                              ("t", 0, ErrorCode.NO_REASSIGNMENT_IN_PROGRESS), ("t", 1, 0)]
    (record,) = decoded(result.records)  # the partition that succeeded still moves
    assert record.partition_id == 1


def test_replication_factor_change_refused_when_the_request_forbids_it() -> None:
    result = controller().alter_partition_reassignments(alter_request(("t", 0, [2, 3, 4]), allow_rf_change=False),
                                                        start())
    assert errors(result) == [("t", 0, ErrorCode.INVALID_REPLICATION_FACTOR)]
    allowed = controller().alter_partition_reassignments(alter_request(("t", 0, [3, 4]), allow_rf_change=False),
                                                         start())
    assert errors(allowed) == [("t", 0, 0)]


def test_fencing_a_removing_replica_does_not_stall_and_the_adding_one_completes_later() -> None:
    qc = controller()
    moving = reassign(start(), 0, [2, 3])
    fenced = qc.heartbeat(heartbeat_request(1, 10, 100, want_fence=True), 0, moving, 200)
    after = replay(moving, fenced.records)
    state = partition(after)
    assert state.leader == 2 and state.isr == (2,) and state.adding_replicas == (3,)
    grown = qc.alter_partition(alter_partition_request(2, 10, T.topic_id,
                                                       (0, state.leader_epoch, state.partition_epoch, [2, 3])), after)
    done = partition(replay(after, grown.records))
    assert (done.replicas, done.isr, done.leader, done.adding_replicas, done.removing_replicas) == (
        (2, 3), (2, 3), 2, (), ())


# -- ListPartitionReassignments ------------------------------------------------------------------


def test_list_names_only_partitions_in_progress() -> None:
    qc = controller()
    moving = reassign(start(), 0, [2, 3])
    every = qc.list_partition_reassignments(list_request(), moving).response
    assert every.error_code == 0
    assert [(t.name, [(p.partition_index, p.replicas, p.adding_replicas, p.removing_replicas) for p in t.partitions])
            for t in every.topics] == [("t", [(0, [2, 3, 1], [3], [1])])]
    assert qc.list_partition_reassignments(list_request({"t": [1], "nope": [0]}), moving).response.topics == []
    assert len(qc.list_partition_reassignments(list_request({"t": [0, 1]}), moving).response.topics) == 1
    assert qc.list_partition_reassignments(list_request(), start()).response.topics == []


# -- random sequences ----------------------------------------------------------------------------

STEPS = st.lists(st.one_of(
    st.tuples(st.just("reassign"), st.lists(st.integers(1, 5), min_size=1, max_size=4, unique=True)),
    st.tuples(st.just("cancel")),
    st.tuples(st.just("join"), st.integers(1, 5)),
    st.tuples(st.just("leave"), st.integers(1, 5)),
), max_size=12)


def check(p: Any) -> None:
    """What holds of a partition after every step, whatever the order of requests."""
    assert set(p.isr) <= set(p.replicas) and p.isr and p.leader in p.isr
    assert set(p.adding_replicas) <= set(p.replicas) and set(p.removing_replicas) <= set(p.replicas)
    assert not set(p.adding_replicas) & set(p.removing_replicas)
    assert len(set(p.replicas)) == len(p.replicas)


@settings(max_examples=150, deadline=None)
@given(steps=STEPS)
def test_any_sequence_keeps_the_partition_sane_and_every_target_is_reached_once_all_join(steps: list) -> None:
    qc = controller()
    current = view(topic("t", ((1, 2), (1, 2), 1), topic_id=T.topic_id), registrations=brokers(1, 2, 3, 4, 5))
    target: list[int] | None = None

    def alter_isr(isr: list[int]) -> None:
        nonlocal current
        p = partition(current)
        result = qc.alter_partition(alter_partition_request(p.leader, 10, T.topic_id,
                                                            (0, p.leader_epoch, p.partition_epoch, isr)), current)
        current = replay(current, result.records)

    for step in steps:
        p = partition(current)
        if step[0] == "reassign":
            result = qc.alter_partition_reassignments(alter_request(("t", 0, step[1])), current)
            assert errors(result) == [("t", 0, 0)]
            current, target = replay(current, result.records), step[1]
        elif step[0] == "cancel":
            result = qc.alter_partition_reassignments(alter_request(("t", 0, None)), current)
            expected = 0 if p.adding_replicas or p.removing_replicas else ErrorCode.NO_REASSIGNMENT_IN_PROGRESS
            assert errors(result)[0][2] in (expected, ErrorCode.INVALID_REPLICA_ASSIGNMENT)
            current = replay(current, result.records)
            if errors(result)[0][2] == 0:
                target = None
        elif step[0] == "join" and step[1] in p.replicas and step[1] not in p.isr:
            alter_isr([*p.isr, step[1]])
        elif step[0] == "leave" and step[1] in p.isr and step[1] != p.leader:
            alter_isr([b for b in p.isr if b != step[1]])
        check(partition(current))
        if not (partition(current).adding_replicas or partition(current).removing_replicas) and target is not None:
            assert partition(current).replicas == tuple(target)
            target = None
    # Every replica catches up: whatever was in progress completes on the target.
    for broker in partition(current).replicas:
        p = partition(current)
        if broker in p.replicas and broker not in p.isr:
            alter_isr([*p.isr, broker])
    done = partition(current)
    check(done)
    assert not done.adding_replicas and not done.removing_replicas
    if target is not None:
        assert done.replicas == tuple(target)
