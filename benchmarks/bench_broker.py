"""Produce and consume throughput of one broker with confluent-kafka, 1 KiB messages on 127.0.0.1,
beside the same client writing to and reading from an endpoint that stores nothing, in the same run:
the ceiling the client itself sets on this machine.

Run: `./run bench` (all benchmarks), `.venv/bin/python -m benchmarks.bench_broker`, or
`.venv/bin/python benchmarks/bench_broker.py`. BENCH_BROKER_MESSAGES sets how many messages each
run produces and consumes (the default, 2,000,000 messages or 2 GB, takes some ten seconds a
produce run against the broker, and the broker's four topics then take 8 GB of disk); BENCH_BROKER_DIR
picks the filesystem of the broker's logs (a temporary directory under the current one by default,
removed at the end).

The broker is a real cluster from `quorum.launcher.LocalCluster`: one controller and one broker,
each a `quorum start` process, default settings (no fsync per append: Kafka's defaults, an append
reaches the page cache). Once the broker lists itself in its Metadata answer (it is unfenced), the
AdminClient creates the topics, replication factor 1, with 1 partition and with 4. The ceiling is
`benchmarks.client_ceiling.MemoryEndpoint`: a listener that speaks enough Kafka for the client, drops
what is produced and answers every Fetch with ready-made batches (see that module).

Each run is one client in a child process of its own, started afresh, the same code and the same
settings for both targets; it reports its own clock:

* produce: a Producer (`PRODUCER` below: linger.ms, batch.size, no compression, delivery reports
  for errors only; librdkafka's default queue of 100,000 messages, so `produce()` is paced by the
  acknowledgements) whose connection and topic metadata are set up first; the clock runs from the
  first `produce()` to the return of `flush()`, when every message is acknowledged (acks=1: the
  leader appended; acks=all: the high watermark covers it, which with one broker in the ISR is at
  once, so the two should be alike). A delivery error fails the run. The broker's high watermarks
  are checked afterwards to hold exactly the messages sent.
* consume: a Consumer (`CONSUMER` below) that `assign()`s every partition from offset 0 (no group
  membership, no commits), the clock running from `assign()` until it has received the messages
  (`consume()` in batches, each message's error and value looked at). Against the broker it
  reads back the acks=1 topic and must end exactly at its high watermarks; the endpoint serves
  records without end, so its run stops once it has as many messages.

Why child processes: the endpoint runs as an asyncio thread of this (parent) process, so a client
in the same process would share one interpreter lock with it, slowing both, while the broker has a
process of its own. With the client in a child, the endpoint has the parent's interpreter to
itself (the parent's main thread only waits on the child), as the broker has its own, and every
run starts with a fresh client (no threads or queues left over from the previous one). The runs
go ceiling, then broker, for each row, so drift on a busy machine hits both alike.

"client CPU" is the client process's own CPU time over the timed part (all librdkafka's threads).
When both CPU figures are far below "seconds", neither side bounds the row: the machine's other
load does (on a shared machine, the consume rows' seconds then move by 2-3x between runs of the
same code while both CPU figures stay put), and the CPU columns are the ones to compare.
"server CPU" is the CPU time the server side used during the run (the client's start-up included):
the broker process's (/proc), or this process's, in which the endpoint's thread is the only busy
one. Set beside "seconds" it tells which side was the bottleneck; the endpoint is Python too, and
answering Fetch (encoding and framing a megabyte a partition) keeps it busy, so for consume it is
a ceiling of the client and of the project's listener and codec together, which the broker shares.
"server ms/MB" is that CPU over the row's MB: the figure to compare between commits on a busy machine,
where MB/s move by 2-3x from run to run and CPU per byte does not.

Beside the 1 KiB rows (1 and 4 partitions), one partition is measured with 10 KiB messages and
with lz4-compressed batches of 1 KiB messages (produce acks=1 and consume; the endpoint serves
batches of the same kind). The "goal" column is issue 20's: produce at 80% of the ceiling or
more, consume at 90% or more.

Under the table, the page cache floor (`benchmarks.page_cache`): 256 MiB written to a new file beside
the broker's logs before the runs (kept until the end, so that the runs get none of its pages), its
MB/s and CPU per MB, which every produce row pays and the ceiling does not (on this project's VMs it
moves by 10x with the machine's memory, within a run too); then the dirty pages at the end of each
produce row beside the kernel's background writeback threshold (`vm.dirty_background_ratio`): from
the row that reaches it on, the flusher writes back as fast as the broker dirties.

MB are 10^6 bytes of message values (keys are empty; record and batch headers are not counted).
Client and server share the machine's cores (and the broker's disk writes reach the page cache
only), so on a small or busy machine the figures move from run to run: on two shared cores, by a
third and more between runs; compare rows of one run. On a virtual machine that hands freed memory
back to its host (virtio-balloon free-page reporting, as on the team's Firecracker VMs), writing
gigabytes into the page cache costs the kernel twice as much once that memory has gone back: the
broker's user CPU stays flat while its system CPU doubles, and produce falls from ~65% of the
ceiling on the first 2 GB to ~33% on the next rows (perf: copy_folio_from_iter_atomic). Comparing
commits, use the first produce row or a smaller BENCH_BROKER_MESSAGES (400,000).
"""

from __future__ import annotations

import json
import os
import socket
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

if __package__ in (None, ""):  # run as a script: make `benchmarks` and `quorum` importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.client_ceiling import MemoryEndpoint  # noqa: E402
from benchmarks.page_cache import DirtyPages, PageCacheFloor  # noqa: E402
from benchmarks.table import print_table, progress, run_child  # noqa: E402

MESSAGES = int(os.environ.get("BENCH_BROKER_MESSAGES", "2000000"))
MESSAGE_BYTES = 1024
PARTITION_COUNTS = (1, 4)
VARIANTS: tuple[tuple[int, str, tuple[int, ...], tuple[tuple[str, str | None], ...]], ...] = (
    (MESSAGE_BYTES, "none", PARTITION_COUNTS, (("produce", "1"), ("produce", "all"), ("consume", None))),
    (10 * MESSAGE_BYTES, "none", (1,), (("produce", "1"), ("consume", None))),
    (MESSAGE_BYTES, "lz4", (1,), (("produce", "1"), ("consume", None))),
)
"""(message bytes, compression, partition counts, operations): the table's rows."""
GOALS = {"produce": 0.80, "consume": 0.90}
"""Issue 20: the broker's share of the ceiling to reach."""
BROKER = 101
CEILING_TOPIC = "ceiling"
CEILING_BATCH_RECORDS = 967
"""Records in each batch the producer below makes of 1 KiB values (batch.size less the 61-byte batch
header, over some 1,034 bytes a record; counted at the endpoint): the endpoint serves batches of the
same size, one a partition per Fetch as the broker's 1 MiB max.partition.fetch.bytes holds one, so
the consumer does the same work per byte against both."""
PRODUCER: dict[str, Any] = {
    "linger.ms": 10,  # let batches fill: throughput over latency
    "batch.size": 1_000_000,  # librdkafka's default cap, under the broker's max.message.bytes (1048588)
    "compression.type": "none",  # the client's and the broker's byte-moving costs, not a codec's
    "delivery.report.only.error": True,  # no Python callback per message: the client's loop is the C path
}
CONSUMER: dict[str, Any] = {
    "group.id": "bench-broker",  # confluent-kafka requires one; assign() never joins the group
    "enable.auto.commit": False,
    "enable.auto.offset.store": False,
    # librdkafka (2.4+) waits fetch.queue.backoff.ms (1 s by default) before fetching again once its
    # queue holds queued.max.messages.kbytes (64 MB). The stores-nothing endpoint answers faster than
    # the application drains, so with the default its row measured that wait (2.3 s for 307 MB, the
    # endpoint idle 96% of it) and fell below the broker's. 1 ms keeps the client fetching as soon as it
    # has room, for the ceiling and the broker alike.
    "fetch.queue.backoff.ms": 1,
}
CLUSTER_SETTINGS = {
    # One broker: the internal offsets topic (the consumer's coordinator lookup creates it) must fit on it.
    "offsets.topic.replication.factor": "1",
    "offsets.topic.num.partitions": "1",
}
QUIET = {"log_level": 3}  # librdkafka's errors only
READY_TIMEOUT_S = 90.0
CONSUME_BATCH = 10_000
PROGRESS_EVERY_S = 2.0


def run_timeout_s(messages: int) -> float:
    """How long one client run may take before it is declared stuck: a minute plus 2 MB/s (2,000
    messages a second), far below any rate worth measuring."""
    return 60.0 + messages / 2_000


# -- the client runs (child processes) ------------------------------------------------------------


def produce_run(address: str, topic: str, messages: int, acks: str, label: str,
                client: dict[str, str] | None = None, message_bytes: int = MESSAGE_BYTES) -> dict[str, Any]:
    """Produce `messages` values of `message_bytes` to `topic`; the time until all are acknowledged.
    `client`: more settings (a secured listener's, bench_security; compression.type)."""
    from confluent_kafka import Producer

    errors: list[str] = []

    def delivered(error: Any, _message: Any) -> None:  # called only for failures (delivery.report.only.error)
        if error is not None and len(errors) < 5:
            errors.append(str(error))

    deadline = time.monotonic() + run_timeout_s(messages) - 10
    producer = Producer({"bootstrap.servers": address, "acks": acks, "on_delivery": delivered,
                         **PRODUCER, **QUIET, **(client or {})})  # fmt: skip
    try:
        producer.list_topics(topic, timeout=30)  # connection and metadata before the clock starts
        value = bytes(message_bytes)
        produce, poll = producer.produce, producer.poll
        clock = time.perf_counter
        start = clock()
        cpu_start = time.process_time()
        next_report = start + PROGRESS_EVERY_S
        for sent in range(messages):
            while True:
                try:
                    produce(topic, value)
                    break
                except BufferError:  # the local queue is full: let acknowledgements drain it
                    poll(0.001)
                    if time.monotonic() > deadline:
                        raise TimeoutError(f"{label}: the client's queue stayed full; {sent:,} of {messages:,} "
                                           "messages produced in time") from None  # fmt: skip
            if sent % 10_000 == 0:
                poll(0)
                now = clock()
                if now >= next_report:
                    progress(f"{label}: {sent:,} / {messages:,} messages handed to the client")
                    next_report = now + PROGRESS_EVERY_S
                    if time.monotonic() > deadline:
                        raise TimeoutError(f"{label}: only {sent:,} of {messages:,} messages produced in time")
        while left := producer.flush(PROGRESS_EVERY_S):
            progress(f"{label}: all handed to the client, {left:,} awaiting acknowledgement")
            if time.monotonic() > deadline:
                raise TimeoutError(f"{label}: {left:,} messages still unacknowledged at the time limit")
        seconds = clock() - start
        if errors:
            raise RuntimeError(f"{label}: delivery failed: {errors}")
        return {"seconds": seconds, "messages": messages, "bytes": messages * message_bytes,
                "client_cpu": time.process_time() - cpu_start}
    finally:
        if len(producer):  # an error path: drop what is left, so that close() does not wait for it
            producer.purge()
        producer.close()


def consume_run(address: str, topic: str, partitions: int, messages: int, label: str,
                ends: list[int] | None, client: dict[str, str] | None = None) -> dict[str, Any]:  # fmt: skip
    """Read `messages` values back from offset 0 of every partition; `ends`, when given, are the
    high watermarks at which each partition must end exactly."""
    from confluent_kafka import Consumer, TopicPartition

    deadline = time.monotonic() + run_timeout_s(messages) - 10
    consumer = Consumer({"bootstrap.servers": address, **CONSUMER, **QUIET, **(client or {})})
    try:
        consumer.list_topics(topic, timeout=30)  # connection and metadata before the clock starts
        clock = time.perf_counter
        start = clock()
        cpu_start = time.process_time()
        consumer.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
        received = size = 0
        next_report = start + PROGRESS_EVERY_S
        while received < messages:
            batch = consumer.consume(CONSUME_BATCH, 1.0)
            for message in batch:
                if message.error() is not None:
                    raise RuntimeError(f"{label}: {message.error()}")
                size += len(message.value())
            received += len(batch)
            now = clock()
            if now >= next_report:
                progress(f"{label}: {received:,} / {messages:,} messages received")
                next_report = now + PROGRESS_EVERY_S
                if time.monotonic() > deadline:
                    raise TimeoutError(f"{label}: only {received:,} of {messages:,} messages received in time")
        seconds = clock() - start
        if ends is not None:
            if received != sum(ends):
                raise RuntimeError(f"{label}: received {received:,} messages, the high watermarks hold {sum(ends):,}")
            positions = [tp.offset for tp in consumer.position([TopicPartition(topic, p) for p in range(partitions)])]
            if any(position != end for position, end in zip(positions, ends, strict=True) if end > 0):
                raise RuntimeError(f"{label}: read to offsets {positions}, the high watermarks are {ends}")
        return {"seconds": seconds, "messages": received, "bytes": size, "client_cpu": time.process_time() - cpu_start}
    finally:
        consumer.close()


def child_main(arguments: str) -> None:
    job = json.loads(arguments)
    if job["operation"] == "produce":
        result = produce_run(job["address"], job["topic"], job["messages"], job["acks"], job["label"],
                             job.get("client"), job.get("message_bytes", MESSAGE_BYTES))
    else:
        result = consume_run(job["address"], job["topic"], job["partitions"], job["messages"], job["label"],
                             job.get("ends"), job.get("client"))  # fmt: skip
    print(json.dumps(result), flush=True)


def run_client(job: dict[str, Any], module: str = "benchmarks.bench_broker") -> dict[str, Any]:
    """One client run in a child process (see the module docstring); its progress lines are passed
    on as they come, its last line is its result. A child past `run_timeout_s` is killed."""
    progress(job["label"])
    return run_child(module, json.dumps(job), timeout_s=run_timeout_s(job["messages"]))


# -- the broker --------------------------------------------------------------------------------------


def wait_until(what: str, check: Callable[[], bool], timeout_s: float, cluster: Any, poll_s: float = 0.2) -> None:
    """Poll `check` every `poll_s` until it holds; past the timeout, fail naming `what`, with the nodes'
    last log lines."""
    deadline = time.monotonic() + timeout_s
    problem = ""
    while time.monotonic() < deadline:
        try:
            if check():
                return
        except Exception as exc:  # noqa: BLE001 - a node still starting answers with errors; keep the last
            problem = f" (last error: {exc})"
        time.sleep(poll_s)
    tails = []
    for spec in cluster.specs.values():
        lines = spec.log_path.read_text(errors="replace").splitlines()[-15:] if spec.log_path.exists() else []
        tails.append(f"--- node {spec.node_id} ({spec.log_path}):\n" + "\n".join(lines))
    raise TimeoutError(f"timed out after {timeout_s:.0f} s waiting for {what}{problem}\n" + "\n".join(tails))


def start_broker(cluster: Any) -> str:
    """Start the cluster and return the broker's address once it lists itself (it is unfenced)."""
    from confluent_kafka.admin import AdminClient

    cluster.format_storage()
    cluster.start()
    address = cluster.specs[BROKER].address
    host, port = address.split(":")

    def listening() -> bool:  # before a client connects: librdkafka would log every refused attempt
        with socket.create_connection((host, int(port)), timeout=1):
            return True

    wait_until(f"broker {BROKER} to listen on {address}", listening, READY_TIMEOUT_S, cluster)
    admin = AdminClient({"bootstrap.servers": address, **QUIET})
    wait_until(f"broker {BROKER} to be unfenced (listed in its own Metadata answer)",
               lambda: BROKER in admin.list_topics(timeout=5).brokers, READY_TIMEOUT_S, cluster)  # fmt: skip
    return address


def create_topic(cluster: Any, address: str, topic: str, partitions: int, client: dict[str, str] | None = None) -> None:
    """Create `topic` (replication factor 1) and wait until the broker leads all its partitions."""
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": address, **QUIET, **(client or {})})
    for future in admin.create_topics([NewTopic(topic, partitions, 1)], request_timeout=60).values():
        future.result(timeout=90)

    def led() -> bool:
        found = admin.list_topics(topic, timeout=5).topics.get(topic)
        return (found is not None and found.error is None and len(found.partitions) == partitions
                and all(p.leader == BROKER and p.error is None for p in found.partitions.values()))

    wait_until(f"broker {BROKER} to lead every partition of {topic}", led, READY_TIMEOUT_S, cluster)


def high_watermarks(address: str, topic: str, partitions: int, client: dict[str, str] | None = None) -> list[int]:
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer({"bootstrap.servers": address, **CONSUMER, **QUIET, **(client or {})})
    try:
        return [consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=30)[1] for p in range(partitions)]
    finally:
        consumer.close()


def process_cpu_s(pid: int) -> float:
    """User + system CPU seconds of a process so far (/proc/<pid>/stat, fields 14 and 15)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


# -- the parent ---------------------------------------------------------------------------------------


def plural(partitions: int) -> str:
    return f"{partitions} partition{'s' if partitions > 1 else ''}"


def main() -> None:
    from quorum.launcher import LocalCluster

    base = Path(os.environ.get("BENCH_BROKER_DIR", "."))
    results: dict[tuple[str, int, str, str], dict[str, Any]] = {}  # (kind, partitions, operation, target) -> figures
    with tempfile.TemporaryDirectory(prefix="bench-broker-", dir=base) as name:
        progress(f"{MESSAGES:,} messages of {MESSAGE_BYTES} bytes a run (a tenth as many of 10 KiB); "
                 f"broker logs in {Path(name).resolve()}")
        cluster = LocalCluster(Path(name) / "cluster", controllers=1, brokers=1, settings=CLUSTER_SETTINGS)
        started: list[MemoryEndpoint] = []
        floor: PageCacheFloor | None = None
        try:
            progress("starting the cluster: 1 controller, 1 broker")
            address = start_broker(cluster)
            broker_pid = cluster.processes[BROKER].pid
            floor = PageCacheFloor(Path(name), "beside the broker's logs")
            dirty = DirtyPages()

            def broker_cpu_s() -> float:
                return process_cpu_s(broker_pid)

            for message_bytes, compression, partition_counts, operations in VARIANTS:
                kind = message_kind(message_bytes, compression)
                messages = MESSAGES * MESSAGE_BYTES // message_bytes
                client = {"compression.type": compression}
                for partitions in partition_counts:
                    endpoint = MemoryEndpoint(CEILING_TOPIC, message_bytes=message_bytes, batches=1,
                                              batch_records=CEILING_BATCH_RECORDS * MESSAGE_BYTES // message_bytes,
                                              partitions=partitions, compression=compression)  # fmt: skip
                    ceiling = endpoint.start()
                    started.append(endpoint)
                    suffix = "" if kind == message_kind(MESSAGE_BYTES, "none") else f"-{message_bytes}-{compression}"
                    topics = {acks: f"bench-{partitions}p-acks-{acks}{suffix}" for acks in ("1", "all")}
                    for acks in {acks or "1" for _, acks in operations}:
                        create_topic(cluster, address, topics[acks], partitions)
                    for operation, acks in operations:
                        topic = topics[acks or "1"]
                        what = f"{operation}{f' acks={acks}' if acks else ''}"
                        for target, where, name_ in (("ceiling", ceiling, CEILING_TOPIC),
                                                     ("broker", address, topic)):  # fmt: skip
                            label = f"{target}, {kind}, {plural(partitions)}: {what}"
                            job: dict[str, Any] = {"operation": operation, "address": where, "topic": name_,
                                                   "messages": messages, "acks": acks, "partitions": partitions,
                                                   "label": label, "message_bytes": message_bytes}  # fmt: skip
                            if operation == "produce":
                                job["client"] = client
                            if operation == "consume" and target == "broker":
                                job["ends"] = high_watermarks(address, topic, partitions)
                            cpu = broker_cpu_s if target == "broker" else time.process_time
                            began = cpu()
                            run = run_client(job)
                            run["server_cpu"] = cpu() - began
                            results[(kind, partitions, what, target)] = run
                            if operation == "produce" and target == "broker":
                                dirty.mark(f"{kind} {plural(partitions)} {what}")
                                ends = high_watermarks(address, topic, partitions)
                                if sum(ends) != messages:
                                    raise RuntimeError(f"{topic}: the high watermarks {ends} do not hold the "
                                                       f"{messages:,} messages acknowledged")  # fmt: skip
                    endpoint.stop()
                    started.remove(endpoint)
        finally:
            if floor is not None:
                floor.close()
            for endpoint in started:
                endpoint.stop()
            cluster.stop()
    report(results)
    assert floor is not None  # made before the first row
    print(f"{floor.line}; the ceiling writes nothing")
    if (dirty_line := dirty.line()) is not None:
        print(dirty_line)


def message_kind(message_bytes: int, compression: str) -> str:
    size = f"{message_bytes // 1024} KiB" if message_bytes % 1024 == 0 else f"{message_bytes} B"
    return size if compression == "none" else f"{size} {compression}"


def report(results: dict[tuple[str, int, str, str], dict[str, Any]]) -> None:
    rows = []
    for (kind, partitions, operation, target), run in results.items():
        seconds = run["seconds"]
        megabytes = run["bytes"] / 1e6
        row: list[object] = [target, kind, plural(partitions), operation, run["messages"], megabytes, seconds,
                             megabytes / seconds, round(run["messages"] / seconds),
                             f"{run['server_cpu']:.1f} s", f"{run['server_cpu'] * 1000 / megabytes:.2f}",
                             f"{run.get('client_cpu', 0):.1f} s"]  # fmt: skip
        if target == "broker":
            ceiling = results[(kind, partitions, operation, "ceiling")]
            share = (run["bytes"] / seconds) / (ceiling["bytes"] / ceiling["seconds"])
            goal = GOALS[operation.split()[0]]
            row += [f"{share:.0%}", f">= {goal:.0%} {'met' if share >= goal else 'NOT met'}"]
        else:
            row += ["", ""]
        rows.append(row)
    print_table(
        f"confluent-kafka against one broker (1 controller + 1 broker, `quorum start` processes, 127.0.0.1) and "
        f"against the client's ceiling (MemoryEndpoint: stores nothing);\n"
        f"producer: {', '.join(f'{k}={v}' for k, v in PRODUCER.items() if k != 'delivery.report.only.error')} "
        "(lz4 rows: compression.type=lz4); "
        "consumer: assign() from offset 0, defaults; MB = 10^6 bytes of values",
        ["target", "messages of", "topic", "operation", "messages", "MB", "seconds", "MB/s", "msgs/s", "server CPU",
         "server ms/MB", "client CPU", "broker % of ceiling", "goal"],
        rows,
        left=(1, 2, 3),
    )


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "--child":
        child_main(sys.argv[2])
    else:
        main()
