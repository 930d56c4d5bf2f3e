"""Reading records out of remote segments (blocking; the remote tier runs these on its thread pool).

A consumer's Fetch below the local log start reads from the remote segment holding its offset:
the segment's offset index (one range GET of its `.indexes`, cached) gives a byte position at or
before the batch holding the offset, and range GETs of the `.log` from there return whole
batches, the first one whole however large (KIP-74), as a local read does. Every batch returned
is checked (framing and CRC) before it leaves: a short or damaged body is an error the consumer
retries, never wrong data. ListOffsets by timestamp uses the time index the same way.
"""

from __future__ import annotations

import bisect
import threading
from collections import OrderedDict
from dataclasses import dataclass
from typing import Protocol

from quorum.broker.log_answers import TimestampOffset
from quorum.broker.remote_tier import IndexType, RemoteSegmentMetadata, RemoteStorage, RemoteStorageError
from quorum.log.index import IndexCorrupt, decode_entries
from quorum.log.time_index import decode_time_entries
from quorum.wire.records import BATCH_HEADER_SIZE, CorruptRecordError, RecordBatch, iter_batches

READ_CHUNK = 256 * 1024
_CACHE_ENTRIES = 256


class RemoteIndexCache:
    """The offset and time indexes of recently read remote segments (Kafka's RemoteIndexCache)."""

    def __init__(self, storage: RemoteStorage, entries: int = _CACHE_ENTRIES) -> None:
        self._storage = storage
        self._entries = entries
        self._cache: OrderedDict[tuple[object, IndexType], list[tuple[int, int]]] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, segment: RemoteSegmentMetadata, kind: IndexType) -> list[tuple[int, int]]:
        key = (segment.segment_id, kind)
        with self._lock:
            found = self._cache.get(key)
            if found is not None:
                self._cache.move_to_end(key)
                return found
        data = self._storage.fetch_index(segment, kind)
        try:
            entries = (
                decode_entries(data, segment.size_in_bytes)
                if kind == IndexType.OFFSET
                else decode_time_entries(data, segment.end_offset - segment.start_offset + 1)
            )
        except IndexCorrupt as exc:
            raise RemoteStorageError(
                f"the {kind.value} index of remote segment {segment.object_name} of {segment.partition}: {exc}"
            ) from None
        with self._lock:
            self._cache[key] = entries
            while len(self._cache) > self._entries:
                self._cache.popitem(last=False)
        return entries

    def position_for(self, segment: RemoteSegmentMetadata, offset: int) -> int:
        """A byte position at or before the batch holding `offset`; 0 for the segment's first
        offset without reading its index (a backfill starts each segment there: one GET fewer)."""
        if offset <= segment.start_offset:
            return 0
        entries = self.get(segment, IndexType.OFFSET)
        number = bisect.bisect_right([relative for relative, _ in entries], offset - segment.start_offset) - 1
        return entries[number][1] if number >= 0 else 0


class LogReader(Protocol):
    """Where `.log` bytes come from: the storage itself, or `chunk_cache.ChunkCache` in front of it."""

    def fetch_log(
        self, segment: RemoteSegmentMetadata, start_position: int, end_position: int
    ) -> bytes | memoryview: ...


def read_batches(
    storage: LogReader, indexes: RemoteIndexCache, segment: RemoteSegmentMetadata, offset: int, max_bytes: int
) -> bytes:
    """Whole batches from the one holding `offset` (or the first after it) to at most
    `max_bytes`, the first whole however large; b"" past the segment's end."""
    return read_batches_at(storage, indexes, segment, offset, max_bytes).data()


@dataclass(frozen=True, slots=True)
class BatchesRead:
    """What `read_batches_at` returned: its batches as `parts` (runs of whole batches, views of what
    was fetched, in order: the Fetch answer sends them without joining them), the byte position in
    the segment where it ends (where a consumer's next read starts: what to fetch ahead from), and
    the offset after its last batch (`offset` itself when it is empty)."""

    parts: tuple[bytes | memoryview, ...]
    end: int
    next_offset: int

    @property
    def size(self) -> int:
        return sum(len(part) for part in self.parts)

    def data(self) -> bytes:
        """The batches as one bytes object (a copy: for callers that want bytes, not the Fetch path)."""
        return b"".join(self.parts)


def read_batches_at(
    storage: LogReader,
    indexes: RemoteIndexCache,
    segment: RemoteSegmentMetadata,
    offset: int,
    max_bytes: int,
    position: int | None = None,
) -> BatchesRead:
    """`read_batches`, with where what it returned ends. `position`, when given, is a byte position
    at or before the batch holding `offset` known without the index (where the reader's previous
    read of this segment ended), which spares a sequential reader the index lookup."""
    if position is None:
        position = indexes.position_for(segment, offset)
    size = segment.size_in_bytes
    # what is returned, as views of what was fetched: the batches taken from one fetch are one run
    # of bytes, never copied here (copying each batch, then the whole, cost three copies a byte)
    parts: list[bytes | memoryview] = []
    taken = 0
    end = position
    next_offset = offset
    while position < size:
        want = max(READ_CHUNK, max_bytes - taken) if not taken else max_bytes - taken
        if want <= 0:
            break
        data = storage.fetch_log(segment, position, min(size, position + want))
        walker = iter_batches(data)
        consumed = 0
        run_start = run_end = -1
        full = False
        try:
            for batch in walker:
                consumed = walker.position
                if batch.last_offset < offset:
                    continue
                length = walker.position - batch.position
                if taken and taken + length > max_bytes:
                    full = True
                    break
                if run_start < 0:
                    run_start = batch.position
                run_end = walker.position
                taken += length
                end = position + walker.position
                next_offset = batch.last_offset + 1
        except CorruptRecordError as exc:
            raise RemoteStorageError(
                f"remote segment {segment.object_name} of {segment.partition}: bad batch "
                f"at byte {position + (exc.position or 0)}: {exc.reason}",
                retriable=True,
            ) from exc
        if run_start >= 0:
            parts.append(memoryview(data)[run_start:run_end])
        if full:
            break
        if walker.truncated is not None and consumed == 0:
            if taken:
                break  # the next batch does not fit what is left; only a response's first may exceed it
            # the batch at `position` is larger than what was read: fetch it whole
            header = RecordBatch(data[:BATCH_HEADER_SIZE]) if len(data) >= BATCH_HEADER_SIZE else None
            if header is None or position + header.size_in_bytes > size:
                raise RemoteStorageError(
                    f"remote segment {segment.object_name} of {segment.partition}: a batch "
                    f"at byte {position} runs past the segment's {size} bytes",
                    retriable=True,
                )
            whole = storage.fetch_log(segment, position, position + header.size_in_bytes)
            if header.last_offset >= offset:
                parts.append(whole)
                taken += len(whole)
                end = position + len(whole)
                next_offset = header.last_offset + 1
                if taken >= max_bytes:
                    break
            consumed = len(whole)
        if consumed == 0:
            break
        position += consumed
        if taken >= max_bytes:
            break
    for part in parts:
        _check(part, segment)
    return BatchesRead(tuple(parts), end, next_offset)


def _check(data: bytes | memoryview, segment: RemoteSegmentMetadata) -> None:
    """Every batch of `data` (a run of whole batches) whole and its CRC right, else a retriable
    RemoteStorageError."""
    try:
        for batch in iter_batches(data, strict=True):
            if batch.compute_crc() != batch.crc:
                raise CorruptRecordError(f"CRC mismatch in the batch at offset {batch.base_offset}", batch.position)
    except CorruptRecordError as exc:
        raise RemoteStorageError(
            f"remote segment {segment.object_name} of {segment.partition}: {exc}", retriable=True
        ) from exc


def offset_for_timestamp(
    storage: RemoteStorage, indexes: RemoteIndexCache, segment: RemoteSegmentMetadata, timestamp: int
) -> TimestampOffset | None:
    """The first record of `segment` whose timestamp is >= `timestamp`, by its time index."""
    entries = indexes.get(segment, IndexType.TIMESTAMP)
    number = bisect.bisect_left([ts for ts, _ in entries], timestamp) - 1
    offset = segment.start_offset + entries[number][1] if number >= 0 else segment.start_offset
    while offset <= segment.end_offset:
        data = read_batches(storage, indexes, segment, offset, READ_CHUNK)
        if not data:
            return None
        for batch in iter_batches(data):
            if batch.max_timestamp >= timestamp:
                for record in batch.records():
                    if record.timestamp >= timestamp and record.offset >= offset:
                        return TimestampOffset(record.timestamp, record.offset)
            offset = batch.next_offset
    return None
