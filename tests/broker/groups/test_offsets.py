"""OffsetCommit / OffsetFetch on the core: Kafka's checks, KIP-232's check, durability and recovery."""

from __future__ import annotations

from quorum.broker.groups.config import GroupConfig
from quorum.broker.groups.coordinator import GroupCoordinator
from quorum.broker.groups.events import CommitEntry, LeaveGroup, LeavingMember, OffsetCommit, OffsetFetch
from quorum.wire.consumer_offsets import OffsetKey, decode_record
from quorum.wire.errors import ErrorCode as E
from quorum.wire.internal_metadata import InternalMetadata, encode
from tests.broker.groups.harness import GROUP, Harness


def commit(h: Harness, *entries: CommitEntry, flush: bool = True, **kwargs) -> tuple[int, ...] | None:
    handle = h.send("offset_commit", OffsetCommit(GROUP, entries, **kwargs))
    if flush:
        h.flush()
    answer = h.answer(handle)
    return None if answer is None else answer.errors


def fetched(h: Harness, group: str = GROUP, partitions=None):
    answer = h.core.offset_fetch(OffsetFetch(group, partitions))
    return answer.error, {(o.topic, o.partition): (o.offset, o.leader_epoch, o.metadata, o.error)
                          for o in answer.offsets}


def internal(topic_epoch: int, leader_epoch: int, user: str = "") -> str:
    return encode(user, InternalMetadata(topic_epoch, leader_epoch))


def test_simple_consumer_commit_answers_after_durability_and_fetch_reads_it() -> None:
    h = Harness()
    handle = h.send("offset_commit", OffsetCommit(GROUP, (CommitEntry("t", 0, 42, 3, "meta"),)))
    assert h.answer(handle) is None, "answered only once the records are durable"
    _, offsets = fetched(h)
    assert offsets == {}, "not visible before it is durable"
    h.flush()
    assert h.answer(handle).errors == (E.NONE,)
    assert fetched(h) == (E.NONE, {("t", 0): (42, 3, "meta", E.NONE)})
    assert fetched(h, partitions=(("t", 1),))[1] == {("t", 1): (-1, -1, "", E.NONE)}
    assert fetched(h, group="unknown", partitions=(("t", 0),))[1] == {("t", 0): (-1, -1, "", E.NONE)}


def test_member_commits_check_generation_and_member() -> None:
    h = Harness()
    [member], generation = h.stable_group(1)
    entry = CommitEntry("t", 0, 5)
    assert commit(h, entry, generation=generation, member_id=member) == (E.NONE,)
    assert commit(h, entry, generation=generation + 1, member_id=member) == (E.ILLEGAL_GENERATION,)
    assert commit(h, entry, generation=generation, member_id="stranger") == (E.UNKNOWN_MEMBER_ID,)
    assert commit(h, entry) == (E.UNKNOWN_MEMBER_ID,), "a non-member cannot commit to a non-empty group"
    assert h.answer(h.send("offset_commit", OffsetCommit("never-seen", (entry,), 3, "m"))).errors == (
        E.ILLEGAL_GENERATION,)


def test_commit_during_completing_rebalance_is_refused_and_during_preparing_accepted() -> None:
    h = Harness()
    (first, second), generation = h.stable_group(2)
    h.join(first)  # PreparingRebalance: commits of the current generation still go through
    assert commit(h, CommitEntry("t", 0, 1), generation=generation, member_id=second) == (E.NONE,)
    h.join(second)  # all rejoined: CompletingRebalance
    group = h.core.group(GROUP)
    assert group.state.value == "CompletingRebalance"
    assert commit(h, CommitEntry("t", 0, 2), generation=group.generation, member_id=second) == (
        E.REBALANCE_IN_PROGRESS,)


def test_metadata_too_large_only_fails_its_partition() -> None:
    h = Harness(GroupConfig(group_initial_rebalance_delay_ms=0, offset_metadata_max_bytes=10))
    errors = commit(h, CommitEntry("t", 0, 1, metadata="x" * 11), CommitEntry("t", 1, 1, metadata="x" * 10))
    assert errors == (E.OFFSET_METADATA_TOO_LARGE, E.NONE)
    assert set(fetched(h)[1]) == {("t", 1)}


def test_kip232_older_internal_metadata_is_refused_per_partition() -> None:
    h = Harness()
    assert commit(h, CommitEntry("t", 0, 10, metadata=internal(5, 3, "user"))) == (E.NONE,)
    errors = commit(h,
                    CommitEntry("t", 0, 11, metadata=internal(4, 9)),   # smaller topic epoch
                    CommitEntry("t", 1, 11, metadata=internal(1, 0)))   # nothing committed yet there
    assert errors == (E.INVALID_INTERNAL_METADATA, E.NONE)
    assert commit(h, CommitEntry("t", 0, 12, metadata=internal(5, 2))) == (E.INVALID_INTERNAL_METADATA,)
    assert commit(h, CommitEntry("t", 0, 13, metadata=internal(5, 3))) == (E.NONE,), "equal epochs are fine"
    assert commit(h, CommitEntry("t", 0, 14, metadata=internal(6, 0))) == (E.NONE,), "a newer topic epoch wins"
    offsets = fetched(h)[1]
    assert offsets[("t", 0)][:2] == (14, 0), "the refused commits stored nothing"
    assert offsets[("t", 0)][2] == internal(6, 0)


def test_kip232_unparsable_internal_metadata_is_refused() -> None:
    h = Harness()
    errors = commit(h, CommitEntry("t", 0, 1, metadata='kip232:{"version": 2}\n'),
                    CommitEntry("t", 1, 1, metadata="kip232:not json\nuser"),
                    CommitEntry("t", 2, 1, metadata="plain user metadata"))
    assert errors == (E.INVALID_INTERNAL_METADATA, E.INVALID_INTERNAL_METADATA, E.NONE)


def test_kip232_commits_without_internal_metadata_behave_as_kafka() -> None:
    h = Harness()
    assert commit(h, CommitEntry("t", 0, 10, metadata=internal(5, 3))) == (E.NONE,)
    assert commit(h, CommitEntry("t", 0, 3, metadata="from a plain client")) == (E.NONE,)
    assert fetched(h)[1][("t", 0)][0] == 3
    assert commit(h, CommitEntry("t", 0, 4, metadata=internal(1, 1))) == (E.NONE,), (
        "the latest commit carries no internal metadata, so nothing is older than it")


def test_kip232_check_sees_commits_still_in_flight() -> None:
    h = Harness()
    first = h.send("offset_commit", OffsetCommit(GROUP, (CommitEntry("t", 0, 10, metadata=internal(5, 5)),)))
    second = h.send("offset_commit", OffsetCommit(GROUP, (CommitEntry("t", 0, 9, metadata=internal(5, 4)),)))
    assert h.answer(second).errors == (E.INVALID_INTERNAL_METADATA,)
    assert h.core.offset_fetch(OffsetFetch(GROUP, (("t", 0),), require_stable=True)).offsets[0].error == (
        E.UNSTABLE_OFFSET_COMMIT)
    h.flush()
    assert h.answer(first).errors == (E.NONE,)


def test_topic_epoch_lands_in_the_record_tag_and_internal_leader_epoch_fills_a_missing_one() -> None:
    h = Harness()
    commit(h, CommitEntry("t", 0, 10, leader_epoch=-1, metadata=internal(7, 4, "u")),
           CommitEntry("t", 1, 10, leader_epoch=2, metadata="plain"))
    records = [decode_record(k, v) for k, v in h.log[h.core.partition_for(GROUP)]]
    values = {key.partition: value for key, value in records if isinstance(key, OffsetKey)}
    assert (values[0].topic_epoch, values[0].leader_epoch) == (7, 4)
    assert (values[1].topic_epoch, values[1].leader_epoch) == (-1, 2)
    raw = dict(h.log[h.core.partition_for(GROUP)])
    versions = sorted(int.from_bytes(v[:2], "big") for v in raw.values())
    assert versions == [3, 4], "v3 as Kafka writes it without internal metadata, v4 (tagged) with it"


def test_append_failure_maps_to_kafka_errors() -> None:
    h = Harness()
    handle = h.send("offset_commit", OffsetCommit(GROUP, (CommitEntry("t", 0, 1),)))
    [append] = h.pending_appends
    h.pending_appends.clear()
    h.take(h.core.append_failed(append.token, E.NOT_LEADER_OR_FOLLOWER, h.now))
    assert h.answer(handle).errors == (E.NOT_COORDINATOR,)
    assert fetched(h)[1] == {}


def test_recovery_from_replayed_records_gives_the_same_offsets_epochs_metadata_and_generation() -> None:
    h = Harness()
    (first, second), generation = h.stable_group(2)
    assert commit(h, CommitEntry("t", 0, 100, 6, internal(3, 6, "user-0")), CommitEntry("t", 1, 200, -1, "u1"),
                  generation=generation, member_id=first) == (E.NONE, E.NONE)
    assert commit(h, CommitEntry("t", 1, 250, 2, "u1-b"), generation=generation, member_id=second) == (E.NONE,)
    before_offsets = fetched(h)
    before = h.core.group(GROUP)

    restarted = GroupCoordinator(h.core.config)
    partition = restarted.partition_for(GROUP)
    restarted.begin_loading(partition)
    restarted.replay(partition, h.log[partition])
    restarted.finish_loading(partition, h.now)
    h.core = restarted
    assert fetched(h) == before_offsets
    after = restarted.group(GROUP)
    assert (after.generation, after.protocol, after.leader, after.state.value) == (
        before.generation, before.protocol, before.leader, "Stable")
    assert {m: after.members[m].assignment for m in after.members} == {
        m: before.members[m].assignment for m in before.members}
    # The members carry on in the same generation: heartbeats and commits are accepted.
    assert commit(h, CommitEntry("t", 0, 101, 6, internal(3, 6)), generation=generation, member_id=first) == (E.NONE,)
    assert commit(h, CommitEntry("t", 0, 102, 6, internal(3, 5)), generation=generation, member_id=first) == (
        E.INVALID_INTERNAL_METADATA,), "the KIP-232 check survives the restart too"


def test_recovery_of_an_empty_group_keeps_its_generation() -> None:
    h = Harness()
    [member], generation = h.stable_group(1)
    h.send("leave_group", LeaveGroup(GROUP, (LeavingMember(member),)))
    h.flush()
    assert h.core.group(GROUP).generation == generation + 1
    restarted = GroupCoordinator(h.core.config)
    partition = restarted.partition_for(GROUP)
    restarted.begin_loading(partition)
    restarted.replay(partition, h.log[partition])
    restarted.finish_loading(partition, h.now)
    group = restarted.group(GROUP)
    assert (group.state.value, group.generation) == ("Empty", generation + 1)
