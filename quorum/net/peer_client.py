"""Outbound Kafka RPCs to one peer: one connection, requests pipelined, responses matched in order.

Kafka brokers answer the requests of one connection in order, so a FIFO of pending futures is
enough to pair responses with requests; the correlation id is still checked, and a mismatch is
treated as a broken connection rather than trusted.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
from collections import deque
from typing import Any

from quorum.net.client_security import ClientSecurity, sasl_login
from quorum.wire.errors import WireError
from quorum.wire.framing import DEFAULT_MAX_FRAME_BYTES, RequestHeader, check_frame_size
from quorum.wire.protocol import Api, decode_response, encode_request

log = logging.getLogger(__name__)


class PeerUnavailable(ConnectionError):
    """The peer could not be reached or did not answer within the request timeout.

    `gone` says the kernel told us the peer is not there: the connection was refused, reset or
    closed by the other end (what a `kill -9` of its process looks like at once), as opposed to
    a timeout, which may be a slow peer. Raft followers act on it at once (issue 17).
    """

    def __init__(self, message: str, gone: bool = False) -> None:
        super().__init__(message)
        self.gone = gone


def peer_gone(exc: BaseException) -> bool:
    """Whether a failure means the peer's end is gone (refused, reset, closed), not just slow."""
    if isinstance(exc, PeerUnavailable):
        return exc.gone
    return isinstance(exc, (ConnectionRefusedError, ConnectionResetError, BrokenPipeError,
                            asyncio.IncompleteReadError))


class PeerClient:
    def __init__(self, host: str, port: int, client_id: str, request_timeout_ms: int,
                 max_frame_bytes: int = DEFAULT_MAX_FRAME_BYTES, security: ClientSecurity | None = None) -> None:
        """`security`: TLS and a SASL login for a secured listener (`quorum.net.client_security`)."""
        self.host = host
        self._security = security or ClientSecurity()
        self.port = port
        self._client_id = client_id
        self._timeout = request_timeout_ms / 1000
        self._max_frame_bytes = max_frame_bytes
        self._correlation = itertools.count(1)
        self._writer: asyncio.StreamWriter | None = None
        self._reader_task: asyncio.Task[None] | None = None
        self._pending: deque[tuple[int, Api, int, asyncio.Future[Any]]] = deque()
        self._connecting: asyncio.Lock = asyncio.Lock()

    async def request(self, api: Api, version: int, body: Any, client_id: str | None = None) -> Any:
        """Send one request and wait for its response body; PeerUnavailable on any failure or timeout.
        `client_id` replaces this client's own in the header (a broker forwards a client's request under the
        client's id, which the controller's mutation quota counts by, as Kafka's forwarding envelope does)."""
        try:
            return await asyncio.wait_for(self._request(api, version, body, client_id), self._timeout)
        except (TimeoutError, OSError, WireError, asyncio.IncompleteReadError) as exc:
            self._reset(f"{api.name} failed: {exc!r}")
            raise PeerUnavailable(f"{self.host}:{self.port}: {api.name} v{version}: {exc!r}",
                                  peer_gone(exc)) from None

    async def _request(self, api: Api, version: int, body: Any, client_id: str | None = None) -> Any:
        writer = await self._connection()
        correlation_id = next(self._correlation)
        future: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self._pending.append((correlation_id, api, version, future))
        header = RequestHeader(api.key, version, correlation_id, self._client_id if client_id is None else client_id)
        writer.write(encode_request(api, header, body))
        await writer.drain()
        return await future

    async def _connection(self) -> asyncio.StreamWriter:
        async with self._connecting:
            if self._writer is None or self._writer.is_closing():
                tls = self._security.ssl_context
                reader, writer = await asyncio.open_connection(self.host, self.port, ssl=tls,
                                                               server_hostname=self.host if tls else None)
                if self._security.sasl is not None:
                    try:
                        await sasl_login(self._exchanger(reader, writer), self._security.sasl)
                    except BaseException:
                        writer.close()
                        raise
                self._writer = writer
                self._reader_task = asyncio.create_task(self._read_responses(reader))
            return self._writer

    def _exchanger(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter):  # noqa: ANN202
        """One request and its answer at a time on a connection not yet handed to `_read_responses`
        (the SASL login before any other request)."""

        async def exchange(api: Api, version: int, body: Any) -> Any:
            correlation_id = next(self._correlation)
            writer.write(encode_request(api, RequestHeader(api.key, version, correlation_id, self._client_id), body))
            await writer.drain()
            size = check_frame_size(await reader.readexactly(4), self._max_frame_bytes)
            answered, answer = decode_response(api, version, await reader.readexactly(size))
            if answered != correlation_id:
                raise WireError(f"correlation id {answered} where {correlation_id} was expected")
            return answer

        return exchange

    async def _read_responses(self, reader: asyncio.StreamReader) -> None:
        try:
            while True:
                size = check_frame_size(await reader.readexactly(4), self._max_frame_bytes)
                payload = await reader.readexactly(size)
                if not self._pending:
                    raise WireError("response with no request outstanding")
                expected, api, version, future = self._pending.popleft()
                correlation_id, body = decode_response(api, version, payload)
                if correlation_id != expected:
                    raise WireError(f"correlation id {correlation_id} where {expected} was expected")
                if not future.done():
                    future.set_result(body)
        except (asyncio.IncompleteReadError, OSError, WireError) as exc:
            self._fail_pending(exc)
        finally:
            self._close_writer()

    def _fail_pending(self, exc: BaseException) -> None:
        while self._pending:
            _, api, _, future = self._pending.popleft()
            if not future.done():
                future.set_exception(PeerUnavailable(f"{self.host}:{self.port}: {api.name}: {exc!r}", peer_gone(exc)))

    def _close_writer(self) -> None:
        if self._writer is not None:
            self._writer.close()
            self._writer = None

    def _reset(self, reason: str) -> None:
        log.debug("resetting connection to %s:%s: %s", self.host, self.port, reason)
        self._fail_pending(ConnectionError(reason))
        self._close_writer()
        if self._reader_task is not None:
            self._reader_task.cancel()
            self._reader_task = None

    async def close(self) -> None:
        self._reset("closing")
