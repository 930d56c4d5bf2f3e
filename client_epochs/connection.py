"""One blocking connection to one broker: send a request through quorum.wire, read its response.

Blocking sockets, because the SDK's callers (consumer wrappers, a replicator loop, a Spark
source) are synchronous and must not need an event loop of their own. Every wait is bounded by a
deadline, and every failure is a BrokerError naming the broker, so a caller rotating over brokers
can say which one failed and why.

A secured cluster (issue 18): `security` (`quorum.wire.sasl_client.ClientSecurity`, made from the
user's own client settings) wraps each new connection in TLS and logs in with SASL before the first
request, so the SDK's connections are secured exactly as the user's consumer is. When the broker
gives the session a lifetime (KIP-368: connections.max.reauth.ms, or an OAUTHBEARER token's expiry),
the connection re-authenticates on the same socket before its next request once 85 to 95% of that
lifetime has passed (a random point, as Kafka's clients choose it), with a fresh token if the old one
is near its end; a broker closes a connection that sends a request past its session instead.
"""

from __future__ import annotations

import itertools
import random
import socket
import time
from typing import Any

from quorum.wire.errors import WireError
from quorum.wire.framing import DEFAULT_MAX_FRAME_BYTES, RequestHeader, check_frame_size
from quorum.wire.protocol import Api, decode_response, encode_request
from quorum.wire.sasl_client import ClientSecurity, SaslLoginError, sasl_steps


class BrokerError(ConnectionError):
    """A broker could not be reached, did not answer in time, or answered something unreadable."""

    def __init__(self, address: str, reason: str) -> None:
        super().__init__(f"broker {address}: {reason}")
        self.address = address
        self.reason = reason


class BrokerProtocolError(BrokerError):
    """The broker answered, but not with a frame this client can read (wrong version, corrupt frame)."""


class BrokerAuthenticationError(BrokerError):
    """The broker refused this client's SASL login (wrong password, unknown user, mechanism not enabled).
    Not retriable, as in Kafka's clients (AuthenticationException): asking again cannot succeed."""


def parse_bootstrap(bootstrap: str) -> list[tuple[str, int]]:
    """"host:port,host:port" (IPv6 as "[::1]:9092") as (host, port) pairs; ValueError says which entry is bad."""
    addresses = []
    for entry in (part.strip() for part in bootstrap.split(",")):
        if not entry:
            continue
        host, sep, port = entry.rpartition(":")
        if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
            raise ValueError(f"bootstrap entry {entry!r} is not host:port")
        addresses.append((host.removeprefix("[").removesuffix("]"), int(port)))
    if not addresses:
        raise ValueError(f"bootstrap list {bootstrap!r} names no broker")
    return addresses


class BrokerConnection:
    """A connection opened lazily and closed on the first error, so a broken stream is never reused."""

    def __init__(self, host: str, port: int, client_id: str,
                 max_frame_bytes: int = DEFAULT_MAX_FRAME_BYTES, security: ClientSecurity | None = None) -> None:
        self.host = host
        self._security = security or ClientSecurity()
        self.port = port
        self._client_id = client_id
        self._max_frame_bytes = max_frame_bytes
        self._correlation = itertools.count(1)
        self._sock: socket.socket | None = None
        self._reauthenticate_at: float | None = None
        """time.monotonic() after which the next request first re-authenticates (KIP-368), if ever."""
        self.reauthentications = 0
        self.state: dict[str, Any] = {}
        """What the caller learned on this connection (the negotiated versions); cleared when it closes."""

    @property
    def address(self) -> str:
        return f"{self.host}:{self.port}"

    @property
    def is_open(self) -> bool:
        return self._sock is not None

    def request(self, api: Api, version: int, body: Any, deadline: float) -> Any:
        """Send `body` as `api` at `version` and return the decoded response body.

        `deadline` is a time.monotonic() value; BrokerError on any failure, after closing the connection.
        """
        try:
            sock = self._connect(deadline)
            if self._reauthenticate_at is not None and time.monotonic() >= self._reauthenticate_at:
                self._login(sock, deadline)
                self.reauthentications += 1
            return self._round_trip(sock, api, version, body, deadline)
        except SaslLoginError as exc:
            self.close()
            raise BrokerAuthenticationError(self.address, f"SASL login refused: {exc}") from None
        except TimeoutError:
            self.close()
            raise BrokerError(self.address, f"{api.name} v{version} got no answer in time") from None
        except WireError as exc:
            self.close()
            raise BrokerProtocolError(self.address, f"{api.name} v{version} answer unreadable: {exc}") from None
        except OSError as exc:
            self.close()
            raise BrokerError(self.address, f"{api.name} v{version} failed: {exc!r}") from None

    def _round_trip(self, sock: socket.socket, api: Api, version: int, body: Any, deadline: float) -> Any:
        correlation_id = next(self._correlation)
        header = RequestHeader(api.key, version, correlation_id, self._client_id)
        self._settimeout(sock, deadline)
        sock.sendall(encode_request(api, header, body))
        size = check_frame_size(self._read(sock, 4, deadline), self._max_frame_bytes)
        got, response = decode_response(api, version, self._read(sock, size, deadline))
        if got != correlation_id:
            raise WireError(f"{api.name} answered with correlation id {got}, not {correlation_id}")
        return response

    def close(self) -> None:
        if self._sock is not None:
            try:
                self._sock.close()
            finally:
                self._sock = None
                self._reauthenticate_at = None
                self.state.clear()

    def _connect(self, deadline: float) -> socket.socket:
        if self._sock is None:
            sock = socket.create_connection((self.host, self.port), timeout=self._remaining(deadline))
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            self._sock = sock
            if self._security.ssl_context is not None:
                sock.settimeout(self._remaining(deadline))
                self._sock = sock = self._security.ssl_context.wrap_socket(sock, server_hostname=self.host)
            if self._security.sasl is not None:
                self._login(sock, deadline)
        return self._sock

    def _login(self, sock: socket.socket, deadline: float) -> None:
        """The SASL login (or a KIP-368 re-authentication: the same exchange on an authenticated socket)."""
        assert self._security.sasl is not None
        steps = sasl_steps(self._security.sasl)
        answer = None
        started = time.monotonic()
        try:
            while True:
                answer = self._round_trip(sock, *steps.send(answer), deadline)
        except StopIteration as done:
            lifetime_ms = int(done.value or 0)
        self._reauthenticate_at = (started + lifetime_ms / 1000 * random.uniform(0.85, 0.95)  # noqa: S311
                                   if lifetime_ms > 0 else None)

    def _read(self, sock: socket.socket, size: int, deadline: float) -> bytes:
        chunks, got = [], 0
        while got < size:
            self._settimeout(sock, deadline)
            chunk = sock.recv(min(size - got, 1 << 20))
            if not chunk:
                raise ConnectionError(f"connection closed after {got} of {size} bytes")
            chunks.append(chunk)
            got += len(chunk)
        return b"".join(chunks)

    def _settimeout(self, sock: socket.socket, deadline: float) -> None:
        sock.settimeout(self._remaining(deadline))

    @staticmethod
    def _remaining(deadline: float) -> float:
        left = deadline - time.monotonic()
        if left <= 0:
            raise TimeoutError
        return left


class ConnectionPool:
    """One BrokerConnection per broker address, opened on first use and kept until `close()`: the
    metadata client, the offset fetcher and the log-bounds client each ask the same brokers again."""

    def __init__(self, client_id: str = "client-epochs", security: ClientSecurity | None = None) -> None:
        self.client_id = client_id
        self.security = security
        self._connections: dict[tuple[str, int], BrokerConnection] = {}

    def get(self, address: tuple[str, int]) -> BrokerConnection:
        connection = self._connections.get(address)
        if connection is None:
            connection = self._connections[address] = BrokerConnection(*address, client_id=self.client_id,
                                                                       security=self.security)
        return connection

    def close(self) -> None:
        for connection in self._connections.values():
            connection.close()
        self._connections.clear()
