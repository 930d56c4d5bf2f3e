"""The asyncio network shell: accept connections, read frames, dispatch, write responses in order.

One request at a time per connection, as Kafka processes them (a connection is muted until its
response is sent), so responses always leave in request order. Bad input closes only the
connection it came on, with the reason logged; every other connection keeps being served.
"""

from __future__ import annotations

import asyncio
import logging
from contextlib import suppress

from quorum.net.dispatch import Dispatcher
from quorum.wire.errors import WireError
from quorum.wire.framing import DEFAULT_MAX_FRAME_BYTES, check_frame_size
from quorum.wire.protocol import decode_request, encode_response

log = logging.getLogger(__name__)


class KafkaListener:
    def __init__(self, dispatcher: Dispatcher, host: str = "127.0.0.1", port: int = 0,
                 max_frame_bytes: int = DEFAULT_MAX_FRAME_BYTES) -> None:
        self._dispatcher = dispatcher
        self._host = host
        self._port = port
        self._max_frame_bytes = max_frame_bytes
        self._server: asyncio.Server | None = None
        self._connections: set[asyncio.Task[None]] = set()
        self.closed_for_bad_input = 0

    @property
    def port(self) -> int:
        """The bound port (useful when asked for port 0)."""
        assert self._server is not None, "listener not started"
        return self._server.sockets[0].getsockname()[1]

    async def start(self) -> None:
        self._server = await asyncio.start_server(self._accept, self._host, self._port, reuse_address=True)

    async def close(self) -> None:
        if self._server is not None:
            self._server.close()
        for task in list(self._connections):
            task.cancel()
        for task in list(self._connections):
            with suppress(asyncio.CancelledError, Exception):
                await task
        if self._server is not None:
            await self._server.wait_closed()

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._connections.add(task)
        peer = writer.get_extra_info("peername")
        try:
            await self._serve(reader, writer)
        except WireError as exc:
            self.closed_for_bad_input += 1
            log.warning("closing connection from %s: %s", peer, exc)
        except (asyncio.IncompleteReadError, ConnectionError):
            pass  # the peer went away between or inside frames: nothing to answer
        except asyncio.CancelledError:
            pass  # the listener is closing: end this connection quietly (asyncio logs a cancelled handler)
        except Exception:
            log.exception("closing connection from %s after an unexpected error", peer)
        finally:
            self._connections.discard(task)
            writer.close()
            with suppress(Exception):
                await writer.wait_closed()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        while True:
            size = check_frame_size(await reader.readexactly(4), self._max_frame_bytes)
            payload = await reader.readexactly(size)
            request = decode_request(payload, self._dispatcher.served)
            reply = await self._dispatcher.dispatch(request)
            if reply is not None:
                writer.write(encode_response(request, reply.body, reply.version))
                await writer.drain()
