"""What the controller reads of the metadata: a small read-only Protocol over the metadata image.

The controller never keeps its own copy of topics, partitions, registrations or configs: every
method takes the view it must decide against. The active controller passes its *pending* view,
the committed image with its own not-yet-committed records applied on top (KIP-631: the active
controller "applies them to its in-memory state at once"), so that two requests in a row see
each other's effects before either is committed.

`quorum.image.image.MetadataImage` satisfies this Protocol; tests use small dataclasses. Only the
attributes named here are read.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping, Sequence
from typing import Protocol


class PartitionView(Protocol):
    """One partition as the image holds it."""

    @property
    def partition(self) -> int: ...

    @property
    def leader(self) -> int: ...

    @property
    def leader_epoch(self) -> int: ...

    @property
    def replicas(self) -> Sequence[int]: ...

    @property
    def isr(self) -> Sequence[int]: ...

    @property
    def partition_epoch(self) -> int: ...

    @property
    def leader_recovery_state(self) -> int:
        """0 RECOVERED, 1 RECOVERING (KIP-704: the leader was elected uncleanly and has not said it recovered)."""
        ...

    @property
    def adding_replicas(self) -> Sequence[int]:
        """Replicas a reassignment in progress is adding (KIP-455); empty otherwise."""
        ...

    @property
    def removing_replicas(self) -> Sequence[int]:
        """Replicas a reassignment in progress is removing."""
        ...


class TopicView(Protocol):
    """One topic: its partitions and its KIP-232 topic_epoch."""

    @property
    def name(self) -> str: ...

    @property
    def topic_id(self) -> uuid.UUID: ...

    @property
    def partitions(self) -> Sequence[PartitionView]: ...

    @property
    def topic_epoch(self) -> int: ...


class RegistrationView(Protocol):
    """A broker registration (RegisterBrokerRecord and the Fence/Unfence records after it).

    `broker_epoch` is the offset of the broker's RegisterBrokerRecord (the controller makes it so),
    which is also the offset a broker must have replayed before it may be unfenced.
    """

    @property
    def broker_id(self) -> int: ...

    @property
    def incarnation_id(self) -> uuid.UUID: ...

    @property
    def broker_epoch(self) -> int: ...

    @property
    def fenced(self) -> bool: ...

    @property
    def in_controlled_shutdown(self) -> bool: ...


class ControllerView(Protocol):
    """The metadata the controller decides against.

    `topic_epoch` is the cluster-wide KIP-232 counter: the highest TopicEpoch written so far (by
    a TopicRecord or a RemoveTopicRecord), -1 when none was. `configs` maps (ConfigRecord
    resource type, resource name) to that resource's keys and values.
    """

    @property
    def topics(self) -> Mapping[str, TopicView]: ...

    @property
    def registrations(self) -> Mapping[int, RegistrationView]: ...

    @property
    def topic_epoch(self) -> int: ...

    @property
    def configs(self) -> Mapping[tuple[int, str], Mapping[str, str]]: ...

    @property
    def next_producer_id(self) -> int:
        """KIP-730: where the next block of producer ids starts; -1 before the first block."""
        ...

    def topic_by_id(self, topic_id: uuid.UUID) -> TopicView | None: ...


__all__ = ["ControllerView", "PartitionView", "RegistrationView", "TopicView"]
