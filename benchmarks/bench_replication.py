"""Replication's price and a returning broker's catch-up, on three real brokers on 127.0.0.1.

Run: `./run bench` (all benchmarks) or `.venv/bin/python -m benchmarks.bench_replication`.
BENCH_REPLICATION_MESSAGES sets the messages of each produce run (default 500,000 of 1 KiB);
BENCH_REPLICATION_MISSED_MB how much a stopped follower misses before it returns (default 1024:
the issue's 1 GiB); BENCH_REPLICATION_DIR where the brokers' logs go (a temporary directory under
the current one by default, removed at the end).

The cluster is `quorum.launcher.LocalCluster`: one controller and three brokers, each a `quorum
start` process, with `replica.lag.time.max.ms=5000` (Kafka's 30 s would make the catch-up run wait
half a minute for the stopped follower to leave the ISR before acks=all answers again). Two topics
of one partition, led by the same broker: `rf1` (replication factor 1) and `rf3` (3, with
`min.insync.replicas=2`).

* Throughput and latency: confluent-kafka produces 1 KiB messages in a child process (the same
  settings for both rows: linger.ms=5, batch.size=1 MB, no compression), acks=1 to rf1 beside
  acks=all to rf3, in the same run. Each message's latency is the time from `produce()` to its
  delivery report (librdkafka's own queueing included, as Kafka's producer-perf-test counts it);
  the table gives MB/s, messages/s, and the latency's median and 99th percentile.
* Catch-up: a follower of rf3 is stopped with SIGKILL, the other two take BENCH_REPLICATION_MISSED_MB
  of acks=all messages (the ISR shrinks to the two after replica.lag.time.max.ms), then the follower
  is started again; the figure is the time from its start to Metadata listing it in rf3's ISR
  again, beside the time the leader took to receive the same bytes from the producer.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

if __package__ in (None, ""):  # run as a script: make the project importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.bench_broker import QUIET, wait_until  # noqa: E402
from benchmarks.table import print_table, progress, run_child  # noqa: E402

MESSAGE_BYTES = 1024
BROKERS = (101, 102, 103)
READY_TIMEOUT_S = 60.0
SETTINGS = {"replica.lag.time.max.ms": "5000"}
CATCH_UP_GOAL_MB_S = 200
"""Issue 20: a returning follower catches up at 200 MB/s or more."""
PRODUCER = {"linger.ms": 5, "batch.size": 1_000_000, "compression.type": "none"}


def produce_with_latency(address: str, topic: str, messages: int, acks: str, label: str) -> dict[str, Any]:
    """Produce `messages` to `topic`; throughput and each message's produce-to-delivery latency."""
    from confluent_kafka import Producer

    latencies: list[float] = []
    errors: list[str] = []
    clock = time.perf_counter

    def delivered(error: Any, message: Any, sent_at: float) -> None:
        if error is not None:
            errors.append(str(error))
        else:
            latencies.append(clock() - sent_at)

    producer = Producer({"bootstrap.servers": address, "acks": acks, **PRODUCER, **QUIET})
    producer.list_topics(topic, timeout=30)
    value = bytes(MESSAGE_BYTES)
    start = clock()
    next_report = start + 2.0
    for sent in range(messages):
        while True:
            try:
                stamp = clock()
                producer.produce(topic, value, on_delivery=lambda e, m, t=stamp: delivered(e, m, t))
                break
            except BufferError:
                producer.poll(0.001)
        if sent % 10_000 == 0:
            producer.poll(0)
            if clock() >= next_report:
                progress(f"{label}: {sent:,} / {messages:,} messages handed to the client")
                next_report = clock() + 2.0
    if producer.flush(300):
        raise TimeoutError(f"{label}: messages still unacknowledged after 5 minutes")
    seconds = clock() - start
    if errors:
        raise RuntimeError(f"{label}: delivery failed: {errors[:5]}")
    latencies.sort()
    return {"seconds": seconds, "messages": messages, "p50_ms": 1000 * latencies[len(latencies) // 2],
            "p99_ms": 1000 * latencies[min(len(latencies) - 1, int(len(latencies) * 0.99))]}


def child_main(arguments: str) -> None:
    job = json.loads(arguments)
    print(json.dumps(produce_with_latency(job["address"], job["topic"], job["messages"], job["acks"], job["label"])),
          flush=True)


def produce(address: str, topic: str, messages: int, acks: str, label: str) -> dict[str, Any]:
    progress(label)
    job = {"address": address, "topic": topic, "messages": messages, "acks": acks, "label": label}
    return run_child("benchmarks.bench_replication", json.dumps(job), timeout_s=120 + messages / 1_000)


def partition_state(address: str, topic: str) -> tuple[int, tuple[int, ...]]:
    """(leader, ISR) of partition 0 of `topic`, as a broker answers Metadata."""
    from confluent_kafka.admin import AdminClient

    found = AdminClient({"bootstrap.servers": address, **QUIET}).list_topics(topic, timeout=10).topics[topic]
    partition = found.partitions[0]
    return partition.leader, tuple(sorted(partition.isrs))


def create_topics(cluster: Any, address: str) -> int:
    """rf1 and rf3 led by the same broker; returns that broker's id."""
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": address, **QUIET})
    futures = admin.create_topics([NewTopic("rf3", 1, 3, config={"min.insync.replicas": "2"})], request_timeout=60)
    for future in futures.values():
        future.result(timeout=90)
    wait_until("rf3 to have a leader and a full ISR",
               lambda: (lambda s: s[0] in BROKERS and s[1] == BROKERS)(partition_state(address, "rf3")),
               READY_TIMEOUT_S, cluster)
    leader = partition_state(address, "rf3")[0]
    rf1 = NewTopic("rf1", num_partitions=1, replica_assignment=[[leader]])
    futures = admin.create_topics([rf1], request_timeout=60)
    for future in futures.values():
        future.result(timeout=90)
    wait_until("rf1 to have its leader", lambda: partition_state(address, "rf1")[0] == leader, READY_TIMEOUT_S,
               cluster)
    return leader


def main() -> None:
    from quorum.launcher import LocalCluster

    messages = int(os.environ.get("BENCH_REPLICATION_MESSAGES", "500000"))
    missed_mb = int(os.environ.get("BENCH_REPLICATION_MISSED_MB", "1024"))
    base = os.environ.get("BENCH_REPLICATION_DIR") or os.getcwd()
    with tempfile.TemporaryDirectory(prefix="bench-replication-", dir=base) as directory:
        cluster = LocalCluster(directory, controllers=1, brokers=len(BROKERS), settings=SETTINGS)
        cluster.format_storage()
        cluster.start()
        try:
            bootstrap = ",".join(cluster.specs[b].address for b in BROKERS)
            for broker in BROKERS:  # before a client connects: librdkafka would log every refused attempt
                wait_until(f"broker {broker} to listen", lambda b=broker: _listening(cluster.specs[b].address),
                           READY_TIMEOUT_S, cluster)
            wait_until("three unfenced brokers", lambda: _brokers(bootstrap) == set(BROKERS), READY_TIMEOUT_S,
                       cluster)
            leader = create_topics(cluster, bootstrap)
            rows = []
            for topic, acks in (("rf1", "1"), ("rf3", "all")):
                result = produce(bootstrap, topic, messages, acks, f"acks={acks} to {topic}")
                mb = result["messages"] * MESSAGE_BYTES / 1e6
                rows.append((topic, acks, result["messages"], mb, result["seconds"], mb / result["seconds"],
                             result["messages"] / result["seconds"], result["p50_ms"], result["p99_ms"]))
            print_table(f"confluent-kafka producing {MESSAGE_BYTES}-byte messages to one partition led by broker "
                        f"{leader} (3 brokers, 127.0.0.1)",
                        ["topic", "acks", "messages", "MB", "seconds", "MB/s", "msgs/s", "p50 ms", "p99 ms"], rows)
            catch_up(cluster, bootstrap, leader, missed_mb)
        finally:
            cluster.stop()


def _listening(address: str) -> bool:
    host, port = address.split(":")
    with socket.create_connection((host, int(port)), timeout=1):
        return True


def _brokers(bootstrap: str) -> set[int]:
    from confluent_kafka.admin import AdminClient

    return set(AdminClient({"bootstrap.servers": bootstrap, **QUIET}).list_topics(timeout=5).brokers)


def catch_up(cluster: Any, bootstrap: str, leader: int, missed_mb: int) -> None:
    """Stop a follower, produce `missed_mb` without it, start it: the time until it is in the ISR again."""
    follower = next(b for b in BROKERS if b != leader)
    alive = ",".join(cluster.specs[b].address for b in BROKERS if b != follower)
    progress(f"kill -9 of follower {follower}; {missed_mb} MB produced without it")
    cluster.kill(follower, signal.SIGKILL)
    missed = produce(alive, "rf3", missed_mb * 1_000_000 // MESSAGE_BYTES, "all", f"{missed_mb} MB while {follower} "
                     "is down")
    progress(f"starting broker {follower} again")
    started = time.monotonic()
    cluster.start_node(follower)
    wait_until(f"broker {follower} to listen again", lambda: _listening(cluster.specs[follower].address), 600,
               cluster)
    listening = time.monotonic() - started
    wait_until(f"broker {follower} back in the ISR of rf3",
               lambda: follower in partition_state(alive, "rf3")[1], 600, cluster)
    rejoined = time.monotonic() - started
    mb = missed["messages"] * MESSAGE_BYTES / 1e6
    rate = mb / rejoined
    print_table("A follower that missed data returns: from its start to its place in the ISR (\"listening after\": "
                "the process start-up and log recovery; the copy is the rest)",
                ["missed MB", "produced in s (to the leader, acks=all)", "listening after s", "back in the ISR after s",
                 "catch-up MB/s", "goal", "copy alone MB/s"],
                [(mb, missed["seconds"], listening, rejoined, rate,
                  f">= {CATCH_UP_GOAL_MB_S} MB/s {'met' if rate >= CATCH_UP_GOAL_MB_S else 'NOT met'}",
                  mb / max(rejoined - listening, 1e-3))])


if __name__ == "__main__":
    if len(sys.argv) > 2 and sys.argv[1] == "--child":
        child_main(sys.argv[2])
    else:
        main()
