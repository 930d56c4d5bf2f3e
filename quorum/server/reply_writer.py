"""Write one answer to a connection, its record spans straight from the segment files.

Most answers are encoded whole and written. A `SplicedBody` (a Fetch answer, `quorum.wire.spliced`)
is written as Kafka's `FileRecords.writeTo` does with `transferTo`: the frame size and response
header, the encoded pieces, and each file span handed to the kernel (`loop.sendfile`: `sendfile(2)`
from the page cache to the socket, never read into Python). Large buffers (a remote read's views of
its cached chunks) are handed to the transport as they are, not joined with the pieces around them:
on loopback the socket takes a megabyte in one send, so they are never copied in Python. A
connection that encrypts (TLS) cannot take bytes the kernel sends past its cipher, so there the
spans are read and written like any bytes.

The frame's size is on the wire before its spans are sent, so a span that comes up short (its file
was cut meanwhile) or a peer that goes away mid-transfer ends the connection; the client retries
the fetch elsewhere or again, as it does after any broken connection. Every span's descriptor is
closed once the answer is written or abandoned.
"""

from __future__ import annotations

import asyncio

from quorum.net.dispatch import Reply
from quorum.wire.protocol import Request, encode_response, response_head
from quorum.wire.spliced import FileRecords, Piece, ShortSpanError, SplicedBody

WRITE_APART_FROM = 32 << 10
"""Buffers this large are written on their own; smaller ones (frame and partition headers, a
rebased batch's base offset) are joined into one write, as a syscall costs more than their copy."""


async def write_reply(writer: asyncio.StreamWriter, request: Request, reply: Reply) -> None:
    """Write `reply` to `request` and wait until the transport has taken it (drain)."""
    body = reply.body
    if not isinstance(body, SplicedBody):
        writer.write(encode_response(request, body, reply.version))
        await writer.drain()
        return
    try:
        head = response_head(request, body.size, reply.version)
        if writer.get_extra_info("ssl_object") is not None:
            writer.write(head + body.encode())  # TLS: the bytes must pass through the cipher
        else:
            await _send_pieces(writer, head, body.pieces)
        await writer.drain()
    finally:
        body.close()


SENDFILE_MIN_BYTES = 128 << 10
"""Spans shorter than this are read and written with the rest of the answer. asyncio's `loop.sendfile`
waits for the transport's buffer to empty and pauses reading around each call: 120-160 us of CPU per
span here against 8-30 us for `pread` and a write at 1-16 KiB, even at 256 KiB (`sendfile` 343 us,
read 477 us). Consumers' and followers' fetches of a few records, most of the fetches a broker answers,
are far below it; a backfill's megabyte spans still go through the kernel alone."""


async def _send_pieces(writer: asyncio.StreamWriter, head: bytes, pieces: list[Piece]) -> None:
    loop = asyncio.get_running_loop()
    pending: list[bytes | memoryview] = [head]
    for piece in pieces:
        if isinstance(piece, FileRecords) and piece.length < SENDFILE_MIN_BYTES:
            try:
                piece = piece.read()  # then written as any buffer
            except ShortSpanError:
                raise _cut_short(piece, "read") from None
        if not isinstance(piece, FileRecords):
            if len(piece) < WRITE_APART_FROM:
                pending.append(piece)
            else:
                _write_joined(writer, pending)
                pending = []
                writer.write(piece)
            continue
        _write_joined(writer, pending)
        pending = []
        if writer.transport.is_closing():
            raise ConnectionResetError("the connection closed while a Fetch answer was being written")
        try:
            sent = await loop.sendfile(writer.transport, piece, piece.position, piece.length, fallback=False)
        except asyncio.SendfileNotAvailableError:
            # os.sendfile failed before its first byte (a peer that reset the connection, a file system
            # without sendfile): asyncio's own fallback seeks and reads a file object, which a span is
            # not (AttributeError: 'FileRecords' object has no attribute 'seek', seen in the soak after
            # a SIGSTOP/SIGCONT). Read the span and write it like any bytes; a dead peer ends the
            # connection at the drain, as after any broken connection.
            writer.write(piece.read())
            continue
        if sent != piece.length:
            raise _cut_short(piece, f"sent only {sent}")
    _write_joined(writer, pending)


def _write_joined(writer: asyncio.StreamWriter, pending: list[bytes | memoryview]) -> None:
    if pending:
        writer.write(pending[0] if len(pending) == 1 else b"".join(pending))


def _cut_short(span: FileRecords, what: str) -> ShortSpanError:
    return ShortSpanError(f"a segment span of {span.length} bytes at {span.position} {what}: "
                          "the file was cut while the answer was written; closing the connection")
