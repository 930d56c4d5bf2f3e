"""`quorum fuzz`: a local cluster (1 controller, 1 broker), a million garbage frames, one table.

The frames are split between the broker and the controller and sent by worker processes (both
cores), each over many connections at once. Meanwhile a real client produces and consumes, the
nodes' memory and descriptors are sampled, and a node that exits is a crash that ends the run.
At the end the sockets the nodes hold must be back to what they were before the fuzzing (within a
deadline), and the node logs must hold no handler error ("closing connection ... after an
unexpected error"). The exit status is 0 only when nothing of that went wrong.
"""

from __future__ import annotations

import asyncio
import multiprocessing
import socket
import struct
import tempfile
import time
import uuid
from collections import Counter
from collections.abc import Callable
from contextlib import suppress
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from quorum.fuzz.attack import ANSWERED, CLOSED, HANG, OUTCOMES, SILENT_KEPT, Tally, attack
from quorum.fuzz.frames import FrameFactory, served_apis
from quorum.fuzz.watch import NodeSample, ProbeClient, ProbeStats
from quorum.wire.framing import RequestHeader
from quorum.wire.protocol import API_VERSIONS_KEY, APIS, decode_response, encode_request

HANDLER_ERROR = b"after an unexpected error"
"""What the listener logs when a handler raised: a bug, whatever the frame was."""
SOCKETS_SETTLE_S = 60.0
"""How long the nodes get to close the fuzzing connections' sockets after the last frame."""


@dataclass(frozen=True, slots=True)
class Target:
    name: str
    host: str
    port: int
    ranges: dict[int, tuple[int, int]]


@dataclass(frozen=True, slots=True)
class Plan:
    frames: int
    connections: int
    workers: int
    seed: int
    hang_deadline_s: float
    max_seconds: float | None = None
    """Stop sending after this long (the table then says how many frames were sent of how many planned)."""


@dataclass
class NodeWatch:
    name: str
    pid: int
    log: Path
    log_start: int
    start: NodeSample
    max_rss_kib: int = 0
    end: NodeSample | None = None
    crashed: str | None = None
    handler_errors: int = 0


@dataclass
class Report:
    plan: Plan
    tallies: dict[str, Tally] = field(default_factory=dict)
    nodes: list[NodeWatch] = field(default_factory=list)
    probe: ProbeStats = field(default_factory=ProbeStats)
    seconds: float = 0.0

    def problems(self) -> list[str]:
        found = []
        for watch in self.nodes:
            if watch.crashed:
                found.append(f"{watch.name} crashed: {watch.crashed}")
            if watch.end is not None and watch.end.sockets > watch.start.sockets:
                found.append(f"{watch.name} holds {watch.end.sockets - watch.start.sockets} more socket(s) than "
                             f"before the fuzzing")
            if watch.handler_errors:
                found.append(f"{watch.name} logged {watch.handler_errors} handler error(s) (see {watch.log})")
        for name, tally in self.tallies.items():
            if tally.hangs:
                found.append(f"{name}: {len(tally.hangs)} hang(s)")
        sent = sum(t.frames for t in self.tallies.values())
        if sent < self.plan.frames:
            found.append(f"only {sent} of {self.plan.frames} frames were sent")
        if self.probe.errors:
            found.append(f"the probe client saw {len(self.probe.errors)} error(s): {self.probe.errors[0]}")
        if self.probe.stalls:
            found.append(f"the probe client stalled {self.probe.stalls} time(s), longest {self.probe.longest_s:.2f} s")
        return found


def api_ranges(host: str, port: int, timeout_s: float = 30.0) -> dict[int, tuple[int, int]]:
    """The node's ApiVersions answer (v0, which every node reads): API key -> (min, max) version."""
    api = APIS[API_VERSIONS_KEY]
    request = encode_request(api, RequestHeader(api.key, 0, 1, "quorum-fuzz"), api.request(version=0))
    with socket.create_connection((host, port), timeout=timeout_s) as sock:
        sock.sendall(request)
        (size,) = struct.unpack(">i", _read(sock, 4))
        _, body = decode_response(api, 0, _read(sock, size))
    if body.error_code:
        raise RuntimeError(f"{host}:{port} answered ApiVersions with error code {body.error_code}")
    return {entry.api_key: (entry.min_version, entry.max_version) for entry in body.api_keys}


def _read(sock: socket.socket, size: int) -> bytes:
    data = b""
    while len(data) < size:
        chunk = sock.recv(size - len(data))
        if not chunk:
            raise ConnectionError(f"closed after {len(data)} of {size} bytes")
        data += chunk
    return data


def fuzz_targets(targets: list[Target], plan: Plan, progress: Callable[[int], None] | None = None,
                 alive: Callable[[], bool] = lambda: True, progress_interval_s: float = 5.0,
                 avoid: frozenset[str] = frozenset()) -> dict[str, Tally]:
    """Send `plan.frames` frames, split evenly over the targets and the worker processes; each
    worker sends its share to every target at once. `progress` gets the frames sent so far every
    `progress_interval_s` s; `alive` False stops the workers (a node crashed)."""
    context = multiprocessing.get_context("spawn")
    counters = [context.Value("q", 0) for _ in range(plan.workers)]
    stop = context.Event()
    results = context.Queue()
    shares = _split(plan.frames, plan.workers * len(targets))
    processes = []
    for worker in range(plan.workers):
        share = shares[worker * len(targets):(worker + 1) * len(targets)]
        process = context.Process(target=_worker, name=f"fuzz-worker-{worker}", daemon=True, args=(
            targets, share, plan, plan.seed * 1000 + worker, counters[worker], stop, results, avoid))
        process.start()
        processes.append(process)
    try:
        return _collect(processes, counters, results, stop, targets, progress, alive,
                        progress_interval_s, plan.max_seconds)
    finally:
        for process in processes:
            if process.is_alive():
                process.terminate()  # only after a failure: a worker that finished has exited
            process.join(60)


def _collect(processes: list[Any], counters: list[Any], results: Any, stop: Any, targets: list[Target],
             progress: Callable[[int], None] | None, alive: Callable[[], bool],
             progress_interval_s: float, max_seconds: float | None) -> dict[str, Tally]:
    """Each worker's tallies as it finishes, merged per target; progress and crash checks meanwhile."""
    tallies: dict[str, Tally] = {t.name: Tally() for t in targets}
    received = 0
    started = time.monotonic()
    next_progress = started + progress_interval_s
    while received < len(processes):
        if not alive() or (max_seconds is not None and time.monotonic() - started > max_seconds):
            stop.set()
        try:
            for name, tally in results.get(timeout=0.5).items():
                tallies[name].merge(tally)
            received += 1
        except Exception:  # queue.Empty: nothing yet
            dead = [p for p in processes if p.exitcode not in (None, 0)]
            if dead:
                stop.set()
                raise RuntimeError(f"fuzz worker {dead[0].name} exited with {dead[0].exitcode}") from None
        if progress is not None and time.monotonic() >= next_progress:
            progress(sum(c.value for c in counters))
            next_progress = time.monotonic() + progress_interval_s
    return tallies


def _split(total: int, parts: int) -> list[int]:
    return [total // parts + (1 if i < total % parts else 0) for i in range(parts)]


def _worker(targets: list[Target], shares: list[int], plan: Plan, seed: int, counter: Any, stop: Any,
            results: Any, avoid: frozenset[str]) -> None:
    tallies = {t.name: Tally() for t in targets}

    def stopped() -> bool:
        counter.value = sum(t.frames for t in tallies.values())
        return bool(stop.is_set())

    async def all_targets() -> None:
        await asyncio.gather(*(
            attack(t.name, t.host, t.port, FrameFactory(served_apis(t.ranges), seed * 100 + i, avoid), share,
                   plan.connections, plan.hang_deadline_s, tallies[t.name], stopped)
            for i, (t, share) in enumerate(zip(targets, shares, strict=True))))

    asyncio.run(all_targets())
    results.put(tallies)


def run_local(plan: Plan, directory: str | None = None, print_line: Callable[[str], None] = print) -> Report:
    """Start a 1+1 local cluster, fuzz both nodes with a probe client running, and report."""
    from quorum.launcher import LocalCluster

    with tempfile.TemporaryDirectory(prefix="quorum-fuzz-") as scratch:
        cluster = LocalCluster(directory or scratch, controllers=1, brokers=1)
        cluster.format_storage()
        print_line(f"starting 1 controller and 1 broker in {cluster.directory}")
        try:
            cluster.start(progress=print_line)
            return fuzz_cluster(cluster, plan, print_line)
        finally:
            cluster.stop()


def fuzz_cluster(cluster: Any, plan: Plan, print_line: Callable[[str], None], probe_client: bool = True) -> Report:
    """Fuzz every node of a started `LocalCluster`; `probe_client` False leaves out the confluent-kafka probe
    (the unit suite's slice, which asserts nothing about time)."""
    report = Report(plan)
    targets = []
    for node_id, spec in cluster.specs.items():
        name = f"{spec.role} {node_id}"
        targets.append(Target(name, "127.0.0.1", spec.port, api_ranges("127.0.0.1", spec.port)))
    suffix = uuid.uuid4().hex[:12]
    topic, group = f"fuzz-probe-{suffix}", f"fuzz-probe-group-{suffix}"
    probe = ProbeClient(cluster.bootstrap_servers, topic, group) if probe_client else None
    if probe is not None:
        probe.warm_up()
    for node_id, spec in cluster.specs.items():
        pid = cluster.processes[node_id].pid
        report.nodes.append(NodeWatch(f"{spec.role} {node_id}", pid, spec.log_path, spec.log_path.stat().st_size,
                                      NodeSample.of(pid)))
    for watch in report.nodes:
        watch.max_rss_kib = watch.start.rss_kib
    processes = {f"{spec.role} {node_id}": cluster.processes[node_id] for node_id, spec in cluster.specs.items()}

    def alive() -> bool:
        ok = True
        for watch in report.nodes:
            code = processes[watch.name].poll()
            if code is not None:
                watch.crashed = watch.crashed or f"exited with {code}"
                ok = False
                continue
            with suppress(OSError):  # gone since the poll: the next call reports the exit
                watch.max_rss_kib = max(watch.max_rss_kib, NodeSample.of(watch.pid).rss_kib)
        return ok

    started = time.monotonic()
    sampler = _Repeating(1.0, alive)
    sampler.start()
    if probe is not None:
        probe.start()

    def progress(sent: int) -> None:
        rate = sent / max(time.monotonic() - started, 1e-9)
        rss = ", ".join(f"{w.name} RSS max {w.max_rss_kib // 1024} MiB" for w in report.nodes)
        stats = report.probe if probe is None else probe.stats
        print_line(f"{sent:>9,} / {plan.frames:,} frames  {rate:,.0f}/s  {rss}  probe: {stats.round_trips} round "
                   f"trips, {len(stats.errors)} errors, longest wait {stats.longest_s:.2f} s")

    print_line(f"fuzzing {', '.join(f'{t.name} ({t.host}:{t.port}, {len(t.ranges)} APIs)' for t in targets)}: "
               f"{plan.frames:,} frames, {plan.workers} worker(s) x {plan.connections} connections per node")
    try:
        report.tallies = fuzz_targets(targets, plan, progress, alive, avoid=frozenset({topic, group}))
    finally:
        report.seconds = time.monotonic() - started
        if probe is not None:
            report.probe = probe.stop()
        sampler.stop()
    alive()
    _settle(report.nodes, processes)
    for watch in report.nodes:
        with open(watch.log, "rb") as log:
            log.seek(watch.log_start)
            watch.handler_errors = log.read().count(HANDLER_ERROR)
    return report


def _settle(nodes: list[NodeWatch], processes: dict[str, Any]) -> None:
    """Each node's last sample, once its sockets are back to the start count or `SOCKETS_SETTLE_S` passed."""
    deadline = time.monotonic() + SOCKETS_SETTLE_S
    for watch in nodes:
        while processes[watch.name].poll() is None:
            watch.end = NodeSample.of(watch.pid)
            if watch.end.sockets <= watch.start.sockets or time.monotonic() >= deadline:
                break
            time.sleep(0.5)


class _Repeating:
    """Call `action` every `interval_s` s on a thread until stopped."""

    def __init__(self, interval_s: float, action: Callable[[], object]) -> None:
        import threading

        self._interval_s = interval_s
        self._action = action
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="fuzz-sampler", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(10)

    def _run(self) -> None:
        while not self._stop.wait(self._interval_s):
            self._action()


def format_report(report: Report) -> list[str]:
    """The closing table: frames per node and API by outcome, then the nodes and the probe client."""
    lines = []
    header = f"{'node':<14} {'API':<28} " + " ".join(f"{o:>17}" for o in OUTCOMES) + f" {'frames':>9}"
    lines += [header, "-" * len(header)]
    totals: Counter[str] = Counter()
    for name, tally in report.tallies.items():
        by_api: Counter[tuple[str, str]] = Counter()
        for (api, outcome), count in tally.outcomes.items():
            by_api[(api.partition(" v")[0], outcome)] += count  # every version of an API on one row
        for api in sorted({api for api, _ in by_api}, key=lambda api: (api != "random", api)):
            counts = [by_api.get((api, o), 0) for o in OUTCOMES]
            for outcome, count in zip(OUTCOMES, counts, strict=True):
                totals[outcome] += count
            lines.append(f"{name:<14} {api:<28} " + " ".join(f"{c:>17,}" for c in counts) + f" {sum(counts):>9,}")
    lines.append("-" * len(header))
    lines.append(f"{'all':<14} {'':<28} " + " ".join(f"{totals[o]:>17,}" for o in OUTCOMES)
                 + f" {sum(totals.values()):>9,}")
    sent = sum(totals.values())
    lines.append(f"{sent:,} frames in {report.seconds:.0f} s ({sent / max(report.seconds, 1e-9):,.0f}/s), "
                 f"{sum(t.connections for t in report.tallies.values()):,} connections")
    lines.append("")
    lines.append(f"{'node':<14} {'crash':<18} {'hangs':>6} {'RSS start/max/end MiB':>24} "
                 f"{'fds start/end':>14} {'sockets start/end':>18} {'handler errors':>15}")
    for watch in report.nodes:
        end = watch.end
        hangs = len(report.tallies.get(watch.name, Tally()).hangs)
        rss = f"{watch.start.rss_kib // 1024}/{watch.max_rss_kib // 1024}/{end.rss_kib // 1024 if end else '-'}"
        fds = f"{watch.start.fds}/{end.fds if end else '-'}"
        sockets = f"{watch.start.sockets}/{end.sockets if end else '-'}"
        lines.append(f"{watch.name:<14} {watch.crashed or 'none':<18} {hangs:>6} {rss:>24} {fds:>14} "
                     f"{sockets:>18} {watch.handler_errors:>15}")
    probe = report.probe
    lines.append("")
    lines.append(f"probe client (confluent-kafka, acks=all, produce then consume one record): {probe.round_trips:,} "
                 f"round trips, {len(probe.errors)} errors, {probe.stalls} stalls over 1 s, longest wait "
                 f"{probe.longest_s:.3f} s")
    lines += [f"  error: {error}" for error in probe.errors[:10]]
    for name, tally in report.tallies.items():
        for hang in tally.hangs[:10]:
            lines.append(f"  hang: {name} {hang.api} ({hang.kind}): {hang.frame[:200].hex()}")
    problems = report.problems()
    lines.append("")
    lines.append("verdict: " + ("0 crashes, 0 hangs, 0 leaked sockets, 0 handler errors, no client error or stall"
                                if not problems else "; ".join(problems)))
    return lines


__all__ = ["ANSWERED", "CLOSED", "HANG", "SILENT_KEPT", "Plan", "Report", "Target", "api_ranges", "format_report",
           "fuzz_cluster", "fuzz_targets", "run_local"]
