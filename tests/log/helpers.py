"""Batches for the log tests: each record's value names its offset, so misplaced data shows."""

from __future__ import annotations

from pathlib import Path

from quorum.wire.records import Record, RecordBatch, build_batch, iter_batches

NOW_MS = 1_763_700_000_000


def value_for(offset: int, size: int) -> bytes:
    stamp = b"offset-%d;" % offset
    return (stamp * (size // len(stamp) + 1))[:size] if size else b""


def make_batch(base_offset: int, count: int = 1, epoch: int = 1, value_size: int = 50) -> bytes:
    records = [Record(base_offset + i, NOW_MS + i, b"k%08d" % (base_offset + i), value_for(base_offset + i, value_size))
               for i in range(count)]  # fmt: skip
    return build_batch(records, base_offset=base_offset, partition_leader_epoch=epoch)


def make_batches(base_offset: int, shapes: list[tuple[int, int]], value_size: int = 50) -> bytes:
    """Concatenated batches for (record count, epoch) shapes, offsets following on."""
    parts = []
    offset = base_offset
    for count, epoch in shapes:
        parts.append(make_batch(offset, count, epoch, value_size))
        offset += count
    return b"".join(parts)


def check_batch_contents(batch: RecordBatch) -> None:
    """The batch is valid and each record carries the value written for its offset."""
    batch.validate()
    for record in batch:
        assert record.key == b"k%08d" % record.offset
        assert record.value is not None
        assert record.value == value_for(record.offset, len(record.value))


def offsets_of(data: bytes) -> list[int]:
    return [batch.base_offset for batch in iter_batches(data)]


def segment_files(directory: Path) -> list[Path]:
    return sorted(directory.glob("*.log"))
