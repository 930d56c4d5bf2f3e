"""The offsets half of the classic group coordinator: OffsetCommit, OffsetFetch, and the offsets
of deleted topics (Kafka's OffsetMetadataManager beside its GroupMetadataManager).

A commit is checked against its group with Kafka's validateOffsetCommit (`member_rules`) and per
partition with Kafka's and KIP-232's rules (`offsets.check_entry`); it answers once its records are
durable. `GroupCoordinator` (coordinator.py) mixes this in and owns the state.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass
from typing import Any

from quorum.broker.groups.config import GroupConfig
from quorum.broker.groups.events import (
    CommitAnswer,
    FetchAnswer,
    FetchedOffset,
    OffsetCommit,
    OffsetFetch,
    Output,
)
from quorum.broker.groups.group import Group, GroupState
from quorum.broker.groups.member_rules import validate_offset_commit
from quorum.broker.groups.offsets import check_entry, is_stale, value_for
from quorum.broker.groups.partition_state import PartitionState, TopicPartition
from quorum.wire.consumer_offsets import OffsetKey, OffsetValue, encode_record
from quorum.wire.errors import ErrorCode

E = ErrorCode


@dataclass(slots=True)
class PendingCommit:
    handle: Any
    group_id: str
    partition: int
    errors: list[int]
    values: dict[int, tuple[TopicPartition, OffsetValue]]
    """Entry index -> the value being appended for it."""



class OffsetCommands:
    """OffsetCommit, OffsetFetch and the offsets of deleted topics: the offsets half of
    `GroupCoordinator`, which holds the state (partitions, pending appends) and the output plumbing
    these methods use; kept in its own module because it is the half that does not change a group's
    membership (only its members' session, on a commit, as Kafka's does)."""

    config: GroupConfig
    _partitions: dict[int, PartitionState]
    _pending: dict[int, Any]
    _deleted_topic_ids: set[uuid.UUID]

    def _status(self, group_id: str | None) -> tuple[int, PartitionState | None]: ...
    def consumer_commit_error(self, state: PartitionState, group_id: str, member_id: str, member_epoch: int,
                              version: int, now_ms: int) -> int | None: ...
    def consumer_fetch_error(self, state: PartitionState, group_id: str, member_id: str | None,
                             member_epoch: int) -> int: ...
    def _group_at(self, state: PartitionState, group_id: str, now_ms: int) -> Group | None: ...
    def _append(self, partition: int, records: list[tuple[bytes, bytes | None]]) -> int: ...
    def _answer(self, handle: Any, answer: Any) -> None: ...
    def _reply(self, handle: Any, answer: Any) -> Output: ...
    def _flush(self) -> Output: ...

    # ----------------------------------------------------------------------------------------
    # Offsets of deleted topics

    def topics_deleted(self, deleted: Mapping[uuid.UUID, str],
                       current_topic_id: Callable[[str], uuid.UUID | None]) -> Output:
        """The topics with these ids (mapped to their names) were deleted (the broker's metadata no longer
        has them): tombstone their offsets in every loaded partition, as Kafka's onPartitionsDeleted does by
        name. An offset stored without a topic id (Kafka's own value, older commits) goes by its topic's
        name, also when a topic of that name exists again: the broker applied the deletion and the
        re-creation as one image, and the offset is the deleted topic's. `current_topic_id` names a
        topic's id now (None: no such topic).

        A failed tombstone append needs no retry: the offsets are gone from memory, and the partition's
        next load drops them again (`drop_stale_offsets`)."""
        self._deleted_topic_ids.update(deleted)
        names = frozenset(deleted.values())
        for state in self._partitions.values():
            if not state.loading:
                self._drop_stale(state, current_topic_id, names)
        return self._flush()

    def drop_stale_offsets(self, partition: int, current_topic_id: Callable[[str], uuid.UUID | None]) -> Output:
        """Tombstone the offsets of a loaded partition whose topics are gone (deleted while this broker
        was down or did not lead the partition, or deleted and created again).

        Safe against an image that lags: every offset in the log was committed by a leader whose
        metadata held the topic, before the record that made this broker the leader (a deposed leader
        refuses appends), and this broker's metadata holds that record when it loads the partition;
        so a topic missing from it, or there under another id, really went away."""
        state = self._partitions.get(partition)
        if state is not None and not state.loading:
            self._drop_stale(state, current_topic_id)
        return self._flush()

    def _drop_stale(self, state: PartitionState, current_topic_id: Callable[[str], uuid.UUID | None],
                    deleted_names: Collection[str] = ()) -> None:
        busy = {p.group_id for p in self._pending.values() if isinstance(p, PendingCommit)}
        records = state.drop_stale_offsets(current_topic_id, busy, deleted_names)
        if records:
            self._append(state.partition, records)

    # ----------------------------------------------------------------------------------------
    # Offsets

    def offset_commit(self, handle: Any, request: OffsetCommit, now_ms: int) -> Output:
        entries = request.entries
        error, state = self._status(request.group_id)
        if not request.group_id:
            error = E.INVALID_GROUP_ID
        if error != E.NONE or state is None:
            return self._reply(handle, CommitAnswer(tuple(error for _ in entries)))
        consumer_error = self.consumer_commit_error(state, request.group_id, request.member_id, request.generation,
                                                    request.version, now_ms)
        if consumer_error is not None:  # a KIP-848 group
            if consumer_error != E.NONE:
                return self._reply(handle, CommitAnswer(tuple(consumer_error for _ in entries)))
            self._store_offsets(handle, state, request, now_ms)
            return self._flush()
        group = self._group_at(state, request.group_id, now_ms)
        if group is None:
            if request.generation >= 0:
                # Kafka: v9+ may carry a member epoch, and the group is not found; older ones a generation.
                missing = E.GROUP_ID_NOT_FOUND if request.version >= 9 else E.ILLEGAL_GENERATION
                return self._reply(handle, CommitAnswer(tuple(missing for _ in entries)))
            # A consumer that assigns partitions itself: the group exists only for its offsets.
            group = state.groups[request.group_id] = Group(request.group_id, state_timestamp_ms=now_ms)
        error = validate_offset_commit(group, request.generation, request.member_id, request.group_instance_id)
        if error != E.NONE:
            return self._reply(handle, CommitAnswer(tuple(error for _ in entries)))
        member = group.members.get(request.member_id)
        if member is not None:
            member.heartbeat_deadline_ms = now_ms + member.session_timeout_ms
        self._store_offsets(handle, state, request, now_ms)
        return self._flush()

    def _store_offsets(self, handle: Any, state: PartitionState, request: OffsetCommit, now_ms: int) -> None:
        committed = state.offsets.get(request.group_id, {})
        latest = dict(committed)
        for pending in self._pending.values():
            if isinstance(pending, PendingCommit) and pending.group_id == request.group_id:
                latest.update(pending.values.values())
        errors: list[int] = []
        values: dict[int, tuple[TopicPartition, OffsetValue]] = {}
        for index, entry in enumerate(request.entries):
            tp = (entry.topic, entry.partition)
            error = check_entry(entry, latest.get(tp), self.config)
            errors.append(error)
            if error == E.NONE:
                value = value_for(entry, now_ms, request.retention_time_ms, self.config.kip232)
                values[index] = (tp, value)
                latest[tp] = value
        if not values:
            self._answer(handle, CommitAnswer(tuple(errors)))
            return
        records = [encode_record(OffsetKey(request.group_id, tp[0], tp[1]), value) for tp, value in values.values()]
        token = self._append(state.partition, records)
        self._pending[token] = PendingCommit(handle, request.group_id, state.partition, errors, values)

    def offset_fetch(self, request: OffsetFetch,
                     current_topic_id: Callable[[str], uuid.UUID | None] | None = None) -> FetchAnswer:
        """Committed offsets (a query: answered at once, changes nothing).

        `current_topic_id` (the broker's newest metadata) hides an offset of a topic that is gone or
        was created again under its name (`offsets.is_stale`), as if already deleted: the tombstones
        follow when the broker applies that image (`topics_deleted`), and a consumer asking in
        between must not start the new topic at the old topic's position."""
        error, state = self._status(request.group_id)
        if error != E.NONE or state is None:
            return FetchAnswer(error)
        error = self.consumer_fetch_error(state, request.group_id, request.member_id, request.member_epoch)
        if error != E.NONE:
            return FetchAnswer(error)
        committed = state.offsets.get(request.group_id, {})
        group = state.groups.get(request.group_id)
        if request.group_id not in state.consumer_groups and (group is None or group.state is GroupState.DEAD):
            committed = {}
        wanted = request.partitions if request.partitions is not None else tuple(committed)
        in_flight: set[TopicPartition] = set()
        if request.require_stable:
            for pending in self._pending.values():
                if isinstance(pending, PendingCommit) and pending.group_id == request.group_id:
                    in_flight.update(tp for tp, _ in pending.values.values())
        offsets = []
        for tp in wanted:
            value = committed.get(tp)
            if tp in in_flight:
                offsets.append(FetchedOffset(tp[0], tp[1], error=E.UNSTABLE_OFFSET_COMMIT))
            elif value is None or (current_topic_id is not None and is_stale(value, current_topic_id(tp[0]))):
                offsets.append(FetchedOffset(tp[0], tp[1]))
            else:
                offsets.append(FetchedOffset(tp[0], tp[1], value.offset, value.leader_epoch, value.metadata))
        return FetchAnswer(E.NONE, tuple(offsets))

    def _commit_stored(self, pending: PendingCommit) -> None:
        """A commit's records are durable: its offsets count (unless their topic was deleted meanwhile)."""
        state = self._partitions[pending.partition]
        offsets = state.offsets.setdefault(pending.group_id, {})
        late = []
        for tp, value in pending.values.values():
            if value.topic_id in self._deleted_topic_ids:  # the topic was deleted while it was written
                late.append(encode_record(OffsetKey(pending.group_id, tp[0], tp[1]), None))
            else:
                offsets[tp] = value
        if late:
            self._append(pending.partition, late)
        self._answer(pending.handle, CommitAnswer(tuple(pending.errors)))

    def _commit_failed(self, pending: PendingCommit, code: int) -> None:
        """A commit's records will not be durable: the entries being written answer `code`."""
        errors = [code if i in pending.values else e for i, e in enumerate(pending.errors)]
        self._answer(pending.handle, CommitAnswer(tuple(errors)))

    def committed(self, group_id: str) -> dict[TopicPartition, OffsetValue]:
        state = self._partitions.get(self.partition_for(group_id))
        return dict(state.offsets.get(group_id, {})) if state is not None else {}

