"""Varints: Kafka's limits, kafka-python as the oracle, the lookup tables, and every way decoding fails."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st
from kafka.protocol.schemas.fields.codecs import UnsignedVarInt32
from kafka.record.util import decode_varint as kafka_decode_varint
from kafka.record.util import encode_varint as kafka_encode_varint

from quorum.wire.varint import (
    INT32_MAX,
    INT32_MIN,
    INT64_MAX,
    INT64_MIN,
    MAX_VARINT_BYTES,
    MAX_VARLONG_BYTES,
    UINT32_MAX,
    ZIGZAG_BYTE,
    ZIGZAG_NULL,
    ZIGZAG_TABLE,
    ZIGZAG_TABLE_SIZE,
    TruncatedVarintError,
    VarintError,
    VarintTooLongError,
    decode_uvarint,
    decode_zigzag,
    encode_uvarint,
    encode_uvarlong,
    encode_zigzag,
)

int32s = st.integers(INT32_MIN, INT32_MAX)
int64s = st.integers(INT64_MIN, INT64_MAX)
uint32s = st.integers(0, UINT32_MAX)


def kafka_python_zigzag(value: int) -> bytes:
    out = bytearray()
    kafka_encode_varint(value, out.append)
    return bytes(out)


# -- zigzag -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "encoded"),
    [
        (0, b"\x00"),
        (-1, b"\x01"),
        (1, b"\x02"),
        (-64, b"\x7f"),
        (63, b"\x7e"),
        (64, b"\x80\x01"),
        (-65, b"\x81\x01"),
        (ZIGZAG_TABLE_SIZE - 1, b"\xfe\x7f"),  # the table's last entry
        (ZIGZAG_TABLE_SIZE, b"\x80\x80\x01"),  # the first value computed
        (-8193, b"\x81\x80\x01"),
        (-(2**20), b"\xff\xff\x7f"),  # the last three-byte shortcut
        (2**20, b"\x80\x80\x80\x01"),  # the first through the general loop
        (INT32_MAX, b"\xfe\xff\xff\xff\x0f"),
        (INT32_MIN, b"\xff\xff\xff\xff\x0f"),
        (INT32_MAX + 1, b"\x80\x80\x80\x80\x10"),  # still five bytes: zigzag of int32 limits fits 32 bits
        (INT64_MAX, b"\xfe" + b"\xff" * 8 + b"\x01"),
        (INT64_MIN, b"\xff" * 9 + b"\x01"),
    ],
)
def test_zigzag_known_encodings(value: int, encoded: bytes) -> None:
    assert encode_zigzag(value) == encoded == kafka_python_zigzag(value)
    assert decode_zigzag(encoded, 0, MAX_VARLONG_BYTES) == (value, len(encoded))


@pytest.mark.parametrize("value", [INT32_MIN, INT32_MAX])
def test_int32_limits_take_five_bytes_and_decode_as_varints(value: int) -> None:
    encoded = encode_zigzag(value)
    assert len(encoded) == MAX_VARINT_BYTES
    assert decode_zigzag(encoded, 0) == (value, MAX_VARINT_BYTES)  # the default width is int32's


@pytest.mark.parametrize("value", [INT64_MIN, INT64_MAX])
def test_int64_limits_take_ten_bytes_and_are_too_long_for_an_int32(value: int) -> None:
    encoded = encode_zigzag(value)
    assert len(encoded) == MAX_VARLONG_BYTES
    assert decode_zigzag(encoded, 0, MAX_VARLONG_BYTES) == (value, MAX_VARLONG_BYTES)
    with pytest.raises(VarintTooLongError) as caught:
        decode_zigzag(encoded, 0)
    assert (caught.value.start, caught.value.position) == (0, MAX_VARINT_BYTES)


@pytest.mark.parametrize("value", [INT64_MAX + 1, INT64_MIN - 1, 2**64, -(2**64), 2**100])
def test_zigzag_refuses_what_is_not_an_int64(value: int) -> None:
    with pytest.raises(ValueError, match="does not fit a 64-bit varint"):
        encode_zigzag(value)


@given(int64s)
def test_zigzag_round_trip(value: int) -> None:
    encoded = encode_zigzag(value)
    assert encoded == kafka_python_zigzag(value)
    assert decode_zigzag(encoded, 0, MAX_VARLONG_BYTES) == (value, len(encoded))
    assert kafka_decode_varint(encoded, 0) == (value, len(encoded))


@given(int32s)
def test_zigzag_int32_round_trip_within_five_bytes(value: int) -> None:
    encoded = encode_zigzag(value)
    assert len(encoded) <= MAX_VARINT_BYTES
    assert decode_zigzag(encoded, 0) == (value, len(encoded))


@given(st.binary(max_size=12), int64s, st.binary(max_size=12))
def test_zigzag_decodes_in_place_and_leaves_the_rest(before: bytes, value: int, after: bytes) -> None:
    encoded = encode_zigzag(value)
    for buf in (before + encoded + after, bytearray(before + encoded + after), memoryview(before + encoded + after)):
        assert decode_zigzag(buf, len(before), MAX_VARLONG_BYTES) == (value, len(before) + len(encoded))


def test_table_agrees_with_the_general_encoder() -> None:
    assert len(ZIGZAG_TABLE) == ZIGZAG_TABLE_SIZE
    for value, encoded in enumerate(ZIGZAG_TABLE):
        assert encoded == kafka_python_zigzag(value), value
        assert len(encoded) <= 2
    assert ZIGZAG_NULL == encode_zigzag(-1) == b"\x01"


def test_one_byte_decoding_table() -> None:
    assert len(ZIGZAG_BYTE) == 0x80
    for byte, value in enumerate(ZIGZAG_BYTE):
        assert decode_zigzag(bytes((byte,)), 0) == (value, 1)


# -- unsigned ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "encoded"),
    [
        (0, b"\x00"),
        (1, b"\x01"),
        (0x7F, b"\x7f"),
        (0x80, b"\x80\x01"),
        (0x3FFF, b"\xff\x7f"),
        (0x4000, b"\x80\x80\x01"),
        (INT32_MAX, b"\xff\xff\xff\xff\x07"),
        (INT32_MAX + 1, b"\x80\x80\x80\x80\x08"),
        (UINT32_MAX, b"\xff\xff\xff\xff\x0f"),
    ],
)
def test_unsigned_known_encodings(value: int, encoded: bytes) -> None:
    assert encode_uvarint(value) == encoded == UnsignedVarInt32.encode(value)
    assert decode_uvarint(encoded, 0) == (value, len(encoded))


@pytest.mark.parametrize("value", [-1, INT32_MIN, UINT32_MAX + 1, 2**64])
def test_unsigned_refuses_what_is_not_a_uint32(value: int) -> None:
    with pytest.raises(ValueError, match="unsigned 32-bit varint"):
        encode_uvarint(value)


@given(uint32s)
def test_unsigned_round_trip(value: int) -> None:
    encoded = encode_uvarint(value)
    assert encoded == UnsignedVarInt32.encode(value)
    assert len(encoded) <= MAX_VARINT_BYTES
    assert decode_uvarint(encoded, 0) == (value, len(encoded))


@given(st.integers(0, 2**64 - 1))
def test_unsigned_long_round_trip_agrees_with_the_32_bit_encoding(value: int) -> None:
    encoded = encode_uvarlong(value)
    assert len(encoded) <= MAX_VARLONG_BYTES
    assert decode_uvarint(encoded, 0, MAX_VARLONG_BYTES) == (value, len(encoded))
    if value <= UINT32_MAX:
        assert encoded == encode_uvarint(value)


@pytest.mark.parametrize("value", [-1, 2**64])
def test_unsigned_long_refuses_what_is_not_a_uint64(value: int) -> None:
    with pytest.raises(ValueError, match="unsigned 64-bit varint"):
        encode_uvarlong(value)


@given(st.binary(max_size=12), uint32s, st.binary(max_size=12))
def test_unsigned_decodes_in_place_and_leaves_the_rest(before: bytes, value: int, after: bytes) -> None:
    buf = memoryview(before + encode_uvarint(value) + after)
    assert decode_uvarint(buf, len(before)) == (value, len(buf) - len(after))


def test_unsigned_fifth_byte_bits_past_32_are_kept_unchecked() -> None:
    """As the framing reader always did: a five-byte varint is read whole, not range-checked."""
    assert decode_uvarint(b"\xff\xff\xff\xff\x7f", 0) == (2**35 - 1, 5)


def test_unsigned_width_is_a_parameter() -> None:
    ten = b"\xff" * 9 + b"\x01"
    assert decode_uvarint(ten, 0, MAX_VARLONG_BYTES) == (2**64 - 1, 10)
    with pytest.raises(VarintTooLongError):
        decode_uvarint(ten, 0)


# -- errors -----------------------------------------------------------------------------------

decoders = pytest.mark.parametrize("decode", [decode_uvarint, decode_zigzag])


@decoders
@pytest.mark.parametrize(
    ("buf", "pos"),
    [
        (b"", 0),
        (b"\x80", 0),
        (b"\xff\xff\xff\xff", 0),
        (b"\x00\x00\x80\x80", 2),
        (b"\x05", 1),  # starts at the end
        (b"\x05", 7),  # starts past the end
    ],
)
def test_truncated_input(decode, buf: bytes, pos: int) -> None:
    with pytest.raises(TruncatedVarintError, match=f"starting at byte {pos} runs past the end") as caught:
        decode(buf, pos)
    error = caught.value
    assert isinstance(error, VarintError) and isinstance(error, ValueError)
    assert error.start == pos
    assert error.position == max(len(buf), pos)


@decoders
def test_truncated_inside_a_bytearray_and_a_memoryview(decode) -> None:
    for buf in (bytearray(b"\x01\xff"), memoryview(b"\x01\xff")):
        with pytest.raises(TruncatedVarintError) as caught:
            decode(buf, 1)
        assert (caught.value.start, caught.value.position) == (1, 2)


@decoders
@pytest.mark.parametrize("width", [1, 2, MAX_VARINT_BYTES, MAX_VARLONG_BYTES])
def test_too_long(decode, width: int) -> None:
    buf = b"\x00" + b"\x80" * width + b"\x00"  # would end one byte past the width
    with pytest.raises(VarintTooLongError, match=f"starting at byte 1 does not end within {width} bytes") as caught:
        decode(buf, 1, width)
    assert (caught.value.start, caught.value.position) == (1, 1 + width)
    assert decode(buf, 1, width + 1) == (0, width + 2)  # the same bytes fit one byte more


@decoders
@given(st.binary(max_size=12), st.integers(0, 13), st.integers(1, MAX_VARLONG_BYTES))
def test_garbage_decodes_or_raises_a_varint_error(decode, buf: bytes, pos: int, width: int) -> None:
    try:
        value, end = decode(buf, pos, width)
    except VarintError as error:
        assert error.start == pos
        if isinstance(error, VarintTooLongError):
            assert error.position == pos + width <= len(buf)
        else:
            assert isinstance(error, TruncatedVarintError)
            assert error.position == max(pos, len(buf)) < pos + width
        assert all(byte >= 0x80 for byte in buf[pos : error.position])
    else:
        assert pos < end <= min(len(buf), pos + width)
        assert buf[end - 1] < 0x80 and all(byte >= 0x80 for byte in buf[pos : end - 1])
        if decode is decode_uvarint:
            assert value >= 0
