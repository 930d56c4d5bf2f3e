"""`Consumer`: confluent_kafka.Consumer with KIP-232 internal metadata, a drop-in replacement.

Same constructor and methods (it is a subclass: everything not overridden is confluent-kafka's),
plus what KIP-232 adds to a consumer:

- `commit()` stores the user's metadata and the internal metadata (topic_epoch from the metadata
  client, leader_epoch of the last message consumed) together in the one metadata string;
  `committed()` gives back only the user's metadata. It reads with its own OffsetFetch, because
  librdkafka misreads metadata strings other clients wrote (librdkafka#4649).
- After an assignment, or `seek(partition, offset, internal_metadata)`, the partitions stay paused
  until the cluster's metadata is at least as new as the committed epochs (KAFKA-6262), and are
  resumed by the next `poll()`/`consume()` that finds it so.
- `position_with_internal_metadata(partition)` gives (offset, the KIP's JSON) for offsets stored
  outside Kafka.
- A topic deleted and recreated since its offsets were committed raises TopicRecreatedError from
  poll/consume, unless `on_topic_recreated` is "earliest" or "latest" (then the partition is reset).

Options beyond confluent-kafka's, as keyword arguments: `on_topic_recreated`, `metadata_wait_timeout_s`
(None: wait for current metadata as long as it takes; else StaleMetadataError after that long) and
`metadata_check_interval_s` (how often poll looks for recreated topics). Auto-commit
(`enable.auto.commit`) is librdkafka's own and carries no internal metadata: commit explicitly.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Sequence
from typing import Any

import confluent_kafka
from confluent_kafka import OFFSET_BEGINNING, OFFSET_END, OFFSET_INVALID

from client_epochs.committed import encode, parse_internal, split
from client_epochs.consumer_guard import EpochGuard, RecreatedPolicy
from client_epochs.metadata_client import MetadataClient
from client_epochs.model import TopicPartition
from client_epochs.offset_fetch import OffsetFetcher
from quorum.wire.internal_metadata import InternalMetadata

_STEP_S = 0.2
"""How long one poll of librdkafka lasts while partitions wait, so that their metadata is re-checked."""
_OFFSET_STORED = -1000


def _key(partition: confluent_kafka.TopicPartition) -> TopicPartition:
    return TopicPartition(partition.topic, partition.partition)


class Consumer(confluent_kafka.Consumer):
    """confluent_kafka.Consumer that commits, seeks and waits by KIP-232 epochs (see the module docstring)."""

    def __init__(self, config: dict[str, Any], *args: Any, on_topic_recreated: RecreatedPolicy = "raise",
                 metadata_wait_timeout_s: float | None = None, metadata_check_interval_s: float = 5.0,
                 **kwargs: Any) -> None:
        super().__init__(config, *args, **kwargs)
        merged = {**config, **{k: v for k, v in kwargs.items() if isinstance(v, str | int | float | bool)}}
        bootstrap = str(merged.get("bootstrap.servers") or merged.get("metadata.broker.list"))
        self._group = merged.get("group.id")
        self._incremental = "cooperative" in str(merged.get("partition.assignment.strategy", ""))
        self._guard = EpochGuard(MetadataClient(bootstrap), on_topic_recreated=on_topic_recreated,
                                 wait_timeout_s=metadata_wait_timeout_s, check_interval_s=metadata_check_interval_s)
        self._offsets = OffsetFetcher(bootstrap)
        self._leader_epochs: dict[TopicPartition, int] = {}
        self._assigned_in_callback = False

    @property
    def waiting_for_metadata(self) -> frozenset[TopicPartition]:
        """Partitions paused until the cluster's metadata is at least as new as their committed epochs."""
        return self._guard.waiting

    @property
    def metadata_client(self) -> MetadataClient:
        return self._guard.metadata

    # --- assignment -------------------------------------------------------------------------------------

    def subscribe(self, topics: list[str], on_assign: Callable[..., Any] | None = None,
                  on_revoke: Callable[..., Any] | None = None, on_lost: Callable[..., Any] | None = None) -> None:
        """confluent-kafka's subscribe; the callbacks are the user's, wrapped so that assigned
        partitions wait for current metadata and revoked ones stop waiting."""

        def assigned(_: Any, partitions: list[confluent_kafka.TopicPartition]) -> None:
            self._assigned_in_callback = False
            if on_assign is not None:
                on_assign(self, partitions)
            if not self._assigned_in_callback:  # as confluent-kafka does when the callback did not assign
                (self.incremental_assign if self._incremental else self.assign)(partitions)

        def revoked(callback: Callable[..., Any] | None) -> Callable[..., None]:
            def handle(_: Any, partitions: list[confluent_kafka.TopicPartition]) -> None:
                self._guard.forget(_key(p) for p in partitions)
                if callback is not None:
                    callback(self, partitions)
            return handle

        options: dict[str, Any] = {"on_assign": assigned, "on_revoke": revoked(on_revoke)}
        if on_lost is not None:
            options["on_lost"] = revoked(on_lost)
        super().subscribe(topics, **options)

    def assign(self, partitions: list[confluent_kafka.TopicPartition]) -> None:
        self._guard.forget(self._guard.waiting)
        super().assign(partitions)
        self._assigned_in_callback = True
        self._wait_for_committed_epochs(partitions)

    def incremental_assign(self, partitions: list[confluent_kafka.TopicPartition]) -> None:
        super().incremental_assign(partitions)
        self._assigned_in_callback = True
        self._wait_for_committed_epochs(partitions)

    def unassign(self) -> None:
        self._guard.forget(self._guard.waiting)
        super().unassign()

    def incremental_unassign(self, partitions: list[confluent_kafka.TopicPartition]) -> None:
        self._guard.forget(_key(p) for p in partitions)
        super().incremental_unassign(partitions)

    def _wait_for_committed_epochs(self, partitions: Sequence[confluent_kafka.TopicPartition]) -> None:
        """Partitions starting from their committed offset take its epochs as floors, and pause."""
        from_committed = [_key(p) for p in partitions if p.offset in (OFFSET_INVALID, _OFFSET_STORED)]
        if not from_committed or not self._group:
            return
        committed = self._offsets.fetch(self._group, from_committed)
        floors = {tp: split(tp, entry.metadata)[1] for tp, entry in committed.items()}
        self._pause_keys(self._guard.expect(floors))

    # --- seek and positions -----------------------------------------------------------------------------

    def seek(self, partition: confluent_kafka.TopicPartition, offset: int | None = None,
             internal_metadata: str | None = None) -> None:
        """confluent-kafka's seek, and KIP-232's: with `internal_metadata` (the JSON that
        position_with_internal_metadata gave), the partition waits for metadata at least that new.
        InvalidInternalMetadataError, naming the partition and the text, when it does not parse."""
        tp = _key(partition)
        floor = parse_internal(tp, internal_metadata) if internal_metadata is not None else None
        if offset is not None:
            partition = confluent_kafka.TopicPartition(partition.topic, partition.partition, offset)
        super().seek(partition)
        if floor is not None:
            self._pause_keys(self._guard.expect({tp: floor}))

    def position_with_internal_metadata(self, partition: confluent_kafka.TopicPartition) -> tuple[int, str]:
        """(position, internal metadata JSON) of an assigned partition, to store outside Kafka (KIP-232, 7)."""
        tp = _key(partition)
        (position,) = self.position([confluent_kafka.TopicPartition(tp.topic, tp.partition)])
        internal = self._guard.internal_metadata(tp, self._leader_epochs.get(tp))
        return position.offset, internal.to_json()

    # --- poll -------------------------------------------------------------------------------------------

    def poll(self, timeout: float | None = None) -> confluent_kafka.Message | None:
        deadline = _deadline(timeout)
        while True:
            self._keep_epochs()
            message = super().poll(self._step(deadline))
            if message is not None:
                self._note(message)
                return message
            if _passed(deadline):
                return None

    def consume(self, num_messages: int = 1, timeout: float | None = -1) -> list[confluent_kafka.Message]:
        deadline = _deadline(timeout)
        while True:
            self._keep_epochs()
            messages = super().consume(num_messages, self._step(deadline))
            for message in messages:
                self._note(message)
            if messages or _passed(deadline):
                return messages

    def _keep_epochs(self) -> None:
        """Resume the partitions whose metadata caught up; reset or refuse recreated topics."""
        if self._guard.waiting:
            settled = self._guard.settle(timeout=_STEP_S)
            self._reset(settled.recreated)
            if settled.ready:
                self.resume([confluent_kafka.TopicPartition(tp.topic, tp.partition) for tp in settled.ready])
        assigned = [_key(p) for p in self.assignment()]
        self._reset(self._guard.watch(assigned))

    def _reset(self, partitions: Iterable[TopicPartition]) -> None:
        offset = OFFSET_BEGINNING if self._guard.policy == "earliest" else OFFSET_END
        for tp in partitions:
            super().seek(confluent_kafka.TopicPartition(tp.topic, tp.partition, offset))

    def _step(self, deadline: float | None) -> float:
        left = 3600.0 if deadline is None else max(0.0, deadline - time.monotonic())
        return min(left, _STEP_S) if self._guard.waiting else min(left, self._guard.check_interval_s)

    def _note(self, message: confluent_kafka.Message) -> None:
        if message.error() is None and message.topic() is not None:
            epoch = message.leader_epoch()
            if epoch is not None:
                self._leader_epochs[TopicPartition(message.topic(), message.partition())] = epoch

    def _pause_keys(self, partitions: Iterable[TopicPartition]) -> None:
        partitions = [confluent_kafka.TopicPartition(tp.topic, tp.partition) for tp in partitions]
        if partitions:
            self.pause(partitions)

    # --- commits ----------------------------------------------------------------------------------------

    def commit(self, message: confluent_kafka.Message | None = None,
               offsets: list[confluent_kafka.TopicPartition] | None = None, asynchronous: bool = True) -> Any:
        """confluent-kafka's commit, each offset's metadata string carrying the internal metadata too.

        With neither `message` nor `offsets`, commits the consumed positions of the assignment.
        """
        if message is not None:
            offsets = [confluent_kafka.TopicPartition(message.topic(), message.partition(), message.offset() + 1,
                                                      leader_epoch=message.leader_epoch())]
        elif offsets is None:
            offsets = [p for p in self.position(self.assignment()) if p.offset >= 0]
        encoded = [self._with_internal(p) for p in offsets]
        return super().commit(offsets=encoded, asynchronous=asynchronous)

    def _with_internal(self, partition: confluent_kafka.TopicPartition) -> confluent_kafka.TopicPartition:
        tp = _key(partition)
        epoch = partition.leader_epoch if partition.leader_epoch is not None else self._leader_epochs.get(tp)
        internal = self._guard.internal_metadata(tp, epoch)
        extra = {"leader_epoch": internal.leader_epoch} if internal.leader_epoch >= 0 else {}
        return confluent_kafka.TopicPartition(tp.topic, tp.partition, partition.offset,
                                              metadata=encode(partition.metadata, internal), **extra)

    def committed(self, partitions: list[confluent_kafka.TopicPartition], timeout: float | None = None
                  ) -> list[confluent_kafka.TopicPartition]:
        """The committed offsets, with the user's metadata only (read by OffsetFetch, see the module)."""
        keys = [_key(p) for p in partitions]
        got = self._offsets.fetch(self._group, keys, timeout=30.0 if timeout is None or timeout < 0 else timeout)
        result = []
        for tp in keys:
            entry = got[tp]
            user, _ = split(tp, entry.metadata)
            extra: dict[str, Any] = {"metadata": user} if user else {}
            if entry.leader_epoch >= 0:
                extra["leader_epoch"] = entry.leader_epoch
            result.append(confluent_kafka.TopicPartition(
                tp.topic, tp.partition, entry.offset if entry.offset >= 0 else OFFSET_INVALID, **extra))
        return result

    def committed_internal_metadata(self, partitions: Iterable[TopicPartition]) -> dict[TopicPartition,
                                                                                        InternalMetadata | None]:
        """What the group's commits say about each partition's epochs (None: committed without them)."""
        keys = [TopicPartition(*p) if isinstance(p, tuple) else _key(p) for p in partitions]
        return {tp: split(tp, entry.metadata)[1] for tp, entry in self._offsets.fetch(self._group, keys).items()}

    def close(self, *args: Any, **kwargs: Any) -> None:
        try:
            super().close(*args, **kwargs)
        finally:
            self._guard.metadata.close()
            self._offsets.close()


def _deadline(timeout: float | None) -> float | None:
    return None if timeout is None or timeout < 0 else time.monotonic() + timeout


def _passed(deadline: float | None) -> bool:
    return deadline is not None and time.monotonic() >= deadline
