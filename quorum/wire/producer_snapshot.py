"""Kafka's producer snapshot file (`<offset>.snapshot`, ProducerStateManager, format version 1).

Tiered storage uploads one per segment, the producer state at the segment's next offset, so a
replica that starts there (KIP-1023's follower bootstrap) still recognises an idempotent
producer's retried batch. Layout, big-endian, as Kafka writes it::

    version            int16   (1)
    crc                uint32  CRC-32C of everything after this field
    producer_entries   int32 count, then per entry:
        producer_id int64, producer_epoch int16, last_sequence int32, last_offset int64,
        offset_delta int32, timestamp int64, coordinator_epoch int32, current_txn_first_offset int64

Only the producer's last batch is kept (first sequence and offset are last minus offset_delta).
"""

from __future__ import annotations

import struct
from collections.abc import Iterable
from dataclasses import dataclass

from crc32c import crc32c

SNAPSHOT_VERSION = 1
_HEADER = struct.Struct(">hI")
_COUNT = struct.Struct(">i")
_ENTRY = struct.Struct(">qhiqiqiq")


class CorruptProducerSnapshotError(ValueError):
    """Bytes that are not a version 1 producer snapshot; says what is wrong."""


@dataclass(frozen=True, slots=True)
class ProducerSnapshotEntry:
    producer_id: int
    producer_epoch: int
    last_sequence: int
    last_offset: int
    offset_delta: int
    timestamp: int
    coordinator_epoch: int = -1
    current_txn_first_offset: int = -1


def encode_producer_snapshot(entries: Iterable[ProducerSnapshotEntry]) -> bytes:
    entries = list(entries)
    body = _COUNT.pack(len(entries)) + b"".join(
        _ENTRY.pack(e.producer_id, e.producer_epoch, e.last_sequence, e.last_offset, e.offset_delta, e.timestamp,
                    e.coordinator_epoch, e.current_txn_first_offset) for e in entries)  # fmt: skip
    return _HEADER.pack(SNAPSHOT_VERSION, crc32c(body)) + body


def decode_producer_snapshot(data: bytes) -> list[ProducerSnapshotEntry]:
    """The entries; raises CorruptProducerSnapshotError for a bad version, CRC or length."""
    if len(data) < _HEADER.size + _COUNT.size:
        raise CorruptProducerSnapshotError(f"{len(data)} bytes is shorter than a snapshot header")
    version, crc = _HEADER.unpack_from(data, 0)
    if version != SNAPSHOT_VERSION:
        raise CorruptProducerSnapshotError(f"unknown producer snapshot version {version}")
    body = memoryview(data)[_HEADER.size:]
    if crc32c(body) != crc:
        raise CorruptProducerSnapshotError(f"CRC mismatch: stored {crc:#010x}, computed {crc32c(body):#010x}")
    (count,) = _COUNT.unpack_from(body, 0)
    if count < 0 or len(body) != _COUNT.size + count * _ENTRY.size:
        raise CorruptProducerSnapshotError(f"{count} entries do not fill {len(body)} bytes")
    return [ProducerSnapshotEntry(*_ENTRY.unpack_from(body, _COUNT.size + n * _ENTRY.size)) for n in range(count)]
