"""Outbound Kafka RPCs to one peer: one connection, requests pipelined, responses matched in order.

Kafka brokers answer the requests of one connection in order, so a FIFO of pending futures is
enough to pair responses with requests; the correlation id is still checked, and a mismatch is
treated as a broken connection rather than trusted.

Responses are read by `ResponseFrames`, the listener's `FrameReader` (an asyncio BufferedProtocol):
the kernel writes a large response's bytes with `recv_into` straight into a bytearray of the
response's size, so a follower's 10 MiB Fetch answer is not copied three times on its way in as a
StreamReader copies it (a `recv` bytes object, `feed_data` into the reader's buffer, `readexactly`
out of it): that was a third of a catching-up follower's CPU (issue 20). Small responses come many
per `recv_into` through a staging buffer. The protocol is also a StreamReaderProtocol, so the
connection keeps an `asyncio.StreamWriter` for requests, TLS included.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
from collections import deque
from typing import Any

from quorum.net.client_security import ClientSecurity, sasl_login
from quorum.net.frame_reader import FrameReader
from quorum.wire.errors import WireError
from quorum.wire.framing import DEFAULT_MAX_FRAME_BYTES, RequestHeader
from quorum.wire.protocol import Api, decode_response, encode_request

log = logging.getLogger(__name__)

RESPONSE_STAGING_BYTES = 16 * 1024
"""Answers smaller than this are read through a connection's staging buffer (a 500-writer client
holds one per connection); larger ones into their own."""


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


class ResponseFrames(FrameReader):
    """One connection's answers as whole payloads (without the size prefix), in arrival order.

    Read as the listener reads requests (`FrameReader`): small answers, many per `recv_into`,
    through a staging buffer; a large one (a follower's Fetch answer) straight into a bytearray of
    the size its prefix declares, refused (FrameTooLargeError) past `max_frame_bytes` before anything
    is allocated. Unlike a request, an answer's size is what this client asked for, so its buffer is
    made whole at once rather than grown as the bytes come. Reading a 4-byte prefix, then the payload,
    cost two passes of the event loop per answer."""

    def __init__(self, max_frame_bytes: int) -> None:
        super().__init__(max_frame_bytes, self._connected, staging_bytes=RESPONSE_STAGING_BYTES,
                         first_frame_bytes=max_frame_bytes)
        self.writer: asyncio.StreamWriter | None = None

    def _connected(self, _reader: object, writer: asyncio.StreamWriter) -> None:
        self.writer = writer


async def open_frames(host: str, port: int, max_frame_bytes: int,
                      security: ClientSecurity) -> tuple[ResponseFrames, asyncio.StreamWriter]:
    """A connection whose answers `ResponseFrames` reads (TLS when `security` has a context)."""
    tls = security.ssl_context
    _, frames = await asyncio.get_running_loop().create_connection(
        lambda: ResponseFrames(max_frame_bytes), host, port, ssl=tls, server_hostname=host if tls else None)
    assert frames.writer is not None  # made in connection_made
    return frames, frames.writer


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
            async with asyncio.timeout(self._timeout):  # no Task per request, as wait_for makes in 3.11
                return await self._request(api, version, body, client_id)
        except (TimeoutError, OSError, WireError, asyncio.IncompleteReadError) as exc:
            self._reset(f"{api.name} failed: {exc!r}")
            raise PeerUnavailable(f"{self.host}:{self.port}: {api.name} v{version}: {exc!r}",
                                  peer_gone(exc)) from None

    @property
    def connected(self) -> bool:
        """Whether a connection is open (a request now goes out without connecting first)."""
        return self._writer is not None and not self._writer.is_closing()

    async def connect(self) -> bool:
        """Open the connection if none is open, within the request timeout; False when the peer cannot be
        reached (nothing raised: the next request tries again and reports). A failure here resets nothing:
        a connection a request opened meanwhile, and its requests in flight, are left alone."""
        try:
            await asyncio.wait_for(self._connection(), self._timeout)
            return True
        except (TimeoutError, OSError, WireError, asyncio.IncompleteReadError) as exc:
            log.debug("connecting to %s:%s failed: %r", self.host, self.port, exc)
            return False

    async def _request(self, api: Api, version: int, body: Any, client_id: str | None = None) -> Any:
        writer = self._writer
        if writer is None or writer.is_closing():  # the lock only to connect: it serializes the connecting
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
                reader, writer = await open_frames(self.host, self.port, self._max_frame_bytes, self._security)
                if self._security.sasl is not None:
                    try:
                        await sasl_login(self._exchanger(reader, writer), self._security.sasl)
                    except BaseException:
                        writer.close()
                        raise
                self._writer = writer
                self._reader_task = asyncio.create_task(self._read_responses(reader))
            return self._writer

    def _exchanger(self, reader: ResponseFrames, writer: asyncio.StreamWriter):  # noqa: ANN202
        """One request and its answer at a time on a connection not yet handed to `_read_responses`
        (the SASL login before any other request)."""

        async def exchange(api: Api, version: int, body: Any) -> Any:
            correlation_id = next(self._correlation)
            writer.write(encode_request(api, RequestHeader(api.key, version, correlation_id, self._client_id), body))
            await writer.drain()
            answered, answer = decode_response(api, version, await reader.next_frame())
            if answered != correlation_id:
                raise WireError(f"correlation id {answered} where {correlation_id} was expected")
            return answer

        return exchange

    async def _read_responses(self, reader: ResponseFrames) -> None:
        try:
            while True:
                payload = await reader.next_frame()
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
