"""When a local cluster is ready for clients, and what it still waits for when it is not.

A cluster whose processes have started is not yet usable: until the quorum has a leader, every
broker has registered and been unfenced, and each broker's own image lists every broker, an
AdminClient creating a replication-factor-3 topic right away gets INVALID_REPLICATION_FACTOR or a
timeout. `check()` asks the cluster once, over the wire, and names the first thing not ready (with
the node log to read); `LocalCluster.wait_ready()` repeats it until a deadline.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from quorum.admin import QuorumToolError, describe_quorum
from quorum.net.client_security import ClientSecurity
from quorum.net.peer_client import PeerClient, PeerUnavailable
from quorum.wire.protocol import APIS

METADATA = APIS[3]
METADATA_VERSION = 12
CHECK_TIMEOUT_MS = 2000
Security = tuple[ClientSecurity | None, ClientSecurity | None]
"""How to reach the controllers, and the brokers' first listeners, of a secured cluster."""


class ClusterNotReadyError(RuntimeError):
    """The cluster did not become ready in time; the message names what was missing and which log to read."""


@dataclass(frozen=True)
class Node:
    """What readiness needs to know of a node: where it listens and where it logs."""

    node_id: int
    address: str
    log_path: Path


@dataclass(frozen=True)
class Readiness:
    """One look at the cluster: `waiting_for` is None when it is ready, else what is missing."""

    waiting_for: str | None
    log_path: Path | None = None
    leader_id: int = -1

    @property
    def ready(self) -> bool:
        return self.waiting_for is None

    def describe(self) -> str:
        if self.ready:
            return "ready"
        return self.waiting_for + (f" (see {self.log_path})" if self.log_path else "")


async def _broker_ids(address: str, security: ClientSecurity | None = None) -> set[int]:
    """The brokers `address` lists in its Metadata answer (Metadata v12, no topics): registered and unfenced."""
    host, _, port = address.rpartition(":")
    client = PeerClient(host, int(port), "quorum-readiness", CHECK_TIMEOUT_MS, security=security)
    try:
        body = METADATA.request(version=METADATA_VERSION, topics=[], allow_auto_topic_creation=False,
                                include_topic_authorized_operations=False)
        response = await client.request(METADATA, METADATA_VERSION, body)
    finally:
        await client.close()
    return {b.node_id for b in response.brokers}


async def _check(controllers: Sequence[Node], brokers: Sequence[Node], security: Security | None = None) -> Readiness:
    to_controllers, to_brokers = security or (None, None)
    last: Exception | None = None
    leader_id = -1
    for node in controllers:
        try:
            status = await describe_quorum(node.address, timeout_ms=CHECK_TIMEOUT_MS, security=to_controllers)
        except (QuorumToolError, PeerUnavailable, OSError) as exc:
            last = exc
            continue
        if status.leader_id >= 0 and status.cluster_id:
            leader_id = status.leader_id
            break
    if leader_id < 0:
        ids = ", ".join(str(n.node_id) for n in controllers)
        return Readiness(f"a leader of the metadata quorum (controllers {ids}): {last or 'no leader elected yet'}",
                         controllers[0].log_path if controllers else None)
    logs: Mapping[int, Path] = {n.node_id: n.log_path for n in (*controllers, *brokers)}
    expected = {n.node_id for n in brokers}
    for node in brokers:
        try:
            listed = await _broker_ids(node.address, to_brokers)
        except (PeerUnavailable, OSError) as exc:
            return Readiness(f"broker {node.node_id} to answer Metadata at {node.address} (it does once registered "
                             f"and unfenced): {exc}", node.log_path, leader_id)
        missing = sorted(expected - listed)
        if missing:
            which = ", ".join(map(str, missing))
            return Readiness(f"broker(s) {which} to be registered and unfenced in broker {node.node_id}'s "
                             f"metadata (it lists {sorted(listed) or 'none'}; controller {leader_id} leads)",
                             logs.get(missing[0]) or logs.get(leader_id), leader_id)
    return Readiness(None, leader_id=leader_id)


def check(controllers: Sequence[Node], brokers: Sequence[Node], security: Security | None = None) -> Readiness:
    """Ask the cluster once: a leader among `controllers`, and every broker listing every broker
    (`security`: how to reach the controllers and the brokers' first listeners of a secured cluster)."""
    return asyncio.run(_check(controllers, brokers, security))


def exit_note(node: Node, code: int | None) -> str:
    """What to say about a node process that exited while the cluster was expected to come up."""
    return f"node {node.node_id} exited with code {code} before the cluster was ready (see {node.log_path})"


__all__ = ["ClusterNotReadyError", "Node", "Readiness", "check", "exit_note"]
