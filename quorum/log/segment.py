"""One log segment: `<20-digit base offset>.log` of concatenated v2 batches, its `.index`, and
(for partition logs) its `.timeindex`.

The segment is the unit of file I/O: positioned reads and writes on one descriptor (so reads of
written bytes never wait for an fsync of later ones), truncation at a byte position, the
recovery scan that finds the last valid batch, and the header walk that turns an offset into a
byte position. Which segments exist, and what the offsets and epochs mean across them, is the
business of `quorum.log.log`.
"""

from __future__ import annotations

import contextlib
import os
import re
from collections.abc import Iterator, Sequence
from concurrent.futures import Future
from dataclasses import dataclass, field
from pathlib import Path

from quorum.log.atomic import write_all
from quorum.log.errors import CorruptLogError, InvalidOffsetError
from quorum.log.index import INDEX_SUFFIX, IndexCorrupt, OffsetIndex
from quorum.log.time_index import TIME_INDEX_SUFFIX, TimeIndex
from quorum.log.validation import batch_fault
from quorum.wire.records import BATCH_HEADER_SIZE, LOG_OVERHEAD, CorruptRecordError, RecordBatch, iter_batches
from quorum.wire.spliced import FileRecords

LOG_SUFFIX = ".log"
#: Kafka's `log.segment.bytes` default.
DEFAULT_SEGMENT_BYTES = 1 << 30
_NAME = re.compile(r"^(\d{20})\.log$")
#: Bytes read at a time by the recovery scan: large reads, few system calls.
_SCAN_CHUNK = 1 << 20
#: Bytes read at a time by the header walk, which usually starts at most one index interval away.
_WALK_CHUNK = 16 << 10


def file_name(base_offset: int, suffix: str) -> str:
    """Kafka's name for a segment file: the base offset as 20 digits, then the suffix."""
    return f"{base_offset:020d}{suffix}"


def parse_log_name(name: str) -> int | None:
    """The base offset of a segment's `.log` file name, None for any other name."""
    match = _NAME.match(name)
    return int(match.group(1)) if match else None


class IndexBuilder:
    """Kafka's rule for when to index: before a batch, once more than `interval` bytes went by.

    Shared by append and recovery, so that a rebuilt index equals the one appends made.
    """

    __slots__ = ("interval", "bytes_since_entry")

    def __init__(self, interval: int, bytes_since_entry: int = 0) -> None:
        self.interval = interval
        self.bytes_since_entry = bytes_since_entry

    def entry_for(self, last_offset: int, position: int, size: int) -> tuple[int, int] | None:
        """The entry to add before the batch at `position`, if one is due; counts the batch."""
        entry = None
        if self.bytes_since_entry > self.interval:
            entry = (last_offset, position)
            self.bytes_since_entry = 0
        self.bytes_since_entry += size
        return entry


@dataclass(slots=True)
class ScanResult:
    """What the recovery scan of one segment found.

    `valid_size` is where the valid batches end, and `fault` why the scan stopped there (None
    when the whole file is valid). `epoch_starts` lists (epoch, base offset) of each batch whose
    epoch is above every one before it, which is what the leader-epoch cache records.
    `time_entries` are the time index's (timestamp, absolute offset) entries, and
    `max_timestamp` the largest batch timestamp with the last offset of its batch ((-1, -1): none).
    """

    valid_size: int
    next_offset: int
    last_epoch: int
    index_entries: list[tuple[int, int]] = field(default_factory=list)
    epoch_starts: list[tuple[int, int]] = field(default_factory=list)
    fault: str | None = None
    time_entries: list[tuple[int, int]] = field(default_factory=list)
    max_timestamp: tuple[int, int] = (-1, -1)


class TimeTracker:
    """The segment's largest timestamp so far and the time index entries it calls for.

    Shared by append, the recovery scan and the header walk, so that every path builds the same
    time index: an entry goes with each offset index entry when the largest timestamp grew.
    """

    __slots__ = ("max_timestamp", "max_offset", "last_indexed")

    def __init__(self, max_timestamp: tuple[int, int] = (-1, -1), last_indexed: int = -1) -> None:
        self.max_timestamp, self.max_offset = max_timestamp
        self.last_indexed = last_indexed

    def see(self, batch: RecordBatch) -> None:
        timestamp = batch.max_timestamp
        if timestamp > self.max_timestamp:
            self.max_timestamp, self.max_offset = timestamp, batch.last_offset

    def entry(self) -> tuple[int, int] | None:
        """The time index entry due with an offset index entry, if the largest timestamp grew."""
        if self.max_timestamp > self.last_indexed and self.max_timestamp >= 0:
            self.last_indexed = self.max_timestamp
            return self.max_timestamp, self.max_offset
        return None

    @property
    def largest(self) -> tuple[int, int]:
        return self.max_timestamp, self.max_offset


class LogSegment:
    """A `.log` file opened for positioned reads and appends, with its offset index (and, when
    `time_index` is set, its time index)."""

    def __init__(self, directory: Path, base_offset: int, index_interval_bytes: int, time_index: bool = False) -> None:
        """Opens (creating if needed) the segment's `.log` file; call `attach_index` before use."""
        self.base_offset = base_offset
        self.path = directory / file_name(base_offset, LOG_SUFFIX)
        self.index_path = directory / file_name(base_offset, INDEX_SUFFIX)
        self.time_index_path = directory / file_name(base_offset, TIME_INDEX_SUFFIX)
        self._index_interval = index_interval_bytes
        self._fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        self.size = os.fstat(self._fd).st_size
        #: Offset after the last batch; the log sets it once it has recovered the segment.
        self.next_offset = base_offset
        self.index: OffsetIndex | None = None
        self._builder = IndexBuilder(index_interval_bytes)
        self.has_time_index = time_index
        self.time_index: TimeIndex | None = None
        self._time = TimeTracker()
        #: The background fsync of a full segment (`Log` with `roll_sync_in_background`), if one ran.
        self.pending_sync: Future[None] | None = None
        #: The segment's size when the last background fsync started (what it makes durable), and how many ran.
        self.synced_in_background = 0
        self.background_syncs = 0
        self._rolling_timestamp: int | None = None

    @classmethod
    def empty(
        cls, directory: Path, base_offset: int, index_interval_bytes: int, time_index: bool = False
    ) -> LogSegment:
        """A new segment at `base_offset` holding no batch, its indexes attached (and empty)."""
        segment = cls(directory, base_offset, index_interval_bytes, time_index)
        segment.attach_index([], [])
        return segment

    def __repr__(self) -> str:
        return f"LogSegment({self.path.name}, size={self.size}, next_offset={self.next_offset})"

    # -- index -------------------------------------------------------------------------------

    def read_index(self) -> list[tuple[int, int]]:
        """The `.index` file's entries (absolute last offsets, positions) if it passes the sanity
        checks; raises IndexCorrupt or FileNotFoundError, after which the caller rebuilds it."""
        entries = OffsetIndex.read(self.index_path, self.size)
        return [(self.base_offset + relative, position) for relative, position in entries]

    def attach_index(
        self,
        entries: list[tuple[int, int]],
        time_entries: list[tuple[int, int]] | None = None,
        max_timestamp: tuple[int, int] = (-1, -1),
    ) -> None:
        """Use these entries (absolute last offsets), rewriting the `.index` file if it differs.

        With a time index, `time_entries` ((timestamp, absolute offset)) become the `.timeindex`
        file's, and `max_timestamp` is the segment's largest batch timestamp with the last offset
        of its batch. None leaves the time index (and its file) alone, for `attach_time_index`.
        """
        relative = [(offset - self.base_offset, position) for offset, position in entries]
        if self.index is not None:
            self.index.close()
        self.index = OffsetIndex(self.index_path, self.base_offset, relative)
        self._builder = IndexBuilder(self._index_interval, self.size - self.index.last_position)
        if time_entries is not None:
            self.attach_time_index(time_entries, max_timestamp)

    def attach_time_index(self, entries: list[tuple[int, int]], max_timestamp: tuple[int, int]) -> None:
        """Use these time index entries ((timestamp, absolute offset)), rewriting the `.timeindex`
        file if it differs; `max_timestamp` is the segment's largest timestamp and its offset."""
        if not self.has_time_index:
            return
        timed = [(timestamp, offset - self.base_offset) for timestamp, offset in entries]
        if self.time_index is not None:
            self.time_index.close()
        self.time_index = TimeIndex(self.time_index_path, self.base_offset, timed)
        last = self.time_index.last_entry
        self._time = TimeTracker(max_timestamp, last[0] if last is not None else -1)

    def read_time_index(self) -> list[tuple[int, int]]:
        """The `.timeindex` file's entries ((timestamp, absolute offset)) if it passes the checks
        against the segment's offsets (`next_offset` must be known); raises IndexCorrupt or
        FileNotFoundError, after which the caller rebuilds it."""
        limit = self.next_offset - self.base_offset
        entries = TimeIndex.read(self.time_index_path, limit)
        if entries and self.size == 0:
            raise IndexCorrupt("entries for an empty segment")
        return [(timestamp, self.base_offset + relative) for timestamp, relative in entries]

    @property
    def max_timestamp(self) -> tuple[int, int]:
        """(largest batch maxTimestamp, last offset of that batch); (-1, -1) when no batch has a
        timestamp or the segment keeps no time index."""
        return self._time.largest

    def seal_time_index(self) -> None:
        """Record the segment's largest timestamp as the time index's last entry, as Kafka does
        when a segment stops being the active one, so that it is known without reading batches."""
        if self.time_index is not None:
            self.time_index.maybe_append(*self._time.largest)
            self._time.last_indexed = max(self._time.last_indexed, self._time.max_timestamp)

    def rolling_timestamp(self) -> int | None:
        """maxTimestamp of the segment's first batch, which `log.roll.ms` counts from (Kafka's
        rollingBasedTimestamp); None for an empty segment or a batch without timestamps."""
        if self.size == 0:
            return None
        if self._rolling_timestamp is None:
            header = os.pread(self._fd, BATCH_HEADER_SIZE, 0)
            if len(header) < BATCH_HEADER_SIZE:
                return None
            self._rolling_timestamp = RecordBatch(header).max_timestamp
        return self._rolling_timestamp if self._rolling_timestamp >= 0 else None

    def modified_ms(self) -> int:
        """The file's modification time: Kafka's stand-in for the largest timestamp of a segment
        whose batches carry none."""
        return os.fstat(self._fd).st_mtime_ns // 1_000_000

    def index_entries_by_walking(self) -> tuple[list[tuple[int, int]], int, int | None]:
        """Rebuild the index from batch headers (no CRC checks): (entries, next offset, last epoch).

        Raises CorruptLogError when the batches do not frame the file exactly.
        """
        entries, _, _, next_offset, last_epoch = self.indexes_by_walking()
        return entries, next_offset, last_epoch

    def indexes_by_walking(
        self,
    ) -> tuple[list[tuple[int, int]], list[tuple[int, int]], tuple[int, int], int, int | None]:
        """Rebuild both indexes from batch headers (no CRC checks): (offset index entries, time
        index entries, largest timestamp and its offset, next offset, last epoch). The time index
        gets its sealing last entry, as a segment that is not the active one has.

        Raises CorruptLogError when the batches do not frame the file exactly.
        """
        builder = IndexBuilder(self._index_interval)
        tracker = TimeTracker()
        entries = []
        time_entries = []
        next_offset = self.base_offset
        last_epoch = None
        for position, header in self.iter_headers(0):
            tracker.see(header)
            entry = builder.entry_for(header.last_offset, position, header.size_in_bytes)
            if entry is not None:
                entries.append(entry)
                timed = tracker.entry()
                if timed is not None:
                    time_entries.append(timed)
            next_offset = header.next_offset
            last_epoch = header.partition_leader_epoch
        sealed = tracker.entry()
        if sealed is not None:
            time_entries.append(sealed)
        return entries, time_entries, tracker.largest, next_offset, last_epoch

    # -- reading -----------------------------------------------------------------------------

    def read(self, position: int, size: int) -> bytes:
        return os.pread(self._fd, size, position)

    def open_span(self, position: int, length: int) -> FileRecords:
        """`length` bytes at `position` as a span on a duplicate descriptor, which stays valid
        (and reads this file) after the segment is closed or deleted, until the span is closed."""
        return FileRecords(os.dup(self._fd), position, length)

    def iter_headers(self, start: int) -> Iterator[tuple[int, RecordBatch]]:
        """(position, batch) for each batch from byte `start` to the end of the segment.

        Only header fields of the yielded batches may be used: a batch larger than the read
        chunk comes as its header alone. Raises CorruptLogError where the framing breaks.
        """
        end = self.size
        pos = start
        while pos < end:
            chunk = os.pread(self._fd, min(_WALK_CHUNK, end - pos), pos)
            walker = iter_batches(chunk)
            try:
                for batch in walker:
                    yield pos + batch.position, batch
            except CorruptRecordError as exc:
                where = None if exc.position is None else pos + exc.position
                raise CorruptLogError(self.path, where, exc.reason) from None
            if walker.truncated is None:
                pos += walker.position
                continue
            at = pos + walker.position
            header = os.pread(self._fd, BATCH_HEADER_SIZE, at)
            if len(header) < BATCH_HEADER_SIZE:
                raise CorruptLogError(self.path, at, f"batch header cut off: {len(header)} bytes before the end")
            batch = RecordBatch(header, at)
            size = batch.size_in_bytes
            if size < BATCH_HEADER_SIZE or at + size > end:
                raise CorruptLogError(self.path, at, f"batch of {size} bytes does not fit the segment's {end}")
            yield at, batch
            pos = at + size

    def find(self, offset: int) -> tuple[int, RecordBatch]:
        """Position and header of the batch holding `offset`; InvalidOffsetError if none does."""
        assert self.index is not None
        for position, header in self.iter_headers(self.index.lookup(offset)):
            if header.last_offset >= offset:
                if header.base_offset > offset:
                    break
                return position, header
        raise InvalidOffsetError(f"offset {offset} is not in {self.path.name}")

    def scan(self, previous_epoch: int) -> ScanResult:
        """Check every batch (CRC, offsets following on from the base offset, epochs not
        decreasing from `previous_epoch`) and stop at the first that fails."""
        result = ScanResult(0, self.base_offset, previous_epoch)
        builder = IndexBuilder(self._index_interval)
        tracker = TimeTracker()
        max_epoch = previous_epoch
        size = self.size
        pos = 0
        chunk_size = _SCAN_CHUNK
        while pos < size:
            chunk = os.pread(self._fd, min(chunk_size, size - pos), pos)
            chunk_size = _SCAN_CHUNK
            walker = iter_batches(chunk)
            try:
                for batch in walker:
                    position = pos + batch.position
                    fault = batch_fault(batch, result.next_offset, result.last_epoch)
                    if fault is not None:
                        result.fault = fault
                        return result
                    tracker.see(batch)
                    entry = builder.entry_for(batch.last_offset, position, batch.size_in_bytes)
                    if entry is not None:
                        result.index_entries.append(entry)
                        timed = tracker.entry()
                        if timed is not None:
                            result.time_entries.append(timed)
                    result.max_timestamp = tracker.largest
                    epoch = batch.partition_leader_epoch
                    if epoch > max_epoch:
                        result.epoch_starts.append((epoch, batch.base_offset))
                        max_epoch = epoch
                    result.last_epoch = epoch
                    result.next_offset = batch.next_offset
                    result.valid_size = position + batch.size_in_bytes
            except CorruptRecordError as exc:
                result.fault = exc.reason
                return result
            tail = walker.truncated
            if tail is None:
                pos += walker.position
                continue
            at = pos + tail.position
            needed = tail.needed
            if at + (needed or LOG_OVERHEAD) > size:
                wanted = needed or f"at least {LOG_OVERHEAD}"
                result.fault = f"batch cut off at the end of the file ({size - at} of {wanted} bytes)"
                return result
            pos = at
            chunk_size = max(_SCAN_CHUNK, needed or 0)
        return result

    # -- writing -----------------------------------------------------------------------------

    def append(self, data: bytes | memoryview, batches: Sequence[RecordBatch]) -> None:
        """Write already-validated batches (whose bytes are `data`) at the end, indexing them.

        On a failed write the file is cut back, so a refused append leaves nothing behind.
        """
        assert self.index is not None
        start = self.size
        position = start
        builder = IndexBuilder(self._index_interval, self._builder.bytes_since_entry)
        timed = self.time_index is not None
        tracker = TimeTracker(self._time.largest, self._time.last_indexed)
        entries = []
        time_entries = []
        for batch in batches:
            if timed:
                tracker.see(batch)
            entry = builder.entry_for(batch.last_offset, position, batch.size_in_bytes)
            if entry is not None:
                entries.append(entry)
                if timed and (time_entry := tracker.entry()) is not None:
                    time_entries.append(time_entry)
            position += batch.size_in_bytes
        try:
            write_all(self._fd, data, start)
            for offset, entry_position in entries:
                self.index.append(offset, entry_position)
            for timestamp, offset in time_entries:
                assert self.time_index is not None
                self.time_index.maybe_append(timestamp, offset)
        except BaseException:
            os.ftruncate(self._fd, start)
            self.index.truncate_to_position(start)
            if self.time_index is not None:
                self.time_index.truncate_to_offset(self.next_offset)
            raise
        self.size = position
        self.next_offset = batches[-1].next_offset
        self._builder = builder
        self._time = tracker

    def truncate_to(self, position: int, next_offset: int) -> None:
        """Cut the file at `position` (a batch boundary), which ends at `next_offset`; fsynced,
        so the cut data cannot come back after a crash."""
        os.ftruncate(self._fd, position)
        os.fsync(self._fd)
        self.size = position
        self.next_offset = next_offset
        if position == 0:
            self._rolling_timestamp = None
        if self.index is not None:
            self.index.truncate_to_position(position)
            self._builder = IndexBuilder(self._index_interval, position - self.index.last_position)
        if self.time_index is not None:
            self.time_index.truncate_to_offset(next_offset)
            self._time = self._largest_timestamp_after_truncation()

    def _largest_timestamp_after_truncation(self) -> TimeTracker:
        """The largest timestamp of what is left: the last time index entry's, or a later batch's
        (read from the batch headers after that entry, a few index intervals at most)."""
        assert self.time_index is not None and self.index is not None
        last = self.time_index.last_entry
        tracker = TimeTracker(last if last is not None else (-1, -1), last[0] if last is not None else -1)
        start = self.index.lookup(last[1]) if last is not None else 0
        for _, header in self.iter_headers(start):
            tracker.see(header)
        return tracker

    def flush(self) -> None:
        """fsync the data (not the index, which recovery rebuilds for the last segment)."""
        os.fsync(self._fd)

    def flush_all(self) -> None:
        """Write out the indexes and fsync them and the data: at roll and at close, and on a sync
        thread for a full segment while appends go on (`Log._synced_in_background`)."""
        self.flush()
        if self.index is not None:
            self.index.flush()
        if self.time_index is not None:
            self.time_index.flush()

    def close(self) -> None:
        if self.pending_sync is not None:  # never close the descriptor under a running fsync
            with contextlib.suppress(Exception):
                self.pending_sync.result()
        if self.index is not None:
            self.index.close()
        if self.time_index is not None:
            self.time_index.close()
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1

    def delete(self) -> None:
        """Close and remove the segment's files (the caller fsyncs the directory)."""
        self.close()
        for path in (self.path, self.index_path, self.time_index_path):
            with contextlib.suppress(FileNotFoundError):
                path.unlink()


__all__ = [
    "DEFAULT_SEGMENT_BYTES",
    "LOG_SUFFIX",
    "IndexBuilder",
    "IndexCorrupt",
    "LogSegment",
    "ScanResult",
    "TimeTracker",
    "file_name",
    "parse_log_name",
]
