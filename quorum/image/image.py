"""The metadata image: an immutable picture of brokers, topics, configs and features.

Metadata responses come from it (`quorum.broker.metadata`). A node builds it by replaying the
metadata log (`quorum.image.delta`, `quorum.image.image_state`); `single_node_image` builds a
fixed one for `quorum standalone`, so the wire layer and real clients are exercised without a
quorum.

Every object here is frozen and every mapping is treated as read-only once the image holds it,
so that the next image can share whatever did not change (KIP-631's image plus deltas) and the
`encoded` memo of an unchanged topic stays valid from one image to the next.
"""

from __future__ import annotations

import base64
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field

from quorum.security.acl import AclBinding
from quorum.security.scram import ScramCredential

NO_LEADER = -1
"""Kafka's leader id for a partition without a leader."""


@dataclass(frozen=True, slots=True)
class BrokerInfo:
    """A broker as a Metadata response lists it: the endpoint of one listener."""

    node_id: int
    host: str
    port: int
    rack: str | None = None


@dataclass(frozen=True, slots=True)
class Endpoint:
    """One listener a broker registered (RegisterBrokerRecord.EndPoints)."""

    name: str
    host: str
    port: int
    security_protocol: int = 0


@dataclass(frozen=True, slots=True)
class BrokerRegistration:
    """A broker's registration as the metadata log holds it (RegisterBrokerRecord, then fenced or
    unfenced by Fence/UnfenceBrokerRecords of the same broker epoch).

    `supported_features` is (name, min level, max level) per feature the broker supports: kept so
    that a snapshot's RegisterBrokerRecord says everything the log's did.
    """

    broker_id: int
    incarnation_id: uuid.UUID
    broker_epoch: int
    endpoints: tuple[Endpoint, ...] = ()
    rack: str | None = None
    fenced: bool = True
    in_controlled_shutdown: bool = False
    supported_features: tuple[tuple[str, int, int], ...] = ()

    def endpoint(self, listener: str | None = None) -> Endpoint | None:
        """The endpoint of `listener`, or the first endpoint when None; None when there is none."""
        if listener is None:
            return self.endpoints[0] if self.endpoints else None
        return next((endpoint for endpoint in self.endpoints if endpoint.name == listener), None)


@dataclass(frozen=True, slots=True)
class PartitionInfo:
    """One partition. `offline_replicas` are the replicas whose broker a client cannot use: not
    registered, fenced, or without the image's listener (Kafka's KRaftMetadataCache)."""

    partition: int
    leader: int
    leader_epoch: int
    replicas: tuple[int, ...]
    isr: tuple[int, ...]
    offline_replicas: tuple[int, ...] = ()
    partition_epoch: int = 0
    removing_replicas: tuple[int, ...] = ()
    adding_replicas: tuple[int, ...] = ()
    leader_recovery_state: int = 0


@dataclass(frozen=True, slots=True)
class TopicInfo:
    """One topic; `partitions` are sorted by partition index."""

    name: str
    topic_id: uuid.UUID
    partitions: tuple[PartitionInfo, ...]
    topic_epoch: int = -1
    is_internal: bool = False
    _broker_ids: frozenset[int] | None = field(default=None, init=False, compare=False, repr=False)

    def broker_ids(self) -> frozenset[int]:
        """Every broker the topic's partitions name (replicas and leaders); computed once, when a
        broker's availability changes and the next image must find the topics whose offline
        replicas and Metadata entries change with it."""
        found = self._broker_ids
        if found is None:
            found = frozenset().union(*(partition.replicas for partition in self.partitions),
                                      (partition.leader for partition in self.partitions))  # fmt: skip
            object.__setattr__(self, "_broker_ids", found)
        return found


@dataclass(frozen=True, slots=True)
class MetadataImage:
    """The metadata as of log offset `offset` (-1: nothing replayed, or a hand-made image).

    `brokers` are the brokers a Metadata response lists: the unfenced registered ones, each with
    the endpoint of `listener` (its first endpoint when `listener` is None), as Kafka answers on
    the listener the client connected to. `registrations` holds every registered broker, fenced
    or not, with all of its endpoints. `topic_epoch` is the cluster-wide KIP-232 counter: the
    highest topic epoch any TopicRecord or RemoveTopicRecord carried. `configs` maps (resource
    type, resource name) to that resource's configs; `features` maps a feature name to its
    finalized level; `acls` maps an ACL's id to its binding (AccessControlEntryRecords); `scram`
    maps (user, mechanism name) to that user's SCRAM credential (UserScramCredentialRecords), what
    SASL/SCRAM on this node's listeners authenticates against.

    `topics_by_id` is derived from `topics` when not given; the delta that builds the next image
    passes it, so that no image pays for a scan of its topics.
    """

    cluster_id: str
    controller_id: int
    brokers: Mapping[int, BrokerInfo] = field(default_factory=dict)
    topics: Mapping[str, TopicInfo] = field(default_factory=dict)
    encoded: dict[tuple[str, int], bytes] = field(default_factory=dict, compare=False, repr=False)
    """Memo of wire encodings of this image's topics, by (topic name, Metadata version): see broker.metadata."""
    offset: int = -1
    topic_epoch: int = -1
    registrations: Mapping[int, BrokerRegistration] = field(default_factory=dict)
    configs: Mapping[tuple[int, str], Mapping[str, str]] = field(default_factory=dict)
    features: Mapping[str, int] = field(default_factory=dict)
    next_producer_id: int = -1
    """KIP-730: where the controller's next block of producer ids starts (the last ProducerIdsRecord's
    NextProducerId); -1 while no block was handed out, as Kafka's ProducerIdsImage.EMPTY."""
    listener: str | None = None
    acls: Mapping[uuid.UUID, AclBinding] = field(default_factory=dict)
    scram: Mapping[tuple[str, str], ScramCredential] = field(default_factory=dict, repr=False)
    topics_by_id: Mapping[uuid.UUID, TopicInfo] = field(default=None, compare=False, repr=False)  # type: ignore[assignment]

    def __post_init__(self) -> None:
        if self.topics_by_id is None:
            object.__setattr__(self, "topics_by_id", {topic.topic_id: topic for topic in self.topics.values()})

    def topic_by_id(self, topic_id: uuid.UUID) -> TopicInfo | None:
        return self.topics_by_id.get(topic_id)


def empty_image(cluster_id: str = "", controller_id: int = -1, listener: str | None = None) -> MetadataImage:
    """The image before any record: what replay starts from."""
    return MetadataImage(cluster_id=cluster_id, controller_id=controller_id, listener=listener)


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
        topic_epoch=len(infos) if infos else -1,
    )
