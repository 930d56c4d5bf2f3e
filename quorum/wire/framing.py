"""Kafka RPC framing: the int32 size prefix, request header v1/v2 and response header v0/v1.

Headers are parsed here by hand rather than through kafka-python's header classes because
every request pays for them, and because a header must be readable before the body's schema
is known: the API key and version in the header choose the schema of the rest.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

from quorum.wire.errors import FrameTooLargeError, MalformedRequestError
from quorum.wire.varint import MAX_VARINT_BYTES, TruncatedVarintError, VarintTooLongError, decode_uvarint

DEFAULT_MAX_FRAME_BYTES = 100 * 1024 * 1024  # Kafka's socket.request.max.bytes default

_SIZE = struct.Struct(">i")
_HEADER_FIXED = struct.Struct(">hhih")  # api key, api version, correlation id, client id length
_CORRELATION = struct.Struct(">i")
_API_PEEK = struct.Struct(">hhi")


@dataclass(frozen=True, slots=True)
class RequestHeader:
    api_key: int
    api_version: int
    correlation_id: int
    client_id: str | None


def check_frame_size(prefix: bytes, max_frame_bytes: int) -> int:
    """The payload size announced by a 4-byte prefix, refused when negative or over the limit."""
    (size,) = _SIZE.unpack(prefix)
    if size < 0 or size > max_frame_bytes:
        raise FrameTooLargeError(f"frame size {size} is outside 0..{max_frame_bytes} (the configured maximum)")
    return size


def frame(payload: bytes | bytearray | memoryview) -> bytes:
    """Prefix a payload with its int32 size."""
    return _SIZE.pack(len(payload)) + bytes(payload)


def frame_size(size: int) -> bytes:
    """The int32 size prefix of a `size`-byte frame written in pieces."""
    return _SIZE.pack(size)


def read_uvarint(buf: bytes | memoryview, pos: int) -> tuple[int, int]:
    """An unsigned varint at `pos` and the position after it; at most 5 bytes, as Kafka's int32 ones."""
    try:
        return decode_uvarint(buf, pos, MAX_VARINT_BYTES)
    except TruncatedVarintError as exc:
        raise MalformedRequestError(f"varint runs past the end of the frame at byte {exc.position}") from None
    except VarintTooLongError as exc:
        raise MalformedRequestError(
            f"varint longer than {MAX_VARINT_BYTES} bytes ending at byte {exc.position}"
        ) from None


def skip_tagged_fields(buf: bytes | memoryview, pos: int) -> int:
    """Skip a KIP-482 tagged field section: nothing in a header is tagged that this node reads."""
    count, pos = read_uvarint(buf, pos)
    for _ in range(count):
        _tag, pos = read_uvarint(buf, pos)
        size, pos = read_uvarint(buf, pos)
        pos += size
        if pos > len(buf):
            raise MalformedRequestError(f"tagged field of {size} bytes runs past the end of the frame")
    return pos


def peek_api(payload: bytes | memoryview) -> tuple[int, int, int]:
    """API key, version and correlation id: the first 8 bytes, readable before the header version is known."""
    if len(payload) < 8:
        raise MalformedRequestError(f"request of {len(payload)} bytes is shorter than the 8-byte header start")
    return _API_PEEK.unpack_from(payload)


def parse_request_header(payload: bytes | memoryview, flexible: bool) -> tuple[RequestHeader, int]:
    """The request header (v2 when the body is flexible, else v1) and the offset where the body starts."""
    if len(payload) < _HEADER_FIXED.size:
        raise MalformedRequestError(f"request of {len(payload)} bytes is shorter than a request header")
    api_key, api_version, correlation_id, client_id_len = _HEADER_FIXED.unpack_from(payload)
    pos = _HEADER_FIXED.size
    client_id = None
    if client_id_len >= 0:
        end = pos + client_id_len
        if end > len(payload):
            raise MalformedRequestError(f"client id of {client_id_len} bytes runs past the end of the frame")
        try:
            client_id = bytes(payload[pos:end]).decode("utf-8")
        except UnicodeDecodeError as exc:
            raise MalformedRequestError(f"client id is not UTF-8: {exc}") from None
        pos = end
    elif client_id_len != -1:
        raise MalformedRequestError(f"client id length {client_id_len} is negative")
    if flexible:
        pos = skip_tagged_fields(payload, pos)
    return RequestHeader(api_key, api_version, correlation_id, client_id), pos


def response_header(correlation_id: int, flexible: bool) -> bytes:
    """Response header v0, or v1 (with an empty tagged field section) for flexible responses."""
    head = _CORRELATION.pack(correlation_id)
    return head + b"\x00" if flexible else head


def encode_request_header(header: RequestHeader, flexible: bool) -> bytes:
    """Request header v1 or v2: what a client (this SDK, the node's own RPCs, tests) sends."""
    if header.client_id is None:
        client = b""
        length = -1
    else:
        client = header.client_id.encode("utf-8")
        length = len(client)
    head = _HEADER_FIXED.pack(header.api_key, header.api_version, header.correlation_id, length) + client
    return head + b"\x00" if flexible else head
