"""ConsumerGroupHeartbeat (68) and ConsumerGroupDescribe (69) on the wire: decoded bodies -> the
coordinator's events, its answers -> response bodies. Only translation; every decision is the core's."""

from __future__ import annotations

import uuid

from quorum.broker.groups.consumer.assignors import Partitions
from quorum.broker.groups.consumer.events import ConsumerHeartbeat
from quorum.broker.groups.shell import GroupCoordinatorShell
from quorum.net.dispatch import Dispatcher, Reply
from quorum.wire.consumer_group_messages import (
    CONSUMER_GROUP_DESCRIBE_KEY,
    CONSUMER_GROUP_HEARTBEAT_KEY,
    ConsumerGroupDescribeResponse,
    ConsumerGroupHeartbeatResponse,
)
from quorum.wire.consumer_group_records import by_topic
from quorum.wire.protocol import Request

AUTHORIZED_OPERATIONS_OMITTED = -(2**31)
_CLIENT_HOST = ""
"""The dispatcher does not pass the peer address (as for DescribeGroups)."""


def register_consumer_group_apis(dispatcher: Dispatcher, shell: GroupCoordinatorShell) -> None:
    """Serve KIP-848's two RPCs from `shell` (advertised in ApiVersions through the dispatcher)."""
    handlers = _ConsumerGroupHandlers(shell)
    dispatcher.register(CONSUMER_GROUP_HEARTBEAT_KEY, handlers.heartbeat)
    dispatcher.register(CONSUMER_GROUP_DESCRIBE_KEY, handlers.describe)


class _ConsumerGroupHandlers:
    def __init__(self, shell: GroupCoordinatorShell) -> None:
        self.shell = shell
        self.core = shell.core

    async def heartbeat(self, request: Request) -> Reply:
        body = request.body
        owned = None
        if body.topic_partitions is not None:
            owned = frozenset((t.topic_id, p) for t in body.topic_partitions for p in t.partitions)
        names = None if body.subscribed_topic_names is None else tuple(body.subscribed_topic_names)
        event = ConsumerHeartbeat(
            body.group_id,
            body.member_id,
            body.member_epoch,
            body.instance_id,
            body.rack_id,
            body.rebalance_timeout_ms,
            names,
            getattr(body, "subscribed_topic_regex", None),
            body.server_assignor,
            owned,
            request.header.client_id or "",
            _CLIENT_HOST,
        )
        answer = await self.shell.call(self.core.consumer_group_heartbeat, event)
        assignment = None
        if answer.assignment is not None:
            topic_class = ConsumerGroupHeartbeatResponse.Assignment.TopicPartitions
            assignment = ConsumerGroupHeartbeatResponse.Assignment(
                topic_partitions=[
                    topic_class(topic_id=topic_id, partitions=parts)
                    for topic_id, parts in by_topic(answer.assignment).items()
                ]
            )
        response = ConsumerGroupHeartbeatResponse(
            throttle_time_ms=0,
            error_code=answer.error,
            error_message=answer.message,
            member_id=answer.member_id,
            member_epoch=answer.member_epoch,
            heartbeat_interval_ms=answer.heartbeat_interval_ms,
            assignment=assignment,
        )
        return Reply(response, request.version)

    async def describe(self, request: Request) -> Reply:
        names = {info.topic_id: name for name, info in self.core.topics.items()}
        group_class = ConsumerGroupDescribeResponse.DescribedGroup
        groups = []
        for group_id in request.body.group_ids:
            d = self.core.describe_consumer_group(group_id)
            members = [
                group_class.Member(
                    member_id=m.member_id,
                    instance_id=m.instance_id,
                    rack_id=m.rack_id,
                    member_epoch=m.member_epoch,
                    client_id=m.client_id,
                    client_host=m.client_host,
                    subscribed_topic_names=list(m.subscribed_topic_names),
                    subscribed_topic_regex=m.subscribed_topic_regex,
                    assignment=self._assignment(m.assignment, names),
                    target_assignment=self._assignment(m.target_assignment, names),
                )
                for m in d.members
            ]
            groups.append(
                group_class(
                    error_code=d.error,
                    error_message=d.message,
                    group_id=d.group_id,
                    group_state=d.state,
                    group_epoch=d.group_epoch,
                    assignment_epoch=d.assignment_epoch,
                    assignor_name=d.assignor,
                    members=members,
                    authorized_operations=AUTHORIZED_OPERATIONS_OMITTED,
                )
            )
        return Reply(ConsumerGroupDescribeResponse(throttle_time_ms=0, groups=groups), request.version)

    @staticmethod
    def _assignment(partitions: Partitions, names: dict[uuid.UUID, str]) -> object:
        assignment_class = ConsumerGroupDescribeResponse.DescribedGroup.Member.Assignment
        return assignment_class(
            topic_partitions=[
                assignment_class.TopicPartitions(
                    topic_id=topic_id, topic_name=names.get(topic_id, ""), partitions=parts
                )
                for topic_id, parts in by_topic(partitions).items()
            ]
        )
