"""One scripted KAFKA-6262 run of a replicator, for `bench_client_epochs` (its docstring says why and how).

`run_scenario(kind, plan, directory)` starts a fresh source cluster (1 controller + 3 brokers, broker
103 answering Metadata 2 s late) and a fresh target cluster (1 controller + 1 broker), runs the
replicator `kind` ("client_epochs", "confluent" or "kafka-python") as a process while a paced
producer (a child process: `python -m benchmarks.mirror_scenario --child JOB`) writes `plan.records`
numbered records, moves partition 0's leader and kills the replicator at fixed record counts, waits
until the target holds every source record (and then, up to COMMIT_GRACE_S, until the replicator's
group has committed them all), stops it, reads the target topic and returns what it holds
(`TargetFigures`) with the replicator's own counts (`ScenarioResult`).

Over a secured source (issue 18): `run_scenario(..., security="sasl_ssl")` starts the source with
`LocalCluster(security=True)` and every client of it (the producer, the probes, the admin, the offset
checks and the replicator with its wrapped consumer and its own metadata, offset and log-bounds
connections) uses the SASL_SSL listener with SCRAM-SHA-512; `run_against` runs the same scenario on a
source cluster that is already running (the secured process tests' shared cluster). Only the
`client_epochs` replicator takes security settings (the raw-client loops of `benchmarks.mirror_loops`
have none). Run alone: `python -m benchmarks.mirror_scenario --records 3000 --rate 500 --security sasl_ssl`.
"""

from __future__ import annotations

import json
import random
import re
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

if __package__ in (None, ""):  # run as a script: make the project importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.table import ROOT, progress  # noqa: E402

TOPIC = "mirrored"
PARTITIONS = 3
SOURCE_BROKERS = (101, 102, 103)
STALE = 103
STALE_DELAY_MS = 2000
SEED = 6262
SOURCE_SETTINGS = {
    "replica.lag.time.max.ms": "3000",  # a killed follower leaves the ISR in 3 s, not 30
    "broker.session.timeout.ms": "3000",  # a killed leader is replaced in some 3 s
    "broker.heartbeat.interval.ms": "500",
    "offsets.topic.replication.factor": "3",  # the group's commits survive the kills
    "offsets.topic.num.partitions": "3",
    "leader.imbalance.check.interval.seconds": "5",  # a returning preferred leader takes its partitions back
}
TARGET_SETTINGS = {"offsets.topic.num.partitions": "1"}
SESSION_TIMEOUT_MS = 10_000
"""The group session timeout of all three replicators (kafka-python's default; librdkafka's is 45 s):
how long the restarted replicator's group waits for the killed member to be declared dead."""
STATUS_INTERVAL_S = 1.0
COMMIT_GRACE_S = 30.0
"""How long after the copy is complete the group's commits may take to reach the source's ends."""
READY_TIMEOUT_S = 90.0
QUIET = {"log_level": 3}

KINDS = ("client_epochs", "confluent", "kafka-python")


@dataclass(frozen=True)
class Plan:
    """The scenario's script: what is produced, and at which record counts the events happen."""

    records: int
    rate: float
    """Records a second the producer is paced at: a replicator faster than that tails the log end."""
    leader_moves_at: tuple[float, ...] = (0.15, 0.85)
    """Fractions of `records` written (acknowledged to the producer) at which partition 0's leader is killed."""
    replicator_kill_at: float = 0.3
    """Fraction of `records` written at which the replicator is killed (SIGKILL) and restarted. Counted at
    the source, so that the kill falls anywhere in a loop's copy-flush-commit cycle: counted at the target,
    it would follow a synchronous loop's flush, and so its commit, by a few milliseconds. Never before the
    target holds a first copy (a short run's replicator may still be joining its group at that count)."""


@dataclass
class TargetFigures:
    """What the target topic holds, judged by the provenance header and the record numbers."""

    copied: int = 0
    distinct: int = 0
    duplicates: int = 0
    missing: int = 0
    rewinds: int = 0
    """Times the source offsets in a target partition go backwards."""
    rewinds_to_start: int = 0
    """Of those, the ones back to source offset 0 (the log start: auto.offset.reset=earliest)."""
    deepest_rewind: int = 0
    """The most source records one backward step went back over."""
    misplaced: int = 0
    """Copies in a target partition other than their source partition, or without provenance."""


@dataclass
class ScenarioResult:
    kind: str
    figures: TargetFigures
    wall_s: float
    counts: dict[str, int]
    events: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


# -- the producer (a child process) ---------------------------------------------------------------------


def produce_child(job: dict[str, Any]) -> None:
    """Write `records` numbered records, record i to partition i % partitions, paced at `rate`;
    print "acked N" as acknowledgements come, then a JSON line with each partition's end offset."""
    from confluent_kafka import Producer

    acked = 0
    ends = [0] * job["partitions"]
    failed: list[str] = []

    def delivered(error: Any, message: Any) -> None:
        nonlocal acked
        if error is not None:
            failed.append(str(error))
            return
        acked += 1
        ends[message.partition()] = max(ends[message.partition()], message.offset() + 1)

    producer = Producer({"bootstrap.servers": job["bootstrap"], "acks": "all", "enable.idempotence": True,
                         "linger.ms": 5, "message.timeout.ms": 300_000, **QUIET, **job["client"]})  # fmt: skip
    rng = random.Random(job["seed"])
    clock = time.monotonic
    start = clock()
    next_report = start
    for number in range(job["records"]):
        due = start + number / job["rate"]
        while (now := clock()) < due:
            producer.poll(min(due - now, 0.05))
        value = f"{number:09d} ".encode() + rng.randbytes(rng.randint(50, 250))
        while True:
            try:
                producer.produce(job["topic"], value, key=str(number).encode(), partition=number % job["partitions"],
                                 on_delivery=delivered)
                break
            except BufferError:
                producer.poll(0.05)
        producer.poll(0)
        if clock() >= next_report:
            print(f"acked {acked}", flush=True)
            next_report = clock() + 0.2
    while producer.flush(0.2):
        print(f"acked {acked}", flush=True)
    print(f"acked {acked}", flush=True)
    if failed:
        raise RuntimeError(f"the source producer's deliveries failed: {failed[:5]}")
    print(json.dumps({"acked": acked, "ends": ends}), flush=True)


class BackgroundProducer:
    """The producer child, its acknowledged count followed from its output."""

    def __init__(self, bootstrap: str, plan: Plan, log_path: Path, client: dict[str, str]) -> None:
        job = {"bootstrap": bootstrap, "topic": TOPIC, "partitions": PARTITIONS, "records": plan.records,
               "rate": plan.rate, "seed": SEED, "client": client}  # fmt: skip
        self._stderr = open(log_path, "w")  # noqa: SIM115 - closed in stop()
        self.log_path = log_path
        command = [sys.executable, "-m", "benchmarks.mirror_scenario", "--child", json.dumps(job)]
        self.process = subprocess.Popen(command, cwd=ROOT, stdout=subprocess.PIPE, stderr=self._stderr, text=True)
        self.acked = 0
        self.result: dict[str, Any] | None = None
        self._thread = threading.Thread(target=self._read, daemon=True)
        self._thread.start()

    def _read(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            if line.startswith("acked "):
                self.acked = int(line.split()[1])
            elif line.startswith("{"):
                self.result = json.loads(line)

    def check(self) -> None:
        code = self.process.poll()
        if code not in (None, 0):
            raise RuntimeError(f"the source producer failed (exit {code}): {_tail(self.log_path)}")

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
        self.process.wait()
        self._thread.join(5)
        self._stderr.close()


# -- the replicator's processes -------------------------------------------------------------------------


def replicator_command(kind: str, source: str, target: str, group: str, client: dict[str, str] | None = None
                       ) -> list[str]:
    """`client`: the source's security settings (librdkafka's names), for the client_epochs replicator only."""
    common = ["--source-bootstrap", source, "--target-bootstrap", target, "--topics", TOPIC, "--group", group,
              "--status-interval-s", f"{STATUS_INTERVAL_S:g}"]
    if kind == "client_epochs":
        secured = [item for key, value in (client or {}).items() for item in ("--consumer-property", f"{key}={value}")]
        return [sys.executable, "-m", "client_epochs.mirror.cli", *common,
                "--consumer-property", f"session.timeout.ms={SESSION_TIMEOUT_MS}", *secured,
                "--consumer-property", "log_level=4", "--producer-property", "log_level=4"]  # fmt: skip
    if client:
        raise ValueError(f"the {kind} loop (benchmarks.mirror_loops) takes no security settings: only client_epochs")
    return [sys.executable, "-m", "benchmarks.mirror_loops", "--client", kind, *common,
            "--session-timeout-ms", str(SESSION_TIMEOUT_MS)]  # fmt: skip


class Replicator:
    """One replicator kind as processes: each start is an incarnation with its own output files."""

    def __init__(self, kind: str, command: list[str], directory: Path) -> None:
        self.kind = kind
        self.command = command
        self.directory = directory
        self.incarnations: list[tuple[subprocess.Popen[bytes], Path, Path]] = []

    @property
    def process(self) -> subprocess.Popen[bytes]:
        return self.incarnations[-1][0]

    def start(self) -> None:
        number = len(self.incarnations) + 1
        out, err = self.directory / f"{self.kind}-{number}.out", self.directory / f"{self.kind}-{number}.err"
        with open(out, "wb") as stdout, open(err, "wb") as stderr:
            process = subprocess.Popen(self.command, cwd=ROOT, stdout=stdout, stderr=stderr)
        self.incarnations.append((process, out, err))

    def check(self) -> None:
        code = self.process.poll()
        if code is not None:
            raise RuntimeError(f"the {self.kind} replicator exited on its own (exit {code}): "
                               f"{_tail(self.incarnations[-1][2])}")

    def kill(self) -> None:
        self.process.send_signal(signal.SIGKILL)
        self.process.wait(30)

    def terminate(self, timeout_s: float = 90.0) -> int:
        self.process.send_signal(signal.SIGTERM)
        try:
            return self.process.wait(timeout_s)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
            return -9

    def stop_all(self) -> None:
        for process, _, _ in self.incarnations:
            if process.poll() is None:
                process.kill()
                process.wait()

    def counts(self) -> tuple[dict[str, int], list[str]]:
        """The replicator's own figures summed over its incarnations (each one's summary, or its last
        status line for the one killed), and the client events the raw loops echoed."""
        total: dict[str, int] = {}
        events: list[str] = []
        for _, out, err in self.incarnations:
            text = out.read_text(errors="replace")
            events += [line.split("event: ", 1)[1] for line in text.splitlines() if "mirror-loop event: " in line]
            figures = _own_counts(self.kind, text)
            if self.kind == "client_epochs":  # its failed commits are warnings, each one retried a second later
                figures["commit_failures"] = len(_COMMIT_FAILED.findall(err.read_text(errors="replace")))
            for key, value in figures.items():
                if key not in _GAUGES:
                    total[key] = total.get(key, 0) + value
        return total, events


_PAIR = re.compile(r"(\w+)=(\d+)")
_COMMIT_FAILED = re.compile(r"WARNING client_epochs\.mirror: commit of .* (failed|refused)")
_GAUGES = {"lag", "in_flight", "partitions"}
"""Status figures of the moment, not counts: not summed over incarnations."""


def _own_counts(kind: str, text: str) -> dict[str, int]:
    if kind != "client_epochs":
        lines = [line for line in text.splitlines() if line.startswith(("mirror-loop status:", "mirror-loop summary:"))]
        return {k: int(v) for k, v in _PAIR.findall(lines[-1])} if lines else {}
    statuses = [line for line in text.splitlines() if line.startswith("client-epochs-mirror status:")]
    figures = {k: int(v) for k, v in _PAIR.findall(statuses[-1])} if statuses else {}
    if "client-epochs-mirror summary" in text:  # the clean stop's summary is newer than any status line
        summary = text.split("client-epochs-mirror summary", 1)[1]
        for name in ("stale_metadata_refused", "resets"):
            found = re.search(rf"^\s+{name}\s+(\d+)\s*$", summary, re.M)
            if found:
                figures[name] = int(found[1])
        total = re.search(r"^\s+total\s+(\d+)\s+(\d+)\s+(\d+)", summary, re.M)
        if total:
            figures.update(replicated=int(total[1]), skipped_already_copied=int(total[2]),
                           rewind_refused=int(total[3]))
    return figures


# -- clusters -------------------------------------------------------------------------------------------


def _tail(path: Path, lines: int = 15) -> str:
    if not path.exists():
        return f"({path} is missing)"
    text = path.read_text(errors="replace").splitlines()[-lines:]
    return f"last lines of {path}:\n" + "\n".join(text)


WAIT_LINE_EVERY_S = 30.0


def wait_for(what: str, check: Callable[[], Any], timeout_s: float, clusters: tuple[Any, ...] = ()) -> Any:
    """Poll `check` until it returns something true; past the timeout fail naming `what`, with the
    nodes' last log lines."""
    started = time.monotonic()
    deadline = started + timeout_s
    next_line = started + WAIT_LINE_EVERY_S
    problem = ""
    while time.monotonic() < deadline:
        try:
            result = check()
            if result:
                return result
        except Exception as exc:  # noqa: BLE001 - a node still starting or just killed; keep the last error
            problem = f" (last error: {type(exc).__name__}: {exc})"
        if time.monotonic() >= next_line:  # a long wait says, now and then, that it is still waiting and why
            print(f"still waiting for {what}: {time.monotonic() - started:.0f} s of {timeout_s:.0f}{problem}",
                  file=sys.stderr, flush=True)
            next_line = time.monotonic() + WAIT_LINE_EVERY_S
        time.sleep(0.2)
    tails = [_tail(spec.log_path, 8) for cluster in clusters for spec in cluster.specs.values()]
    raise TimeoutError(f"timed out after {timeout_s:.0f} s waiting for {what}{problem}\n" + "\n".join(tails))


def _listening(address: str) -> bool:
    host, port = address.split(":")
    with socket.create_connection((host, int(port)), timeout=1):
        return True


def view(address: str, topics: list[str] | None = None, client: dict[str, str] | None = None) -> Any:
    """ClusterMetadata as this one broker answers Metadata (epochs included); `client`: librdkafka's
    security settings for a secured listener."""
    from client_epochs.metadata_client import MetadataClient
    from quorum.wire.sasl_client import ClientSecurity

    with MetadataClient(address, client_id="bench-mirror-probe", request_timeout_s=5,
                        security=ClientSecurity.of_client_properties(client or {})) as metadata:
        return metadata.fetch(topics if topics is not None else [], timeout=5)


def topic_ready(address: str, replicas: int, topic: str = TOPIC, partitions: int = PARTITIONS,
                client: dict[str, str] | None = None) -> bool:
    """Every partition of `topic` has a leader and `replicas` replicas in its ISR, in this broker's view;
    NotReady saying what is missing otherwise (for the timeout's message)."""
    answer = view(address, [topic], client)
    parts = answer.partitions_of(topic)
    if len(parts) == partitions and all(p.leader_id >= 0 and len(p.isr) == replicas for p in parts.values()):
        return True
    seen = ", ".join(f"{tp.partition}: leader {p.leader_id} isr {list(p.isr)}" for tp, p in sorted(parts.items()))
    raise NotReady(f"broker {address} answers {topic} with {seen or 'no partition'}"
                   f"{f' (topic errors {dict(answer.topic_errors)})' if answer.topic_errors else ''}")


class NotReady(Exception):
    """A condition polled for does not hold yet; the message says how far it is."""


def start_cluster(cluster: Any, brokers: tuple[int, ...], protocol: str | None = None,
                  client: dict[str, str] | None = None) -> None:
    cluster.format_storage()
    cluster.start()
    for broker in brokers:
        address = broker_address(cluster, broker, protocol)
        wait_for(f"broker {broker} to listen on {address}", lambda a=address: _listening(a), READY_TIMEOUT_S,
                 (cluster,))
    first = broker_address(cluster, brokers[0], protocol)
    wait_for(f"{len(brokers)} unfenced brokers", lambda: set(view(first, None, client).brokers) == set(brokers),
             READY_TIMEOUT_S, (cluster,))


def broker_address(cluster: Any, broker: int, protocol: str | None = None) -> str:
    """The broker's address on listener `protocol` of a secured cluster (None: its first listener)."""
    spec = cluster.specs[broker]
    return spec.address if protocol is None else f"127.0.0.1:{spec.extra_ports.get(protocol, spec.port)}"


def create_topic(cluster: Any, broker: int, replicas: int, config: dict[str, str], protocol: str | None = None,
                 client: dict[str, str] | None = None) -> None:
    """TOPIC with PARTITIONS partitions; with 3 replicas, partition p's replicas are the brokers from
    101 + p on, so partition 0 is led by 101 (its preferred leader) in every run, never by the stale 103."""
    from confluent_kafka.admin import AdminClient, NewTopic

    address = broker_address(cluster, broker, protocol)
    admin = AdminClient({"bootstrap.servers": address, **QUIET, **(client or {})})
    if replicas == len(SOURCE_BROKERS):
        brokers = list(SOURCE_BROKERS)
        topic = NewTopic(TOPIC, PARTITIONS, replica_assignment=[brokers[p:] + brokers[:p] for p in range(PARTITIONS)],
                         config=config)  # fmt: skip
    else:
        topic = NewTopic(TOPIC, PARTITIONS, replicas, config=config)
    for future in admin.create_topics([topic], request_timeout=60).values():
        future.result(timeout=90)
    wait_for(f"{TOPIC}: leaders and full ISRs", lambda: topic_ready(address, replicas, client=client), READY_TIMEOUT_S,
             (cluster,))


# -- the scenario ---------------------------------------------------------------------------------------


class Source:
    """The source cluster and the leader moves done to it."""

    def __init__(self, cluster: Any, protocol: str | None = None, client: dict[str, str] | None = None) -> None:
        self.cluster = cluster
        self.client = dict(client or {})
        """librdkafka's security settings for the source's `protocol` listener ({} when plaintext)."""
        self.address = {b: broker_address(cluster, b, protocol) for b in SOURCE_BROKERS}
        self.bootstrap = ",".join(self.address[b] for b in (STALE, *[b for b in SOURCE_BROKERS if b != STALE]))
        self.down: set[int] = set()

    def current(self) -> str:
        """A live broker that answers Metadata with current metadata (not the stale one)."""
        return next(self.address[b] for b in SOURCE_BROKERS if b != STALE and b not in self.down)

    def leader_of_0(self) -> tuple[int, int]:
        meta = view(self.current(), [TOPIC], self.client).partitions_of(TOPIC)
        (p0,) = [m for tp, m in meta.items() if tp.partition == 0]
        return p0.leader_id, p0.leader_epoch

    def move_leader(self) -> str:
        """kill -9 of partition 0's leader; once another broker leads it, start the killed one again."""
        wait_for("full ISRs on the source before the leader move",
                 lambda: topic_ready(self.current(), 3, client=self.client), 120, (self.cluster,))
        leader, epoch = self.leader_of_0()
        self.cluster.kill(leader, signal.SIGKILL)
        self.down.add(leader)
        killed_at = time.monotonic()
        new, new_epoch = wait_for(f"a new leader of {TOPIC}-0 after the kill of broker {leader}",
                                  lambda: (lambda s: s if s[0] not in (leader, -1) else None)(self.leader_of_0()),
                                  60, (self.cluster,))
        elected_s = time.monotonic() - killed_at
        self.cluster.start_node(leader)
        self.down.discard(leader)
        return (f"kill -9 of broker {leader} (leader of {TOPIC}-0, epoch {epoch}); broker {new} led it "
                f"(epoch {new_epoch}) {elected_s:.1f} s later; broker {leader} started again")


def read_target(address: str, records: int) -> TargetFigures:
    """Every record of the target topic (assign from offset 0 to the high watermark), judged."""
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer({"bootstrap.servers": address, "group.id": "bench-mirror-check", "enable.auto.commit": False,
                         **QUIET})  # fmt: skip
    figures = TargetFigures()
    seen: set[int] = set()
    try:
        for partition in range(PARTITIONS):
            end = consumer.get_watermark_offsets(TopicPartition(TOPIC, partition), timeout=30)[1]
            offsets: list[int] = []
            if end > 0:
                consumer.assign([TopicPartition(TOPIC, partition, 0)])
                deadline = time.monotonic() + 120
                position = 0
                while position < end:
                    if time.monotonic() > deadline:
                        raise TimeoutError(f"reading target partition {partition}: at {position} of {end} after 120 s")
                    for message in consumer.consume(1000, 1.0):
                        if message.error() is not None:
                            raise RuntimeError(f"reading target partition {partition}: {message.error()}")
                        position = message.offset() + 1
                        figures.copied += 1
                        seen.add(int(message.value()[:9]))
                        source = dict(message.headers() or []).get("client_epochs.source")
                        parts = (source or b"").decode().split("/")
                        if len(parts) != 3 or parts[0] != TOPIC or int(parts[1]) != partition:
                            figures.misplaced += 1
                            continue
                        offsets.append(int(parts[2]))
            for before, after in zip(offsets, offsets[1:], strict=False):
                if after < before:
                    figures.rewinds += 1
                    figures.rewinds_to_start += after == 0
                    figures.deepest_rewind = max(figures.deepest_rewind, before - after + 1)
    finally:
        consumer.close()
    figures.distinct = len(seen)
    figures.duplicates = figures.copied - figures.distinct
    figures.missing = len(set(range(records)) - seen)
    return figures


class TargetWatch:
    """Follows the target topic from offset 0 while the replicator writes it: copies seen, numbers held."""

    def __init__(self, address: str) -> None:
        from confluent_kafka import Consumer, TopicPartition

        self.consumer = Consumer({"bootstrap.servers": address, "group.id": "bench-mirror-watch",
                                  "enable.auto.commit": False, **QUIET})  # fmt: skip
        self.consumer.assign([TopicPartition(TOPIC, p, 0) for p in range(PARTITIONS)])
        self.copies = 0
        self.numbers: set[int] = set()

    def poll(self, timeout_s: float) -> None:
        for message in self.consumer.consume(5000, timeout_s):
            if message.error() is None:
                self.copies += 1
                self.numbers.add(int(message.value()[:9]))

    def held(self) -> list[int]:
        """Each target partition's high watermark: the copies the target holds."""
        from confluent_kafka import TopicPartition

        return [self.consumer.get_watermark_offsets(TopicPartition(TOPIC, p), timeout=10)[1] for p in range(PARTITIONS)]

    def close(self) -> None:
        self.consumer.close()


def run_scenario(kind: str, plan: Plan, directory: Path, security: str | None = None) -> ScenarioResult:
    """The scenario (see the module docstring) with replicator `kind`, in a fresh pair of clusters;
    `security` "sasl_ssl": the source is secured and read over SASL_SSL with SCRAM-SHA-512."""
    from quorum.launcher import LocalCluster

    protocol = security.upper() if security else None
    if protocol not in (None, "SASL_SSL"):
        raise ValueError(f"security must be sasl_ssl or none, got {security!r}")
    directory.mkdir(parents=True, exist_ok=True)
    source_cluster = LocalCluster(directory / "source", controllers=1, brokers=3, settings=SOURCE_SETTINGS,
                                  stale_brokers={STALE: STALE_DELAY_MS}, security=bool(protocol))  # fmt: skip
    target_cluster = LocalCluster(directory / "target", controllers=1, brokers=1, settings=TARGET_SETTINGS)
    try:
        progress(f"[{kind}] starting the source (1 controller + 3 brokers, broker {STALE} {STALE_DELAY_MS} ms "
                 f"stale{', SASL_SSL' if protocol else ''}) and the target (1 controller + 1 broker)")
        client = {} if protocol is None else {
            k: v for k, v in source_cluster.client_settings(protocol).items() if k != "bootstrap.servers"}
        start_cluster(source_cluster, SOURCE_BROKERS, protocol, client)
        start_cluster(target_cluster, (101,))
        return run_against(kind, plan, directory, source_cluster, target_cluster, protocol, client)
    finally:
        source_cluster.stop()
        target_cluster.stop()


def run_against(kind: str, plan: Plan, directory: Path, source_cluster: Any, target_cluster: Any,
                protocol: str | None = None, client: dict[str, str] | None = None) -> ScenarioResult:
    """The scenario on running clusters: a source with brokers SOURCE_BROKERS (reached on listener
    `protocol` with librdkafka's security settings `client`, when given) and a plaintext target with
    broker 101. TOPIC must not exist on either yet; neither cluster is stopped here."""
    from client_epochs.model import TopicPartition as Key
    from client_epochs.offset_fetch import OffsetFetcher
    from quorum.wire.sasl_client import ClientSecurity

    label = f"[{kind}{f' over {protocol}' if protocol else ''}]"
    directory.mkdir(parents=True, exist_ok=True)
    client = dict(client or {})
    group = f"mirror-{kind}"
    replicator: Replicator | None = None
    producer: BackgroundProducer | None = None
    watch: TargetWatch | None = None
    fetcher: Any = None
    notes: list[str] = []
    try:
        source = Source(source_cluster, protocol, client)
        target = target_cluster.specs[101].address
        # Through 101: the stale broker's first answers list no broker, which stalls librdkafka's admin client.
        create_topic(source_cluster, 101, 3, {"min.insync.replicas": "2"}, protocol, client)
        create_topic(target_cluster, 101, 1, {})
        wait_for(f"broker {STALE} to hold {TOPIC} in its Metadata view",
                 lambda: topic_ready(source.address[STALE], 3, client=client), READY_TIMEOUT_S, (source_cluster,))
        watch = TargetWatch(target)
        fetcher = OffsetFetcher(",".join(source.address[b] for b in SOURCE_BROKERS if b != STALE),
                                security=ClientSecurity.of_client_properties(client))
        keys = [Key(TOPIC, p) for p in range(PARTITIONS)]

        def committed() -> list[int]:
            got = fetcher.fetch(group, keys, timeout=10)
            return [got[k].offset for k in keys]

        replicator = Replicator(kind, replicator_command(kind, source.bootstrap, target, group, client), directory)
        progress(f"{label} replicator started; producing {plan.records:,} records at {plan.rate:,.0f}/s")
        started = time.monotonic()
        replicator.start()
        producer = BackgroundProducer(source.bootstrap, plan, directory / f"producer-{kind}.err", client)
        schedule = sorted([(f, f"leader move {n}") for n, f in enumerate(plan.leader_moves_at, 1)]
                          + [(plan.replicator_kill_at, "replicator kill")])
        next_report = time.monotonic() + 5
        deadline = time.monotonic() + 180 + 3 * plan.records / plan.rate
        while schedule or len(watch.numbers) < plan.records:
            replicator.check()
            producer.check()
            watch.poll(0.2)
            now = time.monotonic()
            if now > deadline:
                raise TimeoutError(f"{label} the target holds {len(watch.numbers):,} of the {plan.records:,} source "
                                   f"records after {now - started:.0f} s\n{_tail(replicator.incarnations[-1][2])}")
            at = f"at {producer.acked:,} produced, {watch.copies:,} copied"
            if schedule:
                fraction, event = schedule[0]
                # the replicator's kill is meant to land in its copy-flush-commit cycle: not before its first copy
                if producer.acked >= fraction * plan.records and (event != "replicator kill" or watch.copies):
                    schedule.pop(0)
                    if event == "replicator kill":
                        replicator.kill()
                        held, done = watch.held(), committed()
                        replicator.start()
                        note = (f"SIGKILL {at}: the target held {sum(held):,} ({', '.join(map(str, held))}), the "
                                f"group had committed {sum(done):,} ({', '.join(map(str, done))}); restarted at once")
                    else:
                        note = f"{at}: {source.move_leader()}"
                    progress(f"{label} {event}: {note}")
                    notes.append(f"{event}: {note}")
            if now >= next_report:
                progress(f"{label} {at}, {len(watch.numbers):,} distinct")
                next_report = now + 5
        wall_s = time.monotonic() - started
        progress(f"{label} the target holds every source record after {wall_s:.1f} s; waiting for the group's "
                 "commits to reach the source's ends")
        ends = wait_for("the source producer's end offsets", lambda: producer.result, 60)["ends"]
        marks: list[int] = []
        commit_deadline = time.monotonic() + COMMIT_GRACE_S
        while time.monotonic() < commit_deadline:
            replicator.check()
            try:
                marks = committed()
            except Exception:  # noqa: BLE001 - a coordinator still moving; asked again
                marks = []
            if marks and all(m >= e for m, e in zip(marks, ends, strict=True)):
                break
            time.sleep(0.5)
        else:
            notes.append(f"the group's commits had not reached the source's ends {COMMIT_GRACE_S:.0f} s after the "
                         f"copy was complete: committed {marks}, ends {ends}; {_last_warning(replicator)}")
        progress(f"{label} stopping the replicator (SIGTERM)")
        code = replicator.terminate()
        if code != 0:
            notes.append(f"the replicator's exit status after SIGTERM: {code}")
        figures = read_target(target, plan.records)
        counts, events = replicator.counts()
        counts["committed_at_stop"] = sum(marks)
        return ScenarioResult(kind, figures, wall_s, counts, events, notes)
    finally:
        if replicator is not None:
            replicator.stop_all()
        if producer is not None:
            producer.stop()
        if watch is not None:
            watch.close()
        if fetcher is not None:
            fetcher.close()


def _last_warning(replicator: Replicator) -> str:
    lines = [line for line in replicator.incarnations[-1][2].read_text(errors="replace").splitlines()
             if "WARNING" in line or "error" in line.lower()]
    return f"its last warning: {lines[-1][:300]}" if lines else "it logged no warning"


def main(argv: list[str] | None = None) -> int:
    """One scenario run from the command line, its figures printed: what bench_client_epochs runs per
    replicator, here also over a secured source (`--security sasl_ssl`)."""
    import argparse
    import tempfile

    parser = argparse.ArgumentParser(prog="python -m benchmarks.mirror_scenario", description=main.__doc__)
    parser.add_argument("--kind", choices=KINDS, default="client_epochs")
    parser.add_argument("--records", type=int, default=20_000)
    parser.add_argument("--rate", type=float, default=2_000.0, help="records a second the producer is paced at")
    parser.add_argument("--security", choices=("sasl_ssl",), default=None,
                        help="a secured source read over SASL_SSL with SCRAM-SHA-512 (client_epochs only)")
    args = parser.parse_args(argv)
    if args.security and args.kind != "client_epochs":
        parser.error("--security goes with --kind client_epochs (the raw-client loops take no security settings)")
    with tempfile.TemporaryDirectory(prefix="mirror-scenario-") as directory:
        result = run_scenario(args.kind, Plan(args.records, args.rate), Path(directory), args.security)
    print(json.dumps({"kind": result.kind, "wall_s": round(result.wall_s, 1), "target": vars(result.figures),
                      "counts": result.counts, "notes": result.notes}, indent=2))
    figures = result.figures
    return 0 if figures.missing == 0 and figures.rewinds == 0 and figures.misplaced == 0 else 1


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "--child":
        produce_child(json.loads(sys.argv[2]))
    else:
        sys.exit(main())
