"""A deterministic discrete-event simulation of a KRaft quorum, driving the real `RaftCore`.

Everything that varies comes from one seed: message delays, loss and duplication, flush latency,
which faults strike when, and each core's own random choices. Time is simulated, so a run of
tens of seconds takes a fraction of a second, and a failing seed replays exactly.

The driver here follows the same contract as the node shell: actions are carried out in order,
PersistState is durable at once, AppendBatches is durable only when the (delayed) flush event
fires (or at once if a later Send in the same list must not outrun it), and a crash keeps only
what was flushed. After every event the invariants of `invariants.py` are checked.

KIP-630 snapshots are real files: each node has a directory (under one temporary directory per
run) with its `SnapshotDirectory`, a `MetadataReplayer` that applies what is committed to a
`MetadataRecordsState` and snapshots by the scenario's policy, and `SnapshotActions` to carry out
the core's snapshot actions. What those report back to the core (a snapshot created, a fetched
one complete or refused) is fed to it once the whole action list is carried out, and the actions
of that call are carried out in turn, within the same event. Only the in-memory state is lost in a
crash; the files stay as kill -9 leaves them (a fetch or a write cut short leaves a `.part`, which
start-up must remove and never load).
"""

from __future__ import annotations

import dataclasses
import functools
import heapq
import os
import random
import re
import tempfile
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from quorum.image.replay import MetadataReplayer
from quorum.image.snapshot_actions import SnapshotActions
from quorum.image.snapshot_policy import SnapshotPolicy
from quorum.log.errors import SnapshotExistsError
from quorum.log.snapshot import SnapshotDirectory, SnapshotReader, SnapshotWriter
from quorum.log.snapshot_files import SnapshotState, snapshot_files
from quorum.raft.core import RaftCore
from quorum.raft.interface import (
    AbandonSnapshotFetch,
    Action,
    AdvanceLogStartOffset,
    AppendBatches,
    ClusterIdCommitted,
    Fatal,
    FetchSnapshotResponse,
    HighWatermarkAdvanced,
    InstallSnapshot,
    LeaderChanged,
    Message,
    OffsetAndEpoch,
    PersistState,
    QuorumConfig,
    Reply,
    Send,
    Truncate,
    VoteRequest,
    WriteSnapshotChunk,
)
from quorum.raft.state import Role
from quorum.server.successor_wait import SUCCESSOR_WAIT_S
from quorum.sim.invariants import InvariantChecker, InvariantViolation, RecordingState
from quorum.sim.memory_log import MemoryLog
from quorum.sim.network import LinkQuality, Network
from quorum.sim.scenarios import SCENARIOS, Scenario
from quorum.wire import metadata_records as mr
from quorum.wire.metadata_records import encode_metadata_record

MAX_EVENTS = 2_000_000
NEVER = 1 << 62
"""metadata.log.max.record.bytes.between.snapshots when the scenario has snapshots off."""
DEFAULT_SNAPSHOT_FETCH_MAX_BYTES = QuorumConfig(0, (0,)).snapshot_fetch_max_bytes
DEFAULT_START_OFFSET_LAG_TIME_MAX_MS = QuorumConfig(0, (0,)).start_offset_lag_time_max_ms
# How SnapshotActions reports a fetched file that failed validation: CorruptSnapshotError's
# message, which names the file and the byte.
_CORRUPT = re.compile(r"\.checkpoint\.part at byte \d+: ")


class SimulationFailure(AssertionError):
    """A run broke an invariant, lost liveness or crashed; the message ends with the replay command."""

    def __init__(self, seed: int, reason: str, command: str) -> None:
        self.seed = seed
        self.reason = reason
        self.command = command
        super().__init__(f"seed {seed}: {reason}\nreplay: {command}")


def sim_config(node_id: int, voters: tuple[int, ...], fetch_max_bytes: int = 1 << 20,
               snapshot_fetch_max_bytes: int = DEFAULT_SNAPSHOT_FETCH_MAX_BYTES,
               start_offset_lag_time_max_ms: int = DEFAULT_START_OFFSET_LAG_TIME_MAX_MS) -> QuorumConfig:
    """Kafka's quorum.* defaults, with a request timeout that lets a lost Fetch be retried before
    the fetch timeout gives up on the leader. A small fetch_max_bytes (one batch per response)
    makes followers catch up batch by batch, which is where high watermark rules get tested; a
    small snapshot_fetch_max_bytes makes a snapshot come in many chunks, which a crash can cut."""
    return QuorumConfig(node_id=node_id, voters=voters, request_timeout_ms=1000, fetch_max_bytes=fetch_max_bytes,
                        snapshot_fetch_max_bytes=snapshot_fetch_max_bytes,
                        start_offset_lag_time_max_ms=start_offset_lag_time_max_ms)


def _scratch_root() -> str | None:
    """Where the runs' snapshot directories go: tmpfs when there is one (the simulator needs real
    files, not a disk's fsync latency), else the default temporary directory."""
    shm = "/dev/shm"
    return shm if os.path.isdir(shm) and os.access(shm, os.W_OK | os.X_OK) else None


class MetadataWorkload:
    """Proposals of KIP-631 metadata records that keep changing a few entities: ConfigRecords over
    ten (resource, name) keys, some with a null value (a delete), and broker registrations,
    fencing and unregistrations for four broker ids. The state stays small while the log grows,
    so the changed-records ratio fills and snapshots happen, and digests stay cheap."""

    CONFIG_KEYS = tuple((f"topic-{i // 2}", ("retention.ms", "cleanup.policy")[i % 2]) for i in range(10))
    BROKERS = (1, 2, 3, 4)

    def __init__(self, rng: random.Random) -> None:
        self._rng = rng

    def values(self) -> list[bytes]:
        rng = self._rng
        return [self._one(rng) for _ in range(rng.randint(1, 3))]

    def _one(self, rng: random.Random) -> bytes:
        roll = rng.random()
        if roll < 0.75:
            resource, name = rng.choice(self.CONFIG_KEYS)
            value = None if roll < 0.1 else str(rng.randint(0, 99))
            return _config_record(resource, name, value)
        broker = rng.choice(self.BROKERS)
        epoch = rng.randint(1, 9)
        if roll < 0.88:
            return _broker_record("register", broker, epoch)
        if roll < 0.97:
            return _broker_record("fence" if roll < 0.925 else "unfence", broker, epoch)
        return _broker_record("unregister", broker, epoch)


@functools.lru_cache(maxsize=4096)
def _config_record(resource: str, name: str, value: str | None) -> bytes:
    return encode_metadata_record(mr.ConfigRecord(version=0, resource_type=2, resource_name=resource, name=name,
                                                  value=value))


@functools.lru_cache(maxsize=4096)
def _broker_record(kind: str, broker: int, epoch: int) -> bytes:
    if kind == "register":
        record = mr.RegisterBrokerRecord(version=0, broker_id=broker, incarnation_id=uuid.UUID(int=broker),
                                         broker_epoch=epoch, end_points=[], features=[], rack=None, fenced=True)
    elif kind == "fence":
        record = mr.FenceBrokerRecord(version=0, id=broker, epoch=epoch)
    elif kind == "unfence":
        record = mr.UnfenceBrokerRecord(version=0, id=broker, epoch=epoch)
    else:
        record = mr.UnregisterBrokerRecord(version=0, broker_id=broker, broker_epoch=epoch)
    return encode_metadata_record(record)


@dataclass
class RunStats:
    seed: int
    elections: int = 0
    max_epoch: int = 0
    committed_offset: int = 0
    proposals: int = 0
    faults: int = 0
    events: int = 0
    sim_ms: int = 0
    recovery_ms: int = 0
    failovers: int = 0  # `failover` faults: leaders killed and replaced within the deadline
    max_failover_ms: int = 0  # the longest of them, from the kill to a commit by the successor
    # KIP-630
    snapshots_taken: int = 0  # written by a node's replayer (the policy said so)
    snapshots_fetched: int = 0  # fetched from a leader, validated and renamed
    snapshots_installed: int = 0  # InstallSnapshot carried out (a fetched snapshot loaded)
    log_start_advances: int = 0  # AdvanceLogStartOffset carried out
    corrupt_chunks: int = 0  # FetchSnapshot responses whose data had a byte flipped in flight
    corrupt_snapshots_refused: int = 0  # fetched files refused by validation (CorruptSnapshotError)
    fetch_crashes: int = 0  # nodes killed with a fetched snapshot's .part open
    write_crashes: int = 0  # nodes killed in the middle of writing a snapshot
    partial_snapshots_cleaned: int = 0  # .part files start-up removed


@dataclass
class SimNode:
    """One simulated server: its durable state (log, quorum-state, meta.properties) and its core."""

    node_id: int
    config: QuorumConfig
    log: MemoryLog = field(default_factory=MemoryLog)
    quorum_state: PersistState | None = None
    meta_cluster_id: str | None = None
    core: RaftCore | None = None
    incarnation: int = 0
    requests: dict[int, tuple[int, int, Message]] = field(default_factory=dict)
    next_request_id: int = 0
    tick_at: int | None = None
    flush_at: int | None = None
    # KIP-630: the snapshot files live in `directory` across restarts; the rest is memory, made
    # anew at each start and dropped at each crash.
    directory: Path | None = None
    snapshots: SnapshotDirectory | None = None
    replayer: MetadataReplayer | None = None
    actions: SnapshotActions | None = None

    @property
    def alive(self) -> bool:
        return self.core is not None

    @property
    def epoch(self) -> int:
        return self.core.epoch if self.core else -1

    @property
    def role(self) -> Role | None:
        return self.core.role if self.core else None

    @property
    def high_watermark(self) -> int:
        return self.core.high_watermark if self.core else 0


class Simulation:
    """One seeded run: `run()` returns its stats or raises SimulationFailure."""

    def __init__(self, seed: int, voters: int = 3, observers: int = 0, scenario: str | Scenario = "chaos",
                 duration_ms: int | None = None, trace: Callable[[str], None] | None = None) -> None:
        if voters < 1:
            raise ValueError("at least one voter")
        self.seed = seed
        self.scenario = SCENARIOS[scenario] if isinstance(scenario, str) else scenario
        self.duration_ms = self.scenario.duration_ms if duration_ms is None else duration_ms
        self.voter_ids = tuple(range(1, voters + 1))
        self.observer_ids = tuple(range(voters + 1, voters + observers + 1))
        self.rng = random.Random(seed)
        self.now = 0
        self.stats = RunStats(seed)
        snapshots_on = self.scenario.snapshot_bytes is not None
        self.checker = InvariantChecker(self.voter_ids, check_states=snapshots_on)
        self.network = Network(random.Random(self.rng.getrandbits(64)), LinkQuality(
            self.scenario.loss, self.scenario.duplicate, self.scenario.min_delay_ms, self.scenario.max_delay_ms))
        fetch_max_bytes = self.rng.choice((1 << 20, 1 << 20, 4096, 300))
        # Scenarios without snapshots draw nothing more, so their seeds replay as they always have.
        snapshot_fetch_max_bytes = (self.rng.choice((128, 256, 512, 1 << 20)) if snapshots_on
                                    else DEFAULT_SNAPSHOT_FETCH_MAX_BYTES)
        self.nodes = {i: SimNode(i, sim_config(i, self.voter_ids, fetch_max_bytes, snapshot_fetch_max_bytes,
                                               self.scenario.start_offset_lag_time_max_ms))
                      for i in self.voter_ids + self.observer_ids}
        self.policy = SnapshotPolicy(0.5, NEVER if self.scenario.snapshot_bytes is None
                                     else self.scenario.snapshot_bytes)
        self._workload = MetadataWorkload(self.rng) if snapshots_on else None
        self._root: str | None = None  # the run's temporary directory, while it runs
        self._trace = trace
        self._queue: list[tuple[int, int, Callable[..., None], tuple[Any, ...]]] = []
        self._seq = 0
        self._faulting = True
        self._event: tuple[int, tuple[object, ...]] = (0, ("start",))
        self._network_fault_until = 0
        self._expected_fatal = False
        self._failover: tuple[int, int, int] | None = None  # (killed leader's epoch, killed at, deadline)
        self._failover_down: list[int] = []  # voters the failover fault killed, oldest first
        self._stopping: dict[int, int] = {}  # node -> incarnation told to `shutdown` (graceful_stop)

    # -----------------------------------------------------------------------------------------
    # Running.

    @property
    def command(self) -> str:
        parts = [f"python -m quorum.sim --seed {self.seed} --voters {len(self.voter_ids)}",
                 f"--observers {len(self.observer_ids)} --scenario {self.scenario.name}"]
        if self.duration_ms != self.scenario.duration_ms:
            parts.append(f"--duration-ms {self.duration_ms}")
        return " ".join(parts)

    def run(self) -> RunStats:
        with tempfile.TemporaryDirectory(prefix=f"quorum-sim-{self.seed}-", dir=_scratch_root()) as root:
            self._root = root
            for node in self.nodes.values():
                node.directory = Path(root) / f"n{node.node_id}"
                node.directory.mkdir()
            try:
                return self._run_checked()
            finally:
                for node in self.nodes.values():
                    if node.actions is not None:
                        node.actions.drop_writers()  # close the fetches' files before they go
                self._root = None

    def _run_checked(self) -> RunStats:
        try:
            self._run()
        except (SimulationFailure, BrokenPipeError):
            raise
        except InvariantViolation as exc:
            raise SimulationFailure(self.seed, f"t={self.now}ms: invariant violated: {exc} [{self._describe_event()}]",
                                    self.command) from exc
        except Exception as exc:
            reason = f"t={self.now}ms: {type(exc).__name__}: {exc} [{self._describe_event()}]"
            raise SimulationFailure(self.seed, reason, self.command) from exc
        return self.stats

    def _run(self) -> None:
        for node in self.nodes.values():
            self._at(self.rng.randint(0, 50), self._restart, node.node_id)
        if self.scenario.faults:
            self._at(self._between(self.scenario.fault_every_ms), self._inject)
        if self.scenario.long_outage:
            self._at(self._between((300, 1500)), self._long_outage)
        self._at(self._between(self.scenario.propose_every_ms), self._propose)
        self._run_until(self.duration_ms)
        self._settle()
        self.stats.elections = len(self.checker.leaders)
        self.stats.max_epoch = max(self.checker.epochs.values(), default=0)
        self.stats.committed_offset = self.checker.committed_end
        self.stats.sim_ms = self.now

    def _run_until(self, until: int, done: Callable[[], bool] | None = None) -> bool:
        queue = self._queue
        nodes = self.nodes.values()
        check = self.checker.check
        while queue and queue[0][0] <= until:
            at, _, fn, args = heapq.heappop(queue)
            self.now = at
            fn(*args)
            self.stats.events += 1
            if self.stats.events > MAX_EVENTS:
                raise SimulationFailure(self.seed, f"more than {MAX_EVENTS} events: a livelock", self.command)
            check(nodes)
            if done is not None and done():
                return True
        self.now = max(self.now, until)
        return False

    def _settle(self) -> None:
        """End of faults: heal, restart, and demand that a new record commits everywhere."""
        self._faulting = False
        self.network.heal()
        self.network.quality = LinkQuality(0.0, 0.0, self.scenario.min_delay_ms, self.scenario.max_delay_ms)
        for node in self.nodes.values():
            if not node.alive:
                self._restart(node.node_id)
        started = self.now
        deadline = started + self.scenario.settle_ms
        sentinel: list[int] = []  # end offset, epoch

        def propose_sentinel() -> None:
            """Propose, and propose again whenever the leader that took it is gone (its entry may be too)."""
            if self.now > deadline:
                return
            self._at(100, propose_sentinel)
            leaders = self._leaders()
            if sentinel and any(n.epoch == sentinel[1] for n in leaders):
                return
            for node in leaders:
                base, actions = node.core.propose([b"sentinel"], self.now)
                self._execute(node, actions)
                self._schedule_tick(node, after_tick=False)
                if base is not None:
                    sentinel[:] = [base + 1, node.epoch]
                    return

        self._at(0, propose_sentinel)

        def everyone_has_it() -> bool:
            return bool(sentinel) and all(n.alive and n.high_watermark >= sentinel[0] for n in self.nodes.values())

        if not self._run_until(deadline, everyone_has_it):
            states = ", ".join(f"{n.node_id}:{n.role.value if n.role else 'down'}@{n.epoch} hw={n.high_watermark} "
                               f"end={n.log.end_offset}" for n in self.nodes.values())
            raise SimulationFailure(self.seed, f"no progress within {self.scenario.settle_ms} ms after the faults "
                                               f"stopped (sentinel {sentinel}): {states}", self.command)
        self.stats.recovery_ms = self.now - started

    # -----------------------------------------------------------------------------------------
    # The event queue.

    def _at(self, delay_ms: int, fn: Callable[..., None], *args: Any) -> None:
        self._seq += 1
        heapq.heappush(self._queue, (self.now + delay_ms, self._seq, fn, args))

    def _between(self, bounds: tuple[int, int]) -> int:
        return self.rng.randint(*bounds)

    def _log(self, node_id: int, *what: object) -> None:
        """Remember the event being processed (formatted only for a trace or a failure)."""
        self._event = (node_id, what)
        if self._trace is not None:
            self._trace(f"{self.now:>8} {f'n{node_id}' if node_id else '--'} {self._event_text()}")

    def _event_text(self) -> str:
        return " ".join(_short(part) if not isinstance(part, str) else part for part in self._event[1])

    def _sanitize(self, text: str) -> str:
        """A path under the run's temporary directory, as `<sim>/n2/...`: traces replay byte for byte."""
        return text.replace(self._root, "<sim>") if self._root else text

    def _describe_event(self) -> str:
        node_id = self._event[0]
        return f"node {node_id}: {self._event_text()}" if node_id else self._event_text()

    # -----------------------------------------------------------------------------------------
    # Driving cores.

    def _run_core(self, node: SimNode, what: tuple[object, ...], call: Callable[[RaftCore], list[Action]]) -> None:
        self._log(node.node_id, *what)
        actions = call(node.core)
        self._execute(node, actions)
        self._schedule_tick(node, after_tick=False)

    def _execute(self, node: SimNode, actions: list[Action]) -> None:
        """Carry out `actions`; then feed the core what they produced (a snapshot created, a fetched
        one complete or refused), one call at a time, carrying out each call's actions in turn."""
        followups: list[tuple[tuple[object, ...], Callable[[RaftCore], list[Action]]]] = []
        self._carry_out(node, actions, followups)
        while followups and node.alive:
            what, call = followups.pop(0)
            self._log(node.node_id, *what)
            self._carry_out(node, call(node.core), followups)

    def _carry_out(self, node: SimNode, actions: list[Action],
                   followups: list[tuple[tuple[object, ...], Callable[[RaftCore], list[Action]]]]) -> None:
        appended = False
        flushed_now = False
        for action in actions:
            if not node.alive:
                return
            kind = type(action)
            if self._trace is not None and kind is not HighWatermarkAdvanced:
                self._trace(f"{self.now:>8} n{node.node_id}   -> {_short(action)}")
            if kind is Send or kind is Reply:
                if appended:  # an append must be durable before anything after it leaves the node
                    node.log.flush()
                    appended, flushed_now = False, True
                if kind is Send:
                    if isinstance(action.message, VoteRequest) and self._stopping.get(node.node_id) == node.incarnation:
                        raise InvariantViolation(f"node {node.node_id} campaigns while stopping (graceful_stop): "
                                                 f"{_short(action.message)}")
                    self._send_request(node, action.destination, action.message)
                else:
                    self._send_reply(node, action.request_id, action.message)
            elif kind is AppendBatches:
                node.log.append(action.batches)
                if node.log.end_offset != action.end_offset:
                    raise AssertionError(f"append ended at {node.log.end_offset}, core expected {action.end_offset}")
                appended = True
            elif kind is PersistState:
                node.quorum_state = action
            elif kind is Truncate:
                node.log.truncate(action.offset)
            elif kind is HighWatermarkAdvanced:
                self.checker.observe_commit(node.node_id, node.log, action.high_watermark)
                created = node.actions.committed(action.high_watermark)
                if created is not None:
                    self.stats.snapshots_taken += 1
                    with SnapshotReader.open(node.snapshots.directory, created) as reader:
                        header_id = reader.cluster_id
                    self.checker.check_snapshot_cluster_id(node.node_id, created, created.offset, header_id, "written")
                    followups.append((("snapshot created", created),
                                      lambda core, created=created: core.on_snapshot_created(created, self.now)))
            elif kind is ClusterIdCommitted:
                node.meta_cluster_id = action.cluster_id
                node.replayer.cluster_id = action.cluster_id
            elif kind is LeaderChanged:
                pass
            elif kind is WriteSnapshotChunk:
                self._write_chunk(node, action, followups)
            elif kind is AbandonSnapshotFetch:
                node.actions.abandon(action.snapshot_id)
            elif kind is InstallSnapshot:
                self._install(node, action.snapshot_id)
            elif kind is AdvanceLogStartOffset:
                self._check_log_start_target(node, action.offset)
                node.actions.advance_log_start(action.offset)
                self.stats.log_start_advances += 1
            elif kind is Fatal:
                if not self._expected_fatal:
                    raise SimulationFailure(self.seed, f"t={self.now}ms: node {node.node_id} stopped: {action.reason}",
                                            self.command)
                self._kill(node.node_id)
                return
            else:
                raise TypeError(f"unknown action {action!r}")
        if appended and node.flush_at is None:
            node.flush_at = self.now + self._between(self.scenario.flush_delay_ms)
            self._at(node.flush_at - self.now, self._flush, node.node_id, node.incarnation)
        if flushed_now:
            self._at(0, self._flushed, node.node_id, node.incarnation)

    def _write_chunk(self, node: SimNode, action: WriteSnapshotChunk,
                     followups: list[tuple[tuple[object, ...], Callable[[RaftCore], list[Action]]]]) -> None:
        outcome = node.actions.write_chunk(action)
        if outcome is None:
            chance = self.scenario.kill_mid_fetch
            if chance and self._faulting and self.rng.random() < chance:
                self._at(0, self._crash_fetching, node.node_id, node.incarnation)
            return
        if outcome.error is None:
            self.stats.snapshots_fetched += 1
            self.checker.check_snapshot_cluster_id(node.node_id, outcome.snapshot_id, outcome.snapshot_id.offset,
                                                   outcome.cluster_id, "fetched")
            what: tuple[object, ...] = ("snapshot fetched", outcome.snapshot_id)
        else:
            if _CORRUPT.search(outcome.error):
                self.stats.corrupt_snapshots_refused += 1
            what = ("snapshot fetched", outcome.snapshot_id, f"refused: {self._sanitize(outcome.error)}")
        followups.append((what, lambda core: core.on_snapshot_fetched(outcome.snapshot_id, outcome.error, self.now,
                                                                      outcome.cluster_id)))

    @staticmethod
    def _check_log_start_target(node: SimNode, offset: int) -> None:
        """KIP-630, "When to Increase the LogStartOffset": the leader only to the end offset of a
        snapshot it has; a follower or observer never past its own latest snapshot."""
        held = node.snapshots.snapshots
        if node.core.role is Role.LEADER:
            if not any(s.offset == offset for s in held):
                raise InvariantViolation(f"node {node.node_id}, the leader, moves its log start offset to {offset}, "
                                         f"where none of its snapshots {held} ends")
        elif not held or max(s.offset for s in held) < offset:
            raise InvariantViolation(f"node {node.node_id} moves its log start offset to {offset}, past its latest "
                                     f"snapshot (snapshots: {held})")

    def _install(self, node: SimNode, snapshot_id: OffsetAndEpoch) -> None:
        if node.core.role is Role.LEADER:
            raise InvariantViolation(f"node {node.node_id}, leader of epoch {node.epoch}, loads the fetched snapshot "
                                     f"{snapshot_id}: a leader never loads a fetched snapshot")
        # The in-memory log chains digests over its prefix: the snapshot stands for the committed one.
        prefix = self.checker.committed_digests.get(snapshot_id.offset)
        if prefix is None:
            raise InvariantViolation(f"node {node.node_id} installs snapshot {snapshot_id}, which does not end at a "
                                     f"batch boundary of the committed log [0, {self.checker.committed_end})")
        node.actions.install(snapshot_id, prefix_digest=prefix)
        self.stats.snapshots_installed += 1

    def _schedule_tick(self, node: SimNode, after_tick: bool) -> None:
        if not node.alive:
            return
        deadline = node.core.next_deadline_ms()
        if deadline is None:
            return
        # A tick that leaves its own deadline in the past must not spin at the same instant.
        at = max(deadline, self.now + 1 if after_tick else self.now)
        if node.tick_at is not None and node.tick_at <= at:
            return
        node.tick_at = at
        self._at(at - self.now, self._tick, node.node_id, node.incarnation, at)

    def _tick(self, node_id: int, incarnation: int, at: int) -> None:
        node = self.nodes[node_id]
        if node.incarnation != incarnation or not node.alive or node.tick_at != at:
            return
        node.tick_at = None
        self._log(node_id, "tick")
        self._execute(node, node.core.tick(self.now))
        self._schedule_tick(node, after_tick=True)

    def _flush(self, node_id: int, incarnation: int) -> None:
        node = self.nodes[node_id]
        if node.incarnation != incarnation or not node.alive:
            return
        node.flush_at = None
        node.log.flush()
        self._flushed(node_id, incarnation)

    def _flushed(self, node_id: int, incarnation: int) -> None:
        node = self.nodes[node_id]
        if node.incarnation != incarnation or not node.alive:
            return
        offset = node.log.flushed_offset
        self._run_core(node, ("flushed to", str(offset)), lambda core: core.on_flushed(offset, self.now))

    # -----------------------------------------------------------------------------------------
    # Messages.

    def _send_request(self, node: SimNode, destination: int, message: Message) -> None:
        for delay in self.network.delays(node.node_id, destination):
            self._at(delay, self._deliver_request, node.node_id, node.incarnation, destination, message)

    def _deliver_request(self, source: int, source_incarnation: int, destination: int, message: Message) -> None:
        target = self.nodes[destination]
        if not target.alive:
            # Connection refused: the sender hears of it shortly.
            self._at(self.rng.randint(1, 5), self._send_failed, source, source_incarnation, destination, message)
            return
        request_id = target.next_request_id
        target.next_request_id += 1
        target.requests[request_id] = (source, source_incarnation, message)
        self._run_core(target, (f"<- {source}", message),
                       lambda core: core.on_request(request_id, source, message, self.now))

    def _send_failed(self, source: int, incarnation: int, destination: int, message: Message) -> None:
        node = self.nodes[source]
        if node.incarnation != incarnation or not node.alive:
            return
        self._run_core(node, (f"send to {destination} failed:", message),
                       lambda core: core.on_send_failed(destination, message, self.now))

    def _send_reply(self, node: SimNode, request_id: int, message: Message) -> None:
        entry = node.requests.pop(request_id, None)
        if entry is None:
            raise AssertionError(f"node {node.node_id} answered request {request_id} twice or never got it")
        requester, requester_incarnation, request = entry
        for delay in self.network.delays(node.node_id, requester):
            self._at(delay, self._deliver_response, node.node_id, requester, requester_incarnation, message, request)

    def _deliver_response(self, source: int, destination: int, incarnation: int, message: Message,
                          request: Message) -> None:
        node = self.nodes[destination]
        if node.incarnation != incarnation or not node.alive:
            return
        chance = self.scenario.corrupt_snapshot_chunks
        if (chance and self._faulting and type(message) is FetchSnapshotResponse and message.data
                and self.rng.random() < chance):
            message = self._flip_a_byte(message)
        self._run_core(node, (f"<- {source}", message),
                       lambda core: core.on_response(source, message, self.now, request))

    def _flip_a_byte(self, message: FetchSnapshotResponse) -> FetchSnapshotResponse:
        """Damage in flight that no transport checksum caught: one byte of the snapshot data."""
        data = bytearray(message.data)
        position = self.rng.randrange(len(data))
        data[position] ^= self.rng.randint(1, 255)
        self.stats.corrupt_chunks += 1
        self._log(0, f"flipped the byte at {message.position + position} of snapshot {message.snapshot_id} in flight")
        return dataclasses.replace(message, data=bytes(data))

    # -----------------------------------------------------------------------------------------
    # Nodes coming and going.

    def _restart(self, node_id: int) -> None:
        node = self.nodes[node_id]
        if node.alive:
            return
        self._open_storage(node)
        rng = random.Random(f"{self.seed}/{node_id}/{node.incarnation}")
        node.core = RaftCore(node.config, node.log, node.quorum_state, node.meta_cluster_id, rng, self.now,
                             snapshots=node.snapshots)
        self._run_core(node, ("start, incarnation", str(node.incarnation)), lambda core: core.start(self.now))

    def _open_storage(self, node: SimNode) -> None:
        """What start-up does before the core is built (as the node shell does): the replayer
        removes the `.part` files a crash left and loads the latest snapshot."""
        assert node.directory is not None
        partial = {f.snapshot_id for f in snapshot_files(node.directory) if f.state is SnapshotState.PARTIAL}
        snapshots = SnapshotDirectory(node.directory)
        latest = snapshots.latest_snapshot()
        if latest is not None:
            # boot() does this too, without the digest of the prefix that the in-memory log needs
            # when the snapshot is ahead of it.
            node.log.set_snapshot_boundary(latest, prefix_digest=self.checker.committed_digests.get(latest.offset))
        replayer = MetadataReplayer(node.directory, node.log, RecordingState(self.checker, node.node_id), self.policy,
                                    snapshots=snapshots)
        loaded = replayer.boot()
        left = [f.path.name for f in snapshot_files(node.directory) if f.state is not SnapshotState.COMPLETE]
        if left:
            raise InvariantViolation(f"node {node.node_id}: start-up left unfinished snapshot files {left}")
        only_partial = partial - set(snapshots.snapshots)
        if loaded is not None and loaded in only_partial:
            raise InvariantViolation(f"node {node.node_id} loaded snapshot {loaded}, whose file was unfinished")
        if partial:
            self.stats.partial_snapshots_cleaned += len(partial)
            self._log(node.node_id, "start-up removed unfinished snapshot(s)",
                      ", ".join(str((p.offset, p.epoch)) for p in sorted(partial, key=lambda p: p.offset)))
        if node.meta_cluster_id is None and replayer.cluster_id is not None:
            node.meta_cluster_id = replayer.cluster_id  # committed: a snapshot holds committed records only
        replayer.cluster_id = node.meta_cluster_id
        node.snapshots = snapshots
        node.replayer = replayer
        node.actions = SnapshotActions(replayer, snapshots)

    def _kill(self, node_id: int) -> None:
        node = self.nodes[node_id]
        if not node.alive:
            return
        self._log(node_id, "killed")
        node.core = None
        if node.actions is not None:
            node.actions.drop_writers()  # a fetch in flight leaves its .part as it is
        node.snapshots = node.replayer = node.actions = None
        node.log.crash()
        node.requests.clear()
        node.incarnation += 1
        node.tick_at = None
        node.flush_at = None

    def _leaders(self) -> list[SimNode]:
        return [n for n in self.nodes.values() if n.alive and n.core.role is Role.LEADER]

    # -----------------------------------------------------------------------------------------
    # The workload and the faults.

    def _propose(self) -> None:
        if self._faulting:
            self._at(self._between(self.scenario.propose_every_ms), self._propose)
        leaders = self._leaders()
        if not leaders:
            return
        node = self.rng.choice(leaders)
        if self._workload is None:
            value = self.rng.getrandbits(64).to_bytes(8, "big")
            values = [value] * self.rng.randint(1, 3)
        else:
            values = self._workload.values()
        self._log(node.node_id, "propose")
        base, actions = node.core.propose(values, self.now)
        self._execute(node, actions)
        self._schedule_tick(node, after_tick=False)
        if base is not None:
            self.stats.proposals += 1

    def _inject(self) -> None:
        if not self._faulting:
            return
        self._at(self._between(self.scenario.fault_every_ms), self._inject)
        fault = self.rng.choice(self.scenario.faults)
        self.stats.faults += 1
        self._log(0, f"fault: {fault}")
        getattr(self, f"_fault_{fault}")()

    def _network_fault(self, duration: tuple[int, int]) -> bool:
        """Start a network fault unless one is under way; schedules its healing."""
        if self.now < self._network_fault_until:
            return False
        length = self._between(duration)
        self._network_fault_until = self.now + length
        self._at(length, self._heal)
        return True

    def _heal(self) -> None:
        self._log(0, "network healed")
        self.network.heal()
        self.network.quality = LinkQuality(self.scenario.loss, self.scenario.duplicate, self.scenario.min_delay_ms,
                                           self.scenario.max_delay_ms)

    def _fault_partition(self) -> None:
        if self._network_fault((1000, 6000)):
            ids = list(self.nodes)
            self.rng.shuffle(ids)
            cut = self.rng.randint(1, max(1, len(ids) - 1))
            self.network.partition(ids[:cut], ids[cut:], symmetric=True)
            self._log(0, f"partition {sorted(ids[:cut])} | {sorted(ids[cut:])}")

    def _fault_asymmetric(self) -> None:
        if self._network_fault((1000, 6000)):
            ids = list(self.nodes)
            for _ in range(self.rng.randint(1, len(ids))):
                a, b = self.rng.sample(ids, 2) if len(ids) > 1 else (ids[0], ids[0])
                if a != b:
                    self.network.cut(a, b)
            self._log(0, f"cut links {sorted(self.network.cut_links)}")

    def _fault_isolate_leader(self) -> None:
        leaders = self._leaders()
        if leaders and self._network_fault((2500, 7000)):
            self.network.isolate(leaders[0].node_id, self.nodes)
            self._log(0, f"isolate leader {leaders[0].node_id}")

    def _fault_flaky(self) -> None:
        if self._network_fault((1000, 4000)):
            self.network.quality = LinkQuality(0.3, 0.1, 1, 150)

    def _long_outage(self) -> None:
        """One voter (if the others still make a majority) and the first observer go down for long."""
        victims: list[int] = []
        if len(self.voter_ids) >= 3:
            leaders = {n.node_id for n in self._leaders()}
            victims.append(self.rng.choice([v for v in self.voter_ids if v not in leaders]))
        if self.observer_ids:
            victims.append(self.observer_ids[0])
        self._log(0, f"long outage of {victims}")
        length = self._between(self.scenario.outage_ms)
        for victim in victims:
            self._kill(victim)
            self._at(length, self._restart, victim)

    def _fault_outage(self) -> None:
        """A replica other than the leader down long enough for the log start offset to pass it."""
        leaders = {n.node_id for n in self._leaders()}
        alive = [n.node_id for n in self.nodes.values() if n.alive and n.node_id not in leaders]
        if alive:
            victim = self.rng.choice(alive)
            self._kill(victim)
            self._at(self._between(self.scenario.outage_ms), self._restart, victim)

    def _crash_fetching(self, node_id: int, incarnation: int) -> None:
        """kill -9 of a replica in the middle of fetching a snapshot (its .part is open)."""
        node = self.nodes[node_id]
        if node.incarnation != incarnation or not node.alive or not self._has_partial(node):
            return
        self.stats.fetch_crashes += 1
        self._log(0, f"killing node {node_id} in the middle of a snapshot fetch")
        self._kill(node_id)
        self._at(self._between((200, 3000)), self._restart, node_id)

    @staticmethod
    def _has_partial(node: SimNode) -> bool:
        assert node.directory is not None
        return any(f.state is SnapshotState.PARTIAL for f in snapshot_files(node.directory))

    def _fault_crash_writing_snapshot(self) -> None:
        """kill -9 of a replica in the middle of writing a snapshot of its state."""
        candidates = []
        for node in self.nodes.values():
            if not node.alive or node.replayer.applied_epoch is None:
                continue
            latest = node.snapshots.latest_snapshot()
            if node.replayer.applied_offset > (latest.offset if latest is not None else 0):
                candidates.append(node)
        if not candidates:
            return
        node = self.rng.choice(candidates)
        if not self._write_torn_snapshot(node):
            return
        self.stats.write_crashes += 1
        self._log(0, f"killing node {node.node_id} in the middle of writing a snapshot")
        self._kill(node.node_id)
        self._at(self._between((200, 3000)), self._restart, node.node_id)

    @staticmethod
    def _write_torn_snapshot(node: SimNode) -> bool:
        """Start writing the snapshot the replayer would write now, and stop half-way as kill -9 does.

        SnapshotWriter has no public way to let go of its file without removing it (its `abort`
        and context manager delete the `.part`; `SnapshotFetchWriter.close_without_cleanup` is the
        fetch side's), so this closes the writer's descriptor itself: the `.part` stays with the
        header and the batches written so far, exactly what the process's death would leave.
        """
        replayer = node.replayer
        assert replayer is not None and replayer.applied_epoch is not None and node.directory is not None
        snapshot_id = OffsetAndEpoch(replayer.applied_offset, replayer.applied_epoch)
        timestamp = replayer.last_contained_timestamp
        try:
            writer = SnapshotWriter(node.directory, snapshot_id, timestamp, timestamp_ms=max(timestamp, 0),
                                    cluster_id=replayer.cluster_id, max_batch_bytes=64)
        except SnapshotExistsError:
            return False
        values = replayer.state.snapshot_values()
        writer.append(values[:max(1, len(values) // 2)])  # batches of 64 bytes: some reach the file
        writer.close_without_cleanup()  # the process dies here
        return True

    def _fault_crash(self) -> None:
        alive = [n.node_id for n in self.nodes.values() if n.alive]
        if alive:
            victim = self.rng.choice(alive)
            self._kill(victim)
            self._at(self._between((200, 4000)), self._restart, victim)

    def _fault_kill_all(self) -> None:
        for node_id in list(self.nodes):
            self._kill(node_id)
            self._at(self._between((100, 3000)), self._restart, node_id)

    def _fault_resign(self) -> None:
        for node in self._leaders():
            self._run_core(node, ("resign",), lambda core: core.resign(self.now))

    def _fault_graceful_stop(self) -> None:
        """SIGTERM to the leader, as the node shell handles it: `shutdown` (resign, and never campaign
        again), serve until another leader is known or 5 s have passed, exit; restarted later. The
        scenario's network faults make the successor's news late, as a loaded machine does."""
        leaders = [n for n in self._leaders() if n.node_id not in self._stopping]
        if not leaders:
            return
        node = leaders[0]
        self._stopping[node.node_id] = node.incarnation
        self._run_core(node, ("shutdown",), lambda core: core.shutdown(self.now))
        self._at(10, self._finish_stop, node.node_id, node.incarnation, self.now + SUCCESSOR_WAIT_MS)

    def _finish_stop(self, node_id: int, incarnation: int, deadline: int) -> None:
        node = self.nodes[node_id]
        if not node.alive or node.incarnation != incarnation:
            self._stopping.pop(node_id, None)  # killed meanwhile by another fault
            return
        if node.core.leader_id not in (-1, node_id) or self.now >= deadline:
            self._stopping.pop(node_id)
            self._kill(node_id)
            self._at(self._between((200, 4000)), self._restart, node_id)
            return
        self._at(10, self._finish_stop, node_id, incarnation, deadline)

    def _fault_leader_failures(self) -> None:
        """Kill the leader, then its successor as soon as it is elected."""
        leaders = self._leaders()
        if not leaders:
            return
        first = leaders[0]
        epoch = first.epoch
        self._kill(first.node_id)
        self._at(self._between((3000, 6000)), self._restart, first.node_id)

        def kill_successor(tries: int) -> None:
            if not self._faulting:
                return
            successors = [n for n in self._leaders() if n.epoch > epoch]
            if successors:
                self._log(0, f"killing successor {successors[0].node_id}")
                self._kill(successors[0].node_id)
                self._at(self._between((500, 4000)), self._restart, successors[0].node_id)
            elif tries:
                self._at(10, kill_successor, tries - 1)

        self._at(10, kill_successor, 1000)

    def _fault_failover(self) -> None:
        """kill -9 the leader; the survivors alone must elect a successor that commits by the deadline.

        The victims stay down, as many as the quorum can lose; past that, this fault restarts the
        one killed earliest instead, and the next one kills the leader again, so that the survivors
        include a node that restarted, its timers out of step with the others'.
        """
        if self._failover is not None:
            return
        if len(self._failover_down) >= (len(self.voter_ids) - 1) // 2:
            if self._failover_down:
                self._restart(self._failover_down.pop(0))
            return
        leaders = self._leaders()
        if not leaders:
            return
        victim = leaders[0]
        self._log(0, f"failover: killing leader {victim.node_id} of epoch {victim.epoch}")
        self._failover = (victim.epoch, self.now, self.now + self.scenario.failover_deadline_ms)
        self._failover_down.append(victim.node_id)
        self._kill(victim.node_id)
        self._at(10, self._check_failover)

    def _check_failover(self) -> None:
        """Liveness: a leader of a later epoch has committed a record of its own epoch by the deadline."""
        if self._failover is None or not self._faulting:
            self._failover = None
            return
        epoch, killed_at, deadline = self._failover
        for node in self._leaders():
            own_epoch_start = node.log.end_offset_for_epoch(node.epoch - 1).offset
            if node.epoch > epoch and node.high_watermark > own_epoch_start:
                self._failover = None
                self.stats.failovers += 1
                self.stats.max_failover_ms = max(self.stats.max_failover_ms, self.now - killed_at)
                return
        if self.now >= deadline:
            states = ", ".join(f"{n.node_id}:{n.role.value if n.role else 'down'}@{n.epoch}"
                               for n in self.nodes.values())
            raise SimulationFailure(self.seed, f"t={self.now}ms: no leader after epoch {epoch} committed within "
                                               f"{self.scenario.failover_deadline_ms} ms of its leader's kill: "
                                               f"{states}", self.command)
        self._at(10, self._check_failover)


SUCCESSOR_WAIT_MS = int(SUCCESSOR_WAIT_S * 1000)
"""How long a stopping leader serves at most while it waits for a successor: the node shell's own limit."""


def _short(message: object) -> str:
    text = repr(message)
    return text if len(text) <= 200 else text[:200] + "..."


def run_seed(seed: int, voters: int = 3, observers: int = 0, scenario: str = "chaos",
             duration_ms: int | None = None, trace: Callable[[str], None] | None = None) -> RunStats:
    """Run one seed; raises SimulationFailure with the replay command when it fails."""
    return Simulation(seed, voters, observers, scenario, duration_ms, trace).run()
