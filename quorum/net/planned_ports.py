"""Ports picked now for a server that binds them later (a node started from a written config, moto,
a Spark master), chosen where no other socket on the machine is handed a port by the kernel.

A port the kernel gave to a `bind(("127.0.0.1", 0))` a moment ago is free, and it is also in the
kernel's ephemeral range: the next port-0 bind anywhere (another cluster's metrics endpoint, a test
server, an outgoing connection) may be given the same port before the server binds it, and then the
server exits with "address already in use". A node restarted after a kill has the same window for
its whole downtime. So ports are drawn at random below the ephemeral range
(`/proc/sys/net/ipv4/ip_local_port_range`), which the kernel never hands out by itself: only another
planner drawing the same port in the same moment can collide, and each draw is checked free first.
Where the ephemeral range leaves too little room below it, the kernel's port-0 choice is used.
"""

from __future__ import annotations

import random
import socket
from pathlib import Path

LOWEST_PLANNED_PORT = 15000
"""Below this, ports that other software on a developer's machine commonly listens on (8080, 9092...)."""
MIN_PLANNED_PORTS = 2000
"""Fewer ports than this between LOWEST_PLANNED_PORT and the ephemeral range: draw from the kernel."""
DRAWS = 64
"""Random draws tried before falling back to the kernel's choice (each is checked free by a bind)."""

_EPHEMERAL_RANGE = Path("/proc/sys/net/ipv4/ip_local_port_range")
_random = random.SystemRandom()  # never the `random` module's state: tests seed it, workers would agree
_recent: list[int] = []  # what this process handed out lately, not bound by its server yet perhaps


def ephemeral_range() -> tuple[int, int]:
    """The kernel's ephemeral port range (Linux's default where it cannot be read)."""
    try:
        low, high = _EPHEMERAL_RANGE.read_text().split()
        return int(low), int(high)
    except (OSError, ValueError):
        return 32768, 60999


def planned_port(host: str = "127.0.0.1") -> int:
    """A port free on `host` now, outside the kernel's ephemeral range where there is room for it."""
    low, _ = ephemeral_range()
    if low - LOWEST_PLANNED_PORT >= MIN_PLANNED_PORTS:
        for _ in range(DRAWS):
            port = _random.randrange(LOWEST_PLANNED_PORT, low)
            if port not in _recent and _is_free(host, port):
                return _remember(port)
    with socket.socket() as sock:
        sock.bind((host, 0))
        return _remember(sock.getsockname()[1])


def _is_free(host: str, port: int) -> bool:
    with socket.socket() as sock:
        try:
            sock.bind((host, port))
        except OSError:
            return False
    return True


def _remember(port: int) -> int:
    _recent.append(port)
    del _recent[:-256]
    return port
