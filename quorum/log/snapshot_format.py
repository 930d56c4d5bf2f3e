"""The content of a snapshot file: record batch v2, between a header and a footer control batch.

KIP-630: the first batch is a control batch whose (first) record is a SnapshotHeaderRecord
(version, last contained log timestamp), the last is a control batch holding a
SnapshotFooterRecord, and the batches between hold the state machine's records. Kafka 3.9+ puts
KRaftVersion and Voters control records after the header in the first batch; they are allowed
and skipped. Base offsets and offset deltas carry no meaning in a snapshot (the KIP says so),
so they are not checked; Kafka's writer numbers the records from 0, and so does this project's.

`validate_snapshot` is the one check every snapshot passes before anything uses it: a frozen
one before its rename, a fetched one before its rename, and every one again when it is opened
for reading. It reads the file once, in large chunks, and checks the framing of every batch,
its magic and CRC, that the header comes first and the footer last, and that no byte follows
the footer. Data records are not decoded here: the CRC already proves they are the bytes that
were written, and decoding is what loading does anyway.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from quorum.log.errors import CorruptSnapshotError
from quorum.wire.control_records import (
    ControlRecordError,
    ControlRecordType,
    SnapshotFooterRecord,
    SnapshotHeaderRecord,
    decode_control_key,
    decode_control_value,
    encode_control_record,
)
from quorum.wire.records import LOG_OVERHEAD, MAGIC, CorruptRecordError, RecordBatch, build_control_batch, iter_batches

#: The SnapshotHeaderRecord and SnapshotFooterRecord content versions Kafka writes.
SNAPSHOT_HEADER_VERSION = 0
SNAPSHOT_FOOTER_VERSION = 0
#: Bytes read at a time: large reads, few system calls, bounded memory whatever the file size.
READ_CHUNK = 1 << 20


@dataclass(frozen=True, slots=True)
class SnapshotSummary:
    """What validation learnt about a snapshot file."""

    size: int
    header_version: int
    last_contained_log_timestamp: int
    batches: int
    data_records: int
    cluster_id: str | None = None  # from the header's ClusterId tag (10595), when the writer knew it


def header_batch(epoch: int, last_contained_log_timestamp: int, timestamp_ms: int,
                 cluster_id: str | None = None) -> bytes:
    """The first batch of a snapshot: a control batch at offset 0 with the SnapshotHeaderRecord."""
    header = SnapshotHeaderRecord(content_version=SNAPSHOT_HEADER_VERSION,
                                  last_contained_log_timestamp=last_contained_log_timestamp,
                                  cluster_id=cluster_id)  # fmt: skip
    key, value = encode_control_record(header)
    return build_control_batch(key, value, base_offset=0, partition_leader_epoch=epoch, timestamp=timestamp_ms)


def footer_batch(base_offset: int, epoch: int, timestamp_ms: int) -> bytes:
    """The last batch of a snapshot: a control batch with the SnapshotFooterRecord."""
    key, value = encode_control_record(SnapshotFooterRecord(content_version=SNAPSHOT_FOOTER_VERSION))
    return build_control_batch(key, value, base_offset=base_offset, partition_leader_epoch=epoch,
                               timestamp=timestamp_ms)  # fmt: skip


def walk_file(fd: int, size: int, path: Path) -> Iterator[RecordBatch]:
    """The batches of the first `size` bytes of `fd`, each positioned at its byte in the file.

    Framing only (length fields); raises CorruptSnapshotError where they break, including a
    last batch cut off by the end of the file. Reads a chunk at a time, a larger one for a batch
    larger than the chunk.
    """
    pos = 0
    chunk_size = READ_CHUNK
    while pos < size:
        chunk = os.pread(fd, min(chunk_size, size - pos), pos)
        if not chunk:
            raise CorruptSnapshotError(path, pos, f"the file ends at byte {pos}, before its size {size}")
        walker = iter_batches(chunk)
        try:
            for batch in walker:
                yield RecordBatch(batch.raw, pos + batch.position)
        except CorruptRecordError as exc:
            where = None if exc.position is None else pos + exc.position
            raise CorruptSnapshotError(path, where, exc.reason) from None
        tail = walker.truncated
        if tail is None:
            pos += walker.position
            chunk_size = READ_CHUNK
            continue
        at = pos + tail.position
        needed = tail.needed
        if at + (needed or LOG_OVERHEAD) > size:
            if needed is None:
                reason = f"{size - at} trailing byte(s), too few for a batch"
            else:
                reason = f"a batch of {needed} bytes by its length field, but {size - at} remain: cut off or corrupt"
            raise CorruptSnapshotError(path, at, reason)
        pos = at
        chunk_size = max(READ_CHUNK, needed or 0)


def check_batch(batch: RecordBatch, path: Path) -> None:
    """Magic and CRC of one batch, without decoding its records."""
    if batch.magic != MAGIC:
        raise CorruptSnapshotError(path, batch.position, f"batch of magic {batch.magic}: snapshots are v2 batches")
    stored, actual = batch.crc, batch.compute_crc()
    if stored != actual:
        raise CorruptSnapshotError(
            path, batch.position, f"CRC mismatch in the batch here: it says 0x{stored:08x}, its bytes 0x{actual:08x}"
        )


def _control_record(batch: RecordBatch, path: Path) -> tuple[ControlRecordType, object | None]:
    """Type of the first record of a control batch, and its message when it is a snapshot header
    or footer. Other KRaft control records (KRaftVersion, Voters) are allowed and not decoded."""
    try:
        records = batch.records()
    except CorruptRecordError as exc:
        raise CorruptSnapshotError(path, exc.position, f"control batch does not decode: {exc.reason}") from None
    if not records:
        raise CorruptSnapshotError(path, batch.position, "control batch without records")
    first = records[0]
    try:
        record_type = decode_control_key(first.key)
        if record_type not in (ControlRecordType.SNAPSHOT_HEADER, ControlRecordType.SNAPSHOT_FOOTER):
            return record_type, None
        return record_type, decode_control_value(record_type, first.value)
    except ControlRecordError as exc:
        raise CorruptSnapshotError(path, batch.position, f"control record does not decode: {exc}") from None


def validate_snapshot(fd: int, size: int, path: Path) -> SnapshotSummary:
    """Check a whole snapshot file (see the module docstring); raises CorruptSnapshotError naming
    `path` and the byte, or returns what the header says."""
    if size == 0:
        raise CorruptSnapshotError(path, 0, "empty file: a snapshot starts with a SnapshotHeaderRecord batch")
    header: SnapshotHeaderRecord | None = None
    footer_at: int | None = None
    batches = data_records = 0
    for batch in walk_file(fd, size, path):
        check_batch(batch, path)
        if footer_at is not None:
            raise CorruptSnapshotError(path, batch.position, f"a batch after the footer batch at byte {footer_at}")
        batches += 1
        if not batch.is_control:
            if header is None:
                raise CorruptSnapshotError(path, 0, "the first batch is not a SnapshotHeaderRecord control batch")
            data_records += batch.records_count
            continue
        record_type, message = _control_record(batch, path)
        if header is None:
            if record_type is not ControlRecordType.SNAPSHOT_HEADER:
                raise CorruptSnapshotError(path, 0, f"the first batch holds {record_type.name}, not SNAPSHOT_HEADER")
            assert isinstance(message, SnapshotHeaderRecord)
            header = message
        elif record_type is ControlRecordType.SNAPSHOT_HEADER:
            raise CorruptSnapshotError(path, batch.position, "a second SnapshotHeaderRecord batch")
        elif record_type is ControlRecordType.SNAPSHOT_FOOTER:
            footer_at = batch.position
    assert header is not None  # size > 0 and walk_file refuses a file without a whole batch
    if footer_at is None:
        raise CorruptSnapshotError(path, size, "the file ends without a SnapshotFooterRecord batch: it is incomplete")
    return SnapshotSummary(size, header.content_version, header.last_contained_log_timestamp, batches, data_records,
                           header.cluster_id)


__all__ = [
    "READ_CHUNK",
    "SNAPSHOT_FOOTER_VERSION",
    "SNAPSHOT_HEADER_VERSION",
    "SnapshotSummary",
    "check_batch",
    "footer_batch",
    "header_batch",
    "validate_snapshot",
    "walk_file",
]
