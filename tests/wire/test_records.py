"""Record batch v2: round trips, kafka-python as the oracle in both directions, corruption, fuzzing."""

from __future__ import annotations

import contextlib
import struct

import pytest
import snappy
from crc32c import crc32c
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st
from kafka import codec as kafka_codec
from kafka.record.default_records import DefaultRecordBatch, DefaultRecordBatchBuilder
from kafka.record.memory_records import MemoryRecords, MemoryRecordsBuilder

from quorum.wire.records import (
    BATCH_HEADER_SIZE,
    Compression,
    CorruptRecordError,
    Record,
    RecordBatch,
    TimestampType,
    TruncatedBatch,
    build_batch,
    build_control_batch,
    iter_batches,
    patch_base_offset,
    patch_partition_leader_epoch,
)

NOW_MS = 1_763_700_000_000
FUZZ = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
ROUND_TRIP = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])

# -- strategies -------------------------------------------------------------------------------

payloads = st.none() | st.binary(max_size=300)
headers = st.lists(st.tuples(st.text(max_size=12), payloads), max_size=3)
codecs = st.sampled_from(list(Compression))


@st.composite
def record_lists(draw: st.DrawFn, min_size: int = 1, max_size: int = 30) -> tuple[int, list[Record]]:
    """(base_offset, records): strictly increasing offsets with gaps, as compaction leaves them,
    and timestamps that wander both ways around the first one."""
    base_offset = draw(st.integers(0, 2**40))
    size = draw(st.integers(min_size, max_size))
    gaps = draw(st.lists(st.integers(1, 20_000), min_size=size, max_size=size))
    first_gap = draw(st.integers(0, 5))
    base_ts = draw(st.integers(0, 2**45))
    deltas = draw(st.lists(st.integers(-(2**20), 2**20), min_size=size, max_size=size))
    records = []
    offset = base_offset + first_gap - gaps[0]
    for gap, delta in zip(gaps, deltas, strict=True):
        offset += gap
        records.append(Record(offset, base_ts + delta, draw(payloads), draw(payloads), draw(headers)))
    return base_offset, records


def as_tuples(records) -> list[tuple]:
    """Records of either library as comparable tuples."""
    return [(r.offset, r.timestamp, r.key, r.value, list(r.headers)) for r in records]


def simple_records(count: int, value_size: int = 100, base_offset: int = 0) -> list[Record]:
    return [
        Record(base_offset + i, NOW_MS + i, b"key-%d" % i if i % 3 else None, bytes([i % 251]) * value_size, [])
        for i in range(count)
    ]


def kafka_python_batch(records: list[Record], compression: int = 0, **producer) -> bytes:
    """kafka-python's own encoding of `records` (offsets must start at 0: it writes baseOffset 0)."""
    builder = DefaultRecordBatchBuilder(
        magic=2,
        compression_type=compression,
        is_transactional=producer.get("is_transactional", False),
        producer_id=producer.get("producer_id", -1),
        producer_epoch=producer.get("producer_epoch", -1),
        base_sequence=producer.get("base_sequence", -1),
        batch_size=1 << 30,
    )
    for r in records:
        assert builder.append(r.offset, r.timestamp, r.key, r.value, r.headers) is not None
    return bytes(builder.build())


def with_fixed_crc(batch: bytes | bytearray) -> bytes:
    """The batch with its CRC recomputed, so a test reaches the checks behind the CRC."""
    out = bytearray(batch)
    struct.pack_into(">I", out, 17, crc32c(memoryview(out)[21:]))
    return bytes(out)


def exhaust(data: bytes) -> None:
    """Everything a broker does with untrusted bytes: walk, validate, decode."""
    walk = iter_batches(data)
    for batch in walk:
        batch.validate()
        list(batch)
        _ = (batch.compression, batch.is_control, batch.max_timestamp, batch.next_offset, repr(batch))


# -- round trips ------------------------------------------------------------------------------


@ROUND_TRIP
@given(
    record_lists(),
    codecs,
    st.integers(-1, 2**31 - 1),
    st.sampled_from([(-1, -1, -1), (7, 0, 0), (2**40, 3, 2**31 - 100)]),
    st.booleans(),
    st.sampled_from(list(TimestampType)),
)
def test_round_trip(drawn, compression, leader_epoch, producer, transactional, timestamp_type):
    base_offset, records = drawn
    producer_id, producer_epoch, base_sequence = producer
    data = build_batch(
        records,
        base_offset=base_offset,
        partition_leader_epoch=leader_epoch,
        compression=compression,
        producer_id=producer_id,
        producer_epoch=producer_epoch,
        base_sequence=base_sequence,
        is_transactional=transactional,
        timestamp_type=timestamp_type,
    )
    batch = RecordBatch(data)
    batch.validate()
    assert (batch.base_offset, batch.partition_leader_epoch, batch.magic) == (base_offset, leader_epoch, 2)
    assert batch.size_in_bytes == len(data)
    assert batch.compression is compression
    assert (batch.producer_id, batch.producer_epoch, batch.base_sequence) == producer
    assert batch.is_transactional is transactional and not batch.is_control
    assert batch.timestamp_type is timestamp_type
    assert batch.records_count == len(records)
    assert batch.last_offset == records[-1].offset and batch.next_offset == records[-1].offset + 1
    assert batch.base_timestamp == records[0].timestamp
    assert batch.max_timestamp == max(r.timestamp for r in records)
    if timestamp_type is TimestampType.LOG_APPEND_TIME:
        expected = [Record(r.offset, batch.max_timestamp, r.key, r.value, r.headers) for r in records]
    else:
        expected = records
    assert list(batch) == expected


@pytest.mark.parametrize("compression", list(Compression))
@pytest.mark.parametrize("size", [0, 1, 63, 64, 8191, 8192, 100_000])
def test_lengths_around_the_varint_table_and_block_sizes(compression, size):
    """Keys, values and records crossing one/two-byte varints, the 8 KiB table and 32 KiB snappy blocks."""
    value = (bytes(range(256)) * (size // 256 + 1))[:size]
    near = [Record(i, NOW_MS + i, b"k" * size, value) for i in range(3)]  # small deltas
    far = [Record(9000 * i, NOW_MS - 9000 * i, None, value, [("h", value)]) for i in range(1, 3)]  # large ones
    records = near + far
    batch = RecordBatch(build_batch(records, compression=compression))
    batch.validate()
    assert list(batch) == records


@pytest.mark.parametrize("compression", list(Compression))
def test_empty_batch(compression):
    """Kafka's cleaner keeps empty batches for producer state: a header, no body and no codec."""
    data = build_batch([], base_offset=40, compression=compression, producer_id=5, producer_epoch=1)
    assert len(data) == BATCH_HEADER_SIZE
    batch = RecordBatch(data)
    batch.validate()
    assert list(batch) == [] and batch.records_count == 0 and batch.producer_id == 5
    assert batch.compression is Compression.NONE
    assert list(DefaultRecordBatch(data)) == []


def test_records_accepts_any_iterable():
    records = simple_records(5)
    assert build_batch(iter(records)) == build_batch(records) == build_batch(tuple(records))


@pytest.mark.parametrize(
    ("records", "error"),
    [
        ([Record(3, 0, None, b"a"), Record(3, 0, None, b"b")], ValueError),  # offsets must increase
        ([Record(1, 0, None, b"a")], None),  # the first offset may be past base_offset
        ([Record(2**31, 0, None, b"a")], ValueError),  # lastOffsetDelta is an int32
        ([Record(0, 0, "text", b"a")], TypeError),
        ([Record(0, 0, None, b"a", [(b"bytes-key", b"v")])], TypeError),
        ([Record(0, 0, None, b"a"), Record(1, 2**64, None, b"a")], ValueError),
    ],
)
def test_build_refuses_what_kafka_cannot_carry(records, error):
    if error is None:
        RecordBatch(build_batch(records)).validate()
    else:
        with pytest.raises(error):
            build_batch(records)


def test_build_refuses_unknown_codec_and_timestamp_type():
    with pytest.raises(ValueError):
        build_batch(simple_records(1), compression=5)
    with pytest.raises(ValueError):
        build_batch(simple_records(1), timestamp_type=2)
    with pytest.raises(ValueError):
        build_batch(simple_records(1), producer_epoch=2**15)


# -- kafka-python as the oracle ---------------------------------------------------------------


@ROUND_TRIP
@given(record_lists(), codecs, st.sampled_from(list(TimestampType)))
def test_kafka_python_reads_our_batches(drawn, compression, timestamp_type):
    base_offset, records = drawn
    data = build_batch(
        records, base_offset=base_offset, partition_leader_epoch=9, compression=compression,
        timestamp_type=timestamp_type, producer_id=77, producer_epoch=2, base_sequence=10,
    )  # fmt: skip
    theirs = DefaultRecordBatch(data)
    assert theirs.validate_crc()
    assert (theirs.base_offset, theirs.leader_epoch, theirs.compression_type) == (base_offset, 9, compression)
    assert (theirs.producer_id, theirs.producer_epoch, theirs.base_sequence) == (77, 2, 10)
    assert theirs.timestamp_type == timestamp_type
    assert as_tuples(theirs) == as_tuples(RecordBatch(data))
    if timestamp_type is TimestampType.CREATE_TIME:
        assert as_tuples(DefaultRecordBatch(data)) == as_tuples(records)


@ROUND_TRIP
@given(record_lists(), codecs, st.booleans())
def test_we_read_kafka_python_batches(drawn, compression, idempotent):
    _, records = drawn
    records = [Record(r.offset - records[0].offset, r.timestamp, r.key, r.value, r.headers) for r in records]
    producer = {"producer_id": 1234, "producer_epoch": 3, "base_sequence": 99} if idempotent else {}
    data = kafka_python_batch(records, compression, **producer)
    batch = RecordBatch(data)
    batch.validate()
    assert list(batch) == records
    assert batch.producer_id == producer.get("producer_id", -1)
    assert batch.base_sequence == producer.get("base_sequence", -1)
    # kafka-python sends uncompressed when the codec does not shrink the records.
    assert batch.compression in (compression, Compression.NONE)


@pytest.mark.parametrize("compression", [Compression.NONE, Compression.SNAPPY, Compression.LZ4, Compression.ZSTD])
def test_same_bytes_as_kafka_python(compression):
    """Field for field the same encoding: kafka-python writes baseOffset and leader epoch 0.

    gzip is left out: GzipFile stamps the current time into its header.
    """
    records = simple_records(500) + [Record(500, NOW_MS - 5, None, None, [("h", None), ("é", b"\x00")])]
    ours = build_batch(records, partition_leader_epoch=0, compression=compression)
    assert ours == kafka_python_batch(records, compression)


def test_memory_records_walks_our_concatenation_and_we_walk_theirs():
    ours = b"".join(
        build_batch(simple_records(10, base_offset=10 * n), base_offset=10 * n, compression=n % 5) for n in range(6)
    )
    theirs = [list(batch) for batch in MemoryRecords(ours)]
    assert [as_tuples(b) for b in theirs] == [as_tuples(b) for b in iter_batches(ours)]

    builder = MemoryRecordsBuilder(magic=2, compression_type=Compression.LZ4, batch_size=1 << 20, offset=0)
    for r in simple_records(50):
        builder.append(r.timestamp, r.key, r.value, r.headers)
    builder.close()
    kp_batches = bytes(builder.buffer()) * 2
    walk = iter_batches(kp_batches)
    batches = list(walk)
    assert walk.truncated is None and len(batches) == 2
    for batch in batches:
        batch.validate()
        assert list(batch) == simple_records(50)


@pytest.mark.parametrize("producer_id", [-1, 4000])
def test_control_batches_both_ways(producer_id):
    """A commit marker (version 0, type 1) and a KRaft-style control record, read by kafka-python."""
    key, value = b"\x00\x00\x00\x01", b"\x00\x00\x00\x00\x00\x07"
    data = build_control_batch(
        key,
        value,
        base_offset=41,
        partition_leader_epoch=3,
        timestamp=NOW_MS,
        producer_id=producer_id,
        producer_epoch=1 if producer_id >= 0 else -1,
    )
    batch = RecordBatch(data)
    batch.validate()
    assert batch.is_control and batch.is_transactional is (producer_id >= 0)
    assert list(batch) == [Record(41, NOW_MS, key, value, [])]
    theirs = DefaultRecordBatch(data)
    assert theirs.validate_crc() and theirs.is_control_batch
    (marker,) = list(theirs)
    assert marker.commit and marker.offset == 41 and marker.value == value


@ROUND_TRIP
@given(
    st.binary(min_size=4, max_size=4),  # version and type, int16 each: kafka-python unpacks exactly 4
    st.binary(max_size=200),
    st.integers(0, 2**62),
    st.integers(-1, 2**31 - 1),
    st.integers(-1, 2**45),
    st.sampled_from([(-1, -1), (0, 0), (2**50, 2**15 - 1)]),
)
def test_control_batch_round_trip(key, value, base_offset, leader_epoch, timestamp, producer):
    producer_id, producer_epoch = producer
    data = build_control_batch(key, value, base_offset, leader_epoch, timestamp, producer_id, producer_epoch)
    batch = RecordBatch(data)
    batch.validate()
    assert batch.is_control and batch.is_transactional is (producer_id != -1)
    assert (batch.base_offset, batch.partition_leader_epoch, batch.producer_id, batch.producer_epoch) == (
        base_offset, leader_epoch, producer_id, producer_epoch,
    )  # fmt: skip
    assert (batch.base_timestamp, batch.max_timestamp, batch.last_offset_delta) == (timestamp, timestamp, 0)
    assert list(batch) == [Record(base_offset, timestamp, key, value, [])]
    theirs = DefaultRecordBatch(data)
    assert theirs.validate_crc() and theirs.is_control_batch
    assert [(r.offset, r.key, r.value) for r in theirs] == [(base_offset, key, value)]


# -- compression quirks -----------------------------------------------------------------------


def with_body(body: bytes, compression: Compression, count: int, base_timestamp: int = -1) -> bytes:
    """A batch around an arbitrary (possibly compressed) records body."""
    template = bytearray(build_batch([]))
    template += body
    struct.pack_into(">h", template, 21, compression)
    struct.pack_into(">q", template, 27, base_timestamp)
    struct.pack_into(">i", template, 8, len(template) - 12)
    struct.pack_into(">i", template, 57, count)
    return with_fixed_crc(template)


COMPRESS = {
    Compression.GZIP: kafka_codec.gzip_encode,
    Compression.SNAPPY: kafka_codec.snappy_encode,
    Compression.LZ4: kafka_codec.lz4_encode,
    Compression.ZSTD: kafka_codec.zstd_encode,
}


def plain_body(records: list[Record]) -> bytes:
    return build_batch(records)[BATCH_HEADER_SIZE:]


def test_raw_snappy_as_librdkafka_writes_it():
    """librdkafka compresses snappy without the xerial framing Java uses; both must read."""
    records = simple_records(200)
    batch = RecordBatch(with_body(snappy.compress(plain_body(records)), Compression.SNAPPY, 200, NOW_MS))
    batch.validate()
    assert list(batch) == records


def test_xerial_snappy_has_java_framing():
    data = build_batch(simple_records(400), compression=Compression.SNAPPY)
    assert data[BATCH_HEADER_SIZE : BATCH_HEADER_SIZE + 8] == b"\x82SNAPPY\x00"


def test_several_zstd_frames_are_one_body():
    import zstandard

    records = simple_records(20)
    body = plain_body(records)
    frames = b"".join(
        zstandard.ZstdCompressor(write_content_size=False).compress(body[i : i + 500]) for i in range(0, len(body), 500)
    )
    batch = RecordBatch(with_body(frames, Compression.ZSTD, 20, NOW_MS))
    batch.validate()
    assert list(batch) == records


@pytest.mark.parametrize(
    ("compression", "mangle", "reason"),
    [
        (Compression.ZSTD, lambda b: b[:-4], "zstd body does not decompress"),
        (Compression.LZ4, lambda b: b + b"junk", "lz4 body does not decompress"),
        (Compression.LZ4, lambda b: b[:-4], "lz4 body does not decompress"),
        (Compression.GZIP, lambda b: b[:-4], "gzip body does not decompress"),
        (Compression.SNAPPY, lambda b: b[:-4], "snappy body does not decompress"),
        (Compression.SNAPPY, lambda b: b[:16] + b"\xff\xff\xff\xfc" + b[20:], "snappy body does not decompress"),
    ],
)
def test_damaged_compressed_bodies(compression, mangle, reason):
    """Damage behind a valid CRC (a buggy producer): kafka.codec would return b"" for the zstd
    case and silently drop the lz4 trailer, so these paths are checked here."""
    records = simple_records(100)
    data = build_batch(records, compression=compression)
    damaged = with_body(mangle(data[BATCH_HEADER_SIZE:]), compression, 100)
    with pytest.raises(CorruptRecordError, match=reason) as caught:
        RecordBatch(damaged).validate()
    assert caught.value.position == BATCH_HEADER_SIZE


# -- corruption -------------------------------------------------------------------------------


@settings(max_examples=200, deadline=None)
@given(st.data(), codecs)
def test_any_flipped_bit_under_the_crc_is_caught(data, compression):
    raw = bytearray(build_batch(simple_records(20, base_offset=7), base_offset=7, compression=compression))
    position = data.draw(st.integers(21, len(raw) - 1))
    raw[position] ^= 1 << data.draw(st.integers(0, 7))
    with pytest.raises(CorruptRecordError, match="CRC mismatch") as caught:
        RecordBatch(raw).validate()
    assert caught.value.position == 17
    assert not DefaultRecordBatch(raw).validate_crc()


def test_crc_error_names_both_values():
    raw = bytearray(build_batch(simple_records(3)))
    stored = struct.unpack_from(">I", raw, 17)[0]
    raw[-1] ^= 0xFF
    actual = crc32c(memoryview(raw)[21:])
    with pytest.raises(CorruptRecordError, match=f"0x{stored:08x}.*0x{actual:08x}"):
        RecordBatch(raw).validate()


def test_structural_errors_name_the_fault_and_position():
    good = build_batch(simple_records(3))
    cases = []

    bad_magic = bytearray(good)
    bad_magic[16] = 1
    cases.append((bytes(bad_magic), "unsupported magic 1", 16))

    cases.append((good[:-1], "extends beyond the buffer", 8))
    cases.append((good + b"\x00", "1 trailing bytes after the batch", len(good)))

    codec_7 = bytearray(good)
    codec_7[22] |= 7
    cases.append((with_fixed_crc(codec_7), "unknown compression codec 7", 21))

    too_many = bytearray(good)
    struct.pack_into(">i", too_many, 57, 4)
    cases.append((with_fixed_crc(too_many), "records count 4 but the body holds only 3 records", len(good)))

    too_few = bytearray(good)
    struct.pack_into(">i", too_few, 57, 2)
    last_record = len(plain_body(simple_records(2))) + BATCH_HEADER_SIZE
    cases.append((with_fixed_crc(too_few), "bytes after the last of 2 records", last_record))

    huge_count = bytearray(good)
    struct.pack_into(">i", huge_count, 57, 2**31 - 1)
    cases.append((with_fixed_crc(huge_count), "cannot fit", 57))

    negative_count = bytearray(good)
    struct.pack_into(">i", negative_count, 57, -1)
    cases.append((with_fixed_crc(negative_count), "cannot fit", 57))

    short_length = bytearray(good)
    struct.pack_into(">i", short_length, 8, 10)
    cases.append((bytes(short_length), "below the minimum", 8))

    for data, reason, position in cases:
        with pytest.raises(CorruptRecordError, match=reason) as caught:
            RecordBatch(data).validate()
        assert caught.value.position == position, reason


@pytest.mark.parametrize(
    ("body", "reason"),
    [
        # length 9: attributes, timestamp, offset, null key, null value, 1 header with key 0xff
        (b"\x12\x00\x00\x00\x01\x01\x02\x02\xff\x01", "not UTF-8"),
        (b"\x0c\x00\x00\x00\x01\x01\x00" + b"\x00", "1 bytes after the last of 1 records"),
        (b"\x0c\x00\x00\x00\x10ab", "record 0 runs past the end"),  # an 8-byte key with 2 bytes left
        (b"\x0c\x00\x00\x00\x01\x01\x01", "header count -1"),
        (b"\x10\x00\x00\x00\x01\x01\x02\x01\x01", "header key length -1"),
        (b"\x16\x00" + b"\xff" * 11 + b"\x00", "over-long varint"),
        (b"\x04\x00\x00\x00\x01\x01\x00", "record length 2 but its fields take 6"),
    ],
)
def test_record_level_faults(body, reason):
    data = with_body(body, Compression.NONE, 1)
    with pytest.raises(CorruptRecordError, match=reason) as caught:
        RecordBatch(data).validate()
    assert BATCH_HEADER_SIZE <= caught.value.position <= len(data)


def test_fault_inside_a_compressed_body_names_the_decompressed_byte():
    data = with_body(snappy.compress(b"\x0c\x00\x00\x00\x10ab"), Compression.SNAPPY, 1)
    with pytest.raises(CorruptRecordError, match=r"runs past .* \(byte 0 of the decompressed records\) at byte 61"):
        RecordBatch(data).validate()


def test_negative_lengths_other_than_minus_one_read_as_null_like_java():
    data = with_body(b"\x0c\x00\x00\x00\x05\x03\x00", Compression.NONE, 1)  # key -3, value -2
    assert list(RecordBatch(data)) == [Record(0, -1, None, None, [])]


def test_iteration_checks_structure_but_only_validate_checks_the_crc():
    raw = bytearray(build_batch(simple_records(3)))
    struct.pack_into(">I", raw, 17, 0)
    assert len(list(RecordBatch(raw))) == 3
    with pytest.raises(CorruptRecordError, match="CRC"):
        RecordBatch(raw).validate()


def test_short_buffer_refused_at_construction():
    with pytest.raises(CorruptRecordError, match="batch header truncated: 60 of 61 bytes"):
        RecordBatch(build_batch([])[:60], position=100)


# -- patching ---------------------------------------------------------------------------------


@pytest.mark.parametrize("compression", list(Compression))
def test_patching_keeps_the_crc_valid(compression):
    first = build_batch(simple_records(5), compression=compression)
    second = build_batch(simple_records(7), compression=compression)
    log = bytearray(first + second)
    crcs = [struct.unpack_from(">I", log, at + 17)[0] for at in (0, len(first))]

    patch_base_offset(log, 0, 1000)
    patch_partition_leader_epoch(log, 0, 12)
    view = memoryview(log)
    patch_base_offset(view, len(first), 1005)
    patch_partition_leader_epoch(view, len(first), 13)

    batches = list(iter_batches(log))
    assert [struct.unpack_from(">I", log, at + 17)[0] for at in (0, len(first))] == crcs
    assert [(b.base_offset, b.partition_leader_epoch) for b in batches] == [(1000, 12), (1005, 13)]
    for batch, count, base in zip(batches, (5, 7), (1000, 1005), strict=True):
        batch.validate()
        assert [r.offset for r in batch] == list(range(base, base + count))
        assert DefaultRecordBatch(batch.raw).validate_crc()


def test_patching_refuses_what_is_not_a_v2_batch():
    with pytest.raises(CorruptRecordError, match="no batch header"):
        patch_base_offset(bytearray(30), 0, 1)
    legacy = bytearray(build_batch(simple_records(1)))
    legacy[16] = 1
    with pytest.raises(CorruptRecordError, match="magic 1"):
        patch_partition_leader_epoch(legacy, 0, 1)
    with pytest.raises(TypeError):
        patch_base_offset(build_batch(simple_records(1)), 0, 1)  # bytes are immutable


# -- walking concatenations -------------------------------------------------------------------


def test_every_cut_point_of_a_fetch_response():
    """A Fetch response cut anywhere: whole batches come out, the partial one is reported."""
    batches = [build_batch(simple_records(4, 20, 4 * n), base_offset=4 * n) for n in range(3)]
    data = b"".join(batches)
    starts = [0, len(batches[0]), len(batches[0]) + len(batches[1]), len(data)]
    for cut in range(len(data) + 1):
        walk = iter_batches(data[:cut])
        got = [batch.base_offset for batch in walk]
        complete = sum(1 for end in starts[1:] if end <= cut)
        assert got == [4 * n for n in range(complete)]
        start = starts[complete]
        if cut == start:
            assert walk.truncated is None
        else:
            needed = None if cut - start < 12 else len(batches[complete])
            assert walk.truncated == TruncatedBatch(start, cut - start, needed)
            with pytest.raises(CorruptRecordError, match="truncated batch") as caught:
                list(iter_batches(data[:cut], strict=True))
            assert caught.value.position == start
        assert walk.position == start
        # kafka-python's client reader tolerates the same tail.
        assert [b.base_offset for b in MemoryRecords(data[:cut])] == got


def test_walk_positions_and_errors_are_absolute():
    first = build_batch(simple_records(2))
    damaged = bytearray(build_batch(simple_records(2, base_offset=2), base_offset=2))
    damaged[-1] ^= 1
    walk = iter_batches(first + bytes(damaged))
    ok, bad = list(walk)
    ok.validate()
    assert bad.position == len(first)
    with pytest.raises(CorruptRecordError) as caught:
        bad.validate()
    assert caught.value.position == len(first) + 17


def test_walk_refuses_an_impossible_length():
    data = bytearray(build_batch(simple_records(1)))
    struct.pack_into(">i", data, 8, -5)
    with pytest.raises(CorruptRecordError, match="batch length -5"):
        list(iter_batches(data))


# -- fuzzing ----------------------------------------------------------------------------------


def only_corrupt_record_errors(data: bytes) -> None:
    with contextlib.suppress(CorruptRecordError):
        exhaust(data)
    try:
        batch = RecordBatch(data)
        batch.validate()
        list(batch)
    except CorruptRecordError:
        pass


@FUZZ
@given(st.binary(max_size=400))
def test_fuzz_garbage(data):
    only_corrupt_record_errors(data)


@st.composite
def damaged_batches(draw: st.DrawFn) -> bytes:
    """Valid batches with bytes overwritten, inserted or removed and the CRC then fixed, so the
    damage reaches the length, codec and record parsing behind the CRC."""
    base_offset, records = draw(record_lists(max_size=6))
    raw = bytearray(build_batch(records, base_offset=base_offset, compression=draw(codecs)))
    for _ in range(draw(st.integers(1, 4))):
        position = draw(st.integers(0, len(raw) - 1))
        action = draw(st.sampled_from(["set", "insert", "delete"]))
        if action == "set":
            raw[position] = draw(st.integers(0, 255))
        elif action == "insert":
            raw[position:position] = draw(st.binary(min_size=1, max_size=8))
        elif position >= BATCH_HEADER_SIZE:
            del raw[position : position + draw(st.integers(1, 8))]
    if draw(st.booleans()):
        struct.pack_into(">i", raw, 8, len(raw) - 12)
    return with_fixed_crc(raw) if len(raw) >= BATCH_HEADER_SIZE else bytes(raw)


@FUZZ
@given(damaged_batches())
def test_fuzz_damaged_batches(data):
    only_corrupt_record_errors(data)
    only_corrupt_record_errors(data + build_batch(simple_records(1)))


@FUZZ
@given(codecs, st.integers(-3, 50), st.binary(max_size=300))
def test_fuzz_random_bodies_behind_a_valid_crc(compression, count, body):
    """Random bytes as a (compressed) records body with header, length and CRC all consistent."""
    only_corrupt_record_errors(with_body(body, compression, count))


@FUZZ
@given(codecs, st.integers(0, 20), st.binary(max_size=200))
def test_fuzz_random_compressed_plaintext(compression, count, plaintext):
    """Random records bytes that decompress fine, so the record parser sees them."""
    assume(compression is not Compression.NONE)
    only_corrupt_record_errors(with_body(COMPRESS[compression](plaintext), compression, count))
    only_corrupt_record_errors(with_body(plaintext, Compression.NONE, count))


def test_repr_works_on_a_batch_with_an_unknown_codec():
    raw = bytearray(build_batch(simple_records(1)))
    raw[22] |= 7
    assert "compression=7" in repr(RecordBatch(raw))
