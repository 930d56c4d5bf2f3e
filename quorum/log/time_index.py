"""Kafka's time index (`<base offset>.timeindex`): a sparse map from timestamps to offsets.

Each entry is 12 bytes, big-endian: a timestamp (int64) and an offset relative to the segment's
base offset (int32). As in Kafka, an entry is considered whenever an offset index entry is made
(every `index.interval.bytes`), and written only when the segment's largest timestamp so far has
grown since the last entry: it names that largest timestamp and the last offset of the batch
holding it. When the segment stops being the active one, a last entry records the segment's
largest timestamp (Kafka's `onBecomeInactiveSegment`), so a closed segment's largest timestamp
is read from its index instead of its batches. Timestamps therefore strictly increase.

A lookup for timestamp T takes the last entry whose timestamp is below T: every batch up to the
one that entry was made at holds only older records, so the first record at or after T lies
beyond the entry's offset, and the search starts there via the offset index. (Kafka takes the
last entry at or below T, which can skip a record exactly at T; strictly below cannot.)

Like the offset index it is derived data: the active segment's is rebuilt at every recovery, any
other one when it is missing or fails the checks here. New entries stay in memory until the
segment is rolled or closed (`flush`).
"""

from __future__ import annotations

import bisect
import os
import struct
import threading
from pathlib import Path

from quorum.log.atomic import write_all
from quorum.log.index import IndexCorrupt, cut_entries, write_whole_entries

TIME_INDEX_SUFFIX = ".timeindex"
TIME_ENTRY = struct.Struct(">qi")
TIME_ENTRY_SIZE = TIME_ENTRY.size
_INT32_MAX = 2**31 - 1


def encode_time_entries(entries: list[tuple[int, int]]) -> bytes:
    """The file content for (timestamp, relative offset) entries."""
    return b"".join(TIME_ENTRY.pack(timestamp, relative) for timestamp, relative in entries)


def decode_time_entries(data: bytes, offset_limit: int | None = None) -> list[tuple[int, int]]:
    """Entries of a time index file; raises IndexCorrupt.

    Timestamps must strictly increase and relative offsets must not decrease (Kafka's
    `maybeAppend` rules); with `offset_limit` (the segment's next relative offset) every offset must
    be below it, which catches an index left from a longer log.
    """
    if len(data) % TIME_ENTRY_SIZE:
        raise IndexCorrupt(f"length {len(data)} is not a multiple of {TIME_ENTRY_SIZE}")
    entries = list(TIME_ENTRY.iter_unpack(data))
    previous_timestamp, previous_offset = -(2**63), 0
    for number, (timestamp, relative) in enumerate(entries):
        if timestamp <= previous_timestamp or relative < previous_offset:
            raise IndexCorrupt(f"time index entry {number} ({timestamp}, {relative}) does not increase")
        if offset_limit is not None and relative >= offset_limit:
            raise IndexCorrupt(f"time index entry {number} names relative offset {relative}, past the segment's end")
        previous_timestamp, previous_offset = timestamp, relative
    return entries


class TimeIndex:
    """One segment's time index: the entries in memory, written to the file by `flush`."""

    def __init__(self, path: Path, base_offset: int, entries: list[tuple[int, int]]) -> None:
        """Opens (creating if needed) `path` and makes it hold exactly `entries` (relative offsets)."""
        self.path = path
        self.base_offset = base_offset
        self._timestamps = [timestamp for timestamp, _ in entries]
        self._relative = [relative for _, relative in entries]
        self._fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        expected = encode_time_entries(entries)
        if os.fstat(self._fd).st_size != len(expected) or os.pread(self._fd, len(expected), 0) != expected:
            os.ftruncate(self._fd, 0)
            write_all(self._fd, expected, 0)
        self._written = len(entries)
        self._file_lock = threading.Lock()  # flush (on a sync thread too) against truncation

    @staticmethod
    def read(path: Path, offset_limit: int | None = None) -> list[tuple[int, int]]:
        """Entries of an existing file (relative offsets); raises FileNotFoundError or IndexCorrupt."""
        return decode_time_entries(path.read_bytes(), offset_limit)

    def __len__(self) -> int:
        return len(self._timestamps)

    @property
    def entries(self) -> list[tuple[int, int]]:
        """(timestamp, absolute offset) pairs."""
        return [(timestamp, self.base_offset + relative)
                for timestamp, relative in zip(self._timestamps, self._relative, strict=True)]  # fmt: skip

    @property
    def last_entry(self) -> tuple[int, int] | None:
        """(timestamp, absolute offset) of the last entry, None when there is none."""
        if not self._timestamps:
            return None
        return self._timestamps[-1], self.base_offset + self._relative[-1]

    def maybe_append(self, timestamp: int, offset: int) -> bool:
        """Add (timestamp, offset) if the timestamp is above the last entry's; returns whether it did."""
        if self._timestamps and timestamp <= self._timestamps[-1]:
            return False
        if timestamp < 0:
            return False  # no timestamps (-1) are not indexed: a lookup never needs them
        relative = offset - self.base_offset
        if not 0 <= relative <= _INT32_MAX:
            raise ValueError(f"offset {offset} does not fit a time index based at {self.base_offset}")
        if self._relative and relative < self._relative[-1]:
            raise ValueError(f"time index entry ({timestamp}, {offset}) goes back in offsets")
        self._timestamps.append(timestamp)
        self._relative.append(relative)
        return True

    def lookup(self, timestamp: int) -> int | None:
        """The offset of the last entry whose timestamp is below `timestamp`: the first record at or
        after `timestamp` is beyond it. None when no entry is below (search from the segment start)."""
        number = bisect.bisect_left(self._timestamps, timestamp) - 1
        return self.base_offset + self._relative[number] if number >= 0 else None

    def truncate_to_offset(self, offset: int) -> None:
        """Drop entries naming `offset` or later, after the log was cut there."""
        with self._file_lock:
            keep = bisect.bisect_left(self._relative, offset - self.base_offset)
            self._written = cut_entries(self._fd, self._written, keep, self._timestamps, self._relative,
                                        TIME_ENTRY_SIZE)  # fmt: skip

    def flush(self) -> None:
        """Write the entries made since the last flush and fsync the file; safe beside `maybe_append`
        on another thread, as `OffsetIndex.flush` (it appends to `_timestamps` first)."""
        with self._file_lock:
            self._written = write_whole_entries(self._fd, self._written, self._timestamps, self._relative,
                                                encode_time_entries, TIME_ENTRY_SIZE)  # fmt: skip
        os.fsync(self._fd)

    def close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1
