"""Static membership (KIP-345) on the sans-IO core, fed by hand: Kafka's rules from
GroupMetadataManager.updateStaticMemberThenRebalanceOrCompleteJoin, completeClassicGroupJoin and
ClassicGroup.validateMember."""

from __future__ import annotations

from quorum.broker.groups.events import (
    Heartbeat,
    JoinAnswer,
    LeaveGroup,
    LeavingMember,
    OffsetCommit,
    SyncAnswer,
    SyncGroup,
)
from quorum.broker.groups.group import GroupState
from quorum.wire.errors import ErrorCode as E
from tests.broker.groups.harness import GROUP, PROTOCOLS, REBALANCE_MS, SESSION_MS, Harness


def heartbeat(h: Harness, member_id: str, generation: int, instance: str | None) -> int:
    return h.answer(h.send("heartbeat", Heartbeat(GROUP, generation, member_id, instance))).error


def static_group(h: Harness, *instances: str) -> tuple[list[str], int]:
    """Static members joined one after another (the first leads; those already in rejoin when a new
    one arrives, as their heartbeats tell them to) and synced: (member ids, generation)."""
    joins: dict[str, int] = {}
    for instance in instances:
        joins[instance] = h.join(group_instance_id=instance)
        group = h.core.group(GROUP)
        for member in list(group.members.values()):
            if member.group_instance_id != instance and not member.awaiting_join:
                joins[member.group_instance_id] = h.join(member.member_id, group_instance_id=member.group_instance_id)
    answers = {i: h.answer(joins[i]) for i in instances}
    assert all(isinstance(a, JoinAnswer) and a.error == E.NONE for a in answers.values()), answers
    ids = [answers[i].member_id for i in instances]
    group = h.core.group(GROUP)
    generation = group.generation
    assignments = {m: f"assignment-{i}".encode() for m, i in zip(ids, instances, strict=True)}
    for member_id, instance in zip(ids, instances, strict=True):
        h.send("sync_group", SyncGroup(GROUP, generation, member_id,
                                       tuple(assignments.items()) if member_id == group.leader else (), instance))
    h.flush()
    assert group.state is GroupState.STABLE
    return ids, generation


def test_a_static_member_restarting_in_a_stable_group_gets_the_generation_back_without_a_rebalance() -> None:
    h = Harness()
    (leader, follower), generation = static_group(h, "i-1", "i-2")
    pending_sync = h.send("sync_group", SyncGroup(GROUP, generation, follower, (), "i-2"))
    restarted = h.join(group_instance_id="i-2", version=5)
    assert h.answer(restarted) is None, "answered once the group record with the new member id is durable"
    records_before = len(h.log.get(h.core.partition_for(GROUP), []))
    h.flush()
    answer = h.answer(restarted)
    assert answer.error == E.NONE and answer.member_id not in (follower, "")
    assert (answer.generation, answer.protocol_name, answer.leader, answer.members) == (generation, "range", leader, ())
    group = h.core.group(GROUP)
    assert group.state is GroupState.STABLE and group.generation == generation, "no rebalance"
    assert len(h.log[h.core.partition_for(GROUP)]) == records_before + 1, "the new member id is stored"
    assert h.answer(pending_sync).error == E.NONE, "a sync answered before the restart is unaffected"
    synced = h.answer(h.send("sync_group", SyncGroup(GROUP, generation, answer.member_id, (), "i-2")))
    assert (synced.error, synced.assignment) == (E.NONE, b"assignment-i-2"), "the previous assignment"
    assert heartbeat(h, leader, generation, "i-1") == E.NONE, "the other member sees no rebalance"
    assert heartbeat(h, follower, generation, "i-2") == E.FENCED_INSTANCE_ID
    commit = OffsetCommit(GROUP, (), generation, follower, "i-2")
    assert h.answer(h.send("offset_commit", commit)).errors == ()
    assert h.core.group(GROUP).state is GroupState.STABLE


def test_a_restarted_static_leader_is_not_told_it_leads_before_v9_and_skips_assignment_from_v9() -> None:
    h = Harness()
    (leader, follower), generation = static_group(h, "i-1", "i-2")
    old_api = h.join(group_instance_id="i-1", version=8)
    h.flush()
    answer = h.answer(old_api)
    assert answer.error == E.NONE and answer.leader == leader != answer.member_id, "the leader id before it restarted"
    assert h.core.group(GROUP).leader == answer.member_id
    assert answer.members == () and not answer.skip_assignment
    new_api = h.join(group_instance_id="i-1", version=9)
    h.flush()
    answer = h.answer(new_api)
    assert answer.error == E.NONE and answer.leader == answer.member_id and answer.skip_assignment
    assert {m.group_instance_id for m in answer.members} == {"i-1", "i-2"}
    assert h.core.group(GROUP).generation == generation and h.core.group(GROUP).state is GroupState.STABLE


def test_a_known_leader_rejoining_with_its_member_id_still_rebalances() -> None:
    h = Harness()
    (leader, _), generation = static_group(h, "i-1", "i-2")
    h.join(leader, group_instance_id="i-1")
    assert h.core.group(GROUP).state is GroupState.PREPARING_REBALANCE


def test_a_static_member_restarting_with_a_protocol_change_rebalances() -> None:
    """The restarted member now prefers roundrobin: the group's vote would select another protocol,
    so the group rebalances (its assignment must come from the protocol it reports)."""
    h = Harness()
    static_group(h, "i-1")
    restarted = h.join(group_instance_id="i-1", protocols=(("roundrobin", b"rr"), ("range", b"r")))
    group = h.core.group(GROUP)
    assert group.state is GroupState.COMPLETING_REBALANCE and group.protocol == "roundrobin"
    assert h.answer(restarted).error == E.NONE and h.answer(restarted).protocol_name == "roundrobin"


def test_a_static_member_restarting_during_completing_rebalance_rebalances_again() -> None:
    h = Harness()
    (leader, follower), generation = static_group(h, "i-1", "i-2")
    h.join(leader, group_instance_id="i-1")
    h.join(follower, group_instance_id="i-2")
    group = h.core.group(GROUP)
    assert group.state is GroupState.COMPLETING_REBALANCE
    waiting = h.send("sync_group", SyncGroup(GROUP, group.generation, follower, (), "i-2"))
    restarted = h.join(group_instance_id="i-2")
    assert h.answer(waiting).error == E.FENCED_INSTANCE_ID, "the replaced member's sync is fenced"
    assert group.state is GroupState.PREPARING_REBALANCE
    assert h.answer(restarted) is None, "it waits for the rebalance like everyone else"


def test_a_static_member_that_does_not_rejoin_stays_in_the_next_generation() -> None:
    h = Harness()
    (leader, follower), generation = static_group(h, "i-1", "i-2")
    h.join(leader, group_instance_id="i-1")  # the leader rejoins: a rebalance the follower misses
    for _ in range(REBALANCE_MS // 5000):  # its session stays alive, but it never rejoins
        h.advance(5000)
        heartbeat(h, follower, generation, "i-2")
    group = h.core.group(GROUP)
    assert group.state is GroupState.COMPLETING_REBALANCE and group.generation == generation + 1
    assert set(group.members) == {leader, follower}, "Kafka keeps static members that did not rejoin"
    assert heartbeat(h, follower, generation, "i-2") == E.ILLEGAL_GENERATION


def test_the_leader_is_elected_among_members_that_rejoined() -> None:
    h = Harness()
    (leader, follower), generation = static_group(h, "i-1", "i-2")
    h.join(follower, protocols=(("range", b"new-meta"), *PROTOCOLS[1:]), group_instance_id="i-2")
    for _ in range(REBALANCE_MS // 5000):
        h.advance(5000)
        heartbeat(h, leader, generation, "i-1")
    group = h.core.group(GROUP)
    assert group.leader == follower, "the leader did not rejoin: the member that did leads"


def test_static_member_session_expiry_and_leave_by_instance_id() -> None:
    h = Harness()
    (leader, follower), generation = static_group(h, "i-1", "i-2")
    heartbeat(h, leader, generation, "i-1")
    h.now += SESSION_MS - 1
    heartbeat(h, leader, generation, "i-1")
    h.advance(1)
    group = h.core.group(GROUP)
    assert follower not in group.members and "i-2" not in group.static_members, "its session expired"
    assert group.state is GroupState.PREPARING_REBALANCE
    left = h.answer(h.send("leave_group", LeaveGroup(GROUP, (LeavingMember("", "i-1"),))))
    assert left.members[0][1] == E.NONE
    assert h.core.group(GROUP).members == {}


def test_leave_group_checks_the_instance_id_as_kafka_does() -> None:
    h = Harness()
    (leader, follower), _ = static_group(h, "i-1", "i-2")
    restarted = h.join(group_instance_id="i-2")
    h.flush()
    new_id = h.answer(restarted).member_id
    leave = LeaveGroup(GROUP, (LeavingMember(follower, "i-2"), LeavingMember(leader, "unknown"),
                               LeavingMember(new_id, "i-2")))
    answer = h.answer(h.send("leave_group", leave))
    assert [code for _, code in answer.members] == [E.FENCED_INSTANCE_ID, E.UNKNOWN_MEMBER_ID, E.NONE]


def test_a_failed_store_of_the_replacement_undoes_it() -> None:
    h = Harness()
    (leader, follower), generation = static_group(h, "i-1", "i-2")
    restarted = h.join(group_instance_id="i-2")
    [append] = h.pending_appends
    h.pending_appends.clear()
    h.take(h.core.append_failed(append.token, E.NOT_LEADER_OR_FOLLOWER, h.now))
    assert h.answer(restarted).error == E.NOT_COORDINATOR
    group = h.core.group(GROUP)
    assert group.static_members["i-2"] == follower and follower in group.members
    assert heartbeat(h, follower, generation, "i-2") == E.NONE


def test_a_sync_of_the_replaced_member_is_fenced() -> None:
    h = Harness()
    (_, follower), generation = static_group(h, "i-1", "i-2")
    h.join(group_instance_id="i-2")
    h.flush()
    answer = h.answer(h.send("sync_group", SyncGroup(GROUP, generation, follower, (), "i-2")))
    assert isinstance(answer, SyncAnswer) and answer.error == E.FENCED_INSTANCE_ID


def test_static_member_ids_survive_a_coordinator_move() -> None:
    h = Harness()
    (leader, follower), generation = static_group(h, "i-1", "i-2")
    restarted = h.join(group_instance_id="i-2")
    h.flush()
    new_id = h.answer(restarted).member_id
    h.take(h.core.unload(h.core.partition_for(GROUP)))
    h.load_all()  # another broker (or this one again) loads the partition from the log
    group = h.core.group(GROUP)
    assert group.static_members == {"i-1": leader, "i-2": new_id} and group.state is GroupState.STABLE
    assert heartbeat(h, follower, generation, "i-2") == E.FENCED_INSTANCE_ID
    again = h.join(group_instance_id="i-2")
    h.flush()
    answer = h.answer(again)
    assert answer.error == E.NONE and answer.generation == generation, "replaced again, no rebalance"
