"""Where a group's coordinator is: the leader of the group's `__consumer_offsets` partition.

FindCoordinator is answered from the metadata image, as Kafka answers it from its metadata cache:
a partition without a live leader (or a topic not created yet) means COORDINATOR_NOT_AVAILABLE,
which clients retry.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from quorum.broker.groups.config import OFFSETS_TOPIC
from quorum.image.image import MetadataImage


@dataclass(frozen=True, slots=True)
class CoordinatorNode:
    node_id: int
    host: str
    port: int


CoordinatorLocator = Callable[[int], CoordinatorNode | None]
"""`__consumer_offsets` partition -> the broker leading it, or None when there is none (yet)."""


def coordinator_from_image(image: MetadataImage, partition: int) -> CoordinatorNode | None:
    """The listed broker leading `partition` of `__consumer_offsets` in `image`."""
    topic = image.topics.get(OFFSETS_TOPIC)
    if topic is None or not 0 <= partition < len(topic.partitions):
        return None
    broker = image.brokers.get(topic.partitions[partition].leader)
    if broker is None:
        return None
    return CoordinatorNode(broker.node_id, broker.host, broker.port)


def image_locator(current_image: Callable[[], MetadataImage]) -> CoordinatorLocator:
    """A locator over whatever image the broker serves at the time of each request."""
    return lambda partition: coordinator_from_image(current_image(), partition)
