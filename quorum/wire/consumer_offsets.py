"""The records of the `__consumer_offsets` log: committed offsets and group metadata, as Kafka writes them.

Each record's key and value start with an int16 version and go on with the struct of that
version, exactly as Kafka's GroupMetadataManager (and its 4.x coordinator records) lay them out:

* key version 0 or 1: OffsetCommitKey (group, topic, partition) -> OffsetCommitValue;
* key version 2: GroupMetadataKey (group) -> GroupMetadataValue;
* a null value is a tombstone: the offset, or the whole group, was deleted.

Values are written at the version Kafka writes (OffsetCommitValue v3, v1 with an explicit expiry,
GroupMetadataValue v3), except that a commit carrying KIP-232 internal metadata is written at
v4, the first flexible version, so that its topic_epoch can ride in the tagged field 10232, and so
is a commit to a topic whose id the coordinator knows (tagged field 10233): an Apache Kafka broker
reading this log skips the tags and keeps every other field. The topic id is what lets a coordinator
that loads the log after a topic was deleted, or deleted and created again, drop that topic's offsets.

Key versions 3 to 8 are Kafka 4's KIP-848 consumer group records (`consumer_group_records`); higher
ones (share groups and later) are not used here, and decoding them raises `UnknownRecordTypeError`
so a loader can skip them while refusing anything that is really corrupt.
"""

from __future__ import annotations

import struct
import uuid
from dataclasses import dataclass
from typing import Any

from kafka.protocol.api_data import ApiData

from quorum.wire import consumer_group_records
from quorum.wire.consumer_group_records import ConsumerGroupKey, ConsumerGroupValue
from quorum.wire.metadata_records import decode_payload, encode_payload
from quorum.wire.schema import define_data
from quorum.wire.tags import TOPIC_EPOCH_TAG, TOPIC_ID_TAG

OffsetCommitKey = define_data("OffsetCommitKey")
OffsetCommitValue = define_data("OffsetCommitValue")
GroupMetadataKey = define_data("GroupMetadataKey")
GroupMetadataValue = define_data("GroupMetadataValue")

OFFSET_COMMIT_KEY_VERSION = 1
GROUP_METADATA_KEY_VERSION = 2
OFFSET_COMMIT_VALUE_VERSION = 3
"""What Kafka writes for a commit without an explicit expiry time."""
OFFSET_COMMIT_VALUE_EXPIRY_VERSION = 1
OFFSET_COMMIT_VALUE_TAGGED_VERSION = 4
"""The first flexible version: the one that can carry the KIP-232 topic_epoch tag."""
GROUP_METADATA_VALUE_VERSION = 3

_ZERO_UUID = uuid.UUID(int=0)

_VERSION = struct.Struct(">h")


class ConsumerOffsetsRecordError(ValueError):
    """A `__consumer_offsets` record key or value that cannot be decoded (or encoded); says why."""


class UnknownRecordTypeError(ConsumerOffsetsRecordError):
    """A well-formed key of a record type this project does not use (Kafka 4's KIP-848 records)."""


@dataclass(frozen=True, slots=True)
class OffsetKey:
    group: str
    topic: str
    partition: int


@dataclass(frozen=True, slots=True)
class GroupKey:
    group: str


RecordKey = OffsetKey | GroupKey | ConsumerGroupKey


@dataclass(frozen=True, slots=True)
class OffsetValue:
    """One committed offset. `metadata` is the whole committed string; `topic_epoch` is -1 without KIP-232;
    `topic_id` is the id of the topic committed to, None when the coordinator did not know it."""

    offset: int
    leader_epoch: int
    metadata: str
    commit_timestamp: int
    topic_epoch: int = -1
    expire_timestamp: int = -1
    topic_id: uuid.UUID | None = None


@dataclass(frozen=True, slots=True)
class MemberValue:
    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    rebalance_timeout: int
    session_timeout: int
    subscription: bytes
    assignment: bytes


@dataclass(frozen=True, slots=True)
class GroupValue:
    """A classic group's persisted state: what lets its generation and assignments survive a restart."""

    protocol_type: str
    generation: int
    protocol: str | None
    leader: str | None
    current_state_timestamp: int
    members: tuple[MemberValue, ...] = ()


RecordValue = OffsetValue | GroupValue | ConsumerGroupValue


def encode_key(key: RecordKey) -> bytes:
    if isinstance(key, OffsetKey):
        data = OffsetCommitKey(group=key.group, topic=key.topic, partition=key.partition)
        return _versioned(data, OFFSET_COMMIT_KEY_VERSION)
    if isinstance(key, ConsumerGroupKey):
        return _VERSION.pack(key.kind) + consumer_group_records.encode_key(key, ConsumerOffsetsRecordError)
    return _versioned(GroupMetadataKey(group=key.group), GROUP_METADATA_KEY_VERSION)


def encode_value(value: RecordValue | None) -> bytes | None:
    """The value bytes, or None (a tombstone) for None."""
    if value is None:
        return None
    if isinstance(value, GroupValue):
        return _encode_group_value(value)
    if value.topic_epoch >= 0 or value.topic_id is not None:
        version = OFFSET_COMMIT_VALUE_TAGGED_VERSION
    elif value.expire_timestamp >= 0:
        version = OFFSET_COMMIT_VALUE_EXPIRY_VERSION
    else:
        version = OFFSET_COMMIT_VALUE_VERSION
    data = OffsetCommitValue(offset=value.offset, leader_epoch=value.leader_epoch, metadata=value.metadata,
                             commit_timestamp=value.commit_timestamp, expire_timestamp=value.expire_timestamp,
                             topic_epoch=value.topic_epoch, topic_id=value.topic_id)
    return _versioned(data, version)


def _encode_group_value(value: GroupValue) -> bytes:
    member = GroupMetadataValue.MemberMetadata
    members = [member(member_id=m.member_id, group_instance_id=m.group_instance_id, client_id=m.client_id,
                      client_host=m.client_host, rebalance_timeout=m.rebalance_timeout,
                      session_timeout=m.session_timeout, subscription=m.subscription, assignment=m.assignment)
               for m in value.members]
    data = GroupMetadataValue(protocol_type=value.protocol_type, generation=value.generation,
                              protocol=value.protocol, leader=value.leader,
                              current_state_timestamp=value.current_state_timestamp, members=members)
    return _versioned(data, GROUP_METADATA_VALUE_VERSION)


def encode_record(key: RecordKey, value: RecordValue | None) -> tuple[bytes, bytes | None]:
    """The (key, value) bytes of one record; a None value is a tombstone."""
    if isinstance(key, ConsumerGroupKey):
        value_bytes = None if value is None else _VERSION.pack(0) + consumer_group_records.encode_value(
            key, value, ConsumerOffsetsRecordError)  # type: ignore[arg-type]
        return encode_key(key), value_bytes
    if value is not None and isinstance(value, GroupValue) != isinstance(key, GroupKey):
        raise ConsumerOffsetsRecordError(f"{type(value).__name__} cannot be the value of a {type(key).__name__}")
    return encode_key(key), encode_value(value)


def decode_key(data: bytes | bytearray | memoryview) -> RecordKey:
    data = bytes(data)
    fast = _fast_offset_key(data)
    return fast if fast is not None else schema_decode_key(data)


def schema_decode_key(data: bytes) -> RecordKey:
    """`decode_key` by the schema engine alone (what the fast path must agree with)."""
    version, payload = _split(data, "key")
    if version in (0, 1):
        key = decode_payload(OffsetCommitKey, payload, version, error=ConsumerOffsetsRecordError)
        return OffsetKey(key.group, key.topic, key.partition)
    if version == GROUP_METADATA_KEY_VERSION:
        return GroupKey(decode_payload(GroupMetadataKey, payload, version, error=ConsumerOffsetsRecordError).group)
    if version in consumer_group_records.KEY_VERSIONS:
        return consumer_group_records.decode_key(version, payload, ConsumerOffsetsRecordError)
    if version > GROUP_METADATA_KEY_VERSION:
        raise UnknownRecordTypeError(f"record key version {version} is not an offset commit or classic group record")
    raise ConsumerOffsetsRecordError(f"record key version {version} is negative")


def decode_value(key: RecordKey, data: bytes | bytearray | memoryview | None) -> RecordValue | None:
    """The value of a record whose key is `key`; None for a tombstone."""
    if data is None:
        return None
    data = bytes(data)
    if isinstance(key, OffsetKey):
        fast = _fast_offset_value(data)
        if fast is not None:
            return fast
    return schema_decode_value(key, data)


def schema_decode_value(key: RecordKey, data: bytes) -> RecordValue:
    """`decode_value` of a value that is not a tombstone by the schema engine alone."""
    if isinstance(key, ConsumerGroupKey):
        version, payload = _split(data, f"value of key version {key.kind}")
        return consumer_group_records.decode_value(key, version, payload, ConsumerOffsetsRecordError)
    if isinstance(key, OffsetKey):
        version, payload = _split(data, "OffsetCommitValue")
        _check_version(OffsetCommitValue, version)
        v = decode_payload(OffsetCommitValue, payload, version, error=ConsumerOffsetsRecordError)
        topic_id = _or(v, "topic_id", None)
        return OffsetValue(v.offset, _or(v, "leader_epoch", -1), v.metadata, v.commit_timestamp,
                           _or(v, "topic_epoch", -1), _or(v, "expire_timestamp", -1),
                           None if topic_id in (None, _ZERO_UUID) else topic_id)
    version, payload = _split(data, "GroupMetadataValue")
    _check_version(GroupMetadataValue, version)
    g = decode_payload(GroupMetadataValue, payload, version, error=ConsumerOffsetsRecordError)
    members = tuple(MemberValue(m.member_id, _or(m, "group_instance_id", None), m.client_id, m.client_host,
                                m.rebalance_timeout if version >= 1 else m.session_timeout, m.session_timeout,
                                bytes(m.subscription), bytes(m.assignment)) for m in g.members)
    return GroupValue(g.protocol_type, g.generation, g.protocol, g.leader,
                      _or(g, "current_state_timestamp", -1), members)


def decode_record(key: bytes | bytearray | memoryview,
                  value: bytes | bytearray | memoryview | None) -> tuple[RecordKey, RecordValue | None]:
    decoded = decode_key(key)
    return decoded, decode_value(decoded, value)


# -- fast paths ------------------------------------------------------------------------------
# A coordinator replays every commit ever made to its partitions when it loads them (the issue-19
# soak's broker: 71,800 records in 12 s). The schema engine costs ~30 us a record; these read the
# two records a commit writes directly. Anything they do not expect (another version, a null or
# non-UTF-8 string, an unknown tag, a length that does not add up) returns None, and the schema
# engine decodes it, so results and errors are the engine's own.

_KEY_TAIL = struct.Struct(">i")
_VALUE_V3_HEAD = struct.Struct(">hqih")  # version, offset, leader epoch, metadata length
_VALUE_V1_HEAD = struct.Struct(">hqh")  # version, offset, metadata length
_INT64 = struct.Struct(">q")
_INT64_PAIR = struct.Struct(">qq")
_VALUE_V4_HEAD = struct.Struct(">hqi")  # version, offset, leader epoch; then a compact metadata string


def _fast_offset_key(data: bytes) -> OffsetKey | None:
    if len(data) < 10 or data[0] != 0 or data[1] > 1:
        return None
    group_length = int.from_bytes(data[2:4], "big", signed=True)
    topic_at = 4 + group_length
    if group_length < 0 or topic_at + 2 > len(data):
        return None
    topic_length = int.from_bytes(data[topic_at:topic_at + 2], "big", signed=True)
    partition_at = topic_at + 2 + topic_length
    if topic_length < 0 or partition_at + 4 != len(data):
        return None
    try:
        return OffsetKey(data[4:topic_at].decode(), data[topic_at + 2:partition_at].decode(),
                         _KEY_TAIL.unpack_from(data, partition_at)[0])  # fmt: skip
    except UnicodeDecodeError:
        return None


def _fast_offset_value(data: bytes) -> OffsetValue | None:
    try:
        version = _VERSION.unpack_from(data)[0]
        if version == 3:
            _, offset, epoch, length = _VALUE_V3_HEAD.unpack_from(data)
            at = _VALUE_V3_HEAD.size
            if length < 0 or at + length + 8 != len(data):
                return None
            return OffsetValue(offset, epoch, data[at:at + length].decode(), _INT64.unpack_from(data, at + length)[0])
        if version == 1:
            _, offset, length = _VALUE_V1_HEAD.unpack_from(data)
            at = _VALUE_V1_HEAD.size
            if length < 0 or at + length + 16 != len(data):
                return None
            commit, expire = _INT64_PAIR.unpack_from(data, at + length)
            return OffsetValue(offset, -1, data[at:at + length].decode(), commit, -1, expire)
        if version == 4:
            return _fast_offset_value_v4(data)
    except (struct.error, UnicodeDecodeError):
        return None
    return None


def _fast_offset_value_v4(data: bytes) -> OffsetValue | None:
    """v4: compact metadata string, then tagged fields (only TopicEpoch and TopicId, each once)."""
    _, offset, epoch = _VALUE_V4_HEAD.unpack_from(data)
    at = _VALUE_V4_HEAD.size
    length_plus_one, at = _uvarint(data, at)
    if length_plus_one < 1:
        return None
    end = at + length_plus_one - 1
    metadata = data[at:end].decode()
    commit = _INT64.unpack_from(data, end)[0]
    count, at = _uvarint(data, end + 8)
    topic_epoch, topic_id, seen = -1, None, set()
    for _ in range(count):
        tag, at = _uvarint(data, at)
        size, at = _uvarint(data, at)
        if tag in seen or (tag, size) not in ((TOPIC_EPOCH_TAG, 4), (TOPIC_ID_TAG, 16)):
            return None
        seen.add(tag)
        if tag == TOPIC_EPOCH_TAG:
            topic_epoch = _KEY_TAIL.unpack_from(data, at)[0]
        else:
            topic_id = uuid.UUID(bytes=data[at:at + 16]) if len(data) >= at + 16 else None
        at += size
    if at != len(data) or topic_epoch < -1:
        return None
    return OffsetValue(offset, epoch, metadata, commit, topic_epoch, -1,
                       None if topic_id in (None, _ZERO_UUID) else topic_id)


def _uvarint(data: bytes, at: int) -> tuple[int, int]:
    """An unsigned varint of at most 5 bytes at `at`, and where it ends; struct.error past the end."""
    value = shift = 0
    for index in range(at, min(at + 5, len(data))):
        byte = data[index]
        value |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return value, index + 1
        shift += 7
    raise struct.error("varint cut off or longer than 5 bytes")


def _versioned(data: ApiData, version: int) -> bytes:
    return _VERSION.pack(version) + encode_payload(data, version, error=ConsumerOffsetsRecordError)


def _split(data: bytes, what: str) -> tuple[int, bytes]:
    if len(data) < _VERSION.size:
        raise ConsumerOffsetsRecordError(f"{what} of {len(data)} byte(s) is shorter than its int16 version")
    return _VERSION.unpack_from(data)[0], data[_VERSION.size:]


def _check_version(schema: type[ApiData], version: int) -> None:
    low, high = schema.valid_versions
    if not low <= version <= high:
        raise ConsumerOffsetsRecordError(f"{schema.__name__} v{version} is not supported (versions {low}-{high})")


def _or(data: ApiData, name: str, default: Any) -> Any:
    """A field that older versions lack (the engine leaves it unset or None)."""
    value = getattr(data, name, None)
    return default if value is None else value
