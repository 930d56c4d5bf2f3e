"""A deterministic discrete-event simulation of a KRaft quorum, driving the real `RaftCore`.

Everything that varies comes from one seed: message delays, loss and duplication, flush latency,
which faults strike when, and each core's own random choices. Time is simulated, so a run of
tens of seconds takes a fraction of a second, and a failing seed replays exactly.

The driver here follows the same contract as the node shell: actions are carried out in order,
PersistState is durable at once, AppendBatches is durable only when the (delayed) flush event
fires (or at once if a later Send in the same list must not outrun it), and a crash keeps only
what was flushed. After every event the invariants of `invariants.py` are checked.
"""

from __future__ import annotations

import heapq
import random
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from quorum.raft.core import RaftCore
from quorum.raft.interface import (
    Action,
    AppendBatches,
    ClusterIdCommitted,
    Fatal,
    HighWatermarkAdvanced,
    LeaderChanged,
    Message,
    PersistState,
    QuorumConfig,
    Reply,
    Send,
    Truncate,
)
from quorum.raft.state import Role
from quorum.sim.invariants import InvariantChecker, InvariantViolation
from quorum.sim.memory_log import MemoryLog
from quorum.sim.network import LinkQuality, Network
from quorum.sim.scenarios import SCENARIOS, Scenario

MAX_EVENTS = 2_000_000


class SimulationFailure(AssertionError):
    """A run broke an invariant, lost liveness or crashed; the message ends with the replay command."""

    def __init__(self, seed: int, reason: str, command: str) -> None:
        self.seed = seed
        self.reason = reason
        self.command = command
        super().__init__(f"seed {seed}: {reason}\nreplay: {command}")


def sim_config(node_id: int, voters: tuple[int, ...], fetch_max_bytes: int = 1 << 20) -> QuorumConfig:
    """Kafka's quorum.* defaults, with a request timeout that lets a lost Fetch be retried before
    the fetch timeout gives up on the leader. A small fetch_max_bytes (one batch per response)
    makes followers catch up batch by batch, which is where high watermark rules get tested."""
    return QuorumConfig(node_id=node_id, voters=voters, request_timeout_ms=1000, fetch_max_bytes=fetch_max_bytes)


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
        self.checker = InvariantChecker(self.voter_ids)
        self.network = Network(random.Random(self.rng.getrandbits(64)), LinkQuality(
            self.scenario.loss, self.scenario.duplicate, self.scenario.min_delay_ms, self.scenario.max_delay_ms))
        fetch_max_bytes = self.rng.choice((1 << 20, 1 << 20, 4096, 300))
        self.nodes = {i: SimNode(i, sim_config(i, self.voter_ids, fetch_max_bytes))
                      for i in self.voter_ids + self.observer_ids}
        self._trace = trace
        self._queue: list[tuple[int, int, Callable[..., None], tuple[Any, ...]]] = []
        self._seq = 0
        self._faulting = True
        self._event: tuple[int, tuple[object, ...]] = (0, ("start",))
        self._network_fault_until = 0
        self._expected_fatal = False
        self._failover: tuple[int, int, int] | None = None  # (killed leader's epoch, killed at, deadline)
        self._failover_down: list[int] = []  # voters the failover fault killed, oldest first

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
                pass
            elif kind is ClusterIdCommitted:
                node.meta_cluster_id = action.cluster_id
            elif kind is LeaderChanged:
                pass
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
        self._run_core(node, (f"<- {source}", message),
                       lambda core: core.on_response(source, message, self.now, request))

    # -----------------------------------------------------------------------------------------
    # Nodes coming and going.

    def _restart(self, node_id: int) -> None:
        node = self.nodes[node_id]
        if node.alive:
            return
        rng = random.Random(f"{self.seed}/{node_id}/{node.incarnation}")
        node.core = RaftCore(node.config, node.log, node.quorum_state, node.meta_cluster_id, rng, self.now)
        self._run_core(node, ("start, incarnation", str(node.incarnation)), lambda core: core.start(self.now))

    def _kill(self, node_id: int) -> None:
        node = self.nodes[node_id]
        if not node.alive:
            return
        self._log(node_id, "killed")
        node.core = None
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
        value = self.rng.getrandbits(64).to_bytes(8, "big")
        self._log(node.node_id, "propose")
        base, actions = node.core.propose([value] * self.rng.randint(1, 3), self.now)
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


def _short(message: object) -> str:
    text = repr(message)
    return text if len(text) <= 200 else text[:200] + "..."


def run_seed(seed: int, voters: int = 3, observers: int = 0, scenario: str = "chaos",
             duration_ms: int | None = None, trace: Callable[[str], None] | None = None) -> RunStats:
    """Run one seed; raises SimulationFailure with the replay command when it fails."""
    return Simulation(seed, voters, observers, scenario, duration_ms, trace).run()
