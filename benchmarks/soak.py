"""The soak: a 3 controller + 3 broker cluster under real clients and a schedule of faults, then a full check.

    python -m benchmarks.soak [--minutes 60] [--rounds N] [--fault-every-s 20] [--rate 100] [--dir DIR] [--seed N]

Runs a LocalCluster of 3 controllers and 3 brokers (the source) and one of 1 + 1 (the target), with:
- two idempotent acks=all producers, one confluent-kafka and one kafka-python, into topic `soak`
  (3 partitions, 3 replicas, min.insync.replicas=2), each at `--rate` records a second;
- two consumer groups of `--members` members each, one of confluent-kafka members and one of
  kafka-python members (the project's drop-in wrappers), committing synchronously after each poll;
- the project's replicator (`client-epochs-mirror`) copying `soak` to the target;
- a fault every `--fault-every-s`, kinds in turn (benchmarks/soak_faults.py): kill -9 and restart
  of a broker and of a controller, SIGSTOP/SIGCONT of each, a stale broker while a leader dies, and a
  full disk on broker 103 (its data directory is a small tmpfs; without root it is a plain
  directory and the full-disk fault is left out, which the table says);
- `__consumer_offsets` in 1 MiB segments and the log cleaner every 5 s, so the groups' commits are
  compacted under the faults, and every coordinator that moves loads a cleaned log (a commit lost
  or taken from an older record shows as a committed-offset or consumer rewind).

A progress line every 10 s. At the end (producers stopped, consumers and replicator caught up):
every acknowledged record is read back at its offset, exactly once; the replicas' segment files are
compared batch by batch up to the high watermark; the consumers' handed-over offsets, the groups'
committed offsets (sampled every 2 s) and the replicator's copies are checked for rewinds; and a
table gives the faults injected per kind and the records checked. Exit status 0 when lost,
duplicated, moved, rewinds, skips and replica mismatches are all 0.
"""

from __future__ import annotations

import argparse
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

if __package__ in (None, ""):  # run as a script: make the project importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks import soak_checks as checks  # noqa: E402
from benchmarks.mirror_scenario import start_cluster, view, wait_for  # noqa: E402
from benchmarks.mirror_scenario import topic_ready as topic_ready_of  # noqa: E402
from benchmarks.soak_clients import DELIVERY_TIMEOUT_MS  # noqa: E402
from benchmarks.soak_faults import HEAL_TIMEOUT_S, Faults  # noqa: E402
from benchmarks.table import ROOT  # noqa: E402

TOPIC = "soak"
PARTITIONS = 3
BROKERS = (101, 102, 103)
DISK_BROKER = 103
DISK_SIZE = "256m"
SETTINGS = {
    "replica.lag.time.max.ms": "5000",
    "broker.session.timeout.ms": "6000",
    "broker.heartbeat.interval.ms": "500",
    "offsets.topic.replication.factor": "3",
    "offsets.topic.num.partitions": "3",
    "transaction.state.log.replication.factor": "3",
    "leader.imbalance.check.interval.seconds": "10",
    "offsets.topic.segment.bytes": str(1 << 20),
    "log.cleaner.backoff.ms": "5000",
}
TARGET_SETTINGS = {"offsets.topic.num.partitions": "1"}
MIRROR_GROUP = "soak-mirror"
GROUPS = {"confluent": "soak-confluent", "kafka-python": "soak-kafka-python"}
CATCH_UP_TIMEOUT_S = 300.0


def say(line: str) -> None:
    print(f"[soak {time.strftime('%H:%M:%S')}] {line}", file=sys.stderr, flush=True)


class Child:
    """A client process of benchmarks.soak_clients (or the replicator), its output in files."""

    def __init__(self, name: str, command: list[str], directory: Path) -> None:
        self.name = name
        self.err = directory / f"{name}.err"
        with open(directory / f"{name}.stdout", "wb") as out, open(self.err, "wb") as err:
            self.process = subprocess.Popen(command, cwd=ROOT, stdout=out, stderr=err)

    def check(self) -> None:
        if self.process.poll() is not None:
            tail = self.err.read_text(errors="replace").splitlines()[-10:]
            raise RuntimeError(f"{self.name} exited on its own (status {self.process.returncode}):\n" + "\n".join(tail))

    def stop(self, timeout_s: float) -> int:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
        try:
            return self.process.wait(timeout_s)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
            return -9


def mount_disk(directory: Path) -> str:
    """A small tmpfs at `directory` (the disk broker's data dir); what it is, for the table."""
    directory.mkdir(parents=True, exist_ok=True)
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={DISK_SIZE}", "tmpfs", str(directory)],
                          capture_output=True, text=True)
    if done.returncode != 0:
        return ""
    return f"tmpfs {DISK_SIZE}"


class Soak:
    def __init__(self, args: argparse.Namespace, directory: Path) -> None:
        from quorum.launcher import LocalCluster

        self.args = args
        self.directory = directory
        self.rng = random.Random(args.seed)
        self.source = LocalCluster(directory / "source", controllers=3, brokers=3, settings=SETTINGS)
        self.target = LocalCluster(directory / "target", controllers=1, brokers=1, settings=TARGET_SETTINGS)
        self.clients = directory / "clients"
        self.clients.mkdir(parents=True, exist_ok=True)
        self.children: list[Child] = []
        self.producers: dict[str, Child] = {}
        self.consumers: dict[str, list[Child]] = {}
        self.copies: dict[bytes, list[checks.Copy]] = {}
        """Where each record found twice lies in the segment files, and under which producer epochs."""
        self.replicator: Child | None = None
        self.samples: dict[str, list[dict[int, int]]] = {g: [] for g in (*GROUPS.values(), MIRROR_GROUP)}
        self.sample_failures: dict[str, tuple[int, str]] = {}
        """group -> (samples that failed, the last failure): the coordinator moving, or down."""
        self.disk = ""
        self.mounted: Path | None = None
        self.faults: Faults | None = None
        self.fault_error: BaseException | None = None
        self.stop_faults = threading.Event()
        self.faults_over = threading.Event()
        """Set when the fault loop ends: `--rounds` done, or a fault that did not heal."""
        self.minutes_run = 0.0

    # -- addresses and views --------------------------------------------------------------------------------

    def address(self, broker: int) -> str:
        return self.source.specs[broker].address

    @property
    def bootstrap(self) -> str:
        return ",".join(self.address(b) for b in BROKERS)

    def live_view(self, avoid: set[int]) -> str:
        """A broker's address that is running and not in `avoid` (stale ones)."""
        alive = set(self.source.alive())
        for broker in BROKERS:
            if broker in alive and broker not in avoid:
                return self.address(broker)
        raise NotHealed("no live broker to ask")

    def healed(self, avoid: set[int]) -> None:
        """Every broker running, and every partition of the topic led with all 3 replicas in its ISR."""
        def ready() -> bool:
            if self.faults is not None:
                self.faults.restart_exited()
            if set(BROKERS) - set(self.source.alive()):
                raise NotHealed(f"brokers not running: {sorted(set(BROKERS) - set(self.source.alive()))}")
            return topic_ready(self.live_view(avoid), 3)

        wait_for(f"{TOPIC}: a leader and 3 in-sync replicas for each partition after the fault", ready,
                 HEAL_TIMEOUT_S, (self.source,))

    def leader_of(self, partition: int, avoid: set[int]) -> int:
        parts = view(self.live_view(avoid), [TOPIC]).partitions_of(TOPIC)
        return next((m.leader_id for tp, m in parts.items() if tp.partition == partition), -1)

    # -- the run --------------------------------------------------------------------------------------------

    def start(self) -> None:
        self.disk = mount_disk(self.source.specs[DISK_BROKER].directory / "data")
        if self.disk:
            self.mounted = self.source.specs[DISK_BROKER].directory / "data"
        say(f"starting the source (3 controllers + 3 brokers; broker {DISK_BROKER}'s data on "
            f"{self.disk or 'the plain disk: mount -t tmpfs refused, no full-disk fault'}) and the target (1 + 1)")
        start_cluster(self.source, BROKERS)
        start_cluster(self.target, (101,))
        self.create_topics()
        self.faults = Faults(self.source, self.rng, self.healed, self.leader_of,
                             DISK_BROKER if self.disk else None, self.args.hold_s, say)
        py = [sys.executable, "-m", "benchmarks.soak_clients"]
        for client in ("confluent", "kafka-python"):
            name = f"producer-{client}"
            self.producers[client] = self.child(name, [
                *py, "produce", "--client", client, "--bootstrap", self.bootstrap, "--topic", TOPIC,
                "--partitions", str(PARTITIONS), "--tag", client, "--rate", str(self.args.rate),
                "--out", str(self.clients / f"{name}.events")])
            self.consumers[client] = [self.child(f"consumer-{client}-{m}", [
                *py, "consume", "--client", client, "--bootstrap", self.bootstrap, "--topic", TOPIC,
                "--group", GROUPS[client], "--out", str(self.clients / f"consumer-{client}-{m}.events")])
                for m in range(self.args.members)]
        target = self.target.specs[101].address
        self.replicator = self.child("replicator", [
            sys.executable, "-m", "client_epochs.mirror.cli", "--source-bootstrap", self.bootstrap,
            "--target-bootstrap", target, "--topics", TOPIC, "--group", MIRROR_GROUP, "--status-interval-s", "5",
            "--consumer-property", "log_level=4", "--producer-property", "log_level=4"])

    def create_topics(self) -> None:
        from confluent_kafka.admin import AdminClient, NewTopic

        for cluster, replicas, config in ((self.source, 3, {"min.insync.replicas": "2"}), (self.target, 1, {})):
            address = cluster.specs[101].address
            admin = AdminClient({"bootstrap.servers": address, **checks.QUIET})
            for future in admin.create_topics([NewTopic(TOPIC, PARTITIONS, replicas, config=config)],
                                              request_timeout=60).values():
                future.result(timeout=90)
            wait_for(f"{TOPIC} on {address}: leaders and full ISRs", lambda a=address, r=replicas: topic_ready(a, r),
                     120, (cluster,))

    def child(self, name: str, command: list[str]) -> Child:
        child = Child(name, command, self.clients)
        self.children.append(child)
        return child

    def fault_loop(self) -> None:
        assert self.faults is not None
        try:
            while not self.stop_faults.wait(self.args.fault_every_s):
                self.faults.next()
                if self.args.rounds and self.faults.rounds >= self.args.rounds:
                    say(f"{self.faults.rounds} round(s) of every fault kind done")
                    return
        except BaseException as exc:  # noqa: BLE001 - reported by the main loop
            self.fault_error = exc
        finally:
            self.faults_over.set()

    def run(self) -> None:
        from client_epochs.offset_fetch import OffsetFetcher

        fetcher = OffsetFetcher(self.bootstrap)
        faults = threading.Thread(target=self.fault_loop, name="soak-faults", daemon=True)
        started = time.monotonic()
        deadline = started + self.args.minutes * 60
        faults.start()
        next_line = started + 10
        try:
            while time.monotonic() < deadline and not self.faults_over.is_set():
                time.sleep(2)
                if self.fault_error is not None:
                    raise RuntimeError(f"a fault did not heal: {self.fault_error}") from self.fault_error
                for child in self.children:
                    child.check()
                self.sample(fetcher)
                if time.monotonic() >= next_line:
                    next_line = time.monotonic() + 10
                    say(self.progress(started))
        finally:
            self.stop_faults.set()
            say("the fault schedule stops (the fault under way, if any, is undone first)")
            faults.join(CATCH_UP_TIMEOUT_S)
            fetcher.close()
            self.minutes_run = (time.monotonic() - started) / 60
        if self.fault_error is not None:
            raise RuntimeError(f"a fault did not heal: {self.fault_error}") from self.fault_error

    def sample(self, fetcher: Any) -> None:
        for group in self.samples:
            try:
                self.samples[group].append(checks.sample_committed(fetcher, group, TOPIC, PARTITIONS))
            except Exception as exc:  # noqa: BLE001 - a coordinator moving or down right now: the next sample
                self.sample_failures[group] = (self.sample_failures.get(group, (0, ""))[0] + 1,
                                               f"{type(exc).__name__}: {exc}")

    def progress(self, started: float) -> str:
        assert self.faults is not None
        acked = {c: _count_lines(self.clients / f"producer-{c}.events", "a ") for c in self.producers}
        committed = {g: sum(s[-1].values()) if s else 0 for g, s in self.samples.items()}
        done = sum(self.faults.counts.values()) - self.faults.counts["restart"]
        return (f"{(time.monotonic() - started) / 60:5.1f} min: acked {sum(acked.values()):,} "
                f"({', '.join(f'{c} {n:,}' for c, n in acked.items())}); committed "
                f"{', '.join(f'{g} {n:,}' for g, n in committed.items())}; faults {done}"
                f"{f' (now: {self.faults.current})' if self.faults.current else ''}")

    # -- the end --------------------------------------------------------------------------------------------

    def finish(self) -> int:
        from client_epochs.offset_fetch import OffsetFetcher

        say("stopping the producers (each flushes what it has in flight)")
        for child in self.producers.values():
            code = child.stop(DELIVERY_TIMEOUT_MS / 1000 + 30)
            if code != 0:
                raise RuntimeError(f"{child.name} exited {code}: {child.err.read_text(errors='replace')[-2000:]}")
        self.healed(set())
        ends = checks.end_offsets(self.bootstrap, TOPIC, PARTITIONS)
        say(f"the topic's high watermarks: {ends}; waiting for the consumers and the replicator to commit them")
        fetcher = OffsetFetcher(self.bootstrap)
        try:
            for group in self.samples:
                wait_for(f"group {group} to commit the high watermarks {ends}",
                         lambda g=group: self._caught_up(fetcher, g, ends), CATCH_UP_TIMEOUT_S, (self.source,))
        finally:
            fetcher.close()
        say("reading back every record of the source and the target")
        source = {p: checks.read_partition(self.bootstrap, TOPIC, p, ends[p]) for p in range(PARTITIONS)}
        target_address = self.target.specs[101].address
        target_ends = checks.end_offsets(target_address, TOPIC, PARTITIONS)
        target = {p: checks.read_partition(target_address, TOPIC, p, target_ends[p]) for p in range(PARTITIONS)}
        for child in self.children:
            child.stop(60)
        acked = checks.read_acks({c: self.clients / f"producer-{c}.events" for c in self.producers})
        records = checks.check_acked(acked, source)
        groups = {client: checks.consumer_rewinds([self.clients / f"consumer-{client}-{m}.events"
                                                   for m in range(self.args.members)]) for client in GROUPS}
        mirror = checks.replicator_check(TOPIC, acked, target)
        say("stopping the source to compare the replicas' segment files")
        self.source.stop()
        replica_dirs = {p: {b: self.source.specs[b].directory / "data" / f"{TOPIC}-{p}" for b in BROKERS}
                        for p in range(PARTITIONS)}
        replicas = checks.compare_replicas(replica_dirs, ends)
        self.copies = checks.copies_of(set(records.duplicated_values),
                                       {p: dirs[min(dirs)] for p, dirs in replica_dirs.items()}, ends)
        crashes = checks.unexpected_errors({n: s.log_path for c in (self.source, self.target)
                                            for n, s in c.specs.items()})
        return self.report(acked, records, groups, mirror, replicas, crashes)

    def _caught_up(self, fetcher: Any, group: str, ends: list[int]) -> bool:
        sample = checks.sample_committed(fetcher, group, TOPIC, PARTITIONS)
        self.samples[group].append(sample)
        if all(sample[p] >= ends[p] for p in range(PARTITIONS)):
            return True
        raise NotHealed(f"group {group} has committed {[sample[p] for p in range(PARTITIONS)]}")

    def bumped(self) -> list[bytes]:
        """The duplicated values whose copies differ in producer epoch (`checks.written_again_under_a_new_epoch`)."""
        return [value for value, copies in self.copies.items() if checks.written_again_under_a_new_epoch(copies)]

    def _compacted_segments(self) -> int:
        return sum(_segments_compacted(self.source.specs[b].log_path) for b in BROKERS)

    def report(self, acked: checks.Acked, records: checks.RecordCheck, groups: dict[str, checks.ConsumerCheck],
               mirror: checks.ReplicatorCheck, replicas: checks.ReplicaCheck, crashes: list[str]) -> int:
        assert self.faults is not None
        rows: list[tuple[str, str]] = [("minutes of faults", f"{self.minutes_run:.1f}")]
        rows += [(f"fault: {kind}", str(n)) for kind, n in sorted(self.faults.counts.items())]
        if not self.disk:
            rows.append(("fault: full disk", "not injected (mount -t tmpfs refused)"))
        per_producer = ", ".join(f"{c} {n:,}" for c, n in acked.by_producer.items())
        rows += [
            ("records acknowledged", f"{records.acked:,} ({per_producer})"),
            ("deliveries failed (not acknowledged)", f"{acked.failed:,}"),
            ("records checked at their offset", f"{records.checked:,}"),
            ("lost", str(records.lost)), ("at another offset", str(records.moved)),
            ("duplicated", f"{records.duplicated} ({len(self.bumped())} written again under a bumped producer epoch)"),
        ]
        for client, group in groups.items():
            rewinds = checks.committed_rewinds(self.samples[GROUPS[client]])
            rows += [(f"consumers {client} ({group.members} members): records handed over", f"{group.records:,}"),
                     (f"consumers {client}: handed over again from the committed offset", f"{group.redelivered:,}"),
                     (f"consumers {client}: rewinds / skips", f"{group.rewinds} / {group.skips}"),
                     (f"consumers {client}: committed offset rewinds ({self.sampled(GROUPS[client])})", str(rewinds))]
        mirror_committed = checks.committed_rewinds(self.samples[MIRROR_GROUP])
        rows.append(("__consumer_offsets segments compacted (all brokers)", f"{self._compacted_segments():,}"))
        rows += [("replicator: records copied", f"{mirror.copied:,}"),
                 ("replicator: acknowledged records missing on the target", str(mirror.missing)),
                 ("replicator: duplicated / misplaced on the target", f"{mirror.duplicated} / {mirror.misplaced}"),
                 ("replicator: rewinds (source offsets going back)", str(mirror.rewinds)),
                 (f"replicator: committed offset rewinds ({self.sampled(MIRROR_GROUP)})", str(mirror_committed)),
                 ("replicas compared (partitions x replicas)", f"{replicas.partitions} x "
                                                               f"{replicas.replicas // max(replicas.partitions, 1)}"),
                 ("batches / bytes identical up to the high watermark", f"{replicas.batches:,} / {replicas.bytes:,}"),
                 ("replica mismatches", str(len(replicas.mismatches))),
                 ("unexpected errors (tracebacks) in the nodes' logs", str(len(crashes)))]
        width = max(len(k) for k, _ in rows)
        print(f"soak: 3 controllers + 3 brokers, seed {self.args.seed}, a fault every {self.args.fault_every_s:g} s")
        for key, value in rows:
            print(f"  {key.ljust(width)}  {value}")
        problems = records.examples + [e for g in groups.values() for e in g.examples] + replicas.mismatches
        problems += [f"{value.decode()}: {', '.join(map(str, copies))}" + (
            ": written again under a bumped producer epoch (librdkafka#4953)"
            if checks.written_again_under_a_new_epoch(copies) else "") for value, copies in self.copies.items()]
        problems += self.faults.findings + crashes
        problems += [f"group {group}: the last failed committed-offset sample: {last}"
                     for group, (_, last) in self.sample_failures.items()]
        for problem in problems:
            print(f"  ! {problem}")
        bad = (records.lost + records.moved + records.duplicated + mirror.missing + mirror.rewinds + mirror_committed
               + len(replicas.mismatches) + len(crashes) + sum(g.rewinds + g.skips for g in groups.values())
               + sum(checks.committed_rewinds(self.samples[g]) for g in GROUPS.values()))
        print("result:", "OK (nothing lost, nothing duplicated, nothing rewound)" if bad == 0 else f"FAILED ({bad})")
        return 0 if bad == 0 else 1

    def sampled(self, group: str) -> str:
        failed, _ = self.sample_failures.get(group, (0, ""))
        return f"{len(self.samples[group])} samples" + (f", {failed} failed" if failed else "")

    def close(self) -> None:
        for child in self.children:
            if child.process.poll() is None:
                child.process.kill()
                child.process.wait()
        for cluster in (self.source, self.target):
            for process in cluster.processes.values():  # a paused node does not stop on SIGTERM
                if process.poll() is None:
                    process.send_signal(signal.SIGCONT)
            cluster.stop()
        if self.mounted is not None:
            subprocess.run(["umount", str(self.mounted)], capture_output=True)


class NotHealed(Exception):
    """A condition polled for does not hold yet; the message says how far it is."""


def topic_ready(address: str, replicas: int) -> bool:
    return topic_ready_of(address, replicas, TOPIC, PARTITIONS)


def _segments_compacted(log_path: Path) -> int:
    """The `__consumer_offsets` segments a node's cleaner rewrote, from its log lines ("compacted 2 of 5")."""
    total = 0
    try:
        with open(log_path, encoding="utf-8", errors="replace") as file:
            for line in file:
                if "__consumer_offsets-" in line and ": compacted " in line:
                    total += int(line.split(": compacted ", 1)[1].split(" ", 1)[0])
    except FileNotFoundError:
        pass
    return total


def _count_lines(path: Path, prefix: str) -> int:
    try:
        with open(path, "rb") as file:
            return sum(1 for line in file if line.startswith(prefix.encode()))
    except FileNotFoundError:
        return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.soak", description=__doc__.split("\n\n")[0])
    parser.add_argument("--minutes", type=float, default=60.0, help="how long faults are injected (default 60)")
    parser.add_argument("--fault-every-s", type=float, default=20.0, help="seconds between faults")
    parser.add_argument("--hold-s", type=float, default=8.0, help="how long a node stays down, paused, stale or full")
    parser.add_argument("--rate", type=float, default=100.0, help="records a second per producer")
    parser.add_argument("--members", type=int, default=2, help="members of each consumer group")
    parser.add_argument("--rounds", type=int, default=0,
                        help="stop after this many rounds of every fault kind, if before --minutes (0: no limit)")
    parser.add_argument("--seed", type=int, default=19)
    parser.add_argument("--dir", type=Path, default=None, help="where the clusters live (default: a temp dir)")
    args = parser.parse_args(argv)
    if args.minutes <= 0 or args.fault_every_s <= 0 or args.rate <= 0 or args.members < 1 or args.rounds < 0:
        parser.error("--minutes, --fault-every-s and --rate must be above 0, --members at least 1, --rounds 0 or more")
    directory = (args.dir or Path(tempfile.mkdtemp(prefix="soak-"))).resolve()
    soak = Soak(args, directory)
    status = 1
    try:
        soak.start()
        soak.run()
        status = soak.finish()
        return status
    finally:
        soak.close()
        _keep_or_remove(directory, temporary=args.dir is None, passed=status == 0)


def _keep_or_remove(directory: Path, *, temporary: bool, passed: bool) -> None:
    """A failed soak keeps its directory: every node's and client's log in it is what says why."""
    if temporary and passed:
        shutil.rmtree(directory, ignore_errors=True)
    elif not passed:
        print(f"soak: the clusters' and clients' logs are kept in {directory}", flush=True)


if __name__ == "__main__":
    sys.exit(main())
