"""The `__consumer_offsets` record codec and the KIP-232 internal metadata codec: round trips, Kafka's
bytes, and garbage in -> a clean error out."""

from __future__ import annotations

import base64
import contextlib
import json
import struct

import pytest
from hypothesis import given
from hypothesis import strategies as st

from quorum.broker.groups.partition_state import PartitionState
from quorum.wire.consumer_offsets import (
    ConsumerOffsetsRecordError,
    GroupKey,
    GroupValue,
    MemberValue,
    OffsetKey,
    OffsetValue,
    UnknownRecordTypeError,
    decode_key,
    decode_record,
    decode_value,
    encode_key,
    encode_record,
    schema_decode_key,
    schema_decode_value,
)
from quorum.wire.internal_metadata import InternalMetadata, InvalidInternalMetadataError, decode, encode

INT32 = st.integers(-(2**31), 2**31 - 1)
TEXT = st.text(st.characters(exclude_categories=("Cs",)), max_size=20)
MEMBERS = st.builds(MemberValue, TEXT, st.none() | TEXT, TEXT, TEXT, INT32, INT32, st.binary(max_size=8),
                    st.binary(max_size=8))


@given(TEXT, TEXT, INT32, st.integers(-(2**63), 2**63 - 1), INT32, TEXT, st.integers(0, 2**63 - 1),
       st.one_of(st.just(-1), st.integers(0, 2**31 - 1)))
def test_offset_records_round_trip(group, topic, partition, offset, leader_epoch, metadata, timestamp,
                                   topic_epoch) -> None:
    key = OffsetKey(group, topic, partition)
    value = OffsetValue(offset, leader_epoch, metadata, timestamp, topic_epoch)
    assert decode_record(*encode_record(key, value)) == (key, value)
    assert decode_record(encode_key(key), None) == (key, None)


@given(TEXT, TEXT, INT32, st.none() | TEXT, st.none() | TEXT, st.integers(-1, 2**40), st.lists(MEMBERS, max_size=3))
def test_group_records_round_trip(group, protocol_type, generation, protocol, leader, timestamp, members) -> None:
    key = GroupKey(group)
    value = GroupValue(protocol_type, generation, protocol, leader, timestamp, tuple(members))
    assert decode_record(*encode_record(key, value)) == (key, value)


def test_offset_commit_key_and_value_bytes_are_kafkas() -> None:
    key, value = encode_record(OffsetKey("g", "t", 3), OffsetValue(5, 2, "m", 9))
    assert key == b"\x00\x01" + b"\x00\x01g" + b"\x00\x01t" + b"\x00\x00\x00\x03"
    assert value == (b"\x00\x03" + struct.pack(">q", 5) + struct.pack(">i", 2) + b"\x00\x01m"
                     + struct.pack(">q", 9))
    assert encode_key(GroupKey("g")) == b"\x00\x02\x00\x01g"


def test_kafka_versions_without_newer_fields_decode_with_defaults() -> None:
    v0 = b"\x00\x00" + struct.pack(">q", 7) + b"\x00\x02md" + struct.pack(">q", 11)
    assert decode_record(encode_key(OffsetKey("g", "t", 0)), v0)[1] == OffsetValue(7, -1, "md", 11)
    v1 = b"\x00\x01" + struct.pack(">q", 7) + b"\x00\x00" + struct.pack(">q", 11) + struct.pack(">q", 99)
    assert decode_record(encode_key(OffsetKey("g", "t", 0)), v1)[1] == OffsetValue(7, -1, "", 11, -1, 99)


def test_topic_epoch_is_a_tagged_field_other_readers_skip() -> None:
    _, tagged = encode_record(OffsetKey("g", "t", 0), OffsetValue(5, 2, "m", 9, topic_epoch=12))
    assert tagged[:2] == b"\x00\x04"
    # The v4 body ends with the tagged section: one field, tag 10232 (varint f8 4f), 4 bytes, 12.
    assert tagged.endswith(b"\x01\xf8\x4f\x04" + struct.pack(">i", 12))


def test_record_types_after_kip848s_are_recognised_as_unknown_types() -> None:
    """Key versions 3-8 are KIP-848's consumer group records (tests/broker/groups/consumer); 9 and up
    (share groups and later) are skipped by a loader."""
    with pytest.raises(UnknownRecordTypeError):
        decode_key(b"\x00\x09\x00\x01g")
    state = PartitionState(0)
    state.replay(b"\x00\x09\x00\x01g", b"anything")
    assert state.skipped_records == 1


@given(st.binary(max_size=40), st.none() | st.binary(max_size=60))
def test_garbage_records_raise_a_clean_error(key: bytes, value: bytes | None) -> None:
    try:
        decode_record(key, value)
    except ConsumerOffsetsRecordError as exc:
        assert str(exc)


@given(st.sampled_from([encode_record(OffsetKey("g", "t", 1), OffsetValue(1, 2, "m", 3, 4)),
                        encode_record(GroupKey("g"), GroupValue("consumer", 3, "range", "a", 5, (
                            MemberValue("a", None, "c", "/h", 1, 2, b"s", b"a"),)))]),
       st.integers(0, 200), st.binary(min_size=1, max_size=3))
def test_corrupted_valid_records_raise_a_clean_error(record, position, junk) -> None:
    key, value = record
    assert value is not None
    position %= len(value)
    for mangled in (value[:position], value[:position] + junk + value[position + 1:], value + junk):
        with contextlib.suppress(ConsumerOffsetsRecordError):
            decode_record(key, mangled)


# ------------------------------------------------------------------------------------------------
# Internal metadata


TOPIC_IDS = st.none() | st.uuids().filter(lambda u: u.int != 0)


@given(st.none() | TEXT, st.none() | st.builds(InternalMetadata, INT32, INT32, TOPIC_IDS))
def test_internal_metadata_round_trips(user, internal) -> None:
    assert decode(encode(user, internal)) == (user or "", internal)


@given(INT32, INT32, st.uuids())
def test_topic_id_is_optional_and_written_as_kafka_prints_it(topic_epoch, leader_epoch, topic_id) -> None:
    """A string without the key (older commits) parses with no topic id; with it, the id is Kafka's
    base64 text and an older reader that ignores the key still gets the epochs."""
    without = json.dumps({"version": 1, "topic_epoch": topic_epoch, "leader_epoch": leader_epoch})
    assert InternalMetadata.from_json(without) == InternalMetadata(topic_epoch, leader_epoch)
    with_id = InternalMetadata(topic_epoch, leader_epoch, topic_id)
    data = json.loads(with_id.to_json())
    if topic_id.int == 0:  # Kafka's "no topic id"
        assert "topic_id" not in data and with_id.topic_id is None
        return
    text = base64.urlsafe_b64encode(topic_id.bytes).rstrip(b"=").decode()
    assert data == {"version": 1, "topic_epoch": topic_epoch, "leader_epoch": leader_epoch, "topic_id": text}
    assert InternalMetadata.from_json(with_id.to_json()).topic_id == topic_id


@given(st.one_of(TEXT, st.integers(), st.lists(st.integers(), max_size=2), st.binary(max_size=20).map(
    lambda b: base64.urlsafe_b64encode(b).decode())))
def test_any_bad_topic_id_is_refused_cleanly(value) -> None:
    text = json.dumps({"version": 1, "topic_epoch": 1, "leader_epoch": 1, "topic_id": value})
    try:
        parsed = InternalMetadata.from_json(text)
    except InvalidInternalMetadataError as exc:
        assert "topic_id" in str(exc)
    else:
        assert parsed.topic_id is None or base64.urlsafe_b64encode(parsed.topic_id.bytes).rstrip(b"=").decode() == value


def test_combined_format_is_prefix_json_newline_user() -> None:
    text = encode("a\nb", InternalMetadata(3, 7))
    assert text == 'kip232:{"version":1,"topic_epoch":3,"leader_epoch":7}\na\nb'
    assert decode("just user metadata") == ("just user metadata", None)
    assert decode(None) == ("", None)
    assert decode(encode("kip232:looks like a prefix", InternalMetadata(1, 1)))[0] == "kip232:looks like a prefix"


def test_internal_metadata_orders_as_kip232_compares() -> None:
    assert InternalMetadata(1, 9) < InternalMetadata(2, 0)
    assert InternalMetadata(2, 0) < InternalMetadata(2, 1)
    assert not InternalMetadata(2, 1) < InternalMetadata(2, 1)


@pytest.mark.parametrize("text, complaint", [
    ("kip232:{}", "newline"),
    ("kip232:nope\n", "not JSON"),
    ("kip232:[1]\n", "not an object"),
    ('kip232:{"version": 2, "topic_epoch": 1, "leader_epoch": 1}\n', "unknown internal metadata version 2"),
    ('kip232:{"version": "1", "topic_epoch": 1, "leader_epoch": 1}\n', "version '1'"),
    ('kip232:{"version": 1, "topic_epoch": true, "leader_epoch": 1}\n', "topic_epoch True"),
    ('kip232:{"version": 1, "topic_epoch": 1}\n', "leader_epoch None"),
    ('kip232:{"version": 1, "topic_epoch": 1, "leader_epoch": 4294967296}\n', "not an int32"),
    ('kip232:{"version": 1, "topic_epoch": 1, "leader_epoch": 1, "topic_id": 7}\n', "topic_id 7"),
    ('kip232:{"version": 1, "topic_epoch": 1, "leader_epoch": 1, "topic_id": "AAAA"}\n', "topic_id 'AAAA'"),
    ('kip232:{"version": 1, "topic_epoch": 1, "leader_epoch": 1, "topic_id": "!!!!!!!!!!!!!!!!!!!!!!"}\n',
     "not a base64 topic id"),
])
def test_invalid_internal_metadata_names_what_is_wrong(text, complaint) -> None:
    with pytest.raises(InvalidInternalMetadataError, match=complaint):
        decode(text)


@given(TEXT)
def test_decode_of_any_prefixed_string_is_clean(tail: str) -> None:
    with contextlib.suppress(InvalidInternalMetadataError):
        decode("kip232:" + tail)


def test_json_is_the_kips() -> None:
    head = encode("", InternalMetadata(5, 6)).removeprefix("kip232:").rstrip("\n")
    assert json.loads(head) == {"version": 1, "topic_epoch": 5, "leader_epoch": 6}


def _outcome(decode, *args):
    try:
        return decode(*args)
    except ConsumerOffsetsRecordError as exc:
        return type(exc)


OFFSET_VALUES = st.builds(OffsetValue, st.integers(-(2**63), 2**63 - 1), INT32, TEXT, st.integers(0, 2**63 - 1),
                          st.one_of(st.just(-1), st.integers(0, 2**31 - 1)),
                          st.one_of(st.just(-1), st.integers(0, 2**63 - 1)),
                          st.none() | st.uuids())  # fmt: skip


@given(TEXT, TEXT, INT32, OFFSET_VALUES, st.integers(0, 200), st.binary(max_size=3), st.integers(0, 3))
def test_the_fast_decoders_agree_with_the_schema_engine_on_good_and_damaged_records(
        group, topic, partition, value, position, junk, cut) -> None:
    """The fast paths a coordinator load takes give what the schema engine gives, error or record."""
    if value.expire_timestamp >= 0 and (value.topic_epoch >= 0 or value.topic_id is not None):
        value = OffsetValue(value.offset, value.leader_epoch, value.metadata, value.commit_timestamp,
                            value.topic_epoch, -1, value.topic_id)  # fmt: skip
    key_bytes, value_bytes = encode_record(OffsetKey(group, topic, partition), value)
    key = OffsetKey(group, topic, partition)
    assert decode_key(key_bytes) == schema_decode_key(key_bytes) == key
    assert decode_value(key, value_bytes) == schema_decode_value(key, value_bytes)
    for data in (key_bytes, value_bytes):
        at = min(position, len(data))
        damaged = data[:at] + junk + data[at + cut:]
        assert _outcome(decode_key, damaged) == _outcome(schema_decode_key, damaged)
        assert _outcome(decode_value, key, damaged) == _outcome(schema_decode_value, key, damaged)
