"""What goes into the group coordinator core and what comes out of it: plain data, no wire classes.

Requests are the fields of Kafka's group RPCs that the coordinator reads (the handlers translate
wire bodies into these and answers back), so the core can be driven by tests and the simulator
without building protocol messages. A command (join, sync, heartbeat, leave, commit) carries an
opaque `handle` chosen by the shell; its answer comes back paired with that handle in an
`Output`, perhaps much later (a JoinGroup waits for the rebalance, a commit for durability).
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field
from typing import Any

from quorum.wire.errors import ErrorCode

Protocols = tuple[tuple[str, bytes], ...]
"""A member's supported protocols (assignors) in preference order, with its metadata for each."""
NO_OFFSET = -1
NO_EPOCH = -1


# --------------------------------------------------------------------------------------------
# Requests


@dataclass(frozen=True, slots=True)
class JoinGroup:
    group_id: str
    member_id: str
    session_timeout_ms: int
    rebalance_timeout_ms: int
    protocol_type: str
    protocols: Protocols
    group_instance_id: str | None = None
    client_id: str = ""
    client_host: str = ""
    version: int = 9
    """The JoinGroup version: from v4 a dynamic member's first join answers MEMBER_ID_REQUIRED."""


@dataclass(frozen=True, slots=True)
class SyncGroup:
    group_id: str
    generation: int
    member_id: str
    assignments: tuple[tuple[str, bytes], ...] = ()
    group_instance_id: str | None = None
    protocol_type: str | None = None
    protocol_name: str | None = None


@dataclass(frozen=True, slots=True)
class Heartbeat:
    group_id: str
    generation: int
    member_id: str
    group_instance_id: str | None = None


@dataclass(frozen=True, slots=True)
class LeavingMember:
    member_id: str
    group_instance_id: str | None = None


@dataclass(frozen=True, slots=True)
class LeaveGroup:
    group_id: str
    members: tuple[LeavingMember, ...]


@dataclass(frozen=True, slots=True)
class CommitEntry:
    topic: str
    partition: int
    offset: int
    leader_epoch: int = NO_EPOCH
    metadata: str | None = ""
    topic_id: uuid.UUID | None = None
    """The topic's current id in the broker's metadata (None: unknown): stored with the offset, and what
    internal metadata naming a topic id must match."""


@dataclass(frozen=True, slots=True)
class OffsetCommit:
    group_id: str
    entries: tuple[CommitEntry, ...]
    generation: int = -1
    member_id: str = ""
    group_instance_id: str | None = None
    retention_time_ms: int = -1
    """OffsetCommit v2-v4: an explicit retention; -1 (the default) keeps the broker's."""
    version: int = 8
    """The OffsetCommit version: from v9 `generation` may be a KIP-848 member epoch."""


@dataclass(frozen=True, slots=True)
class OffsetFetch:
    group_id: str
    partitions: tuple[tuple[str, int], ...] | None = None
    """None asks for every committed offset of the group."""
    require_stable: bool = False
    member_id: str | None = None
    """OffsetFetch v9+: the KIP-848 member asking (None: an admin or a classic consumer)."""
    member_epoch: int = -1


# --------------------------------------------------------------------------------------------
# Answers


@dataclass(frozen=True, slots=True)
class JoinMember:
    member_id: str
    group_instance_id: str | None
    metadata: bytes


@dataclass(frozen=True, slots=True)
class JoinAnswer:
    error: int
    member_id: str = ""
    generation: int = -1
    protocol_type: str | None = None
    protocol_name: str | None = None
    leader: str = ""
    members: tuple[JoinMember, ...] = ()
    """Filled for the leader only: every member's metadata for the selected protocol."""
    skip_assignment: bool = False
    """JoinGroup v9+: the leader is told not to assign (a static leader that restarted into a Stable group)."""


@dataclass(frozen=True, slots=True)
class SyncAnswer:
    error: int
    protocol_type: str | None = None
    protocol_name: str | None = None
    assignment: bytes = b""


@dataclass(frozen=True, slots=True)
class HeartbeatAnswer:
    error: int


@dataclass(frozen=True, slots=True)
class LeaveAnswer:
    error: int
    members: tuple[tuple[LeavingMember, int], ...] = ()
    """Each leaving member with its own error (LeaveGroup v3+ reports them one by one)."""

    def legacy_error(self) -> int:
        """The single error of LeaveGroup v0-v2: the top-level one, else the first member's."""
        if self.error != ErrorCode.NONE:
            return self.error
        return next((code for _, code in self.members if code != ErrorCode.NONE), ErrorCode.NONE)


@dataclass(frozen=True, slots=True)
class CommitAnswer:
    errors: tuple[int, ...]
    """One error code per entry of the request, in its order."""


@dataclass(frozen=True, slots=True)
class FetchedOffset:
    topic: str
    partition: int
    offset: int = NO_OFFSET
    leader_epoch: int = NO_EPOCH
    metadata: str | None = ""
    error: int = ErrorCode.NONE


@dataclass(frozen=True, slots=True)
class FetchAnswer:
    error: int
    offsets: tuple[FetchedOffset, ...] = ()


@dataclass(frozen=True, slots=True)
class DescribedMember:
    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    metadata: bytes
    assignment: bytes


@dataclass(frozen=True, slots=True)
class DescribedGroup:
    group_id: str
    error: int
    state: str = "Dead"
    protocol_type: str = ""
    protocol_data: str = ""
    members: tuple[DescribedMember, ...] = ()


@dataclass(frozen=True, slots=True)
class ListedGroup:
    group_id: str
    protocol_type: str
    state: str
    group_type: str = "classic"


@dataclass(frozen=True, slots=True)
class ListAnswer:
    error: int
    groups: tuple[ListedGroup, ...] = ()


Answer = JoinAnswer | SyncAnswer | HeartbeatAnswer | LeaveAnswer | CommitAnswer


# --------------------------------------------------------------------------------------------
# Actions


@dataclass(frozen=True, slots=True)
class Append:
    """Records for `__consumer_offsets` partition `partition`: append them as one batch, then report
    `append_done(token)` once durable (or `append_failed(token, error)`)."""

    token: int
    partition: int
    records: tuple[tuple[bytes, bytes | None], ...]


@dataclass(slots=True)
class Output:
    """What one event produced: answers to send (handle, answer) and records to append."""

    answers: list[tuple[Any, Answer]] = field(default_factory=list)
    appends: list[Append] = field(default_factory=list)

    def answer_for(self, handle: Any) -> Answer | None:
        return next((answer for h, answer in self.answers if h == handle), None)
