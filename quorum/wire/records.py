"""Kafka record batch v2 (magic 2): the bytes producers send, logs store and fetches return.

A batch is a 61-byte header followed by the records, which are compressed as one block when
the attributes name a codec::

    baseOffset int64 | batchLength int32 | partitionLeaderEpoch int32 | magic int8 | crc uint32
    | attributes int16 | lastOffsetDelta int32 | baseTimestamp int64 | maxTimestamp int64
    | producerId int64 | producerEpoch int16 | baseSequence int32 | recordsCount int32 | records

The CRC-32C covers attributes to the end, so a broker can stamp baseOffset and
partitionLeaderEpoch on an incoming batch without touching the records or the CRC: that is what
`patch_base_offset` and `patch_partition_leader_epoch` are for. (`patch_log_append_time` is the
one patch that must recompute the CRC, as Kafka's does, for topics that stamp the broker's time.)
`validate_produced_batch` is the check a leader makes of a Produce request's records before
it appends them, with Kafka's distinction between corrupt bytes, refused batches and too large ones.

Each record is ``length varint | attributes int8 | timestampDelta varlong | offsetDelta varint |
keyLength varint | key | valueLength varint | value | headerCount varint | headers``, all varints
zigzag-encoded. Parsing is strict: anything that does not decode exactly raises
`CorruptRecordError` with the byte position, because a broker must refuse what it cannot
store faithfully rather than guess.

The varints themselves are `quorum.wire.varint`'s and the codecs `quorum.wire.compression`'s
(`Compression` is importable from here too); this module is the batch and record layout.
"""

from __future__ import annotations

import struct
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from enum import IntEnum
from typing import NamedTuple

from crc32c import crc32c

from quorum.wire.compiled_walk import load_compiled_walk
from quorum.wire.compression import Compression, CompressionError, compress, decompress
from quorum.wire.framing import DEFAULT_MAX_FRAME_BYTES
from quorum.wire.varint import (
    ZIGZAG_BYTE,
    ZIGZAG_NULL,
    ZIGZAG_TABLE,
    ZIGZAG_TABLE_SIZE,
    TruncatedVarintError,
    VarintTooLongError,
    decode_zigzag,
    encode_zigzag,
)

__all__ = [
    "BATCH_HEADER_SIZE",
    "LOG_OVERHEAD",
    "MAGIC",
    "BatchIterator",
    "Compression",
    "CorruptRecordError",
    "InvalidRecordError",
    "Record",
    "RecordTooLargeError",
    "RecordBatch",
    "RecordsWalk",
    "TimestampType",
    "TruncatedBatch",
    "build_batch",
    "build_values_batch",
    "empty_batch",
    "build_control_batch",
    "iter_batches",
    "patch_base_offset",
    "patch_log_append_time",
    "patch_partition_leader_epoch",
    "rebuild_batch",
    "validate_produced_batch",
    "validate_produced_records",
]

MAGIC = 2
#: baseOffset and batchLength: the part of every batch that batchLength does not count.
LOG_OVERHEAD = 12
BATCH_HEADER_SIZE = 61

_PARTITION_LEADER_EPOCH_POS = 12
_MAGIC_POS = 16
_CRC_POS = 17
_ATTRIBUTES_POS = 21
_COUNT_POS = 57
#: The smallest legal batchLength: a header with no records.
_MIN_BATCH_LENGTH = BATCH_HEADER_SIZE - LOG_OVERHEAD
#: length, attributes, timestampDelta, offsetDelta, keyLength, valueLength, headerCount.
_MIN_RECORD_SIZE = 7

_COMPRESSION_MASK = 0x07
_TIMESTAMP_TYPE_BIT = 0x08
_TRANSACTIONAL_BIT = 0x10
_CONTROL_BIT = 0x20

_INT32_MAX = 2**31 - 1
_compiled_walk = load_compiled_walk()
"""`quorum.wire._walk.walk`, or None: `RecordBatch._walk` asks it first and `_walk_records` when it
has no answer (see `quorum.wire.compiled_walk`). Tests set it to force either path."""
_NO_LOW, _NO_HIGH = 2**70, -(2**70)
"""Beyond any varlong: where a walk's lowest and highest timestamp delta start."""

_HEAD = struct.Struct(">qiibI")  # baseOffset .. crc: the part outside the CRC (plus magic)
_TAIL = struct.Struct(">hiqqqhii")  # attributes .. recordsCount: the start of the CRC'd part
_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")
_I64 = struct.Struct(">q")
_U32 = struct.Struct(">I")
_I8 = struct.Struct(">b")


MAX_DECOMPRESSED_BATCH_BYTES = DEFAULT_MAX_FRAME_BYTES
"""The most a compressed batch body may decompress to: what one request could carry uncompressed
(socket.request.max.bytes). Past it the batch is corrupt: a 300 KB Produce of gzip'd zeros made a
broker allocate 600 MB and stall 12 s (the protocol fuzzer's compression bomb, issue 19)."""


class CorruptRecordError(ValueError):
    """Bytes that are not a well-formed v2 record batch; `position` is where it went wrong.

    The position is an absolute byte offset in the buffer the caller handed over (for
    `iter_batches`, the whole concatenation), so a log reader can truncate a torn tail there
    and a broker can log exactly which byte of a Produce request was bad.
    """

    def __init__(self, reason: str, position: int | None = None) -> None:
        self.reason = reason
        self.position = position
        where = "" if position is None else f" at byte {position}"
        super().__init__(f"{reason}{where}")


class InvalidRecordError(CorruptRecordError):
    """A batch that is intact (its CRC matches) but that a broker must refuse: Kafka's
    InvalidRecordException, answered with INVALID_RECORD. `record_index` names the record at
    fault when one is (Produce v8+ reports it in RecordErrors)."""

    def __init__(self, reason: str, position: int | None = None, record_index: int | None = None) -> None:
        super().__init__(reason, position)
        self.record_index = record_index


class RecordTooLargeError(CorruptRecordError):
    """A batch larger than the topic's `max.message.bytes`: MESSAGE_TOO_LARGE."""


class RecordsWalk(NamedTuple):
    """What a walk over a batch's records learnt beside their structure, for the leader's record
    rules (Kafka's LogValidator: keys on compacted topics, timestamps in range) to decide without
    decoding the records; only a batch they may refuse is decoded, to name each record at fault."""

    bad_offset_index: int
    """The first record whose offset delta is not its index, or -1."""
    bad_offset_delta: int
    """That record's offset delta (0 when there is none)."""
    min_timestamp_delta: int
    """The lowest timestampDelta of any record (0 for no records)."""
    max_timestamp_delta: int
    """The highest timestampDelta of any record (0 for no records)."""
    first_keyless: int
    """The first record with a null key, or -1."""


class TimestampType(IntEnum):
    """Attribute bit 3: whether timestamps are the producer's or the broker's append time."""

    CREATE_TIME = 0
    LOG_APPEND_TIME = 1


@dataclass(slots=True)
class Record:
    """One record with its absolute offset, as a log or consumer sees it."""

    offset: int
    timestamp: int
    key: bytes | None = None
    value: bytes | None = None
    headers: list[tuple[str, bytes | None]] = field(default_factory=list)


# ---------------------------------------------------------------------------------------------
# Building


def _nullable(data: bytes | None) -> tuple[bytes, ...]:
    if data is None:
        return (ZIGZAG_NULL,)
    return encode_zigzag(len(data)), data


def _header_parts(headers: Sequence[tuple[str, bytes | None]]) -> list[bytes]:
    parts = [encode_zigzag(len(headers))]
    for name, value in headers:
        if not isinstance(name, str):
            raise TypeError(f"header key must be str, not {type(name).__name__}")
        encoded = name.encode("utf-8")
        parts += (encode_zigzag(len(encoded)), encoded, *_nullable(value))
    return parts


def _record_parts(
    offset_delta: int, timestamp_delta: int, key: bytes | None, value: bytes | None, headers: list
) -> tuple[bytes, ...]:
    """Any record, length prefix first: the slow path behind the loop in `_encode_records`.

    The value stays a separate part, so a big one is copied once, by the batch's final join.
    """
    head = b"\x00" + encode_zigzag(timestamp_delta) + encode_zigzag(offset_delta)
    head += ZIGZAG_NULL if key is None else encode_zigzag(len(key)) + key
    if value is None:
        head += ZIGZAG_NULL
        value = b""
    else:
        head += encode_zigzag(len(value))
    tail = b"".join(_header_parts(headers)) if headers else b"\x00"
    return encode_zigzag(len(head) + len(value) + len(tail)), head, value, tail


def _encode_records(records: Sequence[Record], base_offset: int, base_timestamp: int) -> tuple[bytes, int, int]:
    """The records body, uncompressed; returns (body, maxTimestamp, last offset).

    This loop is the cost of producing, so it is written for speed: records with a value, no
    headers and small lengths and deltas are joined from table-encoded varints in one call,
    and anything else (nulls, headers, large or negative numbers) goes through the general
    encoder. Pieces are collected in a list and joined once at the end, because growing a
    bytearray by big values reallocates (and copies) it at every record. Offsets must strictly
    increase, as Kafka requires inside a batch.
    """
    varints = ZIGZAG_TABLE
    join = b"".join
    parts: list[bytes] = []
    append = parts.append
    previous_offset = base_offset - 1
    max_timestamp = base_timestamp
    for record in records:
        offset = record.offset
        timestamp = record.timestamp
        key = record.key
        value = record.value
        if offset <= previous_offset:
            raise ValueError(f"record offsets must increase within a batch: {offset} after {previous_offset}")
        previous_offset = offset
        if timestamp > max_timestamp:
            max_timestamp = timestamp
        if value is not None and timestamp >= base_timestamp and not record.headers:
            try:
                if key is None:
                    body = join((
                        b"\x00", varints[timestamp - base_timestamp], varints[offset - base_offset],
                        b"\x01", varints[len(value)], value, b"\x00",
                    ))  # fmt: skip
                else:
                    body = join((
                        b"\x00", varints[timestamp - base_timestamp], varints[offset - base_offset],
                        varints[len(key)], key, varints[len(value)], value, b"\x00",
                    ))  # fmt: skip
                append(varints[len(body)])
            except IndexError:
                pass  # a number beyond the table
            else:
                append(body)
                continue
        parts += _record_parts(offset - base_offset, timestamp - base_timestamp, key, value, record.headers)
    return join(parts), max_timestamp, previous_offset


def _attributes(compression: Compression, timestamp_type: int, is_transactional: bool, is_control: bool) -> int:
    if timestamp_type not in (0, 1):
        raise ValueError(f"timestamp_type must be 0 (create time) or 1 (log append time), not {timestamp_type}")
    attributes = compression | (_TIMESTAMP_TYPE_BIT if timestamp_type else 0)
    if is_transactional:
        attributes |= _TRANSACTIONAL_BIT
    if is_control:
        attributes |= _CONTROL_BIT
    return attributes


def build_batch(
    records: Iterable[Record],
    base_offset: int = 0,
    partition_leader_epoch: int = -1,
    compression: Compression | int = Compression.NONE,
    producer_id: int = -1,
    producer_epoch: int = -1,
    base_sequence: int = -1,
    is_transactional: bool = False,
    is_control: bool = False,
    timestamp_type: int = TimestampType.CREATE_TIME,
) -> bytes:
    """Encode one v2 batch.

    Offsets in the batch are each record's offset minus `base_offset` (so a compacted batch
    keeps its gaps); baseTimestamp is the first record's timestamp, as Java's builder does.
    The requested codec is always used, even when it does not shrink the records (kafka-python
    and librdkafka fall back to none), so the batch's attributes say what the caller asked for.
    An empty batch (Kafka's log cleaner keeps some to retain producer state) gets timestamps -1
    and, like Kafka's, no codec.
    """
    codec = Compression(compression)
    if not isinstance(records, Sequence):
        records = list(records)
    if not records:
        # As Kafka's writeEmptyHeader does: a compressed stream of nothing is a body, and
        # kafka-python fails to decompress an empty snappy or lz4 one.
        codec = Compression.NONE
    attributes = _attributes(codec, timestamp_type, is_transactional, is_control)
    if records:
        base_timestamp = records[0].timestamp
        body, max_timestamp, last_offset = _encode_records(records, base_offset, base_timestamp)
        last_offset_delta = last_offset - base_offset
        if last_offset_delta > _INT32_MAX:
            raise ValueError(f"offset delta {last_offset_delta} does not fit in int32")
        if codec is not Compression.NONE:
            body = compress(codec, body)
    else:
        base_timestamp = max_timestamp = -1
        last_offset_delta = 0
        body = b""
    return _assemble(body, len(records), base_offset, partition_leader_epoch, attributes, last_offset_delta,
                     base_timestamp, max_timestamp, producer_id, producer_epoch, base_sequence)  # fmt: skip


def rebuild_batch(batch: RecordBatch, records: Sequence[Record]) -> bytes:
    """`batch` holding only `records` (some of its own), as Kafka's log cleaner rewrites one.

    The base and last offsets, leader epoch, producer id, epoch and base sequence, codec and
    flags stay the batch's, so the log's batches still cover every offset and an idempotent
    producer's last sequence survives (Kafka's overrideLastOffset). With no records left it is
    a bare header (Kafka's writeEmptyHeader): no codec, both timestamps the batch's largest.
    """
    if not records:
        attributes = _attributes(Compression.NONE, batch.timestamp_type, batch.is_transactional, batch.is_control)
        return _assemble(b"", 0, batch.base_offset, batch.partition_leader_epoch, attributes, batch.last_offset_delta,
                         batch.max_timestamp, batch.max_timestamp, batch.producer_id, batch.producer_epoch,
                         batch.base_sequence)  # fmt: skip
    if records[-1].offset > batch.last_offset or records[0].offset < batch.base_offset:
        raise ValueError(f"records {records[0].offset}..{records[-1].offset} are outside batch "
                         f"{batch.base_offset}..{batch.last_offset}")  # fmt: skip
    codec = batch.compression
    attributes = _attributes(codec, batch.timestamp_type, batch.is_transactional, batch.is_control)
    base_timestamp = records[0].timestamp
    body, max_timestamp, _ = _encode_records(records, batch.base_offset, base_timestamp)
    if batch.timestamp_type is TimestampType.LOG_APPEND_TIME:
        max_timestamp = batch.max_timestamp
    if codec is not Compression.NONE:
        body = compress(codec, body)
    return _assemble(body, len(records), batch.base_offset, batch.partition_leader_epoch, attributes,
                     batch.last_offset_delta, base_timestamp, max_timestamp, batch.producer_id, batch.producer_epoch,
                     batch.base_sequence)  # fmt: skip


def empty_batch(base_offset: int, last_offset: int, partition_leader_epoch: int, timestamp_type: int,
                max_timestamp: int) -> bytes:
    """A batch of no records covering `base_offset..last_offset` without a producer: what the log
    cleaner leaves of a run of emptied batches, and what a follower keeps of one that begins
    below its log end. Clients step over it to `last_offset + 1`, as over Kafka's empty batches."""
    if not 0 <= last_offset - base_offset <= _INT32_MAX:
        raise ValueError(f"an empty batch cannot cover offsets {base_offset}..{last_offset}")
    attributes = _attributes(Compression.NONE, timestamp_type, False, False)
    return _assemble(b"", 0, base_offset, partition_leader_epoch, attributes, last_offset - base_offset,
                     max_timestamp, max_timestamp)  # fmt: skip


def _assemble(body: bytes, count: int, base_offset: int, partition_leader_epoch: int, attributes: int,
              last_offset_delta: int, base_timestamp: int, max_timestamp: int, producer_id: int = -1,
              producer_epoch: int = -1, base_sequence: int = -1) -> bytes:  # fmt: skip
    """The batch: its header (the CRC computed) and the records body."""
    try:
        tail = _TAIL.pack(
            attributes, last_offset_delta, base_timestamp, max_timestamp,
            producer_id, producer_epoch, base_sequence, count,
        )  # fmt: skip
        crc = crc32c(body, crc32c(tail))
        head = _HEAD.pack(base_offset, _MIN_BATCH_LENGTH + len(body), partition_leader_epoch, MAGIC, crc)
    except struct.error as exc:
        raise ValueError(f"batch header field out of range: {exc}") from None
    return b"".join((head, tail, body))


def build_values_batch(values: Sequence[bytes], base_offset: int, partition_leader_epoch: int, timestamp: int,
                       compression: Compression | int = Compression.NONE) -> bytes:  # fmt: skip
    """`build_batch` of records that hold a value only (null key, no headers), all at `timestamp`,
    numbered from `base_offset`: what a snapshot writer writes, a million of them for a large
    metadata image, without a `Record` object for each. The same bytes as `build_batch`."""
    if not values:
        return build_batch([], base_offset, partition_leader_epoch, compression)
    codec = Compression(compression)
    deltas = _offset_deltas(len(values))  # may hold more: zip stops at the values
    varints = ZIGZAG_TABLE
    encode = encode_zigzag
    parts: list[bytes] = []
    append = parts.append
    for delta, value in zip(deltas, values, strict=False):
        # length | attributes, timestamp delta 0 | offset delta | null key | value length | value | headers
        size = len(value)
        value_length = varints[size] if size < ZIGZAG_TABLE_SIZE else encode(size)
        length = 4 + len(delta) + len(value_length) + size
        append(varints[length] if length < ZIGZAG_TABLE_SIZE else encode(length))
        append(b"\x00\x00")
        append(delta)
        append(b"\x01")
        append(value_length)
        append(value)
        append(b"\x00")  # no headers
    body = b"".join(parts)
    if codec is not Compression.NONE:
        body = compress(codec, body)
    attributes = _attributes(codec, TimestampType.CREATE_TIME, False, False)
    return _assemble(body, len(values), base_offset, partition_leader_epoch, attributes, len(values) - 1,
                     timestamp, timestamp)  # fmt: skip


def build_control_batch(
    key: bytes,
    value: bytes,
    base_offset: int,
    partition_leader_epoch: int,
    timestamp: int,
    producer_id: int = -1,
    producer_epoch: int = -1,
) -> bytes:
    """A control batch holding one control record (already-encoded key and value).

    With a producer id it is a transaction marker, which Kafka marks transactional; without
    one it is a KRaft control record (LeaderChange, snapshot header/footer), which it does not.
    """
    return build_batch(
        [Record(base_offset, timestamp, key, value, [])],
        base_offset=base_offset,
        partition_leader_epoch=partition_leader_epoch,
        producer_id=producer_id,
        producer_epoch=producer_epoch,
        is_transactional=producer_id != -1,
        is_control=True,
    )


# ---------------------------------------------------------------------------------------------
# Patching


def _check_patchable(buf: bytearray | memoryview, offset: int) -> None:
    if offset < 0 or len(buf) - offset < BATCH_HEADER_SIZE:
        raise CorruptRecordError(
            f"no batch header at this offset: {max(len(buf) - offset, 0)} of {BATCH_HEADER_SIZE} bytes",
            offset,
        )
    magic = buf[offset + _MAGIC_POS]
    if magic != MAGIC:
        # In magic 0/1 these bytes are the message CRC; writing there would corrupt it.
        raise CorruptRecordError(f"cannot patch a magic {magic} batch", offset + _MAGIC_POS)


def patch_base_offset(buf: bytearray | memoryview, offset: int, base_offset: int) -> None:
    """Rewrite baseOffset of the batch at `offset` in place; outside the CRC, so it stays valid."""
    _check_patchable(buf, offset)
    _I64.pack_into(buf, offset, base_offset)


def patch_partition_leader_epoch(buf: bytearray | memoryview, offset: int, epoch: int) -> None:
    """Rewrite partitionLeaderEpoch of the batch at `offset` in place; outside the CRC as well."""
    _check_patchable(buf, offset)
    _I32.pack_into(buf, offset + _PARTITION_LEADER_EPOCH_POS, epoch)


_MAX_TIMESTAMP_POS = 35


def patch_log_append_time(buf: bytearray | memoryview, offset: int, timestamp: int) -> None:
    """Mark the batch at `offset` LogAppendTime with maxTimestamp `timestamp`, in place, and
    recompute its CRC (both fields are inside it), as Kafka's DefaultRecordBatch.setMaxTimestamp."""
    _check_patchable(buf, offset)
    size = _I32.unpack_from(buf, offset + 8)[0] + LOG_OVERHEAD
    if size < BATCH_HEADER_SIZE or offset + size > len(buf):
        raise CorruptRecordError(f"batch of {size} bytes does not fit the buffer", offset + 8)
    attributes = _I16.unpack_from(buf, offset + _ATTRIBUTES_POS)[0] | _TIMESTAMP_TYPE_BIT
    _I16.pack_into(buf, offset + _ATTRIBUTES_POS, attributes)
    _I64.pack_into(buf, offset + _MAX_TIMESTAMP_POS, timestamp)
    _U32.pack_into(buf, offset + _CRC_POS, crc32c(memoryview(buf)[offset + _ATTRIBUTES_POS : offset + size]))


# ---------------------------------------------------------------------------------------------
# Parsing


def _byte_view(data: bytes | bytearray | memoryview) -> memoryview:
    view = memoryview(data)
    if view.format != "B" or view.ndim != 1:
        view = view.cast("B")
    return view


class RecordBatch:
    """A read-only view of one batch in a buffer; decodes records only when asked.

    Header properties read the buffer each time, so they see a patched baseOffset or
    partitionLeaderEpoch. Decoded records are cached by the first `validate()` or iteration,
    because decoding is what costs; patch the buffer before decoding, not after.
    """

    __slots__ = ("_buf", "_position", "_records")

    def __init__(self, data: bytes | bytearray | memoryview, position: int = 0) -> None:
        """`data` holds exactly one batch; `position` is where it sits in a larger buffer, so
        errors name absolute byte positions."""
        buf = _byte_view(data)
        if len(buf) < BATCH_HEADER_SIZE:
            raise CorruptRecordError(f"batch header truncated: {len(buf)} of {BATCH_HEADER_SIZE} bytes", position)
        self._buf = buf
        self._position = position
        self._records: list[Record] | None = None

    # -- header fields -----------------------------------------------------------------------

    @property
    def base_offset(self) -> int:
        return _I64.unpack_from(self._buf, 0)[0]

    @property
    def batch_length(self) -> int:
        """batchLength as stored: the bytes after the length field."""
        return _I32.unpack_from(self._buf, 8)[0]

    @property
    def size_in_bytes(self) -> int:
        """The whole batch on the wire, i.e. where the next batch starts."""
        return self.batch_length + LOG_OVERHEAD

    @property
    def partition_leader_epoch(self) -> int:
        return _I32.unpack_from(self._buf, _PARTITION_LEADER_EPOCH_POS)[0]

    @property
    def magic(self) -> int:
        return _I8.unpack_from(self._buf, _MAGIC_POS)[0]

    @property
    def crc(self) -> int:
        return _U32.unpack_from(self._buf, _CRC_POS)[0]

    @property
    def attributes(self) -> int:
        return _I16.unpack_from(self._buf, _ATTRIBUTES_POS)[0]

    @property
    def compression(self) -> Compression:
        code = self.attributes & _COMPRESSION_MASK
        try:
            return Compression(code)
        except ValueError:
            raise CorruptRecordError(f"unknown compression codec {code}", self._position + _ATTRIBUTES_POS) from None

    @property
    def timestamp_type(self) -> TimestampType:
        if self.attributes & _TIMESTAMP_TYPE_BIT:
            return TimestampType.LOG_APPEND_TIME
        return TimestampType.CREATE_TIME

    @property
    def is_transactional(self) -> bool:
        return bool(self.attributes & _TRANSACTIONAL_BIT)

    @property
    def is_control(self) -> bool:
        return bool(self.attributes & _CONTROL_BIT)

    @property
    def last_offset_delta(self) -> int:
        return _I32.unpack_from(self._buf, 23)[0]

    @property
    def last_offset(self) -> int:
        return self.base_offset + self.last_offset_delta

    @property
    def next_offset(self) -> int:
        return self.last_offset + 1

    @property
    def base_timestamp(self) -> int:
        return _I64.unpack_from(self._buf, 27)[0]

    @property
    def max_timestamp(self) -> int:
        return _I64.unpack_from(self._buf, 35)[0]

    @property
    def producer_id(self) -> int:
        return _I64.unpack_from(self._buf, 43)[0]

    @property
    def producer_epoch(self) -> int:
        return _I16.unpack_from(self._buf, 51)[0]

    @property
    def base_sequence(self) -> int:
        return _I32.unpack_from(self._buf, 53)[0]

    @property
    def records_count(self) -> int:
        return _I32.unpack_from(self._buf, _COUNT_POS)[0]

    @property
    def position(self) -> int:
        """Where this batch starts in the buffer it was found in."""
        return self._position

    @property
    def raw(self) -> memoryview:
        """The batch's bytes, to store or forward without re-encoding."""
        return self._buf

    # -- checks ------------------------------------------------------------------------------

    def compute_crc(self) -> int:
        """CRC-32C of attributes..end, to compare with `crc`."""
        return crc32c(self._buf[_ATTRIBUTES_POS:])

    def _check_frame(self) -> None:
        """What must hold before the body can be read at all: v2 and the right length."""
        magic = self.magic
        if magic != MAGIC:
            raise CorruptRecordError(f"unsupported magic {magic} (only v2 batches)", self._position + _MAGIC_POS)
        length = self.batch_length
        if length < _MIN_BATCH_LENGTH:
            raise CorruptRecordError(
                f"batch length {length} is below the minimum {_MIN_BATCH_LENGTH}", self._position + 8
            )
        size = length + LOG_OVERHEAD
        available = len(self._buf)
        if size > available:
            raise CorruptRecordError(
                f"batch length {length} extends beyond the buffer ({size} bytes needed, {available} available)",
                self._position + 8,
            )
        if size < available:
            raise CorruptRecordError(f"{available - size} trailing bytes after the batch", self._position + size)

    def validate(self) -> None:
        """Check everything a broker must before accepting the batch; raises CorruptRecordError.

        Magic, batchLength against the buffer, the CRC, the codec, and that the (decompressed)
        body holds exactly recordsCount well-formed records. The decoded records are kept, so
        iterating afterwards costs nothing more.
        """
        self._check_frame()
        stored, actual = self.crc, self.compute_crc()
        if stored != actual:
            raise CorruptRecordError(
                f"CRC mismatch: batch says 0x{stored:08x}, bytes give 0x{actual:08x}",
                self._position + _CRC_POS,
            )
        self.records()

    # -- records -----------------------------------------------------------------------------

    def records(self) -> list[Record]:
        """All records, decoded once and cached. Does not check the CRC; `validate()` does."""
        if self._records is None:
            self._records = self._decode()
        return self._records

    def __iter__(self) -> Iterator[Record]:
        return iter(self.records())

    def values(self) -> list[bytes | None]:
        """The value of every record (None for a null one), in order, without `Record` objects.

        A snapshot load reads a million records for their values alone, and building a Record
        for each cost more than the rest of the load. Records in the form every Kafka writer
        gives a batch of plain values (one-byte timestamp delta, short offset delta, null
        key, no headers, short lengths) are read by `_plain_values`; any other batch is decoded
        by `records()`, so the values and the faults (reason and position) are `records()`'s.
        Does not check the CRC.
        """
        if self._records is None and self.compression is Compression.NONE:
            self._check_frame()
            body = bytes(self._buf[BATCH_HEADER_SIZE:])
            values = _plain_values(body, self.records_count)
            if values is not None:
                return values
        return [record.value for record in self.records()]

    def _body(self) -> bytes:
        codec = self.compression
        data = self._buf[BATCH_HEADER_SIZE:]
        if codec is Compression.NONE or not data:  # no body at all is no records, whatever the codec
            return bytes(data)
        try:
            return decompress(codec, data, MAX_DECOMPRESSED_BATCH_BYTES)
        except CompressionError as exc:
            raise CorruptRecordError(
                f"{codec.name.lower()} body does not decompress: {exc}", self._position + BATCH_HEADER_SIZE
            ) from None

    def _decode(self) -> list[Record]:
        self._check_frame()
        body = self._body()
        count = self.records_count
        start = self._position + BATCH_HEADER_SIZE
        where = start if self.compression is Compression.NONE else None
        if count < 0 or count * _MIN_RECORD_SIZE > len(body):
            raise CorruptRecordError(
                f"records count {count} cannot fit in a {len(body)}-byte records body",
                self._position + _COUNT_POS,
            )
        records = _decode_records(body, count, self.base_offset, self.base_timestamp, where, start)
        if self.timestamp_type is TimestampType.LOG_APPEND_TIME:
            # The broker's append time lives only in maxTimestamp; the deltas are the producer's.
            append_time = self.max_timestamp
            for record in records:
                record.timestamp = append_time
        return records

    def _walk(self) -> RecordsWalk:
        """What `_decode` checks, in the same order and with the same faults, by `_walk_records`.

        Returns `_walk_records`'s summary (the first non-consecutive offset, the timestamp delta
        range, the first null key). An
        uncompressed body is walked where it lies, so a 1 MB batch is not copied to be read: in
        the bytes or bytearray the view was made of when it covers all of it (indexing those is
        cheaper than indexing a memoryview), otherwise in the view. A compressed body has to be
        decompressed, and is walked in that copy. The compiled walk (`quorum.wire._walk`, when
        built) answers first; whatever it leaves, a fault above all, is walked again here in Python,
        so the error a caller sees is always `_walk_records`'s.
        """
        self._check_frame()
        codec = self.compression
        count = self.records_count
        start = self._position + BATCH_HEADER_SIZE
        view = self._buf
        body: bytes | bytearray | memoryview
        if codec is Compression.NONE or len(view) == BATCH_HEADER_SIZE:
            body = view
            obj = view.obj
            if type(obj) in (bytes, bytearray) and len(obj) == len(view) and view.contiguous:
                body = obj  # the view covers all of it: the same bytes at the same indexes
            origin, where, size = BATCH_HEADER_SIZE, start, len(view) - BATCH_HEADER_SIZE
        else:
            body = self._body()
            origin, where, size = 0, None, len(body)
        if count < 0 or count * _MIN_RECORD_SIZE > size:
            raise CorruptRecordError(
                f"records count {count} cannot fit in a {size}-byte records body", self._position + _COUNT_POS
            )
        compiled = _compiled_walk
        if compiled is not None and (summary := compiled(body, origin, count)) is not None:
            return RecordsWalk._make(summary)
        return _walk_records(body, origin, count, where, start)

    def __repr__(self) -> str:
        # Only raw header fields: a repr must work on the corrupt batch an error is about.
        return (
            f"RecordBatch(base_offset={self.base_offset}, last_offset_delta={self.last_offset_delta}, "
            f"records_count={self.records_count}, partition_leader_epoch={self.partition_leader_epoch}, "
            f"compression={self.attributes & _COMPRESSION_MASK}, is_control={self.is_control}, "
            f"is_transactional={self.is_transactional}, producer_id={self.producer_id}, "
            f"size_in_bytes={self.size_in_bytes})"
        )


def _decode_headers(body: bytes, pos: int, end: int) -> tuple[list[tuple[str, bytes | None]], int]:
    count, pos = decode_zigzag(body, pos, 5)
    if count < 0 or count * 2 > end - pos:
        raise _BadRecord(f"header count {count} does not fit the record", pos)
    headers = []
    for _ in range(count):
        name_length, pos = decode_zigzag(body, pos, 5)
        if name_length < 0:
            raise _BadRecord(f"header key length {name_length} is negative", pos)
        name = body[pos : pos + name_length].decode("utf-8")
        pos += name_length
        value_length, pos = decode_zigzag(body, pos, 5)
        if value_length < 0:
            value = None
        else:
            value = body[pos : pos + value_length]
            pos += value_length
        headers.append((name, value))
    return headers, pos


class _BadRecord(Exception):
    """A structural fault inside one record, with its position in the records body."""

    def __init__(self, reason: str, pos: int) -> None:
        super().__init__(reason)
        self.reason = reason
        self.pos = pos


def _decode_records(
    body: bytes, count: int, base_offset: int, base_timestamp: int, where: int | None, body_start: int
) -> list[Record]:
    """Decode exactly `count` records that fill `body` exactly.

    The hot loop of every fetch and every produce validation, hence the repetition: one- and
    two-byte varints (lengths and deltas of ordinary records) are decoded inline, because a
    function call per varint more than halved the records per second (and inlining only the
    one-byte ones still cost 28-44%); longer ones and headers go through `decode_zigzag`.
    Running off the end shows up as IndexError and is reported with the record it happened in.
    A negative key or value length other than -1 reads as null, as Java's reader does.
    """
    records: list[Record] = []
    append = records.append
    zigzag = ZIGZAG_BYTE
    read = decode_zigzag
    pos = 0
    record_start = 0
    try:
        for _ in range(count):
            record_start = pos
            byte = body[pos]
            if byte < 0x80:
                length = zigzag[byte]
                pos += 1
            else:
                second = body[pos + 1]
                if second < 0x80:
                    varint = (second << 7) | (byte & 0x7F)
                    length = (varint >> 1) ^ -(varint & 1)
                    pos += 2
                else:
                    length, pos = read(body, pos, 5)
            end = pos + length
            # pos + 1: skip the record attributes byte, which Kafka leaves unused
            byte = body[pos + 1]
            if byte < 0x80:
                timestamp_delta = zigzag[byte]
                pos += 2
            else:
                second = body[pos + 2]
                if second < 0x80:
                    varint = (second << 7) | (byte & 0x7F)
                    timestamp_delta = (varint >> 1) ^ -(varint & 1)
                    pos += 3
                else:
                    timestamp_delta, pos = read(body, pos + 1, 10)
            byte = body[pos]
            if byte < 0x80:
                offset_delta = zigzag[byte]
                pos += 1
            else:
                second = body[pos + 1]
                if second < 0x80:
                    varint = (second << 7) | (byte & 0x7F)
                    offset_delta = (varint >> 1) ^ -(varint & 1)
                    pos += 2
                else:
                    offset_delta, pos = read(body, pos, 5)
            byte = body[pos]
            if byte < 0x80:
                key_length = zigzag[byte]
                pos += 1
            else:
                second = body[pos + 1]
                if second < 0x80:
                    varint = (second << 7) | (byte & 0x7F)
                    key_length = (varint >> 1) ^ -(varint & 1)
                    pos += 2
                else:
                    key_length, pos = read(body, pos, 5)
            if key_length < 0:
                key = None
            else:
                key = body[pos : pos + key_length]
                pos += key_length
            byte = body[pos]
            if byte < 0x80:
                value_length = zigzag[byte]
                pos += 1
            else:
                second = body[pos + 1]
                if second < 0x80:
                    varint = (second << 7) | (byte & 0x7F)
                    value_length = (varint >> 1) ^ -(varint & 1)
                    pos += 2
                else:
                    value_length, pos = read(body, pos, 5)
            if value_length < 0:
                value = None
            else:
                value = body[pos : pos + value_length]
                pos += value_length
            if body[pos] == 0:
                headers = []
                pos += 1
            else:
                headers, pos = _decode_headers(body, pos, end)
            if pos != end:
                raise _BadRecord(f"record length {length} but its fields take {pos - end + length}", end)
            append(Record(base_offset + offset_delta, base_timestamp + timestamp_delta, key, value, headers))
    except (IndexError, TruncatedVarintError):
        index = len(records)
        if record_start >= len(body):
            reason = f"records count {count} but the body holds only {index} records"
        else:
            reason = f"record {index} runs past the end of the records body"
        raise _corrupt(reason, record_start, where, body_start) from None
    except VarintTooLongError:
        raise _corrupt(f"record {len(records)} has an over-long varint", record_start, where, body_start) from None
    except UnicodeDecodeError:
        raise _corrupt(
            f"record {len(records)} has a header key that is not UTF-8", record_start, where, body_start
        ) from None
    except _BadRecord as exc:
        raise _corrupt(f"record {len(records)}: {exc.reason}", exc.pos, where, body_start) from None
    if pos != len(body):
        if pos < len(body):
            reason = f"{len(body) - pos} bytes after the last of {count} records"
        else:
            reason = f"records overrun the body by {pos - len(body)} bytes"
        raise _corrupt(reason, min(pos, len(body)), where, body_start)
    return records


_OFFSET_DELTAS: list[bytes] = list(ZIGZAG_TABLE)
"""The zigzag varint of each offset delta, grown as batches of more records come."""


def _offset_deltas(count: int) -> list[bytes]:
    """`_OFFSET_DELTAS`, holding at least the first `count`."""
    deltas = _OFFSET_DELTAS
    if count > len(deltas):
        deltas.extend(encode_zigzag(index) for index in range(len(deltas), count))
    return deltas


def _plain_values(body: bytes, count: int) -> list[bytes | None] | None:
    """The values of exactly `count` plain records that fill `body` exactly; None as soon as a
    record is not plain (see `RecordBatch.values`) or anything does not fit, for `_decode_records`
    to decode or refuse. A plain record is one `_decode_records` reads the same way: a length
    and a value length of one or two varint bytes, a one-byte timestamp delta, an offset delta
    of one to three bytes, a null key and no headers, ending where its length says."""
    values: list[bytes | None] = []
    append = values.append
    pos = 0
    try:
        for _ in range(count):
            byte = body[pos]
            if byte < 0x80:
                end = pos + 1 + (byte >> 1)
                pos += 2  # the length, then the attributes byte Kafka leaves unused
            else:
                second = body[pos + 1]
                if second >= 0x80:
                    return None
                byte |= second << 8  # the low bit is the zigzag sign either way
                end = pos + 2 + (((second << 7) | (byte & 0x7F)) >> 1)
                pos += 3
            if byte & 1 or body[pos] >= 0x80:  # a negative length; a long timestamp delta
                return None
            # The offset delta, any value as `_decode_records` reads it (a value has no use for it)
            if body[pos + 1] < 0x80:
                pos += 2
            elif body[pos + 2] < 0x80:
                pos += 3
            elif body[pos + 3] < 0x80:
                pos += 4
            else:
                return None
            if body[pos] != 1:  # the key: zigzag -1, null
                return None
            byte = body[pos + 1]
            if byte < 0x80:
                if byte & 1:
                    return None
                pos += 2
                stop = pos + (byte >> 1)
            else:
                second = body[pos + 2]
                if second >= 0x80 or byte & 1:
                    return None
                pos += 3
                stop = pos + ((((second << 7) | (byte & 0x7F))) >> 1)
            if stop + 1 != end or body[stop] != 0:  # no headers, and the record ends there
                return None
            append(body[pos:stop])
            pos = end
    except IndexError:
        return None
    return values if pos == len(body) else None


def _corrupt(reason: str, pos: int, where: int | None, body_start: int) -> CorruptRecordError:
    """An error at `pos` in the records body: absolute when the body is the buffer itself,
    otherwise named inside the decompressed body and pinned to where the compressed body starts."""
    if where is not None:
        return CorruptRecordError(reason, where + pos)
    return CorruptRecordError(f"{reason} (byte {pos} of the decompressed records)", body_start)


# ---------------------------------------------------------------------------------------------
# Walking records without decoding them


def _skip_headers(body: bytes | bytearray | memoryview, pos: int, end: int) -> int:
    """`_decode_headers` without the list: the same checks and faults, the position after them.

    Header keys are still decoded (and dropped), because a key that is not UTF-8 is a fault the
    decode path reports and a consumer would hit; values are only skipped.
    """
    count, pos = decode_zigzag(body, pos, 5)
    if count < 0 or count * 2 > end - pos:
        raise _BadRecord(f"header count {count} does not fit the record", pos)
    for _ in range(count):
        name_length, pos = decode_zigzag(body, pos, 5)
        if name_length < 0:
            raise _BadRecord(f"header key length {name_length} is negative", pos)
        str(body[pos : pos + name_length], "utf-8")
        pos += name_length
        value_length, pos = decode_zigzag(body, pos, 5)
        if value_length >= 0:
            pos += value_length
    return pos


def _walk_records(
    body: bytes | bytearray | memoryview, origin: int, count: int, where: int | None, body_start: int
) -> RecordsWalk:
    """Check that exactly `count` records fill `body[origin:]` exactly, as `_decode_records` would.

    A leader must refuse what `_decode_records` refuses, but it has no use for the records: it
    stores the bytes. So this is that loop with every field still read and checked in the same
    order (lengths, timestamp delta, offset delta, key and value lengths, headers, each record
    ending exactly at its length, the body ending after `count` of them) but keys and values
    skipped by their lengths instead of sliced, and no Record built: the decode spent most of
    its time on those objects and copies. The same one- and two-byte varint inlining, for the
    same reason (see `_decode_records`), and three-byte ones for the record and value lengths of
    records from 8 KiB up (a call for each was a seventh of a 10 KiB-record produce's CPU). It
    raises the same CorruptRecordErrors with the same reasons and positions; `origin` lets it walk
    a whole buffer in place, positions in faults being counted from there as if the body had been
    sliced out.

    Returns a `RecordsWalk`: the index of the first record whose offset delta is not its index
    and that delta, or (-1, 0); that fault is not raised here because the decode path reports a
    structural fault anywhere in the batch before an offset fault, and callers must see the same
    error whichever path checked the batch. Beside it, the lowest and highest timestamp delta and
    the first record without a key: the leader's record rules (`quorum.broker.record_rules`) need
    only those to pass a batch, and reading them here costs a compare or two per record, where
    decoding the records for them would cost what this walk saves.
    """
    zigzag = ZIGZAG_BYTE
    read = decode_zigzag
    pos = origin
    record_start = origin
    index = 0
    first_bad = -1
    bad_delta = 0
    low, high = _NO_LOW, _NO_HIGH
    first_keyless = -1
    try:
        for index in range(count):
            record_start = pos
            byte = body[pos]
            if byte < 0x80:
                length = zigzag[byte]
                pos += 1
            else:
                second = body[pos + 1]
                if second < 0x80:
                    varint = (second << 7) | (byte & 0x7F)
                    length = (varint >> 1) ^ -(varint & 1)
                    pos += 2
                elif (third := body[pos + 2]) < 0x80:  # records of 8 KiB to 1 MiB
                    varint = (third << 14) | ((second & 0x7F) << 7) | (byte & 0x7F)
                    length = (varint >> 1) ^ -(varint & 1)
                    pos += 3
                else:
                    length, pos = read(body, pos, 5)
            end = pos + length
            # pos + 1: skip the record attributes byte, which Kafka leaves unused.
            byte = body[pos + 1]
            if byte < 0x80:
                timestamp_delta = zigzag[byte]
                pos += 2
            else:
                second = body[pos + 2]
                if second < 0x80:
                    varint = (second << 7) | (byte & 0x7F)
                    timestamp_delta = (varint >> 1) ^ -(varint & 1)
                    pos += 3
                else:
                    timestamp_delta, pos = read(body, pos + 1, 10)
            if timestamp_delta < low:
                low = timestamp_delta
            if timestamp_delta > high:
                high = timestamp_delta
            byte = body[pos]
            if byte < 0x80:
                offset_delta = zigzag[byte]
                pos += 1
            else:
                second = body[pos + 1]
                if second < 0x80:
                    varint = (second << 7) | (byte & 0x7F)
                    offset_delta = (varint >> 1) ^ -(varint & 1)
                    pos += 2
                else:
                    offset_delta, pos = read(body, pos, 5)
            if offset_delta != index and first_bad < 0:
                first_bad, bad_delta = index, offset_delta
            byte = body[pos]
            if byte < 0x80:
                key_length = zigzag[byte]
                pos += 1
            else:
                second = body[pos + 1]
                if second < 0x80:
                    varint = (second << 7) | (byte & 0x7F)
                    key_length = (varint >> 1) ^ -(varint & 1)
                    pos += 2
                else:
                    key_length, pos = read(body, pos, 5)
            if key_length > 0:
                pos += key_length
            elif key_length < 0 and first_keyless < 0:  # any negative length is a null key, which takes no bytes
                first_keyless = index
            byte = body[pos]
            if byte < 0x80:
                value_length = zigzag[byte]
                pos += 1
            else:
                second = body[pos + 1]
                if second < 0x80:
                    varint = (second << 7) | (byte & 0x7F)
                    value_length = (varint >> 1) ^ -(varint & 1)
                    pos += 2
                elif (third := body[pos + 2]) < 0x80:
                    varint = (third << 14) | ((second & 0x7F) << 7) | (byte & 0x7F)
                    value_length = (varint >> 1) ^ -(varint & 1)
                    pos += 3
                else:
                    value_length, pos = read(body, pos, 5)
            if value_length > 0:
                pos += value_length
            if body[pos] == 0:
                pos += 1
            else:
                pos = _skip_headers(body, pos, end)
            if pos != end:
                raise _BadRecord(f"record length {length} but its fields take {pos - end + length}", end)
    except (IndexError, TruncatedVarintError):
        if record_start >= len(body):
            reason = f"records count {count} but the body holds only {index} records"
        else:
            reason = f"record {index} runs past the end of the records body"
        raise _corrupt(reason, record_start - origin, where, body_start) from None
    except VarintTooLongError:
        raise _corrupt(f"record {index} has an over-long varint", record_start - origin, where, body_start) from None
    except UnicodeDecodeError:
        raise _corrupt(
            f"record {index} has a header key that is not UTF-8", record_start - origin, where, body_start
        ) from None
    except _BadRecord as exc:
        raise _corrupt(f"record {index}: {exc.reason}", exc.pos - origin, where, body_start) from None
    size = len(body)
    if pos != size:
        if pos < size:
            reason = f"{size - pos} bytes after the last of {count} records"
        else:
            reason = f"records overrun the body by {pos - size} bytes"
        raise _corrupt(reason, min(pos, size) - origin, where, body_start)
    return RecordsWalk(first_bad, bad_delta, low if count else 0, high if count else 0, first_keyless)


# ---------------------------------------------------------------------------------------------
# Validating what a producer sent


def validate_produced_batch(data: bytes | bytearray | memoryview, max_batch_bytes: int) -> RecordBatch:
    """`validate_produced_records` without the walk's summary."""
    return validate_produced_records(data, max_batch_bytes)[0]


def validate_produced_records(data: bytes | bytearray | memoryview,
                              max_batch_bytes: int) -> tuple[RecordBatch, RecordsWalk]:
    """The one batch of a Produce request's partition, checked as Kafka's leader checks it, with
    what the walk of its records learnt (`RecordsWalk`) for the topic's record rules.

    Raises CorruptRecordError (CORRUPT_MESSAGE) for bytes that are not an intact v2 batch: cut
    off, a batchLength that disagrees with the bytes, a CRC mismatch. Raises RecordTooLargeError
    (MESSAGE_TOO_LARGE) for a batch above `max_batch_bytes`. Raises InvalidRecordError
    (INVALID_RECORD) for an intact batch a client may not write: not magic 2 (Produce v3+ carries
    only v2), more than one batch (v3+ carries exactly one), a baseOffset other than 0, a control
    batch, a producer id without a sequence, a records count that is not positive or disagrees
    with lastOffsetDelta, records that do not decode (the producer built them wrong, as the CRC
    shows), or inner offset deltas that are not 0, 1, 2, ... (offsets are assigned in place, so they
    must be consecutive). All three are CorruptRecordErrors; nothing else is raised.

    A leader must not store what a consumer cannot read, so every record is checked, but it
    never needs the records themselves: they are walked (`RecordBatch._walk`), every field read
    and checked as decoding would, with no Record built and no key or value copied, and an
    uncompressed body read where it lies. Decoding them cost about half a broker's produce CPU;
    the walk refuses exactly what decoding refuses, with the same errors and positions (held to
    that by tests/wire/test_produce_validation.py). The returned batch has decoded nothing, so
    patching offsets afterwards is safe and a later `records()` sees the patched values.
    """
    buf = _byte_view(data)
    available = len(buf)
    if available < _MAGIC_POS + 1:
        raise CorruptRecordError(f"records cut off: {available} bytes, not even a batch header", 0)
    magic = buf[_MAGIC_POS]
    if magic != MAGIC:
        raise InvalidRecordError(f"magic {magic}: Produce v3 and later carry only v2 record batches", _MAGIC_POS)
    length = _I32.unpack_from(buf, 8)[0]
    if length < _MIN_BATCH_LENGTH:
        raise CorruptRecordError(f"batch length {length} is below the minimum {_MIN_BATCH_LENGTH}", 8)
    size = length + LOG_OVERHEAD
    if size > available:
        raise CorruptRecordError(f"batch length {length} says {size} bytes but the records hold {available}", 8)
    if size < available:
        raise InvalidRecordError(
            f"{available - size} bytes after the first batch: Produce v3 and later carry exactly one batch per "
            "partition", size,
        )  # fmt: skip
    batch = RecordBatch(buf)
    if batch.base_offset != 0:
        raise InvalidRecordError(f"baseOffset {batch.base_offset}: a producer's batch starts at offset 0", 0)
    if size > max_batch_bytes:
        raise RecordTooLargeError(f"batch of {size} bytes is larger than max.message.bytes ({max_batch_bytes})", 0)
    stored, actual = batch.crc, batch.compute_crc()
    if stored != actual:
        raise CorruptRecordError(f"CRC mismatch: batch says 0x{stored:08x}, bytes give 0x{actual:08x}", _CRC_POS)
    if batch.is_control:
        raise InvalidRecordError("clients may not write control batches", _ATTRIBUTES_POS)
    if batch.producer_id >= 0 and batch.base_sequence < 0:
        raise InvalidRecordError(f"producer id {batch.producer_id} without a base sequence", 53)
    count, delta = batch.records_count, batch.last_offset_delta
    if count <= 0:
        raise InvalidRecordError(f"records count {count}: a batch must hold records", _COUNT_POS)
    if delta != count - 1:
        raise InvalidRecordError(f"lastOffsetDelta {delta} disagrees with the records count {count}", 23)
    try:
        walk = batch._walk()
    except CorruptRecordError as exc:
        reason = f"records do not decode although the CRC matches: {exc.reason}"
        raise InvalidRecordError(reason, exc.position) from None
    index = walk.bad_offset_index
    if index >= 0:
        raise InvalidRecordError(
            f"record {index} has offset delta {walk.bad_offset_delta}, expected {index}: inner offsets must be "
            "consecutive", record_index=index,
        )  # fmt: skip
    return batch, walk


# ---------------------------------------------------------------------------------------------
# Walking concatenated batches


@dataclass(frozen=True, slots=True)
class TruncatedBatch:
    """A batch cut off at the end of the buffer, as a Fetch response may end with.

    `needed` is the batch's full size, or None when even its length field is cut off.
    """

    position: int
    available: int
    needed: int | None


class BatchIterator(Iterator[RecordBatch]):
    """Yields the complete batches of a concatenation; a cut-off last batch ends the walk.

    After the walk, `truncated` says whether (and where) the buffer ended inside a batch, so a
    consumer can ask again from there, while a Produce handler uses strict mode and refuses it.
    """

    def __init__(self, data: bytes | bytearray | memoryview, strict: bool = False) -> None:
        self._buf = _byte_view(data)
        self._pos = 0
        self._strict = strict
        self.truncated: TruncatedBatch | None = None

    @property
    def position(self) -> int:
        """Bytes in complete batches so far: where the next (or the truncated) batch starts."""
        return self._pos

    def __iter__(self) -> BatchIterator:
        return self

    def __next__(self) -> RecordBatch:
        buf = self._buf
        pos = self._pos
        available = len(buf) - pos
        if available == 0:
            raise StopIteration
        if available < LOG_OVERHEAD:
            self._stop(TruncatedBatch(pos, available, None))
        length = _I32.unpack_from(buf, pos + 8)[0]
        if length < _MIN_BATCH_LENGTH:
            raise CorruptRecordError(f"batch length {length} is below the minimum {_MIN_BATCH_LENGTH}", pos + 8)
        size = length + LOG_OVERHEAD
        if size > available:
            self._stop(TruncatedBatch(pos, available, size))
        self._pos = pos + size
        return RecordBatch(buf[pos : pos + size], pos)

    def _stop(self, tail: TruncatedBatch) -> None:
        if self._strict:
            needed = "its length field" if tail.needed is None else f"{tail.needed} bytes"
            raise CorruptRecordError(f"truncated batch: {tail.available} bytes of {needed}", tail.position)
        self.truncated = tail
        raise StopIteration


def iter_batches(data: bytes | bytearray | memoryview, *, strict: bool = False) -> BatchIterator:
    """Walk the batches of a Fetch or Produce records field (or a log segment).

    Batches are only framed here; call `validate()` on each to check CRC and records. By default
    a partial last batch ends the walk and is reported in `.truncated` (Kafka brokers cut fetch
    responses at the size limit); with `strict=True` it raises CorruptRecordError instead.
    """
    return BatchIterator(data, strict)
