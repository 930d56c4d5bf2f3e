"""An HTTP proxy on 127.0.0.1 that injects S3 faults between boto3 and an S3 endpoint (moto).

Each request is forwarded unless a fault is due: with probability `rate` (seeded), the next kind
from `kinds` in turn: "500" (InternalError), "slowdown" (503 SlowDown), "throttle" (400
Throttling... as S3 answers 503 too), "reset" (the connection is reset without an answer),
"truncate" (the answer's headers promise the whole body, half is sent, the connection closes),
"slow" (the answer comes `slow_s` late). `injected` counts what was injected, by kind. Only
requests whose method is in `methods` (all by default) and whose path contains `path_filter`
are eligible.
"""

from __future__ import annotations

import http.client
import random
import socket
import struct
import threading
import time
from collections import Counter
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import urlsplit

_ERRORS = {
    "500": (500, "InternalError", "We encountered an internal error. Please try again."),
    "slowdown": (503, "SlowDown", "Please reduce your request rate."),
    "throttle": (503, "Throttling", "Rate exceeded."),
}
_HOP_HEADERS = {"connection", "keep-alive", "transfer-encoding", "proxy-connection"}


class FaultProxy:
    def __init__(self, target_url: str, kinds: tuple[str, ...] = ("500", "slowdown", "reset", "truncate", "slow"),
                 rate: float = 0.0, seed: int = 0, slow_s: float = 0.3, methods: tuple[str, ...] = (),
                 path_filter: str = "") -> None:
        target = urlsplit(target_url)
        self.target = (target.hostname or "127.0.0.1", target.port or 80)
        self.kinds = kinds
        self.rate = rate
        self.slow_s = slow_s
        self.methods = methods
        self.path_filter = path_filter
        self.injected: Counter[str] = Counter()
        self.forwarded = 0
        self._rng = random.Random(seed)
        self._turn = 0
        self._lock = threading.Lock()
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, format: str, *args: object) -> None:  # noqa: A002
                pass

            def _any(self) -> None:
                proxy._handle(self)

            do_GET = do_PUT = do_POST = do_DELETE = do_HEAD = _any  # noqa: N815

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, name="s3-fault-proxy", daemon=True)
        self._thread.start()

    @property
    def endpoint_url(self) -> str:
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    @property
    def total_injected(self) -> int:
        with self._lock:
            return sum(self.injected.values())

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()

    def _fault_for(self, method: str, path: str) -> str | None:
        with self._lock:
            if self.rate <= 0 or (self.methods and method not in self.methods) or self.path_filter not in path:
                return None
            if self._rng.random() >= self.rate:
                return None
            kind = self.kinds[self._turn % len(self.kinds)]
            self._turn += 1
            self.injected[kind] += 1
            return kind

    def _handle(self, handler: BaseHTTPRequestHandler) -> None:
        length = int(handler.headers.get("Content-Length") or 0)
        body = handler.rfile.read(length) if length else b""
        fault = self._fault_for(handler.command, handler.path)
        if fault == "reset":
            handler.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            handler.close_connection = True
            handler.connection.close()
            return
        if fault in _ERRORS:
            status, code, message = _ERRORS[fault]
            payload = (f'<?xml version="1.0" encoding="UTF-8"?><Error><Code>{code}</Code>'
                       f"<Message>{message}</Message></Error>").encode()
            handler.send_response(status)
            handler.send_header("Content-Type", "application/xml")
            handler.send_header("Content-Length", str(len(payload)))
            handler.end_headers()
            handler.wfile.write(payload)
            return
        if fault == "slow":
            time.sleep(self.slow_s)
        upstream = http.client.HTTPConnection(*self.target, timeout=60)
        try:
            headers = {k: v for k, v in handler.headers.items() if k.lower() not in _HOP_HEADERS}
            upstream.request(handler.command, handler.path, body=body, headers=headers)
            answer = upstream.getresponse()
            data = answer.read()
        finally:
            upstream.close()
        with self._lock:
            self.forwarded += 1
            if fault == "truncate" and (handler.command == "HEAD" or len(data) <= 1):
                self.injected["truncate"] -= 1  # nothing to cut short: answered whole, not a fault
                fault = None
        handler.send_response(answer.status)
        for key, value in answer.getheaders():
            if key.lower() not in _HOP_HEADERS and key.lower() != "content-length":
                handler.send_header(key, value)
        handler.send_header("Content-Length", str(len(data)))
        handler.end_headers()
        if fault == "truncate" and handler.command != "HEAD" and len(data) > 1:
            handler.wfile.write(data[: len(data) // 2])
            handler.wfile.flush()
            handler.close_connection = True
            handler.connection.shutdown(socket.SHUT_RDWR)
            return
        if handler.command != "HEAD":
            handler.wfile.write(data)
