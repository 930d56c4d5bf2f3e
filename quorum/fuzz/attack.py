"""Send frames to one node over many connections at once and record what the node did with each.

Each connection sends one frame at a time and waits for the node's move: an answer (the connection
goes on with the next frame), a close (a new connection takes over), or nothing within the hang
deadline, which is a hang: the frame is kept for the report and the connection dropped. Plain random
bytes are followed by a half-close, because a size prefix may announce more bytes than were sent and
the node rightly waits for them; after the half-close the node must answer or close. An acks=0
Produce is followed by an ApiVersions request: its answer shows the node kept the connection.
"""

from __future__ import annotations

import asyncio
import struct
from collections import Counter
from collections.abc import Callable
from contextlib import suppress
from dataclasses import dataclass, field

from quorum.fuzz.frames import RANDOM_BYTES, SILENT, Frame, FrameFactory
from quorum.wire.framing import RequestHeader, encode_request_header

ANSWERED = "answered"
CLOSED = "closed"
SILENT_KEPT = "silent, kept open"
HANG = "HANG"
OUTCOMES = (ANSWERED, CLOSED, SILENT_KEPT, HANG)

_FOLLOW_UP_ID = 0x7FFF_0000
_FOLLOW_UP = (lambda payload: struct.pack(">i", len(payload)) + payload)(
    encode_request_header(RequestHeader(18, 0, _FOLLOW_UP_ID, "fuzz-follow-up"), flexible=False))
"""ApiVersions v0: sent after an acks=0 Produce to see whether the node kept the connection."""
_MAX_ANSWER = 64 * 1024 * 1024


@dataclass
class Hang:
    node: str
    api: str
    kind: str
    frame: bytes


@dataclass
class Tally:
    """What one node did with the frames sent to it: outcome counts per API, and the hangs."""

    outcomes: Counter[tuple[str, str]] = field(default_factory=Counter)
    hangs: list[Hang] = field(default_factory=list)
    connections: int = 0

    @property
    def frames(self) -> int:
        return sum(self.outcomes.values())

    def merge(self, other: Tally) -> None:
        self.outcomes.update(other.outcomes)
        self.hangs.extend(other.hangs)
        self.connections += other.connections


async def attack(node: str, host: str, port: int, factory: FrameFactory, frames: int, connections: int,
                 hang_deadline_s: float, tally: Tally, stop: Callable[[], bool] = lambda: False) -> None:
    """Send `frames` frames to host:port over `connections` connections at once, recording into `tally`.

    `stop` is asked between frames: True ends the attack early (the node crashed, the user pressed Ctrl-C)."""
    remaining = [frames]

    def take() -> Frame | None:
        if remaining[0] <= 0 or stop():
            return None
        remaining[0] -= 1
        return factory.next()

    await asyncio.gather(*(_connection_loop(node, host, port, take, hang_deadline_s, tally)
                           for _ in range(connections)))


async def _connection_loop(node: str, host: str, port: int, take: Callable[[], Frame | None],
                           hang_deadline_s: float, tally: Tally) -> None:
    frame = take()
    while frame is not None:
        reader, writer = await asyncio.wait_for(asyncio.open_connection(host, port), hang_deadline_s)
        tally.connections += 1
        try:
            while frame is not None:
                outcome = await _send(reader, writer, frame, hang_deadline_s)
                tally.outcomes[(frame.api, outcome)] += 1
                if outcome == HANG:
                    tally.hangs.append(Hang(node, frame.api, frame.kind, frame.data))
                # after random bytes the connection was half-closed: a new one goes on
                new_connection = outcome in (CLOSED, HANG) or frame.kind == RANDOM_BYTES
                frame = take()
                if new_connection:
                    break
        finally:
            writer.close()
            with suppress(ConnectionError, OSError):
                await writer.wait_closed()


async def _send(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, frame: Frame, deadline_s: float) -> str:
    try:
        writer.write(frame.data)
        if frame.expect == SILENT:
            writer.write(_FOLLOW_UP)
        if frame.kind == RANDOM_BYTES:
            writer.write_eof()
        await writer.drain()
    except (ConnectionError, OSError):
        return CLOSED  # the node closed the connection while the frame was still being written
    try:
        correlation_id = await asyncio.wait_for(_read_answer(reader), deadline_s)
        if correlation_id is None:
            return CLOSED
        if frame.expect != SILENT:
            return ANSWERED
        if correlation_id != _FOLLOW_UP_ID:  # acks=0 answered after all: then the follow-up's answer
            correlation_id = await asyncio.wait_for(_read_answer(reader), deadline_s)
            if correlation_id is None:
                return CLOSED
        return SILENT_KEPT
    except TimeoutError:
        return HANG


async def _read_answer(reader: asyncio.StreamReader) -> int | None:
    """The correlation id of the next answer, or None when the node closed the connection."""
    try:
        (size,) = struct.unpack(">i", await reader.readexactly(4))
        if not 4 <= size <= _MAX_ANSWER:
            return None  # not an answer a client could read: as good as closed
        payload = await reader.readexactly(size)
    except (asyncio.IncompleteReadError, ConnectionError, OSError):
        return None
    return struct.unpack_from(">i", payload)[0]
