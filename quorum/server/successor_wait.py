"""How long a controller that resigned on SIGTERM stays up: until the quorum has a new leader.

Kafka's graceful shutdown of a KRaft leader (KafkaRaftClient.shutdown, 5 s in
KafkaRaftClientDriver) resigns with EndQuorumEpoch and then keeps the replica running until it
knows a remote leader: the preferred successor campaigns at once and the resigned leader, still
serving, grants its vote and follows it, so the successor's vote and its first commit need no
voter that is also going away. A node that closed its listeners right after EndQuorumEpoch left
the successor one voter short whenever the third was slow to answer (issue 37: graceful failover
0.10-0.31 s against etcd's 0.02, which also waits for its leadership transfer).

The wait ends early when no other voter answers any more: when a whole cluster is stopped at
once, the others close their listeners and no successor is coming.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Iterable

from quorum.net.peer_client import PeerClient, PeerUnavailable
from quorum.wire.protocol import API_VERSIONS_KEY, APIS

log = logging.getLogger(__name__)

SUCCESSOR_WAIT_S = 5.0
"""Kafka's: KafkaRaftClientDriver shuts its client down with a 5000 ms graceful-shutdown timer."""
REACHABLE_CHECK_S = 0.05
"""How often the other voters are asked whether they still listen (an ApiVersions request)."""

_API_VERSIONS = APIS[API_VERSIONS_KEY]


async def _listening(peer: PeerClient) -> bool:
    try:
        await peer.request(_API_VERSIONS, 0, _API_VERSIONS.request(version=0))
    except PeerUnavailable as exc:
        return not exc.gone
    return True


async def wait_for_successor(known: Callable[[], bool], changed_within: Callable[[float], Awaitable[object]],
                             voters: Iterable[PeerClient], limit_s: float = SUCCESSOR_WAIT_S) -> bool:
    """Wait until `known()` (a remote leader); `changed_within(s)` returns once that may have come
    or after s seconds. Give up after `limit_s` or once no voter in `voters` listens. True when a
    successor is known."""
    peers = list(voters)
    loop = asyncio.get_running_loop()
    deadline = loop.time() + limit_s
    while not known():
        remaining = deadline - loop.time()
        if remaining <= 0:
            log.warning("stopping without a new quorum leader: none was elected within %.1f s of resigning", limit_s)
            return False
        checks = [asyncio.ensure_future(_listening(p)) for p in peers]
        try:
            await changed_within(min(REACHABLE_CHECK_S, remaining))
            if known():
                return True
            answers = await asyncio.wait_for(asyncio.gather(*checks), max(deadline - loop.time(), 0.001))
        except TimeoutError:
            continue
        finally:
            for check in checks:
                check.cancel()
        if not any(answers):
            log.info("stopping without waiting for a new quorum leader: no other voter is listening")
            return False
    return True
