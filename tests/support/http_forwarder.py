"""An HTTP server on 127.0.0.1 that forwards every request to one endpoint (S3, here moto) and
answers with what it answered: the base of the tests' fault-injecting S3 proxy and the tiered
benchmark's request-counting one, which differ only in what they do around the forwarding.

A subclass overrides `handle(handler, body)`; `upstream` forwards a request and returns the
answer, `answer` sends one back. Hop-by-hop headers are not passed on, and the body is sent with
its own Content-Length (the upstream's chunked encoding, if any, is undone by reading it whole).
"""

from __future__ import annotations

import http.client
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import urlsplit

HOP_HEADERS = frozenset({"connection", "keep-alive", "transfer-encoding", "proxy-connection"})


class _QuietServer(ThreadingHTTPServer):
    daemon_threads = True

    def handle_error(self, request: object, client_address: object) -> None:
        """A client that closes its connection (boto3 dropping an idle one) is no error to print."""
        if not isinstance(sys.exc_info()[1], ConnectionError):
            super().handle_error(request, client_address)  # type: ignore[arg-type]


class HttpForwarder:
    def __init__(self, target_url: str, name: str, timeout_s: float = 60.0) -> None:
        target = urlsplit(target_url)
        self.target = (target.hostname or "127.0.0.1", target.port or 80)
        self._timeout_s = timeout_s
        forwarder = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, format: str, *args: object) -> None:  # noqa: A002
                pass

            def _any(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                forwarder.handle(self, self.rfile.read(length) if length else b"")

            do_GET = do_PUT = do_POST = do_DELETE = do_HEAD = _any  # noqa: N815

        self._server = _QuietServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self._server.serve_forever, name=name, daemon=True).start()

    @property
    def endpoint_url(self) -> str:
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()

    def handle(self, handler: BaseHTTPRequestHandler, body: bytes) -> None:
        """One request: forwarded as it is."""
        self.answer(handler, *self.upstream(handler, body))

    def upstream(self, handler: BaseHTTPRequestHandler, body: bytes) -> tuple[int, list[tuple[str, str]], bytes]:
        """Forward the request; the upstream's status, headers and whole body."""
        connection = http.client.HTTPConnection(*self.target, timeout=self._timeout_s)
        try:
            headers = {k: v for k, v in handler.headers.items() if k.lower() not in HOP_HEADERS}
            connection.request(handler.command, handler.path, body=body, headers=headers)
            response = connection.getresponse()
            return response.status, response.getheaders(), response.read()
        finally:
            connection.close()

    @classmethod
    def answer(cls, handler: BaseHTTPRequestHandler, status: int, headers: list[tuple[str, str]], data: bytes) -> None:
        """Send an answer with all of `data` (no body for a HEAD)."""
        cls.send_head(handler, status, headers, len(data))
        if handler.command != "HEAD":
            handler.wfile.write(data)

    @staticmethod
    def send_head(handler: BaseHTTPRequestHandler, status: int, headers: list[tuple[str, str]], length: int) -> None:
        """The status line and headers of an answer whose body is `length` bytes."""
        handler.send_response(status)
        for key, value in headers:
            if key.lower() not in HOP_HEADERS and key.lower() != "content-length":
                handler.send_header(key, value)
        handler.send_header("Content-Length", str(length))
        handler.end_headers()
