"""KIP-848 groups inside the group coordinator: both kinds side by side (a group id is one or the
other, Kafka's refusals), OffsetCommit/OffsetFetch with member epochs, ListGroups, the timer, and
ConsumerGroupHeartbeat/ConsumerGroupDescribe through the wire handlers (and ApiVersions)."""

from __future__ import annotations

import asyncio
import uuid

from quorum.broker.groups.consumer.assignors import TopicInfo
from quorum.broker.groups.consumer.events import ConsumerHeartbeat
from quorum.broker.groups.events import CommitEntry, LeaveGroup, LeavingMember, OffsetCommit, OffsetFetch
from quorum.net.dispatch import Dispatcher
from quorum.wire.api_versions import api_versions_response
from quorum.wire.errors import ErrorCode as E
from quorum.wire.framing import RequestHeader
from quorum.wire.protocol import APIS, Request
from tests.broker.groups.harness import GROUP, Harness
from tests.broker.groups.test_handlers import Wire, with_shell

TOPIC_ID = uuid.uuid5(uuid.NAMESPACE_DNS, "t")
TOPICS = {"t": TopicInfo(TOPIC_ID, 4)}


def join(h: Harness, member_id: str, group: str = GROUP):
    request = ConsumerHeartbeat(
        group, member_id, 0, rebalance_timeout_ms=5000, subscribed_topic_names=("t",), owned=frozenset()
    )
    return beat(h, request)


def beat(h: Harness, request: ConsumerHeartbeat):
    """Send a heartbeat and make its records durable: its answer."""
    handle = h.send("consumer_group_heartbeat", request)
    h.flush()
    return h.answers[handle]


def consumer_harness() -> Harness:
    h = Harness()
    h.core.set_topics(TOPICS)
    return h


def commit(h: Harness, member_id: str, epoch: int, version: int = 9) -> int:
    entry = CommitEntry("t", 0, 42)
    handle = h.send("offset_commit", OffsetCommit(GROUP, (entry,), epoch, member_id, version=version))
    h.flush()  # an accepted commit answers once durable
    return h.answers[handle].errors[0]


def test_a_member_joins_and_is_assigned_every_partition() -> None:
    h = consumer_harness()
    answer = join(h, "m1")
    assert (answer.error, answer.member_id, answer.member_epoch) == (E.NONE, "m1", 1)
    assert answer.assignment == frozenset((TOPIC_ID, p) for p in range(4))
    assert answer.heartbeat_interval_ms == h.core.config.group_consumer_heartbeat_interval_ms
    assert h.core.describe_consumer_group(GROUP).state == "Stable"


def test_a_group_is_one_kind_or_the_other() -> None:
    h = consumer_harness()
    join(h, "m1")
    classic = h.answers[h.join()]
    assert classic.error == E.INCONSISTENT_GROUP_PROTOCOL
    other = consumer_harness()
    other.stable_group(1)
    refused = join(other, "m1")
    assert (refused.error, refused.message) == (E.GROUP_ID_NOT_FOUND, f"Group {GROUP} is not a consumer group")
    described = other.core.describe_consumer_group(GROUP)
    assert described.error == E.GROUP_ID_NOT_FOUND
    missing = other.answers[
        other.send("consumer_group_heartbeat", ConsumerHeartbeat("nope", "m", 3, owned=frozenset()))
    ]
    assert (missing.error, missing.message) == (E.GROUP_ID_NOT_FOUND, "Consumer group nope not found.")


def test_an_empty_group_of_one_kind_becomes_the_other() -> None:
    h = consumer_harness()
    join(h, "m1")
    beat(h, ConsumerHeartbeat(GROUP, "m1", -1))
    assert h.core.describe_consumer_group(GROUP).state == "Empty"
    members, generation = h.stable_group(1)  # a classic member takes the empty consumer group's id
    assert generation == 1 and h.core.consumer_group(GROUP) is None
    h.send("leave_group", LeaveGroup(GROUP, (LeavingMember(members[0]),)))
    h.flush()
    assert join(h, "m2").error == E.NONE  # and the empty classic group gives way again
    assert h.core.group(GROUP) is None


def test_commits_and_fetches_carry_the_member_epoch() -> None:
    h = consumer_harness()
    join(h, "m1")
    assert commit(h, "m1", 1) == E.NONE
    assert commit(h, "m1", 2) == E.STALE_MEMBER_EPOCH
    assert commit(h, "ghost", 1) == E.UNKNOWN_MEMBER_ID
    assert commit(h, "m1", 1, version=8) == E.UNSUPPORTED_VERSION
    assert commit(h, "", -1) == E.UNKNOWN_MEMBER_ID  # a simple commit needs an empty group
    fetched = h.core.offset_fetch(OffsetFetch(GROUP, (("t", 0),), member_id="m1", member_epoch=1))
    assert fetched.error == E.NONE and fetched.offsets[0].offset == 42
    assert h.core.offset_fetch(OffsetFetch(GROUP, None, member_id="m1", member_epoch=0)).error == E.STALE_MEMBER_EPOCH
    assert h.core.offset_fetch(OffsetFetch(GROUP, None, member_id="x", member_epoch=1)).error == E.UNKNOWN_MEMBER_ID
    assert h.core.offset_fetch(OffsetFetch(GROUP, None)).offsets[0].offset == 42  # an admin's fetch


def test_a_v9_commit_to_a_missing_group_is_group_id_not_found() -> None:
    h = consumer_harness()
    assert commit(h, "m1", 3, version=9) == E.GROUP_ID_NOT_FOUND
    assert commit(h, "m1", 3, version=8) == E.ILLEGAL_GENERATION


def test_list_groups_shows_both_kinds_and_filters_by_type() -> None:
    h = consumer_harness()
    join(h, "m1", group="new-kind")
    h.stable_group(1)
    listed = {(g.group_id, g.group_type, g.state) for g in h.core.list_groups().groups}
    assert listed == {("new-kind", "consumer", "Stable"), (GROUP, "classic", "Stable")}
    assert [g.group_id for g in h.core.list_groups(types=["consumer"]).groups] == ["new-kind"]
    assert [g.group_id for g in h.core.list_groups(types=["classic"]).groups] == [GROUP]


def test_the_timer_expires_a_silent_member() -> None:
    h = consumer_harness()
    join(h, "m1")
    deadline = h.core.next_deadline()
    assert deadline == h.now + h.core.config.group_consumer_session_timeout_ms
    h.advance(h.core.config.group_consumer_session_timeout_ms)
    assert h.core.describe_consumer_group(GROUP).state == "Empty"


async def heartbeat(wire: Wire, version: int, **fields):
    """ConsumerGroupHeartbeat at `version`: the fields given, every other one "unchanged" (null / -1)."""
    unchanged = dict(
        group_id=GROUP,
        instance_id=None,
        rack_id=None,
        rebalance_timeout_ms=-1,
        subscribed_topic_names=None,
        server_assignor=None,
        topic_partitions=None,
    )
    if version >= 1:
        unchanged["subscribed_topic_regex"] = None
    return await wire.call(68, version, **{**unchanged, **fields})


def test_heartbeat_and_describe_through_the_wire_and_advertised() -> None:
    async def scenario(wire: Wire, shell):
        shell.core.set_topics(TOPICS)
        Owned = APIS[68].request.TopicPartitions
        joined = await heartbeat(
            wire,
            1,
            member_id="m1",
            member_epoch=0,
            rebalance_timeout_ms=5000,
            subscribed_topic_names=["t"],
            subscribed_topic_regex="",
            topic_partitions=[],
        )
        assert (joined.error_code, joined.member_id, joined.member_epoch) == (E.NONE, "m1", 1)
        assigned = joined.assignment.topic_partitions
        assert [(t.topic_id, sorted(t.partitions)) for t in assigned] == [(TOPIC_ID, [0, 1, 2, 3])]
        beat = await heartbeat(
            wire,
            0,
            member_id="m1",
            member_epoch=1,
            topic_partitions=[Owned(topic_id=TOPIC_ID, partitions=[0, 1, 2, 3])],
        )
        assert (beat.error_code, beat.member_epoch, beat.assignment) == (E.NONE, 1, None)
        fenced = await heartbeat(wire, 1, member_id="m1", member_epoch=7)
        assert fenced.error_code == E.FENCED_MEMBER_EPOCH and "greater member epoch (7)" in fenced.error_message
        described = await wire.call(69, 0, group_ids=[GROUP, "missing"], include_authorized_operations=False)
        group, missing = described.groups
        assert (group.group_state, group.group_epoch, group.assignment_epoch, group.assignor_name) == (
            "Stable",
            1,
            1,
            "uniform",
        )
        member = group.members[0]
        assert (member.member_id, member.member_epoch, member.client_id, list(member.subscribed_topic_names)) == (
            "m1",
            1,
            "tester",
            ["t"],
        )
        assert [(t.topic_name, sorted(t.partitions)) for t in member.assignment.topic_partitions] == [
            ("t", [0, 1, 2, 3])
        ]
        assert missing.error_code == E.GROUP_ID_NOT_FOUND
        left = await heartbeat(wire, 1, member_id="m1", member_epoch=-1)
        assert (left.error_code, left.member_epoch) == (E.NONE, -1)
        return wire.dispatcher

    dispatcher: Dispatcher = asyncio.run(with_shell(scenario))
    api = APIS[18]
    request = Request(
        RequestHeader(18, 3, 1, "tester"), api, api.request(client_software_name="t", client_software_version="1")
    )
    response, _ = api_versions_response(request, dispatcher.served)
    advertised = {k.api_key: (k.min_version, k.max_version) for k in response.api_keys}
    assert advertised[68] == (0, 1) and advertised[69] == (0, 0)


def test_an_answer_waits_for_its_records_and_a_reloaded_coordinator_resumes_the_group() -> None:
    h = consumer_harness()
    handle = h.send(
        "consumer_group_heartbeat",
        ConsumerHeartbeat(GROUP, "m1", 0, rebalance_timeout_ms=5000, subscribed_topic_names=("t",), owned=frozenset()),
    )
    assert h.answers.get(handle) is None, "answered before its records are durable"
    h.flush()
    assert h.answers[handle].member_epoch == 1
    join(h, "m2")  # m2 waits for two of m1's partitions: m1 has not revoked them yet
    before = h.core.consumer_group(GROUP)
    h.load_all()  # a coordinator loads the partition from the log
    after = h.core.consumer_group(GROUP)
    assert after is not before and after is not None
    assert (after.group_epoch, after.assignment_epoch, after.members, after.target, after.owners) == (
        before.group_epoch,
        before.assignment_epoch,
        before.members,
        before.target,
        before.owners,
    )
    m1 = before.members["m1"]
    answer = beat(h, ConsumerHeartbeat(GROUP, "m1", m1.member_epoch, owned=m1.assigned | m1.pending_revocation))
    assert answer.error == E.NONE and answer.member_epoch == m1.member_epoch


def test_a_heartbeat_whose_records_cannot_be_written_answers_the_error() -> None:
    h = consumer_harness()
    handle = h.send(
        "consumer_group_heartbeat",
        ConsumerHeartbeat(GROUP, "m1", 0, rebalance_timeout_ms=5000, subscribed_topic_names=("t",), owned=frozenset()),
    )
    append = h.pending_appends.pop()
    h.take(h.core.append_failed(append.token, E.NOT_LEADER_OR_FOLLOWER, h.now))
    assert h.answers[handle].error == E.NOT_COORDINATOR


def group_fields(h: Harness) -> tuple:
    """What a group's records carry: compared before and after a revert, and with a reload of the log."""
    group = h.core.consumer_group(GROUP)
    assert group is not None
    return group.group_epoch, group.assignment_epoch, dict(group.members), dict(group.target), dict(group.owners)


def join_unanswered(h: Harness, member_id: str) -> int:
    """A member's join sent, its records not yet durable: the handle its answer will come to."""
    request = ConsumerHeartbeat(
        GROUP, member_id, 0, rebalance_timeout_ms=5000, subscribed_topic_names=("t",), owned=frozenset()
    )
    return h.send("consumer_group_heartbeat", request)


def test_a_heartbeat_whose_records_cannot_be_written_is_taken_back() -> None:
    """Kafka's CoordinatorRuntime reverts its state to the snapshot before a write that failed: a member
    joining whose records did not reach the log is not in the group, the group epoch and the target are
    what they were, and the group in memory is the one a reload of the log gives. Before, the coordinator
    answered the error but kept the member."""
    h = consumer_harness()
    join(h, "m1")
    before = group_fields(h)
    handle = join_unanswered(h, "m2")
    (append,) = h.pending_appends
    h.pending_appends.clear()
    h.take(h.core.append_failed(append.token, E.NOT_LEADER_OR_FOLLOWER, h.now))
    assert h.answers[handle].error == E.NOT_COORDINATOR
    assert group_fields(h) == before
    h.load_all()
    assert group_fields(h) == before
    assert join(h, "m2").error == E.NONE, "the member joins when it asks again"


def test_a_group_whose_creation_cannot_be_written_is_not_there() -> None:
    h = consumer_harness()
    handle = join_unanswered(h, "m1")
    (append,) = h.pending_appends
    h.pending_appends.clear()
    h.take(h.core.append_failed(append.token, E.NOT_LEADER_OR_FOLLOWER, h.now))
    assert h.answers[handle].error == E.NOT_COORDINATOR
    assert h.core.consumer_group(GROUP) is None
    assert h.core.describe_consumer_group(GROUP).error == E.GROUP_ID_NOT_FOUND


def test_heartbeats_after_a_failed_one_are_answered_its_error() -> None:
    """m3's join was computed from a group that had m2 in it; m2's write failed, so m3's change goes with it
    (Kafka's revert takes every later change back): m3 is answered the error even though its own records
    were written, and the group is as before m2 asked."""
    h = consumer_harness()
    join(h, "m1")
    before = group_fields(h)
    m2, m3 = join_unanswered(h, "m2"), join_unanswered(h, "m3")
    first, second = h.pending_appends
    h.pending_appends.clear()
    h.take(h.core.append_failed(first.token, E.NOT_LEADER_OR_FOLLOWER, h.now))
    h.take(h.core.append_done(second.token, h.now))
    assert h.answers[m2].error == E.NOT_COORDINATOR and h.answers[m3].error == E.NOT_COORDINATOR
    assert group_fields(h) == before
