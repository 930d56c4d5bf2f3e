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

* Throughput and latency: confluent-kafka produces in a child process (the same settings for both
  rows of a pair: linger.ms=5, batch.size=1 MB), acks=1 to rf1 beside acks=all to rf3, in the same
  run: 1 KiB messages, 10 KiB messages (a tenth as many), and 1 KiB messages in lz4-compressed
  batches (values half random, so they compress about 2:1). Each message's latency is the time from
  `produce()` to its delivery report (librdkafka's own queueing included, as Kafka's
  producer-perf-test counts it); the table gives MB/s, messages/s, the latency's median and 99th
  percentile, the leader's CPU seconds over the row and the other two brokers' (rf3's followers;
  compare CPU per MB between commits on a busy machine, where MB/s move by 2-3x from run to run). The
  goal column is issue 17's: acks=all RF=3 at 0.6x or more of acks=1 RF=1's MB/s, with a p99 at most 2x.
  Under it, where each rf3 row's acks=all Produce time went (issue 37's latency breakdown), from the
  brokers' metrics endpoints (`quorum.metrics.port`) read before and after the row: the leader's
  Kafka request metrics for Produce (queue, leader append = LocalTimeMs, the ISR wait = RemoteTimeMs,
  response queue and send, total), the ISR wait split at the follower that completed it (the wait
  for a fetch to carry the data, the follower's round trip until its next fetch acknowledges it,
  the high watermark's advance until the produce resumes), and within the round the followers'
  appends, their turnaround (an answer decoded to the next fetch out, the append included) and the
  leader's sending of their answers (FetchFollower ResponseSendTimeMs), each as its mean and p99 (a
  histogram bucket's upper bound).
  Last, the page cache floor: 256 MiB written to a new file beside the leader's log before the
  rows (kept until the end, so that the rows get none of its pages), its MB/s and CPU per MB, as
  every append lands in new page-cache pages (`benchmarks.page_cache`; it moves with the machine's
  memory, within a run too: compare the brokers' CPU per MB). Under the tables, the dirty pages at
  each row's end beside the kernel's background writeback threshold: rows past it run while the
  flusher writes back as fast as the brokers dirty.
* Catch-up: a follower of rf3 is stopped with SIGKILL, the other two take BENCH_REPLICATION_MISSED_MB
  of acks=all messages (the ISR shrinks to the two after replica.lag.time.max.ms), then the follower
  is started again. A Metadata client polls every 20 ms for three moments after its start: it
  listens, it is unfenced (its log says so: registered and caught up with the metadata; the
  controller refuses a new incarnation with DUPLICATE_BROKER_REGISTRATION until the killed one's
  broker.session.timeout.ms has passed, as Kafka's does, and Metadata lists the killed one until
  then), and it is back in rf3's ISR. The
  copy is the time from unfenced (its fetcher starts then) to in the ISR; issue 20's goal is on the
  copy's MB/s, and the end-to-end rate from the process start is beside it, with the follower's
  CPU seconds over the whole return. The last row is the machine's ceiling for the follower's side:
  the same number of bytes written by a plain Python loop into a new file in the follower's log
  directory, in chunks of replica.fetch.response.max.bytes (a catching-up follower appends one
  response at a time), without fsync, as the follower's appends reach only the page cache.
"""

from __future__ import annotations

import functools
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
from benchmarks.node_metrics import Histogram, histograms, metrics_url  # noqa: E402
from benchmarks.page_cache import DirtyPages, PageCacheFloor, raw_write  # noqa: E402
from benchmarks.table import print_table, progress, run_child  # noqa: E402

MESSAGE_BYTES = 1024
BROKERS = (101, 102, 103)
READY_TIMEOUT_S = 60.0
SETTINGS = {"replica.lag.time.max.ms": "5000", "quorum.metrics.port": "0"}
CATCH_UP_GOAL_MB_S = 200
"""Issue 20: a returning follower catches up at 200 MB/s or more."""
THROUGHPUT_GOAL = 0.6
P99_GOAL = 2.0
"""Issue 17: acks=all RF=3 at THROUGHPUT_GOAL x acks=1 RF=1's MB/s or more, its p99 at most P99_GOAL x."""
PRODUCER = {"linger.ms": 5, "batch.size": 1_000_000}
KINDS = ((MESSAGE_BYTES, "none", 1), (10 * MESSAGE_BYTES, "none", 10), (MESSAGE_BYTES, "lz4", 1))
"""(message bytes, compression.type, divisor of BENCH_REPLICATION_MESSAGES) of each pair of rows."""
POLL_S = 0.02


def message_value(size: int, compression: str) -> bytes:
    """Zeros, or for a compressed row half random bytes repeated (about 2:1 for lz4)."""
    if compression == "none":
        return bytes(size)
    half = os.urandom(size // 2)
    return (half * 2 + bytes(size))[:size]


def produce_with_latency(address: str, topic: str, messages: int, acks: str, label: str,
                         message_bytes: int = MESSAGE_BYTES, compression: str = "none") -> dict[str, Any]:
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

    producer = Producer({"bootstrap.servers": address, "acks": acks, "compression.type": compression, **PRODUCER,
                         **QUIET})
    producer.list_topics(topic, timeout=30)
    value = message_value(message_bytes, compression)
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
    print(json.dumps(produce_with_latency(job["address"], job["topic"], job["messages"], job["acks"], job["label"],
                                          job["message_bytes"], job["compression"])), flush=True)


def produce(address: str, topic: str, messages: int, acks: str, label: str, message_bytes: int = MESSAGE_BYTES,
            compression: str = "none") -> dict[str, Any]:
    progress(label)
    job = {"address": address, "topic": topic, "messages": messages, "acks": acks, "label": label,
           "message_bytes": message_bytes, "compression": compression}
    return run_child("benchmarks.bench_replication", json.dumps(job),
                     timeout_s=120 + messages * message_bytes / 1_000_000)


def cpu_seconds(pid: int) -> float:
    """A process's user + system CPU seconds so far, from /proc."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


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
            floor = PageCacheFloor(cluster.specs[leader].log_path.parent, "beside the leader's log")
            try:
                throughput(cluster, bootstrap, leader, messages)
                catch_up(cluster, bootstrap, leader, missed_mb)
            finally:
                floor.close()
            print(f"{floor.line}; rf3 writes each byte on three brokers, a returning follower each byte it missed")
        finally:
            cluster.stop()


def throughput(cluster: Any, bootstrap: str, leader: int, messages: int) -> None:
    """acks=1 to rf1 beside acks=all to rf3, for each kind of message; the goal on the rf3 rows."""
    pid = cluster.processes[leader].pid
    others = [cluster.processes[b].pid for b in BROKERS if b != leader]
    urls = {b: metrics_url(cluster.specs[b].log_path) for b in BROKERS}
    rows = []
    parts_rows = []
    dirty = DirtyPages()
    for message_bytes, compression, divisor in KINDS:
        pair = []
        for topic, acks in (("rf1", "1"), ("rf3", "all")):
            count = max(1, messages // divisor)
            before, others_before = cpu_seconds(pid), sum(map(cpu_seconds, others))
            scraped = {b: histograms(url) for b, url in urls.items()}
            result = produce(bootstrap, topic, count, acks, f"acks={acks} to {topic}, {message_bytes}-byte messages, "
                             f"compression {compression}", message_bytes, compression)
            cpu, others_cpu = cpu_seconds(pid) - before, sum(map(cpu_seconds, others)) - others_before
            dirty.mark(f"{topic} {message_bytes} B {compression}")
            mb = count * message_bytes / 1e6
            pair.append((mb / result["seconds"], result["p99_ms"]))
            goal = ""
            if topic == "rf3":
                ratio, p99_ratio = pair[1][0] / pair[0][0], pair[1][1] / max(pair[0][1], 1e-3)
                met = ratio >= THROUGHPUT_GOAL and p99_ratio <= P99_GOAL
                goal = (f"{ratio:.2f}x MB/s (>= {THROUGHPUT_GOAL}), p99 {p99_ratio:.1f}x (<= {P99_GOAL:.0f}): "
                        f"{'met' if met else 'NOT met'}")
            rows.append((topic, acks, message_bytes, compression, count, mb, result["seconds"], mb / result["seconds"],
                         count / result["seconds"], result["p50_ms"], result["p99_ms"], cpu, 1000 * cpu / mb,
                         others_cpu, goal))
            if topic == "rf3":
                after = {b: histograms(url) for b, url in urls.items()}
                parts_rows.append((message_bytes, compression, *wait_parts(scraped, after, leader)))
    print_table(f"confluent-kafka producing to one partition led by broker {leader} (3 brokers, 127.0.0.1; "
                "CPU: the processes' CPU seconds over the row; the other brokers are rf3's followers)",
                ["topic", "acks", "bytes", "compression", "messages", "MB", "seconds", "MB/s", "msgs/s", "p50 ms",
                 "p99 ms", "leader CPU s", "leader ms/MB", "other brokers' CPU s", "goal (RF=3 vs RF=1)"], rows,
                left=(3, 14))
    print_table("Where an acks=all Produce's time goes on rf3 (mean / p99 ms, p99 a histogram bucket's upper bound): "
                "the leader's Kafka request metrics (kafka_network_RequestMetrics_*{request=\"Produce\"}), its "
                "wait split by follower (quorum_replication_*: fetch wait, round, HW advance); the round holds the "
                "leader's send of the answer (FetchFollower ResponseSendTimeMs) and the follower's turnaround, "
                "which holds its append (both timed on the followers)",
                ["bytes", "compression", "produces", *PART_LABELS], parts_rows, left=(1,))
    if (dirty_line := dirty.line()) is not None:
        print(dirty_line)


PARTS = (
    ("queue", "kafka_network_RequestMetrics_RequestQueueTimeMs", "Produce"),
    ("leader append", "kafka_network_RequestMetrics_LocalTimeMs", "Produce"),
    ("ISR wait", "kafka_network_RequestMetrics_RemoteTimeMs", "Produce"),
    ("follower fetch wait", "quorum_replication_FollowerFetchWaitMs", None),
    ("follower round", "quorum_replication_FollowerRoundMs", None),
    ("follower append", "quorum_replication_FollowerAppendMs", "followers"),
    ("follower turnaround", "quorum_replication_FollowerTurnaroundMs", "followers"),
    ("answer send", "kafka_network_RequestMetrics_ResponseSendTimeMs", "FetchFollower"),
    ("HW advance", "quorum_replication_HighWatermarkAdvanceMs", None),
    ("response queue", "kafka_network_RequestMetrics_ResponseQueueTimeMs", "Produce"),
    ("response send", "kafka_network_RequestMetrics_ResponseSendTimeMs", "Produce"),
    ("total", "kafka_network_RequestMetrics_TotalTimeMs", "Produce"),
)
"""(column, histogram, whose): a Produce request metric of the leader, a part of the leader's acks=all
waits (None), or the followers' appends, summed over both."""
PART_LABELS = [label for label, _, _ in PARTS]


def wait_parts(before: dict[int, Any], after: dict[int, Any], leader: int) -> list[object]:
    """The produces counted over a row, then 'mean / p99' of each of PARTS over it."""
    def delta(broker: int, name: str, labels: tuple[tuple[str, str], ...]) -> Histogram | None:
        found = after[broker].get((name, labels))
        return None if found is None else found.minus(before[broker].get((name, labels)))

    cells: list[object] = []
    produces = delta(leader, "kafka_network_RequestMetrics_TotalTimeMs", (("request", "Produce"),))
    for _, name, whose in PARTS:
        if whose == "followers":
            series = [h for b in BROKERS if b != leader and (h := delta(b, name, ())) is not None]
            found = functools.reduce(Histogram.plus, series) if series else None
        else:
            found = delta(leader, name, (("request", whose),) if whose else ())
        mean = found.mean() if found is not None else None
        p99 = found.quantile(0.99) if found is not None else None
        cells.append("-" if mean is None else f"{mean:.2f} / {p99:g}")
    return [int(produces.count) if produces is not None else 0, *cells]


def _unfenced_lines(log_path: Path, broker: int) -> int:
    """How many times the broker's log says the controller unfenced it. Why not Metadata: the killed
    incarnation stays listed (registered, unfenced) until its session times out, so a listing said
    "unfenced" before the new one had registered, and the copy's time took in the registration wait."""
    return log_path.read_text(errors="replace").count(f"broker {broker} is unfenced")


def _listening(address: str) -> bool:
    host, port = address.split(":")
    with socket.create_connection((host, int(port)), timeout=1):
        return True


def _brokers(bootstrap: str) -> set[int]:
    from confluent_kafka.admin import AdminClient

    return set(AdminClient({"bootstrap.servers": bootstrap, **QUIET}).list_topics(timeout=5).brokers)


def catch_up(cluster: Any, bootstrap: str, leader: int, missed_mb: int) -> None:
    """Stop a follower, produce `missed_mb` without it, start it: when it listens, is unfenced and is
    in the ISR again; the copy's rate beside the machine's raw write of the same bytes."""
    from confluent_kafka.admin import AdminClient

    follower = next(b for b in BROKERS if b != leader)
    alive = ",".join(cluster.specs[b].address for b in BROKERS if b != follower)
    progress(f"kill -9 of follower {follower}; {missed_mb} MB produced without it")
    cluster.kill(follower, signal.SIGKILL)
    missed = produce(alive, "rf3", missed_mb * 1_000_000 // MESSAGE_BYTES, "all", f"{missed_mb} MB while {follower} "
                     "is down")
    admin = AdminClient({"bootstrap.servers": alive, **QUIET})

    def metadata() -> Any:
        return admin.list_topics("rf3", timeout=10)

    progress(f"starting broker {follower} again")
    log_path = cluster.specs[follower].log_path
    unfenced_before = _unfenced_lines(log_path, follower)
    started = time.monotonic()
    cluster.start_node(follower)
    pid = cluster.processes[follower].pid
    moments = {}
    for moment, check in (("listening", lambda: _listening(cluster.specs[follower].address)),
                          ("unfenced", lambda: _unfenced_lines(log_path, follower) > unfenced_before),
                          ("in the ISR", lambda: follower in metadata().topics["rf3"].partitions[0].isrs)):
        wait_until(f"broker {follower} {moment}", check, 600, cluster, POLL_S)
        moments[moment] = time.monotonic() - started
    cpu = cpu_seconds(pid)
    mb = missed["messages"] * MESSAGE_BYTES / 1e6
    copy_s = moments["in the ISR"] - moments["unfenced"]
    rate = mb / copy_s
    raw_s, _ = raw_write(cluster.specs[follower].log_path.parent, missed["messages"] * MESSAGE_BYTES)
    print_table("A follower that missed data returns (seconds from its process start; the copy: from unfenced to in "
                "the ISR)",
                ["missed MB", "produced in s", "listening", "unfenced", "in the ISR", "copy s", "copy MB/s",
                 "goal", "start to ISR MB/s", "follower CPU s"],
                [(mb, missed["seconds"], moments["listening"], moments["unfenced"], moments["in the ISR"], copy_s, rate,
                  f">= {CATCH_UP_GOAL_MB_S} MB/s {'met' if rate >= CATCH_UP_GOAL_MB_S else 'NOT met'}",
                  mb / moments["in the ISR"], cpu),
                 (f"raw write of {mb:.0f} MB", "", "", "", "", raw_s, mb / raw_s,
                  f"ceiling: copy at {100 * rate * raw_s / mb:.0f}% of it", "", "")], left=(7,))


if __name__ == "__main__":
    if len(sys.argv) > 2 and sys.argv[1] == "--child":
        child_main(sys.argv[2])
    else:
        main()
