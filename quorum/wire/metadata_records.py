"""KIP-631 metadata records: the value of each record in the `__cluster_metadata` log and snapshots.

The frame is what Apache Kafka's MetadataRecordSerde writes: an unsigned varint frame version
(always 1), an unsigned varint record type (the schema's apiKey), an unsigned varint record
version, then the record in the flexible (compact, tagged) encoding of that version. Decoding
is strict as Kafka's is: an unknown frame version, type or version, a payload that ends early
and bytes left over after the payload are all refused with a `MetadataRecordError`.

kafka-python's engine reads past the end of its input without complaint (a short read just
yields fewer bytes), so payloads are decoded here through a reader that refuses short reads,
and then checked for nulls in fields that Kafka never allows to be null.

Decoding a record through the schema engine costs tens of microseconds, too slow to replay a
snapshot of a million records. `metadata_record_key` is the fast path for what replay needs
most: which entity a record is about. It reads the frame header and the record's leading
identity fields with struct and varint code (the one place outside the engine that reads a
metadata record's fields) and leaves the rest of the payload alone.
"""

from __future__ import annotations

import io
import operator
import re
import struct
import threading
import uuid
from collections.abc import Callable, Sequence
from enum import IntEnum
from types import SimpleNamespace
from typing import Any, NamedTuple

from kafka.protocol.api_data import ApiData
from kafka.protocol.schemas import BaseField, StructField
from kafka.protocol.schemas.fields.codecs import EncodeBuffer, UnsignedVarInt32

from quorum.wire.schema import define_data
from quorum.wire.tags import TOPIC_EPOCH_TAG
from quorum.wire.varint import TruncatedVarintError, VarintError, VarintTooLongError, decode_uvarint

FRAME_VERSION = 1
"""The only metadata record frame version Kafka reads (0 was the KRaft preview in Kafka 2.8)."""

_MAX_SHORT = 0x7FFF


class MetadataRecordError(ValueError):
    """A metadata record (or a versioned record payload) that cannot be encoded or decoded; says why."""


RegisterBrokerRecord = define_data("RegisterBrokerRecord")
UnregisterBrokerRecord = define_data("UnregisterBrokerRecord")
TopicRecord = define_data("TopicRecord")
PartitionRecord = define_data("PartitionRecord")
ConfigRecord = define_data("ConfigRecord")
PartitionChangeRecord = define_data("PartitionChangeRecord")
FenceBrokerRecord = define_data("FenceBrokerRecord")
UnfenceBrokerRecord = define_data("UnfenceBrokerRecord")
RemoveTopicRecord = define_data("RemoveTopicRecord")
FeatureLevelRecord = define_data("FeatureLevelRecord")
NoOpRecord = define_data("NoOpRecord")
AccessControlEntryRecord = define_data("AccessControlEntryRecord")
RemoveAccessControlEntryRecord = define_data("RemoveAccessControlEntryRecord")
UserScramCredentialRecord = define_data("UserScramCredentialRecord")
RemoveUserScramCredentialRecord = define_data("RemoveUserScramCredentialRecord")
ProducerIdsRecord = define_data("ProducerIdsRecord")


def record_type(record: ApiData | type[ApiData]) -> int:
    """The metadata record type (Kafka's apiKey) of a record or record class."""
    schema = record if isinstance(record, type) else type(record)
    key = getattr(schema, "json", {}).get("apiKey")
    if key is None:
        raise MetadataRecordError(f"{schema.__name__} has no metadata record type (no apiKey in its schema)")
    return int(key)


def _registry(*classes: type[ApiData]) -> dict[int, type[ApiData]]:
    table: dict[int, type[ApiData]] = {}
    for schema in classes:
        key = record_type(schema)
        if key in table:
            raise ValueError(f"{schema.__name__} and {table[key].__name__} share record type {key}")
        table[key] = schema
    return dict(sorted(table.items()))


METADATA_RECORD_TYPES: dict[int, type[ApiData]] = _registry(
    RegisterBrokerRecord, UnregisterBrokerRecord, TopicRecord, PartitionRecord, ConfigRecord,
    PartitionChangeRecord, FenceBrokerRecord, UnfenceBrokerRecord, RemoveTopicRecord,
    FeatureLevelRecord, NoOpRecord, AccessControlEntryRecord, RemoveAccessControlEntryRecord, ProducerIdsRecord,
    UserScramCredentialRecord, RemoveUserScramCredentialRecord,
)
"""Record type (apiKey) -> record class, for every metadata record this project reads and writes."""

_REGISTERED = frozenset(METADATA_RECORD_TYPES.values())


def encode_metadata_record(record: ApiData) -> bytes:
    """The frame of one metadata record at the version it was built with (`Record(version=...)`)."""
    schema = type(record)
    if record.version == 0 and (schema is PartitionRecord or schema is TopicRecord):
        try:  # the specialised encoders (see the end of this module); the engine says what is wrong
            if schema is PartitionRecord:
                return encode_partition_v0(record.partition_id, record.topic_id, record.replicas, record.isr,
                                           record.removing_replicas, record.adding_replicas, record.leader,
                                           record.leader_recovery_state, record.leader_epoch,
                                           record.partition_epoch)  # fmt: skip
            return encode_topic_v0(record.name, record.topic_id, record.topic_epoch)
        except (struct.error, TypeError, AttributeError, UnicodeError, OverflowError):
            pass
    if schema not in _REGISTERED:
        raise MetadataRecordError(f"{schema.__name__} is not a registered metadata record class")
    version = record.version
    if version is None:
        raise MetadataRecordError(f"{schema.__name__} has no version: build it with version=...")
    _check_version(schema, version)
    header = b"".join(UnsignedVarInt32.encode(value) for value in (FRAME_VERSION, record_type(schema), version))
    return header + encode_payload(record, version, error=MetadataRecordError)


def decode_metadata_record(data: bytes | bytearray | memoryview) -> ApiData:
    """The record in one metadata record frame; MetadataRecordError names what is wrong with it."""
    data = bytes(data)
    reader = _ExactReader(data, MetadataRecordError, "metadata record frame")
    frame_version = _read_short_uvarint(reader, "frame version")
    if frame_version == 0:
        raise MetadataRecordError("frame version 0 is the KRaft preview format of Kafka 2.8, which is not supported")
    if frame_version != FRAME_VERSION:
        raise MetadataRecordError(f"unknown frame version {frame_version} (only {FRAME_VERSION} is supported)")
    key = _read_short_uvarint(reader, "record type")
    version = _read_short_uvarint(reader, "record version")
    schema = METADATA_RECORD_TYPES.get(key)
    if schema is None:
        raise MetadataRecordError(f"unknown metadata record type {key}")
    _check_version(schema, version)
    return decode_payload(schema, data[reader.tell():], version, error=MetadataRecordError)


# ---------------------------------------------------------------------------------------------
# The fast path: which entity a record is about, without the schema engine.


class MetadataRecordType(IntEnum):
    """The metadata record types (Kafka's apiKey of each record schema) this project reads."""

    REGISTER_BROKER = 0
    UNREGISTER_BROKER = 1
    TOPIC = 2
    PARTITION = 3
    CONFIG = 4
    PARTITION_CHANGE = 5
    FENCE_BROKER = 7
    UNFENCE_BROKER = 8
    REMOVE_TOPIC = 9
    USER_SCRAM_CREDENTIAL = 11
    FEATURE_LEVEL = 12
    PRODUCER_IDS = 15
    ACCESS_CONTROL_ENTRY = 18
    REMOVE_ACCESS_CONTROL_ENTRY = 19
    NO_OP = 20
    REMOVE_USER_SCRAM_CREDENTIAL = 22


class RecordKey(NamedTuple):
    """What a metadata record is about, read by `metadata_record_key`.

    `key` identifies the entity, by record type:

    ====================================================  ======================================
    RegisterBroker, UnregisterBroker, FenceBroker,         the broker id (int)
    UnfenceBroker
    Topic, RemoveTopic                                     the topic id (uuid.UUID)
    Partition, PartitionChange                             (topic id, partition id)
    Config                                                 (resource type, resource name, name)
    FeatureLevel                                           the feature name (str)
    AccessControlEntry, RemoveAccessControlEntry           the ACL id (uuid.UUID)
    UserScramCredential, RemoveUserScramCredential         (user name, mechanism type)
    ProducerIds (KIP-730), NoOp                            None
    ====================================================  ======================================

    A zero topic id is `ZERO_UUID` here (Kafka's Uuid.ZERO_UUID), where the schema engine
    reads it as None. `deletes` is True for the records that remove their entity:
    UnregisterBroker, RemoveTopic, RemoveAccessControlEntry, RemoveUserScramCredential, and a
    ConfigRecord whose Value is null (for which the Value's length prefix, right after the identity
    fields, is read too).
    """

    record_type: MetadataRecordType
    key: Any
    deletes: bool = False


ZERO_UUID = uuid.UUID(int=0)

_INT32 = struct.Struct(">i")
_INT8 = struct.Struct(">b")
_UUID_SIZE = 16
_UUID_CACHE: dict[bytes, uuid.UUID] = {}
_UUID_CACHE_SIZE = 1 << 16
_RECORD_TYPES = {int(member): member for member in MetadataRecordType}
_MAX_VERSIONS = {int(key): schema.valid_versions[1] for key, schema in METADATA_RECORD_TYPES.items()}


def metadata_record_key(value: bytes | bytearray | memoryview) -> RecordKey:
    """The record type and entity key of one metadata record frame, without decoding the rest.

    Reads the three header varints and the identity fields only (see `RecordKey`), so it costs a
    microsecond or two where `decode_metadata_record` costs tens. The fields it reads are checked
    as strictly as the decoder checks them (frame version, known type and version, no null or
    cut-off identity field, valid UTF-8 in the names it returns); what follows them is not
    looked at, so a frame damaged after its identity fields is only refused by the full decoder.
    Raises MetadataRecordError saying what is wrong.
    """
    if type(value) is not bytes:
        value = bytes(value)
    size = len(value)
    # Fast path: the three header varints of every record Kafka writes fit one byte each.
    if size >= 3 and value[0] == FRAME_VERSION and value[1] < 0x80 and value[2] < 0x80:
        key, version, pos = value[1], value[2], 3
    else:
        key, version, pos = _read_header(value)
    record_type = _RECORD_TYPES.get(key)
    if record_type is None:
        raise MetadataRecordError(f"unknown metadata record type {key}")
    if version > _MAX_VERSIONS[key]:
        name = METADATA_RECORD_TYPES[key].__name__
        raise MetadataRecordError(f"{name} v{version} is not supported (versions 0-{_MAX_VERSIONS[key]})")
    try:
        if key in (3, 5):  # Partition, PartitionChange: PartitionId int32, TopicId uuid
            partition = _INT32.unpack_from(value, pos)[0]
            return RecordKey(record_type, (_uuid_at(value, pos + 4), partition))
        if key in (0, 1, 7, 8):  # the broker records: BrokerId / Id int32 first
            return RecordKey(record_type, _INT32.unpack_from(value, pos)[0], key == 1)
        if key == 2:  # Topic: Name (compact string), then TopicId
            return RecordKey(record_type, _uuid_at(value, _skip_string(value, pos, "TopicRecord.Name")))
        if key == 9:  # RemoveTopic: TopicId
            return RecordKey(record_type, _uuid_at(value, pos), True)
        if key == 4:  # Config: ResourceType int8, ResourceName, Name, Value (nullable)
            resource_type = _INT8.unpack_from(value, pos)[0]
            resource_name, pos = _read_string(value, pos + 1, "ConfigRecord.ResourceName")
            name, pos = _read_string(value, pos, "ConfigRecord.Name")
            value_length, _ = decode_uvarint(value, pos)
            return RecordKey(record_type, (resource_type, resource_name, name), value_length == 0)
        if key == 18 or key == 19:  # (Remove)AccessControlEntry: Id
            return RecordKey(record_type, _uuid_at(value, pos), key == 19)
        if key == 11 or key == 22:  # (Remove)UserScramCredential: Name, Mechanism int8
            name, pos = _read_string(value, pos, "UserScramCredentialRecord.Name")
            return RecordKey(record_type, (name, _INT8.unpack_from(value, pos)[0]), key == 22)
        if key == 12:  # FeatureLevel: Name
            return RecordKey(record_type, _read_string(value, pos, "FeatureLevelRecord.Name")[0])
        return RecordKey(record_type, None)  # ProducerIds (one cluster-wide counter), NoOp
    except (struct.error, TruncatedVarintError):
        name = METADATA_RECORD_TYPES[key].__name__
        raise MetadataRecordError(f"{name} v{version} is truncated: its identity fields end past byte {size}") from None
    except VarintTooLongError as exc:
        name = METADATA_RECORD_TYPES[key].__name__
        raise MetadataRecordError(f"{name} v{version}: a string length is not a valid varint: {exc.reason}") from None


def _read_header(value: bytes) -> tuple[int, int, int]:
    """(record type, version, position after) of a frame header the fast path could not read."""
    fields = []
    pos = 0
    for what in ("frame version", "record type", "record version"):
        try:
            field, pos = decode_uvarint(value, pos)
        except VarintError as exc:
            if pos >= len(value):
                raise MetadataRecordError(f"metadata record frame is truncated: no {what} ({exc.reason})") from None
            raise MetadataRecordError(f"{what} is not a valid unsigned varint: {exc.reason}") from None
        if field > _MAX_SHORT:
            raise MetadataRecordError(f"{what} {field} is out of range 0-{_MAX_SHORT}")
        if not fields:
            if field == 0:
                raise MetadataRecordError(
                    "frame version 0 is the KRaft preview format of Kafka 2.8, which is not supported")
            if field != FRAME_VERSION:
                raise MetadataRecordError(f"unknown frame version {field} (only {FRAME_VERSION} is supported)")
        fields.append(field)
    return fields[1], fields[2], pos


def _uuid_at(value: bytes, pos: int) -> uuid.UUID:
    """The uuid at `pos`, shared with earlier records of the same id: a topic's id comes back in
    each of its partitions' records, and building a UUID costs more than reading the rest."""
    raw = value[pos : pos + _UUID_SIZE]
    found = _UUID_CACHE.get(raw)
    if found is None:
        if len(raw) != _UUID_SIZE:
            raise struct.error("uuid cut off")
        if len(_UUID_CACHE) >= _UUID_CACHE_SIZE:
            _UUID_CACHE.clear()
        found = _UUID_CACHE[raw] = uuid_from_bytes(raw)
    return found


_new_object = object.__new__
_set_slot = object.__setattr__
_UNKNOWN_SAFETY = uuid.SafeUUID.unknown


def uuid_from_bytes(raw: bytes) -> uuid.UUID:
    """`uuid.UUID(bytes=raw)` for 16 bytes, four times faster: the UUID's two slots set directly,
    as its constructor sets them after checking arguments this caller does not pass (a snapshot
    builds 100,000 topic ids)."""
    made = _new_object(uuid.UUID)
    _set_slot(made, "int", int.from_bytes(raw))
    _set_slot(made, "is_safe", _UNKNOWN_SAFETY)
    return made


def _string_bounds(value: bytes, pos: int, what: str) -> tuple[int, int]:
    """Start and end of the non-null compact string at `pos`."""
    length, pos = decode_uvarint(value, pos)
    if length == 0:
        raise MetadataRecordError(f"{what} is null, which Kafka does not allow")
    end = pos + length - 1
    if end > len(value):
        raise struct.error("string cut off")
    return pos, end


def _skip_string(value: bytes, pos: int, what: str) -> int:
    return _string_bounds(value, pos, what)[1]


def _read_string(value: bytes, pos: int, what: str) -> tuple[str, int]:
    start, end = _string_bounds(value, pos, what)
    try:
        return value[start:end].decode("utf-8"), end
    except UnicodeDecodeError as exc:
        raise MetadataRecordError(f"{what} is not valid UTF-8: {exc.reason} at byte {start + exc.start}") from None


def encode_payload(message: ApiData, version: int, *, error: type[ValueError] = MetadataRecordError) -> bytes:
    """A versioned data record in its own format, without the record being changed.

    kafka-python's `ApiData.encode(version=...)` stores the version in the record; this does not.
    Nulls in fields Kafka never allows to be null are refused here, so that nothing is written
    that the decoder (Kafka's or ours) would refuse to read back.
    """
    schema = type(message)
    _check_nulls(schema._struct, message, version, schema.__name__, error)
    flexible = schema.flexible_version_q(version)
    try:
        return schema._struct.encode(message, version=version, compact=flexible, tagged=flexible)
    except (struct.error, TypeError, ValueError, AttributeError, NotImplementedError) as exc:
        # The engine's own complaints: an int out of its type's range, a value of the wrong type,
        # a nested struct left unset.
        raise error(f"{schema.__name__} v{version} cannot be encoded: {exc!r}") from exc


def decode_payload(
    schema: type[ApiData], payload: bytes, version: int, *, error: type[ValueError] = MetadataRecordError
) -> ApiData:
    """A versioned data record that must fill `payload` exactly; `error` is raised for any fault.

    The callers (metadata records, control records) each name their failures with their own
    exception class, all ValueErrors.
    """
    name = f"{schema.__name__} v{version}"
    reader = _ExactReader(payload, error, f"{name} payload")
    try:
        message = schema.decode(reader, version=version, header=False)
    except error:
        raise
    except (ValueError, AssertionError, struct.error) as exc:
        # ValueError: bad UTF-8, an over-long varint; AssertionError: kafka-python asserts that a
        # nested struct inside a tagged field has no tagged fields of its own.
        raise error(f"{name} payload does not parse: {exc}") from None
    leftover = len(payload) - reader.tell()
    if leftover:
        raise error(f"{leftover} byte(s) of garbage after the {name} payload")
    _check_nulls(schema._struct, message, version, schema.__name__, error)
    return message


def _check_version(schema: type[ApiData], version: int) -> None:
    low, high = schema.valid_versions
    if not low <= version <= high:
        raise MetadataRecordError(f"{schema.__name__} v{version} is not supported (versions {low}-{high})")


class _ExactReader(io.BytesIO):
    """A byte reader that raises instead of returning fewer bytes than asked for.

    kafka-python decodes from any object with `read`, and treats a short read as data.
    """

    def __init__(self, data: bytes, error: type[ValueError], what: str) -> None:
        super().__init__(data)
        self._error = error
        self._what = what

    def read(self, size: int | None = -1) -> bytes:
        start = self.tell()
        chunk = super().read(size)
        if size is not None and size >= 0 and len(chunk) < size:
            raise self._error(
                f"{self._what} is truncated: {size} byte(s) needed at offset {start}, {len(chunk)} left")
        return chunk


def _read_short_uvarint(reader: _ExactReader, what: str) -> int:
    """An unsigned varint that must fit Kafka's int16, as the frame's three header fields do."""
    try:
        value = UnsignedVarInt32.decode(reader)
    except ValueError as exc:
        if isinstance(exc, MetadataRecordError):
            raise
        raise MetadataRecordError(f"{what} is not a valid unsigned varint: {exc}") from None
    if not 0 <= value <= _MAX_SHORT:
        raise MetadataRecordError(f"{what} {value} is out of range 0-{_MAX_SHORT}")
    return value


def _check_nulls(struct_field: StructField, item: Any, version: int, path: str, error: type[ValueError]) -> None:
    """Refuse null strings, bytes and arrays where the version does not allow null, as Kafka does."""
    for field, value in _field_values(struct_field, item, version):
        where = f"{path}.{field.name}"
        if value is None:
            if _null_forbidden(field, version):
                raise error(f"{where} is null, which v{version} does not allow")
        elif field.is_struct_array():
            for index, element in enumerate(value):
                _check_nulls(field.array_of, element, version, f"{where}[{index}]", error)
        elif field.is_struct():
            _check_nulls(field, value, version, where, error)
        elif field.is_array() and _is_variable(field.array_of) and any(element is None for element in value):
            raise error(f"{where} holds a null element, which Kafka does not allow")


def _field_values(struct_field: StructField, item: Any, version: int) -> list[tuple[BaseField, Any]]:
    """The in-version fields of a struct item and their values, for every item form the engine encodes.

    Besides objects with attributes, kafka-python encodes dicts, tuples in untagged-field order
    (tagged values in a trailing dict) and, for single-field structs, the bare value.
    """
    untagged = struct_field.untagged_fields(version)
    tagged = [field for field in struct_field.fields.values()
              if field.for_version_q(version) and field.tagged_field_q(version)]
    if isinstance(item, dict):
        values = [(field, item.get(field.name)) for field in untagged]
        return values + [(field, item.get(field.name, field.default)) for field in tagged]
    if isinstance(item, tuple):
        tags = item[-1] if len(item) > len(untagged) and isinstance(item[-1], dict) else {}
        values = [(field, item[index] if index < len(item) else None) for index, field in enumerate(untagged)]
        return values + [(field, tags.get(field.name, field.default)) for field in tagged]
    if isinstance(item, (str, int, float, bytes)) and len(untagged) == 1:
        return [(untagged[0], item)]
    return [(field, getattr(item, field.name, None)) for field in untagged + tagged]


def _is_variable(field: BaseField) -> bool:
    return field.type_str in ("string", "bytes", "records")


def _null_forbidden(field: BaseField, version: int) -> bool:
    """Null is a fault only for strings, bytes and arrays; a null uuid is the zero uuid, a null tagged struct absent."""
    if field.nullable_for_version_q(version):
        return False
    return field.is_array() or _is_variable(field)


# -- compiled fast paths (snapshots of a million records) ----------------------------------------


def decode_metadata_record_fast(value: bytes) -> ApiData:
    """The metadata record in `value`, as `decode_metadata_record` decodes it, in a few microseconds.

    `decode_metadata_record` costs ~28 us for a PartitionRecord, 30 s for a snapshot of a million
    partitions. This runs the schema engine's compiled decoder for the record's class and version
    (the path `quorum.wire.protocol.decode_body` takes for request bodies) and accepts the result
    only when it filled `value` exactly and has no null where the schema forbids one; anything
    else -- a frame header in more than one byte per varint, a record with nested structs, any
    doubt -- goes through `decode_metadata_record`, whose verdict (a record or a
    MetadataRecordError) is final. So both accept the same bytes and agree on every field
    (tests/image/test_delta.py checks it on random bytes).
    """
    if len(value) >= 3 and value[0] == FRAME_VERSION and value[1] < 0x80 and value[2] < 0x80:
        decoder = _DECODERS.get((value[1], value[2]))
        if decoder is None:
            decoder = _DECODERS[value[1], value[2]] = _compile_decoder(value[1], value[2])
        if decoder is not _STRICT:
            compiled, required = decoder
            try:
                # The engine slices without bounds checks, so a length that runs past the end (a tagged
                # field's size, say) would be cut silently; behind a guard byte it ends past `value`.
                record, end = compiled(value + _GUARD, 3)
            except Exception:  # struct.error, IndexError, UnicodeDecodeError, ...: the strict path says what
                pass
            else:
                if end == len(value) and None not in required(record):
                    return record
    return decode_metadata_record(value)


_STRICT: Any = object()
_GUARD = b"\xff"
_NOTHING_REQUIRED: Callable[[ApiData], tuple[()]] = lambda record: ()  # noqa: E731
_DECODERS: dict[tuple[int, int], Any] = {}
_NESTED = frozenset({MetadataRecordType.REGISTER_BROKER})  # nested struct arrays: strict path only


def _compile_decoder(key: int, version: int) -> Any:
    schema = METADATA_RECORD_TYPES.get(key)
    if schema is None or key in _NESTED or not schema.valid_versions[0] <= version <= schema.valid_versions[1]:
        return _STRICT
    struct = schema._struct
    names = [field.name for field in struct.untagged_fields(version)
             if (field.is_array() or field.type_str in ("string", "bytes", "records"))
             and not field.nullable_for_version_q(version)]  # fmt: skip
    # The fields that must not be null, as one tuple: attrgetter of one name returns the bare value.
    required = operator.attrgetter(*names, "_version") if names else _NOTHING_REQUIRED
    return struct.compiled_decode_from(version, compact=True, tagged=True, data_class=schema), required


class CompiledRecordEncoder:
    """`encode_metadata_record` for one record class at one version, five times faster.

    A snapshot of a million partitions is a million PartitionRecords: through
    `encode_metadata_record` (~22 us each, most of it its null checks and the engine's generic
    path) that is 23 s of writing. This runs the engine's compiled encoder (the path
    `quorum.wire.metadata_response.encode_topics` takes) on the fields, which the image never
    leaves null, into a per-thread buffer, after the frame header (three one-byte varints).
    tests/image/test_image_state.py checks the bytes against `encode_metadata_record`.
    """

    def __init__(self, schema: type[ApiData], version: int) -> None:
        self._encode = schema._struct.compiled_encode_into(version, compact=True, tagged=True)
        self._header = bytes((FRAME_VERSION, record_type(schema), version))
        self._local = threading.local()

    def __call__(self, **fields: object) -> bytes:
        out = getattr(self._local, "out", None)
        if out is None:
            out = self._local.out = EncodeBuffer(256)
        header = self._header
        out.pos = len(header)
        out.buf[: out.pos] = header
        self._encode(SimpleNamespace(**fields), out)
        return memoryview(out.buf)[: out.pos].tobytes()


# -- specialised codecs for the two records snapshots are made of ---------------------------------
#
# A snapshot of 100,000 topics x 10 partitions is 100,000 TopicRecords and a million
# PartitionRecords, and the schema engine spends 5-20 us on each. These read and write the v0 form
# the project (and Kafka) writes with struct, in about a microsecond, and give up (None, False, or
# an exception the caller turns into the engine's verdict) on anything else. tests/wire/
# test_metadata_records.py checks them against the engine on random records and random bytes.

_PARTITION_V0_HEAD = bytes((FRAME_VERSION, MetadataRecordType.PARTITION, 0))
_TOPIC_V0_HEAD = bytes((FRAME_VERSION, MetadataRecordType.TOPIC, 0))
_PARTITION_LISTS_AT = 3 + 4 + _UUID_SIZE  # the header, PartitionId, TopicId: then Replicas
_PARTITION_TAIL = struct.Struct(">iii")  # Leader, LeaderEpoch, PartitionEpoch
_INT32_ARRAYS = [struct.Struct(f">{count}i") for count in range(0x7F)]
_TOPIC_EPOCH_TAG = b"\x01" + UnsignedVarInt32.encode(TOPIC_EPOCH_TAG) + b"\x04"  # one tagged field, 4 bytes
_NO_TAGS = b"\x00"
_PARTITION_LAYOUTS: dict[tuple[int, int, int, int], struct.Struct] = {}


def _plain_partition_v0_pattern() -> re.Pattern[bytes]:
    """The plain PartitionRecord v0 frame as a regular expression, matched in C: a frame is checked
    ten times faster than by a Python loop over its four lists."""
    lists = [re.escape(bytes((count,))) + b".{%d}" % (4 * count - 4) for count in range(1, 0x80)]
    a_list = b"(?:" + b"|".join(lists) + b")"
    return re.compile(re.escape(_PARTITION_V0_HEAD) + b".{%d}" % (_PARTITION_LISTS_AT - 3) + a_list * 4 + b".{12}\x00",
                      re.DOTALL)  # fmt: skip


PLAIN_PARTITION_V0 = _plain_partition_v0_pattern()
"""`PLAIN_PARTITION_V0.fullmatch(value)` is `plain_partition_v0(value)` for hot loops."""


def plain_partition_v0(value: bytes) -> bool:
    """Whether `value` is a PartitionRecord v0 frame in the plain form: one-byte header varints,
    four non-null replica lists of fewer than 128 ids each, and no tagged field (so a
    LeaderRecoveryState of 0). Such a frame decodes (`decode_plain_partition_v0`) exactly as the
    engine decodes it, and `encode_partition_v0` gives its bytes back."""
    return PLAIN_PARTITION_V0.fullmatch(value) is not None


def decode_plain_partition_v0(value: bytes) -> tuple[int, tuple[tuple[int, ...], ...], int, int, int]:
    """(PartitionId, (Replicas, Isr, RemovingReplicas, AddingReplicas), Leader, LeaderEpoch,
    PartitionEpoch) of a frame `plain_partition_v0` accepted; the TopicId is bytes 7-22."""
    arrays = _INT32_ARRAYS
    pos = _PARTITION_LISTS_AT + 1
    count = value[pos - 1] - 1
    replicas = arrays[count].unpack_from(value, pos)
    pos += 4 * count + 1
    count = value[pos - 1] - 1
    isr = arrays[count].unpack_from(value, pos)
    pos += 4 * count + 1
    count = value[pos - 1] - 1
    removing = arrays[count].unpack_from(value, pos)
    pos += 4 * count + 1
    count = value[pos - 1] - 1
    adding = arrays[count].unpack_from(value, pos)
    leader, leader_epoch, partition_epoch = _PARTITION_TAIL.unpack_from(value, pos + 4 * count)
    return _INT32.unpack_from(value, 3)[0], (replicas, isr, removing, adding), leader, leader_epoch, partition_epoch


def encode_partition_v0(partition_id: int, topic_id: uuid.UUID | None, replicas: Sequence[int], isr: Sequence[int],
                        removing: Sequence[int], adding: Sequence[int], leader: int, leader_recovery_state: int,
                        leader_epoch: int, partition_epoch: int) -> bytes:  # fmt: skip
    """The PartitionRecord v0 frame of these fields, as the engine encodes it. Raises struct.error
    (a value out of range, not an int, a list of 127 ids or more), TypeError (a null list) or
    AttributeError (a null topic id) for what it does not write; `encode_metadata_record` then
    lets the engine say what is wrong."""
    shape = (len(replicas), len(isr), len(removing), len(adding))
    layout = _PARTITION_LAYOUTS.get(shape)
    if layout is None:
        if max(shape) >= 0x7F:
            raise struct.error("a replica list of 127 ids or more: the engine writes it")
        r, i, m, a = shape
        layout = _PARTITION_LAYOUTS[shape] = struct.Struct(f">3si16sB{r}iB{i}iB{m}iB{a}iiii")
    r, i, m, a = shape
    frame = layout.pack(_PARTITION_V0_HEAD, partition_id, topic_id.bytes, r + 1, *replicas, i + 1, *isr,  # type: ignore[union-attr]
                        m + 1, *removing, a + 1, *adding, leader, leader_epoch, partition_epoch)  # fmt: skip
    if leader_recovery_state == 0:
        return frame + _NO_TAGS
    return frame + b"\x01\x00\x01" + _INT8.pack(leader_recovery_state)  # tag 0, one byte


def decode_plain_topic_v0(value: bytes) -> tuple[str, uuid.UUID, int] | None:
    """(Name, TopicId, TopicEpoch) of a TopicRecord v0 frame in the form the project writes (a
    name under 127 bytes, no tagged field or the TopicEpoch alone), as the engine decodes it (a
    zero TopicId as `ZERO_UUID`); None for anything else, which the engine must read."""
    if not value.startswith(_TOPIC_V0_HEAD) or len(value) < 21:
        return None
    length = value[3] - 1
    if not 0 <= length < 0x7E:
        return None
    at = 4 + length
    tail = value[at + _UUID_SIZE :]
    if tail == _NO_TAGS:
        epoch = -1
    elif len(tail) == 8 and tail.startswith(_TOPIC_EPOCH_TAG):
        epoch = _INT32.unpack_from(tail, 4)[0]
    else:
        return None
    try:
        name = value[4:at].decode("utf-8")
    except UnicodeDecodeError:
        return None
    return name, uuid_from_bytes(value[at : at + _UUID_SIZE]), epoch  # ids of new topics: no use for the cache


def encode_topic_v0(name: str, topic_id: uuid.UUID | None, topic_epoch: int) -> bytes:
    """The TopicRecord v0 frame of these fields, as the engine encodes it; raises for what it does
    not write (see `encode_partition_v0`), a name of 127 bytes or more included."""
    encoded = name.encode("utf-8")
    if len(encoded) >= 0x7E:
        raise struct.error("a name of 126 bytes or more: the engine writes it")
    frame = _TOPIC_V0_HEAD + bytes((len(encoded) + 1,)) + encoded + topic_id.bytes  # type: ignore[union-attr]
    if topic_epoch == -1:
        return frame + _NO_TAGS
    return frame + _TOPIC_EPOCH_TAG + _INT32.pack(topic_epoch)


__all__ = [
    "FRAME_VERSION", "METADATA_RECORD_TYPES", "TOPIC_EPOCH_TAG", "ZERO_UUID", "MetadataRecordError",
    "MetadataRecordType", "RecordKey", "AccessControlEntryRecord", "RemoveAccessControlEntryRecord",
    "UserScramCredentialRecord", "RemoveUserScramCredentialRecord",
    "PLAIN_PARTITION_V0", "ConfigRecord", "FeatureLevelRecord", "FenceBrokerRecord", "NoOpRecord",
    "PartitionChangeRecord", "PartitionRecord", "RegisterBrokerRecord", "RemoveTopicRecord", "TopicRecord",
    "ProducerIdsRecord", "UnfenceBrokerRecord",
    "UnregisterBrokerRecord",
    "CompiledRecordEncoder", "decode_metadata_record", "decode_metadata_record_fast", "decode_payload",
    "decode_plain_partition_v0", "decode_plain_topic_v0", "encode_metadata_record", "encode_partition_v0",
    "encode_payload", "encode_topic_v0", "metadata_record_key", "plain_partition_v0", "record_type", "uuid_from_bytes",
]
