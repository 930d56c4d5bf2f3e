"""The classic group protocol on the sans-IO core: join, sync, heartbeat, leave, expiry, generations."""

from __future__ import annotations

import pytest

from quorum.broker.groups.config import GroupConfig, java_string_hash, partition_for
from quorum.broker.groups.events import Heartbeat, LeaveGroup, LeavingMember
from quorum.wire.errors import ErrorCode as E
from tests.broker.groups.harness import GROUP, PROTOCOLS, SESSION_MS, Harness


def heartbeat(h: Harness, member_id: str, generation: int, **kwargs) -> int:
    return h.answer(h.send("heartbeat", Heartbeat(GROUP, generation, member_id, **kwargs))).error


def test_java_hash_code_and_partition_match_kafka() -> None:
    assert java_string_hash("hello") == 99162322
    assert java_string_hash("polygenelubricants") == -(2**31)  # Kafka's Utils.abs maps it to 0
    assert partition_for("polygenelubricants") == 0
    assert java_string_hash("\U0001f600") == 1772899  # a surrogate pair, as Java's UTF-16 sees it
    assert all(0 <= partition_for(f"g{i}", 7) < 7 for i in range(100))


def test_first_join_asks_for_a_member_id_from_v4_and_not_before() -> None:
    h = Harness()
    answer = h.answer(h.join())
    assert answer.error == E.MEMBER_ID_REQUIRED and answer.member_id
    assert h.core.group(GROUP).members == {}
    old = h.answer(h.join(group="old-client", version=3))
    assert old.error == E.NONE and old.generation == 1 and old.leader == old.member_id


def test_single_member_join_sync_heartbeat_and_the_leader_gets_metadata() -> None:
    h = Harness()
    member = h.join_new()
    joined = h.answer(h.join(member))
    assert (joined.error, joined.generation, joined.protocol_name, joined.leader) == (E.NONE, 1, "range", member)
    assert [(m.member_id, m.metadata) for m in joined.members] == [(member, b"range-meta")]
    sync = h.sync(member, 1, {member: b"mine"})
    assert h.answer(sync) is None, "the leader's SyncGroup waits for the group record to be durable"
    assert len(h.pending_appends) == 1
    h.flush()
    assert h.answer(sync).assignment == b"mine"
    assert h.core.group(GROUP).state.value == "Stable"
    assert heartbeat(h, member, 1) == E.NONE


def test_two_members_rebalance_and_followers_get_no_metadata() -> None:
    h = Harness()
    (first, second), generation = h.stable_group(2)
    assert generation == 2
    group = h.core.group(GROUP)
    assert group.leader == first
    # A third member joins: the others learn it from their heartbeats and rejoin.
    third = h.join_new()
    pending = h.join(third)
    assert h.answer(pending) is None
    assert heartbeat(h, first, 2) == E.REBALANCE_IN_PROGRESS
    assert heartbeat(h, second, 2) == E.REBALANCE_IN_PROGRESS
    a, b = h.join(first), h.join(second)
    answers = [h.answer(x) for x in (pending, a, b)]
    assert {x.generation for x in answers} == {3}
    leader_answer = h.answer(a)
    assert len(leader_answer.members) == 3
    assert h.answer(b).members == () and h.answer(pending).members == ()


def test_common_protocol_is_selected_and_inconsistent_ones_refused() -> None:
    h = Harness()
    first = h.join_new(protocols=(("roundrobin", b"x"), ("range", b"y")))
    h.join(first, protocols=(("roundrobin", b"x"), ("range", b"y")))
    assert h.core.group(GROUP).protocol == "roundrobin"
    refused = h.answer(h.join(protocols=(("sticky", b"z"),)))
    assert refused.error == E.INCONSISTENT_GROUP_PROTOCOL
    wrong_type = h.answer(h.join(protocol_type="connect"))
    assert wrong_type.error == E.INCONSISTENT_GROUP_PROTOCOL


def test_sync_and_heartbeat_check_member_and_generation() -> None:
    h = Harness()
    [member], generation = h.stable_group(1)
    assert heartbeat(h, member, generation + 1) == E.ILLEGAL_GENERATION
    assert heartbeat(h, "stranger", generation) == E.UNKNOWN_MEMBER_ID
    assert h.answer(h.sync(member, generation - 1)).error == E.ILLEGAL_GENERATION
    assert h.answer(h.sync("stranger", generation)).error == E.UNKNOWN_MEMBER_ID
    assert h.answer(h.sync(member, generation)).assignment == f"assignment-{member}".encode()
    assert h.answer(h.send("heartbeat", Heartbeat("no-such-group", 1, member))).error == E.UNKNOWN_MEMBER_ID
    assert h.answer(h.join("unknown-member-id")).error == E.UNKNOWN_MEMBER_ID


def test_invalid_group_id_and_session_timeouts() -> None:
    h = Harness()
    assert h.answer(h.join(group="")).error == E.INVALID_GROUP_ID
    assert h.answer(h.join(session_timeout_ms=10)).error == E.INVALID_SESSION_TIMEOUT
    assert h.answer(h.join(session_timeout_ms=10**9)).error == E.INVALID_SESSION_TIMEOUT


def test_session_expiry_removes_the_member_and_the_group_rebalances() -> None:
    h = Harness()
    (first, second), generation = h.stable_group(2)
    h.advance(SESSION_MS // 2)
    assert heartbeat(h, first, generation) == E.NONE
    h.advance(SESSION_MS // 2 + 1)  # `second` never heartbeated: its session is over
    group = h.core.group(GROUP)
    assert second not in group.members
    assert group.state.value == "PreparingRebalance"
    assert heartbeat(h, first, generation) == E.REBALANCE_IN_PROGRESS
    rejoined = h.answer(h.join(first))
    assert rejoined.generation == generation + 1 and [m.member_id for m in rejoined.members] == [first]
    h.advance(SESSION_MS + 1)
    assert h.core.group(GROUP).members == {}
    assert h.core.group(GROUP).state.value == "Empty"


def test_a_sync_answered_after_a_slow_durable_write_starts_the_members_session_again() -> None:
    """The soak (seeds 31, 47, 53): the leader's assignment took 8 s to become durable (a replica of its
    `__consumer_offsets` partition had just been killed); the member, told at once, heartbeats a
    heartbeat interval later, past its 10 s session counted from the join: expired, and its kafka-python
    never got a generation again. Kafka restarts each session when it propagates the assignment."""
    h = Harness()
    member = h.join_new()
    joined = h.answer(h.join(member))
    sync = h.sync(member, joined.generation, {member: b"everything"})
    h.advance(SESSION_MS - 2000)  # the write is still not durable
    assert h.answer(sync) is None
    h.flush()  # durable now: the member gets its assignment
    assert h.answer(sync).error == E.NONE
    h.advance(2000 + 1000)  # past the session counted from the join; the first heartbeat is on its way
    assert heartbeat(h, member, joined.generation) == E.NONE
    assert h.core.group(GROUP).state.value == "Stable"


def test_rebalance_timeout_drops_members_that_do_not_rejoin() -> None:
    h = Harness()
    (first, second), generation = h.stable_group(2)
    pending = h.join(first)  # the leader rejoins: a rebalance; `second` keeps heartbeating but never rejoins
    for _ in range(4):
        h.advance(SESSION_MS // 2)
        assert heartbeat(h, second, generation) == E.REBALANCE_IN_PROGRESS
    h.advance(30_000)
    answer = h.answer(pending)
    assert answer.generation == generation + 1 and [m.member_id for m in answer.members] == [first]
    assert heartbeat(h, second, generation) == E.UNKNOWN_MEMBER_ID


def test_initial_rebalance_delay_waits_for_more_members() -> None:
    h = Harness(GroupConfig(group_initial_rebalance_delay_ms=3000))
    first, second = h.join_new(), h.join_new()
    a = h.join(first)
    h.advance(1000)
    b = h.join(second)
    assert h.answer(a) is None and h.answer(b) is None
    h.advance(2000)  # the first delay is over, but a member arrived during it: wait another delay
    assert h.answer(a) is None
    h.advance(3000)
    assert h.answer(a).generation == h.answer(b).generation == 1
    assert len(h.answer(a).members) == 2


def test_leave_group_batch_and_legacy_single_member() -> None:
    h = Harness()
    (first, second, third), generation = h.stable_group(3)
    handle = h.send("leave_group", LeaveGroup(GROUP, (LeavingMember(second), LeavingMember("ghost"))))
    answer = h.answer(handle)
    assert answer.error == E.NONE
    assert [(m.member_id, code) for m, code in answer.members] == [(second, E.NONE), ("ghost", E.UNKNOWN_MEMBER_ID)]
    assert answer.legacy_error() == E.UNKNOWN_MEMBER_ID
    assert h.core.group(GROUP).state.value == "PreparingRebalance"
    a, c = h.join(first), h.join(third)
    assert h.answer(a).generation == h.answer(c).generation == generation + 1


def test_sync_waiting_members_are_told_to_rejoin_when_a_rebalance_starts() -> None:
    h = Harness()
    (first, second), generation = h.stable_group(2)
    a, b = h.join(first), h.join(second)
    generation = h.answer(a).generation
    follower_sync = h.sync(second, generation)
    assert h.answer(follower_sync) is None
    newcomer = h.join_new()
    h.join(newcomer)
    assert h.answer(follower_sync).error == E.REBALANCE_IN_PROGRESS
    assert h.answer(h.sync(first, generation)).error == E.REBALANCE_IN_PROGRESS
    assert h.answer(b).error == E.NONE


def test_not_coordinator_and_loading_answers() -> None:
    h = Harness(GroupConfig(group_initial_rebalance_delay_ms=0, offsets_topic_num_partitions=3))
    partition = h.core.partition_for(GROUP)
    member = h.join_new()
    pending = h.join(member)
    assert h.answer(pending).error == E.NONE
    h.take(h.core.unload(partition))
    assert h.answer(h.join()).error == E.NOT_COORDINATOR
    h.core.begin_loading(partition)
    assert h.answer(h.join()).error == E.COORDINATOR_LOAD_IN_PROGRESS
    assert heartbeat(h, member, 1) == E.NONE, "Kafka answers heartbeats blindly while loading"
    assert h.answer(h.sync(member, 1)).error == E.REBALANCE_IN_PROGRESS
    assert h.core.list_groups().error == E.COORDINATOR_LOAD_IN_PROGRESS


def test_unload_answers_waiting_joins_with_not_coordinator() -> None:
    h = Harness()
    (first, second), _ = h.stable_group(2)
    pending = h.join(first)
    h.take(h.core.unload(h.core.partition_for(GROUP)))
    assert h.answer(pending).error == E.NOT_COORDINATOR


@pytest.mark.parametrize("states, expected", [((), {"group-a", "other"}), (("stable",), {"group-a"}),
                                              (("Empty",), {"other"})])
def test_list_and_describe_groups(states, expected) -> None:
    h = Harness()
    h.stable_group(1)
    h.join_new(group="other")  # a pending member only: the group exists, Empty
    listed = h.core.list_groups(states)
    assert {g.group_id for g in listed.groups} == expected
    assert h.core.list_groups(types=("consumer",)).groups == ()
    described = h.core.describe_group(GROUP)
    assert described.state == "Stable" and described.protocol_data == "range"
    missing = h.core.describe_group("missing")
    assert (missing.error, missing.state, missing.members) == (E.NONE, "Dead", ())


def test_group_max_size() -> None:
    h = Harness(GroupConfig(group_initial_rebalance_delay_ms=0, group_max_size=1))
    h.stable_group(1)
    assert h.answer(h.join()).error == E.GROUP_MAX_SIZE_REACHED


def test_next_deadline_is_the_earliest_session_end() -> None:
    h = Harness()
    [member], _ = h.stable_group(1)
    assert h.core.next_deadline() == h.now + SESSION_MS
    assert PROTOCOLS  # the default protocols are what the member joined with
