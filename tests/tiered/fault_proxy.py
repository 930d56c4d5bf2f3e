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

import random
import socket
import struct
import threading
import time
from collections import Counter
from http.server import BaseHTTPRequestHandler

from tests.support.http_forwarder import HttpForwarder

_ERRORS = {
    "500": (500, "InternalError", "We encountered an internal error. Please try again."),
    "slowdown": (503, "SlowDown", "Please reduce your request rate."),
    "throttle": (503, "Throttling", "Rate exceeded."),
}


class FaultProxy(HttpForwarder):
    def __init__(self, target_url: str, kinds: tuple[str, ...] = ("500", "slowdown", "reset", "truncate", "slow"),
                 rate: float = 0.0, seed: int = 0, slow_s: float = 0.3, methods: tuple[str, ...] = (),
                 path_filter: str = "") -> None:
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
        super().__init__(target_url, "s3-fault-proxy")

    @property
    def total_injected(self) -> int:
        with self._lock:
            return sum(self.injected.values())

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

    def handle(self, handler: BaseHTTPRequestHandler, body: bytes) -> None:
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
            self.answer(handler, status, [("Content-Type", "application/xml")], payload)
            return
        if fault == "slow":
            time.sleep(self.slow_s)
        status, headers, data = self.upstream(handler, body)
        with self._lock:
            self.forwarded += 1
            if fault == "truncate" and (handler.command == "HEAD" or len(data) <= 1):
                self.injected["truncate"] -= 1  # nothing to cut short: answered whole, not a fault
                fault = None
        if fault != "truncate":
            self.answer(handler, status, headers, data)
            return
        self.send_head(handler, status, headers, len(data))  # promises the whole body, sends half
        handler.wfile.write(data[: len(data) // 2])
        handler.wfile.flush()
        handler.close_connection = True
        handler.connection.shutdown(socket.SHUT_RDWR)
