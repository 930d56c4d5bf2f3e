"""The values the SDK's epoch logic works on: what a Metadata response says about each partition.

They are plain frozen data, decoupled from the wire classes, so that the epoch rule
(`client_epochs.epoch_cache`) can be tested and reasoned about without a broker, and so that the
same rule serves Metadata responses, committed offsets (OffsetFetch) and externally stored offsets.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import NamedTuple

NO_EPOCH = -1
"""An epoch nobody gave us: an old client, broker or committed offset (KIP-232: keep today's behaviour)."""
NO_LEADER = -1
"""Kafka's leader id for a partition without an available leader."""
ZERO_UUID = uuid.UUID(int=0)
"""Kafka's "no topic id" (Metadata below v10, or a topic a broker does not know)."""


class TopicPartition(NamedTuple):
    """A partition of a topic; a NamedTuple so that it sorts and hashes as (topic, partition)."""

    topic: str
    partition: int

    def __str__(self) -> str:
        return f"{self.topic}-{self.partition}"


@dataclass(frozen=True, slots=True)
class Epochs:
    """The KIP-232 position of a partition's metadata: (topic_epoch, leader_epoch), plus the topic id.

    The topic id is not part of KIP-232's order; it is the fallback that tells a recreated topic
    apart when there is no topic_epoch (an Apache Kafka cluster). None means unknown.
    """

    topic_epoch: int = NO_EPOCH
    leader_epoch: int = NO_EPOCH
    topic_id: uuid.UUID | None = None


@dataclass(frozen=True, slots=True)
class PartitionMetadata:
    """One partition as a Metadata response gave it."""

    leader_id: int
    leader_epoch: int
    topic_id: uuid.UUID | None
    topic_epoch: int
    replicas: tuple[int, ...] = ()
    isr: tuple[int, ...] = ()
    error_code: int = 0

    @property
    def epochs(self) -> Epochs:
        return Epochs(self.topic_epoch, self.leader_epoch, self.topic_id)


@dataclass(frozen=True, slots=True)
class BrokerMetadata:
    """A broker a Metadata response lists, where the client can reach it."""

    node_id: int
    host: str
    port: int
    rack: str | None = None

    @property
    def address(self) -> str:
        return f"{self.host}:{self.port}"


@dataclass(frozen=True, slots=True)
class ClusterMetadata:
    """A whole Metadata response, as the SDK reads it.

    `answered_by` names the broker that sent it ("host:port"), so that a refused (outdated)
    response can be reported with the broker responsible; `version` is the Metadata version used
    (below v9 there is no topic_epoch, below v10 no topic id). `topic_errors` holds the topics the
    broker answered with an error code (UNKNOWN_TOPIC_OR_PARTITION, ...), which have no partitions.
    """

    answered_by: str
    version: int
    cluster_id: str | None
    controller_id: int
    brokers: Mapping[int, BrokerMetadata] = field(default_factory=dict)
    partitions: Mapping[TopicPartition, PartitionMetadata] = field(default_factory=dict)
    topic_errors: Mapping[str, int] = field(default_factory=dict)

    def partitions_of(self, topic: str) -> dict[TopicPartition, PartitionMetadata]:
        return {tp: meta for tp, meta in self.partitions.items() if tp.topic == topic}

    def leader(self, tp: TopicPartition) -> BrokerMetadata | None:
        """The leader's broker entry, None when the partition is unknown or has no listed leader."""
        meta = self.partitions.get(tp)
        return None if meta is None else self.brokers.get(meta.leader_id)
