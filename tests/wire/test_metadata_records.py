"""The KIP-631 metadata record frame: Kafka's facts, golden frames, round trips, and refusal of bad input."""

from __future__ import annotations

import contextlib
import uuid

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from kafka.protocol.api_data import ApiData

from quorum.wire import metadata_records as mr
from quorum.wire.control_records import LeaderChangeMessage
from quorum.wire.metadata_records import (
    METADATA_RECORD_TYPES,
    TOPIC_EPOCH_TAG,
    MetadataRecordError,
    decode_metadata_record,
    encode_metadata_record,
)
from tests.wire.schema_strategies import message_values

U1 = uuid.UUID("00112233-4455-6677-8899-aabbccddeeff")

# Apache Kafka's facts: record type (apiKey) -> (name, valid versions).
KAFKA_FACTS = {
    0: ("RegisterBrokerRecord", (0, 3)),
    1: ("UnregisterBrokerRecord", (0, 0)),
    2: ("TopicRecord", (0, 0)),
    3: ("PartitionRecord", (0, 2)),
    4: ("ConfigRecord", (0, 0)),
    5: ("PartitionChangeRecord", (0, 2)),
    7: ("FenceBrokerRecord", (0, 0)),
    8: ("UnfenceBrokerRecord", (0, 0)),
    9: ("RemoveTopicRecord", (0, 0)),
    11: ("UserScramCredentialRecord", (0, 0)),
    12: ("FeatureLevelRecord", (0, 0)),
    15: ("ProducerIdsRecord", (0, 0)),
    18: ("AccessControlEntryRecord", (0, 0)),
    19: ("RemoveAccessControlEntryRecord", (0, 0)),
    20: ("NoOpRecord", (0, 0)),
    22: ("RemoveUserScramCredentialRecord", (0, 0)),
}

CLASS_VERSIONS = [(schema, version) for schema in METADATA_RECORD_TYPES.values()
                  for version in range(schema.max_version + 1)]


def _ids(case: tuple[type[ApiData], int]) -> str:
    return f"{case[0].__name__}-v{case[1]}"


def topic_record_frame(*, tagged: bytes = b"\x00") -> bytes:
    """TopicRecord "foo" with id U1, written out by hand: frame header, payload, tagged fields."""
    return bytes.fromhex("01 02 00") + b"\x04foo" + U1.bytes + tagged


def test_record_types_and_versions_are_kafkas() -> None:
    assert {key: (schema.__name__, schema.valid_versions) for key, schema in METADATA_RECORD_TYPES.items()} \
        == KAFKA_FACTS
    for schema in METADATA_RECORD_TYPES.values():
        assert mr.record_type(schema) == schema.json["apiKey"]
        assert all(schema.flexible_version_q(v) for v in range(schema.max_version + 1)), "flexible from v0"


def test_topic_epoch_tag_is_the_projects_constant() -> None:
    from quorum.wire.protocol import TOPIC_EPOCH_TAG as PROTOCOL_TAG

    field = mr.TopicRecord.fields["topic_epoch"]
    assert TOPIC_EPOCH_TAG == PROTOCOL_TAG == 10232
    assert field.tag == TOPIC_EPOCH_TAG and field.default == -1
    assert field.tagged_field_q(0)


@pytest.mark.parametrize("case", CLASS_VERSIONS, ids=_ids)
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_every_record_round_trips_at_every_version(case: tuple[type[ApiData], int], data: st.DataObject) -> None:
    schema, version = case
    record = data.draw(message_values(schema, version))
    frame = encode_metadata_record(record)
    assert frame[:3] == bytes([1, mr.record_type(schema), version])  # all three varints fit one byte here
    decoded = decode_metadata_record(frame)
    assert type(decoded) is schema and decoded.version == version
    assert decoded == record
    assert encode_metadata_record(decoded) == frame


# Golden frames, written out from Kafka's layout.

def test_topic_record_golden_frame_as_apache_kafka_writes_it() -> None:
    frame = topic_record_frame()
    record = mr.TopicRecord(version=0, name="foo", topic_id=U1)
    assert encode_metadata_record(record) == frame
    decoded = decode_metadata_record(frame)
    assert (decoded.name, decoded.topic_id, decoded.topic_epoch) == ("foo", U1, -1)


def test_topic_record_with_topic_epoch_carries_tag_10232() -> None:
    # One tagged field: tag 10232 as an unsigned varint (f8 4f), size 4, int32 7.
    frame = topic_record_frame(tagged=bytes.fromhex("01 f84f 04 00000007"))
    record = mr.TopicRecord(version=0, name="foo", topic_id=U1, topic_epoch=7)
    assert encode_metadata_record(record) == frame
    assert decode_metadata_record(frame).topic_epoch == 7


def test_feature_level_record_golden_frame() -> None:
    frame = bytes.fromhex("01 0c 00") + b"\x11metadata.version" + bytes.fromhex("0015 00")
    record = mr.FeatureLevelRecord(version=0, name="metadata.version", feature_level=21)
    assert encode_metadata_record(record) == frame
    assert decode_metadata_record(frame) == record


def test_partition_change_record_writes_only_what_changed() -> None:
    # Leader changed to 3, nothing else: one tagged field, tag 1, 4 bytes.
    frame = bytes.fromhex("01 05 00 00000000") + U1.bytes + bytes.fromhex("01 01 04 00000003")
    record = mr.PartitionChangeRecord(version=0, partition_id=0, topic_id=U1, leader=3)
    assert encode_metadata_record(record) == frame
    decoded = decode_metadata_record(frame)
    assert (decoded.leader, decoded.isr, decoded.leader_recovery_state) == (3, None, -1)


def test_partition_change_record_writes_tags_in_ascending_order() -> None:
    record = mr.PartitionChangeRecord(version=2, partition_id=0, topic_id=U1, isr=[1],
                                      directories=[U1], eligible_leader_replicas=[2])
    frame = (bytes.fromhex("01 05 02 00000000") + U1.bytes + bytes.fromhex("03")
             + bytes.fromhex("00 05 02 00000001")            # tag 0: Isr
             + bytes.fromhex("06 05 02 00000002")            # tag 6: EligibleLeaderReplicas
             + bytes.fromhex("08 11 02") + U1.bytes)         # tag 8: Directories
    assert encode_metadata_record(record) == frame


def test_config_record_removal_has_a_null_value() -> None:
    frame = bytes.fromhex("01 04 00 02 0274") + b"\x0dretention.ms" + bytes.fromhex("00 00")
    record = mr.ConfigRecord(version=0, resource_type=2, resource_name="t", name="retention.ms", value=None)
    assert encode_metadata_record(record) == frame
    assert decode_metadata_record(frame).value is None


def test_no_op_record_is_the_header_and_an_empty_tag_section() -> None:
    assert encode_metadata_record(mr.NoOpRecord(version=0)) == bytes.fromhex("01 14 00 00")
    assert decode_metadata_record(bytes.fromhex("01 14 00 00")) == mr.NoOpRecord(version=0)


def test_register_broker_record_v3_golden_frame() -> None:
    schema = mr.RegisterBrokerRecord
    record = schema(version=3, broker_id=1, is_migrating_zk_broker=False, incarnation_id=U1, broker_epoch=7,
                    end_points=[schema.BrokerEndpoint(name="P", host="h", port=9092, security_protocol=0)],
                    features=[], rack=None, fenced=True, in_controlled_shutdown=False, log_dirs=[U1])
    frame = (bytes.fromhex("01 00 03 00000001 00") + U1.bytes
             + bytes.fromhex("0000000000000007 02 0250 0268 2384 0000 00 01 00 01 00")
             + bytes.fromhex("01 00 11 02") + U1.bytes)
    assert encode_metadata_record(record) == frame
    assert decode_metadata_record(frame) == record


def test_unknown_tagged_fields_are_skipped_as_kafka_does() -> None:
    frame = topic_record_frame(tagged=bytes.fromhex("01 63 02 abcd"))
    decoded = decode_metadata_record(frame)
    assert decoded.name == "foo" and decoded.unknown_tags == {"_99": b"\xab\xcd"}


# Refusals: each names what is wrong.

@pytest.mark.parametrize(("frame", "reason"), [
    (b"", "truncated"),
    (bytes.fromhex("00 02 00"), "frame version 0"),
    (bytes.fromhex("02 02 00"), "unknown frame version 2"),
    (bytes.fromhex("01 11 00"), "unknown metadata record type 17"),
    (bytes.fromhex("01 02 01"), r"TopicRecord v1 is not supported"),
    (bytes.fromhex("01 05 03"), r"PartitionChangeRecord v3 is not supported"),
    (bytes.fromhex("01 c0b802 00"), "out of range"),
    (bytes.fromhex("01 ffffffffff7f"), "not a valid unsigned varint"),
    (bytes.fromhex("01 02 00 00") + U1.bytes + b"\x00", r"name is null"),
    (topic_record_frame() + b"\x00", "1 byte\\(s\\) of garbage"),
    (bytes.fromhex("01 02 00") + b"\x04fo", "truncated"),
    (bytes.fromhex("01 02 00") + b"\x04\xff\xfe\xfd" + U1.bytes + b"\x00", "does not parse"),
])
def test_bad_frames_are_refused_with_a_reason(frame: bytes, reason: str) -> None:
    with pytest.raises(MetadataRecordError, match=reason):
        decode_metadata_record(frame)


def test_every_cut_short_frame_is_refused() -> None:
    record = mr.RegisterBrokerRecord(
        version=3, broker_id=1, incarnation_id=U1, broker_epoch=7,
        end_points=[mr.RegisterBrokerRecord.BrokerEndpoint(name="P", host="h", port=9092, security_protocol=0)],
        features=[mr.RegisterBrokerRecord.BrokerFeature(name="f", min_supported_version=0, max_supported_version=1)],
        rack="r", fenced=False, in_controlled_shutdown=False, log_dirs=[U1])
    frame = encode_metadata_record(record)
    for cut in range(len(frame)):
        with pytest.raises(MetadataRecordError):
            decode_metadata_record(frame[:cut])


def test_encoding_refuses_what_cannot_be_read_back() -> None:
    with pytest.raises(MetadataRecordError, match="has no version"):
        encode_metadata_record(mr.TopicRecord(name="t", topic_id=U1))
    with pytest.raises(MetadataRecordError, match="not a registered metadata record"):
        encode_metadata_record(LeaderChangeMessage(version=0, content_version=0, leader_id=1, voters=[],
                                                   granting_voters=[]))
    with pytest.raises(MetadataRecordError, match=r"name is null"):
        encode_metadata_record(mr.TopicRecord(version=0, name=None, topic_id=U1))
    with pytest.raises(MetadataRecordError, match=r"replicas is null"):
        encode_metadata_record(mr.PartitionRecord(version=0, partition_id=0, topic_id=U1, replicas=None, isr=[],
                                                  removing_replicas=[], adding_replicas=[]))


@settings(max_examples=500, deadline=None)
@given(garbage=st.binary(max_size=64))
def test_garbage_gives_a_record_or_a_metadata_record_error(garbage: bytes) -> None:
    with contextlib.suppress(MetadataRecordError):
        decode_metadata_record(garbage)


@settings(max_examples=500, deadline=None)
@given(key=st.sampled_from(sorted(METADATA_RECORD_TYPES)), version=st.integers(0, 3),
       payload=st.binary(max_size=64))
def test_garbage_payloads_behind_a_valid_header_fail_cleanly(key: int, version: int, payload: bytes) -> None:
    with contextlib.suppress(MetadataRecordError):
        decode_metadata_record(bytes([1, key, version]) + payload)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_corrupted_records_fail_cleanly(data: st.DataObject) -> None:
    schema, version = data.draw(st.sampled_from(CLASS_VERSIONS))
    frame = bytearray(encode_metadata_record(data.draw(message_values(schema, version))))
    for _ in range(data.draw(st.integers(1, 4))):
        frame[data.draw(st.integers(0, len(frame) - 1))] = data.draw(st.integers(0, 255))
    with contextlib.suppress(MetadataRecordError):
        decode_metadata_record(bytes(frame))
