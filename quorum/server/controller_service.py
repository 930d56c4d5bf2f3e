"""The active controller inside a controller node: requests in, records through Raft, answers once committed.

The controller (`quorum.controller`) is sans-IO; this is its shell. One operation runs at a time:
it reads the node's replayed metadata image, gets the records and the response, proposes the
records as one batch through the Raft core and answers once they are committed, by which time
the node has replayed them into its image (the node replays before it wakes commit waiters). So
the next operation always sees the records of the one before it, and no pending view is kept.
A tick fences brokers whose session expired. A node that is not the quorum leader, or whose
leadership is not committed yet, answers NOT_CONTROLLER, which clients and brokers act on by
finding the new leader.

KIP-631's controller metrics are counted here (`quorum.image.metrics.NodeMetrics`): each request
the active controller processes counts in ControllerRequestsRate (NOT_CONTROLLER refusals do
not: the node is not a controller for them), and each result whose records commit, a request's
or a fencing tick's, is timed from its proposal to its commit (MetadataCommitLatencyMs) and adds
its records to MetadataCommitRate.
"""

from __future__ import annotations

import asyncio
import logging
import random
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from quorum.controller.controller import ControllerConfig, QuorumController
from quorum.controller.results import ControllerResult
from quorum.net.dispatch import Dispatcher, Reply
from quorum.server.commit_waiters import NotLeaderError
from quorum.server.refusals import refuse
from quorum.wire.errors import ErrorCode
from quorum.wire.protocol import Request

if TYPE_CHECKING:
    from quorum.server.node_services import NodeServices

log = logging.getLogger(__name__)

CREATE_TOPICS, DELETE_TOPICS, DESCRIBE_CONFIGS, CREATE_PARTITIONS = 19, 20, 32, 37
INCREMENTAL_ALTER_CONFIGS, ALTER_PARTITION, BROKER_REGISTRATION, BROKER_HEARTBEAT = 44, 56, 62, 63
ALTER_PARTITION_REASSIGNMENTS, LIST_PARTITION_REASSIGNMENTS = 45, 46
TICK_SECONDS = 0.1


class ControllerService:
    def __init__(self, node: NodeServices, config: ControllerConfig, commit_timeout_s: float = 30.0) -> None:
        self.node = node
        self.config = config
        self._commit_timeout_s = commit_timeout_s
        self._controller: QuorumController | None = None
        self._lock = asyncio.Lock()

    def register(self, dispatcher: Dispatcher) -> None:
        operations: dict[int, Callable[[QuorumController, Any, int, Any], ControllerResult]] = {
            CREATE_TOPICS: lambda c, body, now, view: c.create_topics(body, view),
            DELETE_TOPICS: lambda c, body, now, view: c.delete_topics(body, view),
            CREATE_PARTITIONS: lambda c, body, now, view: c.create_partitions(body, view),
            INCREMENTAL_ALTER_CONFIGS: lambda c, body, now, view: c.incremental_alter_configs(body, view),
            DESCRIBE_CONFIGS: lambda c, body, now, view: c.describe_configs(body, view),
            ALTER_PARTITION_REASSIGNMENTS: lambda c, body, now, view: c.alter_partition_reassignments(body, view),
            LIST_PARTITION_REASSIGNMENTS: lambda c, body, now, view: c.list_partition_reassignments(body, view),
            ALTER_PARTITION: lambda c, body, now, view: c.alter_partition(body, view),
            BROKER_REGISTRATION: lambda c, body, now, view: c.register_broker(body, now, view, self._next_offset()),
            BROKER_HEARTBEAT: lambda c, body, now, view: c.heartbeat(body, now, view, self._next_offset()),
        }
        for key, operation in operations.items():
            dispatcher.register(key, self._handler(operation))

    def _handler(self, operation: Callable[[QuorumController, Any, int, Any], ControllerResult]):
        async def handle(request: Request) -> Reply:
            async with self._lock:
                controller = self._active()
                if controller is None:
                    return Reply(refuse(request, ErrorCode.NOT_CONTROLLER), request.version)
                self.node.metrics.count_controller_request()
                result = operation(controller, request.body, self.node.now_ms(), self.node.image)
                error = await self._commit(result)
            if error is not None:
                return Reply(refuse(request, error), request.version)
            return Reply(result.response, request.version)

        return handle

    def _active(self) -> QuorumController | None:
        """The controller, when this node leads the quorum and has replayed everything before its epoch."""
        core = self.node.core
        if not core.leader_committed or core.cluster_id is None:
            if self._controller is not None:
                self._controller.deactivate()
                self._controller = None
                log.info("node %d is no longer the active controller", self.node.config.node_id)
            return None
        if self._controller is None:
            self._controller = QuorumController(core.cluster_id, self.config, random.Random())
            log.info("node %d is the active controller (epoch %d)", self.node.config.node_id, core.epoch)
        return self._controller

    def _next_offset(self) -> int:
        return self.node.log.end_offset

    async def _commit(self, result: ControllerResult) -> int | None:
        """Append the result's records as one batch and wait for them; an error code if that fails."""
        if not result.records:
            return None
        proposed = time.monotonic()
        try:
            await self.node.commit(list(result.records), self._commit_timeout_s)
        except NotLeaderError as exc:
            log.info("controller write answered NOT_CONTROLLER: %s", exc)
            return ErrorCode.NOT_CONTROLLER
        except TimeoutError:
            return ErrorCode.REQUEST_TIMED_OUT
        self.node.metrics.observe_commit(len(result.records), (time.monotonic() - proposed) * 1000.0)
        return None

    async def tick_forever(self) -> None:
        """Fence brokers whose session expired (KIP-631: heartbeats are the active controller's soft state)."""
        while True:
            await asyncio.sleep(TICK_SECONDS)
            async with self._lock:
                controller = self._active()
                if controller is None:
                    continue
                result = controller.tick(self.node.now_ms(), self.node.image)
                if result.records:
                    log.info("controller tick: %s", result.response)
                    await self._commit(result)
