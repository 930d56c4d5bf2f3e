"""Call a read-path handler the way the listener does: the request encoded and decoded at its
version, the reply encoded and decoded back, so every test also exercises the wire."""

from __future__ import annotations

import itertools
from typing import Any

from quorum.net.dispatch import Handler
from quorum.wire.protocol import APIS, RequestHeader, decode_request, decode_response, encode_request, encode_response

_correlation = itertools.count(1)


async def call(handler: Handler, api_key: int, version: int, body: Any) -> Any:
    """`handler`'s answer to `body` sent at `version`, as a client decodes it."""
    api = APIS[api_key]
    header = RequestHeader(api_key, version, next(_correlation), "test-client")
    request = decode_request(encode_request(api, header, body)[4:])
    reply = await handler(request)
    assert reply is not None
    frame = encode_response(request, reply.body, reply.version)
    correlation_id, response = decode_response(api, reply.version, frame[4:])
    assert correlation_id == header.correlation_id
    return response
