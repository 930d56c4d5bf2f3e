"""The state a node replays from the metadata log for now: committed records, compacted by entity.

Until the controller's full image exists, this is the state machine of KIP-630 ("the Kafka
Controller and Metadata Cache ... materialize the entries in the metadata log into memory"): it
keeps, per entity, the record values that make the entity what it is now, and nothing else, so
that a snapshot of it is small and replaying the snapshot gives the same state back.

It is event-sourced, as KIP-630 says the controller's state is ("the data model ... requires us
to support deltas/events"): a PartitionRecord followed by its PartitionChangeRecords, a
RegisterBrokerRecord followed by its Fence/UnfenceBrokerRecords, are kept as they came. The rules,
by the record's entity key (`quorum.wire.metadata_records.metadata_record_key`):

* RegisterBroker, Topic, Partition, Config (with a Value) and FeatureLevel records (re)create
  their entity: an existing one is replaced.
* PartitionChange, FenceBroker and UnfenceBroker records are appended to their entity (they
  create it when it does not exist, which keeps replay total: nothing is ever refused).
* UnregisterBroker, a ConfigRecord with a null Value, and RemoveTopic delete their entity;
  RemoveTopic deletes the topic's partitions too. (Kafka's controller also drops a deleted
  topic's configs, which are keyed by topic name; that is the full image's job, later.)
* A ProducerIdsRecord (KIP-730) replaces the one before it: one cluster-wide entity.
* NoOpRecords change nothing.
* A value that is not a metadata record at all (the commit path accepts any bytes) is kept as an
  opaque entity of its own: it is never changed or deleted.

`snapshot_values()` writes the entities grouped by kind (features first, as Kafka writes
metadata.version first, then brokers, topics, partitions, configs, then the opaque values in
log order), each entity's records in order. Within a kind, entities keep the order in which they
were (last) created, which is the same whether a state replayed the whole log or loaded a
snapshot and replayed the rest, so two replicas at the same offset write identical snapshots.
"""

from __future__ import annotations

from collections.abc import Hashable, Iterable, Iterator
from enum import Enum
from typing import Any

from quorum.image.state_machine import SnapshotCounts
from quorum.wire.metadata_records import MetadataRecordError, MetadataRecordType, metadata_record_key


class EntityKind(Enum):
    """The kinds of entity the state keeps, in the order a snapshot writes them."""

    FEATURE = "feature"
    BROKER = "broker"
    TOPIC = "topic"
    PARTITION = "partition"
    CONFIG = "config"
    PRODUCER_IDS = "producer ids"
    ACL = "acl"
    SCRAM = "scram credential"


class _Table:
    """The entities of one kind: key -> the record values that make it, in order.

    `marks[key]` is how many of the entity's leading records have already been counted as
    changed since the last snapshot (absent: none); see `MetadataRecordsState.changed_records`.
    Each operation returns (change in the number of records, records newly counted as changed).
    """

    __slots__ = ("entities", "marks")

    def __init__(self) -> None:
        self.entities: dict[Any, list[bytes]] = {}
        self.marks: dict[Any, int] = {}

    def replace(self, key: Hashable, value: bytes) -> tuple[int, int]:
        old = self.entities.get(key)
        self.entities[key] = [value]
        if old is None:
            return 1, 0
        return 1 - len(old), len(old) - self.marks.pop(key, 0)

    def append(self, key: Hashable, value: bytes) -> tuple[int, int]:
        values = self.entities.get(key)
        if values is None:
            self.entities[key] = [value]
            return 1, 0
        changed = len(values) - self.marks.get(key, 0)
        self.marks[key] = len(values)
        values.append(value)
        return 1, changed

    def delete(self, key: Hashable) -> tuple[int, int]:
        values = self.entities.pop(key, None)
        if values is None:
            return 0, 0
        return -len(values), len(values) - self.marks.pop(key, 0)


class MetadataRecordsState(SnapshotCounts):
    """The committed metadata records compacted by entity; see the module docstring.

    Change accounting for KIP-630's ``metadata.snapshot.min.changed_records.ratio``
    (`quorum.image.snapshot_policy`): the KIP counts "snapshot records that have changed
    (deleted or modified) between the latest snapshot and the current in-memory state", and
    says "new snapshot records don't count ... If a snapshot record was added and then modified
    or deleted then it counts against the ratio". Here that reads:

    * `records_in_snapshot` is how many records (values) the state had when it last loaded or
      wrote a snapshot (`load`, `mark_snapshot`).
    * A record is *changed* when the entity it belongs to is modified (a record appended to it,
      or the entity replaced) or deleted: all of the entity's records count then, each at most
      once until the next snapshot.
    * Adding a record does not count. An added record counts like any other once its entity is
      modified or deleted afterwards, as the KIP's last sentence says; that includes a record
      added after the snapshot, so `changed_records` can exceed `records_in_snapshot`. Thus a
      partition in the snapshot that then changes twice counts its PartitionRecord at the first
      change and the first PartitionChangeRecord at the second.
    * Opaque values and NoOpRecords never change anything.

    Both counts restart at `mark_snapshot()` and `load()`.
    """

    def __init__(self) -> None:
        self._reset()

    def _reset(self) -> None:
        """Empty, with every counter at zero."""
        self._tables = {kind: _Table() for kind in EntityKind}
        self._features = self._tables[EntityKind.FEATURE]
        self._brokers = self._tables[EntityKind.BROKER]
        self._topics = self._tables[EntityKind.TOPIC]
        self._partitions = self._tables[EntityKind.PARTITION]
        self._configs = self._tables[EntityKind.CONFIG]
        self._producer_ids = self._tables[EntityKind.PRODUCER_IDS]
        self._acls = self._tables[EntityKind.ACL]
        self._scram = self._tables[EntityKind.SCRAM]
        self._topic_partitions: dict[Any, set[int]] = {}  # topic id -> its partition ids, for RemoveTopic
        self._opaque: list[bytes] = []
        self._records = 0
        self._records_in_snapshot = 0
        self._changed = 0
        self._last_offset = -1

    def __repr__(self) -> str:
        counts = ", ".join(f"{kind.value}s={len(table.entities)}" for kind, table in self._tables.items())
        return f"MetadataRecordsState({counts}, opaque={len(self._opaque)}, records={self._records})"

    def __len__(self) -> int:
        """The number of records (values) the state holds: what a snapshot of it would hold."""
        return self._records

    def __eq__(self, other: object) -> bool:
        """Same entities with the same records (the order of entities aside; `digest` sees it)."""
        if not isinstance(other, MetadataRecordsState):
            return NotImplemented
        return self._opaque == other._opaque and all(
            table.entities == other._tables[kind].entities for kind, table in self._tables.items())

    __hash__ = None  # type: ignore[assignment]  # mutable

    # -- applying records ------------------------------------------------------------------------

    @property
    def last_offset(self) -> int:
        """The offset of the last record applied since the state was created or loaded, -1 before."""
        return self._last_offset

    def apply(self, offset: int, value: bytes) -> None:
        """Apply the committed record at `offset`; offsets must increase (a record is applied once)."""
        if offset <= self._last_offset:
            raise ValueError(f"record at offset {offset} applied after offset {self._last_offset}: "
                             "each committed record is applied once, in order")  # fmt: skip
        self._last_offset = offset
        self._apply(value if type(value) is bytes else bytes(value))

    def _apply(self, value: bytes) -> None:
        try:
            record_type, key, deletes = metadata_record_key(value)
        except MetadataRecordError:
            self._opaque.append(value)
            self._records += 1
            return
        if record_type is MetadataRecordType.PARTITION_CHANGE or record_type is MetadataRecordType.PARTITION:
            table = self._partitions
            operation = table.append if record_type is MetadataRecordType.PARTITION_CHANGE else table.replace
            partitions = self._topic_partitions.get(key[0])
            if partitions is None:
                self._topic_partitions[key[0]] = partitions = set()
            partitions.add(key[1])
            records, changed = operation(key, value)
        elif record_type is MetadataRecordType.REGISTER_BROKER:
            records, changed = self._brokers.replace(key, value)
        elif record_type is MetadataRecordType.FENCE_BROKER or record_type is MetadataRecordType.UNFENCE_BROKER:
            records, changed = self._brokers.append(key, value)
        elif record_type is MetadataRecordType.UNREGISTER_BROKER:
            records, changed = self._brokers.delete(key)
        elif record_type is MetadataRecordType.TOPIC:
            records, changed = self._topics.replace(key, value)
        elif record_type is MetadataRecordType.REMOVE_TOPIC:
            records, changed = self._topics.delete(key)
            for partition in self._topic_partitions.pop(key, ()):
                more_records, more_changed = self._partitions.delete((key, partition))
                records += more_records
                changed += more_changed
        elif record_type is MetadataRecordType.CONFIG:
            records, changed = self._configs.delete(key) if deletes else self._configs.replace(key, value)
        elif record_type is MetadataRecordType.PRODUCER_IDS:
            records, changed = self._producer_ids.replace(None, value)
        elif record_type is MetadataRecordType.FEATURE_LEVEL:
            records, changed = self._features.replace(key, value)
        elif record_type is MetadataRecordType.ACCESS_CONTROL_ENTRY or record_type is \
                MetadataRecordType.REMOVE_ACCESS_CONTROL_ENTRY:
            records, changed = self._acls.delete(key) if deletes else self._acls.replace(key, value)
        elif record_type is MetadataRecordType.USER_SCRAM_CREDENTIAL or record_type is \
                MetadataRecordType.REMOVE_USER_SCRAM_CREDENTIAL:
            records, changed = self._scram.delete(key) if deletes else self._scram.replace(key, value)
        else:  # NoOp
            return
        self._records += records
        self._changed += changed

    # -- snapshots -------------------------------------------------------------------------------

    def snapshot_values(self) -> list[bytes]:
        """The state as snapshot record values, in an order that replays to the same state.

        A copy: later `apply` calls do not change it, so it can be written out at leisure.
        """
        values: list[bytes] = []
        for table in self._tables.values():  # EntityKind order: features, brokers, ..., ACLs, SCRAM
            for records in table.entities.values():
                values.extend(records)
        values.extend(self._opaque)
        return values

    def load(self, values: Iterable[bytes]) -> None:
        """Replace the state by the one a snapshot holds (`values` as `snapshot_values` wrote them).

        Cannot fail part-way on bad content: any bytes are a valid record here (those that are
        not metadata records are opaque), so the caller that has validated the snapshot file gets
        the whole of it or, if reading the file fails, should read everything before calling.
        """
        self._reset()
        for value in values:
            self._apply(value if type(value) is bytes else bytes(value))
        self.mark_snapshot()

    def mark_snapshot(self) -> None:
        """The state was just written to a snapshot (or loaded from one): restart the change counts."""
        super().mark_snapshot()
        for table in self._tables.values():
            table.marks.clear()

    # -- inspection ------------------------------------------------------------------------------

    def keys(self, kind: EntityKind) -> list[Any]:
        """The keys of the entities of `kind` (see `quorum.wire.metadata_records.RecordKey`), in snapshot order."""
        return list(self._tables[kind].entities)

    def records_of(self, kind: EntityKind, key: Hashable) -> tuple[bytes, ...] | None:
        """The record values that make the entity `key` of `kind`, None when there is none."""
        records = self._tables[kind].entities.get(key)
        return None if records is None else tuple(records)

    @property
    def opaque_values(self) -> tuple[bytes, ...]:
        """The values that are not metadata records, in log order."""
        return tuple(self._opaque)

    def _iter_values(self) -> Iterator[bytes]:
        for table in self._tables.values():
            for records in table.entities.values():
                yield from records
        yield from self._opaque
