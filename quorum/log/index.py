"""Kafka's offset index (`<base offset>.index`): a sparse map from offsets to file positions.

Each entry is 8 bytes, big-endian: the offset relative to the segment's base offset (int32) and
the byte position of a batch in the `.log` file (int32). As in Kafka, an entry is added before a
batch is appended once more than `index.interval.bytes` were written since the previous entry,
and it names that batch's *last* offset with the batch's start position. A lookup therefore
gives a position at or before the wanted batch, and the segment scans a few KiB of batch
headers from there; keeping every batch's position instead would cost memory per batch.

Kafka preallocates the active index and trims it at roll; this one only ever holds its entries,
which Kafka also reads (it rounds the length down to whole entries). The index is derived data:
recovery rebuilds the last segment's index from the log every time, and any other one that is
missing or fails the sanity checks here. So new entries stay in memory until the segment is
rolled or closed (`flush`), which keeps the file's metadata out of the append path's fsyncs.
"""

from __future__ import annotations

import bisect
import os
import struct
import threading
from collections.abc import Callable
from pathlib import Path

from quorum.log.atomic import write_all

INDEX_SUFFIX = ".index"
ENTRY = struct.Struct(">ii")
ENTRY_SIZE = ENTRY.size
#: Kafka's `index.interval.bytes` default.
DEFAULT_INDEX_INTERVAL_BYTES = 4096
_INT32_MAX = 2**31 - 1


class IndexCorrupt(Exception):
    """The index file fails a sanity check; the caller rebuilds it from the log."""


def encode_entries(entries: list[tuple[int, int]]) -> bytes:
    """The file content for (relative offset, position) entries."""
    return b"".join(ENTRY.pack(relative, position) for relative, position in entries)


def write_whole_entries(
    fd: int,
    written: int,
    first: list[int],
    second: list[int],
    encode: Callable[[list[tuple[int, int]]], bytes],
    entry_size: int,
) -> int:
    """Write to the index file `fd`, which holds `written` entries, the entries after them that both
    columns hold, and return how many it holds then. An entry's `first` value is appended before its
    `second`, and this may run on another thread than the appends (a full segment's background
    fsync writes what was indexed so far): an entry half appended waits for the next flush."""
    count = len(second)
    if count > written:
        write_all(fd, encode(list(zip(first[written:count], second[written:count], strict=True))), written * entry_size)
    return max(count, written)


def cut_entries(fd: int, written: int, keep: int, first: list[int], second: list[int], entry_size: int) -> int:
    """Keep the first `keep` entries of both columns and of the index file `fd` (which holds `written`),
    and return how many the file holds then. Called under the index's file lock, as a flush is."""
    del first[keep:]
    del second[keep:]
    if keep < written:
        os.ftruncate(fd, keep * entry_size)
        return keep
    return written


def decode_entries(data: bytes, log_size: int) -> list[tuple[int, int]]:
    """Entries of an index file, checked against the log it indexes; raises IndexCorrupt.

    Offsets and positions must strictly increase and positions must fall inside the log, which
    catches a torn or zero-filled tail and an index left from a longer log.
    """
    if len(data) % ENTRY_SIZE:
        raise IndexCorrupt(f"length {len(data)} is not a multiple of {ENTRY_SIZE}")
    entries = list(ENTRY.iter_unpack(data))
    previous_offset = previous_position = -1
    for number, (relative, position) in enumerate(entries):
        if relative <= previous_offset or position <= previous_position:
            raise IndexCorrupt(f"entry {number} ({relative}, {position}) does not increase")
        if position >= log_size:
            raise IndexCorrupt(f"entry {number} points at byte {position}, past the log's {log_size} bytes")
        previous_offset, previous_position = relative, position
    return entries


class OffsetIndex:
    """One segment's index: the entries in memory, written to the file by `flush`."""

    def __init__(self, path: Path, base_offset: int, entries: list[tuple[int, int]]) -> None:
        """Opens (creating if needed) `path` and makes it hold exactly `entries`."""
        self.path = path
        self.base_offset = base_offset
        self._relative = [relative for relative, _ in entries]
        self._positions = [position for _, position in entries]
        self._fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        expected = encode_entries(entries)
        if os.fstat(self._fd).st_size != len(expected) or os.pread(self._fd, len(expected), 0) != expected:
            os.ftruncate(self._fd, 0)
            write_all(self._fd, expected, 0)
        self._written = len(entries)  # entries the file holds; the rest are written by flush
        self._file_lock = threading.Lock()  # flush (on a sync thread too) against truncation

    @staticmethod
    def read(path: Path, log_size: int) -> list[tuple[int, int]]:
        """Entries of an existing index file; raises FileNotFoundError or IndexCorrupt."""
        return decode_entries(path.read_bytes(), log_size)

    def __len__(self) -> int:
        return len(self._relative)

    @property
    def entries(self) -> list[tuple[int, int]]:
        return list(zip(self._relative, self._positions, strict=True))

    @property
    def last_position(self) -> int:
        """Position of the last indexed batch, 0 when there is none: where a tail scan may start."""
        return self._positions[-1] if self._positions else 0

    def append(self, offset: int, position: int) -> None:
        """Index the batch whose last offset is `offset` and which starts at `position`."""
        relative = offset - self.base_offset
        if not 0 <= relative <= _INT32_MAX:
            raise ValueError(f"offset {offset} does not fit an index based at {self.base_offset}")
        if self._relative and (relative <= self._relative[-1] or position <= self._positions[-1]):
            raise ValueError(f"index entry ({offset}, {position}) does not follow the last one")
        self._relative.append(relative)
        self._positions.append(position)

    def lookup(self, offset: int) -> int:
        """A position at or before the batch holding `offset`: scanning starts there."""
        number = bisect.bisect_right(self._relative, offset - self.base_offset) - 1
        return self._positions[number] if number >= 0 else 0

    def lookup_position(self, position: int) -> int:
        """The start of an indexed batch at or before byte `position` (0 when none is): a header
        walk that looks for the last batch ending by `position` starts there."""
        number = bisect.bisect_right(self._positions, position) - 1
        return self._positions[number] if number >= 0 else 0

    def truncate_to_position(self, log_size: int) -> None:
        """Drop entries for batches at or after `log_size`, after the log was cut there."""
        with self._file_lock:
            keep = bisect.bisect_left(self._positions, log_size)
            self._written = cut_entries(self._fd, self._written, keep, self._relative, self._positions, ENTRY_SIZE)

    def flush(self) -> None:
        """Write the entries made since the last flush and fsync the file. It may run on another
        thread than `append` (a full segment's background sync writes what was indexed so far while
        appends go on): whole entries only (`write_whole_entries`), never beside a truncation."""
        with self._file_lock:
            self._written = write_whole_entries(self._fd, self._written, self._relative, self._positions,
                                                encode_entries, ENTRY_SIZE)  # fmt: skip
        os.fsync(self._fd)

    def close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1
