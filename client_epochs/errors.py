"""Errors the epoch-aware consumers raise beyond the metadata client's own.

Kept apart so that both wrappers (confluent-kafka, kafka-python) and the shared guard raise the
same classes, and users catch one type whichever client they wrap.
"""

from __future__ import annotations

from collections.abc import Mapping

from client_epochs.model import Epochs, TopicPartition
from quorum.wire.internal_metadata import InternalMetadata


class TopicRecreatedError(RuntimeError):
    """A topic was deleted and created again under the same name after the offsets were committed.

    Its offsets belong to the old topic: a raw client goes on from them (skipping the new topic's
    first messages, or resetting with auto.offset.reset), which silently loses or repeats data.
    The wrappers raise this instead, unless built with `on_topic_recreated="earliest"`/`"latest"`.
    """

    def __init__(self, partitions: Mapping[TopicPartition, tuple[InternalMetadata, Epochs]]) -> None:
        self.partitions = dict(partitions)
        details = "; ".join(
            f"{tp}: committed under topic_epoch {committed.topic_epoch}, the topic is now at topic_epoch "
            f"{now.topic_epoch} with topic id {now.topic_id}"
            for tp, (committed, now) in sorted(self.partitions.items()))
        super().__init__(f"topic deleted and recreated since its offsets were committed: {details}")
