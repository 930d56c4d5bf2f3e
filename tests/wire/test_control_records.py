"""Control record keys and the LeaderChange / SnapshotHeader / SnapshotFooter values, as Kafka writes them."""

from __future__ import annotations

import contextlib

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from kafka.protocol.api_data import ApiData
from kafka.protocol.schemas import load_json

from quorum.wire.control_records import (
    CONTROL_VALUE_TYPES,
    ControlRecordError,
    ControlRecordType,
    LeaderChangeMessage,
    SnapshotFooterRecord,
    SnapshotHeaderRecord,
    decode_control_key,
    decode_control_record,
    decode_control_value,
    encode_control_key,
    encode_control_record,
    encode_control_value,
)
from quorum.wire.metadata_records import NoOpRecord
from quorum.wire.schema import PROJECT_SCHEMAS
from tests.wire.schema_strategies import message_values


def test_control_record_type_ids_are_kafkas() -> None:
    assert {t.name: t.value for t in ControlRecordType} == {
        "ABORT": 0, "COMMIT": 1, "LEADER_CHANGE": 2, "SNAPSHOT_HEADER": 3, "SNAPSHOT_FOOTER": 4,
        "KRAFT_VERSION": 5, "KRAFT_VOTERS": 6,
    }


@pytest.mark.parametrize("record_type", list(ControlRecordType))
def test_keys_are_key_version_0_and_the_type(record_type: ControlRecordType) -> None:
    key = encode_control_key(record_type)
    assert key == bytes([0, 0, 0, record_type])
    assert decode_control_key(key) is record_type


def test_keys_are_read_as_kafka_reads_them() -> None:
    # A newer key version is read as version 0, and bytes after the first four are ignored.
    assert decode_control_key(bytes.fromhex("0001 0002")) is ControlRecordType.LEADER_CHANGE
    assert decode_control_key(bytes.fromhex("0000 0003 ffff")) is ControlRecordType.SNAPSHOT_HEADER


@pytest.mark.parametrize(("key", "reason"), [
    (None, "no key"),
    (b"", "at least 4 bytes"),
    (bytes.fromhex("000002"), "at least 4 bytes"),
    (bytes.fromhex("ffff 0002"), "version -1 is negative"),
    (bytes.fromhex("0000 0007"), "unknown control record type 7"),
    (bytes.fromhex("0000 ffff"), "unknown control record type -1"),
])
def test_bad_keys_are_refused_with_a_reason(key: bytes | None, reason: str) -> None:
    with pytest.raises(ControlRecordError, match=reason):
        decode_control_key(key)
    with pytest.raises(ControlRecordError):
        decode_control_record(key, b"\x00\x00\x00")


def test_leader_change_golden_value() -> None:
    voter = LeaderChangeMessage.fields["voters"].data_class
    granting = LeaderChangeMessage.fields["granting_voters"].data_class
    message = LeaderChangeMessage(version=0, content_version=0, leader_id=1,
                                  voters=[voter(voter_id=1), voter(voter_id=2)], granting_voters=[granting(voter_id=1)])
    value = bytes.fromhex(
        "0000"                          # Version (content_version)
        "00000001"                      # LeaderId
        "03 00000001 00 00000002 00"    # Voters: 2 entries, each VoterId + empty tagged fields
        "02 00000001 00"                # GrantingVoters: 1 entry
        "00")                           # tagged fields
    assert encode_control_record(message) == (bytes.fromhex("0000 0002"), value)
    assert decode_control_record(bytes.fromhex("0000 0002"), value) == (ControlRecordType.LEADER_CHANGE, message)


def test_snapshot_header_and_footer_golden_values() -> None:
    header = SnapshotHeaderRecord(version=0, content_version=0, last_contained_log_timestamp=123)
    footer = SnapshotFooterRecord(version=0, content_version=0)
    assert encode_control_record(header) == (bytes.fromhex("0000 0003"), bytes.fromhex("0000 000000000000007b 00"))
    assert encode_control_record(footer) == (bytes.fromhex("0000 0004"), bytes.fromhex("0000 00"))
    assert decode_control_value(ControlRecordType.SNAPSHOT_FOOTER, bytes.fromhex("0000 00")) == footer


def test_version_field_keeps_kafkas_name_in_the_schema_file() -> None:
    for name in ("LeaderChangeMessage", "SnapshotHeaderRecord", "SnapshotFooterRecord"):
        fields = load_json(name, package=PROJECT_SCHEMAS)["fields"]
        assert fields[0]["name"] == "Version" and fields[0]["type"] == "int16"
    assert list(SnapshotFooterRecord.fields) == ["content_version"]


@pytest.mark.parametrize("schema", list(CONTROL_VALUE_TYPES.values()), ids=lambda schema: schema.__name__)
@settings(max_examples=80, deadline=None)
@given(data=st.data())
def test_values_round_trip(schema: type[ApiData], data: st.DataObject) -> None:
    message = data.draw(message_values(schema, 0))
    key, value = encode_control_record(message)
    record_type = next(t for t, value_schema in CONTROL_VALUE_TYPES.items() if value_schema is schema)
    assert decode_control_record(key, value) == (record_type, message)
    assert encode_control_value(decode_control_value(record_type, value)) == value


def test_values_that_are_not_decoded_here_are_refused() -> None:
    with pytest.raises(ControlRecordError, match="ABORT"):
        decode_control_value(ControlRecordType.ABORT, bytes.fromhex("0000 00000000"))
    with pytest.raises(ControlRecordError, match="has no value"):
        decode_control_value(ControlRecordType.LEADER_CHANGE, None)
    with pytest.raises(ControlRecordError, match="not a control record value"):
        encode_control_value(NoOpRecord(version=0))
    with pytest.raises(ControlRecordError, match="unknown control record type 9"):
        encode_control_key(9)


HEADER, FOOTER, LEADER = (ControlRecordType.SNAPSHOT_HEADER, ControlRecordType.SNAPSHOT_FOOTER,
                          ControlRecordType.LEADER_CHANGE)


@pytest.mark.parametrize(("record_type", "value", "reason"), [
    (HEADER, bytes.fromhex("0000"), "truncated"),
    (HEADER, bytes.fromhex("0000 000000000000007b"), "truncated"),
    (FOOTER, b"", "truncated"),
    (FOOTER, bytes.fromhex("0000 00 ff"), "1 byte\\(s\\) of garbage"),
    (FOOTER, bytes.fromhex("0000 ffffffffff7f"), "does not parse"),
    (LEADER, bytes.fromhex("0000 00000001 00 01 00"), "voters is null"),
    (LEADER, bytes.fromhex("0000 00000001 05 00000001 00"), "truncated"),
])
def test_bad_values_are_refused_with_a_reason(record_type: ControlRecordType, value: bytes, reason: str) -> None:
    with pytest.raises(ControlRecordError, match=reason):
        decode_control_value(record_type, value)


@settings(max_examples=500, deadline=None)
@given(record_type=st.sampled_from(list(CONTROL_VALUE_TYPES)), value=st.binary(max_size=48))
def test_garbage_values_fail_cleanly(record_type: ControlRecordType, value: bytes) -> None:
    with contextlib.suppress(ControlRecordError):
        decode_control_value(record_type, value)
