"""OffsetCommit from members that are no longer current, on the sans-IO core fed by hand: Kafka's
handleCommitOffsets / ClassicGroup.validateOffsetCommit answers (ILLEGAL_GENERATION,
UNKNOWN_MEMBER_ID, REBALANCE_IN_PROGRESS, FENCED_INSTANCE_ID; generation -1 commits only to an
Empty group), and the race that accepted some of them: a request judged against the group as the
shell's last timer tick left it, not as it is at the request's own time."""

from __future__ import annotations

from quorum.broker.groups.events import CommitEntry, Heartbeat, LeaveGroup, LeavingMember, OffsetCommit
from quorum.broker.groups.group import GroupState
from quorum.wire.errors import ErrorCode as E
from tests.broker.groups.harness import GROUP, REBALANCE_MS, SESSION_MS, Harness

ENTRY = (CommitEntry("t", 0, 7),)


def commit(h: Harness, generation: int = -1, member_id: str = "", instance: str | None = None) -> int:
    """The commit's error, once its records (if any) are durable."""
    handle = h.send("offset_commit", OffsetCommit(GROUP, ENTRY, generation, member_id, instance))
    h.flush()
    return h.answer(handle).errors[0]


def test_a_commit_at_the_moment_a_session_expires_is_refused_before_any_tick() -> None:
    """The shell's timer had not ticked yet when the commit came: the member is gone all the same."""
    h = Harness()
    (first, second), generation = h.stable_group(2)
    h.now += SESSION_MS - 1
    assert h.answer(h.send("heartbeat", Heartbeat(GROUP, generation, first))).error == E.NONE
    h.now += 1  # the second member's session ends now; no tick has run
    assert commit(h, generation, second) == E.UNKNOWN_MEMBER_ID
    assert commit(h, generation, first) == E.NONE, "the group rebalances; its current generation may commit"
    assert h.core.group(GROUP).state is GroupState.PREPARING_REBALANCE


def test_a_commit_from_a_member_that_missed_the_rebalance_deadline_is_refused_before_any_tick() -> None:
    h = Harness()
    (first, second), generation = h.stable_group(2)
    h.join(first)  # a rebalance: the second member does not rejoin in time
    for _ in range(REBALANCE_MS // 5000 - 1):
        h.advance(5000)
        h.send("heartbeat", Heartbeat(GROUP, generation, second))
    h.now += 5000  # the rebalance deadline; no tick has run
    assert commit(h, generation, second) == E.UNKNOWN_MEMBER_ID
    group = h.core.group(GROUP)
    assert group.state is GroupState.COMPLETING_REBALANCE and group.generation == generation + 1
    assert commit(h, generation + 1, first) == E.REBALANCE_IN_PROGRESS, "waiting for the leader's assignment"


def test_commits_of_members_that_are_no_longer_current() -> None:
    h = Harness()
    (first, second), generation = h.stable_group(2)
    h.join(first)
    assert commit(h, generation, second) == E.NONE, "PreparingRebalance: the member still owns its partitions"
    h.join(second)
    assert h.core.group(GROUP).state is GroupState.COMPLETING_REBALANCE
    assert commit(h, generation, second) == E.ILLEGAL_GENERATION, "the group moved to a new generation"
    assert commit(h, generation + 1, second) == E.REBALANCE_IN_PROGRESS
    h.take(h.core.leave_group(h.handles.__next__(), LeaveGroup(GROUP, (LeavingMember(second),)), h.now))
    assert commit(h, generation + 1, second) == E.UNKNOWN_MEMBER_ID, "it left"
    assert commit(h) == E.UNKNOWN_MEMBER_ID, "a simple commit to a group with members"


def test_simple_commits_to_an_empty_group_are_accepted_whatever_member_id_they_name() -> None:
    h = Harness()
    [member], generation = h.stable_group(1)
    h.take(h.core.leave_group(next(h.handles), LeaveGroup(GROUP, (LeavingMember(member),)), h.now))
    assert h.core.group(GROUP).state is GroupState.EMPTY
    assert commit(h, generation, member) == E.UNKNOWN_MEMBER_ID
    assert commit(h, -1, member) == E.NONE, "generation -1 to an Empty group (validateOffsetCommit)"
    assert commit(h) == E.NONE
    assert h.answer(h.send("offset_commit", OffsetCommit("unknown-group", ENTRY, 3, "m"))).errors == (
        E.ILLEGAL_GENERATION,)


def test_a_replaced_static_member_commit_is_fenced() -> None:
    h = Harness()
    joined = h.answer(h.join(group_instance_id="i"))
    h.sync(joined.member_id, joined.generation, {joined.member_id: b"a"})
    h.flush()
    h.join(group_instance_id="i")
    h.flush()
    assert commit(h, joined.generation, joined.member_id, "i") == E.FENCED_INSTANCE_ID
    assert commit(h, joined.generation, joined.member_id, "other") == E.UNKNOWN_MEMBER_ID
