"""KIP-848's heartbeat rules by hand: joins, epochs, revocation before assignment, leaves, expiry,
the answers Kafka gives to bad requests, and the two assignors."""

from __future__ import annotations

import uuid

import pytest

from quorum.broker.groups.config import GroupConfig
from quorum.broker.groups.consumer.assignors import AssignmentSpec, assignors_from_config, range_assignor, uniform
from quorum.broker.groups.consumer.events import ConsumerHeartbeat
from quorum.broker.groups.consumer.member import MemberState
from quorum.wire.errors import ErrorCode as E
from tests.broker.groups.consumer.sim_clients import CONFIG, GROUP, REBALANCE_MS, SimClient, SimGroup, topic_info

T = topic_info("t", 4)


def partitions(*numbers: int, info=T) -> frozenset:
    return frozenset((info.topic_id, n) for n in numbers)


def sim_with(*member_ids: str) -> tuple[SimGroup, list[SimClient]]:
    sim = SimGroup(topics={"t": T})
    clients = []
    for member_id in member_ids:
        client = sim.clients[member_id] = SimClient(member_id, ("t",))
        sim.send(client)
        clients.append(client)
    return sim, clients


def test_a_lone_member_gets_every_partition_at_the_group_epoch() -> None:
    sim, (a,) = sim_with("a")
    assert a.owned == partitions(0, 1, 2, 3)
    assert a.epoch == sim.group.group_epoch == sim.group.assignment_epoch == 1
    assert sim.group.state.value == "Stable"


def test_a_partition_moves_only_after_its_owner_revoked_it() -> None:
    sim, (a, b) = sim_with("a", "b")
    assert b.owned == frozenset() and b.epoch == 2  # all four are still a's
    assert sim.group.members["b"].state is MemberState.UNRELEASED_PARTITIONS
    answer = sim.send(a)  # a is told to keep two: its answer omits the other two
    assert answer.assignment is not None and len(answer.assignment) == 2 and answer.member_epoch == 1
    assert sim.group.members["a"].state is MemberState.UNREVOKED_PARTITIONS
    assert sim.send(b).assignment is None  # a has not acknowledged: b still waits
    sim.send(a)  # a's heartbeat now owns two: it moves to epoch 2, the other two are free
    assert a.epoch == 2 and len(a.owned) == 2
    sim.send(b)
    assert b.owned == partitions(0, 1, 2, 3) - a.owned
    sim.check_owners()


def test_epochs_ahead_are_fenced_and_the_previous_epoch_is_accepted_only_with_a_subset() -> None:
    sim, (a,) = sim_with("a")
    ahead = sim.send_raw(ConsumerHeartbeat(GROUP, "a", 5, owned=a.owned))
    assert ahead.error == E.FENCED_MEMBER_EPOCH
    sim.clients["b"] = b = SimClient("b", ("t",))
    sim.send(b)
    sim.send(a)
    sim.send(a)  # a revoked two and is at epoch 2 now
    assert a.epoch == 2
    lost = sim.send_raw(ConsumerHeartbeat(GROUP, "a", 1, owned=a.owned))  # the answer that moved it was lost
    assert lost.error == E.NONE and lost.member_epoch == 2
    too_much = sim.send_raw(ConsumerHeartbeat(GROUP, "a", 1, owned=partitions(0, 1, 2, 3)))
    assert too_much.error == E.FENCED_MEMBER_EPOCH


def test_unknown_members_leaves_and_session_expiry() -> None:
    sim, (a, b) = sim_with("a", "b")
    assert sim.send_raw(ConsumerHeartbeat(GROUP, "nobody", 3, owned=frozenset())).error == E.UNKNOWN_MEMBER_ID
    epoch = sim.group.group_epoch
    answer = sim.send(b, leave=True)
    assert (answer.error, answer.member_epoch) == (E.NONE, -1)
    assert "b" not in sim.group.members and sim.group.group_epoch == epoch + 1
    assert sim.send(b, leave=True).error == E.UNKNOWN_MEMBER_ID
    assert sim.advance(CONFIG.group_consumer_session_timeout_ms) == ["a"]
    assert sim.group.state.value == "Empty" and not sim.group.owners


def test_a_member_that_does_not_revoke_within_its_rebalance_timeout_is_removed() -> None:
    sim, (a, b) = sim_with("a", "b")
    sim.send(a)  # told to revoke two; it goes on heartbeating as if it still owned all four
    assert sim.group.members["a"].state is MemberState.UNREVOKED_PARTITIONS
    stuck = ConsumerHeartbeat(GROUP, "a", a.epoch, owned=partitions(0, 1, 2, 3))
    for _ in range(REBALANCE_MS // 1_000 - 1):
        sim.advance(1_000)
        assert sim.send_raw(stuck).error == E.NONE
        sim.send(b)
    assert sim.advance(1_000) == ["a"]
    sim.send(b)
    assert b.owned == partitions(0, 1, 2, 3)


def test_more_partitions_bump_the_group_epoch_and_are_assigned() -> None:
    sim, (a,) = sim_with("a")
    sim.topics["t"] = topic_info("t", 6)
    sim.send(a)
    assert a.owned == partitions(0, 1, 2, 3, 4, 5) and a.epoch == 2


@pytest.mark.parametrize(
    ("request_", "error", "message"),
    [
        (
            ConsumerHeartbeat("", "m", 0, rebalance_timeout_ms=1, subscribed_topic_names=("t",), owned=frozenset()),
            E.INVALID_REQUEST,
            "GroupId can't be empty.",
        ),
        (
            ConsumerHeartbeat(GROUP, "m", 0, subscribed_topic_names=("t",), owned=frozenset()),
            E.INVALID_REQUEST,
            "RebalanceTimeoutMs must be provided in first request.",
        ),
        (
            ConsumerHeartbeat(GROUP, "m", 0, rebalance_timeout_ms=1, owned=frozenset()),
            E.INVALID_REQUEST,
            "SubscribedTopicNames or SubscribedTopicRegex must be set in first request.",
        ),
        (
            ConsumerHeartbeat(GROUP, "m", 0, rebalance_timeout_ms=1, subscribed_topic_names=("t",)),
            E.INVALID_REQUEST,
            "TopicPartitions must be empty when (re-)joining.",
        ),
        (ConsumerHeartbeat(GROUP, "", 3), E.INVALID_REQUEST, "MemberId can't be empty."),
        (ConsumerHeartbeat(GROUP, "m", -2), E.INVALID_REQUEST, "InstanceId can't be null."),
        (ConsumerHeartbeat(GROUP, "m", -3), E.INVALID_REQUEST, "MemberEpoch is invalid."),
        (
            ConsumerHeartbeat(
                GROUP,
                "m",
                0,
                rebalance_timeout_ms=1,
                subscribed_topic_names=("t",),
                owned=frozenset(),
                server_assignor="sticky",
            ),
            E.UNSUPPORTED_ASSIGNOR,
            "ServerAssignor sticky is not supported. Supported assignors: uniform, range.",
        ),
    ],
)
def test_bad_requests_are_refused_as_kafka_refuses_them(request_: ConsumerHeartbeat, error: int, message: str) -> None:
    answer = SimGroup().send_raw(request_)
    assert (answer.error, answer.message) == (error, message)


def test_uniform_is_balanced_and_keeps_what_it_can() -> None:
    a, b = topic_info("a", 5), topic_info("b", 2)
    topics = {"a": a, "b": b}
    first = uniform({"m1": AssignmentSpec(frozenset({"a", "b"}))}, topics)
    assert len(first["m1"]) == 7
    second = uniform(
        {"m1": AssignmentSpec(frozenset({"a", "b"}), first["m1"]), "m2": AssignmentSpec(frozenset({"a", "b"}))}, topics
    )
    assert sorted(len(p) for p in second.values()) == [3, 4]
    assert second["m1"] <= first["m1"]  # m1 only gave partitions away
    only_b = uniform({"m1": AssignmentSpec(frozenset({"a"})), "m2": AssignmentSpec(frozenset({"b"}))}, topics)
    assert only_b["m2"] == partitions(0, 1, info=b) and len(only_b["m1"]) == 5


def test_range_gives_consecutive_ranges_per_topic() -> None:
    t = topic_info("t", 5)
    members = {m: AssignmentSpec(frozenset({"t"})) for m in ("m2", "m1")}
    assert range_assignor(members, {"t": t}) == {"m1": partitions(0, 1, 2, info=t), "m2": partitions(3, 4, info=t)}


def test_the_group_uses_the_assignor_its_members_ask_for() -> None:
    sim = SimGroup(topics={"t": T})
    sim.send_raw(
        ConsumerHeartbeat(
            GROUP,
            "m1",
            0,
            rebalance_timeout_ms=1,
            subscribed_topic_names=("t",),
            owned=frozenset(),
            server_assignor="range",
        )
    )
    sim.send_raw(
        ConsumerHeartbeat(GROUP, "m2", 0, rebalance_timeout_ms=1, subscribed_topic_names=("t",), owned=frozenset())
    )
    described = sim.rules.describe(sim.group)
    assert described.assignor == "range" and described.group_epoch == 2
    assert {m.member_id: m.target_assignment for m in described.members} == {
        "m1": partitions(0, 1),
        "m2": partitions(2, 3),
    }


def test_settings_are_checked_against_their_bounds() -> None:
    with pytest.raises(ValueError, match=r"group.consumer.session.timeout.ms is 1000, outside"):
        GroupConfig(group_consumer_session_timeout_ms=1000)
    with pytest.raises(ValueError, match="must be below group.consumer.session.timeout.ms"):
        GroupConfig(
            group_consumer_heartbeat_interval_ms=6000,
            group_consumer_session_timeout_ms=6000,
            group_consumer_min_session_timeout_ms=1000,
            group_consumer_min_heartbeat_interval_ms=1000,
        )
    assert assignors_from_config("range, uniform") == ("range", "uniform")
    with pytest.raises(ValueError, match=r"unknown assignor\(s\) \['sticky'\]"):
        assignors_from_config("uniform,sticky")
    assert uuid.UUID(str(T.topic_id))


def test_a_static_member_away_keeps_its_partitions_and_its_successor_takes_them_without_a_rebalance() -> None:
    sim = SimGroup(topics={"t": T})
    a = sim.clients["a"] = SimClient("a", ("t",), instance_id="instance-a")
    b = sim.clients["b"] = SimClient("b", ("t",))
    for _ in range(3):
        for client in (a, b):
            sim.send(client)
    held, epoch = a.owned, sim.group.group_epoch
    assert held and b.owned and not held & b.owned
    away = sim.send_raw(ConsumerHeartbeat(GROUP, "a", -2, instance_id="instance-a"))
    assert (away.error, away.member_epoch) == (E.NONE, -2)
    sim.send(b)
    assert b.owned & held == frozenset(), "partitions of a static member away were given away"
    thief = sim.send_raw(ConsumerHeartbeat(GROUP, "x", 3, instance_id="instance-a", owned=frozenset()))
    assert (thief.error, thief.message) == (
        E.FENCED_INSTANCE_ID,
        "Static member x with instance id instance-a was fenced by member a.",
    )
    a2 = sim.clients["a2"] = SimClient("a2", ("t",), instance_id="instance-a")
    back = sim.send(a2)
    assert (back.error, a2.owned, sim.group.group_epoch) == (E.NONE, held, epoch)
    assert "a" not in sim.group.members
    a3 = SimClient("a3", ("t",), instance_id="instance-a")
    refused = sim.send(a3)
    assert (refused.error, refused.message) == (
        E.UNRELEASED_INSTANCE_ID,
        "Static member a3 with instance id instance-a cannot join the group because the "
        "instance id is owned by a2 member.",
    )
    unknown = sim.send_raw(ConsumerHeartbeat(GROUP, "z", 4, instance_id="nobody", owned=frozenset()))
    assert (unknown.error, unknown.message) == (E.UNKNOWN_MEMBER_ID, "Instance id nobody is unknown.")
    sim.check_owners()


def test_a_static_member_that_does_not_come_back_is_removed_when_its_session_lapses() -> None:
    sim = SimGroup(topics={"t": T})
    a = sim.clients["a"] = SimClient("a", ("t",), instance_id="instance-a")
    sim.send(a)
    sim.send_raw(ConsumerHeartbeat(GROUP, "a", -2, instance_id="instance-a"))
    assert sim.advance(CONFIG.group_consumer_session_timeout_ms) == ["a"]
    assert not sim.group.owners


def test_a_revocation_timer_that_no_longer_applies_is_dropped_when_due() -> None:
    """Its deadline must not stay in next_deadline once past, or the shell's timer would spin on it."""
    sim, (a, b) = sim_with("a", "b")
    sim.send(a)  # told to revoke: a revocation timer
    sim.group.revocation_deadlines["a"] = (sim.now + 10, sim.group.members["a"].member_epoch - 1)  # a stale one
    sim.advance(10)
    assert "a" in sim.group.members and "a" not in sim.group.revocation_deadlines
    assert sim.rules.next_deadline(sim.group) > sim.now
