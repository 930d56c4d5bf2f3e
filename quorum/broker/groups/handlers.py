"""The group APIs on the wire: decoded request bodies -> core events, core answers -> response bodies.

Only translation lives here (what each version of each API carries); every decision is the
core's. Strings that a version does not allow to be null are sent as "" (the schema engine would
write a null where Kafka never does). OffsetCommit and OffsetFetch are served up to v9: v10 names
topics by id, which the coordinator does not track.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from quorum.broker.groups.consumer.handlers import register_consumer_group_apis
from quorum.broker.groups.events import (
    CommitEntry,
    FetchAnswer,
    FetchedOffset,
    Heartbeat,
    JoinGroup,
    LeaveGroup,
    LeavingMember,
    OffsetCommit,
    OffsetFetch,
    SyncGroup,
)
from quorum.broker.groups.shell import GroupCoordinatorShell
from quorum.net.dispatch import Dispatcher, Reply
from quorum.wire.errors import ErrorCode
from quorum.wire.protocol import APIS, Request

OFFSET_COMMIT, OFFSET_FETCH, FIND_COORDINATOR, JOIN_GROUP, HEARTBEAT = 8, 9, 10, 11, 12
LEAVE_GROUP, SYNC_GROUP, DESCRIBE_GROUPS, LIST_GROUPS = 13, 14, 15, 16
MAX_OFFSET_VERSION = 9
GROUP_KEY_TYPE = 0
_CLIENT_HOST = ""
"""The dispatcher does not pass the peer address, so DescribeGroups reports no client host."""


def register_group_apis(dispatcher: Dispatcher, shell: GroupCoordinatorShell) -> None:
    """Serve FindCoordinator, the classic group APIs and OffsetCommit/OffsetFetch from `shell`."""
    handlers = _GroupHandlers(shell)
    dispatcher.register(OFFSET_COMMIT, handlers.offset_commit, max_version=MAX_OFFSET_VERSION)
    dispatcher.register(OFFSET_FETCH, handlers.offset_fetch, max_version=MAX_OFFSET_VERSION)
    dispatcher.register(FIND_COORDINATOR, handlers.find_coordinator)
    dispatcher.register(JOIN_GROUP, handlers.join_group)
    dispatcher.register(HEARTBEAT, handlers.heartbeat)
    dispatcher.register(LEAVE_GROUP, handlers.leave_group)
    dispatcher.register(SYNC_GROUP, handlers.sync_group)
    dispatcher.register(DESCRIBE_GROUPS, handlers.describe_groups)
    dispatcher.register(LIST_GROUPS, handlers.list_groups)
    register_consumer_group_apis(dispatcher, shell)


def _nullable(value: str | None, version: int, nullable_from: int) -> str | None:
    return value if value is not None or version >= nullable_from else ""


class _GroupHandlers:
    def __init__(self, shell: GroupCoordinatorShell) -> None:
        self.shell = shell
        self.core = shell.core

    # FindCoordinator ------------------------------------------------------------------------

    async def find_coordinator(self, request: Request) -> Reply:
        body, version = request.body, request.version
        response = APIS[FIND_COORDINATOR].response
        key_type = getattr(body, "key_type", GROUP_KEY_TYPE)
        keys = list(body.coordinator_keys) if version >= 4 else [body.key]
        found = [self._locate(key, key_type) for key in keys]
        if version >= 4:
            coordinators = [response.Coordinator(key=key, node_id=node_id, host=host, port=port, error_code=error,
                                                 error_message=None)
                            for key, (error, node_id, host, port) in zip(keys, found, strict=True)]
            return Reply(response(throttle_time_ms=0, coordinators=coordinators), version)
        error, node_id, host, port = found[0]
        return Reply(response(throttle_time_ms=0, error_code=error, error_message=None, node_id=node_id,
                              host=host, port=port), version)

    def _locate(self, key: str, key_type: int) -> tuple[int, int, str, int]:
        if key_type != GROUP_KEY_TYPE:
            return ErrorCode.COORDINATOR_NOT_AVAILABLE, -1, "", -1  # no transaction coordinator here
        if not key:
            return ErrorCode.INVALID_REQUEST, -1, "", -1
        node = self.shell.coordinator_node(key)
        if node is None:
            return ErrorCode.COORDINATOR_NOT_AVAILABLE, -1, "", -1
        return ErrorCode.NONE, node.node_id, node.host, node.port

    # JoinGroup / SyncGroup / Heartbeat / LeaveGroup ------------------------------------------

    async def join_group(self, request: Request) -> Reply:
        body, version = request.body, request.version
        rebalance_timeout = body.rebalance_timeout_ms if version >= 1 else body.session_timeout_ms
        event = JoinGroup(body.group_id, body.member_id, body.session_timeout_ms, rebalance_timeout,
                          body.protocol_type, tuple((p.name, bytes(p.metadata)) for p in body.protocols),
                          getattr(body, "group_instance_id", None), request.header.client_id or "", _CLIENT_HOST,
                          version)
        answer = await self.shell.call(self.core.join_group, event)
        response = APIS[JOIN_GROUP].response
        members = [response.JoinGroupResponseMember(member_id=m.member_id, group_instance_id=m.group_instance_id,
                                                    metadata=m.metadata) for m in answer.members]
        return Reply(response(throttle_time_ms=0, error_code=answer.error, generation_id=answer.generation,
                              protocol_type=answer.protocol_type,
                              protocol_name=_nullable(answer.protocol_name, version, 7), leader=answer.leader,
                              skip_assignment=answer.skip_assignment, member_id=answer.member_id,
                              members=members), version)

    async def sync_group(self, request: Request) -> Reply:
        body, version = request.body, request.version
        event = SyncGroup(body.group_id, body.generation_id, body.member_id,
                          tuple((a.member_id, bytes(a.assignment)) for a in body.assignments),
                          getattr(body, "group_instance_id", None),
                          getattr(body, "protocol_type", None) if version >= 5 else None,
                          getattr(body, "protocol_name", None) if version >= 5 else None)
        answer = await self.shell.call(self.core.sync_group, event)
        response = APIS[SYNC_GROUP].response
        return Reply(response(throttle_time_ms=0, error_code=answer.error, protocol_type=answer.protocol_type,
                              protocol_name=answer.protocol_name, assignment=answer.assignment), version)

    async def heartbeat(self, request: Request) -> Reply:
        body = request.body
        event = Heartbeat(body.group_id, body.generation_id, body.member_id, getattr(body, "group_instance_id", None))
        answer = await self.shell.call(self.core.heartbeat, event)
        return Reply(APIS[HEARTBEAT].response(throttle_time_ms=0, error_code=answer.error), request.version)

    async def leave_group(self, request: Request) -> Reply:
        body, version = request.body, request.version
        if version >= 3:
            leaving = tuple(LeavingMember(m.member_id, m.group_instance_id) for m in body.members)
        else:
            leaving = (LeavingMember(body.member_id),)
        answer = await self.shell.call(self.core.leave_group, LeaveGroup(body.group_id, leaving))
        response = APIS[LEAVE_GROUP].response
        if version < 3:
            return Reply(response(throttle_time_ms=0, error_code=answer.legacy_error()), version)
        members = [response.MemberResponse(member_id=m.member_id, group_instance_id=m.group_instance_id,
                                           error_code=code) for m, code in answer.members]
        return Reply(response(throttle_time_ms=0, error_code=answer.error, members=members), version)

    # DescribeGroups / ListGroups ---------------------------------------------------------------

    async def describe_groups(self, request: Request) -> Reply:
        response = APIS[DESCRIBE_GROUPS].response
        groups = []
        for group_id in request.body.groups:
            d = self.core.describe_group(group_id)
            members = [response.DescribedGroup.DescribedGroupMember(
                member_id=m.member_id, group_instance_id=m.group_instance_id, client_id=m.client_id,
                client_host=m.client_host, member_metadata=m.metadata, member_assignment=m.assignment)
                for m in d.members]
            groups.append(response.DescribedGroup(error_code=d.error, error_message=None, group_id=d.group_id or "",
                                                  group_state=d.state, protocol_type=d.protocol_type,
                                                  protocol_data=d.protocol_data, members=members,
                                                  authorized_operations=-2147483648))
        return Reply(response(throttle_time_ms=0, groups=groups), request.version)

    async def list_groups(self, request: Request) -> Reply:
        body = request.body
        # A null inside a filter (the schema does not allow one, the engine decodes it) matches no group.
        answer = self.core.list_groups([s or "" for s in getattr(body, "states_filter", None) or ()],
                                       [t or "" for t in getattr(body, "types_filter", None) or ()])
        response = APIS[LIST_GROUPS].response
        groups = [response.ListedGroup(group_id=g.group_id, protocol_type=g.protocol_type, group_state=g.state,
                                       group_type=g.group_type) for g in answer.groups]
        return Reply(response(throttle_time_ms=0, error_code=answer.error, groups=groups), request.version)

    # OffsetCommit / OffsetFetch ------------------------------------------------------------------

    async def offset_commit(self, request: Request) -> Reply:
        body, version = request.body, request.version
        exists: Callable[[str, int], bool] = self.shell.partition_exists or (lambda topic, partition: True)
        topic_id: Callable[[str], Any] = self.shell.current_topic_id or (lambda topic: None)
        slots: list[tuple[str, int, int | None]] = []  # topic, partition, index in the core's entries or None
        entries: list[CommitEntry] = []
        for topic in body.topics:
            for p in topic.partitions:
                if exists(topic.name, p.partition_index):
                    slots.append((topic.name, p.partition_index, len(entries)))
                    entries.append(CommitEntry(topic.name, p.partition_index, p.committed_offset,
                                               getattr(p, "committed_leader_epoch", -1), p.committed_metadata,
                                               topic_id(topic.name)))
                else:
                    slots.append((topic.name, p.partition_index, None))
        errors: tuple[int, ...] = ()
        if entries:
            event = OffsetCommit(body.group_id, tuple(entries), body.generation_id_or_member_epoch, body.member_id,
                                 getattr(body, "group_instance_id", None),
                                 getattr(body, "retention_time_ms", -1) if version <= 4 else -1, version)
            errors = (await self.shell.call(self.core.offset_commit, event)).errors
        response = APIS[OFFSET_COMMIT].response
        by_topic: dict[str, list[Any]] = {}
        for name, partition, index in slots:
            code = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION if index is None else errors[index]
            by_topic.setdefault(name, []).append(
                response.OffsetCommitResponseTopic.OffsetCommitResponsePartition(partition_index=partition,
                                                                                 error_code=code))
        topics = [response.OffsetCommitResponseTopic(name=name, partitions=parts) for name, parts in by_topic.items()]
        return Reply(response(throttle_time_ms=0, topics=topics), version)

    async def offset_fetch(self, request: Request) -> Reply:
        body, version = request.body, request.version
        response = APIS[OFFSET_FETCH].response
        require_stable = bool(getattr(body, "require_stable", False))
        if version >= 8:
            groups = []
            for g in body.groups:
                fetch = OffsetFetch(g.group_id, _wanted(g.topics), require_stable, getattr(g, "member_id", None),
                                    getattr(g, "member_epoch", -1))
                answer = self.core.offset_fetch(fetch, self.shell.current_topic_id)
                topics = _fetched_topics(answer, response.OffsetFetchResponseGroup.OffsetFetchResponseTopics,
                                         "OffsetFetchResponsePartitions", version)
                groups.append(response.OffsetFetchResponseGroup(group_id=g.group_id, topics=topics,
                                                                error_code=answer.error))
            return Reply(response(throttle_time_ms=0, groups=groups), version)
        wanted = _wanted(body.topics)
        answer = self.core.offset_fetch(OffsetFetch(body.group_id, wanted, require_stable), self.shell.current_topic_id)
        if version < 2 and answer.error != ErrorCode.NONE:
            # v1 has no group-level error: every requested partition carries it.
            answer = FetchAnswer(ErrorCode.NONE, tuple(FetchedOffset(t, p, error=answer.error)
                                                       for t, p in wanted or ()))
        topics = _fetched_topics(answer, response.OffsetFetchResponseTopic, "OffsetFetchResponsePartition", version)
        return Reply(response(throttle_time_ms=0, topics=topics, error_code=answer.error), version)


def _wanted(topics: Any) -> tuple[tuple[str, int], ...] | None:
    if topics is None:
        return None
    return tuple((t.name, p) for t in topics for p in t.partition_indexes)


def _fetched_topics(answer: FetchAnswer, topic_class: Any, partition_name: str, version: int) -> list[Any]:
    partition_class = getattr(topic_class, partition_name)
    by_topic: dict[str, list[Any]] = {}
    for o in answer.offsets:
        metadata = o.metadata if o.metadata is not None or version >= 8 else ""
        by_topic.setdefault(o.topic, []).append(partition_class(
            partition_index=o.partition, committed_offset=o.offset, committed_leader_epoch=o.leader_epoch,
            metadata=metadata, error_code=o.error))
    return [topic_class(name=name, partitions=parts) for name, parts in by_topic.items()]
