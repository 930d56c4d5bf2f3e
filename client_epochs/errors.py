"""Errors the epoch-aware consumers raise beyond the metadata client's own.

Kept apart so that both wrappers (confluent-kafka, kafka-python) and the shared guard raise the
same classes, and users catch one type whichever client they wrap.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping

from client_epochs.model import Epochs, TopicPartition
from quorum.wire.internal_metadata import InternalMetadata, topic_id_text


class TopicRecreatedError(RuntimeError):
    """A topic was deleted and created again under the same name after the offsets were committed.

    Its offsets belong to the old topic: a raw client goes on from them (skipping the new topic's
    first messages, or resetting with auto.offset.reset), which silently loses or repeats data.
    The wrappers raise this instead, unless built with `on_topic_recreated="earliest"`/`"latest"`.

    `partitions` maps each partition to (the epochs and topic id its offset was read under, what the
    metadata says now); both ids appear in the message as Kafka prints topic ids.
    """

    def __init__(self, partitions: Mapping[TopicPartition, tuple[InternalMetadata, Epochs]]) -> None:
        self.partitions = dict(partitions)
        details = "; ".join(f"{tp}: read under {_described(committed.topic_id, committed.topic_epoch)}, the topic "
                            f"is now {_described(now.topic_id, now.topic_epoch)}"
                            for tp, (committed, now) in sorted(self.partitions.items()))
        super().__init__(f"topic deleted and recreated since its offsets were committed: {details}")


def _described(topic_id: uuid.UUID | None, topic_epoch: int) -> str:
    named = "an unknown topic id" if topic_id is None else f"topic id {topic_id_text(topic_id)}"
    return named if topic_epoch < 0 else f"{named} at topic_epoch {topic_epoch}"


class InvalidOffsetError(RuntimeError):
    """A partition's position cannot be used and auto.offset.reset says not to pick another one
    (librdkafka's `error`, the Java client's and kafka-python's `none`); Kafka's InvalidOffsetException.

    `log_start` and `log_end` are the current leader's log bounds, as the consumer asked them.
    """

    def __init__(self, partition: TopicPartition, position: int | None, log_start: int, log_end: int,
                 message: str) -> None:
        super().__init__(message)
        self.partition = partition
        self.position = position
        self.log_start = log_start
        self.log_end = log_end


class OffsetOutOfRangeError(InvalidOffsetError):
    """The position is outside the current leader's log: its records were deleted, or the log was
    truncated below it. Raised only after the leader confirmed it, never on a stale broker's word."""


class NoOffsetForPartitionError(InvalidOffsetError):
    """The partition has no committed offset to start from (Kafka's NoOffsetForPartitionException)."""

    def __init__(self, partition: TopicPartition, log_start: int, log_end: int, message: str) -> None:
        super().__init__(partition, None, log_start, log_end, message)
