"""Connections to the other voters kept open (`quorum.server.warm_peers`): a voter that starts later, or
restarts, is connected to without waiting for a message to it, as a failover's messages would otherwise."""

from __future__ import annotations

import asyncio
import socket

from quorum.net.peer_client import PeerClient
from quorum.server.warm_peers import keep_connected
from tests.support.async_waits import until


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def test_a_voter_that_comes_up_or_comes_back_is_connected_to_without_a_message() -> None:
    async def scenario() -> None:
        port = free_port()
        accepted: list[asyncio.StreamWriter] = []

        async def accept(_reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            accepted.append(writer)

        peer = PeerClient("127.0.0.1", port, "warm-test", request_timeout_ms=2000)
        closing = False
        keeper = asyncio.create_task(keep_connected([peer], lambda: closing, interval_s=0.05))
        await asyncio.sleep(0.2)
        assert not peer.connected, "nothing listens yet: refused, and nothing raised"
        server = await asyncio.start_server(accept, "127.0.0.1", port)
        await until(lambda: peer.connected and len(accepted) == 1, "a connection once the voter listens",
                    timeout_s=10.0)
        server.close()
        accepted[0].close()  # the voter restarts: its end of the connection goes
        await server.wait_closed()
        await until(lambda: not peer.connected, "the connection dropped", timeout_s=10.0)
        server = await asyncio.start_server(accept, "127.0.0.1", port)
        await until(lambda: peer.connected and len(accepted) == 2, "a connection to the voter's next incarnation",
                    timeout_s=10.0)
        closing = True
        await asyncio.wait_for(keeper, 5)
        await peer.close()
        server.close()
        await server.wait_closed()

    asyncio.run(scenario())
