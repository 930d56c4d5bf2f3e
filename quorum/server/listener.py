"""The asyncio network shell: accept connections, read frames, dispatch, write responses in order.

One request at a time per connection, as Kafka processes them (a connection is muted until its
response is sent), so responses always leave in request order. The exception is an API whose
handler was registered `pipelined` (the controller's requests, the broker's forwarded admin
requests, Produce): up to MAX_PIPELINED of those, or the depth the API was registered with, are
read and started while earlier ones wait, and their answers are still written in request order;
any other request waits until every earlier one is answered, so it is processed alone as before.
A handler starts when the one before it has run up to its first wait, so work done before that
(a Produce's append) happens in request order; it learns which earlier requests of its API are
still unanswered from its `quorum.net.pipeline_place`, to decide after them what Kafka would
decide only then. Bad input closes only the
connection it came on, with the reason logged; every other connection keeps being served.

Frames are read by `quorum.net.frame_reader.FrameReader`: each large one lands in a buffer of its own
with `recv_into`, which the handler gets and may patch in place (Produce does).

Security (`quorum.net.secure_connection`): each accepted connection goes through the listener's
TLS handshake and gets its request context; each request is screened for SASL before dispatch.

Each dispatched request's moments (frame read, handler start and end, answer written) are stamped in a
`quorum.net.request_times.RequestTimes`, the handler's context, and recorded as Kafka's request metrics
(`quorum.server.request_metrics`) when the node serves metrics.
"""

from __future__ import annotations

import asyncio
import logging
import time
from contextlib import suppress
from typing import Any

from quorum.net.dispatch import Dispatcher, Reply
from quorum.net.frame_reader import FrameReader
from quorum.net.pipeline_place import PipelinePlace, set_pipeline_place
from quorum.net.request_times import RequestTimes, handling
from quorum.net.secure_connection import ConnectionSecurity, ListenerSecurity
from quorum.server.reply_writer import write_reply
from quorum.server.request_metrics import RequestMetrics
from quorum.wire.errors import WireError
from quorum.wire.framing import DEFAULT_MAX_FRAME_BYTES
from quorum.wire.protocol import Request, decode_request

log = logging.getLogger(__name__)

MAX_PIPELINED = 1000
"""Requests of one connection started and not yet answered, at most (the reading pauses there)."""
CANCEL_AGAIN_S = 0.5
"""How long `close` gives a cancelled connection to end before cancelling it again."""

_Started = tuple[Request, "asyncio.Future[Reply | None]", RequestTimes]
"""A pipelined request started, its handler, and its moments: what `_answer_in_order` writes next."""


class KafkaListener:
    def __init__(self, dispatcher: Dispatcher, host: str = "127.0.0.1", port: int = 0,
                 max_frame_bytes: int = DEFAULT_MAX_FRAME_BYTES, security: ListenerSecurity | None = None,
                 metrics: RequestMetrics | None = None) -> None:
        self._dispatcher = dispatcher
        self._metrics = metrics
        self.security = security if security is not None else ListenerSecurity.plaintext()
        self._host = host
        self._port = port
        self._max_frame_bytes = max_frame_bytes
        self._server: asyncio.Server | None = None
        self._connections: set[asyncio.Task[None]] = set()
        self._closing = False
        self.closed_for_bad_input = 0

    @property
    def open_connections(self) -> int:
        """Connections being served now (accepted, not yet ended)."""
        return len(self._connections)

    @property
    def port(self) -> int:
        """The bound port (useful when asked for port 0)."""
        assert self._server is not None, "listener not started"
        return self._server.sockets[0].getsockname()[1]

    async def start(self) -> None:
        self._server = await asyncio.get_running_loop().create_server(
            lambda: FrameReader(self._max_frame_bytes, self._accept), self._host, self._port, reuse_address=True)

    async def close(self) -> None:
        """Stop accepting, and end every connection (a request being handled is cancelled).

        A cancellation can be lost: Python 3.11's `asyncio.wait_for` returns the inner result when
        that completes as the cancellation arrives (a follower's long-polling Fetch whose data came
        just then), and the handler answers as if nothing happened. Its connection then went on
        serving the next request for ever, and the stopping node waited for it for ever. So no
        connection reads another request once the listener is closing, and each is cancelled
        again until it has ended."""
        self._closing = True
        if self._server is not None:
            self._server.close()
        while self._connections:
            for task in list(self._connections):
                task.cancel()
            await asyncio.wait(list(self._connections), timeout=CANCEL_AGAIN_S)
        if self._server is not None:
            await self._server.wait_closed()

    async def _accept(self, reader: FrameReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._connections.add(task)
        peer = writer.get_extra_info("peername")
        try:
            await self._serve(reader, writer, await self.security.accept(writer))
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

    async def _serve(self, reader: FrameReader, writer: asyncio.StreamWriter,
                     connection: ConnectionSecurity) -> None:
        started: asyncio.Queue[_Started] = asyncio.Queue(MAX_PIPELINED)
        answering: asyncio.Task[None] | None = None  # made at the connection's first pipelined request
        unanswered: dict[int, list[asyncio.Future[Reply | None]]] = {}  # per pipelined API
        turns: dict[int, asyncio.Lock] = {}  # per pipelined API: see quorum.net.pipeline_place
        closed = asyncio.Event()
        try:
            while not self._closing:
                frame = await reader.next_frame()
                times = RequestTimes(time.perf_counter())
                request = decode_request(frame, self._dispatcher.served)
                screened = connection.screen(request)
                if screened is not None:  # SASL, answered by the connection's security
                    if answering is not None:
                        await self._drained(started, answering)
                    await write_reply(writer, request, screened.reply)
                    if screened.close is not None:
                        return
                    continue
                if not self._dispatcher.pipelined(request.api.key):
                    if answering is not None:
                        await self._drained(started, answering)  # alone, as Kafka processes a connection's requests
                    reply = await self._timed_dispatch(request, times)
                    if reply is not None:
                        await self._write(writer, request, reply, times)
                    continue
                if answering is None:
                    answering = asyncio.create_task(self._answer_in_order(started, writer))
                depth = self._dispatcher.pipeline_depth(request.api.key)
                running = unanswered.setdefault(request.api.key, [])
                if depth is not None:
                    await self._room(running, depth, answering)
                running[:] = [earlier for earlier in running if not earlier.done()]
                turn = turns.get(request.api.key)
                if turn is None:
                    turn = turns[request.api.key] = asyncio.Lock()
                set_pipeline_place(PipelinePlace(tuple(running), turn, closed))  # the handler's task keeps a copy
                handled = asyncio.ensure_future(self._timed_dispatch(request, times))
                running.append(handled)
                await started.put((request, handled, times))
                if answering.done():
                    answering.result()  # a handler failed: raise its error here, which closes the connection
        finally:
            closed.set()
            if answering is not None:
                answering.cancel()
                with suppress(asyncio.CancelledError):
                    await answering

    async def _timed_dispatch(self, request: Request, times: RequestTimes) -> Reply | None:
        """The handler's answer, with when it began and ended noted in `times`, which is the
        handler's context (its `mark_local_complete` lands there)."""
        handling(times)
        times.started = time.perf_counter()
        reply = await self._dispatcher.dispatch(request)
        times.answered = time.perf_counter()
        return reply

    async def _write(self, writer: asyncio.StreamWriter, request: Request, reply: Reply, times: RequestTimes) -> None:
        times.send_started = time.perf_counter()
        await write_reply(writer, request, reply)
        times.sent = time.perf_counter()
        if self._metrics is not None:
            self._metrics.record(request, times)

    @staticmethod
    async def _room(running: list[asyncio.Future[Reply | None]], depth: int, answering: asyncio.Task[None]) -> None:
        """Until fewer than `depth` of `running` (one API's requests on this connection) are
        unanswered: a client's pipeline holds at most that many, the rest waits in its socket."""
        while True:
            running[:] = [handled for handled in running if not handled.done()]
            if len(running) < depth:
                return
            await asyncio.wait((running[0], answering), return_when=asyncio.FIRST_COMPLETED)
            if answering.done():
                answering.result()  # a handler failed: raise its error here, which closes the connection

    @staticmethod
    async def _drained(started: asyncio.Queue[Any], answering: asyncio.Task[None]) -> None:
        """Until every pipelined request started so far is answered (or answering failed: raise)."""
        joined = asyncio.ensure_future(started.join())
        try:
            await asyncio.wait((joined, answering), return_when=asyncio.FIRST_COMPLETED)
        finally:
            joined.cancel()
        if answering.done():
            answering.result()

    async def _answer_in_order(self, started: asyncio.Queue[_Started], writer: asyncio.StreamWriter) -> None:
        """Write the pipelined requests' answers in request order as each is ready."""
        while True:
            request, handled, times = await started.get()
            try:
                reply = await handled
                if reply is not None:
                    await self._write(writer, request, reply, times)
            except BaseException:
                writer.close()  # the reading loop ends too, and `_serve` raises this
                raise
            finally:
                started.task_done()
