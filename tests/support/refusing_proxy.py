"""A TCP proxy on 127.0.0.1 that answers a client's first OffsetFetch requests itself, with a group-level
NOT_COORDINATOR and no partitions (what a broker that just stopped coordinating the group answers),
and passes every other frame through whole in both directions.

The broker under it advertises the proxy (`advertised.listeners`), so a client reaches the group's
coordinator through it too."""

from __future__ import annotations

import asyncio
import struct
import threading
from contextlib import suppress

from quorum.wire.errors import ErrorCode
from quorum.wire.protocol import decode_request, encode_response, peek_api
from tests.support.background_loop import BackgroundServer

OFFSET_FETCH = 9


class OffsetFetchRefusingProxy(BackgroundServer):
    def __init__(self, target_host: str, target_port: int, refusals: int) -> None:
        super().__init__()
        self._target = (target_host, target_port)
        self._lock = threading.Lock()
        self._left = refusals
        self.refused = 0

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

    def _refuses(self) -> bool:
        with self._lock:
            if self._left <= 0:
                return False
            self._left -= 1
            self.refused += 1
            return True

    async def _requests(self, reader: asyncio.StreamReader, server: asyncio.StreamWriter,
                        client: asyncio.StreamWriter) -> None:
        with suppress(asyncio.IncompleteReadError, ConnectionError):
            while True:
                prefix = await reader.readexactly(4)
                payload = await reader.readexactly(struct.unpack(">i", prefix)[0])
                if peek_api(payload)[0] == OFFSET_FETCH and self._refuses():
                    client.write(_not_coordinator(payload))  # whole frames only: see _responses
                    await client.drain()
                    continue
                server.write(prefix + payload)
                await server.drain()

    async def _responses(self, reader: asyncio.StreamReader, client: asyncio.StreamWriter) -> None:
        """The broker's answers, a whole frame per write, so that a refusal never lands inside one."""
        with suppress(asyncio.IncompleteReadError, ConnectionError):
            while True:
                prefix = await reader.readexactly(4)
                client.write(prefix + await reader.readexactly(struct.unpack(">i", prefix)[0]))
                await client.drain()


def _not_coordinator(payload: bytes) -> bytes:
    request = decode_request(payload)
    schema = request.api.response
    if request.version >= 8:
        groups = [schema.OffsetFetchResponseGroup(group_id=g.group_id, topics=[],
                                                  error_code=ErrorCode.NOT_COORDINATOR)
                  for g in request.body.groups]
        return encode_response(request, schema(throttle_time_ms=0, groups=groups))
    return encode_response(request, schema(throttle_time_ms=0, topics=[], error_code=ErrorCode.NOT_COORDINATOR))
