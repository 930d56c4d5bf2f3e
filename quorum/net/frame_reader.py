"""Read a connection's frames, each into one buffer of its own, with `recv_into`: the listener's
requests, and the answers a peer client reads (`quorum.net.peer_client.ResponseFrames`).

A StreamReader copies every byte three times on its way to a handler: `recv` makes a bytes object,
`feed_data` appends it to the reader's buffer, `readexactly` slices it out again (and the codec
copied the records once more). A Produce request is mostly its record batch, so for a megabyte
batch that was three megabytes of copying per request, a fifth of a broker's produce CPU. Here the
kernel writes each large frame straight into the bytearray the handler gets (`recv_into` through
asyncio's BufferedProtocol), and the codec hands out the records as a view of it
(`quorum.wire.records_field`), so the leader validates and patches the batch where it lies and
writes those same bytes to the segment.

Small frames (below `STAGING_BYTES`, which is nearly everything but Produce) are read many at a time
into a staging buffer and copied out one by one, so a client that pipelines small requests costs
one `recv` for many of them, as before.

The protocol is a StreamReaderProtocol too, so a connection keeps its `asyncio.StreamWriter`:
answers are written, drained and `start_tls`'d (quorum.net.secure_connection) exactly as before; TLS
connections reach `get_buffer` through asyncio's SSL layer, which supports buffered protocols.

Reading pauses while the frames read ahead and not yet taken hold `READ_AHEAD_BYTES` or
`READ_AHEAD_FRAMES` (the listener takes one request at a time, or up to MAX_PIPELINED), so a client
cannot make the broker buffer more than that plus the one frame in progress.

A frame in progress grows with what its peer has sent (`FIRST_FRAME_BYTES`, then doubling up to
the declared size), never to the size it declares before the bytes come: a 4-byte prefix declaring
`max_frame_bytes` (Kafka's `socket.request.max.bytes`, 100 MiB) would otherwise make each
connection cost 100 MiB for nothing (the protocol fuzzer's many connections took a node past
360 MiB that way). A frame up to FIRST_FRAME_BYTES, a megabyte batch among them, still lands in
one buffer with no copy; a larger one costs at most one copy of what had arrived per doubling.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

from quorum.net.frame_queue import FrameQueue
from quorum.wire.errors import WireError
from quorum.wire.framing import check_frame_size

STAGING_BYTES = 64 * 1024
"""Frames smaller than this are read through the staging buffer; larger ones into their own."""
READ_AHEAD_BYTES = 1024 * 1024
READ_AHEAD_FRAMES = 1000
FIRST_FRAME_BYTES = 2 * 1024 * 1024
"""A large frame's first buffer; it grows (doubling) only as its bytes arrive."""


class FrameReader(FrameQueue, asyncio.StreamReaderProtocol, asyncio.BufferedProtocol):
    """One connection's frames, as whole payloads (without the size prefix), in arrival order.

    `serve(reader, writer)` runs as the connection's task, as `asyncio.start_server`'s callback does.
    """

    def __init__(self, max_frame_bytes: int,
                 serve: Callable[[FrameReader, asyncio.StreamWriter], Awaitable[None] | None],
                 staging_bytes: int = STAGING_BYTES, first_frame_bytes: int = FIRST_FRAME_BYTES) -> None:
        asyncio.StreamReaderProtocol.__init__(self, None, lambda _reader, writer: serve(self, writer))
        FrameQueue.__init__(self)
        self._max_frame_bytes = max_frame_bytes
        self._staging = bytearray(max(staging_bytes, 8))
        self._start = 0  # unparsed bytes of the staging buffer: [_start, _end)
        self._end = 0
        self._frame: bytearray | None = None  # a large frame being filled in place
        self._frame_size = 0  # the size its prefix declared; len(_frame) grows towards it
        self._filled = 0
        self._first_frame_bytes = first_frame_bytes
        self._queued_bytes = 0
        self._reading_paused = False  # not `_paused`: that is FlowControlMixin's writing flag, which drain() waits on

    # -- asyncio.BufferedProtocol -----------------------------------------------------------------

    def get_buffer(self, sizehint: int) -> memoryview:
        frame = self._frame
        if frame is not None:
            if self._filled == len(frame):  # the peer sent what was allocated: room for as much again
                frame = self._frame = _grown(frame, min(2 * len(frame), self._frame_size))
            return memoryview(frame)[self._filled:]
        if self._end == len(self._staging):  # only the start of a frame that fits is left: move it down
            kept = self._end - self._start
            self._staging[:kept] = self._staging[self._start:self._end]
            self._start, self._end = 0, kept
        return memoryview(self._staging)[self._end:]

    def buffer_updated(self, nbytes: int) -> None:
        if self._failure is not None:  # bytes after a bad frame size (or the end) mean nothing: drop them
            self._start = self._end = 0
            self._frame = None
            return
        frame = self._frame
        if frame is not None:
            self._filled += nbytes
            if self._filled == self._frame_size:
                self._frame = None
                self._deliver(frame)
        else:
            self._end += nbytes
            try:
                self._split()
            except WireError as exc:  # the frames before it were delivered; nothing after it is read
                self._start = self._end = 0
                self._fail(exc)
                return
        if not self._reading_paused and (self._queued_bytes >= READ_AHEAD_BYTES
                                         or len(self._frames) >= READ_AHEAD_FRAMES):
            self._reading_paused = True
            self._pause()

    def _split(self) -> None:
        """Deliver the whole frames in the staging buffer; a large one's start moves to a buffer of its own."""
        buf = self._staging
        pos, end = self._start, self._end
        while end - pos >= 4:
            size = check_frame_size(buf[pos:pos + 4], self._max_frame_bytes)
            if end - pos - 4 >= size:
                self._deliver(buf[pos + 4:pos + 4 + size])
                pos += 4 + size
                continue
            if size + 4 > len(buf):  # will not fit the staging buffer: read the rest where it will stay
                have = end - pos - 4
                frame = bytearray(min(size, max(self._first_frame_bytes, have)))
                frame[:have] = buf[pos + 4:end]
                self._frame, self._frame_size, self._filled = frame, size, have
                pos = end
            elif size + 4 > len(buf) - pos:  # fits, but not from here: make room after it
                buf[:end - pos] = buf[pos:end]
                pos, end = 0, end - pos
            break
        if pos == end:
            pos = end = 0
        self._start, self._end = pos, end

    def _deliver(self, frame: bytearray) -> None:
        self._queued_bytes += len(frame)
        super()._deliver(frame)

    # -- the connection's end ---------------------------------------------------------------------

    def eof_received(self) -> bool:
        self._fail(asyncio.IncompleteReadError(self._partial(), None))
        return super().eof_received()

    def connection_lost(self, exc: Exception | None) -> None:
        self._fail(asyncio.IncompleteReadError(self._partial(), None) if exc is None else exc)
        super().connection_lost(exc)

    def _partial(self) -> bytes:
        """The payload bytes of the frame cut short (IncompleteReadError.partial)."""
        if self._frame is not None:
            return bytes(self._frame[:self._filled])
        return bytes(self._staging[self._start + 4:self._end]) if self._end - self._start > 4 else b""

    def _fail(self, failure: BaseException) -> None:
        self._pause()
        super()._fail(failure)

    # -- the connection's task ------------------------------------------------------------------------

    async def next_frame(self) -> bytearray:
        """The next whole frame's payload, a buffer the caller owns (handlers may patch it in place).

        Raises the frame-size error (a WireError) once the frames before it are taken,
        IncompleteReadError at the end of the stream, or the connection's error."""
        frame = await self._next_queued()
        self._queued_bytes -= len(frame)
        if self._reading_paused and self._failure is None and self._queued_bytes < READ_AHEAD_BYTES \
                and len(self._frames) < READ_AHEAD_FRAMES:
            self._reading_paused = False
            if self._transport is not None:
                self._transport.resume_reading()
        return frame

    def _pause(self) -> None:
        transport = self._transport
        if transport is not None and not transport.is_closing():
            transport.pause_reading()


def _grown(frame: bytearray, size: int) -> bytearray:
    """A larger copy: not `frame.extend`, since asyncio may still hold a view of the old buffer
    (protocols._feed_data_to_buffered_proto asks for the next buffer before dropping the last one)."""
    larger = bytearray(size)
    larger[:len(frame)] = frame
    return larger
