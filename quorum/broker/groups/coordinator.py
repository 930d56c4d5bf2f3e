"""The sans-IO classic group coordinator: Kafka's GroupCoordinator for the partitions this broker leads.

Events in (a request with the shell's handle, "records are durable", "time is now", "this
partition is mine / no longer mine"), an `Output` out (answers to send, records to append). No
clock, socket, thread or file: `now_ms` comes with every event and `next_deadline()` tells the
shell when to call `tick()`.

What it is made of, one job each: the classic protocol (JoinGroup, SyncGroup, Heartbeat, LeaveGroup,
DescribeGroups; Kafka's classic GroupCoordinator 3.x) is `classic_commands`, static membership
(KIP-345, Kafka's GroupMetadataManager) `static_members`, which member may do what `member_rules`,
OffsetCommit and OffsetFetch `coordinator_offsets`, KIP-848's consumer groups `consumer.commands`,
and the partitions this broker leads and their loading `coordinator_partitions`. This module keeps
their shared state, hands durable or failed writes to the part that asked for them, runs the timers,
lists groups and collects the output.

Offsets live beside the groups per partition; a commit answers when its records are durable.
KIP-232: a commit whose internal metadata is older than the partition's latest, or names a topic id
that is not the topic's current one, is refused with INVALID_INTERNAL_METADATA for that partition
(see `offsets.check_entry`). The offsets of a deleted topic are deleted with it (`topics_deleted`,
Kafka's onPartitionsDeleted), and a partition loaded later drops any it still holds
(`drop_stale_offsets`), so a topic created again under the name starts without them.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterable
from typing import Any

from quorum.broker.groups.classic_commands import ClassicCommands, PendingGroupStore, PendingSync
from quorum.broker.groups.config import GroupConfig
from quorum.broker.groups.consumer.assignors import TopicInfo
from quorum.broker.groups.consumer.commands import ConsumerCommands, PendingConsumerAnswer
from quorum.broker.groups.consumer.rules import ConsumerGroupRules
from quorum.broker.groups.coordinator_offsets import OffsetCommands, PendingCommit
from quorum.broker.groups.coordinator_partitions import PartitionOwnership
from quorum.broker.groups.events import Append, ListAnswer, ListedGroup, Output
from quorum.broker.groups.group import Group
from quorum.broker.groups.offsets import (
    storage_error_for_commit,
    storage_error_for_group,
)
from quorum.broker.groups.partition_state import PartitionState
from quorum.broker.groups.static_members import PendingStaticRejoin, StaticMembers
from quorum.wire.errors import ErrorCode

E = ErrorCode


def random_member_id(prefix: str) -> str:
    """Kafka's member id: the client id (or instance id) and a random UUID."""
    return f"{prefix}-{uuid.uuid4()}"


class GroupCoordinator(ClassicCommands, PartitionOwnership, ConsumerCommands, OffsetCommands, StaticMembers):
    """Kafka's GroupCoordinator for the partitions this broker leads (see the module docstring). The
    mixins hold one job each and come first where others declare their methods as stubs."""

    def __init__(self, config: GroupConfig | None = None,
                 new_member_id: Callable[[str], str] = random_member_id) -> None:
        self.config = config or GroupConfig()
        self._new_member_id = new_member_id
        self._partitions: dict[int, PartitionState] = {}
        self._pending: dict[int, PendingCommit | PendingSync | PendingGroupStore | PendingStaticRejoin
                            | PendingConsumerAnswer] = {}
        self._next_token = 0
        self._out = Output()
        self._deleted_topic_ids: set[uuid.UUID] = set()
        """Ids of topics deleted while this coordinator ran: a commit to one still in flight is dropped."""
        self._elected: frozenset[int] = frozenset()
        """Partitions the broker's newest metadata says it leads (`elected`), loaded or not."""
        self.consumer_rules = ConsumerGroupRules(self.config)
        self.topics: dict[str, TopicInfo] = {}
        """The broker's topics for KIP-848 assignments (`set_topics`)."""

    # ----------------------------------------------------------------------------------------
    # Durability and time

    def append_done(self, token: int, now_ms: int) -> Output:
        """The records of the Append with this token are durable."""
        pending = self._pending.pop(token, None)
        if isinstance(pending, PendingCommit):
            self._commit_stored(pending)
        elif isinstance(pending, PendingConsumerAnswer):
            self._settle_consumer(pending, E.NONE)
        elif isinstance(pending, PendingStaticRejoin):
            self._static_rejoin_stored(pending, E.NONE)
        elif isinstance(pending, PendingSync):
            self._sync_stored(pending, now_ms)
        return self._flush()

    def append_failed(self, token: int, error: int, now_ms: int) -> Output:
        """The Append with this token failed with `error` (a Kafka error code from the partition log)."""
        pending = self._pending.pop(token, None)
        if isinstance(pending, PendingCommit):
            self._commit_failed(pending, storage_error_for_commit(error))
        elif isinstance(pending, PendingConsumerAnswer):
            self._settle_consumer(pending, storage_error_for_group(error))
        elif isinstance(pending, PendingStaticRejoin):
            self._static_rejoin_stored(pending, storage_error_for_group(error))
        elif isinstance(pending, PendingSync):
            self._sync_failed(pending, error, now_ms)
        return self._flush()

    def next_deadline(self) -> int | None:
        """The earliest time at which `tick` has something to do, or None."""
        deadlines = self._classic_deadlines()
        consumer = self._consumer_deadline()
        return min(deadlines if consumer is None else [*deadlines, consumer], default=None)

    def tick(self, now_ms: int) -> Output:
        """Expire sessions and pending members, and complete rebalances whose time is up."""
        self._expire_classic_groups(now_ms)
        self._expire_consumer_groups(now_ms)
        return self._flush()

    # ----------------------------------------------------------------------------------------
    # ListGroups

    def list_groups(self, states: Iterable[str] = (), types: Iterable[str] = ()) -> ListAnswer:
        """Groups of the loaded partitions; COORDINATOR_LOAD_IN_PROGRESS too while any is loading."""
        wanted_states = {s.lower() for s in states}
        wanted_types = {t.lower() for t in types}
        loading = bool(self._elected - self._partitions.keys())
        groups = []
        for state in self._partitions.values():
            loading = loading or state.loading
            for group in state.groups.values() if not wanted_types or "classic" in wanted_types else ():
                if not wanted_states or group.state.value.lower() in wanted_states:
                    groups.append(ListedGroup(group.group_id, group.protocol_type or "", group.state.value))
            for consumer in state.consumer_groups.values() if not wanted_types or "consumer" in wanted_types else ():
                if not wanted_states or consumer.state.value.lower() in wanted_states:
                    groups.append(ListedGroup(consumer.group_id, "consumer", consumer.state.value, "consumer"))
        error = E.COORDINATOR_LOAD_IN_PROGRESS if loading else E.NONE
        return ListAnswer(error, tuple(sorted(groups, key=lambda g: g.group_id)))

    def group(self, group_id: str) -> Group | None:
        """The group's live state (for tests and tools)."""
        state = self._partitions.get(self.partition_for(group_id))
        return state.groups.get(group_id) if state is not None else None

    # ----------------------------------------------------------------------------------------
    # Output plumbing

    def _append(self, partition: int, records: list[tuple[bytes, bytes | None]]) -> int:
        self._next_token += 1
        self._out.appends.append(Append(self._next_token, partition, tuple(records)))
        return self._next_token

    def _answer(self, handle: Any, answer: Any) -> None:
        self._out.answers.append((handle, answer))

    def _reply(self, handle: Any, answer: Any) -> Output:
        self._answer(handle, answer)
        return self._flush()

    def _flush(self) -> Output:
        out, self._out = self._out, Output()
        return out


