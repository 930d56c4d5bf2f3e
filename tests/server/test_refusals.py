"""A refused request is answered, at the client's version, with the error for every resource it named."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from quorum.server.refusals import REFUSABLE, refuse
from quorum.wire.errors import ErrorCode
from quorum.wire.protocol import (
    APIS,
    Request,
    RequestHeader,
    decode_request,
    decode_response,
    encode_request,
    encode_response,
)
from tests.wire.schema_strategies import message_values

CASES = [(key, version) for key in REFUSABLE for version in range(APIS[key].min_version, APIS[key].max_version + 1)]


def named(key: int, body) -> int:
    """How many resources a request names."""
    if key == 20:
        return len(getattr(body, "topics", None) or ()) + len(getattr(body, "topic_names", None) or ())
    if key in (19, 37):
        return len(body.topics or ())
    if key in (32, 33, 44):
        return len(body.resources or ())
    if key == 45:
        return sum(len(topic.partitions or ()) for topic in body.topics or ())
    if key == 30:
        return len(body.creations or ())
    if key == 31:
        return len(body.filters or ())
    if key == 51:  # each user once, however many changes name it
        return len({change.name for change in [*(body.deletions or ()), *(body.upsertions or ())]})
    return 0


def answered(key: int, response) -> list[int]:
    """The error codes of a response, one per resource (or the top-level one)."""
    if key == 45:  # AlterPartitionReassignments: one per partition
        return [p.error_code for topic in response.responses for p in topic.partitions]
    if key in (46, 50):  # the top-level error (DescribeUserScramCredentials: no user results)
        return [response.error_code]
    for name in ("topics", "responses", "results", "filter_results"):
        items = getattr(response, name, None)
        if items is not None and key not in (56,):
            return [item.error_code for item in items]
    return [response.error_code]


@pytest.mark.parametrize("case", CASES, ids=lambda c: f"{APIS[c[0]].name}-v{c[1]}")
@settings(max_examples=10, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_every_named_resource_gets_the_error(case, data):
    key, version = case
    api = APIS[key]
    body = data.draw(message_values(api.request, version))
    request: Request = decode_request(encode_request(api, RequestHeader(key, version, 7, "test"), body)[4:])
    framed = encode_response(request, refuse(request, ErrorCode.NOT_CONTROLLER))
    _, response = decode_response(api, version, framed[4:])
    codes = answered(key, response)
    assert set(codes) <= {ErrorCode.NOT_CONTROLLER}
    assert len(codes) == (named(key, request.body) if key in (19, 20, 30, 31, 32, 33, 37, 44, 45, 51) else 1)
