"""KIP-631 deltas: the changes a run of metadata records makes to an image, and the next image.

`MetadataDelta(image)` replays records one at a time into mutable overlays over `image`, and
`apply()` builds the next immutable `MetadataImage` once, however many records went in: a
snapshot of a million records builds one image, not a million. What did not change is shared:
an untouched topic keeps its `TopicInfo` object and its wire encodings in the `encoded` memo,
so Metadata stays fast across images.

The semantics are Apache Kafka's (`MetadataDelta.replay` and the images of
`org.apache.kafka.image`), made total: a record that cannot apply (a partition of an unknown
topic, a fence of a broker epoch that is not the registered one) is ignored and `replay`
returns False, where Kafka's broker would raise; the same log always gives the same image.

* RegisterBroker replaces the broker's registration, fenced as the record says.
  Fence/UnfenceBroker flip `fenced` and UnregisterBroker removes the registration, each only
  when its epoch is the registered broker epoch (Kafka's `getBrokerOrThrow`).
* Topic creates a topic. A TopicRecord for a live topic id raises the topic's epoch when its
  TopicEpoch is higher (how the controller records a partition expansion, KIP-232) and is
  otherwise ignored; a TopicRecord for a new id whose name a live topic holds is ignored
  (the controller never writes one; keeping the first topic keeps names unique).
* Partition adds or replaces a partition of a live topic.
* PartitionChange applies the fields it sets (Leader -2 = unchanged, -1 = no leader; a null
  list or a LeaderRecoveryState of -1 = unchanged) and bumps `partition_epoch`, as Kafka does.
  `leader_epoch` is bumped when the record sets the Leader *or* the Isr: the project's design
  (issue 5, KIP-631's IsrChangeRecord: "an epoch that gets incremented each time we change the
  ISR") where Kafka 3.x bumps it on a leader change only. KIP-232 clients compare
  (topic_epoch, leader_epoch), so an ISR change must be visible in it.
* RemoveTopic removes the topic, its partitions and its topic configs (resource type 2).
* Config sets a config, or deletes it when Value is null; a resource without configs is gone.
* FeatureLevel sets a feature's finalized level; level 0 removes the feature (Kafka).
* NoOp changes nothing.
* ProducerIds (KIP-730) sets `next_producer_id` when its NextProducerId is higher; a lower or
  equal one is ignored, so blocks already handed out are never handed out again.

The KIP-232 counter `topic_epoch` is the highest TopicEpoch of every TopicRecord and
RemoveTopicRecord replayed (ignored ones too: the counter never goes back). A RemoveTopicRecord
for an id that is not live only raises it; a snapshot uses that, with the zero id, to carry a
counter that no live topic holds (`quorum.image.image_state`).

Order: mappings of the next image are in the order a record-by-record replay would have put
them in (an entity created is appended; one changed keeps its place; one deleted and created
again goes to the end), however the records were batched into deltas. Snapshots are written in
that order, so replicas at the same offset write identical snapshots.

Bytes that are not a metadata record make `replay` raise MetadataRecordError before anything
changes; the state machine decides what to do with them (`ImageState` skips them).
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Callable, Hashable, Iterable, Mapping
from dataclasses import replace
from typing import Any, Generic, Protocol, TypeVar

from kafka.protocol.api_data import ApiData

from quorum.image.image import (
    BrokerInfo,
    BrokerRegistration,
    Endpoint,
    MetadataImage,
    PartitionInfo,
    TopicInfo,
)
from quorum.image.partition_records import PartitionRecords, decode_partition
from quorum.security.acl import AclBinding
from quorum.security.acl_records import binding_of
from quorum.security.scram import ScramCredential
from quorum.security.scram_records import credential_of, scram_key
from quorum.wire.metadata_records import (
    METADATA_RECORD_TYPES,
    PLAIN_PARTITION_V0,
    ZERO_UUID,
    MetadataRecordError,
    MetadataRecordType,
    decode_metadata_record,
    decode_metadata_record_fast,
    decode_plain_topic_v0,
)

logger = logging.getLogger(__name__)

TOPIC_RESOURCE = 2
"""Kafka's ConfigResource.Type.TOPIC: the configs RemoveTopic deletes with the topic."""

NO_LEADER_CHANGE = -2
"""PartitionChangeRecord.Leader when the leader is unchanged."""

INTERNAL_TOPICS = frozenset({"__consumer_offsets", "__transaction_state"})
"""Kafka's Topic.isInternal names: Metadata flags them is_internal."""

PRODUCER_IDS = "producer ids"
"""The ChangeObserver key of the KIP-730 counter, `(PRODUCER_IDS,)`: one entity, one snapshot record."""

BROKER, TOPIC, PARTITION, CONFIG, FEATURE, ACL = "broker", "topic", "partition", "config", "feature", "acl"
"""First element of the entity keys a ChangeObserver is given: (BROKER, id), (TOPIC, topic id),
(PARTITION, topic id, index), (CONFIG, resource type, resource name, name), (FEATURE, name),
(ACL, acl id)."""


class ChangeObserver(Protocol):
    """Told, as records replay, about entities that existed and changed (for KIP-630's
    changed-records count, `quorum.image.image_state`); creations are not reported."""

    def modified(self, key: Hashable) -> None:
        """The entity's record changed in place (fenced, a partition changed, an epoch raised)."""

    def dropped(self, key: Hashable) -> None:
        """The entity's record was replaced by a new one (a creating record for an existing key)
        or deleted."""


# ---------------------------------------------------------------------------------------------
# Decoding.


_NOT_CHANGED: Any = object()
_plain_partition = PLAIN_PARTITION_V0.fullmatch


def _uuid(value: uuid.UUID | None) -> uuid.UUID:
    """The engine reads a zero uuid as None."""
    return ZERO_UUID if value is None else value


# ---------------------------------------------------------------------------------------------
# Overlays.

K = TypeVar("K")
V = TypeVar("V")


class _Overlay(Generic[K, V]):
    """Changes to one mapping of the image (None: deleted), merged in record-by-record order."""

    __slots__ = ("base", "changes", "moved")

    def __init__(self, base: Mapping[K, V]) -> None:
        self.base = base
        self.changes: dict[K, V | None] = {}
        self.moved: set[K] = set()  # created while absent: appended at the end of the mapping

    def get(self, key: K) -> V | None:
        changes = self.changes
        if key in changes:
            return changes[key]
        return self.base.get(key)

    def put(self, key: K, value: V) -> None:
        if self.get(key) is None:
            self.changes.pop(key, None)
            self.moved.add(key)
        self.changes[key] = value

    def delete(self, key: K) -> None:
        self.changes[key] = None
        self.moved.discard(key)

    def merged(self) -> Mapping[K, V]:
        if not self.changes:
            return self.base
        result = dict(self.base)
        for key, value in self.changes.items():
            if value is None:
                result.pop(key, None)
            else:
                if key in self.moved:
                    result.pop(key, None)
                result[key] = value
        return result


class _TopicDraft:
    """A topic being changed: `base` is the image's TopicInfo (None for a topic created in this
    delta, whose `partitions` are then all of them; else they are the changed ones only).

    `raw` is the open run of a topic created in this delta (`quorum.image.partition_records`):
    the plain PartitionRecord v0 values that came for it, in ascending partition order, not
    decoded. Anything else that reads or writes the topic's partitions decodes the run into
    `partitions` first and closes it (`raw` None), so the records apply in log order.
    """

    __slots__ = ("topic_id", "name", "topic_epoch", "base", "partitions", "raw", "raw_id", "raw_last")

    def __init__(self, topic_id: uuid.UUID, name: str, topic_epoch: int, base: TopicInfo | None) -> None:
        self.topic_id = topic_id
        self.name = name
        self.topic_epoch = topic_epoch
        self.base = base
        self.partitions: dict[int, PartitionInfo] = {}
        self.raw: list[bytes] | None = None
        self.raw_id = b""
        self.raw_last = b""  # the PartitionId bytes of the last value in `raw`

    def open_run(self) -> None:
        self.raw = []
        self.raw_id = self.topic_id.bytes

    def takes(self, value: bytes) -> bool:
        """Keep `value` undecoded when it is the next plain PartitionRecord v0 of the open run: its
        TopicId (bytes 7-22) this topic's, its PartitionId (bytes 3-6, big-endian) above the last one."""
        raw = self.raw
        if raw is None or value[7:23] != self.raw_id:
            return False
        index = value[3:7]
        if index <= self.raw_last or index[0] >= 0x80 or _plain_partition(value) is None:  # >= 0x80: negative
            return False
        raw.append(value)
        self.raw_last = index
        return True

    def _close_run(self) -> None:
        raw = self.raw
        self.raw = None
        if raw:
            for value in raw:
                partition = decode_partition(value, None)  # settled in `build`, as replayed ones are
                self.partitions[partition.partition] = partition

    def put(self, partition: PartitionInfo) -> None:
        if self.raw is not None:
            self._close_run()
        self.partitions[partition.partition] = partition

    def partition(self, index: int) -> PartitionInfo | None:
        if self.raw is not None:
            self._close_run()
        found = self.partitions.get(index)
        if found is None and self.base is not None:
            found = _partition_of(self.base, index)
        return found

    def indexes(self) -> set[int]:
        if self.raw is not None:
            self._close_run()
        found = set(self.partitions)
        if self.base is not None:
            found.update(partition.partition for partition in self.base.partitions)
        return found

    def build(self, available: frozenset[int]) -> TopicInfo:
        if self.raw:  # a created topic whose partitions all came in its run: kept undecoded
            return TopicInfo(self.name, self.topic_id, PartitionRecords(tuple(self.raw), available),
                             self.topic_epoch, self.name in INTERNAL_TOPICS)  # fmt: skip
        parts = self.partitions
        if self.base is not None:
            merged = {partition.partition: partition for partition in self.base.partitions}
            merged.update(parts)
            parts = merged
        return TopicInfo(self.name, self.topic_id, tuple(_settle(parts[index], available) for index in sorted(parts)),
                         self.topic_epoch, self.name in INTERNAL_TOPICS)  # fmt: skip


def _partition_of(topic: TopicInfo, index: int) -> PartitionInfo | None:
    partitions = topic.partitions
    if 0 <= index < len(partitions) and partitions[index].partition == index:  # dense, the usual case
        return partitions[index]
    return next((partition for partition in partitions if partition.partition == index), None)


def _settle(partition: PartitionInfo, available: frozenset[int]) -> PartitionInfo:
    """The partition with `offline_replicas` = its replicas whose broker is not available."""
    if available.issuperset(partition.replicas):
        offline: tuple[int, ...] = ()
    else:
        offline = tuple(replica for replica in partition.replicas if replica not in available)
    if offline == partition.offline_replicas:
        return partition
    p = partition  # the constructor, not dataclasses.replace: five times faster, and a fence touches thousands
    return PartitionInfo(p.partition, p.leader, p.leader_epoch, p.replicas, p.isr, offline, p.partition_epoch,
                         p.removing_replicas, p.adding_replicas, p.leader_recovery_state)


def _settle_topic(topic: TopicInfo, available: frozenset[int], flipped: frozenset[int]) -> TopicInfo:
    """The topic with the offline replicas of its partitions on a `flipped` broker brought up to date."""
    partitions = topic.partitions
    settled: list[PartitionInfo] | None = None
    for index, partition in enumerate(partitions):
        if flipped.isdisjoint(partition.replicas):
            continue
        new = _settle(partition, available)
        if new is not partition:
            if settled is None:
                settled = list(partitions)
            settled[index] = new
    if settled is None:
        return topic
    return TopicInfo(topic.name, topic.topic_id, tuple(settled), topic.topic_epoch, topic.is_internal)


def listed_brokers(registrations: Mapping[int, BrokerRegistration], listener: str | None) -> dict[int, BrokerInfo]:
    """What Metadata lists: the unfenced brokers with an endpoint of `listener` (the first one when None)."""
    brokers = {}
    for broker_id, registration in registrations.items():
        if registration.fenced:
            continue
        endpoint = registration.endpoint(listener)
        if endpoint is not None:
            brokers[broker_id] = BrokerInfo(broker_id, endpoint.host, endpoint.port, registration.rack)
    return brokers


# ---------------------------------------------------------------------------------------------
# The delta.


class MetadataDelta:
    """Records replayed over `image`; `apply()` gives the next image. See the module docstring.

    A delta is applied once: make a new one over the image `apply` returned to go on.
    """

    def __init__(self, image: MetadataImage, observer: ChangeObserver | None = None, *, lazy: bool = True) -> None:
        """`lazy` False: every record through the schema engine's decoder, every partition built at
        once; the reference the tests compare the specialised decoders and lazy partitions with."""
        self.image = image
        self.observer = observer
        self.offset = image.offset
        """The offset of the last record replayed (the next image's `offset`)."""
        self.topic_epoch = image.topic_epoch
        """The KIP-232 counter so far."""
        self.next_producer_id = image.next_producer_id
        """KIP-730: where the next block of producer ids starts."""
        self._registrations: _Overlay[int, BrokerRegistration] = _Overlay(image.registrations)
        self._configs: _Overlay[tuple[int, str], dict[str, str]] = _Overlay(image.configs)  # type: ignore[arg-type]
        self._owned_configs: set[tuple[int, str]] = set()  # resources whose dict in _configs.changes is ours
        self._features: _Overlay[str, int] = _Overlay(image.features)
        self._acls: _Overlay[uuid.UUID, AclBinding] = _Overlay(image.acls)
        self._scram: _Overlay[tuple[str, str], ScramCredential] = _Overlay(image.scram)
        self._topics: dict[uuid.UUID, _TopicDraft | None] = {}  # None: removed; base None: (re)created
        self._names: dict[str, uuid.UUID | None] = {}  # name -> live topic id, changes over image.topics
        self._applied = False
        self._last_draft: tuple[int, _TopicDraft | None] = (-1, None)  # (topic id as int, its draft)
        self._lazy = lazy
        self._decode = decode_metadata_record_fast if lazy else decode_metadata_record
        self._run: _TopicDraft | None = None  # the last topic created, while its partitions may come undecoded
        types = METADATA_RECORD_TYPES
        self._handlers: dict[type[ApiData], Callable[[ApiData], bool]] = {
            types[MetadataRecordType.REGISTER_BROKER]: self._register_broker,
            types[MetadataRecordType.UNREGISTER_BROKER]: self._unregister_broker,
            types[MetadataRecordType.TOPIC]: self._topic,
            types[MetadataRecordType.PARTITION]: self._partition,
            types[MetadataRecordType.CONFIG]: self._config,
            types[MetadataRecordType.PARTITION_CHANGE]: self._partition_change,
            types[MetadataRecordType.FENCE_BROKER]: self._fence_broker,
            types[MetadataRecordType.UNFENCE_BROKER]: self._unfence_broker,
            types[MetadataRecordType.REMOVE_TOPIC]: self._remove_topic,
            types[MetadataRecordType.FEATURE_LEVEL]: self._feature_level,
            types[MetadataRecordType.NO_OP]: lambda record: False,
            types[MetadataRecordType.PRODUCER_IDS]: self._producer_ids,
            types[MetadataRecordType.ACCESS_CONTROL_ENTRY]: self._acl,
            types[MetadataRecordType.REMOVE_ACCESS_CONTROL_ENTRY]: self._remove_acl,
            types[MetadataRecordType.USER_SCRAM_CREDENTIAL]: self._scram_credential,
            types[MetadataRecordType.REMOVE_USER_SCRAM_CREDENTIAL]: self._remove_scram_credential,
        }

    def __repr__(self) -> str:
        return (f"MetadataDelta(offset={self.offset}, topics={len(self._topics)}, "
                f"brokers={len(self._registrations.changes)}, configs={len(self._configs.changes)})")  # fmt: skip

    def replay(self, value: bytes, offset: int | None = None) -> bool:
        """Replay one record value (at log `offset`, which the next image is at even when the record
        is refused). True when the record applied; False when it was ignored (it names a broker,
        topic or partition that does not exist, a stale broker epoch, a lower topic epoch; a NoOp)
        or could change nothing (a config or feature set to the value it has).

        Raises MetadataRecordError, having changed nothing but the offset, when `value` is not a
        metadata record this project reads.
        """
        if self._applied:
            raise RuntimeError("this delta was applied: replay into a new MetadataDelta over the image it gave")
        if offset is not None:
            self.offset = offset
        if type(value) is not bytes:
            value = bytes(value)
        run = self._run
        if run is not None and run.takes(value):  # the snapshot's million PartitionRecords come here
            return True
        if self._lazy:
            fields = decode_plain_topic_v0(value)
            if fields is not None:
                return self._topic_fields(*fields)
        record = self._decode(value)
        return self._handlers[type(record)](record)

    def replay_all(self, values: Iterable[bytes], refused: Callable[[MetadataRecordError], None]) -> None:
        """`replay` each of `values` in order (a snapshot's: no offsets), telling `refused` of each
        one that is not a metadata record. The same as a loop over `replay`, with the test that
        keeps a value in the open run (`_TopicDraft.takes`) inline: a snapshot is a million of them."""
        if self._applied:
            raise RuntimeError("this delta was applied: replay into a new MetadataDelta over the image it gave")
        plain = _plain_partition
        replay = self.replay
        topic_fields = self._topic_fields if self._lazy else None
        run = self._run
        raw, topic, last = (None, b"", b"") if run is None else (run.raw, run.raw_id, run.raw_last)
        for value in values:
            if type(value) is not bytes:
                value = bytes(value)
            elif raw is not None and value[7:23] == topic:
                index = value[3:7]
                if index > last and index[0] < 0x80 and plain(value) is not None:
                    raw.append(value)
                    last = index
                    continue
            if run is not None:
                run.raw_last = last
            fields = None if topic_fields is None else decode_plain_topic_v0(value)
            if fields is not None:  # the snapshot's 100,000 TopicRecords: as `replay` reads them
                topic_fields(*fields)
            else:
                try:
                    replay(value)
                except MetadataRecordError as exc:
                    refused(exc)
            run = self._run
            raw, topic, last = (None, b"", b"") if run is None else (run.raw, run.raw_id, run.raw_last)
        if run is not None:
            run.raw_last = last

    # -- brokers ---------------------------------------------------------------------------------

    def _register_broker(self, record: ApiData) -> bool:
        broker_id = record.broker_id
        registration = BrokerRegistration(
            broker_id=broker_id, incarnation_id=_uuid(record.incarnation_id), broker_epoch=record.broker_epoch,
            endpoints=tuple(Endpoint(e.name, e.host, e.port, e.security_protocol) for e in record.end_points),
            rack=record.rack, fenced=bool(record.fenced),
            in_controlled_shutdown=bool(getattr(record, "in_controlled_shutdown", False)),
            supported_features=tuple((f.name, f.min_supported_version, f.max_supported_version)
                                     for f in record.features))  # fmt: skip
        old = self._registrations.get(broker_id)
        if old == registration:
            return False
        if old is not None and self.observer is not None:
            self.observer.dropped((BROKER, broker_id))
        self._registrations.put(broker_id, registration)
        return True

    def _unregister_broker(self, record: ApiData) -> bool:
        broker_id = record.broker_id
        old = self._registrations.get(broker_id)
        if old is None or old.broker_epoch != record.broker_epoch:
            logger.debug("UnregisterBroker %d epoch %d ignored: registered %s", broker_id, record.broker_epoch, old)
            return False
        if self.observer is not None:
            self.observer.dropped((BROKER, broker_id))
        self._registrations.delete(broker_id)
        return True

    def _fence_broker(self, record: ApiData) -> bool:
        return self._set_fenced(record.id, record.epoch, True)

    def _unfence_broker(self, record: ApiData) -> bool:
        return self._set_fenced(record.id, record.epoch, False)

    def _set_fenced(self, broker_id: int, epoch: int, fenced: bool) -> bool:
        old = self._registrations.get(broker_id)
        if old is None or old.broker_epoch != epoch:
            logger.debug("%s of broker %d epoch %d ignored: registered %s",
                         "Fence" if fenced else "Unfence", broker_id, epoch, old)  # fmt: skip
            return False
        if old.fenced == fenced:
            return False
        if self.observer is not None:
            self.observer.modified((BROKER, broker_id))
        self._registrations.put(broker_id, replace(old, fenced=fenced))
        return True

    # -- topics and partitions -------------------------------------------------------------------

    def _draft(self, topic_id: uuid.UUID) -> _TopicDraft | None:
        """The live topic's draft, made from the image's topic on first change; None when not live."""
        key = topic_id.int
        last_key, last = self._last_draft
        if key == last_key:  # the partitions of a topic come in a run (snapshots, CreateTopics)
            return last
        topics = self._topics
        draft = topics.get(topic_id, _NOT_CHANGED)
        if draft is _NOT_CHANGED:
            by_id = self.image.topics_by_id
            base = by_id.get(topic_id) if by_id else None  # a load starts empty: no UUID hash (Python code)
            draft = None if base is None else _TopicDraft(topic_id, base.name, base.topic_epoch, base)
            if draft is not None:
                topics[topic_id] = draft
        self._last_draft = (key, draft)
        return draft

    def _live_id(self, name: str) -> uuid.UUID | None:
        names = self._names
        if name in names:
            return names[name]
        topic = self.image.topics.get(name)
        return None if topic is None else topic.topic_id

    def _raise_counter(self, epoch: int) -> None:
        if epoch > self.topic_epoch:
            self.topic_epoch = epoch

    def _topic(self, record: ApiData) -> bool:
        return self._topic_fields(record.name, _uuid(record.topic_id), record.topic_epoch)

    def _topic_fields(self, name: str, topic_id: uuid.UUID, epoch: int) -> bool:
        if epoch > self.topic_epoch:
            self.topic_epoch = epoch
        if not topic_id.int:  # the zero id
            logger.debug("TopicRecord %r with the zero topic id ignored", name)
            return False
        draft = self._draft(topic_id)
        if draft is not None:  # a live topic: only its epoch can go up
            if epoch <= draft.topic_epoch:
                return False
            if self.observer is not None:
                self.observer.modified((TOPIC, topic_id))
            draft.topic_epoch = epoch
            return True
        if self._live_id(name) is not None:
            logger.debug("TopicRecord %r id %s ignored: the name is taken by topic %s", name, topic_id,
                         self._live_id(name))  # fmt: skip
            return False
        self._topics.pop(topic_id, None)  # removed earlier in this delta: created again at the end
        draft = self._topics[topic_id] = _TopicDraft(topic_id, name, epoch, None)
        self._last_draft = (topic_id.int, draft)
        self._names[name] = topic_id
        if self._lazy:
            draft.open_run()
            self._run = draft
        return True

    def _partition(self, record: ApiData) -> bool:
        topic_id = _uuid(record.topic_id)
        draft = self._draft(topic_id)
        if draft is None:
            logger.debug("PartitionRecord %s-%d ignored: no such topic", topic_id, record.partition_id)
            return False
        index = record.partition_id
        replicas, isr = record.replicas, record.isr
        same = isr == replicas
        replicas = tuple(replicas)
        removing, adding = record.removing_replicas, record.adding_replicas
        partition = PartitionInfo(
            index, record.leader, record.leader_epoch, replicas, replicas if same else tuple(isr), (),
            record.partition_epoch, tuple(removing) if removing else (), tuple(adding) if adding else (),
            record.leader_recovery_state if record.tags else 0)  # fmt: skip  # tags: the tagged fields present
        if self.observer is not None:
            old = draft.partition(index)
            if old == partition:
                return False
            if old is not None:
                self.observer.dropped((PARTITION, topic_id, index))
        draft.put(partition)
        return True

    def _partition_change(self, record: ApiData) -> bool:
        topic_id = _uuid(record.topic_id)
        index = record.partition_id
        draft = self._draft(topic_id)
        old = None if draft is None else draft.partition(index)
        if draft is None or old is None:
            logger.debug("PartitionChangeRecord %s-%d ignored: no such partition", topic_id, index)
            return False
        leader, isr, replicas = record.leader, record.isr, record.replicas
        bump = leader != NO_LEADER_CHANGE or isr is not None
        recovery = record.leader_recovery_state
        removing, adding = record.removing_replicas, record.adding_replicas
        partition = PartitionInfo(
            index,
            old.leader if leader == NO_LEADER_CHANGE else leader,
            old.leader_epoch + 1 if bump else old.leader_epoch,
            old.replicas if replicas is None else tuple(replicas),
            old.isr if isr is None else tuple(isr),
            old.offline_replicas,
            old.partition_epoch + 1,
            old.removing_replicas if removing is None else tuple(removing),
            old.adding_replicas if adding is None else tuple(adding),
            old.leader_recovery_state if recovery == -1 else recovery,
        )
        if self.observer is not None:
            self.observer.modified((PARTITION, topic_id, index))
        draft.put(partition)
        return True

    def _remove_topic(self, record: ApiData) -> bool:
        topic_id = _uuid(record.topic_id)
        self._raise_counter(record.topic_epoch)
        draft = self._draft(topic_id)
        if draft is None:
            return False
        name = draft.name
        observer = self.observer
        if observer is not None:
            observer.dropped((TOPIC, topic_id))
            for index in sorted(draft.indexes()):
                observer.dropped((PARTITION, topic_id, index))
        self._topics[topic_id] = None
        self._last_draft = (-1, None)
        if self._run is draft:
            self._run = None
        self._names[name] = None
        resource = (TOPIC_RESOURCE, name)
        configs = self._configs.get(resource)
        if configs is not None:
            if observer is not None:
                for config_name in configs:
                    observer.dropped((CONFIG, TOPIC_RESOURCE, name, config_name))
            self._configs.delete(resource)
            self._owned_configs.discard(resource)
        return True

    # -- configs and features --------------------------------------------------------------------

    def _config(self, record: ApiData) -> bool:
        resource = (record.resource_type, record.resource_name)
        name, value = record.name, record.value
        configs = self._configs.get(resource)
        old = None if configs is None else configs.get(name)
        if old == value:
            return False
        if old is not None and self.observer is not None:
            self.observer.dropped((CONFIG, resource[0], resource[1], name))
        if resource not in self._owned_configs:  # copy on write: the image's dict is never touched
            configs = {} if configs is None else dict(configs)
            self._configs.put(resource, configs)
            self._owned_configs.add(resource)
        assert configs is not None
        if value is None:
            del configs[name]
            if not configs:
                self._configs.delete(resource)
                self._owned_configs.discard(resource)
        else:
            configs.pop(name, None)  # a key set again after its deletion goes to the end, as in a replay
            configs[name] = value
        return True

    def _feature_level(self, record: ApiData) -> bool:
        name, level = record.name, record.feature_level
        old = self._features.get(name)
        if old == level or (old is None and level == 0):
            return False
        if old is not None and self.observer is not None:
            self.observer.dropped((FEATURE, name))
        if level == 0:
            self._features.delete(name)
        else:
            self._features.put(name, level)
        return True

    # -- ACLs ------------------------------------------------------------------------------------

    def _acl(self, record: ApiData) -> bool:
        """An ACL created (Kafka's AclControlManager.replay); the same id again replaces it."""
        acl_id, binding = _uuid(record.id), binding_of(record)
        old = self._acls.get(acl_id)
        if old == binding:
            return False
        if old is not None and self.observer is not None:
            self.observer.dropped((ACL, acl_id))
        self._acls.put(acl_id, binding)
        return True

    def _remove_acl(self, record: ApiData) -> bool:
        acl_id = _uuid(record.id)
        if self._acls.get(acl_id) is None:
            return False
        if self.observer is not None:
            self.observer.dropped((ACL, acl_id))
        self._acls.delete(acl_id)
        return True

    # -- SCRAM credentials -----------------------------------------------------------------------

    def _scram_credential(self, record: ApiData) -> bool:
        """A user's credential for one mechanism set (Kafka's ScramControlManager.replay): it replaces
        the one before, so the next authentication checks the new password."""
        key, credential = credential_of(record)
        if self._scram.get(key) == credential:
            return False
        self._scram.put(key, credential)
        return True

    def _remove_scram_credential(self, record: ApiData) -> bool:
        key = scram_key(record)
        if self._scram.get(key) is None:
            return False
        self._scram.delete(key)
        return True

    # -- producer ids ----------------------------------------------------------------------------

    def _producer_ids(self, record: ApiData) -> bool:
        """A block of producer ids handed out (KIP-730): the next block starts at NextProducerId."""
        next_id = record.next_producer_id
        if next_id <= self.next_producer_id:
            return False
        if self.next_producer_id >= 0 and self.observer is not None:
            self.observer.modified((PRODUCER_IDS,))
        self.next_producer_id = next_id
        return True

    # -- the next image --------------------------------------------------------------------------

    def apply(self) -> MetadataImage:
        """The image with every replayed record applied; shares what did not change with `image`."""
        if self._applied:
            raise RuntimeError("a MetadataDelta is applied once")
        self._applied = True
        image = self.image
        registrations = self._registrations.merged()
        if registrations is image.registrations:
            brokers = image.brokers
        else:
            brokers = listed_brokers(registrations, image.listener)
            if brokers == image.brokers:
                brokers = image.brokers
        available = frozenset(brokers)
        by_name, by_id, changed_names = self._merge_topics(available, frozenset(image.brokers))
        encoded = image.encoded.copy()  # one C call: safe while a server thread adds to the old memo
        if changed_names and encoded:
            for key in [key for key in encoded if key[0] in changed_names]:
                del encoded[key]
        return MetadataImage(
            cluster_id=image.cluster_id, controller_id=image.controller_id, brokers=brokers, topics=by_name,
            encoded=encoded, offset=self.offset, topic_epoch=self.topic_epoch, registrations=registrations,
            configs=self._configs.merged(), features=self._features.merged(), listener=image.listener,
            next_producer_id=self.next_producer_id,
            acls=self._acls.merged(), scram=self._scram.merged(), topics_by_id=by_id)  # fmt: skip

    def _merge_topics(self, available: frozenset[int], was_available: frozenset[int],
                      ) -> tuple[Mapping[str, TopicInfo], Mapping[uuid.UUID, TopicInfo], set[str]]:
        image = self.image
        base_by_id = image.topics_by_id
        flipped = available ^ was_available
        if not self._topics and not flipped:
            return image.topics, base_by_id, set()
        by_name = dict(image.topics)
        by_id = dict(base_by_id)
        changed: set[str] = set()
        for topic_id, draft in self._topics.items():
            if draft is None or draft.base is None:  # removed, or created (again): out of its old place
                old = base_by_id.get(topic_id) if base_by_id else None  # a load: no UUID hash (Python code)
                if old is not None:
                    del by_id[topic_id]
                    if by_name.get(old.name) is old:
                        del by_name[old.name]
                    changed.add(old.name)
                if draft is None:
                    continue
            topic = draft.build(available)
            by_id[topic_id] = by_name[topic.name] = topic
            changed.add(topic.name)
        if flipped:  # brokers fenced, unfenced, (un)registered: offline replicas and leaders elsewhere change too
            for topic_id, topic in base_by_id.items():
                if topic_id in self._topics:
                    continue
                partitions = topic.partitions
                if type(partitions) is PartitionRecords and not partitions.is_decoded:  # stays undecoded
                    if flipped.isdisjoint(partitions.broker_ids()):
                        continue
                    settled = replace(topic, partitions=partitions.settled(available))
                elif flipped.isdisjoint(topic.broker_ids()):
                    continue
                else:
                    settled = _settle_topic(topic, available, flipped)
                if settled is not topic:
                    by_id[topic_id] = by_name[topic.name] = settled
                changed.add(topic.name)  # its Metadata entry may change even so: a leader outside the replicas
        return by_name, by_id, changed
