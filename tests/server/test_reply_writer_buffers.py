"""A Fetch answer's large buffers (a remote read's views of its cached chunks) are written to the
socket as they are, apart from the small pieces around them: what the client reads must still be
the answer, byte for byte and in order, around file spans too (sent with sendfile, or read when
shorter than SENDFILE_MIN_BYTES)."""

from __future__ import annotations

import asyncio
import os
import socket
import threading

from quorum.net.dispatch import Reply
from quorum.server.reply_writer import SENDFILE_MIN_BYTES, WRITE_APART_FROM, write_reply
from quorum.wire.spliced import FileRecords, SplicedBody
from tests.broker.test_zero_copy_fetch import _spliced


def test_large_buffers_small_pieces_and_file_spans_arrive_in_order(tmp_path) -> None:
    request, _, _ = _spliced(tmp_path)  # a Fetch request to answer
    chunk = os.urandom(3 * WRITE_APART_FROM)  # a cached chunk: the answer holds views of it
    view = memoryview(chunk)
    path = tmp_path / "segment"
    path.write_bytes(os.urandom(2 * SENDFILE_MIN_BYTES))
    sent, read = os.open(path, os.O_RDONLY), os.open(path, os.O_RDONLY)
    pieces = [b"head", view[5 : 2 * WRITE_APART_FROM], b"p1", memoryview(b"p2"),
              FileRecords(sent, 7, SENDFILE_MIN_BYTES), view[WRITE_APART_FROM:], b"p3",
              FileRecords(read, 9, WRITE_APART_FROM), view[1:], b"tail"]  # fmt: skip
    expected = b"".join(p.read() if isinstance(p, FileRecords) else bytes(p) for p in pieces)
    body = SplicedBody(pieces)
    received = written(request, body)
    assert len(received) == 4 + 5 + len(expected)  # the frame's size, the response header, the body
    assert received[9:] == expected
    assert all(span.fd == -1 for span in body.spans())


def written(request: object, body: SplicedBody) -> bytes:
    """What a client reads of `write_reply`'s answer to `request` over a socket pair (read on a
    thread of its own, so that an answer larger than the socket's buffers does not stall)."""
    received = bytearray()

    def client(sock: socket.socket) -> None:
        while data := sock.recv(1 << 16):
            received.extend(data)
        sock.close()

    async def send() -> None:
        server_sock, client_sock = socket.socketpair()
        client_sock.settimeout(60)
        reader = threading.Thread(target=client, args=(client_sock,))
        reader.start()
        _, writer = await asyncio.open_connection(sock=server_sock)
        try:
            await write_reply(writer, request, Reply(body, 12))  # type: ignore[arg-type]
        finally:
            writer.close()
            await writer.wait_closed()
            await asyncio.to_thread(reader.join, 60)

    asyncio.run(send())
    return bytes(received)
