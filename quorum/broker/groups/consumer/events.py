"""What goes into and out of the KIP-848 coordinator: plain data, no wire classes (see ../events.py)."""

from __future__ import annotations

from dataclasses import dataclass

from quorum.broker.groups.consumer.assignors import Partitions
from quorum.wire.errors import ErrorCode

JOIN_EPOCH = 0
LEAVE_EPOCH = -1
STATIC_LEAVE_EPOCH = -2


@dataclass(frozen=True, slots=True)
class ConsumerHeartbeat:
    """ConsumerGroupHeartbeat's fields; None means "unchanged since the last heartbeat", as on the wire."""

    group_id: str
    member_id: str
    member_epoch: int
    instance_id: str | None = None
    rack_id: str | None = None
    rebalance_timeout_ms: int = -1
    subscribed_topic_names: tuple[str, ...] | None = None
    subscribed_topic_regex: str | None = None
    server_assignor: str | None = None
    owned: Partitions | None = None
    client_id: str = ""
    client_host: str = ""


@dataclass(frozen=True, slots=True)
class ConsumerHeartbeatAnswer:
    error: int
    message: str | None = None
    member_id: str | None = None
    member_epoch: int = -1
    heartbeat_interval_ms: int = 0
    assignment: Partitions | None = None
    """The partitions the member may own now; None when they did not change (and the request was not full)."""


def refused(error: ErrorCode, message: str) -> ConsumerHeartbeatAnswer:
    return ConsumerHeartbeatAnswer(error, message)


@dataclass(frozen=True, slots=True)
class DescribedConsumerMember:
    member_id: str
    instance_id: str | None
    rack_id: str | None
    member_epoch: int
    client_id: str
    client_host: str
    subscribed_topic_names: tuple[str, ...]
    subscribed_topic_regex: str | None
    assignment: Partitions
    target_assignment: Partitions


@dataclass(frozen=True, slots=True)
class DescribedConsumerGroup:
    group_id: str
    error: int
    message: str | None = None
    state: str = "Dead"
    group_epoch: int = -1
    assignment_epoch: int = -1
    assignor: str = ""
    members: tuple[DescribedConsumerMember, ...] = ()
