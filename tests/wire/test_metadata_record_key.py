"""metadata_record_key: the fast read of a metadata record's type and identity, checked against the full decoder."""

from __future__ import annotations

import uuid
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from kafka.protocol.api_data import ApiData

from quorum.wire import metadata_records as mr
from quorum.wire.metadata_records import (
    METADATA_RECORD_TYPES,
    ZERO_UUID,
    MetadataRecordError,
    MetadataRecordType,
    RecordKey,
    decode_metadata_record,
    encode_metadata_record,
    metadata_record_key,
    record_type,
)
from tests.wire.schema_strategies import message_values

U1 = uuid.UUID("00112233-4455-6677-8899-aabbccddeeff")
CLASS_VERSIONS = [(schema, version) for schema in METADATA_RECORD_TYPES.values()
                  for version in range(schema.max_version + 1)]


def slow_key(record: ApiData) -> RecordKey:
    """The key as read from the record the schema engine decoded: the oracle."""
    kind = MetadataRecordType(record_type(record))

    def topic_id() -> uuid.UUID:
        return ZERO_UUID if record.topic_id is None else record.topic_id

    key: Any
    if kind in (MetadataRecordType.REGISTER_BROKER, MetadataRecordType.UNREGISTER_BROKER):
        key = record.broker_id
    elif kind in (MetadataRecordType.FENCE_BROKER, MetadataRecordType.UNFENCE_BROKER):
        key = record.id
    elif kind in (MetadataRecordType.TOPIC, MetadataRecordType.REMOVE_TOPIC):
        key = topic_id()
    elif kind in (MetadataRecordType.PARTITION, MetadataRecordType.PARTITION_CHANGE):
        key = (topic_id(), record.partition_id)
    elif kind is MetadataRecordType.CONFIG:
        key = (record.resource_type, record.resource_name, record.name)
    elif kind is MetadataRecordType.FEATURE_LEVEL:
        key = record.name
    elif kind in (MetadataRecordType.ACCESS_CONTROL_ENTRY, MetadataRecordType.REMOVE_ACCESS_CONTROL_ENTRY):
        key = ZERO_UUID if record.id is None else record.id
    elif kind in (MetadataRecordType.USER_SCRAM_CREDENTIAL, MetadataRecordType.REMOVE_USER_SCRAM_CREDENTIAL):
        key = (record.name, record.mechanism)
    else:
        key = None
    deletes = kind in (MetadataRecordType.UNREGISTER_BROKER, MetadataRecordType.REMOVE_TOPIC,
                       MetadataRecordType.REMOVE_ACCESS_CONTROL_ENTRY,
                       MetadataRecordType.REMOVE_USER_SCRAM_CREDENTIAL) or (
        kind is MetadataRecordType.CONFIG and record.value is None)
    return RecordKey(kind, key, deletes)


def test_the_record_types_are_the_registered_ones() -> None:
    assert {int(member) for member in MetadataRecordType} == set(METADATA_RECORD_TYPES)
    for member in MetadataRecordType:
        assert METADATA_RECORD_TYPES[member].__name__.removesuffix("Record").lower() \
            == member.name.replace("_", "").lower()


@pytest.mark.parametrize("case", CLASS_VERSIONS, ids=lambda case: f"{case[0].__name__}-v{case[1]}")
@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_the_fast_key_is_the_decoded_records_key(case: tuple[type[ApiData], int], data: st.DataObject) -> None:
    schema, version = case
    record = data.draw(message_values(schema, version))
    frame = encode_metadata_record(record)
    fast = metadata_record_key(frame)
    assert fast == slow_key(decode_metadata_record(frame))
    assert type(fast.record_type) is MetadataRecordType
    assert metadata_record_key(bytearray(frame)) == metadata_record_key(memoryview(frame)) == fast


def test_golden_keys() -> None:
    topic = bytes.fromhex("01 02 00") + b"\x04foo" + U1.bytes + b"\x00"
    assert metadata_record_key(topic) == RecordKey(MetadataRecordType.TOPIC, U1, False)
    change = bytes.fromhex("01 05 00 00000007") + U1.bytes + bytes.fromhex("01 01 04 00000003")
    assert metadata_record_key(change) == (MetadataRecordType.PARTITION_CHANGE, (U1, 7), False)
    removal = bytes.fromhex("01 04 00 02 0274") + b"\x0dretention.ms" + bytes.fromhex("00 00")
    assert metadata_record_key(removal) == (MetadataRecordType.CONFIG, (2, "t", "retention.ms"), True)
    assert metadata_record_key(bytes.fromhex("01 14 00 00")) == (MetadataRecordType.NO_OP, None, False)
    unregister = encode_metadata_record(mr.UnregisterBrokerRecord(version=0, broker_id=4, broker_epoch=9))
    assert metadata_record_key(unregister) == (MetadataRecordType.UNREGISTER_BROKER, 4, True)
    remove = encode_metadata_record(mr.RemoveTopicRecord(version=0, topic_id=U1))
    assert metadata_record_key(remove) == (MetadataRecordType.REMOVE_TOPIC, U1, True)


def test_a_header_with_long_varints_is_read_as_the_decoder_reads_it() -> None:
    frame = bytes.fromhex("81 00 82 00 80 00") + b"\x04foo" + U1.bytes + b"\x00"  # 1, 2, 0 in two bytes each
    assert metadata_record_key(frame) == slow_key(decode_metadata_record(frame))


@pytest.mark.parametrize(("frame", "reason"), [
    (b"", "truncated"),
    (b"\x01", "truncated"),
    (b"\x01\x02", "truncated"),
    (bytes.fromhex("00 02 00"), "frame version 0"),
    (bytes.fromhex("02 02 00"), "unknown frame version 2"),
    (bytes.fromhex("01 11 00"), "unknown metadata record type 17"),
    (bytes.fromhex("01 02 01"), r"TopicRecord v1 is not supported"),
    (bytes.fromhex("01 05 03"), r"PartitionChangeRecord v3 is not supported"),
    (bytes.fromhex("01 c0b802 00"), "out of range"),
    (bytes.fromhex("01 ffffffffff7f"), "not a valid unsigned varint"),
    (bytes.fromhex("01 02 00 00") + U1.bytes + b"\x00", r"Name is null"),
    (bytes.fromhex("01 02 00") + b"\x04fo", "truncated"),
    (bytes.fromhex("01 02 00") + b"\x04foo" + U1.bytes[:15], "truncated"),
    (bytes.fromhex("01 04 00 02 02") + b"\xfft" + b"\x02n\x00", "not valid UTF-8"),
    (bytes.fromhex("01 04 00 02 02 74 02 6e"), "truncated"),  # no Value length
    (bytes.fromhex("01 0c 00 ffffffffff7f"), "not a valid varint"),
    (bytes.fromhex("01 03 00 000000"), "truncated"),
    (bytes.fromhex("01 07 00 0000"), "truncated"),
])
def test_bad_frames_are_refused_with_a_reason(frame: bytes, reason: str) -> None:
    with pytest.raises(MetadataRecordError, match=reason):
        metadata_record_key(frame)


@pytest.mark.parametrize("record", [
    mr.PartitionRecord(version=2, partition_id=1, topic_id=U1, replicas=[1], isr=[1], removing_replicas=[],
                       adding_replicas=[], leader=1, leader_epoch=0, partition_epoch=0, directories=[U1]),
    mr.TopicRecord(version=0, name="orders", topic_id=U1),
    mr.ConfigRecord(version=0, resource_type=2, resource_name="orders", name="retention.ms", value="1"),
    mr.FeatureLevelRecord(version=0, name="metadata.version", feature_level=21),
    mr.FenceBrokerRecord(version=0, id=3, epoch=5),
], ids=lambda record: type(record).__name__)
def test_a_frame_cut_inside_its_identity_fields_is_refused(record: ApiData) -> None:
    frame = encode_metadata_record(record)
    expected = metadata_record_key(frame)
    identity_end = next(cut for cut in range(len(frame) + 1) if _key_or_none(frame[:cut]) == expected)
    for cut in range(identity_end):
        with pytest.raises(MetadataRecordError):
            metadata_record_key(frame[:cut])
    # What follows the identity fields is the full decoder's to check.
    assert identity_end < len(frame)
    with pytest.raises(MetadataRecordError):
        decode_metadata_record(frame[:identity_end])


def _key_or_none(frame: bytes) -> RecordKey | None:
    try:
        return metadata_record_key(frame)
    except MetadataRecordError:
        return None


@settings(max_examples=500, deadline=None)
@given(st.one_of(
    st.binary(max_size=40),
    st.binary(max_size=40).map(lambda tail: b"\x01" + tail),
    st.tuples(st.sampled_from(sorted(METADATA_RECORD_TYPES)), st.integers(0, 3), st.binary(max_size=40))
    .map(lambda parts: bytes([1, parts[0], parts[1]]) + parts[2]),
))
def test_garbage_gets_a_key_or_a_clean_error(frame: bytes) -> None:
    try:
        fast = metadata_record_key(frame)
    except MetadataRecordError:
        fast = None
    try:
        decoded = decode_metadata_record(frame)
    except MetadataRecordError:
        return
    assert fast == slow_key(decoded), "whatever the decoder accepts, the fast key reads the same"
