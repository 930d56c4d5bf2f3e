"""Every served version of every group API goes through the handlers and back onto the wire: a member
joins, syncs, heartbeats, commits, fetches, is described and listed, and leaves."""

from __future__ import annotations

import asyncio

import pytest

from quorum.broker.groups.config import GroupConfig
from quorum.broker.groups.coordinator import GroupCoordinator
from quorum.broker.groups.find_coordinator import CoordinatorNode
from quorum.broker.groups.handlers import MAX_OFFSET_VERSION, register_group_apis
from quorum.broker.groups.offsets_log import InMemoryOffsetsLog
from quorum.broker.groups.shell import GroupCoordinatorShell
from quorum.net.dispatch import Dispatcher
from quorum.wire.errors import ErrorCode as E
from quorum.wire.framing import RequestHeader
from quorum.wire.protocol import APIS, Request, decode_body

CONFIG = GroupConfig(group_initial_rebalance_delay_ms=0, offsets_topic_num_partitions=3)


def versions(key: int, cap: int | None = None) -> range:
    api = APIS[key]
    return range(api.min_version, (cap if cap is not None else api.max_version) + 1)


class Wire:
    """Requests encoded at a version, decoded as the listener would, answered, re-decoded."""

    def __init__(self, shell: GroupCoordinatorShell) -> None:
        self.dispatcher = Dispatcher()
        register_group_apis(self.dispatcher, shell)

    async def call(self, api_key: int, version: int, **fields):
        api = APIS[api_key]
        body = decode_body(api.request, api.request(**fields).encode(version=version), 0, version)
        reply = await self.dispatcher.dispatch(Request(RequestHeader(api_key, version, 1, "tester"), api, body))
        encoded = reply.body.encode(version=reply.version)
        return decode_body(api.response, encoded, 0, reply.version)


async def with_shell(test):
    log = InMemoryOffsetsLog()
    shell = GroupCoordinatorShell(GroupCoordinator(CONFIG), log, lambda p: CoordinatorNode(7, "broker-7", 9097))
    for partition in range(CONFIG.offsets_topic_num_partitions):
        assert await shell.become_leader(partition)
    shell.start()
    try:
        return await test(Wire(shell), shell)
    finally:
        await shell.close()


@pytest.mark.parametrize("join_v", versions(11))
def test_group_lifecycle_at_every_version(join_v: int) -> None:
    sync_v, hb_v, leave_v = min(join_v, 5), min(join_v, 4), min(join_v, 5)
    Protocol = APIS[11].request.JoinGroupRequestProtocol
    Assignment = APIS[14].request.SyncGroupRequestAssignment

    async def test(wire: Wire, shell: GroupCoordinatorShell):
        join = dict(group_id="g", session_timeout_ms=10000, rebalance_timeout_ms=20000, member_id="",
                    group_instance_id=None, protocol_type="consumer", reason=None,
                    protocols=[Protocol(name="range", metadata=b"meta")])
        answer = await wire.call(11, join_v, **join)
        if join_v >= 4:
            assert answer.error_code == E.MEMBER_ID_REQUIRED
            answer = await wire.call(11, join_v, **{**join, "member_id": answer.member_id})
        assert answer.error_code == E.NONE and answer.leader == answer.member_id
        assert [m.metadata for m in answer.members] == [b"meta"]
        member, generation = answer.member_id, answer.generation_id
        synced = await wire.call(14, sync_v, group_id="g", generation_id=generation, member_id=member,
                                 group_instance_id=None, protocol_type="consumer", protocol_name="range",
                                 assignments=[Assignment(member_id=member, assignment=b"all")])
        assert (synced.error_code, synced.assignment) == (E.NONE, b"all")
        beat = await wire.call(12, hb_v, group_id="g", generation_id=generation, member_id=member,
                               group_instance_id=None)
        assert beat.error_code == E.NONE
        described = await wire.call(15, min(join_v, 6), groups=["g", "nobody"], include_authorized_operations=False)
        assert [(g.group_state, len(g.members)) for g in described.groups] == [("Stable", 1), ("Dead", 0)]
        listed = await wire.call(16, min(join_v, 5), states_filter=[], types_filter=[])
        assert [(g.group_id, g.protocol_type) for g in listed.groups] == [("g", "consumer")]
        if leave_v >= 3:
            Identity = APIS[13].request.MemberIdentity
            left = await wire.call(13, leave_v, group_id="g",
                                   members=[Identity(member_id=member, group_instance_id=None, reason=None)])
            assert [(m.member_id, m.error_code) for m in left.members] == [(member, E.NONE)]
        else:
            left = await wire.call(13, leave_v, group_id="g", member_id=member)
            assert left.error_code == E.NONE
        assert shell.core.group("g").state.value == "Empty"

    asyncio.run(with_shell(test))


@pytest.mark.parametrize("version", versions(8, MAX_OFFSET_VERSION))
def test_offset_commit_and_fetch_at_every_version(version: int) -> None:
    CommitTopic = APIS[8].request.OffsetCommitRequestTopic
    CommitPartition = CommitTopic.OffsetCommitRequestPartition
    fetch_v = max(version, APIS[9].min_version) if version < 8 else version

    async def test(wire: Wire, shell: GroupCoordinatorShell):
        topics = [CommitTopic(name="t", partitions=[
            CommitPartition(partition_index=0, committed_offset=42, committed_leader_epoch=3, commit_timestamp=-1,
                            committed_metadata="meta"),
            CommitPartition(partition_index=1, committed_offset=7, committed_leader_epoch=-1, commit_timestamp=-1,
                            committed_metadata=None)])]
        committed = await wire.call(8, version, group_id="g", generation_id_or_member_epoch=-1, member_id="",
                                    group_instance_id=None, retention_time_ms=-1, topics=topics)
        assert [(p.partition_index, p.error_code) for t in committed.topics for p in t.partitions] == [
            (0, E.NONE), (1, E.NONE)]
        if fetch_v >= 8:
            Group = APIS[9].request.OffsetFetchRequestGroup
            Topics = Group.OffsetFetchRequestTopics
            fetched = await wire.call(9, fetch_v, require_stable=True, groups=[
                Group(group_id="g", member_id=None, member_epoch=-1,
                      topics=[Topics(name="t", partition_indexes=[0, 1, 2])]),
                Group(group_id="other", member_id=None, member_epoch=-1, topics=None)])
            [group, other] = fetched.groups
            assert other.topics == [] and other.error_code == E.NONE
            partitions = [p for t in group.topics for p in t.partitions]
        else:
            Topic = APIS[9].request.OffsetFetchRequestTopic
            fetched = await wire.call(9, fetch_v, group_id="g", require_stable=False,
                                      topics=[Topic(name="t", partition_indexes=[0, 1, 2])])
            partitions = [p for t in fetched.topics for p in t.partitions]
        seen = {p.partition_index: (p.committed_offset, p.metadata) for p in partitions}
        assert seen == {0: (42, "meta"), 1: (7, ""), 2: (-1, "")}
        if version >= 6:  # OffsetCommit carries the leader epoch from v6, OffsetFetch returns it from v5
            assert {p.partition_index: p.committed_leader_epoch for p in partitions}[0] == 3

    asyncio.run(with_shell(test))


@pytest.mark.parametrize("version", versions(10))
def test_find_coordinator_at_every_version(version: int) -> None:
    async def test(wire: Wire, shell: GroupCoordinatorShell):
        found = await wire.call(10, version, key="g", key_type=0, coordinator_keys=["g", ""])
        if version >= 4:
            assert [(c.key, c.node_id, c.host, c.port, c.error_code) for c in found.coordinators] == [
                ("g", 7, "broker-7", 9097, E.NONE), ("", -1, "", -1, E.INVALID_REQUEST)]
        else:
            assert (found.error_code, found.node_id, found.host, found.port) == (E.NONE, 7, "broker-7", 9097)

    asyncio.run(with_shell(test))


def test_unknown_partitions_are_refused_when_the_shell_knows_the_topics() -> None:
    CommitTopic = APIS[8].request.OffsetCommitRequestTopic
    CommitPartition = CommitTopic.OffsetCommitRequestPartition

    async def test(wire: Wire, shell: GroupCoordinatorShell):
        shell.partition_exists = lambda topic, partition: topic == "t" and partition == 0
        topics = [CommitTopic(name="t", partitions=[
            CommitPartition(partition_index=p, committed_offset=1, committed_leader_epoch=-1, committed_metadata="")
            for p in (0, 5)])]
        committed = await wire.call(8, 9, group_id="g", generation_id_or_member_epoch=-1, member_id="",
                                    group_instance_id=None, topics=topics)
        assert [(p.partition_index, p.error_code) for p in committed.topics[0].partitions] == [
            (0, E.NONE), (5, E.UNKNOWN_TOPIC_OR_PARTITION)]

    asyncio.run(with_shell(test))


def test_shell_expires_sessions_on_its_timer() -> None:
    Protocol = APIS[11].request.JoinGroupRequestProtocol
    clock = [1_000_000]

    async def test(wire: Wire, shell: GroupCoordinatorShell):
        shell.clock = lambda: clock[0]
        answer = await wire.call(11, 3, group_id="g", session_timeout_ms=6000, rebalance_timeout_ms=6000,
                                 member_id="", protocol_type="consumer",
                                 protocols=[Protocol(name="range", metadata=b"")])
        assert answer.error_code == E.NONE
        clock[0] += 7000
        shell._wake.set()
        for _ in range(50):
            await asyncio.sleep(0.01)
            if not shell.core.group("g").members:
                break
        assert shell.core.group("g").members == {}

    asyncio.run(with_shell(test))
