"""Every API the cluster serves, at every version it serves, through the server's own codec path.

A request is framed as a client would frame it, then read by decode_request; a response is
written by encode_response, then read back as a client reads it. What comes out must encode to
exactly the bytes that went in (nested structs drawn without a version compare only by bytes).
"""

from __future__ import annotations

import struct

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from quorum.wire.framing import RequestHeader, encode_request_header
from quorum.wire.protocol import APIS, Request, decode_request, decode_response, encode_request, encode_response
from tests.wire.schema_strategies import message_values

CASES = [(api.key, version) for api in APIS.values() for version in range(api.min_version, api.max_version + 1)]


def _ids(case: tuple[int, int]) -> str:
    key, version = case
    return f"{APIS[key].name}-v{version}"


@pytest.mark.parametrize("case", CASES, ids=_ids)
@settings(max_examples=8, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data(), correlation_id=st.integers(-(2**31), 2**31 - 1),
       client_id=st.none() | st.text(max_size=10))
def test_request_and_response_round_trip(case, data, correlation_id, client_id):
    key, version = case
    api = APIS[key]
    body = data.draw(message_values(api.request, version))
    header = RequestHeader(key, version, correlation_id, client_id)
    framed = encode_request(api, header, body)
    request = decode_request(framed[4:])
    assert request.header == header
    assert request.body.encode(version=version) == body.encode(version=version)

    response = data.draw(message_values(api.response, version))
    framed_response = encode_response(request, response)
    assert struct.unpack(">i", framed_response[:4])[0] == len(framed_response) - 4
    got_correlation, decoded = decode_response(api, version, framed_response[4:])
    assert got_correlation == correlation_id
    assert decoded.encode(version=version) == response.encode(version=version)


@pytest.mark.parametrize("key", [3, 1, 52], ids=lambda k: APIS[k].name)
def test_unknown_tagged_fields_are_skipped(key):
    """A newer client may send tags this node does not know: they are skipped, the rest is read."""
    api = APIS[key]
    version = api.max_version
    body = api.request(version=version)
    plain = body.encode(version=version)
    assert plain.endswith(b"\x00"), "a flexible body ends with its (empty) tagged field section"
    with_unknown_tag = plain[:-1] + b"\x01" + b"\xe8\x07" + b"\x03abc"  # one tag, number 1000, 3 bytes
    header = encode_request_header(RequestHeader(key, version, 1, "newer-client"), True)
    request = decode_request(header + with_unknown_tag)
    assert isinstance(request, Request)
    assert request.body.encode(version=version) == plain
