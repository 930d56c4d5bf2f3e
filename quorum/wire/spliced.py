"""Responses whose record bytes are not copied into their encoding (Kafka's `FileRecords.writeTo`).

A Fetch answer is mostly record batches that already sit, byte for byte, in a segment file (or,
for the benchmarks' stores-nothing endpoint, in memory). Encoding them into the response would
read a megabyte into Python and copy it twice per partition. Instead a partition's `records`
may be a `FileRecords` (a span of an open file) or `BufferRecords` (buffers in order); the
message is encoded with a marker in their place, and `SplicedBody` is the encoding cut at the
markers: small encoded pieces with the spans between them. The listener writes the pieces and
hands each file span to the kernel (`sendfile`), or reads it where it cannot (TLS); `encode()`
gives the whole body as bytes for everything else (tests, in-process calls).

A `FileRecords` owns a duplicate of the segment's descriptor, taken while the log's lock is held,
so the span stays readable however the log changes before the answer leaves (a deleted segment's
file lives on until the span is closed), and a descriptor number is never reused under it. A
span that reads short (the file was truncated meanwhile) raises `ShortSpanError`: the frame's
size is already on the wire, so the connection must close.
"""

from __future__ import annotations

import os
import struct
from collections.abc import Iterator, Sequence
from typing import Any

from quorum.wire.varint import encode_uvarint

_MARKER = b"\xf3\x9c\x1a\x7e" + os.urandom(12)
"""What stands in for a spliced records field while the rest of the message is encoded: 16 random
bytes, so it cannot be mistaken for the few hundred bytes of names and numbers around it."""
_INT32 = struct.Struct(">i")
_BASE_OFFSET = struct.Struct(">q")


class ShortSpanError(OSError):
    """A file span held fewer bytes than its answer promised (the file was cut meanwhile)."""


class FileRecords:
    """`length` bytes at `position` of a file, read only when the answer is written.

    Owns `fd` (a duplicate made for this span): `close()` it, or let the writer do so.
    """

    __slots__ = ("fd", "position", "length")

    def __init__(self, fd: int, position: int, length: int) -> None:
        self.fd = fd
        self.position = position
        self.length = length

    def __len__(self) -> int:
        return self.length

    def __repr__(self) -> str:
        return f"FileRecords(fd={self.fd}, position={self.position}, length={self.length})"

    def fileno(self) -> int:
        """For `loop.sendfile`, which reads the span from the descriptor itself."""
        return self.fd

    def read(self) -> bytes:
        """The span's bytes (the copying path: TLS, tests)."""
        data = os.pread(self.fd, self.length, self.position)
        if len(data) != self.length:
            raise ShortSpanError(f"file span of {self.length} bytes at {self.position} read {len(data)}")
        return data

    def close(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1

    def __del__(self) -> None:  # an answer dropped unsent (its connection closed) still frees the descriptor
        self.close()


class BufferRecords:
    """Record bytes as buffers in order (memoryviews of a ready-made template, patched fields)."""

    __slots__ = ("parts", "length")

    def __init__(self, parts: Sequence[bytes | memoryview]) -> None:
        self.parts = list(parts)
        self.length = sum(len(part) for part in self.parts)

    def __len__(self) -> int:
        return self.length

    def read(self) -> bytes:
        return b"".join(self.parts)

    def close(self) -> None:
        pass


class RebasedBatches:
    """Ready-made v2 batches served at any base offset without copying them: each batch is its
    8-byte base offset (outside the CRC, so any value keeps the batch valid) and a view of the rest."""

    __slots__ = ("_views", "batch_records")

    def __init__(self, data: bytes, positions: Sequence[int], batch_records: int) -> None:
        view = memoryview(data)
        ends = [*positions[1:], len(data)]
        self._views = [view[start + _BASE_OFFSET.size:end] for start, end in zip(positions, ends, strict=True)]
        self.batch_records = batch_records

    def __len__(self) -> int:
        return len(self._views)

    def records(self, first_offset: int) -> BufferRecords:
        """The batches numbered on from `first_offset`, `batch_records` offsets each."""
        parts: list[bytes | memoryview] = []
        for number, view in enumerate(self._views):
            parts.append(self.base_offset(first_offset + number * self.batch_records))
            parts.append(view)
        return BufferRecords(parts)

    @staticmethod
    def base_offset(offset: int) -> bytes:
        return _BASE_OFFSET.pack(offset)


Spliced = FileRecords | BufferRecords
Piece = bytes | memoryview | FileRecords


def records_prefix(length: int, flexible: bool) -> bytes:
    """The length before a records field: int32, or KIP-482's compact unsigned varint (N + 1)."""
    return encode_uvarint(length + 1) if flexible else _INT32.pack(length)


class SplicedBody:
    """An encoded response body as pieces in order: encoded bytes, record buffers, file spans."""

    __slots__ = ("pieces", "size")

    def __init__(self, pieces: list[Piece]) -> None:
        self.pieces = pieces
        self.size = sum(len(piece) for piece in pieces)

    def encode(self, version: int | None = None) -> bytes:
        """The whole body as bytes, spans read (and closed). `version` is ignored: the body is encoded."""
        try:
            return b"".join(piece.read() if isinstance(piece, FileRecords) else piece for piece in self.pieces)
        finally:
            self.close()

    def close(self) -> None:
        for piece in self.pieces:
            if isinstance(piece, FileRecords):
                piece.close()

    def spans(self) -> Iterator[FileRecords]:
        return (piece for piece in self.pieces if isinstance(piece, FileRecords))


def encode_spliced(message: Any, version: int, flexible: bool, holders: Sequence[Any]) -> SplicedBody:
    """Encode `message` at `version` with each of `holders`' `records` (a `Spliced`, in the order
    the encoding meets them) cut out of the encoding instead of copied into it.

    The holders are the message's partition entries whose records are spliced; their `records`
    attribute is set back to the spliced value after encoding.
    """
    spliced: list[Spliced] = [holder.records for holder in holders]
    for holder in holders:
        holder.records = _MARKER
    try:
        encoded = message.encode(version=version)
    finally:
        for holder, records in zip(holders, spliced, strict=True):
            holder.records = records
    marker_prefix = records_prefix(len(_MARKER), flexible)
    view = memoryview(encoded)
    pieces: list[Piece] = []
    start = 0
    for records in spliced:
        at = encoded.find(marker_prefix + _MARKER, start)
        if at < 0:
            raise AssertionError("a spliced records field is missing from the encoding")  # holders not in message
        pieces.append(view[start:at])
        pieces.append(records_prefix(len(records), flexible))
        if isinstance(records, BufferRecords):
            pieces.extend(records.parts)
        else:
            pieces.append(records)
        start = at + len(marker_prefix) + len(_MARKER)
    pieces.append(view[start:])
    return SplicedBody([piece for piece in pieces if len(piece) or isinstance(piece, FileRecords)])


__all__ = [
    "BufferRecords",
    "FileRecords",
    "Piece",
    "RebasedBatches",
    "ShortSpanError",
    "Spliced",
    "SplicedBody",
    "encode_spliced",
    "records_prefix",
]
