"""KIP-848's `__consumer_offsets` records: every kind written and read back through the one codec,
the byte layout of Kafka's (int16 key version, non-flexible key, flexible value v0), and garbage refused."""

from __future__ import annotations

import struct
import uuid

import pytest

from quorum.wire.consumer_group_records import (
    ConsumerGroupKey,
    CurrentAssignmentValue,
    GroupEpochValue,
    MemberMetadataValue,
    SubscriptionMetadataValue,
    TargetAssignmentEpochValue,
    TargetAssignmentMemberValue,
)
from quorum.wire.consumer_offsets import ConsumerOffsetsRecordError, decode_record, encode_record

TOPIC = uuid.UUID("6f1c1f8a-58f8-4b1b-9a43-31f6e3a3b1d2")
RECORDS = [
    (ConsumerGroupKey(3, "g"), GroupEpochValue(5)),
    (ConsumerGroupKey(4, "g"), SubscriptionMetadataValue((("t", TOPIC, 4),))),
    (
        ConsumerGroupKey(5, "g", "m"),
        MemberMetadataValue("i", None, "client", "/10.0.0.1", ("t",), "t.*", 5000, "range"),
    ),
    (ConsumerGroupKey(6, "g"), TargetAssignmentEpochValue(5)),
    (ConsumerGroupKey(7, "g", "m"), TargetAssignmentMemberValue(frozenset({(TOPIC, 1), (TOPIC, 2)}))),
    (ConsumerGroupKey(8, "g", "m"), CurrentAssignmentValue(5, 4, 1, frozenset({(TOPIC, 1)}), frozenset({(TOPIC, 3)}))),
    (ConsumerGroupKey(8, "g", "m"), None),
]


@pytest.mark.parametrize(("key", "value"), RECORDS)
def test_every_kind_round_trips(key, value) -> None:
    assert decode_record(*encode_record(key, value)) == (key, value)


def test_the_byte_layout_is_kafkas() -> None:
    key, value = encode_record(ConsumerGroupKey(3, "g"), GroupEpochValue(5))
    assert key == b"\x00\x03\x00\x01g"  # version 3, then GroupId as a (non-compact) string
    assert value == b"\x00\x00" + struct.pack(">i", 5) + b"\x00"  # version 0, Epoch, no tagged fields
    key, value = encode_record(*RECORDS[4])
    assert key == b"\x00\x07\x00\x01g\x00\x01m"
    # one topic (compact array length 2), its uuid, partitions [1, 2] (compact length 3), tags, tags
    assert value == b"\x00\x00\x02" + TOPIC.bytes + b"\x03" + struct.pack(">ii", 1, 2) + b"\x00\x00"


def test_a_member_key_without_a_member_and_a_mismatched_value_are_refused() -> None:
    with pytest.raises(ConsumerOffsetsRecordError, match="needs member id"):
        encode_record(ConsumerGroupKey(5, "g"), None)
    with pytest.raises(ConsumerOffsetsRecordError, match="cannot be the value of a ConsumerGroupMetadataKey"):
        encode_record(ConsumerGroupKey(3, "g"), TargetAssignmentEpochValue(1))
    with pytest.raises(ConsumerOffsetsRecordError):
        decode_record(b"\x00\x08\x00\x01g", None)  # a member key cut short
    with pytest.raises(ConsumerOffsetsRecordError, match="v3 is not supported"):
        decode_record(b"\x00\x03\x00\x01g", b"\x00\x03" + struct.pack(">i", 5) + b"\x00")
