"""The metadata image as the state machine a node replays the metadata log into.

`ImageState` has `quorum.image.records_state.MetadataRecordsState`'s interface (`apply`,
`snapshot_values`, `load`, `mark_snapshot`, `records_in_snapshot`, `changed_records`, `digest`,
`last_offset`, `len`, `==`), so `quorum.image.replay.MetadataReplayer` drives either; this one
holds a `MetadataImage` that brokers serve Metadata from (`image`).

Records go into a pending `MetadataDelta`; the image is built from it when someone asks for it,
so a burst of records (a snapshot load, a long catch-up) builds one image, not one per record.

Threads: a node replays on a worker thread (`MetadataReplayer.catch_up` under
`asyncio.to_thread`) while its event loop reads `image` for every Metadata request. A reader
must never build the delta the worker is replaying into: the image would hold half a batch (a
TopicRecord without its PartitionRecords), and a record the worker was adding at that moment
would go into a delta that is never applied again, lost until a restart replays the log (issue
21). So the replayer wraps each catch-up in `replaying()`: meanwhile readers get the image of
the last whole catch-up, and only outside it does a reader build the pending delta, under a
lock that `replaying()` also takes to begin. `load` swaps in the loaded image under the same lock.

Snapshots describe each entity in the fewest records (KIP-631), in this order: one
FeatureLevelRecord per feature (first, as Kafka writes metadata.version first); one
RegisterBrokerRecord v1 per broker (its current fenced flag); one TopicRecord per topic (its
current TopicEpoch), each followed by one PartitionRecord v0 per partition (current replicas,
ISR, leader, leader and partition epochs); when the KIP-232 counter is above every live topic's
epoch (the newest topic was deleted), one RemoveTopicRecord with the zero topic id carrying it
(replaying a removal of an unknown id only raises the counter, so it never goes back across a
snapshot); then one ConfigRecord per config; then one AccessControlEntryRecord per ACL; then one
UserScramCredentialRecord per (user, mechanism). Within
a kind, entities are in the image's order, which does not depend on how records were batched
into deltas, so replicas at the same offset write identical snapshots.

KIP-730: once the controller has handed out producer ids, one ProducerIdsRecord carries the
next producer id (broker id and epoch -1, as Kafka's snapshot writes it), after the configs.

A value that is not a metadata record (the commit path accepts any bytes) holds no metadata: it
is skipped, counted in `skipped_records` and logged (a warning for the first, debug after), and
it is not written to snapshots. (`MetadataRecordsState` keeps such values as opaque entities;
an image has nowhere to put them, and Kafka's broker would stop on them.)
"""

from __future__ import annotations

import contextlib
import gc
import logging
import struct
import threading
from collections.abc import Hashable, Iterable, Iterator, Sequence
from typing import overload

from quorum.image.delta import MetadataDelta
from quorum.image.image import BrokerRegistration, MetadataImage, PartitionInfo, TopicInfo, empty_image
from quorum.image.partition_records import PartitionRecords
from quorum.image.state_machine import SnapshotCounts
from quorum.security.acl_records import encode_acl
from quorum.security.scram_records import encode_scram
from quorum.wire import metadata_records as mr
from quorum.wire.metadata_records import (
    ZERO_UUID,
    CompiledRecordEncoder,
    MetadataRecordError,
    encode_metadata_record,
    encode_partition_v0,
    encode_topic_v0,
)

logger = logging.getLogger(__name__)



# ---------------------------------------------------------------------------------------------
# Snapshot records.


def broker_record(registration: BrokerRegistration) -> bytes:
    """RegisterBrokerRecord v1 (the first with InControlledShutdown) of a registration."""
    return encode_metadata_record(mr.RegisterBrokerRecord(
        version=1, broker_id=registration.broker_id, incarnation_id=registration.incarnation_id,
        broker_epoch=registration.broker_epoch,
        end_points=[mr.RegisterBrokerRecord.BrokerEndpoint(name=e.name, host=e.host, port=e.port,
                                                           security_protocol=e.security_protocol)
                    for e in registration.endpoints],
        features=[mr.RegisterBrokerRecord.BrokerFeature(name=name, min_supported_version=low,
                                                        max_supported_version=high)
                  for name, low, high in registration.supported_features],
        rack=registration.rack, fenced=registration.fenced,
        in_controlled_shutdown=registration.in_controlled_shutdown))  # fmt: skip


_TOPIC_V0 = CompiledRecordEncoder(mr.TopicRecord, 0)
_PARTITION_V0 = CompiledRecordEncoder(mr.PartitionRecord, 0)
_ENCODER_LIMITS = (struct.error, UnicodeError)  # what the struct encoders leave to the engine (long lists, names)


def topic_record(topic: TopicInfo) -> bytes:
    try:
        return encode_topic_v0(topic.name, topic.topic_id, topic.topic_epoch)
    except _ENCODER_LIMITS:
        return _TOPIC_V0(name=topic.name, topic_id=topic.topic_id, topic_epoch=topic.topic_epoch)


def partition_record(topic: TopicInfo, partition: PartitionInfo) -> bytes:
    """PartitionRecord v0: the project keeps no log directories (v1) nor eligible leaders (v2)."""
    p = partition
    try:
        return encode_partition_v0(p.partition, topic.topic_id, p.replicas, p.isr, p.removing_replicas,
                                   p.adding_replicas, p.leader, p.leader_recovery_state, p.leader_epoch,
                                   p.partition_epoch)  # fmt: skip
    except _ENCODER_LIMITS:
        return _PARTITION_V0(
            partition_id=p.partition, topic_id=topic.topic_id, replicas=p.replicas, isr=p.isr,
            removing_replicas=p.removing_replicas, adding_replicas=p.adding_replicas, leader=p.leader,
            leader_recovery_state=p.leader_recovery_state, leader_epoch=p.leader_epoch,
            partition_epoch=p.partition_epoch)  # fmt: skip


def config_record(resource_type: int, resource_name: str, name: str, value: str) -> bytes:
    return encode_metadata_record(mr.ConfigRecord(version=0, resource_type=resource_type, resource_name=resource_name,
                                                  name=name, value=value))  # fmt: skip


def feature_record(name: str, level: int) -> bytes:
    return encode_metadata_record(mr.FeatureLevelRecord(version=0, name=name, feature_level=level))


def counter_record(topic_epoch: int) -> bytes:
    """The RemoveTopicRecord that carries a KIP-232 counter no live topic holds."""
    return encode_metadata_record(mr.RemoveTopicRecord(version=0, topic_id=ZERO_UUID, topic_epoch=topic_epoch))


def producer_ids_record(next_producer_id: int) -> bytes:
    """The ProducerIdsRecord that carries where the next block of producer ids starts (KIP-730)."""
    return encode_metadata_record(mr.ProducerIdsRecord(version=0, broker_id=-1, broker_epoch=-1,
                                                       next_producer_id=next_producer_id))  # fmt: skip


def counter_needs_record(image: MetadataImage) -> bool:
    """Whether the counter is above every live topic's epoch. The newest topic is usually the last
    one created, so the scan from the end stops at once."""
    counter = image.topic_epoch
    return counter >= 0 and not any(topic.topic_epoch >= counter for topic in reversed(image.topics_by_id.values()))


def record_count(image: MetadataImage) -> int:
    """How many records a snapshot of `image` holds."""
    return (len(image.features) + len(image.registrations) + len(image.topics_by_id) + (image.next_producer_id >= 0)
            + sum(len(topic.partitions) for topic in image.topics_by_id.values())
            + sum(len(configs) for configs in image.configs.values()) + counter_needs_record(image)
            + len(image.acls) + len(image.scram))  # fmt: skip


class ImageSnapshot(Sequence[bytes]):
    """The snapshot records of one image, encoded as they are iterated.

    An image never changes, so capturing it is free and the encoding can run later, on the
    thread that writes the file (`quorum.image.replay.SnapshotJob.write`), while replay goes on.
    """

    def __init__(self, image: MetadataImage, length: int | None = None) -> None:
        self.image = image
        self._length = record_count(image) if length is None else length
        self._values: list[bytes] | None = None

    def __repr__(self) -> str:
        return f"ImageSnapshot(offset={self.image.offset}, {self._length} records)"

    def __len__(self) -> int:
        return self._length

    def __iter__(self) -> Iterator[bytes]:
        if self._values is not None:
            return iter(self._values)
        return self._encode()

    @overload
    def __getitem__(self, index: int) -> bytes: ...

    @overload
    def __getitem__(self, index: slice) -> list[bytes]: ...

    def __getitem__(self, index: int | slice) -> bytes | list[bytes]:
        if self._values is None:
            self._values = list(self._encode())
        return self._values[index]

    def __eq__(self, other: object) -> bool:
        if isinstance(other, (ImageSnapshot, list, tuple)):
            return len(self) == len(other) and all(a == b for a, b in zip(self, other, strict=True))
        return NotImplemented

    __hash__ = None  # type: ignore[assignment]

    def _encode(self) -> Iterator[bytes]:
        image = self.image
        for name, level in image.features.items():
            yield feature_record(name, level)
        for registration in image.registrations.values():
            yield broker_record(registration)
        for topic in image.topics_by_id.values():
            yield topic_record(topic)
            partitions = topic.partitions
            if type(partitions) is PartitionRecords:  # the plain records it was loaded from: the same bytes
                yield from partitions.values
            else:
                for partition in partitions:
                    yield partition_record(topic, partition)
        if counter_needs_record(image):
            yield counter_record(image.topic_epoch)
        for (resource_type, resource_name), configs in image.configs.items():
            for name, value in configs.items():
                yield config_record(resource_type, resource_name, name, value)
        if image.next_producer_id >= 0:
            yield producer_ids_record(image.next_producer_id)
        for acl_id, binding in image.acls.items():
            yield encode_acl(acl_id, binding)
        for (user, mechanism), credential in image.scram.items():
            yield encode_scram(user, mechanism, credential)


# ---------------------------------------------------------------------------------------------
# The state machine.


class ImageState(SnapshotCounts):
    """The replayed metadata image, with MetadataRecordsState's interface; see the module docstring.

    Change accounting for KIP-630's ``metadata.snapshot.min.changed_records.ratio`` reads the KIP
    ("snapshot records that have changed (deleted or modified) between the latest snapshot and the
    current in-memory state ... new snapshot records don't count ... If a snapshot record was added
    and then modified or deleted then it counts") with one record per entity, as snapshots here
    are written: an entity that existed and is modified (fenced, a partition changed, a topic's
    epoch raised) counts once until the next snapshot, however often it changes; one replaced by a
    creating record (RegisterBroker, PartitionRecord, ConfigRecord, FeatureLevel for an existing
    key) or deleted counts once more if it was not counted yet, and the record that replaced it
    starts uncounted. Creating an entity does not count, nor does a record that changes nothing.
    The KIP-232 counter record is left out of the count.
    """

    def __init__(self, listener: str | None = None, cluster_id: str = "", controller_id: int = -1, *,
                 lazy: bool = True) -> None:  # fmt: skip
        """`listener`: the listener name whose endpoints Metadata lists (each broker's first when None).
        `lazy` False: every record through the schema engine, every partition built at once
        (`MetadataDelta`'s reference mode, for tests)."""
        self._lazy = lazy
        self._image = empty_image(cluster_id, controller_id, listener)
        self._delta: MetadataDelta | None = None
        self._last_offset = -1
        self._records_in_snapshot = 0
        self._changed = 0
        self._counted: set[Hashable] = set()
        self._skipped = 0
        self._counts: tuple[MetadataImage, int] | None = None  # (image, record_count(image)), cached
        self._lock = threading.Lock()  # a reader building the delta vs a catch-up beginning (module docstring)
        self._replaying = False

    def __repr__(self) -> str:
        image = self.image
        return (f"ImageState(offset={image.offset}, brokers={len(image.registrations)}, topics={len(image.topics)}, "
                f"topic_epoch={image.topic_epoch}, skipped={self._skipped})")  # fmt: skip

    @property
    def image(self) -> MetadataImage:
        """The image of every record applied so far (built now if records are pending); while a
        catch-up runs on another thread, the image as of the end of the previous one."""
        if self._delta is not None:
            with self._lock:
                if self._delta is not None and not self._replaying:
                    self._image = self._delta.apply()
                    self._delta = None
        return self._image

    @contextlib.contextmanager
    def replaying(self) -> Iterator[None]:
        """Around a catch-up (`MetadataReplayer.catch_up`): readers on other threads keep the image
        of the previous one until it ends, and never touch the delta being replayed into."""
        with self._lock:
            self._replaying = True
        try:
            yield
        finally:
            with self._lock:
                self._replaying = False

    def set_identity(self, cluster_id: str | None = None, controller_id: int | None = None) -> None:
        """Set what the log does not hold: the cluster id (from meta.properties or the snapshot header)
        and the controller id Metadata answers with. The topic memo carries over: it holds neither."""
        image = self.image
        with self._lock:
            if self._delta is not None:  # a catch-up is running: its delta must carry the identity
                image = self._delta.image
            renamed = MetadataImage(
                cluster_id=image.cluster_id if cluster_id is None else cluster_id,
                controller_id=image.controller_id if controller_id is None else controller_id,
                brokers=image.brokers, topics=image.topics, encoded=image.encoded, offset=image.offset,
                topic_epoch=image.topic_epoch, registrations=image.registrations, configs=image.configs,
                next_producer_id=image.next_producer_id,
                features=image.features, listener=image.listener, acls=image.acls, scram=image.scram,
                topics_by_id=image.topics_by_id)  # fmt: skip
            if self._delta is not None:
                self._delta.image = renamed
            self._image = renamed

    def __len__(self) -> int:
        """The number of records a snapshot of the state holds."""
        image = self.image
        if self._counts is None or self._counts[0] is not image:
            self._counts = (image, record_count(image))
        return self._counts[1]

    def __eq__(self, other: object) -> bool:
        """Same image (the encoding memo aside)."""
        if not isinstance(other, ImageState):
            return NotImplemented
        return self.image == other.image

    __hash__ = None  # type: ignore[assignment]  # mutable

    # -- applying records ------------------------------------------------------------------------

    @property
    def last_offset(self) -> int:
        """The offset of the last record applied, or the one `load` was given; -1 before either."""
        return self._last_offset

    @property
    def skipped_records(self) -> int:
        """Values applied or loaded that were not metadata records (see the module docstring)."""
        return self._skipped

    def apply(self, offset: int, value: bytes) -> None:
        """Apply the committed record at `offset`; offsets must increase (a record is applied once)."""
        if offset <= self._last_offset:
            raise ValueError(f"record at offset {offset} applied after offset {self._last_offset}: "
                             "each committed record is applied once, in order")  # fmt: skip
        self._last_offset = offset
        delta = self._delta
        if delta is None:
            delta = self._delta = MetadataDelta(self._image, observer=self, lazy=self._lazy)
        try:
            delta.replay(value, offset)
        except MetadataRecordError as exc:
            self._skip(offset, exc)

    def _skip(self, offset: int | None, error: MetadataRecordError) -> None:
        self._skipped += 1
        where = "in the snapshot" if offset is None else f"at offset {offset}"
        level = logging.WARNING if self._skipped == 1 else logging.DEBUG
        logger.log(level, "skipped a value %s that is not a metadata record (%s)%s", where, error,
                   "; later ones are logged at debug level" if self._skipped == 1 else "")  # fmt: skip

    # ChangeObserver: the delta reports changes to existing entities.

    def modified(self, key: Hashable) -> None:
        if key not in self._counted:
            self._counted.add(key)
            self._changed += 1

    def dropped(self, key: Hashable) -> None:
        if key in self._counted:
            self._counted.discard(key)
        else:
            self._changed += 1

    # -- snapshots -------------------------------------------------------------------------------

    def snapshot_values(self) -> ImageSnapshot:
        """The state as snapshot record values (see the module docstring), encoded when iterated.

        Later `apply` calls do not change it: it holds the image of now, which never changes.
        """
        return ImageSnapshot(self.image, len(self))

    def load(self, values: Iterable[bytes], offset: int = -1) -> None:
        """Replace the state by the one a snapshot holds; `offset` is the last offset the snapshot
        contains (its end offset - 1), which becomes the image's `offset` and `last_offset`.

        Builds one image. Values that are not metadata records are skipped as in `apply`.

        The cyclic garbage collector is paused meanwhile: a snapshot of a million partitions makes
        millions of objects, none in a cycle, which it would otherwise scan again and again (a
        third of the load time).
        """
        image = self._image
        delta = MetadataDelta(empty_image(image.cluster_id, image.controller_id, image.listener), lazy=self._lazy)
        delta.offset = offset
        collecting = gc.isenabled()
        gc.disable()
        try:
            delta.replay_all(values, lambda exc: self._skip(None, exc))
            loaded = delta.apply()
        finally:
            if collecting:
                gc.enable()
        with self._lock:
            self._image = loaded
            self._delta = None
        self._last_offset = offset
        self.mark_snapshot()

    def mark_snapshot(self) -> None:
        """The state was just written to a snapshot (or loaded from one): restart the change counts."""
        super().mark_snapshot()
        self._counted.clear()
