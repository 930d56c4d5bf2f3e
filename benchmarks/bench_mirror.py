"""The replicator's throughput and replication latency, 1 and 2 processes, beside a raw consume-produce
loop, in one run (issue 32).

Run: `./run bench` (all benchmarks) or `.venv/bin/python -m benchmarks.bench_mirror`. BENCH_MIRROR_TOTAL
sets the records preloaded for the throughput runs (default 120,000 of 200 bytes), BENCH_MIRROR_PACED
the records of each latency run (default 6,000 at BENCH_MIRROR_PACE a second, default 1,000).

Two clusters (1 controller and 1 broker each, `quorum.launcher.LocalCluster`) on this machine; the
source holds topic `bench` (4 partitions), preloaded. Each replicator copies it into a fresh target
topic of the same name (deleted and created again between runs), with a fresh consumer group:
- "raw loop": `benchmarks.mirror_loops --client confluent` (subscribe, idempotent acks=all producer,
  flush and commit every 500 records or 1 s), the loop a MirrorMaker-style user would write;
- "replicator x1" and "replicator x2": `client-epochs-mirror` (the project's, one process or two in
  the same group sharing the partitions).
Throughput: from the first record on the target to the last, the records copied in that span a
second (process start and the group join are left out). Latency: with the replicator caught up, a
producer writes BENCH_MIRROR_PACED records at a fixed pace with CreateTime timestamps; a consumer on
the target takes each copy's arrival minus its timestamp (the timestamps are copied); p50 and p99.

Goals (issue 32): replicator x1 at least 0.8x the raw loop; replicator x2 at least 1.6x x1. Every
process of the run shares this machine's two cores (both brokers, both controllers, the producer,
the replicators and the reading consumer), so a second process adds parallel work only where the
cores have room; the table prints the goal beside each figure.
"""

from __future__ import annotations

import os
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from benchmarks.table import ROOT, print_table, progress
from quorum.launcher import LocalCluster

TOTAL = int(os.environ.get("BENCH_MIRROR_TOTAL", "120000"))
PACED = int(os.environ.get("BENCH_MIRROR_PACED", "6000"))
PACE = int(os.environ.get("BENCH_MIRROR_PACE", "1000"))
PARTITIONS = 4
TOPIC = "bench"
QUIET = {"log_level": 0}
WAIT_S = 300.0
SETTINGS = {"offsets.topic.replication.factor": "1", "offsets.topic.num.partitions": "4",
            "group.initial.rebalance.delay.ms": "0", "auto.create.topics.enable": "false"}


def start(directory: Path) -> LocalCluster:
    cluster = LocalCluster(directory, controllers=1, brokers=1, settings=SETTINGS)
    cluster.format_storage()
    cluster.start(timeout=90)
    return cluster


def produce(address: str, count: int, pace: int | None = None) -> None:
    producer = Producer({"bootstrap.servers": address, "linger.ms": 5, "acks": "all", **QUIET})
    started = time.monotonic()
    for n in range(count):
        producer.produce(TOPIC, os.urandom(100).hex().encode(), key=str(n).encode(), partition=n % PARTITIONS)
        if pace is not None:
            ahead = started + (n + 1) / pace - time.monotonic()
            if ahead > 0:
                producer.poll(ahead)
        else:
            producer.poll(0)
    assert producer.flush(120) == 0


def fresh_target_topic(address: str) -> None:
    admin = AdminClient({"bootstrap.servers": address, **QUIET})
    if TOPIC in admin.list_topics(timeout=30).topics:
        for future in admin.delete_topics([TOPIC], request_timeout=30).values():
            future.result(timeout=60)
        deadline = time.monotonic() + 60
        while TOPIC in admin.list_topics(timeout=30).topics:
            if time.monotonic() > deadline:
                raise RuntimeError("the target topic was not deleted within 60 s")
            time.sleep(0.2)
    deadline = time.monotonic() + 60
    while True:  # the deletion may still be applied: try again until created
        try:
            for future in admin.create_topics([NewTopic(TOPIC, PARTITIONS, 1)], request_timeout=30).values():
                future.result(timeout=60)
            return
        except Exception:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.5)


def copied(reader: Consumer) -> int:
    """Records in the target topic (0 while the reader's metadata does not list the new topic yet)."""
    try:
        return sum(reader.get_watermark_offsets(TopicPartition(TOPIC, p), timeout=10, cached=False)[1]
                   for p in range(PARTITIONS))
    except KafkaException:
        return 0


def commands(kind: str, source: str, target: str, group: str) -> list[list[str]]:
    if kind == "raw loop":
        return [[sys.executable, "-m", "benchmarks.mirror_loops", "--client", "confluent", "--source-bootstrap",
                 source, "--target-bootstrap", target, "--topics", TOPIC, "--group", group]]
    mirror = [sys.executable, "-m", "client_epochs.mirror.cli", "--source-bootstrap", source, "--target-bootstrap",
              target, "--topics", TOPIC, "--group", group, "--status-interval-s", "30"]
    return [mirror] * (2 if kind == "replicator x2" else 1)


def latency(source: str, target: str, expected_total: int) -> tuple[float, float]:
    """p50 and p99 (ms) of record timestamp to arrival on the target, for PACED paced records."""
    reader = Consumer({"bootstrap.servers": target, "group.id": f"latency-{time.time_ns()}", **QUIET,
                       "enable.auto.commit": False})
    reader.assign([TopicPartition(TOPIC, p, expected_total // PARTITIONS) for p in range(PARTITIONS)])

    writer = threading.Thread(target=produce, args=(source, PACED, PACE))
    writer.start()
    delays: list[float] = []
    deadline = time.monotonic() + WAIT_S
    try:
        while len(delays) < PACED and time.monotonic() < deadline:
            for message in reader.consume(500, 0.2):
                if message.error() is None:
                    delays.append(time.time() * 1000 - message.timestamp()[1])
    finally:
        writer.join()
        reader.close()
    if len(delays) < PACED:
        raise RuntimeError(f"only {len(delays)} of {PACED} paced records reached the target within {WAIT_S:g} s")
    delays.sort()
    return statistics.median(delays), delays[int(len(delays) * 0.99) - 1]


def run(kind: str, source: str, target: str, logs: Path, total: int) -> tuple[float, float, float]:
    """Records a second, p50 and p99 latency (ms) of one replicator set-up copying the `total` records
    the source holds."""
    fresh_target_topic(target)
    group = f"bench-{kind.replace(' ', '-')}-{time.time_ns()}"
    processes = []
    for n, command in enumerate(commands(kind, source, target, group)):
        log = open(logs / f"{group}-{n}.log", "w")  # noqa: SIM115 - closed with the process below
        processes.append((subprocess.Popen(command, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT), log))
    reader = Consumer({"bootstrap.servers": target, "group.id": "bench-watch", **QUIET})
    try:
        first = last = None
        deadline = time.monotonic() + WAIT_S
        while True:
            count = copied(reader)
            now = time.monotonic()
            if first is None and count > 0:
                first = (now, count)
            if count >= total:
                last = (now, count)
                break
            if now > deadline or any(p.poll() is not None for p, _ in processes):
                raise RuntimeError(f"{kind}: {count} of {total} copied when it stopped or the deadline passed "
                                   f"(logs in {logs})")
            time.sleep(0.05)
        assert first is not None
        throughput = (last[1] - first[1]) / max(last[0] - first[0], 1e-3)
        progress(f"{kind}: {total:,} records copied at {throughput:,.0f}/s; latency of {PACED:,} records at "
                 f"{PACE:,}/s")
        p50, p99 = latency(source, target, total)
        return throughput, p50, p99
    finally:
        reader.close()
        for process, log in processes:
            if process.poll() is None:
                process.send_signal(signal.SIGTERM)
            try:
                process.wait(timeout=60)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
            log.close()


def main() -> int:
    with tempfile.TemporaryDirectory(prefix="bench-mirror-", dir=ROOT) as scratch:
        base = Path(scratch)
        progress("starting a source and a target cluster (1 controller + 1 broker each)")
        source_cluster, target_cluster = start(base / "source"), start(base / "target")
        try:
            source, target = source_cluster.bootstrap_servers, target_cluster.bootstrap_servers
            admin = AdminClient({"bootstrap.servers": source, **QUIET})
            for future in admin.create_topics([NewTopic(TOPIC, PARTITIONS, 1)], request_timeout=30).values():
                future.result(timeout=60)
            progress(f"preloading {TOTAL:,} records of 200 bytes into {TOPIC} ({PARTITIONS} partitions)")
            produce(source, TOTAL)
            results = {}
            for kind in ("raw loop", "replicator x1", "replicator x2"):
                progress(f"{kind}: copying")
                # each latency run's paced records stay in the source: the next run copies them too
                results[kind] = run(kind, source, target, base, TOTAL + PACED * len(results))
        finally:
            source_cluster.stop()
            target_cluster.stop()
    raw, one, two = results["raw loop"], results["replicator x1"], results["replicator x2"]
    rows = [("raw loop (confluent-kafka consume -> produce)", raw[0], "1.00x", "", raw[1], raw[2]),
            ("client-epochs-mirror, 1 process", one[0], f"{one[0] / raw[0]:.2f}x", ">= 0.8x raw", one[1], one[2]),
            ("client-epochs-mirror, 2 processes", two[0], f"{two[0] / one[0]:.2f}x of x1", ">= 1.6x x1",
             two[1], two[2])]
    print_table("Replication, source -> target (1 + 1 brokers each, one machine, 2 cores)",
                ("replicator", "records/s", "ratio", "goal", "latency p50 ms", "latency p99 ms"), rows, left=(3,))
    return 0


if __name__ == "__main__":
    sys.exit(main())
