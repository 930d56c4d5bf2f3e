"""KIP-631 metadata records: the value of each record in the `__cluster_metadata` log and snapshots.

The frame is what Apache Kafka's MetadataRecordSerde writes: an unsigned varint frame version
(always 1), an unsigned varint record type (the schema's apiKey), an unsigned varint record
version, then the record in the flexible (compact, tagged) encoding of that version. Decoding
is strict as Kafka's is: an unknown frame version, type or version, a payload that ends early
and bytes left over after the payload are all refused with a `MetadataRecordError`.

kafka-python's engine reads past the end of its input without complaint (a short read just
yields fewer bytes), so payloads are decoded here through a reader that refuses short reads,
and then checked for nulls in fields that Kafka never allows to be null.
"""

from __future__ import annotations

import io
import struct
from typing import Any

from kafka.protocol.api_data import ApiData
from kafka.protocol.schemas import BaseField, StructField
from kafka.protocol.schemas.fields.codecs import UnsignedVarInt32

from quorum.wire.schema import define_data

FRAME_VERSION = 1
"""The only metadata record frame version Kafka reads (0 was the KRaft preview in Kafka 2.8)."""

TOPIC_EPOCH_TAG = 10232
"""Tag number of the KIP-232 topic_epoch in TopicRecord (and in MetadataResponse topics)."""

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
    FeatureLevelRecord, NoOpRecord,
)
"""Record type (apiKey) -> record class, for every metadata record this project reads and writes."""

_REGISTERED = frozenset(METADATA_RECORD_TYPES.values())


def encode_metadata_record(record: ApiData) -> bytes:
    """The frame of one metadata record at the version it was built with (`Record(version=...)`)."""
    schema = type(record)
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


__all__ = [
    "FRAME_VERSION", "METADATA_RECORD_TYPES", "TOPIC_EPOCH_TAG", "MetadataRecordError",
    "ConfigRecord", "FeatureLevelRecord", "FenceBrokerRecord", "NoOpRecord", "PartitionChangeRecord",
    "PartitionRecord", "RegisterBrokerRecord", "RemoveTopicRecord", "TopicRecord", "UnfenceBrokerRecord",
    "UnregisterBrokerRecord",
    "decode_metadata_record", "decode_payload", "encode_metadata_record", "encode_payload", "record_type",
]
