"""Connections to the other voters kept open, so that a failover's messages do not wait for a connect.

A graceful failover is a chain of messages between the voters (EndQuorumEpoch, Vote and its answer,
BeginQuorumEpoch, the first Fetch), and each one to a voter this node had no open connection to waited
for one to be made first: `PeerClient` connects on the first request and drops the connection when a
request fails, and a voter that restarted is reached again only by the next message sent to it, which
in a failover is on the critical path (issue 37: every graceful failover of the benchmark opened a
connection to the member restarted before it; a hop cost 10-17 ms where the others cost 5). Kafka's
NetworkClient keeps its connections until they have been idle for `connections.max.idle.ms`.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Collection

from quorum.net.peer_client import PeerClient

RECONNECT_INTERVAL_S = 0.5
"""How often a peer without an open connection is tried again: a refused connect costs microseconds."""


async def keep_connected(peers: Collection[PeerClient], closing: Callable[[], bool],
                         interval_s: float = RECONNECT_INTERVAL_S) -> None:
    """Until `closing()`, every `interval_s`, connect to each peer that has no open connection."""
    while not closing():
        idle = [peer for peer in peers if not peer.connected]
        if idle:
            await asyncio.gather(*(peer.connect() for peer in idle))
        await asyncio.sleep(interval_s)
