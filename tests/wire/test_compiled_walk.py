"""The compiled record walk (`quorum.wire._walk`) against its reference, `records._walk_records`.

Its contract (`quorum/wire/_walk.c`): `walk(body, origin, count)` returns exactly the Python walk's
summary when the Python walk accepts `body[origin:]` and the summary fits an int64, and None
("ask Python") otherwise: for every fault, whose error the Python walk then raises, and for the
timestamp deltas past 64 bits that only Python's ints hold. A leader depends on both halves: the
first for its speed, the second so that it never stores a batch that consumers cannot read.
Through `validate_produced_batch` both paths are compared by test_produce_validation.py.
"""

from __future__ import annotations

import os
import struct

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from quorum.wire import records
from quorum.wire.compiled_walk import PURE_PYTHON_ENV, load_compiled_walk
from quorum.wire.records import BATCH_HEADER_SIZE, Compression, CorruptRecordError, RecordBatch, build_batch
from tests.wire.test_produce_validation import mutated, produced_batches

compiled = load_compiled_walk()
needs_compiled = pytest.mark.skipif(compiled is None, reason="quorum.wire._walk is not built")
AGREEMENT = settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1


def reference(body: bytes, origin: int, count: int) -> tuple[int, ...] | None:
    """What the compiled walk must answer: the Python walk's summary, or None where it raises or
    its summary holds a number no int64 does."""
    try:
        summary = tuple(records._walk_records(body, origin, count, origin, 0))
    except CorruptRecordError:
        return None
    return summary if all(INT64_MIN <= value <= INT64_MAX for value in summary) else None


def assert_agrees(body: bytes, origin: int, count: int) -> None:
    expected = reference(body, origin, count)
    assert compiled is not None
    for given_as in (body, bytearray(body), memoryview(body)):
        assert compiled(given_as, origin, count) == expected, (type(given_as).__name__, body.hex(), origin, count)


def zigzag(value: int, padding: int = 0) -> bytes:
    """The zigzag varint of any int, with `padding` redundant zero groups (still a valid varint)."""
    unsigned = 2 * value if value >= 0 else -2 * value - 1
    groups = []
    while True:
        groups.append(unsigned & 0x7F)
        unsigned >>= 7
        if not unsigned:
            break
    groups += [0] * padding
    return bytes([group | 0x80 for group in groups[:-1]] + [groups[-1]])


lengths_and_deltas = st.integers(-3, 300) | st.integers(-(2**34), 2**34 - 1)
"""int32 varint fields: ordinary, and as wide as five bytes carry (past int32, as the readers keep)."""
timestamp_deltas = st.integers(-300, 300) | st.integers(INT64_MIN, INT64_MAX)
beyond_int64 = st.integers(-(2**69), INT64_MIN - 1) | st.integers(INT64_MAX + 1, 2**69 - 1)
"""Varlongs past 64 bits: Python's walk reads the ten bytes' 70 bits, the compiled one leaves them to it."""
payloads = st.none() | st.binary(max_size=12)
utf8_keys = st.text(max_size=4).map(str.encode)  # multi-byte characters too
FAULTS = ("record length", "key length", "value length", "header count", "header length", "header key",
          "over-long varint", "cut", "trailing byte", "count", "varlong past 64 bits")  # fmt: skip
"""What one example gets wrong, at one record (a quarter get nothing wrong: the walk must accept those)."""


@st.composite
def field(draw: st.DrawFn, value: int, width: int, over_long: bool = False) -> bytes:
    """The zigzag varint of `value`: minimal, or padded to the field's full width (still valid),
    or `over_long`, one byte past it."""
    minimal = len(zigzag(value))
    if over_long:
        return zigzag(value, max(width + 1 - minimal, 0))
    return zigzag(value, draw(st.sampled_from([0, 0, 0, max(width - minimal, 0)])))


@st.composite
def wrong(draw: st.DrawFn, right: int) -> int:
    return draw(st.sampled_from([right - 1, right + 1, right + 3, -2]) | lengths_and_deltas)


@st.composite
def record(draw: st.DrawFn, index: int, fault: str | None) -> bytes:
    """One record field by field, as a producer writes it but for `fault`."""
    over_long = draw(st.integers(0, 5)) if fault == "over-long varint" else -1

    def varint(value: int, position: int) -> bytes:
        return draw(field(value, 10 if position == 1 else 5, over_long == position))

    def sized(payload: bytes | None, position: int, bad: bool) -> bytes:
        length = -1 if payload is None else len(payload)
        return varint(draw(wrong(length)) if bad else length, position) + (payload or b"")

    offset_delta = index if draw(st.integers(0, 3)) else draw(wrong(index))  # not a fault: the summary names it
    timestamp_delta = draw(beyond_int64 if fault == "varlong past 64 bits" else timestamp_deltas)
    rest = b"\x00" + varint(timestamp_delta, 1) + varint(offset_delta, 2)
    rest += sized(draw(payloads), 3, fault == "key length") + sized(draw(payloads), 4, fault == "value length")
    headers = draw(st.lists(st.tuples(utf8_keys, st.none() | st.binary(max_size=4)), max_size=2))
    if fault == "header key":
        headers.append((draw(st.binary(min_size=1, max_size=4)), None))  # mostly not UTF-8
    count = len(headers)
    rest += varint(draw(wrong(count)) if fault == "header count" else count, 5)
    bad_header = draw(st.integers(0, 2 * count)) if fault == "header length" else -1
    for at, (key, value) in enumerate(headers):
        rest += sized(key, 6, bad_header == 2 * at) + sized(value, 6, bad_header == 2 * at + 1)
    length = len(rest)
    return varint(draw(wrong(length)) if fault == "record length" else length, 0) + rest


@st.composite
def record_bodies(draw: st.DrawFn) -> tuple[bytes, int, int]:
    """(buffer, origin, count): up to five records behind a prefix the walk must not read, with
    at most one thing wrong."""
    prefix = draw(st.binary(max_size=3))
    size = draw(st.integers(0, 5))
    fault = draw(st.sampled_from((None,) * 4 + FAULTS))
    at = draw(st.integers(0, max(size - 1, 0)))
    body = b"".join(draw(record(index, fault if index == at else None)) for index in range(size))
    if fault == "cut" and body:
        body = body[: draw(st.integers(0, len(body) - 1))]
    elif fault == "trailing byte":
        body += draw(st.sampled_from([b"\x00", b"\xff"]))
    count = size + draw(st.sampled_from([-1, 1])) if fault == "count" else size
    return prefix + body, len(prefix), max(count, 0)


def test_the_compiled_walk_is_built_and_used():
    """`./run` builds it (`pip install -e .`); a build that silently failed would leave every
    broker on the Python walk at a fifteenth of the speed."""
    if os.environ.get(PURE_PYTHON_ENV, "") not in ("", "0"):
        pytest.skip(f"{PURE_PYTHON_ENV} is set")
    assert compiled is not None, "quorum.wire._walk is not built: `.venv/bin/python setup.py build_ext --inplace`"
    assert records._compiled_walk is compiled


@needs_compiled
@AGREEMENT
@given(record_bodies())
def test_the_compiled_walk_agrees_on_records_field_by_field(drawn):
    assert_agrees(*drawn)


@needs_compiled
@AGREEMENT
@given(st.binary(max_size=120), st.integers(0, 4), st.integers(0, 8))
def test_the_compiled_walk_agrees_on_garbage(body, origin, count):
    assert_agrees(body, origin, count)


@needs_compiled
@AGREEMENT
@given(produced_batches(), st.data())
def test_the_compiled_walk_answers_for_producer_batches_and_agrees_on_damaged_ones(drawn, data):
    records_, _ = drawn
    batch = build_batch(records_)
    expected = reference(batch, BATCH_HEADER_SIZE, len(records_))
    assert expected is not None
    assert compiled(batch, BATCH_HEADER_SIZE, len(records_)) == expected  # answered, not handed back
    damaged = batch[:BATCH_HEADER_SIZE] + data.draw(mutated(batch[BATCH_HEADER_SIZE:]))
    assert_agrees(damaged, BATCH_HEADER_SIZE, len(records_) + data.draw(st.sampled_from([0, 0, -1, 1])))


@needs_compiled
@pytest.mark.parametrize("over", [0, 1])
@pytest.mark.parametrize("at", range(6))
def test_a_varint_at_its_full_width_is_read_and_one_byte_more_is_refused(at, over):
    """Record length, timestamp delta (ten bytes), offset delta, key and value lengths, header
    count: each padded to its field's width (`over` bytes past it)."""
    values, widths = [7, 0, -1, 1, 0], [10, 5, 5, 5, 5]

    def varint(position: int, value: int, width: int) -> bytes:
        minimal = len(zigzag(value))
        return zigzag(value, width - minimal + over if position == at else 0)

    fields = [varint(i + 1, value, width) for i, (value, width) in enumerate(zip(values, widths, strict=True))]
    rest = b"\x00" + b"".join(fields[:4]) + b"v" + fields[4]  # a null key, a one-byte value
    body = varint(0, len(rest), 5) + rest
    assert_agrees(body, 0, 1)
    assert (reference(body, 0, 1) is not None) is (over == 0)


@needs_compiled
@pytest.mark.parametrize(
    ("tenth_byte", "answered"), [(0x00, True), (0x01, True), (0x02, False), (0x7F, False)]
)
def test_a_varlong_past_64_bits_is_left_to_python_and_the_batch_gets_pythons_summary(tenth_byte, answered):
    delta = b"\xff" * 9 + bytes([tenth_byte])  # zigzag 2**63 - 1 + tenth_byte * 2**63
    rest = b"\x00" + delta + b"\x00\x01\x02v\x00"  # offset delta 0, null key, 1-byte value, no headers
    data = bytearray(build_batch([]) + zigzag(len(rest)) + rest)
    struct.pack_into(">i", data, 8, len(data) - 12)
    struct.pack_into(">i", data, 57, 1)
    walked = RecordBatch(bytes(data))._walk()
    unsigned = 2**63 - 1 + tenth_byte * 2**63
    timestamp = (unsigned >> 1) ^ -(unsigned & 1)
    assert tuple(walked) == (-1, 0, timestamp, timestamp, 0)
    assert (compiled(bytes(data), BATCH_HEADER_SIZE, 1) is not None) is answered


@needs_compiled
def test_buffers_that_are_not_plain_bytes_are_left_to_python():
    """Python indexes a strided view, or one of signed bytes, item by item: not the bytes C reads."""
    body = b"\x0c\x00\x00\x00\x01\x01\x00"  # one record: null key, null value, no headers
    assert compiled(body, 0, 1) is not None
    assert compiled(memoryview(body * 2)[::2], 0, 1) is None
    assert compiled(memoryview(body).cast("b"), 0, 1) is None


def test_compressed_and_plain_batches_give_the_same_summary_on_either_path():
    """The summary a leader's record rules read, on the shape librdkafka sends."""
    rows = [records.Record(i, 1_763_700_000_000 + i * 7 - 500, None if i % 3 else b"k", b"v" * 1024)
            for i in range(200)]  # fmt: skip
    for codec in (Compression.NONE, Compression.LZ4):
        data = build_batch(rows, compression=codec)
        with_c = RecordBatch(data)._walk()
        with pytest.MonkeyPatch.context() as patch:
            patch.setattr(records, "_compiled_walk", None)
            with_python = RecordBatch(data)._walk()
        assert with_c == with_python == (-1, 0, 0, 199 * 7, 1)  # deltas from the first record's timestamp
