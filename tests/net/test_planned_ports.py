"""A port planned for a node that binds it later is one no other socket's port-0 bind can be handed
meanwhile: the cause of nodes exiting "address already in use" in hand-started test clusters."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest

from quorum.launcher import free_port
from quorum.net import planned_ports
from quorum.net.planned_ports import ephemeral_range, planned_port


def test_planned_ports_are_outside_the_kernels_ephemeral_range() -> None:
    low, high = ephemeral_range()
    if low - planned_ports.LOWEST_PLANNED_PORT < planned_ports.MIN_PLANNED_PORTS:
        pytest.skip(f"this kernel's ephemeral range {low}-{high} leaves no room below it")
    ports = [free_port() for _ in range(50)] + [planned_port() for _ in range(50)]
    assert all(planned_ports.LOWEST_PLANNED_PORT <= p < low for p in ports), ports
    assert len(set(ports)) == len(ports), "a port handed out twice in a row by one process"


def test_a_port_some_socket_holds_is_never_planned(monkeypatch: pytest.MonkeyPatch) -> None:
    holder = socket.socket()
    holder.bind(("127.0.0.1", 0))
    held = holder.getsockname()[1]
    try:
        low = held + planned_ports.MIN_PLANNED_PORTS * 2
        drawn: list[int] = []
        real_randrange = planned_ports._random.randrange

        def draw(lo: int, hi: int) -> int:  # the held port first, then what the real draw gives
            drawn.append(held if not drawn else real_randrange(lo, hi))
            return drawn[-1]

        monkeypatch.setattr(planned_ports, "ephemeral_range", lambda: (low, 60999))
        monkeypatch.setattr(planned_ports, "LOWEST_PLANNED_PORT", held)
        monkeypatch.setattr(planned_ports._random, "randrange", draw)
        port = planned_port()
        assert port != held and held <= port < low
        assert drawn[0] == held and len(drawn) >= 2
    finally:
        holder.close()


def test_without_room_below_the_ephemeral_range_the_kernel_picks(monkeypatch: pytest.MonkeyPatch,
                                                                 tmp_path: Path) -> None:
    narrow = tmp_path / "ip_local_port_range"
    narrow.write_text("16000\t60999\n")
    monkeypatch.setattr(planned_ports, "_EPHEMERAL_RANGE", narrow)
    assert ephemeral_range() == (16000, 60999)
    assert planned_port() >= 16000
