"""TCP proxies on 127.0.0.1 between a real client and a node, passing Kafka frames whole both ways.

`RecordingProxy` records every request frame a client sends, byte for byte: golden tests decode the
bytes that client really wrote to a socket, not bytes pasted into the test. Subclasses of
`FrameProxy` may answer a request themselves instead of passing it on (tests/support/refusing_proxy.py).
"""

from __future__ import annotations

import asyncio
import struct
import threading
from contextlib import suppress

from tests.support.background_loop import BackgroundServer


class FrameProxy(BackgroundServer):
    """Passes each request frame to the node unless `_answer` gives the client an answer for it; the
    node's answers go back a whole frame per write, so that an answer of the proxy never lands inside one."""

    def __init__(self, target_host: str, target_port: int) -> None:
        super().__init__()
        self._target = (target_host, target_port)

    def _answer(self, payload: bytes) -> bytes | None:
        """The framed answer to the request `payload` (without its size prefix), or None to pass it on."""
        return None

    def _delay_s(self, payload: bytes) -> float:
        """Seconds to hold the request `payload` before passing it on (a slow broker); 0 by default."""
        return 0.0

    async def _serve(self) -> None:
        server = await asyncio.start_server(self._handle, "127.0.0.1", 0)
        self._started(server.sockets[0].getsockname()[1])
        await self._stop.wait()
        server.close()

    async def _handle(self, client_reader: asyncio.StreamReader, client_writer: asyncio.StreamWriter) -> None:
        try:
            server_reader, server_writer = await asyncio.open_connection(*self._target)
        except OSError:
            client_writer.close()
            return
        upstream = asyncio.create_task(self._requests(client_reader, server_writer, client_writer))
        downstream = asyncio.create_task(self._responses(server_reader, client_writer))
        await asyncio.wait({upstream, downstream}, return_when=asyncio.FIRST_COMPLETED)
        for task in (upstream, downstream):
            task.cancel()
        for writer in (client_writer, server_writer):
            writer.close()

    async def _requests(self, reader: asyncio.StreamReader, server: asyncio.StreamWriter,
                        client: asyncio.StreamWriter) -> None:
        with suppress(asyncio.IncompleteReadError, ConnectionError):
            while True:
                prefix = await reader.readexactly(4)
                payload = await reader.readexactly(struct.unpack(">i", prefix)[0])
                answer = self._answer(payload)
                if answer is None and (delay := self._delay_s(payload)) > 0:
                    await asyncio.sleep(delay)
                writer = server if answer is None else client
                writer.write(prefix + payload if answer is None else answer)
                await writer.drain()

    async def _responses(self, reader: asyncio.StreamReader, client: asyncio.StreamWriter) -> None:
        with suppress(asyncio.IncompleteReadError, ConnectionError):
            while True:
                prefix = await reader.readexactly(4)
                client.write(prefix + await reader.readexactly(struct.unpack(">i", prefix)[0]))
                await client.drain()


class RecordingProxy(FrameProxy):
    def __init__(self, target_host: str, target_port: int) -> None:
        super().__init__(target_host, target_port)
        self.frames: list[bytes] = []
        self._lock = threading.Lock()

    def recorded(self) -> list[bytes]:
        with self._lock:
            return list(self.frames)

    def _answer(self, payload: bytes) -> None:
        with self._lock:
            self.frames.append(payload)
        return None
