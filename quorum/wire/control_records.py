"""Control records: the key and value bytes of the records in a control batch, as Kafka writes them.

The key is an int16 key version (0) and an int16 control record type. Kafka's parser needs at
least those four bytes, refuses a negative key version and reads any other version as 0.

The value of LEADER_CHANGE, SNAPSHOT_HEADER and SNAPSHOT_FOOTER is the message in its flexible
encoding at schema version 0 (Kafka's ControlRecordUtils constants), with no version prefix:
the int16 `Version` field inside each message (`content_version` here) is the content's own
version. The record batch v2 that carries these records (with the control bit set) is
`quorum.wire.records`' business.

KRAFT_VERSION and KRAFT_VOTERS (KIP-853) keys are recognised, but their values are not decoded
here, nor are the transaction markers of ABORT and COMMIT.
"""

from __future__ import annotations

import struct
from enum import IntEnum
from typing import Any

from kafka.protocol.api_data import ApiData

from quorum.wire.metadata_records import decode_payload, encode_payload
from quorum.wire.schema import define_data

CONTROL_KEY_VERSION = 0
"""The control record key version Kafka writes."""

CONTROL_VALUE_VERSION = 0
"""Schema version Kafka encodes and decodes the control record values with."""

_KEY = struct.Struct(">hh")


class ControlRecordError(ValueError):
    """A control record key or value that cannot be encoded or decoded; says why."""


class ControlRecordType(IntEnum):
    """Control record types, by Kafka's type ids."""

    ABORT = 0
    COMMIT = 1
    LEADER_CHANGE = 2
    SNAPSHOT_HEADER = 3
    SNAPSHOT_FOOTER = 4
    KRAFT_VERSION = 5
    KRAFT_VOTERS = 6


def _rename_version_field(json: dict[str, Any]) -> dict[str, Any]:
    """Expose Kafka's `Version` field as `content_version`.

    kafka-python turns a field's name into an attribute and reserves `version` for the schema
    version (the `version=` argument and property of every data class), so a field called
    Version cannot be built or decoded under its own name. The wire format is unchanged.
    """
    for field in json["fields"]:
        if field["name"] == "Version":
            field["name"] = "ContentVersion"
    return json


LeaderChangeMessage = define_data("LeaderChangeMessage", patch=_rename_version_field)
SnapshotHeaderRecord = define_data("SnapshotHeaderRecord", patch=_rename_version_field)
SnapshotFooterRecord = define_data("SnapshotFooterRecord", patch=_rename_version_field)

CONTROL_VALUE_TYPES: dict[ControlRecordType, type[ApiData]] = {
    ControlRecordType.LEADER_CHANGE: LeaderChangeMessage,
    ControlRecordType.SNAPSHOT_HEADER: SnapshotHeaderRecord,
    ControlRecordType.SNAPSHOT_FOOTER: SnapshotFooterRecord,
}
"""Control record type -> class of its value, for the values this module encodes and decodes."""

_TYPE_OF_VALUE = {schema: record_type for record_type, schema in CONTROL_VALUE_TYPES.items()}


def encode_control_key(record_type: ControlRecordType) -> bytes:
    """The four key bytes of a control record of `record_type`."""
    try:
        type_id = ControlRecordType(record_type)
    except ValueError:
        raise ControlRecordError(f"unknown control record type {record_type}") from None
    return _KEY.pack(CONTROL_KEY_VERSION, type_id)


def decode_control_key(key: bytes | bytearray | memoryview | None) -> ControlRecordType:
    """The type of a control record from its key, read as Kafka's ControlRecordType.parse reads it."""
    if key is None or len(key) < _KEY.size:
        size = "no key" if key is None else f"a key of {len(key)} byte(s)"
        raise ControlRecordError(f"a control record key needs at least {_KEY.size} bytes, found {size}")
    version, type_id = _KEY.unpack_from(key)
    if version < 0:
        raise ControlRecordError(f"control record key version {version} is negative: the data is corrupt")
    try:
        return ControlRecordType(type_id)
    except ValueError:
        raise ControlRecordError(f"unknown control record type {type_id}") from None


def encode_control_value(message: ApiData) -> bytes:
    """The value bytes of a LeaderChangeMessage, SnapshotHeaderRecord or SnapshotFooterRecord."""
    if type(message) not in _TYPE_OF_VALUE:
        raise ControlRecordError(f"{type(message).__name__} is not a control record value this module writes")
    return encode_payload(message, CONTROL_VALUE_VERSION, error=ControlRecordError)


def decode_control_value(record_type: ControlRecordType, value: bytes | bytearray | memoryview | None) -> ApiData:
    """The message in the value of a control record of `record_type`."""
    schema = CONTROL_VALUE_TYPES.get(record_type)
    if schema is None:
        raise ControlRecordError(f"the value of a {_type_name(record_type)} control record is not decoded here")
    if value is None:
        raise ControlRecordError(f"a {_type_name(record_type)} control record has no value")
    return decode_payload(schema, bytes(value), CONTROL_VALUE_VERSION, error=ControlRecordError)


def encode_control_record(message: ApiData) -> tuple[bytes, bytes]:
    """Key and value of the control record that carries `message`."""
    value = encode_control_value(message)
    return encode_control_key(_TYPE_OF_VALUE[type(message)]), value


def decode_control_record(
    key: bytes | bytearray | memoryview | None, value: bytes | bytearray | memoryview | None
) -> tuple[ControlRecordType, ApiData]:
    """Type and message of a LEADER_CHANGE, SNAPSHOT_HEADER or SNAPSHOT_FOOTER control record."""
    record_type = decode_control_key(key)
    return record_type, decode_control_value(record_type, value)


def _type_name(record_type: int) -> str:
    try:
        return ControlRecordType(record_type).name
    except ValueError:
        return f"type {record_type}"


__all__ = [
    "CONTROL_KEY_VERSION", "CONTROL_VALUE_TYPES", "CONTROL_VALUE_VERSION", "ControlRecordError",
    "ControlRecordType", "LeaderChangeMessage", "SnapshotFooterRecord", "SnapshotHeaderRecord",
    "decode_control_key", "decode_control_record", "decode_control_value", "encode_control_key",
    "encode_control_record", "encode_control_value",
]
