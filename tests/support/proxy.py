"""A TCP proxy on 127.0.0.1 that records every request frame a client sends, byte for byte.

Golden tests put it between a real client and the node, so the bytes they decode are the ones
that client really wrote to a socket, not bytes pasted into the test.
"""

from __future__ import annotations

import asyncio
import struct
import threading
from contextlib import suppress

from tests.support.background_loop import BackgroundServer


class RecordingProxy(BackgroundServer):
    def __init__(self, target_host: str, target_port: int) -> None:
        super().__init__()
        self._target = (target_host, target_port)
        self.frames: list[bytes] = []
        self._lock = threading.Lock()

    def recorded(self) -> list[bytes]:
        with self._lock:
            return list(self.frames)

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
        upstream = asyncio.create_task(self._pump_frames(client_reader, server_writer))
        downstream = asyncio.create_task(self._pump_bytes(server_reader, client_writer))
        await asyncio.wait({upstream, downstream}, return_when=asyncio.FIRST_COMPLETED)
        for task in (upstream, downstream):
            task.cancel()
        for writer in (client_writer, server_writer):
            writer.close()

    async def _pump_frames(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        with suppress(asyncio.IncompleteReadError, ConnectionError):
            while True:
                prefix = await reader.readexactly(4)
                payload = await reader.readexactly(struct.unpack(">i", prefix)[0])
                with self._lock:
                    self.frames.append(payload)
                writer.write(prefix + payload)
                await writer.drain()

    async def _pump_bytes(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        with suppress(ConnectionError):
            while data := await reader.read(65536):
                writer.write(data)
                await writer.drain()
