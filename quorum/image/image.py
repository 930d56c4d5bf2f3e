"""The metadata image: an immutable picture of brokers and topics that Metadata responses come from.

Later the image is built by replaying the metadata log; until then a node can serve a fixed one,
so that the wire layer and real clients are exercised end to end from the first day.
"""

from __future__ import annotations

import base64
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field


@dataclass(frozen=True, slots=True)
class BrokerInfo:
    node_id: int
    host: str
    port: int
    rack: str | None = None


@dataclass(frozen=True, slots=True)
class PartitionInfo:
    partition: int
    leader: int
    leader_epoch: int
    replicas: tuple[int, ...]
    isr: tuple[int, ...]
    offline_replicas: tuple[int, ...] = ()


@dataclass(frozen=True, slots=True)
class TopicInfo:
    name: str
    topic_id: uuid.UUID
    partitions: tuple[PartitionInfo, ...]
    topic_epoch: int = -1
    is_internal: bool = False


@dataclass(frozen=True, slots=True)
class MetadataImage:
    cluster_id: str
    controller_id: int
    brokers: Mapping[int, BrokerInfo] = field(default_factory=dict)
    topics: Mapping[str, TopicInfo] = field(default_factory=dict)
    encoded: dict[tuple[str, int], bytes] = field(default_factory=dict, compare=False, repr=False)
    """Memo of wire encodings of this image's topics, by (topic name, Metadata version): see broker.metadata."""

    def topic_by_id(self, topic_id: uuid.UUID) -> TopicInfo | None:
        return next((topic for topic in self.topics.values() if topic.topic_id == topic_id), None)


def new_cluster_id() -> str:
    """A cluster id as Kafka makes them: a random UUID in URL-safe base64 without padding."""
    return base64.urlsafe_b64encode(uuid.uuid4().bytes).decode("ascii").rstrip("=")


def single_node_image(node_id: int, host: str, port: int, topics: Mapping[str, int],
                      cluster_id: str | None = None) -> MetadataImage:
    """One broker leading every partition of the given topics (name -> partition count)."""
    infos = {}
    for epoch, (name, count) in enumerate(sorted(topics.items()), start=1):
        partitions = tuple(PartitionInfo(p, node_id, 0, (node_id,), (node_id,)) for p in range(count))
        infos[name] = TopicInfo(name, uuid.uuid4(), partitions, topic_epoch=epoch)
    return MetadataImage(
        cluster_id=cluster_id or new_cluster_id(),
        controller_id=node_id,
        brokers={node_id: BrokerInfo(node_id, host, port)},
        topics=infos,
    )
