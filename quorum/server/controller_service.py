"""The active controller inside a controller node: requests in, records through Raft, answers once committed.

The controller (`quorum.controller`) is sans-IO; this is its shell. Requests queue as they arrive
and are decided in batches (issue 17: creations that arrive together share one commit, as the
node's proposals share one fsync): every request waiting when the previous batch committed is
decided in arrival order against a *pending view*, the node's replayed image with the records of
the batch's earlier requests replayed on top (`MetadataDelta`), so each sees the ones before it;
their records go through the Raft core as one batch, and each request is answered its own
response once that batch is committed, by which time the node has replayed it into its image (the
node replays before it wakes commit waiters). One batch is in flight at a time, so the next batch
starts from the committed image and no pending view outlives its batch. A batch holds at most
MAX_RECORDS_PER_BATCH records (Kafka's controller's limit per batch), except that a single request
above it goes alone. If the commit fails, every request of the batch from the first one that wrote
records on is answered the error (NOT_CONTROLLER, REQUEST_TIMED_OUT); those before it wrote
nothing and saw nothing uncommitted, and keep their answers. A tick fences brokers whose session
expired; it takes its turn between batches.

Broker lifecycle requests (BrokerRegistration, BrokerHeartbeat, AlterPartition, AllocateProducerIds)
queue apart from admin requests and go first in each batch, as Kafka's controller runs them ahead of
admin mutations, and a batch takes at most MAX_ADMIN_REQUESTS_PER_BATCH admin requests: a client that
floods the controller with CreateTopics or DescribeConfigs delays the brokers' heartbeats by about
one such batch, never by the whole queue ahead of them, so sessions do not
expire and brokers are not fenced because of it. A batch that takes more than
`SLOW_BATCH_LOG_MS` to decide and commit is logged with what it held, as Kafka's controller logs an
exceptionally slow event. A node that is not the quorum leader, or whose
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
from collections import Counter, deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from quorum.controller import acls, scram
from quorum.controller.controller import ControllerConfig, QuorumController
from quorum.controller.mutation_quota import STRICT_SINCE, UNBOUNDED, ControllerMutationQuotas, MutationQuota
from quorum.controller.producer_ids import ALLOCATE_PRODUCER_IDS, allocate_producer_ids
from quorum.controller.results import ControllerResult
from quorum.image.delta import MetadataDelta
from quorum.image.image import MetadataImage
from quorum.net.dispatch import Dispatcher, Reply
from quorum.security.principal import request_context
from quorum.server.bootstrap_metadata import bootstrap_due
from quorum.server.commit_waiters import NotLeaderError
from quorum.server.refusals import refuse
from quorum.wire.errors import ErrorCode
from quorum.wire.protocol import Request

if TYPE_CHECKING:
    from quorum.server.node_services import NodeServices

log = logging.getLogger(__name__)

CREATE_TOPICS, DELETE_TOPICS, DESCRIBE_CONFIGS, ALTER_CONFIGS, CREATE_PARTITIONS = 19, 20, 32, 33, 37
INCREMENTAL_ALTER_CONFIGS, ALTER_PARTITION, BROKER_REGISTRATION, BROKER_HEARTBEAT = 44, 56, 62, 63
ALTER_PARTITION_REASSIGNMENTS, LIST_PARTITION_REASSIGNMENTS = 45, 46
LIFECYCLE = frozenset({BROKER_REGISTRATION, BROKER_HEARTBEAT, ALTER_PARTITION, ALLOCATE_PRODUCER_IDS})
"""The brokers' own requests: decided ahead of every admin request waiting with them."""
TICK_SECONDS = 0.1
MAX_RECORDS_PER_BATCH = 10_000
MAX_ADMIN_REQUESTS_PER_BATCH = 500
"""A batch's answers wait for all of its decisions: this bounds how long thousands of queued admin requests
keep the lifecycle requests of the next batch waiting (issue 17's creations still share one commit 500 at a time)."""
SLOW_BATCH_LOG_MS = 2_000
"""Kafka's controller.performance.always.log.threshold.ms: a batch slower than this is logged."""

Operation = Callable[[QuorumController, Any, int, Any, int, MutationQuota], ControllerResult]
"""(controller, request body, now ms, view, next offset, the client's mutation quota) -> the result to commit
and answer."""
MUTATIONS = frozenset(STRICT_SINCE)
"""CreateTopics, CreatePartitions, DeleteTopics: what KIP-599's controller mutation quota counts."""


@dataclass(slots=True)
class _Queued:
    """A request waiting for its batch, and where its answer goes."""

    operation: Operation
    request: Request
    answer: asyncio.Future[Reply]
    principal: str
    """Who sent it, for the mutation quota (captured while the request's connection context is current)."""


def _log_if_slow(batch: list[_Queued], started: float) -> None:
    elapsed_ms = (time.monotonic() - started) * 1000.0
    if elapsed_ms > SLOW_BATCH_LOG_MS:
        kinds = Counter(queued.request.api.name for queued in batch)
        log.warning("exceptionally slow controller batch: %d requests (%s) took %.0f ms to decide and commit",
                    len(batch), ", ".join(f"{count} {name}" for name, count in kinds.most_common()), elapsed_ms)


def pending_view(view: MetadataImage, records: tuple[bytes, ...], first_offset: int) -> MetadataImage:
    """`view` with `records` replayed on top, the first at `first_offset`: what the next request of
    a batch decides against (it shares everything the records did not change with `view`)."""
    delta = MetadataDelta(view)
    for offset, value in enumerate(records, first_offset):
        delta.replay(value, offset)
    return delta.apply()


class ControllerService:
    def __init__(self, node: NodeServices, config: ControllerConfig, commit_timeout_s: float = 30.0,
                 bootstrap: tuple[bytes, ...] = ()) -> None:
        self.node = node
        self._bootstrap = bootstrap
        """The bootstrap metadata (`storage format --add-scram`), committed first when the log has none."""
        self.config = config
        self._commit_timeout_s = commit_timeout_s
        self._controller: QuorumController | None = None
        self._lock = asyncio.Lock()
        self._lifecycle: deque[_Queued] = deque()
        self._queue: deque[_Queued] = deque()  # admin requests
        self._worker: asyncio.Task[None] | None = None
        self._quotas = ControllerMutationQuotas(config.controller_mutation_rate, config.quota_window_num,
                                                config.quota_window_size_s)

    def register(self, dispatcher: Dispatcher) -> None:
        operations: dict[int, Operation] = {
            CREATE_TOPICS: lambda c, body, now, view, offset, quota: c.create_topics(body, view, quota),
            DELETE_TOPICS: lambda c, body, now, view, offset, quota: c.delete_topics(body, view, quota),
            CREATE_PARTITIONS: lambda c, body, now, view, offset, quota: c.create_partitions(body, view, quota),
            INCREMENTAL_ALTER_CONFIGS: lambda c, body, now, view, offset, quota: c.incremental_alter_configs(
                body, view),
            ALTER_CONFIGS: lambda c, body, now, view, offset, quota: c.legacy_alter_configs(body, view),
            DESCRIBE_CONFIGS: lambda c, body, now, view, offset, quota: c.describe_configs(body, view),
            ALTER_PARTITION_REASSIGNMENTS: lambda c, body, now, view, offset, quota: c.alter_partition_reassignments(
                body, view),
            LIST_PARTITION_REASSIGNMENTS: lambda c, body, now, view, offset, quota: c.list_partition_reassignments(
                body, view),
            ALTER_PARTITION: lambda c, body, now, view, offset, quota: c.alter_partition(body, view),
            BROKER_REGISTRATION: lambda c, body, now, view, offset, quota: c.register_broker(body, now, view, offset),
            BROKER_HEARTBEAT: lambda c, body, now, view, offset, quota: c.heartbeat(body, now, view, offset),
            ALLOCATE_PRODUCER_IDS: lambda c, body, now, view, offset, quota: allocate_producer_ids(body, view),
            acls.CREATE_ACLS: lambda c, body, now, view, offset, quota: acls.create_acls(body, view, c.rng),
            acls.DELETE_ACLS: lambda c, body, now, view, offset, quota: acls.delete_acls(body, view),
            scram.ALTER_USER_SCRAM_CREDENTIALS:
                lambda c, body, now, view, offset, quota: scram.alter_user_scram_credentials(body, view),
        }
        for key, operation in operations.items():
            # pipelined: a connection's next request (a broker's next forwarded CreateTopics) is read
            # while this one waits for its batch, so that requests arriving together commit together
            dispatcher.register(key, self._handler(operation), pipelined=True)

    def _handler(self, operation: Operation):
        async def handle(request: Request) -> Reply:
            answer: asyncio.Future[Reply] = asyncio.get_running_loop().create_future()
            queued = _Queued(operation, request, answer, str(request_context().principal))
            (self._lifecycle if request.api.key in LIFECYCLE else self._queue).append(queued)
            if self._worker is None or self._worker.done():
                self._worker = asyncio.create_task(self._run_batches())
            return await answer

        return handle

    async def _run_batches(self) -> None:
        """Decide and commit the queued requests, a batch at a time, until none is left."""
        while self._lifecycle or self._queue:
            batch = self._take_batch()
            try:
                async with self._lock:
                    started = time.monotonic()
                    answers = await self._decide_and_commit(batch)
                    _log_if_slow(batch, started)
            except Exception as exc:  # never leave a request unanswered
                log.exception("controller batch of %d requests failed", len(batch))
                for queued in batch:
                    if not queued.answer.done():
                        queued.answer.set_exception(exc)
                continue
            for queued, reply in zip(batch, answers, strict=True):
                if not queued.answer.done():
                    queued.answer.set_result(reply)

    def _take_batch(self) -> list[_Queued]:
        """The queued lifecycle requests, then at most MAX_ADMIN_REQUESTS_PER_BATCH admin requests, each
        in arrival order (`_decide_and_commit` puts back those past MAX_RECORDS_PER_BATCH records)."""
        batch = [*self._lifecycle]
        self._lifecycle.clear()
        for _ in range(min(len(self._queue), MAX_ADMIN_REQUESTS_PER_BATCH)):
            batch.append(self._queue.popleft())
        return batch

    def _put_back(self, rest: list[_Queued]) -> None:
        """Requests a batch had no room for, to the front of their queues for the next batch."""
        for queued in reversed(rest):
            (self._lifecycle if queued.request.api.key in LIFECYCLE else self._queue).appendleft(queued)

    async def _decide_and_commit(self, batch: list[_Queued]) -> list[Reply]:
        """Each request decided against the pending view, all their records committed as one batch."""
        controller = self._active()
        if controller is None:
            return [Reply(refuse(q.request, ErrorCode.NOT_CONTROLLER), q.request.version) for q in batch]
        error = await self._write_bootstrap()
        if error is not None:
            return [Reply(refuse(q.request, error), q.request.version) for q in batch]
        view: MetadataImage = self.node.image
        first_offset = self._next_offset()
        records: list[bytes] = []
        results: list[ControllerResult] = []
        writer = None  # index of the first request that wrote records
        now = self.node.now_ms()
        for index, queued in enumerate(batch):
            if len(records) >= MAX_RECORDS_PER_BATCH:  # a batch's worth decided: the rest waits for the next
                self._put_back(batch[index:])
                del batch[index:]
                break
            self.node.metrics.count_controller_request()
            try:
                result = queued.operation(controller, queued.request.body, now, view, first_offset + len(records),
                                          self._quota(queued, now))
            except Exception:  # a bug in one request's decision fails that request, not its batch
                log.exception("controller: %s failed", queued.request.api.name)
                result = ControllerResult((), refuse(queued.request, ErrorCode.UNKNOWN_SERVER_ERROR))
            if result.records:
                view = pending_view(view, result.records, first_offset + len(records))
                records += result.records
                writer = index if writer is None else writer
            results.append(result)
        error = await self._commit(ControllerResult(tuple(records), None))
        replies = []
        for index, (queued, result) in enumerate(zip(batch, results, strict=True)):
            failed = error is not None and writer is not None and index >= writer
            body = refuse(queued.request, error) if failed and error is not None else result.response
            replies.append(Reply(body, queued.request.version))
        return replies

    def _quota(self, queued: _Queued, now_ms: int) -> MutationQuota:
        request = queued.request
        if request.api.key not in MUTATIONS:
            return UNBOUNDED
        return self._quotas.quota_for(queued.principal, request.header.client_id, request.api.key, request.version,
                                      now_ms)

    def _active(self) -> QuorumController | None:
        """The controller, when this node leads the quorum and has replayed everything before its epoch."""
        core = self.node.core
        if not core.leader_committed or core.cluster_id is None:
            if self._controller is not None:
                self._controller.deactivate()
                self._controller = None
                self._quotas.clear()
                log.info("node %d is no longer the active controller", self.node.config.node_id)
            return None
        if self._controller is None:
            self._controller = QuorumController(core.cluster_id, self.config, random.Random())
            log.info("node %d is the active controller (epoch %d)", self.node.config.node_id, core.epoch)
        return self._controller

    async def _write_bootstrap(self) -> int | None:
        """Commit the bootstrap metadata if the log has not got it yet (Kafka's controller appends its
        bootstrap records when the log is empty); an error code if that fails."""
        if not self._bootstrap or not bootstrap_due(self.node.image):
            return None
        log.info("node %d commits the bootstrap metadata (%d records)", self.node.config.node_id, len(self._bootstrap))
        return await self._commit(ControllerResult(self._bootstrap, None))

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
                if controller is None or await self._write_bootstrap() is not None:
                    continue
                result = controller.tick(self.node.now_ms(), self.node.image)
                if result.records:
                    log.info("controller tick: %s", result.response)
                    await self._commit(result)
