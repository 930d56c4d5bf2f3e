"""A null where the schema allows none fails the request's parse, as in Kafka: the protocol fuzzer
(issue 19) found handlers meeting None for a list (ListOffsets, DescribeGroups, DeleteRecords,
OffsetForLeaderEpoch, the controller's Produce) or for bytes (JoinGroup protocol metadata)."""

from __future__ import annotations

import pytest

from quorum.wire.errors import MalformedRequestError
from quorum.wire.framing import RequestHeader
from quorum.wire.protocol import APIS_BY_NAME, decode_request, encode_request


def _payload(api_name: str, version: int, **fields) -> bytes:
    api = APIS_BY_NAME[api_name]
    body = api.request(version=version, **fields)
    return encode_request(api, RequestHeader(api.key, version, 7, "fuzz"), body)[4:]


NULLED = [
    ("ListOffsets", 7, {"replica_id": -1, "isolation_level": 0, "topics": None}, "topics"),
    ("DescribeGroups", 5, {"groups": None, "include_authorized_operations": False}, "groups"),
    ("DeleteRecords", 2, {"topics": None, "timeout_ms": 0}, "topics"),
    ("OffsetForLeaderEpoch", 4, {"replica_id": -1, "topics": None}, "topics"),
    ("Produce", 9, {"transactional_id": None, "acks": 1, "timeout_ms": 0, "topic_data": None}, "topic_data"),
]


@pytest.mark.parametrize(("api_name", "version", "fields", "path"), NULLED, ids=[n[0] for n in NULLED])
def test_a_null_array_that_may_not_be_null_is_malformed(api_name, version, fields, path):
    with pytest.raises(MalformedRequestError, match=f"non-nullable field {path} is null"):
        decode_request(_payload(api_name, version, **fields))


def test_a_null_inside_a_struct_array_names_its_path():
    join = APIS_BY_NAME["JoinGroup"].request
    protocol = join.JoinGroupRequestProtocol(name="range", metadata=None)
    payload = _payload("JoinGroup", 5, group_id="g", session_timeout_ms=10_000, rebalance_timeout_ms=10_000,
                       member_id="", group_instance_id=None, protocol_type="consumer", protocols=[protocol])
    with pytest.raises(MalformedRequestError, match="non-nullable field protocols.metadata is null"):
        decode_request(payload)


def test_nullable_fields_may_be_null():
    request = decode_request(_payload("Produce", 9, transactional_id=None, acks=1, timeout_ms=0, topic_data=[]))
    assert request.body.transactional_id is None
    fetched = decode_request(_payload("Metadata", 12, topics=None, allow_auto_topic_creation=False,
                                      include_topic_authorized_operations=False))
    assert fetched.body.topics is None  # null topics: all topics, as the schema allows


def test_a_null_string_in_an_array_of_strings_is_malformed():
    """DeleteTopics v1 naming one topic whose name is null hung the broker's answer (the fuzzer's frame)."""
    frame = bytes.fromhex("0014000100000763000000000001ffffffff000001f4")
    with pytest.raises(MalformedRequestError, match=r"non-nullable field topic_names\[0\] is null"):
        decode_request(frame)
