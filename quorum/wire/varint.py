"""Kafka's varints: zigzag ones in records, unsigned ones in KIP-482 compact lengths and tagged fields.

Both are base-128, least significant group first: seven bits a byte, the high bit set on every
byte but the last.

- Zigzag (signed) varints first map 0, -1, 1, -2, ... to 0, 1, 2, 3, ..., so that small negative
  numbers stay short. Every field of a v2 record is one: an int32 "varint" takes at most 5 bytes,
  an int64 "varlong" (the timestamp delta) at most 10.
- Unsigned varints (int32, at most 5 bytes) are the compact lengths of flexible versions (N + 1,
  0 for null), and the tag numbers, sizes and counts of tagged field sections.

Decoders take a buffer and a position and return ``(value, position after it)``. A buffer that
ends inside a varint raises `TruncatedVarintError`; one whose varint does not end within
`max_bytes` raises `VarintTooLongError`; both are `VarintError`, a ValueError that carries where
the varint started and where decoding stopped. Like Java's readers they do not check the value
range: the fifth byte of an int32 varint may carry bits past bit 31, and they are kept.

The record codec's hot loops encode small values through `ZIGZAG_TABLE` and decode one- and
two-byte varints inline with `ZIGZAG_BYTE`; both are exported for that, and agree with the
functions here byte for byte.
"""

from __future__ import annotations

__all__ = [
    "INT32_MAX",
    "INT32_MIN",
    "INT64_MAX",
    "INT64_MIN",
    "MAX_VARINT_BYTES",
    "MAX_VARLONG_BYTES",
    "UINT32_MAX",
    "UINT64_MAX",
    "ZIGZAG_BYTE",
    "ZIGZAG_NULL",
    "ZIGZAG_TABLE",
    "ZIGZAG_TABLE_SIZE",
    "TruncatedVarintError",
    "VarintError",
    "VarintTooLongError",
    "decode_uvarint",
    "decode_zigzag",
    "encode_uvarint",
    "encode_uvarlong",
    "encode_zigzag",
]

INT32_MIN = -(2**31)
INT32_MAX = 2**31 - 1
INT64_MIN = -(2**63)
INT64_MAX = 2**63 - 1
UINT32_MAX = 2**32 - 1
UINT64_MAX = 2**64 - 1

#: The longest int32 varint (zigzag or unsigned) and the longest int64 varlong, in bytes.
MAX_VARINT_BYTES = 5
MAX_VARLONG_BYTES = 10


class VarintError(ValueError):
    """A varint that cannot be decoded: `start` is where it began, `position` where decoding stopped."""

    def __init__(self, reason: str, start: int, position: int) -> None:
        self.reason = reason
        self.start = start
        self.position = position
        super().__init__(reason)


class TruncatedVarintError(VarintError):
    """The buffer ends inside a varint; `position` is the missing byte (the buffer's length)."""


class VarintTooLongError(VarintError):
    """No byte ends the varint within its width; `position` is the byte after the last one read."""


def _truncated(start: int, pos: int) -> TruncatedVarintError:
    reason = f"varint starting at byte {start} runs past the end of the buffer at byte {pos}"
    return TruncatedVarintError(reason, start, pos)


def _too_long(start: int, pos: int, max_bytes: int) -> VarintTooLongError:
    return VarintTooLongError(f"varint starting at byte {start} does not end within {max_bytes} bytes", start, pos)


# ---------------------------------------------------------------------------------------------
# Unsigned


def _unsigned_bytes(value: int) -> bytes:
    """Base-128 bytes of a non-negative int, unchecked: the callers check the range."""
    out = bytearray()
    while value >= 0x80:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def encode_uvarint(value: int) -> bytes:
    """Unsigned varint of 0..2**32-1, e.g. a compact length (count + 1) or a tag number."""
    if not 0 <= value <= UINT32_MAX:
        raise ValueError(f"{value} does not fit an unsigned 32-bit varint")
    if value < 0x80:
        return bytes((value,))
    return _unsigned_bytes(value)


def encode_uvarlong(value: int) -> bytes:
    """Unsigned varint of 0..2**64-1, at most `MAX_VARLONG_BYTES` long (`decode_uvarint` with that
    `max_bytes` reads it): not a Kafka field, the Spark sink's origin stamps carry Spark's long batch ids so."""
    if not 0 <= value <= UINT64_MAX:
        raise ValueError(f"{value} does not fit an unsigned 64-bit varint")
    return _unsigned_bytes(value)


def decode_uvarint(buf: bytes | bytearray | memoryview, pos: int, max_bytes: int = MAX_VARINT_BYTES) -> tuple[int, int]:
    """The unsigned varint at `pos` and the position after it; at most `max_bytes` bytes long."""
    start = pos
    value = 0
    shift = 0
    try:
        for _ in range(max_bytes):
            byte = buf[pos]
            pos += 1
            value |= (byte & 0x7F) << shift
            if byte < 0x80:
                return value, pos
            shift += 7
    except IndexError:
        raise _truncated(start, pos) from None
    raise _too_long(start, pos, max_bytes)


# ---------------------------------------------------------------------------------------------
# Zigzag


def _compute_zigzag(value: int) -> bytes:
    """Zigzag varint of any int64, computed; `encode_zigzag` looks small ones up instead."""
    zigzag = (value << 1) ^ (value >> 63)
    if 0 <= zigzag < 0x200000:  # up to three bytes: lengths of big values, millisecond deltas
        if zigzag < 0x80:
            return bytes((zigzag,))
        if zigzag < 0x4000:
            return bytes((zigzag & 0x7F | 0x80, zigzag >> 7))
        return bytes((zigzag & 0x7F | 0x80, (zigzag >> 7) & 0x7F | 0x80, zigzag >> 14))
    if not INT64_MIN <= value <= INT64_MAX:
        raise ValueError(f"{value} does not fit a 64-bit varint")
    return _unsigned_bytes(zigzag)


#: Encoded zigzag varints of 0..8191 (two bytes at most). Lengths and deltas of ordinary records
#: land here, so hot loops index this table instead of computing.
ZIGZAG_TABLE_SIZE = 8192
ZIGZAG_TABLE: tuple[bytes, ...] = tuple(_compute_zigzag(n) for n in range(ZIGZAG_TABLE_SIZE))
#: The encoded -1: the length of a null key, value or header value.
ZIGZAG_NULL = _compute_zigzag(-1)
#: Zigzag decoding of one-byte varints (0x00..0x7F), the common case when parsing.
ZIGZAG_BYTE: tuple[int, ...] = tuple((b >> 1) ^ -(b & 1) for b in range(0x80))


def encode_zigzag(value: int) -> bytes:
    """Zigzag varint (or varlong) of any int64; ValueError outside the int64 range."""
    if 0 <= value < ZIGZAG_TABLE_SIZE:
        return ZIGZAG_TABLE[value]
    return _compute_zigzag(value)


def decode_zigzag(buf: bytes | bytearray | memoryview, pos: int, max_bytes: int = MAX_VARINT_BYTES) -> tuple[int, int]:
    """The zigzag varint at `pos` and the position after it; `max_bytes` is 5 for int32, 10 for int64.

    The loop is `decode_uvarint`'s, written again rather than called: records decode every
    header field and every long varint here, and a second call per varint cost records with
    headers 7-9% of their parse speed.
    """
    start = pos
    zigzag = 0
    shift = 0
    try:
        for _ in range(max_bytes):
            byte = buf[pos]
            pos += 1
            zigzag |= (byte & 0x7F) << shift
            if byte < 0x80:
                return (zigzag >> 1) ^ -(zigzag & 1), pos
            shift += 7
    except IndexError:
        raise _truncated(start, pos) from None
    raise _too_long(start, pos, max_bytes)
