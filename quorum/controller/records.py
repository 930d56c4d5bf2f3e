"""The metadata records the controller writes, built at the versions it writes them.

Each builder returns the record object (kafka-python ApiData of `quorum.wire.metadata_records`);
`encode` frames it. Versions: the lowest version that holds every field the controller fills,
so that a reader of any supported version reads them (PartitionRecord and PartitionChangeRecord
v0: no directories and no ELR; RegisterBrokerRecord v3 when the broker sent log directories,
else v1, the first with InControlledShutdown).

KIP-232: TopicRecord and RemoveTopicRecord carry the cluster-wide topic epoch the change bumped
(tag 10232), so that the counter survives failover and snapshots.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Sequence
from typing import Any

from quorum.wire import metadata_records as mr

NO_LEADER = -1
"""Kafka's LeaderConstants.NO_LEADER: the partition has no leader."""
NO_LEADER_CHANGE = -2
"""Kafka's LeaderConstants.NO_LEADER_CHANGE: PartitionChangeRecord.Leader when the leader is unchanged."""


def encode(record: Any) -> bytes:
    return mr.encode_metadata_record(record)


def register_broker(*, broker_id: int, incarnation_id: uuid.UUID, broker_epoch: int,
                    endpoints: Iterable[tuple[str, str, int, int]], features: Iterable[tuple[str, int, int]],
                    rack: str | None, log_dirs: Sequence[uuid.UUID] = ()) -> Any:
    """A new registration, fenced until the broker catches up (Kafka registers every broker fenced)."""
    endpoint = mr.RegisterBrokerRecord.BrokerEndpoint
    feature = mr.RegisterBrokerRecord.BrokerFeature
    fields: dict[str, Any] = {}
    if log_dirs:
        fields["log_dirs"] = list(log_dirs)
    return mr.RegisterBrokerRecord(
        version=3 if log_dirs else 1, broker_id=broker_id, incarnation_id=incarnation_id, broker_epoch=broker_epoch,
        end_points=[endpoint(name=name, host=host, port=port, security_protocol=protocol)
                    for name, host, port, protocol in endpoints],
        features=[feature(name=name, min_supported_version=low, max_supported_version=high)
                  for name, low, high in features],
        rack=rack, fenced=True, in_controlled_shutdown=False, **fields)


def unregister_broker(broker_id: int, broker_epoch: int) -> Any:
    return mr.UnregisterBrokerRecord(version=0, broker_id=broker_id, broker_epoch=broker_epoch)


def fence_broker(broker_id: int, broker_epoch: int) -> Any:
    return mr.FenceBrokerRecord(version=0, id=broker_id, epoch=broker_epoch)


def unfence_broker(broker_id: int, broker_epoch: int) -> Any:
    return mr.UnfenceBrokerRecord(version=0, id=broker_id, epoch=broker_epoch)


def topic(name: str, topic_id: uuid.UUID, topic_epoch: int) -> Any:
    """A topic's creation, or (same name and id) its new topic_epoch after partitions were added."""
    return mr.TopicRecord(version=0, name=name, topic_id=topic_id, topic_epoch=topic_epoch)


def remove_topic(topic_id: uuid.UUID, topic_epoch: int) -> Any:
    return mr.RemoveTopicRecord(version=0, topic_id=topic_id, topic_epoch=topic_epoch)


def partition(topic_id: uuid.UUID, index: int, replicas: Sequence[int], isr: Sequence[int]) -> Any:
    """A new partition: leader = first ISR member, leader and partition epoch 0 (as Kafka's)."""
    return mr.PartitionRecord(
        version=0, partition_id=index, topic_id=topic_id, replicas=list(replicas), isr=list(isr),
        removing_replicas=[], adding_replicas=[], leader=isr[0] if isr else NO_LEADER, leader_recovery_state=0,
        leader_epoch=0, partition_epoch=0)


def partition_change(topic_id: uuid.UUID, index: int, *, isr: Sequence[int] | None = None,
                     leader: int = NO_LEADER_CHANGE, leader_recovery_state: int = -1,
                     replicas: Sequence[int] | None = None, adding: Sequence[int] | None = None,
                     removing: Sequence[int] | None = None) -> Any:
    """Only what changed: ISR when it changes, Leader when it is set (which bumps the leader epoch),
    LeaderRecoveryState when it changes (-1: unchanged; tagged, so absent from the frame then), and
    a reassignment's Replicas, AddingReplicas and RemovingReplicas when they change (KIP-455)."""
    def listed(brokers: Sequence[int] | None) -> list[int] | None:
        return None if brokers is None else list(brokers)
    return mr.PartitionChangeRecord(version=0, partition_id=index, topic_id=topic_id, isr=listed(isr), leader=leader,
                                    leader_recovery_state=leader_recovery_state, replicas=listed(replicas),
                                    adding_replicas=listed(adding), removing_replicas=listed(removing))


def config(resource_type: int, resource_name: str, name: str, value: str | None) -> Any:
    """A config key set (or removed, when value is None)."""
    return mr.ConfigRecord(version=0, resource_type=resource_type, resource_name=resource_name, name=name,
                           value=value)


def producer_ids(broker_id: int, broker_epoch: int, next_producer_id: int) -> Any:
    """A block of producer ids handed to a broker (KIP-730): the next block starts at `next_producer_id`."""
    return mr.ProducerIdsRecord(version=0, broker_id=broker_id, broker_epoch=broker_epoch,
                                next_producer_id=next_producer_id)


__all__ = [
    "NO_LEADER", "NO_LEADER_CHANGE", "config", "encode", "fence_broker", "partition",
    "partition_change", "producer_ids", "register_broker", "remove_topic", "topic", "unfence_broker",
    "unregister_broker",
]
