"""A proxy that answers a client's first OffsetFetch requests itself, with a group-level NOT_COORDINATOR
and no partitions (what a broker that just stopped coordinating the group answers), and passes every
other frame on.

The broker under it advertises the proxy (`advertised.listeners`), so a client reaches the group's
coordinator through it too."""

from __future__ import annotations

import threading

from quorum.wire.errors import ErrorCode
from quorum.wire.protocol import decode_request, encode_response, peek_api
from tests.support.proxy import FrameProxy

OFFSET_FETCH = 9


class OffsetFetchRefusingProxy(FrameProxy):
    def __init__(self, target_host: str, target_port: int, refusals: int, spare_client_id: str | None = None) -> None:
        """`spare_client_id`: OffsetFetch requests from a client with this id are passed on, not refused
        (the client_epochs wrappers' own lookups, when a test is about librdkafka's)."""
        super().__init__(target_host, target_port)
        self._lock = threading.Lock()
        self._left = refusals
        self._spare = spare_client_id
        self.refused = 0

    def _answer(self, payload: bytes) -> bytes | None:
        if peek_api(payload)[0] != OFFSET_FETCH:
            return None
        if self._spare is not None and decode_request(payload).header.client_id == self._spare:
            return None
        with self._lock:
            if self._left <= 0:
                return None
            self._left -= 1
            self.refused += 1
        return _not_coordinator(payload)


def _not_coordinator(payload: bytes) -> bytes:
    request = decode_request(payload)
    schema = request.api.response
    if request.version >= 8:
        groups = [schema.OffsetFetchResponseGroup(group_id=g.group_id, topics=[],
                                                  error_code=ErrorCode.NOT_COORDINATOR)
                  for g in request.body.groups]
        return encode_response(request, schema(throttle_time_ms=0, groups=groups))
    return encode_response(request, schema(throttle_time_ms=0, topics=[], error_code=ErrorCode.NOT_COORDINATOR))
