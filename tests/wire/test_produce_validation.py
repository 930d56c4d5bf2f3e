"""The leader's Produce validation walks records without decoding them; it must refuse exactly
what decoding refuses.

`validate_produced_batch` used to decode every record (`RecordBatch.records()`) and then check
the offsets; it now walks the records' structure (`RecordBatch._walk`). These tests hold the two
to the same answer, byte for byte: same acceptance, same exception type, same message, same
position, same record_index. The decode path stays the oracle because it is the one consumers
and the log reader use: whatever it cannot read, a leader must not store.
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from unittest import mock

import pytest
from crc32c import crc32c
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from quorum.wire.compression import compress, decompress
from quorum.wire.records import (
    BATCH_HEADER_SIZE,
    Compression,
    CorruptRecordError,
    InvalidRecordError,
    Record,
    RecordBatch,
    RecordsWalk,
    build_batch,
    iter_batches,
    validate_produced_batch,
)

# Every test twice: with the compiled walk (quorum.wire._walk) answering first, and with the Python
# walk alone (tests/wire/conftest.py); each hypothesis test at half its former examples per path.
pytestmark = pytest.mark.usefixtures("walk_path")

T0 = 1_763_700_000_000
DIFFERENTIAL = settings(max_examples=50, deadline=None, suppress_health_check=[HealthCheck.too_slow])

payloads = st.none() | st.binary(max_size=200)
values = payloads | st.integers(8192, 20_000).map(lambda size: b"v" * size)
"""Record values, now and then of 8 KiB and more: their record and value lengths take three-byte varints."""
# Keys that are not UTF-8 are drawn as bytes and smuggled in through the body mutations below;
# str keys here give the encoder's UTF-8, including multi-byte characters a cut can split.
header_lists = st.lists(st.tuples(st.text(max_size=6), payloads), max_size=3)
codecs = st.sampled_from(list(Compression))


def decode_based_walk(batch: RecordBatch) -> RecordsWalk:
    """The check `validate_produced_batch` made before the walk: decode everything, then compare
    each record's offset delta with its index; and the walk's summary for the record rules (timestamp
    deltas as the producer wrote them: a LogAppendTime batch is decoded as a CreateTime one, since
    decoding stamps the batch's maxTimestamp on its records; decoding does not check the CRC)."""
    raw = bytearray(batch.raw)
    struct.pack_into(">h", raw, 21, struct.unpack_from(">h", raw, 21)[0] & ~0x08)
    records = RecordBatch(bytes(raw), batch.position).records()
    first_bad, bad_delta = -1, 0
    for index, record in enumerate(records):
        delta = record.offset - batch.base_offset
        if delta != index:
            first_bad, bad_delta = index, delta
            break
    deltas = [record.timestamp - batch.base_timestamp for record in records] or [0]
    keyless = [index for index, record in enumerate(records) if record.key is None]
    return RecordsWalk(first_bad, bad_delta, min(deltas), max(deltas), keyless[0] if keyless else -1)


def validate_by_decoding(data: bytes | bytearray | memoryview, max_batch_bytes: int) -> RecordBatch:
    """`validate_produced_batch` as it was: the same header checks, the records decoded."""
    with mock.patch.object(RecordBatch, "_walk", decode_based_walk):
        return validate_produced_batch(data, max_batch_bytes)


def outcome(check: Callable[[], object]) -> tuple[object, ...]:
    """What a check answered, comparable across the two paths."""
    try:
        check()
    except CorruptRecordError as exc:
        return type(exc), str(exc), exc.position, getattr(exc, "record_index", None)
    return ("accepted",)


def fix_crc(raw: bytearray) -> bytes:
    if len(raw) >= BATCH_HEADER_SIZE:
        struct.pack_into(">I", raw, 17, crc32c(memoryview(raw)[21:]))
    return bytes(raw)


@st.composite
def produced_batches(draw: st.DrawFn) -> tuple[list[Record], Compression]:
    """Records as a producer builds them (offsets 0, 1, 2, ...), sometimes with a gap so the
    offset check has something to find, with timestamps around the first one."""
    size = draw(st.integers(1, 12))
    gap_at = draw(st.one_of(st.none(), st.integers(0, size - 1)))
    records = []
    offset = 0
    for index in range(size):
        if index == gap_at:
            offset += draw(st.integers(1, 300))
        timestamp = T0 + draw(st.integers(-(2**20), 2**20))
        records.append(Record(offset, timestamp, draw(payloads), draw(values), draw(header_lists)))
        offset += 1
    return records, draw(codecs)


@st.composite
def mutated(draw: st.DrawFn, data: bytes) -> bytes:
    """`data` with a few bytes set, inserted or deleted (varint-sized runs, so lengths, deltas
    and header counts change, not only payload bytes)."""
    raw = bytearray(data)
    for _ in range(draw(st.integers(0, 4))):
        position = draw(st.integers(0, max(len(raw) - 1, 0)))
        action = draw(st.sampled_from(["set", "insert", "delete", "varint"]))
        if action == "set" and raw:
            raw[position] = draw(st.integers(0, 255))
        elif action == "insert":
            raw[position:position] = draw(st.binary(min_size=1, max_size=6))
        elif action == "varint":
            raw[position:position] = draw(st.sampled_from([b"\x80", b"\xff\x01", b"\xff" * 11, b"\x01", b"\x7f",
                                                           b"\xff\xff\x01", b"\x80\x80"]))
        else:
            del raw[position : position + draw(st.integers(1, 6))]
    return bytes(raw)


@st.composite
def corrupted_produce_batches(draw: st.DrawFn) -> bytes:
    """Valid producer batches whose records body (the plaintext, for a compressed batch) is
    damaged, then framed again with batchLength, recordsCount, lastOffsetDelta and CRC made
    consistent as a buggy but honest producer would, so the damage reaches the record parser."""
    records, codec = draw(produced_batches())
    good = build_batch(records, compression=codec, producer_id=draw(st.sampled_from([-1, 7])),
                       producer_epoch=0, base_sequence=0)  # fmt: skip
    plaintext = good[BATCH_HEADER_SIZE:]
    if codec is not Compression.NONE:
        plaintext = decompress(codec, plaintext)
    plaintext = draw(mutated(plaintext))
    body = plaintext if codec is Compression.NONE else compress(codec, plaintext)
    if codec is not Compression.NONE and draw(st.integers(0, 9)) == 0:
        body = draw(mutated(body))  # now and then the compressed bytes themselves
    raw = bytearray(good[:BATCH_HEADER_SIZE] + body)
    count = len(records) + draw(st.sampled_from([0, 0, 0, 0, -1, 1, 5]))
    struct.pack_into(">i", raw, 8, len(raw) - 12)
    struct.pack_into(">i", raw, 57, count)
    if draw(st.integers(0, 9)):
        struct.pack_into(">i", raw, 23, count - 1)
    return fix_crc(raw)


def assert_same(data: bytes) -> None:
    """Both paths, on every buffer type a caller may hand over, give the same answer."""
    for given_as in (data, bytearray(data), memoryview(data)):
        walked = outcome(lambda given_as=given_as: validate_produced_batch(given_as, 1 << 20))
        decoded = outcome(lambda given_as=given_as: validate_by_decoding(given_as, 1 << 20))
        assert walked == decoded, (given_as.__class__.__name__, data.hex())


@DIFFERENTIAL
@given(produced_batches())
def test_the_walk_accepts_what_decoding_accepts(drawn):
    records, codec = drawn
    data = build_batch(records, compression=codec)
    assert_same(data)
    consecutive = [record.offset for record in records] == list(range(len(records)))
    assert outcome(lambda: validate_produced_batch(data, 1 << 20))[0] == ("accepted" if consecutive else
                                                                            InvalidRecordError)  # fmt: skip


@DIFFERENTIAL
@given(corrupted_produce_batches())
def test_the_walk_refuses_what_decoding_refuses_with_the_same_error(data):
    assert_same(data)


@DIFFERENTIAL
@given(codecs, st.integers(-2, 40), st.binary(max_size=300))
def test_random_bodies_behind_a_valid_crc(codec, count, body):
    raw = bytearray(build_batch([]) + (body if codec is Compression.NONE else compress(codec, body)))
    struct.pack_into(">h", raw, 21, codec)
    struct.pack_into(">i", raw, 8, len(raw) - 12)
    struct.pack_into(">i", raw, 57, count)
    struct.pack_into(">i", raw, 23, count - 1)
    assert_same(fix_crc(raw))


@DIFFERENTIAL
@given(st.lists(corrupted_produce_batches(), min_size=1, max_size=3), st.data())
def test_walk_and_decode_agree_on_batches_inside_a_larger_buffer(batches, data):
    """Batches found by `iter_batches` view a slice of a concatenation, are walked in the view
    and name positions in the whole buffer; the decode path must agree on those too."""
    joined = b"".join(batches)
    as_type = data.draw(st.sampled_from([bytes, bytearray, memoryview]))
    try:
        found = list(iter_batches(as_type(joined)))
    except CorruptRecordError:
        return
    for batch in found:
        walked = outcome(lambda batch=batch: RecordBatch(batch.raw, batch.position)._walk())
        decoded = outcome(lambda batch=batch: decode_based_walk(RecordBatch(batch.raw, batch.position)))
        assert walked == decoded
        if walked == ("accepted",):
            fresh = RecordBatch(batch.raw, batch.position)
            assert fresh._walk() == decode_based_walk(RecordBatch(batch.raw, batch.position))


# -- the faults the walk must name as decoding does, one each -----------------------------------


def batch_around(body: bytes, count: int) -> bytes:
    raw = bytearray(build_batch([]) + body)
    struct.pack_into(">i", raw, 8, len(raw) - 12)
    struct.pack_into(">i", raw, 57, count)
    struct.pack_into(">i", raw, 23, count - 1)
    return fix_crc(raw)


@pytest.mark.parametrize(
    ("body", "count", "reason", "position"),
    [
        (b"\x12\x00\x00\x00\x01\x01\x02\x02\xff\x01", 1, "record 0 has a header key that is not UTF-8", 61),
        (b"\x0c\x00\x00\x00\x01\x01\x00" + b"\x00", 1, "1 bytes after the last of 1 records", 68),
        (b"\x0c\x00\x00\x00\x10ab" + b"\x00" * 8, 1, "record 0: record length 6 but its fields take 14", 68),
        (b"\x0c\x00\x00\x00\x10ab", 1, "record 0 runs past the end", 61),
        (b"\x0c\x00\x00\x00\x01\x01\x01", 1, "header count -1", 68),
        (b"\x10\x00\x00\x00\x01\x01\x02\x01\x01", 1, "header key length -1", 69),
        (b"\x16\x00" + b"\xff" * 11 + b"\x00", 1, "record 0 has an over-long varint", 61),
        (b"\x0c\x00\x00\x00\x01\x01\x00" * 2, 3, "records count 3 cannot fit", 57),
        (b"".join(b"\x14\x00\x00%c\x01\x08abcd\x00" % (2 * i) for i in range(3)), 4,
         "records count 4 but the body holds only 3 records", 94),
        (b"\x0c\x00\x00\x00\x01\x01\x00" + b"\x0c\x00\x00\x02\x10ab", 2, "record 1 runs past the end", 68),
        (b"\x14\x00\x00\x00\x01\x01\x02\x00\x04", 1, "records overrun the body by 2 bytes", 70),
    ],
)  # fmt: skip
def test_record_faults_name_the_same_record_and_byte(body, count, reason, position):
    data = batch_around(body, count)
    with pytest.raises(InvalidRecordError, match=reason) as caught:
        validate_produced_batch(data, 1 << 20)
    assert caught.value.position == position
    assert caught.value.record_index is None
    assert_same(data)


def test_a_structural_fault_after_an_offset_fault_wins_as_it_did():
    """Decoding stopped at the first fault anywhere before offsets were compared; the walk notes
    the first bad offset and carries on, so a later broken record is still what is reported."""
    bad_offset = b"\x0c\x00\x00\x04\x01\x01\x00"  # record 0 with offset delta 2
    broken = b"\x0c\x00\x00\x02\x10ab"  # record 1, its key running off the end
    data = batch_around(bad_offset + broken, 2)
    with pytest.raises(InvalidRecordError, match="record 1 runs past the end") as caught:
        validate_produced_batch(data, 1 << 20)
    assert caught.value.record_index is None
    data = batch_around(bad_offset + b"\x0c\x00\x00\x02\x01\x01\x00", 2)
    with pytest.raises(InvalidRecordError, match="record 0 has offset delta 2, expected 0") as caught:
        validate_produced_batch(data, 1 << 20)
    assert caught.value.record_index == 0


def test_large_producer_batches_are_walked_in_place_whatever_buffer_type():
    """The shape the broker sees from librdkafka: about 1 MB of 1 KiB values, no key, no headers."""
    records = [Record(i, T0 + i // 100, None, bytes([i % 251]) * 1024) for i in range(1000)]
    data = build_batch(records, producer_id=3, producer_epoch=0, base_sequence=0)
    for given_as in (data, bytearray(data), memoryview(data), memoryview(b"xx" + data)[2:]):
        assert validate_produced_batch(given_as, 1 << 21).records_count == 1000
    for codec in (Compression.LZ4, Compression.ZSTD):
        assert validate_produced_batch(build_batch(records, compression=codec), 1 << 21).records_count == 1000


def test_the_walk_leaves_records_undecoded():
    """No Record is built by validation: the first `records()` decodes, from the (patched) bytes."""
    buf = bytearray(build_batch([Record(i, T0, b"k", b"v") for i in range(3)]))
    batch = validate_produced_batch(buf, 1 << 20)
    assert batch._records is None
    struct.pack_into(">q", buf, 0, 100)
    assert [record.offset for record in batch.records()] == [100, 101, 102]
