"""ApiVersions: tell a client which API versions this node serves, including when it asked too new.

A client opens every connection with ApiVersions at the newest version it knows. When that is
newer than ours, Kafka answers with a v0 response carrying UNSUPPORTED_VERSION and its ranges,
and the client retries with a version from that list; librdkafka and kafka-python both rely on it.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from quorum.wire.errors import ErrorCode
from quorum.wire.protocol import API_VERSIONS_KEY, APIS, Api, Request


def api_versions_response(request: Request, served: Mapping[int, Api]) -> tuple[Any, int]:
    """The response body and the version to encode it with."""
    schema = APIS[API_VERSIONS_KEY].response
    keys = [
        schema.ApiVersion(api_key=api.key, min_version=api.min_version, max_version=api.max_version)
        for api in served.values()
    ]
    if request.body is None:
        return schema(error_code=ErrorCode.UNSUPPORTED_VERSION, api_keys=keys, throttle_time_ms=0), 0
    return schema(error_code=ErrorCode.NONE, api_keys=keys, throttle_time_ms=0), request.version
