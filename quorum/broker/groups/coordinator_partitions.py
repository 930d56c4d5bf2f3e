"""Which `__consumer_offsets` partitions the group coordinator leads, and their loading: the half of
`GroupCoordinator` that takes partitions on (elected, loaded from their records) and gives them up
(unloaded, their waiting requests answered NOT_COORDINATOR), and says of a group id whether this
coordinator can answer for it now (Kafka's validateGroupStatus).
"""

from __future__ import annotations

from collections.abc import Collection, Iterable
from typing import TYPE_CHECKING, Any

from quorum.broker.groups.config import GroupConfig, partition_for
from quorum.broker.groups.consumer.commands import PendingConsumerAnswer
from quorum.broker.groups.coordinator_offsets import PendingCommit
from quorum.broker.groups.events import JoinAnswer, Output, SyncAnswer
from quorum.broker.groups.group import GroupState
from quorum.broker.groups.partition_state import PartitionState
from quorum.wire.errors import ErrorCode

if TYPE_CHECKING:
    from quorum.broker.groups.group import Member

E = ErrorCode


class PartitionOwnership:
    """Partition ownership and loading for `GroupCoordinator` (state and plumbing are the coordinator's)."""

    config: GroupConfig
    _partitions: dict[int, PartitionState]
    _pending: dict[int, Any]
    _elected: frozenset[int]

    if TYPE_CHECKING:  # the coordinator's; declared here only for type checkers, so they never shadow it

        def _resume_consumer_groups(self, state: PartitionState, now_ms: int) -> None: ...
        def _answer_join(self, member: Member, answer: JoinAnswer) -> None: ...
        def _answer_sync(self, member: Member, answer: SyncAnswer) -> None: ...
        def _commit_failed(self, pending: PendingCommit, error: int) -> None: ...
        def _settle_consumer(self, pending: PendingConsumerAnswer, error: int) -> None: ...
        def _flush(self) -> Output: ...

    def partition_for(self, group_id: str) -> int:
        return partition_for(group_id, self.config.offsets_topic_num_partitions)

    def elected(self, partitions: Collection[int]) -> None:
        """The broker's newest metadata names it the leader of `partitions` (and of no other): call
        on every metadata change, before the partitions' logs are open.

        Kafka's coordinator takes a partition on as loading the moment its metadata names it the
        leader (onElection): from then on its groups answer COORDINATOR_LOAD_IN_PROGRESS, which
        clients retry, until loaded. Here the partition is loaded only once the broker has applied
        that image (its logs opened, off the event loop), so a partition named here but not begun
        yet answers as loading too, not NOT_COORDINATOR, which tells a client to look for the
        coordinator again and which librdkafka's committed() gives up on. A broker whose metadata
        does not name it yet answers NOT_COORDINATOR, as Kafka's does."""
        self._elected = frozenset(partitions)

    def begin_loading(self, partition: int) -> None:
        """This broker now leads `partition`: its groups answer COORDINATOR_LOAD_IN_PROGRESS until loaded."""
        self._partitions[partition] = PartitionState(partition)

    def replay(self, partition: int, records: Iterable[tuple[bytes, bytes | None]]) -> None:
        """Apply the partition's records, in log order (may be called several times while loading).

        Raises ConsumerOffsetsRecordError for a corrupt record; the shell should then `unload`.
        """
        state = self._partitions[partition]
        assert state.loading, f"partition {partition} is not loading"
        for key, value in records:
            state.replay(key, value)

    def finish_loading(self, partition: int, now_ms: int) -> None:
        self._partitions[partition].finish_loading(now_ms)
        self._resume_consumer_groups(self._partitions[partition], now_ms)

    def unload(self, partition: int) -> Output:
        """This broker no longer leads `partition` (or could not load it): forget its groups and answer
        their waiting requests. It answers NOT_COORDINATOR from now on, as Kafka's coordinator does
        once it resigned or failed to load, until the metadata names this broker its leader again."""
        self._elected = self._elected - {partition}
        state = self._partitions.pop(partition, None)
        if state is not None:
            for group in state.groups.values():
                for member in group.members.values():
                    self._answer_join(member, JoinAnswer(E.NOT_COORDINATOR, member.member_id))
                    self._answer_sync(member, SyncAnswer(E.NOT_COORDINATOR))
                group.state = GroupState.DEAD
        for token, pending in list(self._pending.items()):
            if pending.partition == partition:
                del self._pending[token]
                if isinstance(pending, PendingCommit):
                    self._commit_failed(pending, E.NOT_COORDINATOR)
                elif isinstance(pending, PendingConsumerAnswer):
                    self._settle_consumer(pending, E.NOT_COORDINATOR)
        return self._flush()

    @property
    def partitions(self) -> dict[int, bool]:
        """Partitions led here -> True once loaded."""
        return {p: not s.loading for p, s in self._partitions.items()}

    def _status(self, group_id: str | None) -> tuple[int, PartitionState | None]:
        """Kafka's validateGroupStatus: a null group id first (INVALID_GROUP_ID: it has no partition;
        a string the schema does not let be null still decodes as one), then NOT_COORDINATOR and
        COORDINATOR_LOAD_IN_PROGRESS."""
        if group_id is None:
            return E.INVALID_GROUP_ID, None
        partition = self.partition_for(group_id)
        state = self._partitions.get(partition)
        if state is None:
            return (E.COORDINATOR_LOAD_IN_PROGRESS if partition in self._elected else E.NOT_COORDINATOR), None
        if state.loading:
            return E.COORDINATOR_LOAD_IN_PROGRESS, None
        return E.NONE, state
