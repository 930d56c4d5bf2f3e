"""What a node offers the roles it hosts (the broker role, the controller service, the quorum
admin handlers), as a protocol.

The node composes its roles, so a role that named `RaftNode` would import the module that
imports it. Typed against this protocol instead, a role depends only on what it uses, and a test
can host a role on anything that has these members.
"""

from __future__ import annotations

from typing import Protocol

from quorum.image.image import MetadataImage
from quorum.image.image_state import ImageState
from quorum.image.metrics import NodeMetrics
from quorum.image.replay import MetadataReplayer
from quorum.log.log import Log
from quorum.net.dispatch import Dispatcher
from quorum.net.peer_client import PeerClient
from quorum.raft.core import RaftCore
from quorum.server.config import NodeConfig


class NodeServices(Protocol):
    """The members of `quorum.server.node.RaftNode` its roles use."""

    config: NodeConfig
    core: RaftCore
    log: Log
    metrics: NodeMetrics
    dispatcher: Dispatcher
    image_state: ImageState
    replayer: MetadataReplayer
    metadata_write_channels: dict[int, PeerClient]
    """With the test-only metadata writes: a connection to each other controller (`quorum_handlers`)."""

    @property
    def image(self) -> MetadataImage:
        """The metadata image replayed from the committed log."""
        ...

    def now_ms(self) -> int: ...

    def stop_on_failed_log_dir(self, reason: str) -> None:
        """Stop the node (exit 1) naming `reason`; safe from any thread."""
        ...

    def controller_peer(self) -> PeerClient | None:
        """The channel to the active controller, when the node knows one."""
        ...

    def lifecycle_peer(self) -> PeerClient | None:
        """The broker's registration and heartbeat channel to the active controller (kept apart from
        forwarded requests, as Kafka's), when the node knows one."""
        ...

    async def new_leader(self, excluded: frozenset[int], limit_s: float) -> int:
        """The leader this node knows for its epoch once it is none of `excluded` (NO_NODE for "a
        leader at all"), waiting `limit_s` at most; whatever it knows then."""
        ...

    async def commit(self, values: list[bytes], timeout_s: float) -> int:
        """Append `values` as one batch and wait until it is committed; its base offset.
        NotLeaderError (`quorum.server.commit_waiters`) when this node is not the leader or stops
        leading first, TimeoutError after `timeout_s`."""
        ...
