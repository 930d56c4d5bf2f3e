"""The node process: a Raft core driven by asyncio, a durable log, listeners and peer connections.

This is the "shell" of the sans-IO design: it owns every clock, socket, thread and file, feeds
the core events, and carries out the actions the core returns strictly in order, so that a
state or log write is durable before any message the core emitted after it is sent.

Metrics (`quorum.image.metrics.NodeMetrics`, served on `quorum.metrics.port`): the node sets
KIP-631's MetadataLag and MetadataSnapshotLag where their facts change (the high watermark
advancing, before and after the replay it causes; a snapshot written or installed); the
controller shell (`quorum.server.controller_service`) counts its requests and commits.

Snapshots are written in turns the active controller gives (KIP-631,
`quorum.server.snapshot_turns`): a periodic check begins one when it is this node's turn, and
each Raft Fetch carries the report, each answer the grant.

The broker role (`quorum.server.broker_role`) serves clients: Metadata from the served image
(which holds the KAFKA-6262 test knob), partitions, produce, fetch, groups.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
import os
import random
import signal
import time
from collections import deque
from collections.abc import Callable, Coroutine
from typing import TYPE_CHECKING, Any

from quorum.broker.metadata import memo_difference
from quorum.broker.remote_tier_plugin import RemoteTier
from quorum.broker.replica_fetcher_out_of_range import OutOfRangePlugin
from quorum.controller.snapshot_coordinator import OwnSnapshot
from quorum.image.image import MetadataImage
from quorum.image.image_state import ImageState
from quorum.image.metrics import NodeMetrics
from quorum.image.replay import MetadataReplayer, SnapshotJob
from quorum.image.snapshot_actions import SnapshotActions
from quorum.image.snapshot_policy import SnapshotPolicy
from quorum.image.verify import ImageDivergenceError, ImageVerifier, verify_image_enabled
from quorum.log.log import Log
from quorum.log.quorum_state import QUORUM_STATE_NAME, QuorumState, read_quorum_state
from quorum.log.snapshot import SnapshotDirectory
from quorum.net.client_security import node_client_security
from quorum.net.dispatch import Dispatcher, Reply
from quorum.net.peer_client import PeerClient, PeerUnavailable
from quorum.net.secure_connection import ListenerSecurity, register_sasl_outside_authentication
from quorum.raft import interface as raft
from quorum.raft.core import RaftCore
from quorum.raft.state import NO_NODE, Role
from quorum.security.authorization import install_authorization
from quorum.server import raft_rpc
from quorum.server.allocator import keep_freed_buffers
from quorum.server.bootstrap_metadata import NodeScramCredentials, read_bootstrap
from quorum.server.broker_lifecycle import BROKER_HEARTBEAT, BROKER_REGISTRATION
from quorum.server.broker_role import BrokerRole
from quorum.server.commit_waiters import CommitWaiters, NotLeaderError
from quorum.server.config import NodeConfig
from quorum.server.heap import freeze_startup_heap
from quorum.server.image_check import BackgroundImageCheck
from quorum.server.listener import KafkaListener
from quorum.server.quorum_handlers import (
    METADATA_WRITES_PRODUCE_VERSION,
    PRODUCE,
    register_metadata_writes,
    register_quorum_admin,
)
from quorum.server.refusals import refuse
from quorum.server.request_metrics import RequestMetrics
from quorum.server.snapshot_turns import SnapshotTurns, degraded_min_bytes
from quorum.server.stall_watch import StallWatch
from quorum.server.state_writer import QuorumStateWriter
from quorum.server.stop_watch import StopWatch
from quorum.server.storage import check_storage, record_cluster_id
from quorum.server.successor_wait import wait_for_successor
from quorum.server.warm_peers import keep_connected
from quorum.wire.errors import ErrorCode, MalformedRequestError, WireError
from quorum.wire.protocol import APIS, Api, Request, compile_codecs

if TYPE_CHECKING:
    from quorum.server.controller_service import ControllerService

log = logging.getLogger(__name__)

TICK_SECONDS = 0.01
"""The shortest time between two ticks: the resolution of the core's timers."""
MAX_TICK_WAIT_SECONDS = 1.0
"""The longest a tick waits for the core's next deadline (a bound against a wall clock stepped back)."""
INLINE_APPEND_BYTES = 256 * 1024
"""Appends up to this size go to the log on the event loop, larger ones on a worker thread."""
INLINE_REPLAY_RECORDS = 128
"""A commit that moves the high watermark by at most this many offsets is replayed on the event loop
(a thread hop costs more than a few records; at ~12 us a metadata record this stalls the loop < 2 ms)."""
SNAPSHOT_TURN_SECONDS = 0.2
STOP_SENDS_SECONDS = 5.0
"""The longest a stopping node waits for its cancelled Raft requests to end (one ends at once)."""


def wall_clock_ms() -> int:
    return int(time.time() * 1000)


class RaftNode:
    """One KRaft node: a voter when it has the controller role, an observer otherwise."""

    def __init__(self, config: NodeConfig, remote: RemoteTier | None = None,
                 out_of_range: OutOfRangePlugin | None = None) -> None:
        self.config = config
        cluster_id = check_storage(config)
        directory = config.metadata_log_dir
        self.log = Log(directory, segment_bytes=config.metadata_log_segment_bytes)
        # KIP-630: load the latest snapshot (refusing a corrupt one), then replay the log from its end.
        self.snapshots = SnapshotDirectory(directory)
        self.metrics = NodeMetrics(controller=config.is_controller, broker=config.is_broker)
        # Kafka's request metrics, recorded only where they can be read (a metrics port): ~5 us a request
        self.request_metrics = RequestMetrics() if config.metrics_port is not None else None
        self.metrics.register(() if self.request_metrics is None else (self.request_metrics,))
        client = config.client_endpoint()
        # The image brokers answer Metadata from; brokers list the endpoints of this listener name.
        self.image_state = ImageState(listener=client.name if client is not None else None,
                                      controller_id=config.node_id)
        policy = SnapshotPolicy.from_config(config.extra)
        self.replayer = MetadataReplayer(directory, self.log, self.image_state, policy, self.metrics, self.snapshots)
        self.replayer.boot()
        self.snapshot_actions = SnapshotActions(self.replayer, self.snapshots)
        # Test only (issue 21): after each catch-up, the image must equal a replay of snapshot plus log.
        self.verifier = (ImageVerifier(config.node_id, directory, self.log, self.snapshots)
                         if verify_image_enabled(config.extra) else None)  # fmt: skip
        self.image_check = (BackgroundImageCheck(self._image_divergence, self._stop_on_image_divergence)
                            if self.verifier is not None else None)  # fmt: skip
        if self.verifier is not None:
            log.warning("test setting quorum.test.verify.image: each catch-up is checked against a replay of "
                        "snapshot plus log")
        if cluster_id is None and self.replayer.cluster_id is not None:
            cluster_id = self.replayer.cluster_id  # committed, since a snapshot holds committed records only
            record_cluster_id(config, cluster_id)
        self.replayer.cluster_id = cluster_id
        self.image_state.set_identity(cluster_id=cluster_id)
        self._state_path = directory / QUORUM_STATE_NAME
        stored = read_quorum_state(self._state_path)
        persisted = raft.PersistState(stored.leader_epoch, stored.voted_id, stored.leader_id) if stored else None
        self._state_writer = QuorumStateWriter(self._state_path,
                                               (stored.leader_epoch, stored.voted_id) if stored else None,
                                               self._stop_on_disk_failure)
        self.core = RaftCore(config.quorum(), self.log, persisted, cluster_id, random.Random(), wall_clock_ms(),
                             snapshots=self.snapshots)
        self._update_lag_metrics(self.core.high_watermark)
        # KIP-631: the active controller says when each replica may write its snapshot.
        self.snapshot_turns = SnapshotTurns(
            config.node_id, (v.node_id for v in config.voters), config.quorum().fetch_timeout_ms,
            degraded_min_bytes(config.extra, policy.max_record_bytes_between_snapshots), self.replayer)
        # TLS and SASL to the controllers as their first controller listener asks (issue 18)
        to_controllers = node_client_security(config, config.controller_listener_names[0],
                                              "sasl.mechanism.controller.protocol")
        self.peers = {
            v.node_id: PeerClient(v.host, v.port, f"raft-node-{config.node_id}", config.request_timeout_ms,
                                  config.max_frame_bytes, to_controllers)
            for v in config.voters if v.node_id != config.node_id
        }
        # A second connection to each controller for the broker's own requests (registration, heartbeats,
        # forwarded admin requests), as Kafka's brokers keep a controller channel apart from replication:
        # on the Raft connection they would queue behind a Fetch the leader holds for up to 500 ms.
        # With the test-only metadata writes, a third connection to each other controller: a write this
        # controller cannot commit goes to the leader on it (`quorum.server.quorum_handlers`), not on the
        # Raft connection, where it would wait for its commit behind this node's own Fetch.
        self.metadata_write_channels = {
            v.node_id: PeerClient(v.host, v.port, f"controller-{config.node_id}-metadata-writes",
                                  config.request_timeout_ms, config.max_frame_bytes, to_controllers)
            for v in config.voters if v.node_id != config.node_id
        } if config.is_controller and config.test_metadata_writes else {}
        self.controller_channels = {
            v.node_id: PeerClient(v.host, v.port, f"broker-{config.node_id}-to-controller", config.request_timeout_ms,
                                  config.max_frame_bytes, to_controllers)
            for v in config.voters if v.node_id != config.node_id
        } if config.is_broker and not config.is_controller else {}
        # And a third for registration and heartbeats alone, as Kafka's BrokerLifecycleManager has its own
        # "heartbeat" channel: answers come back in request order, so behind a slow forwarded admin request
        # a heartbeat waited out the session and the controller fenced a healthy broker (the protocol fuzzer).
        self.lifecycle_channels = {
            v.node_id: PeerClient(v.host, v.port, f"broker-{config.node_id}-heartbeat", config.request_timeout_ms,
                                  config.max_frame_bytes, to_controllers)
            for v in config.voters if v.node_id != config.node_id
        } if config.is_broker and not config.is_controller else {}
        self.dispatcher = Dispatcher()
        self._request_ids = itertools.count(1)
        self._replies: dict[int, asyncio.Future[raft.Message]] = {}
        self._core_lock = asyncio.Lock()
        self._leader_waiters: list[asyncio.Future[None]] = []
        """`new_leader`'s waits, woken at every LeaderChanged."""
        self._core_moved = asyncio.Event()
        """Set by every `drive`: the core's next deadline may have moved (`_tick_forever` waits on it)."""
        self._flusher: asyncio.Task[None] | None = None
        self._proposals: deque[tuple[list[bytes], asyncio.Future[tuple[int, int] | None]]] = deque()
        self._sends: set[asyncio.Task[None]] = set()
        self._rpcs: set[asyncio.Task[None]] = set()
        """The Raft requests in flight (`_send`), a subset of `_sends`: cancelled when the node closes."""
        self._closing = False
        """Set once `run` tears the node down: no event reaches the core and no Raft request starts after
        it. Each answered request drives the core, which asks for the next one: a chain of `_send` tasks
        that outlived `run`, drove the core after the metadata log closed (LogError) and kept a stopped
        broker fetching from its controller: a SIGTERMed broker that did not exit in 30 s (a CI run)."""
        self._stopped = asyncio.Event()
        self._fatal: str | None = None
        self._loop: asyncio.AbstractEventLoop | None = None  # the one `run` serves on
        self._commits = CommitWaiters(config.node_id)
        self.listeners = self._build_listeners()
        self.listener = self.listeners[0]
        if config.is_controller:
            for key in raft_rpc.RAFT_API_KEYS:
                self.dispatcher.register(key, self._handle_raft_request)
            register_quorum_admin(self)
            if config.test_metadata_writes:  # test only: off, Produce is not served here, as in Kafka
                log.warning("test setting quorum.test.metadata.writes.enable: any client that reaches this "
                            "controller can commit records to __cluster_metadata")
                register_metadata_writes(self)
            # imported here: a broker-only process never loads the controller (a fifth of its imports)
            from quorum.controller.controller import ControllerConfig
            from quorum.server.controller_service import ControllerService

            self.controller_service: ControllerService | None = ControllerService(
                self, ControllerConfig.from_properties(config.extra), bootstrap=read_bootstrap(config.log_dirs[0]))
            self.controller_service.register(self.dispatcher)
        else:
            self.controller_service = None
        # `remote`: the remote tier (KIP-405) the entry point composed, for a broker with tiered storage;
        # `out_of_range`: its followers' plug-in (KIP-405's bootstrap gap, KIP-1023), Kafka's way without it
        self.broker = (BrokerRole(self, out_of_range=out_of_range, remote=remote)
                       if config.is_broker and not config.is_controller else None)
        if self.broker is not None:  # a plug-in may bring metrics (the follower bootstrap's report)
            self.metrics.register(getattr(out_of_range, "collectors", ()))
            self.metrics.register(getattr(remote, "collectors", ()))  # Kafka's remote storage metrics
            self.metrics.register(self.broker.replicas.cleaner_metrics.collectors)
            self.metrics.register(() if self.broker.timings is None else (self.broker.timings,))
        # issue 18: with `authorizer.class.name`, every request is authorized (quorum.security.authorization)
        install_authorization(self.dispatcher, config.extra, lambda: self.image, refuse, config.is_controller)

    # -- the broker role ------------------------------------------------------------------------

    @property
    def image(self) -> MetadataImage:
        """The metadata image replayed from the committed log (what the controller reads)."""
        return self.image_state.image

    @property
    def served_image(self) -> MetadataImage:
        """What this broker answers Metadata from: `image`, unless the KAFKA-6262 test knob holds it back."""
        return self.image if self.broker is None else self.broker.image

    @staticmethod
    def now_ms() -> int:
        return wall_clock_ms()

    def controller_peer(self) -> PeerClient | None:
        """The channel to the active controller (the quorum leader), when this node knows one."""
        return self.controller_channels.get(self.core.leader_id)

    def lifecycle_peer(self) -> PeerClient | None:
        """The broker's registration and heartbeat channel to the active controller, when it knows one."""
        return self.lifecycle_channels.get(self.core.leader_id)

    def _build_listeners(self) -> list[KafkaListener]:
        """A controller's controller listeners, a broker's client listeners: the inter-broker (or first)
        one first, each with its security protocol's TLS and SASL (issue 18)."""
        config = self.config
        primary = config.controller_endpoint() if config.is_controller else config.client_endpoint()
        if primary is None:
            raise ValueError("no listener to serve on")
        endpoints = [primary, *(e for e in config.served_endpoints() if e != primary)]
        scram = NodeScramCredentials(lambda: self.image, config.log_dirs[0])  # SCRAM users: the metadata's
        listeners = [KafkaListener(self.dispatcher, e.host, e.port, config.max_frame_bytes,
                                   ListenerSecurity.of(config.extra, e.name, config.security_protocol(e.name), scram),
                                   self.request_metrics)
                     for e in endpoints]
        if any(listener.security.sasl is not None for listener in listeners):
            register_sasl_outside_authentication(self.dispatcher)
        return listeners

    # -- driving the core ----------------------------------------------------------------------

    async def drive(self, call: Callable[[], list[raft.Action]]) -> None:
        """Feed the core one event and carry out every action it returns before the next event.

        The lock is the core's contract (quorum.raft.interface): the log it reads at the start of
        a call reflects every append and truncation it asked for, and a state or log write is
        durable before any later Send of the same list leaves the node.

        An append's fsync runs in the background (`_flush_in_background`) unless something later
        in the same list must wait for it: the lock is free meanwhile, so a leader appends the next
        group of proposals and takes its followers' acknowledgements while the disk works (etcd's
        pipelining), and `on_flushed` tells the core when the data counts (issue 17). A follower's
        small append is fsynced on the loop instead (`_append_durably_on_the_loop`).

        A disk error while carrying out the actions (an append on a full disk, a truncation, a state
        or snapshot write) stops the node (exit 1), as Kafka halts when its metadata log dir fails:
        the core would go on believing in a log it no longer matches. The restarted node recovers its
        log (a torn tail is cut) and catches up.
        """
        if self._closing:
            return  # the node is closing: the core's log is closing or closed (see `_closing`)
        async with self._core_lock:
            if self._fatal is not None or self._closing:
                return  # stopping: the log may not be what the core believes
            before = (self.core.role, self.core.epoch)
            try:
                await self._carry_out(call)
            except OSError as exc:
                self._stop_on_disk_failure(exc)
            finally:
                self._core_moved.set()
                self._log_transition(before)

    def _log_transition(self, before: tuple[Role, int]) -> None:
        """One line per change of role or epoch, as KafkaRaftClient logs "Completed transition to
        ...": without them a failover that takes long cannot be told apart from one that never ran."""
        core = self.core
        if (core.role, core.epoch) != before:
            log.info("raft: %s in epoch %d -> %s in epoch %d (leader %d)", before[0].value, before[1],
                     core.role.value, core.epoch, core.leader_id)

    async def _carry_out(self, call: Callable[[], list[raft.Action]]) -> None:
        """`drive`'s body, under the core lock."""
        pending = deque(call())
        unflushed = False  # appended in this list, and nothing after it has waited for the disk yet
        while pending:
            action = pending.popleft()
            if isinstance(action, raft.AppendBatches):
                # Group commit: consecutive appends (proposals gathered in one call) share one fsync.
                batches = [action.batches]
                while pending and isinstance(pending[0], raft.AppendBatches):
                    batches.append(pending.popleft().batches)
                data = b"".join(batches)
                if self.config.is_controller and self.core.role is not Role.LEADER \
                        and len(data) <= INLINE_APPEND_BYTES:
                    pending.extend(self._append_durably_on_the_loop(data))
                    continue
                await self._append(data)
                unflushed = True
                self._start_flush()  # the disk starts now, while the loop answers and replays
                # A leader's parked Fetches are answered before its fsync, which they overlap.
                for early in self.core.on_appended(wall_clock_ms()):
                    pending.extend(await self._execute(early))
                continue
            if isinstance(action, raft.PersistState) and _superseded(pending):
                continue  # one quorum-state write for the last of consecutive state changes
            if unflushed and isinstance(action, (raft.Send, raft.Reply)):
                await asyncio.to_thread(self.log.flush)  # the contract: durable before a later Send leaves
                unflushed = False
                pending.extend(self.core.on_flushed(self.log.flushed_offset, wall_clock_ms()))
            pending.extend(await self._execute(action))
        self._commits.leadership(self.core.epoch, self.core.role is Role.LEADER, self.core.leader_id)
        if self.log.flushed_offset < self.log.end_offset:
            self._start_flush()  # an earlier round found the log durable while this one appended

    def _stop_on_disk_failure(self, exc: OSError) -> None:
        """Stop the node (exit 1) naming the disk error: one line, no traceback."""
        self._stop_fatally(f"the metadata log or its state could not be written or read: {exc}",
                           "as Kafka does when its metadata log dir fails")

    def stop_on_failed_log_dir(self, reason: str) -> None:
        """Stop the node (exit 1): a partition's log dir failed (`BrokerRole`). Safe from any thread:
        a log's fsync fails on a worker thread."""
        why = "as Kafka halts when its only log dir fails"
        if self._loop is None:
            self._stop_fatally(reason, why)
        else:
            self._loop.call_soon_threadsafe(self._stop_fatally, reason, why)

    def _stop_fatally(self, reason: str, why: str) -> None:
        if self._fatal is not None:
            return
        log.critical("fatal: %s; stopping, %s", reason, why)
        self._fatal = reason
        self._stopped.set()

    async def _append(self, data: bytes) -> None:
        """Append on the loop when small (a write into the page cache costs less than a thread hop),
        on a worker thread when large (a follower catching up) so the loop keeps serving."""
        if len(data) <= INLINE_APPEND_BYTES:
            self.log.append(data)
        else:
            await asyncio.to_thread(self.log.append, data)

    def _append_durably_on_the_loop(self, data: bytes) -> list[raft.Action]:
        """A controller's fetched batches as a follower, appended and fsynced before the loop does
        anything else: its next Fetch must wait for the fsync anyway, since the leader counts a
        voter's fetch offset as durable, and Kafka's KafkaRaftClient.appendAsFollower flushes on its
        one thread too. On a worker thread the fsync cost two thread wake-ups per round (a futex
        each way and the loop's self-pipe), a follower's largest cost under load: inline,
        bench_quorum's 16 writers x 1 record committed ~15-25% more with ~15% less CPU per commit
        (issue 37). The leader keeps its fsync on a thread, pipelined with its next appends (issue
        17): inline there, the same rows lost ~15%. So does a broker's metadata log: its loop
        serves produce and fetch, and an fsync behind a busy disk's data writes can take far
        longer than a round."""
        self.log.append(data)
        actions = self.core.on_appended(wall_clock_ms())
        self.log.flush()
        return actions + self.core.on_flushed(self.log.flushed_offset, wall_clock_ms())

    def _start_flush(self) -> None:
        """Start an fsync on a worker thread at once, unless one is under way (it loops)."""
        if self._flusher is None or self._flusher.done():
            first = asyncio.get_running_loop().run_in_executor(None, self.log.flush)
            self._flusher = asyncio.create_task(self._flush_in_background(first))

    async def _flush_in_background(self, first: asyncio.Future[int]) -> None:
        """Wait for the fsync `first`, tell the core, and fsync again while the log has grown meanwhile
        (appends made while one runs are covered by the next). A failed fsync is fatal (`Log.flush`)."""
        flush = first
        while True:
            try:
                await flush
            except Exception as exc:  # the disk failed (or the log refuses writes since it did)
                log.critical("fatal: the metadata log's fsync failed: %s", exc)
                self._fatal = f"the metadata log's fsync failed: {exc}"
                self._stopped.set()
                return
            await self.drive(lambda: self.core.on_flushed(self.log.flushed_offset, wall_clock_ms()))
            if self.log.flushed_offset >= self.log.end_offset or self._fatal is not None:
                return
            flush = asyncio.get_running_loop().run_in_executor(None, self.log.flush)

    async def commit(self, values: list[bytes], timeout_s: float) -> int:
        """Append `values` as one batch through the core and wait until it is committed; its base offset.

        Proposals that arrive while the core is busy (an fsync in flight) wait together and go to
        the core in one call, so their batches share one append and one fsync (group commit).
        NotLeaderError when this node is not the leader or stops leading before the batch is
        committed (`quorum.server.commit_waiters`), TimeoutError after `timeout_s`.
        """
        future: asyncio.Future[tuple[int, int] | None] = asyncio.get_running_loop().create_future()
        self._proposals.append((values, future))
        if len(self._proposals) == 1:
            asyncio.create_task(self.drive(self._propose_waiting))
        proposed = await future
        if proposed is None:
            raise NotLeaderError(f"node {self.config.node_id} is not the leader (leader: {self.core.leader_id})",
                                 self.core.leader_id)
        base_offset, epoch = proposed
        committed = self._commits.add(base_offset + len(values), epoch)
        # The core may have moved on while this coroutine waited for its turn: answer at once then.
        self._commits.committed(self.core.high_watermark, self.log.epoch_entries)
        self._commits.leadership(self.core.epoch, self.core.role is Role.LEADER, self.core.leader_id)
        async with asyncio.timeout(timeout_s):  # not wait_for: no waiter future and callbacks per commit
            await committed
        return base_offset

    async def new_leader(self, excluded: frozenset[int], limit_s: float) -> int:
        """The leader this node knows for its epoch once it is none of `excluded` (NO_NODE for "a
        leader at all"), waiting `limit_s` at most; whatever it knows then."""
        loop = asyncio.get_running_loop()
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(limit_s):
                while self.core.leader_id in excluded:
                    waiter: asyncio.Future[None] = loop.create_future()
                    self._leader_waiters.append(waiter)
                    try:
                        await waiter
                    finally:  # a LeaderChanged took it off already, unless the wait ended first
                        if waiter in self._leader_waiters:
                            self._leader_waiters.remove(waiter)
        return self.core.leader_id

    def _propose_waiting(self) -> list[raft.Action]:
        actions: list[raft.Action] = []
        now = wall_clock_ms()
        while self._proposals:
            values, future = self._proposals.popleft()
            base_offset, more = self.core.propose(values, now)
            actions.extend(more)
            if not future.done():
                future.set_result(None if base_offset is None else (base_offset, self.core.epoch))
        return actions

    async def _execute(self, action: raft.Action) -> list[raft.Action]:
        """Carry out one action other than AppendBatches (which `drive` groups); returns the
        actions of the event it causes (a snapshot taken or fetched), to be carried out next."""
        if isinstance(action, raft.PersistState):
            await self._persist(action)
        elif isinstance(action, raft.Truncate):
            await asyncio.to_thread(self.log.truncate_to, action.offset)
        elif isinstance(action, raft.Send):
            self._background(self._send(action.destination, action.message), rpc=True)
        elif isinstance(action, raft.Reply):
            future = self._replies.pop(action.request_id, None)
            if future is not None and not future.done():
                future.set_result(action.message)
        elif isinstance(action, raft.HighWatermarkAdvanced):
            # Replayed first: whoever waited for this commit then reads a state that holds it.
            self._update_lag_metrics(action.high_watermark)
            if action.high_watermark - self.replayer.applied_offset <= INLINE_REPLAY_RECORDS:
                captured = self._replayed(self.snapshot_actions.catch_up, action.high_watermark)  # cheaper inline
            else:
                captured = await asyncio.to_thread(self._replayed, self.snapshot_actions.catch_up,
                                                   action.high_watermark)
            self._check_later(captured)
            self._update_lag_metrics(action.high_watermark)
            if self.broker is not None:
                self.broker.image_replayed()
            self._commits.committed(action.high_watermark, self.log.epoch_entries)
        elif isinstance(action, raft.WriteSnapshotChunk):
            fetched = await asyncio.to_thread(self.snapshot_actions.write_chunk, action)
            if fetched is not None:
                return self.core.on_snapshot_fetched(fetched.snapshot_id, fetched.error, wall_clock_ms(),
                                                     fetched.cluster_id)
        elif isinstance(action, raft.AbandonSnapshotFetch):
            await asyncio.to_thread(self.snapshot_actions.abandon, action.snapshot_id)
        elif isinstance(action, raft.InstallSnapshot):
            if self.image_check is not None:
                await self.image_check.idle()  # the log it reads is about to be replaced
            captured = await asyncio.to_thread(self._replayed, self.snapshot_actions.install, action.snapshot_id)
            self._check_later(captured)
            self._update_lag_metrics(self.core.high_watermark)
            if self.broker is not None:
                self.broker.image_replayed()
        elif isinstance(action, raft.AdvanceLogStartOffset):
            if self.image_check is not None:
                await self.image_check.idle()  # segments and snapshots it may be reading are deleted
            await asyncio.to_thread(self.snapshot_actions.advance_log_start, action.offset)
        elif isinstance(action, raft.ClusterIdCommitted):
            self.replayer.cluster_id = action.cluster_id
            self.image_state.set_identity(cluster_id=action.cluster_id)
            await asyncio.to_thread(record_cluster_id, self.config, action.cluster_id)
            log.info("cluster id %s is committed; recorded in meta.properties", action.cluster_id)
        elif isinstance(action, raft.LeaderChanged):
            log.info("leader of epoch %d is node %d", action.epoch, action.leader_id)
            for waiter in self._leader_waiters:
                if not waiter.done():
                    waiter.set_result(None)
            self._leader_waiters.clear()
        elif isinstance(action, raft.Fatal):
            log.critical("fatal: %s", action.reason)
            self._fatal = action.reason
            self._stopped.set()
        return []

    async def _persist(self, action: raft.PersistState) -> None:
        """Write quorum-state: durable on return when the epoch or the vote changes, a moment later
        when only the leader's id does (`quorum.server.state_writer`)."""
        await self._state_writer.persist(QuorumState(action.epoch, action.leader_id, action.voted_id,
                                                     current_voters=tuple(v.node_id for v in self.config.voters)))

    def _replayed(self, step: Callable[[Any], object], argument: Any) -> tuple[MetadataImage, int] | None:
        """Run a replay step (on a worker thread); with `quorum.test.verify.image`, the image it built
        and the offset it reached, for `image_check` to compare off the core lock."""
        step(argument)
        if self.verifier is None:
            return None
        return self.image_state.image, self.replayer.applied_offset

    def _check_later(self, captured: tuple[MetadataImage, int] | None) -> None:
        if captured is not None and self.image_check is not None:
            self.image_check.submit(captured)

    def _image_divergence(self, captured: tuple[MetadataImage, int]) -> str | None:
        """Compare a captured image with a replay of snapshot plus log (on a worker thread, off the
        core lock): the difference, naming the field, or None."""
        image, applied_offset = captured
        assert self.verifier is not None
        try:
            self.verifier.check(image, applied_offset)
        except ImageDivergenceError as exc:
            return str(exc)
        stale = memo_difference(image, self.config.kip232_enabled) if self.broker is not None else None
        return None if stale is None else f"node {self.config.node_id} at offset {image.offset}: {stale}"

    def _stop_on_image_divergence(self, divergence: str) -> None:
        """Stop the node (exit 1): the image check found a difference."""
        log.critical("fatal: %s", divergence)
        self._fatal = self._fatal or divergence
        self._stopped.set()

    def _background(self, work: Coroutine[Any, Any, None], rpc: bool = False) -> None:
        """Run `work` as a task `run` can find at its end; none starts once the node is closing."""
        if self._closing:
            work.close()  # never started: nothing to wait for
            return
        task = asyncio.create_task(work)
        self._sends.add(task)
        task.add_done_callback(self._sends.discard)
        if rpc:
            self._rpcs.add(task)
            task.add_done_callback(self._rpcs.discard)

    async def _stop_raft_traffic(self) -> None:
        """Stop the chain of Raft requests before the peers and the metadata log close: from now on no
        event reaches the core (`drive`) and no request starts (`_background`); the requests in flight
        are cancelled and awaited. Taken under the core lock, so no `drive` is halfway through its
        actions (a cancelled one could leave a log write running on a worker thread)."""
        async with self._core_lock:
            self._closing = True
            rpcs = set(self._rpcs)
            for task in rpcs:
                task.cancel()
        if rpcs:  # a cancelled `_send` ends at its next await; bounded all the same
            _, stuck = await asyncio.wait(rpcs, timeout=STOP_SENDS_SECONDS)
            if stuck:
                log.warning("%d Raft request(s) still running %.0f s after being cancelled", len(stuck),
                            STOP_SENDS_SECONDS)

    def _leader_epoch(self) -> int | None:
        """This node's epoch while it leads the quorum (is the active controller), else None."""
        core = self.core
        return core.epoch if core.leader_id == self.config.node_id else None

    async def _snapshot_turns_forever(self) -> None:
        """Begin a snapshot when it is this node's turn (KIP-631); the active controller resigns first."""
        while True:
            await asyncio.sleep(SNAPSHOT_TURN_SECONDS)
            decision = self.snapshot_turns.decide(self._leader_epoch(), wall_clock_ms())
            if decision is OwnSnapshot.RESIGN:
                await self.drive(lambda: self.core.resign(wall_clock_ms()))
            elif decision is OwnSnapshot.SNAPSHOT:
                async with self._core_lock:  # replay must not change the state while it is captured
                    job = await asyncio.to_thread(self.snapshot_actions.begin_snapshot)
                if job is not None:
                    self._background(self._write_snapshot(job))

    async def _write_snapshot(self, job: SnapshotJob) -> None:
        """Write a snapshot off the core's path (the core keeps answering fetches and votes while
        a large state is written), then tell the core it exists (KIP-630 "snapshot finished")."""
        try:
            await asyncio.to_thread(job.write)
        except Exception as exc:  # a full disk, say: the log keeps everything, a later snapshot retries
            log.error("snapshot %s failed: %s", job.snapshot_id, exc)
            self.replayer.abandon_snapshot(job)
            return
        await self.drive(lambda: self.core.on_snapshot_created(self.snapshot_actions.finish_snapshot(job),
                                                               wall_clock_ms()))
        self._update_lag_metrics(self.core.high_watermark)

    def _update_lag_metrics(self, high_watermark: int) -> None:
        """KIP-631's MetadataLag and MetadataSnapshotLag at `high_watermark` (the metadata log's
        last stable offset: it has no transactions)."""
        self.metrics.set_metadata_lag(high_watermark, self.replayer.applied_offset)
        latest = self.snapshots.latest_snapshot()
        self.metrics.set_metadata_snapshot_lag(high_watermark, None if latest is None else latest.offset)

    async def _send(self, destination: int, message: raft.Message) -> None:
        peer = self.peers.get(destination)
        if peer is None:
            await self.drive(lambda: self.core.on_send_failed(destination, message, wall_clock_ms()))
            return
        api, version = raft_rpc.request_api(message)
        report = self.snapshot_turns.report() if isinstance(message, raft.FetchRequest) else None
        try:
            body = await peer.request(api, version, raft_rpc.encode_request(message, report))
        except PeerUnavailable as exc:
            gone = exc.gone
            if gone and destination == self.core.leader_id:
                log.info("%s to the leader, node %d, failed: %s (its process looks gone)", api.name, destination, exc)
            else:
                log.debug("%s to node %d failed: %s", api.name, destination, exc)
            await self.drive(lambda: self.core.on_send_failed(destination, message, wall_clock_ms(), gone))
            return
        try:
            response = raft_rpc.decode_response(api.key, body, message)
        except WireError as exc:
            log.warning("%s answer from node %d refused: %s", api.name, destination, exc)
            await self.drive(lambda: self.core.on_send_failed(destination, message, wall_clock_ms()))
            return
        if getattr(response, "error", ErrorCode.NONE) == ErrorCode.INCONSISTENT_CLUSTER_ID:
            log.error("%s to node %d (%s:%d) refused our cluster id %s: another cluster's node holds that address; "
                      "retrying, as Kafka does", api.name, destination, peer.host, peer.port, self.core.cluster_id)
        if report is not None:
            self.snapshot_turns.on_fetch_answer(raft_rpc.snapshot_granted_of(body), wall_clock_ms())
        await self.drive(lambda: self.core.on_response(destination, response, wall_clock_ms(), request=message))

    def _codecs_of_a_failover(self) -> list[tuple[Api, int]]:
        """The messages a failover and the first commits after it carry through this node: the Raft
        RPCs, the brokers' registration and heartbeats, and (tests and benchmarks only) the metadata
        writes' Produce; their codecs are compiled at start (`compile_codecs`)."""
        codecs = [(APIS[key], version) for key, version in raft_rpc.WIRE_VERSIONS.items()]
        codecs += [(api, api.max_version) for api in (BROKER_REGISTRATION, BROKER_HEARTBEAT)]  # as brokers send them
        if self.config.is_controller and self.config.test_metadata_writes:
            codecs.append((APIS[PRODUCE], METADATA_WRITES_PRODUCE_VERSION))
        return codecs

    async def _handle_raft_request(self, request: Request) -> Reply:
        try:
            sender, message = raft_rpc.decode_request(request.api.key, request.body)
        except MalformedRequestError as exc:
            # Kafka's KafkaRaftClient: a request for another topic partition is an INVALID_REQUEST answer.
            log.info("%s refused with INVALID_REQUEST: %s", request.api.name, exc)
            return Reply(request.api.response(error_code=ErrorCode.INVALID_REQUEST), request.version)
        request_id = next(self._request_ids)
        future: asyncio.Future[raft.Message] = asyncio.get_running_loop().create_future()
        self._replies[request_id] = future
        await self.drive(lambda: self.core.on_request(request_id, sender, message, wall_clock_ms()))
        answer = await future
        if getattr(answer, "error", ErrorCode.NONE) == ErrorCode.INCONSISTENT_CLUSTER_ID:
            log.warning("%s from node %d refused: its cluster id is not ours (%s)", request.api.name, sender,
                        self.core.cluster_id)
        granted = False
        if isinstance(message, raft.FetchRequest):  # KIP-631: a replica's Fetch is its heartbeat
            granted = self.snapshot_turns.answer_fetch(sender, raft_rpc.snapshot_report_of(request.body),
                                                       self._leader_epoch(), wall_clock_ms())
        return Reply(raft_rpc.encode_response(request.api.key, answer, granted), request.version)

    async def _tick_forever(self) -> None:
        """Tick when the core's next deadline comes (`next_deadline_ms`, as KafkaRaftClient's poll waits
        as long as its timers allow), at most every TICK_SECONDS; an event drives the core meanwhile and
        may set an earlier deadline, so it wakes the wait. Ticking every 10 ms cost an idle node about
        3% of a core (28 ms of CPU a second, measured on a 3+3 local cluster), most of the suite's
        dozens of idle nodes' CPU."""
        while not self._closing:  # ends even if a cancel was lost (3.11's wait_for drops one that races the event)
            await asyncio.sleep(TICK_SECONDS)
            self._core_moved.clear()
            deadline = self.core.next_deadline_ms()
            wait_ms = MAX_TICK_WAIT_SECONDS * 1000 if deadline is None else deadline - wall_clock_ms()
            if wait_ms > 0:
                try:
                    await asyncio.wait_for(self._core_moved.wait(), min(wait_ms / 1000, MAX_TICK_WAIT_SECONDS))
                    continue  # an event came first: look at the deadline again
                except TimeoutError:
                    pass
            await self.drive(lambda: self.core.tick(wall_clock_ms()))

    # -- committing through the quorum (the write path controllers and tests use) --------------

    # -- lifecycle -------------------------------------------------------------------------------

    async def run(self) -> int:
        """Serve until SIGTERM/SIGINT (exit 0) or a fatal condition (exit 1)."""
        loop = self._loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, self._stopped.set)
        try:
            for listener in self.listeners:
                await listener.start()
        except OSError as exc:  # the port is taken (a client's connection may hold it) or not ours to bind
            why = os.strerror(exc.errno).lower() if exc.errno else str(exc)
            return await self._refuse_to_start(f"cannot listen on {listener._host}:{listener._port}: {why}")
        if self.config.metrics_port is not None:
            port = self.metrics.serve(self.config.metrics_port)
            print(f"node {self.config.node_id} metrics on http://127.0.0.1:{port}/metrics", flush=True)
        role = "controller" if self.config.is_controller else "broker (observer)"
        print(f"node {self.config.node_id} ({role}) listening on {self.listener._host}:{self.listener.port}",
              flush=True)
        for listener in self.listeners[1:]:
            print(f"node {self.config.node_id} listener {listener.security.name} ({listener.security.protocol}) "
                  f"on {listener._host}:{listener.port}", flush=True)
        await self.drive(lambda: self.core.start(wall_clock_ms()))
        compile_codecs(self._codecs_of_a_failover())
        freeze_startup_heap()  # the collector's full passes stopped the loop 20-26 ms at a time
        tasks = [asyncio.create_task(self._tick_forever()), asyncio.create_task(self._snapshot_turns_forever())]
        if self.config.loop_stall_ms > 0:
            tasks.append(asyncio.create_task(StallWatch(self.config.loop_stall_ms / 1000).run()))
        if self.config.is_controller:  # a voter's failover messages go to the other voters
            tasks.append(asyncio.create_task(keep_connected(self.peers.values(), lambda: self._closing)))
        if self.controller_service is not None:
            tasks.append(asyncio.create_task(self.controller_service.tick_forever()))
        if self.broker is not None:
            tasks.extend(self.broker.tasks())
        await self._stopped.wait()
        stop = StopWatch(self.config.node_id, lambda: self._fatal)
        watching = asyncio.create_task(stop.watch(), name="stop-watch")
        if self._fatal is None and self.broker is not None:  # still serving while leaderships move away
            stop.begin("moving the broker's leaderships away (controlled shutdown)")
            await self.broker.lifecycle.controlled_shutdown()
        if self._fatal is None and self.config.is_controller:
            stop.begin("handing the quorum's leadership over")
            await self._resign_gracefully()
        stop.begin("stopping the Raft requests in flight")
        await self._stop_raft_traffic()
        for task in tasks:
            task.cancel()
        stop.begin("closing the listeners and their connections")
        for listener in self.listeners:
            await listener.close()
        stop.begin("closing the connections to other nodes")
        for peer in (*self.peers.values(), *self.controller_channels.values(), *self.lifecycle_channels.values(),
                     *self.metadata_write_channels.values()):
            await peer.close()
        if self.broker is not None:
            stop.begin("closing the broker's work (image applier, fetchers, leaderships, groups, logs)")
            await self.broker.close()
        self.snapshot_actions.drop_writers()  # a fetch in flight stays a .part, removed at the next start
        self.metrics.close()
        if self.image_check is not None:
            stop.begin("finishing the image check under way")
            await self.image_check.idle()
        stop.begin("making the metadata log and quorum state durable")
        if self._flusher is not None:  # what was appended is made durable before the log closes
            await asyncio.gather(self._flusher, return_exceptions=True)
        try:
            await self._state_writer.flush()
        except OSError as exc:  # the next start reads the last durable state: the same epoch and vote
            log.error("quorum-state could not be written as the node stopped: %s", exc)
        try:
            await asyncio.to_thread(self.log.close)
        except OSError as exc:  # a full or failed disk (the soak's): the next start recovers the log's tail
            log.error("the metadata log could not be flushed as it closed: %s", exc)
            self._fatal = self._fatal or f"the metadata log could not be flushed as it closed: {exc}"
        watching.cancel()
        if self.verifier is not None and self.image_check is not None:
            log.warning("image checked %d times against snapshot plus log (%d full replays, %d skipped: log start "
                        "past the snapshot; %d catch-ups' images superseded by a later one before their check)",
                        self.verifier.checks, self.verifier.full_replays, self.verifier.skipped,
                        self.image_check.superseded)
        print(f"node {self.config.node_id} stopped" + (f": {self._fatal}" if self._fatal else ""), flush=True)
        return 1 if self._fatal else 0

    async def _refuse_to_start(self, reason: str) -> int:
        """Exit 1 before serving anything, naming why in one line (the launcher reads it)."""
        log.critical("fatal: %s; not starting", reason)
        print(f"node {self.config.node_id} stopped: {reason}", flush=True)
        for listener in self.listeners:
            await listener.close()
        if self.broker is not None:
            await self.broker.close()
        self._closing = True
        await asyncio.to_thread(self.log.close)
        return 1

    async def _resign_gracefully(self) -> None:
        """A leader told to stop hands over at once (EndQuorumEpoch) instead of letting followers time
        out, and serves on until the quorum has a new leader, as Kafka's (`quorum.server.successor_wait`).
        Every stopping node, leader or not, starts no election from here on (`RaftCore.shutdown`)."""
        was_leader = self.core.role is Role.LEADER
        await self.drive(lambda: self.core.shutdown(wall_clock_ms()))
        if was_leader and self.peers:
            me = self.config.node_id
            await wait_for_successor(lambda: self.core.leader_id not in (NO_NODE, me),
                                     lambda s: self.new_leader(frozenset({NO_NODE, me}), s), self.peers.values())
        if self._sends:
            await asyncio.wait(set(self._sends), timeout=1.0)


def _superseded(pending: deque[raft.Action]) -> bool:
    """Whether another PersistState comes before anything leaves the node or touches the log: then
    a PersistState at the head of the rest need not be written (nobody saw it, and a crash before
    the later write recovers a state the core held just before). A successor told to campaign
    goes Unattached then Candidate in one call; a voter granting a newer epoch's vote likewise."""
    for action in pending:
        if isinstance(action, raft.PersistState):
            return True
        if not isinstance(action, raft.LeaderChanged):
            return False
    return False


def run_node(config: NodeConfig, remote: RemoteTier | None = None, out_of_range: OutOfRangePlugin | None = None) -> int:
    """Run one node until it stops; `remote` and `out_of_range` are what the entry point composed
    from `tiered_follower` for a broker with tiered storage (quorum itself never imports it)."""
    async def main() -> int:
        return await RaftNode(config, remote, out_of_range).run()

    keep_freed_buffers()  # megabyte buffers reused, not page-faulted in anew (quorum.server.allocator)
    return asyncio.run(main())


