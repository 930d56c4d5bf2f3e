"""Request framing, headers and ApiVersions negotiation, fed by hand."""

from __future__ import annotations

import asyncio
import struct

import pytest
from kafka.protocol.metadata.api_versions import ApiVersionsRequest, ApiVersionsResponse
from kafka.protocol.metadata.metadata import MetadataRequest

from quorum.server.standalone import metadata_dispatcher
from quorum.wire.errors import ErrorCode, FrameTooLargeError, MalformedRequestError, UnsupportedApiError
from quorum.wire.framing import (
    RequestHeader,
    check_frame_size,
    encode_request_header,
    parse_request_header,
    read_uvarint,
)
from quorum.wire.protocol import APIS, decode_request, encode_response


def client_frame(message, version: int, correlation_id: int = 9, client_id: str | None = "t") -> bytes:
    message.with_header(correlation_id=correlation_id, client_id=client_id)
    return message.encode(version=version, header=True)


def test_api_versions_newer_than_ours_gets_v0_answer_with_our_ranges():
    """A client asking with a version we do not know gets UNSUPPORTED_VERSION and our ranges at v0."""
    served = metadata_dispatcher()[0]
    payload = bytearray(client_frame(ApiVersionsRequest(client_software_name="x", client_software_version="1"), 4))
    struct.pack_into(">h", payload, 2, 99)  # claim ApiVersions v99
    request = decode_request(bytes(payload), served.served)
    assert request.body is None and request.header.correlation_id == 9
    reply = asyncio.run(served.dispatch(request))
    assert reply.version == 0
    wire = encode_response(request, reply.body, reply.version)
    response = ApiVersionsResponse.decode(wire[4:], version=0, header=True)
    assert response.error_code == ErrorCode.UNSUPPORTED_VERSION
    assert {(k.api_key, k.min_version, k.max_version) for k in response.api_keys} == {(18, 0, 4), (3, 0, 13)}


@pytest.mark.parametrize("version", [0, 1, 2, 3, 4])
def test_api_versions_each_known_version(version):
    served = metadata_dispatcher()[0]
    request = decode_request(client_frame(ApiVersionsRequest(client_software_name="c", client_software_version="1"),
                                          version), served.served)
    reply = asyncio.run(served.dispatch(request))
    wire = encode_response(request, reply.body, reply.version)
    response = ApiVersionsResponse.decode(wire[4:], version=version, header=True)
    assert response.error_code == 0 and response.header.correlation_id == 9
    assert 3 in {k.api_key for k in response.api_keys}


def test_trailing_bytes_after_body_are_tolerated():
    """librdkafka sends an all-topics Metadata request with spare bytes after the body."""
    payload = client_frame(MetadataRequest(topics=None), 4) + b"\x00\x00\x00"
    request = decode_request(payload)
    assert request.api.name == "Metadata" and request.body.topics is None


def test_truncated_body_is_a_clear_error():
    payload = client_frame(MetadataRequest(topics=[MetadataRequest.MetadataRequestTopic(name="orders")]), 4)
    with pytest.raises(MalformedRequestError, match="MetadataRequest v4 body does not parse"):
        decode_request(payload[:-4])


def test_unknown_api_key_and_version_are_refused():
    payload = bytearray(client_frame(MetadataRequest(topics=None), 4))
    struct.pack_into(">h", payload, 0, 999)
    with pytest.raises(UnsupportedApiError, match="API key 999"):
        decode_request(bytes(payload))
    struct.pack_into(">hh", payload, 0, 3, 14)
    with pytest.raises(UnsupportedApiError, match="Metadata v14"):
        decode_request(bytes(payload))


def test_frame_size_limit():
    assert check_frame_size(struct.pack(">i", 100), 100) == 100
    with pytest.raises(FrameTooLargeError):
        check_frame_size(struct.pack(">i", 101), 100)
    with pytest.raises(FrameTooLargeError):
        check_frame_size(struct.pack(">i", -1), 100)


@pytest.mark.parametrize("flexible", [False, True])
@pytest.mark.parametrize("client_id", [None, "", "client-é"])
def test_request_header_round_trip(flexible, client_id):
    header = RequestHeader(api_key=3, api_version=12, correlation_id=-5, client_id=client_id)
    encoded = encode_request_header(header, flexible)
    assert parse_request_header(encoded + b"body", flexible) == (header, len(encoded))


def test_flexible_header_tagged_fields_are_skipped():
    header = RequestHeader(3, 12, 1, "c")
    encoded = encode_request_header(header, False) + b"\x02\x01\x02ab\x05\x00"
    assert parse_request_header(encoded, True) == (header, len(encoded))


def test_uvarint_limits():
    assert read_uvarint(b"\xff\xff\xff\xff\x0f", 0) == (0xFFFFFFFF, 5)
    with pytest.raises(MalformedRequestError, match="varint longer than 5 bytes ending at byte 5"):
        read_uvarint(b"\xff\xff\xff\xff\xff\x01", 0)
    with pytest.raises(MalformedRequestError, match="varint runs past the end of the frame at byte 1"):
        read_uvarint(b"\x80", 0)
    with pytest.raises(MalformedRequestError, match="varint runs past the end of the frame at byte 3"):
        read_uvarint(memoryview(b"\x00\x80\x80"), 1)


def test_every_listed_api_is_in_the_table():
    """The APIs the cluster will serve, from the foundation issue's list."""
    names = {api.name for api in APIS.values()}
    assert {"ApiVersions", "Metadata", "Produce", "Fetch", "ListOffsets", "OffsetForLeaderEpoch",
            "FindCoordinator", "JoinGroup", "SyncGroup", "Heartbeat", "LeaveGroup", "OffsetCommit",
            "OffsetFetch", "CreateTopics", "DeleteTopics", "CreatePartitions", "DescribeGroups", "ListGroups",
            "InitProducerId", "DescribeQuorum"} <= names
    assert APIS[2].max_version >= 11, "ListOffsets through v11 (which allows -6) is needed by KIP-1023"
