"""Small fake views for the controller tests, and a replayer of the controller's records into them.

`replay(view, records)` applies metadata record frames with Kafka's replay rules (the ones the
controller's docstring states for the image), so a test can keep a pending view the way the
node will: the controller's results replayed on top of what came before.
"""

from __future__ import annotations

import dataclasses
import uuid
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from quorum.controller.records import NO_LEADER_CHANGE
from quorum.wire import metadata_records as mr
from quorum.wire.metadata_records import decode_metadata_record
from quorum.wire.protocol import APIS

TOPIC = 2


@dataclass(frozen=True)
class Partition:
    partition: int
    leader: int
    leader_epoch: int
    replicas: tuple[int, ...]
    isr: tuple[int, ...]
    partition_epoch: int = 0
    leader_recovery_state: int = 0
    adding_replicas: tuple[int, ...] = ()
    removing_replicas: tuple[int, ...] = ()


@dataclass(frozen=True)
class Topic:
    name: str
    topic_id: uuid.UUID
    partitions: tuple[Partition, ...]
    topic_epoch: int = -1


@dataclass(frozen=True)
class Registration:
    broker_id: int
    incarnation_id: uuid.UUID
    broker_epoch: int
    fenced: bool = True
    in_controlled_shutdown: bool = False


@dataclass(frozen=True)
class View:
    topics: dict[str, Topic] = field(default_factory=dict)
    registrations: dict[int, Registration] = field(default_factory=dict)
    topic_epoch: int = -1
    configs: dict[tuple[int, str], dict[str, str]] = field(default_factory=dict)

    def topic_by_id(self, topic_id: uuid.UUID) -> Topic | None:
        return next((t for t in self.topics.values() if t.topic_id == topic_id), None)


def incarnation(broker: int) -> uuid.UUID:
    return uuid.UUID(int=1000 + broker)


def brokers(*ids: int, fenced: tuple[int, ...] = (), epoch: int = 10) -> dict[int, Registration]:
    """Registrations of `ids`, unfenced unless listed in `fenced`, each with broker epoch `epoch`."""
    return {b: Registration(b, incarnation(b), epoch, fenced=b in fenced) for b in ids}


def topic(name: str, *partitions: tuple[tuple[int, ...], tuple[int, ...], int], topic_id: uuid.UUID | None = None,
          topic_epoch: int = 1, leader_epoch: int = 5, partition_epoch: int = 7) -> Topic:
    """A topic whose partition i has (replicas, isr, leader)."""
    return Topic(name, topic_id or uuid.uuid5(uuid.NAMESPACE_DNS, name), tuple(
        Partition(i, leader, leader_epoch, tuple(replicas), tuple(isr), partition_epoch)
        for i, (replicas, isr, leader) in enumerate(partitions)), topic_epoch)


def view(*topics: Topic, registrations: dict[int, Registration] | None = None, topic_epoch: int | None = None,
         configs: dict[tuple[int, str], dict[str, str]] | None = None) -> View:
    counter = topic_epoch if topic_epoch is not None else max((t.topic_epoch for t in topics), default=-1)
    return View({t.name: t for t in topics}, registrations or {}, counter, configs or {})


def decoded(records: Iterable[bytes]) -> list[Any]:
    return [decode_metadata_record(value) for value in records]


def of_type(records: Iterable[bytes], kind: type) -> list[Any]:
    return [record for record in decoded(records) if isinstance(record, kind)]


def replay(view: View, records: Iterable[bytes]) -> View:
    """`view` with the records applied (Kafka's replay rules; TopicEpoch as the controller documents)."""
    topics = dict(view.topics)
    registrations = dict(view.registrations)
    configs = {key: dict(values) for key, values in view.configs.items()}
    counter = view.topic_epoch
    by_id = {t.topic_id: t.name for t in topics.values()}
    for record in decoded(records):
        if isinstance(record, mr.RegisterBrokerRecord):
            registrations[record.broker_id] = Registration(record.broker_id, record.incarnation_id,
                                                           record.broker_epoch, record.fenced,
                                                           getattr(record, "in_controlled_shutdown", False))
        elif isinstance(record, mr.UnregisterBrokerRecord):
            registrations.pop(record.broker_id, None)
        elif isinstance(record, (mr.FenceBrokerRecord, mr.UnfenceBrokerRecord)):
            old = registrations[record.id]
            assert old.broker_epoch == record.epoch
            registrations[record.id] = dataclasses.replace(old, fenced=isinstance(record, mr.FenceBrokerRecord))
        elif isinstance(record, mr.TopicRecord):
            counter = max(counter, record.topic_epoch)
            name = by_id.get(record.topic_id)
            if name is None:
                topics[record.name] = Topic(record.name, record.topic_id, (), record.topic_epoch)
                by_id[record.topic_id] = record.name
            else:
                topics[name] = dataclasses.replace(topics[name], topic_epoch=record.topic_epoch)
        elif isinstance(record, mr.PartitionRecord):
            name = by_id[record.topic_id]
            part = Partition(record.partition_id, record.leader, record.leader_epoch, tuple(record.replicas),
                             tuple(record.isr), record.partition_epoch, max(record.leader_recovery_state, 0),
                             tuple(record.adding_replicas or ()), tuple(record.removing_replicas or ()))
            old = [p for p in topics[name].partitions if p.partition != record.partition_id]
            topics[name] = dataclasses.replace(
                topics[name], partitions=tuple(sorted([*old, part], key=lambda p: p.partition)))
        elif isinstance(record, mr.PartitionChangeRecord):
            name = by_id[record.topic_id]
            parts = []
            for p in topics[name].partitions:
                if p.partition == record.partition_id:
                    bumped = record.leader != NO_LEADER_CHANGE or record.isr is not None  # the image's rule
                    recovery = record.leader_recovery_state
                    def changed(new: list[int] | None, old: tuple[int, ...]) -> tuple[int, ...]:
                        return old if new is None else tuple(new)
                    p = Partition(p.partition, p.leader if record.leader == NO_LEADER_CHANGE else record.leader,
                                  p.leader_epoch + 1 if bumped else p.leader_epoch,
                                  changed(record.replicas, p.replicas), changed(record.isr, p.isr),
                                  p.partition_epoch + 1, p.leader_recovery_state if recovery == -1 else recovery,
                                  changed(record.adding_replicas, p.adding_replicas),
                                  changed(record.removing_replicas, p.removing_replicas))
                parts.append(p)
            topics[name] = dataclasses.replace(topics[name], partitions=tuple(parts))
        elif isinstance(record, mr.ConfigRecord):
            key = (record.resource_type, record.resource_name)
            if record.value is None:
                configs.get(key, {}).pop(record.name, None)
            else:
                configs.setdefault(key, {})[record.name] = record.value
        elif isinstance(record, mr.RemoveTopicRecord):
            counter = max(counter, record.topic_epoch)
            name = by_id.pop(record.topic_id)
            del topics[name]
            configs.pop((TOPIC, name), None)
        else:
            raise AssertionError(f"unexpected record {record}")
    return View(topics, registrations, counter, {k: v for k, v in configs.items() if v})


# -- requests ---------------------------------------------------------------------------------

def registration_request(broker: int, *, cluster_id: str = "cluster", incarnation_id: uuid.UUID | None = None,
                         rack: str | None = None) -> Any:
    schema = APIS[62].request
    return schema(broker_id=broker, cluster_id=cluster_id, incarnation_id=incarnation_id or incarnation(broker),
                  listeners=[schema.Listener(name="PLAINTEXT", host=f"b{broker}", port=9092, security_protocol=0)],
                  features=[schema.Feature(name="metadata.version", min_supported_version=1,
                                           max_supported_version=21)],
                  rack=rack, is_migrating_zk_broker=False, log_dirs=[], previous_broker_epoch=-1)


def heartbeat_request(broker: int, epoch: int, offset: int, *, want_fence: bool = False,
                      want_shut_down: bool = False) -> Any:
    return APIS[63].request(broker_id=broker, broker_epoch=epoch, current_metadata_offset=offset,
                            want_fence=want_fence, want_shut_down=want_shut_down)


def create_topics_request(*topics: tuple, validate_only: bool = False) -> Any:
    """Each topic: (name, num_partitions, replication_factor[, assignments {index: brokers}[, configs]])."""
    schema = APIS[19].request
    item = schema.CreatableTopic
    built = []
    for name, count, factor, *rest in topics:
        assignments = rest[0] if rest else {}
        configs = rest[1] if len(rest) > 1 else {}
        built.append(item(
            name=name, num_partitions=count, replication_factor=factor,
            assignments=[item.CreatableReplicaAssignment(partition_index=i, broker_ids=list(b))
                         for i, b in assignments.items()],
            configs=[item.CreatableTopicConfig(name=k, value=v) for k, v in configs.items()]))
    return schema(topics=built, timeout_ms=1000, validate_only=validate_only)


def delete_topics_request(*, names: Iterable[str] = (), ids: Iterable[uuid.UUID] = (), version: int = 6) -> Any:
    schema = APIS[20].request
    if version < 6:
        return schema(topic_names=list(names), timeout_ms=1000)
    state = schema.DeleteTopicState
    return schema(topics=[state(name=n, topic_id=uuid.UUID(int=0)) for n in names]
                  + [state(name=None, topic_id=i) for i in ids], timeout_ms=1000)


def create_partitions_request(*topics: tuple, validate_only: bool = False) -> Any:
    """Each topic: (name, count[, assignments list or None])."""
    schema = APIS[37].request
    item = schema.CreatePartitionsTopic
    built = []
    for name, count, *rest in topics:
        assignments = rest[0] if rest else None
        built.append(item(name=name, count=count, assignments=None if assignments is None else
                          [item.CreatePartitionsAssignment(broker_ids=list(b)) for b in assignments]))
    return schema(topics=built, timeout_ms=1000, validate_only=validate_only)


def alter_configs_request(*resources: tuple, validate_only: bool = False) -> Any:
    """Each resource: (type, name, [(key, op, value), ...])."""
    schema = APIS[44].request
    res = schema.AlterConfigsResource
    return schema(resources=[res(resource_type=t, resource_name=n, configs=[
        res.AlterableConfig(name=k, config_operation=op, value=v) for k, op, v in ops]) for t, n, ops in resources],
        validate_only=validate_only)


def legacy_alter_configs_request(*resources: tuple, validate_only: bool = False) -> Any:
    """AlterConfigs (API 33); each resource: (type, name, [(key, value), ...])."""
    schema = APIS[33].request
    res = schema.AlterConfigsResource
    return schema(resources=[res(resource_type=t, resource_name=n, configs=[
        res.AlterableConfig(name=k, value=v) for k, v in configs]) for t, n, configs in resources],
        validate_only=validate_only)


def describe_configs_request(*resources: tuple, include_synonyms: bool = False) -> Any:
    """Each resource: (type, name[, keys or None])."""
    schema = APIS[32].request
    res = schema.DescribeConfigsResource
    return schema(resources=[res(resource_type=t, resource_name=n, configuration_keys=rest[0] if rest else None)
                             for t, n, *rest in resources],
                  include_synonyms=include_synonyms, include_documentation=False)


def alter_partition_request(broker: int, epoch: int, topic_id: uuid.UUID,
                            *partitions: tuple[int, int, int, list[int]], with_epochs: dict[int, int] | None = None,
                            recovery: int = 0) -> Any:
    """Each partition: (index, leader_epoch, partition_epoch, new_isr). v3 (with epochs) when `with_epochs`."""
    schema = APIS[56].request
    data = schema.TopicData.PartitionData
    parts = []
    for index, leader_epoch, partition_epoch, isr in partitions:
        if with_epochs is None:
            parts.append(data(partition_index=index, leader_epoch=leader_epoch, new_isr=list(isr),
                              leader_recovery_state=recovery, partition_epoch=partition_epoch))
        else:
            parts.append(data(partition_index=index, leader_epoch=leader_epoch, leader_recovery_state=recovery,
                              partition_epoch=partition_epoch,
                              new_isr_with_epochs=[data.BrokerState(broker_id=b, broker_epoch=with_epochs.get(b, -1))
                                                   for b in isr]))
    return schema(broker_id=broker, broker_epoch=epoch, topics=[schema.TopicData(topic_id=topic_id, partitions=parts)])
