"""The KIP-232 client SDK against the raw clients, in one run: replication under KAFKA-6262 conditions,
and what the epoch-aware consumer wrappers cost in consume throughput.

Run: `./run bench` (all benchmarks) or `.venv/bin/python -m benchmarks.bench_client_epochs`.
BENCH_MIRROR_RECORDS sets the records of each replication run (default 60,000, some 40 s a run here),
BENCH_MIRROR_RATE the producer's pace in records a second (default 2,000); BENCH_CONSUME_RECORDS the
1 KiB records of the throughput topic (default 200,000), BENCH_CONSUME_REPEATS how often each consumer
reads it (default 3); BENCH_CLIENT_EPOCHS_DIR where the clusters' and replicators' logs go (a temporary
directory under the current one by default, removed at the end, kept when a step fails);
BENCH_CLIENT_EPOCHS_PARTS which parts run (default "replication,consume"; "consume" for the second only).

1. Replication under KAFKA-6262 conditions. KAFKA-6262: a consumer takes metadata from a broker
   that is behind, fetches from a leader that no longer is one, gets OFFSET_OUT_OF_RANGE, and with
   auto.offset.reset=earliest a MirrorMaker rewinds and copies the topic again. The same scripted
   scenario (`benchmarks.mirror_scenario`) is run three times, once per replicator, each time with
   fresh clusters: a source of 1 controller and 3 brokers (`quorum.launcher.LocalCluster`, broker 103
   answering Metadata from an image at least 2 s old, failures detected in 3 s, the group offsets
   topic replicated 3 times, preferred leaders restored every 5 s) holding topic `mirrored` (3
   partitions, replication factor 3, min.insync.replicas=2, partition p's preferred leader broker
   101 + p, so partition 0 starts on 101 in every run), and a target of 1 controller and 1 broker
   where `mirrored` is created beforehand (3 partitions). Once the stale broker's Metadata view
   holds the topic, the replicator starts (bootstrap list with broker 103 first), then a producer
   child writes the records at a fixed pace (acks=all, idempotent; record i to partition i % 3,
   value = the number i and 50-250 random bytes from a fixed seed). At fixed fractions of the
   records written (acknowledged to the producer): 15% and 85%, partition 0's leader is killed with
   SIGKILL, and started again once another broker leads the partition; 30%, the replicator is killed
   with SIGKILL and started again at once. The second leader move comes well after the restarted
   replicator's wait for the dead member to leave its group (some 10 s): when the broker killed is
   the group's coordinator, a kill at the end of that wait prolongs it by as much again, which
   would hit whichever replicator happened to start a moment later. Counted at the source, the
   replicator's kill falls anywhere in a raw loop's copy-flush-commit cycle, so what the loop had
   copied since its last commit (what it copies again) varies from run to run, from none to a batch
   of 500 and what was in flight. All three replicators use a 10 s group session timeout
   (kafka-python's default; librdkafka's is 45 s), so the restarted one waits as long for the dead
   member to leave the group.
   The replicators: this project's `client_epochs.mirror.cli` (epoch-aware consumer, commits only
   what the target acknowledged, skips on restart what the target already holds), and the raw loops
   of `benchmarks.mirror_loops` for confluent-kafka and kafka-python, written the way MirrorMaker-
   style loops are (subscribe, auto.offset.reset=earliest, idempotent producer, flush then commit
   every 500 records or 1 s). Each copy carries the provenance header `client_epochs.source` =
   "<topic>/<partition>/<offset>". Afterwards the target is read whole and judged: "rewinds" are the
   times the source offsets in a target partition go backwards (a restart from an older commit is
   one per partition, as deep as the records copied after that commit); "to offset 0" the rewinds
   back to the log start, the KAFKA-6262 signature; "duplicates" the copies beyond the first of a
   record; "missing" the source records the target lacks; "seconds" from the replicator's first
   start until the target held every source record.
   "own counts" are what each replicator says. Ours: its status lines and summary, summed over its
   two processes (the killed one's last status line before the kill), and the commits it logged as
   failed. The raw loops: the clients' own log lines (librdkafka's "metadata,topic" debug contexts;
   kafka-python's loggers, and a listener on its metadata cache for the epochs): offset resets of a
   partition being copied, OFFSET_OUT_OF_RANGE, FENCED_LEADER_EPOCH / UNKNOWN_LEADER_EPOCH and
   NOT_LEADER_OR_FOLLOWER answers, Metadata answers giving a partition a leader epoch older than one
   the client had seen ("stale metadata": librdkafka logs that it ignores each; kafka-python 3.0.12's
   metadata cache takes them, as each answer replaces it), and failed commits. The notes under the
   table say, per run, which broker was killed and who led partition 0 after, and what the target
   held and the group had committed when the replicator was killed.
   Why the raw loops may not rewind here: both clients implement KIP-320. Their fetches carry the
   leader epoch they believe current, and these brokers check it as Kafka does: a fetch sent to an
   old leader on stale metadata is answered FENCED_LEADER_EPOCH or NOT_LEADER_OR_FOLLOWER, not
   OFFSET_OUT_OF_RANGE, so the client refreshes its metadata instead of resetting its offset (and
   librdkafka does not even take the stale answer). What still differs is the restart: a raw loop
   resumes from its last commit and copies again what it had sent after it; the project's
   replicator reads the target's tail and skips it.
2. Consume throughput, wrapped vs raw: one topic (1 controller + 1 broker, 3 partitions, 1 KiB
   values written by confluent-kafka) read by `client_epochs.confluent.Consumer` beside
   `confluent_kafka.Consumer`, by `client_epochs.kafka_python.KafkaConsumer` beside
   `kafka.KafkaConsumer`, and by the async wrappers beside their raw clients: `client_epochs.aio.AIOConsumer`
   beside `confluent_kafka.aio.AIOConsumer`, `client_epochs.aiokafka.AIOKafkaConsumer` beside
   `aiokafka.AIOKafkaConsumer` (each child runs its own event loop), each in a child process of its
   own, with the same settings (subscribe with a fresh group, auto.offset.reset=earliest, no
   commits, batches of 1,000: `consume(1000)` / `poll(max_records=1000)` / `await consume(1000)` /
   `await getmany(max_records=1000)`). The goal printed beside each wrapper: at least 0.95x of its
   raw client's rate. Beside the rates, the consumer process's CPU time per record (all its
   threads, from the first batch to the last record), which moves less than the rates on a
   machine shared with other work. The clock starts when the first batch arrives and stops when the
   last record does; the rate counts the records after the first batch. Each consumer reads the
   topic BENCH_CONSUME_REPEATS times, raw and wrapped alternating which goes first, so drift on a
   busy machine hits both; the table gives the median run and the wrapped/raw ratio of the medians.

The machine's cores are shared by every process of a run (brokers, controllers, producer,
replicator, and other work on the machine), so the seconds and rates move from run to run; the
counts of the first table are what the scenario is about.
"""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

if __package__ in (None, ""):  # run as a script: make the project importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.mirror_scenario import KINDS, PARTITIONS, STALE, STALE_DELAY_MS, Plan, run_scenario  # noqa: E402
from benchmarks.table import print_table, progress, run_child  # noqa: E402

MIRROR_RECORDS = int(os.environ.get("BENCH_MIRROR_RECORDS", "60000"))
MIRROR_RATE = float(os.environ.get("BENCH_MIRROR_RATE", "2000"))
CONSUME_RECORDS = int(os.environ.get("BENCH_CONSUME_RECORDS", "200000"))
CONSUME_REPEATS = int(os.environ.get("BENCH_CONSUME_REPEATS", "3"))
CONSUME_PARTITIONS = 3
CONSUME_BATCH = 1000
QUIET = {"log_level": 3}

REPLICATORS = {
    "client_epochs": ("client_epochs.mirror.cli (this project)", "client_epochs.mirror.cli"),
    "confluent": ("confluent-kafka loop", "confluent_kafka"),
    "kafka-python": ("kafka-python loop", "kafka"),
}
WRAPPERS = {"confluent": "client_epochs.confluent", "kafka-python": "client_epochs.kafka_python",
            "confluent-aio": "client_epochs.aio", "aiokafka": "client_epochs.aiokafka"}
RAW = {"confluent": "confluent_kafka", "kafka-python": "kafka", "confluent-aio": "confluent_kafka.aio",
       "aiokafka": "aiokafka"}
ASYNC_CLIENTS = ("confluent-aio", "aiokafka")
GOAL = 0.95
"""What a wrapper may cost: its consume throughput at least this share of its raw client's."""
PARTS = os.environ.get("BENCH_CLIENT_EPOCHS_PARTS", "replication,consume").split(",")


def available(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is not None
    except ModuleNotFoundError:
        return False


def versions() -> str:
    import confluent_kafka
    import kafka

    return f"confluent-kafka {confluent_kafka.__version__} (librdkafka {confluent_kafka.libversion()[0]}), " \
           f"kafka-python {kafka.__version__}"


# -- 1. replication ---------------------------------------------------------------------------------------


def replication(base: Path) -> None:
    plan = Plan(MIRROR_RECORDS, MIRROR_RATE)
    progress(f"replication: {plan.records:,} records at {plan.rate:,.0f}/s, once per replicator ({versions()})")
    rows: list[list[object]] = []
    notes: list[str] = []
    for kind in KINDS:
        name, module = REPLICATORS[kind]
        if not available(module):
            rows.append([name, f"not available: {module} cannot be imported", *[""] * 7])
            continue
        result = run_scenario(kind, plan, base / kind)
        f = result.figures
        if f.misplaced:
            raise RuntimeError(f"{name}: {f.misplaced} copies in the wrong target partition or without provenance")
        rows.append([name, f.rewinds, f.rewinds_to_start, f.deepest_rewind, f.duplicates, f.missing, f.copied,
                     result.wall_s, own_counts(kind, result.counts)])
        notes += [f"{name}: {note}" for note in result.notes]
        notes += [f"{name}, the client said: {line}" for line in examples(result.events)]
    print_table(
        f"Replication under KAFKA-6262 conditions: {plan.records:,} records produced at {plan.rate:,.0f}/s to a source "
        f"of 3 brokers (broker {STALE} answers Metadata {STALE_DELAY_MS} ms late), topic of {PARTITIONS} partitions, "
        f"RF 3;\npartition 0's leader killed (kill -9) at {_percent(plan.leader_moves_at)} written and started again, "
        f"the replicator killed (kill -9) at {plan.replicator_kill_at:.0%} written and restarted; seconds: first start "
        "to a complete target",
        ["replicator", "rewinds", "to offset 0", "deepest rewind", "duplicates", "missing", "copied", "seconds",
         "own counts"],
        rows, left=(8,))  # fmt: skip
    for note in notes:
        print(f"  - {note}")


def examples(events: list[str], per_kind: int = 1) -> list[str]:
    """The first of each kind of event a raw loop echoed, but the start without a commit."""
    seen: dict[str, int] = {}
    chosen = []
    for line in events:
        kind = line.split(":", 1)[0]
        if kind != "initial_resets" and seen.get(kind, 0) < per_kind:
            seen[kind] = seen.get(kind, 0) + 1
            chosen.append(line[:200])
    return chosen


def _percent(fractions: tuple[float, ...]) -> str:
    return " and ".join(f"{f:.0%}" for f in fractions)


def own_counts(kind: str, c: dict[str, int]) -> str:
    if kind == "client_epochs":
        return (f"stale metadata refused {c.get('stale_metadata_refused', 0)}, resets {c.get('resets', 0)}, "
                f"already copied skipped {c.get('skipped_already_copied', 0):,}, "
                f"rewinds refused {c.get('rewind_refused', 0)}, commit failures {c.get('commit_failures', 0)}")
    return (f"offset resets {c.get('offset_resets', 0)}, out of range {c.get('out_of_range', 0)}, "
            f"fenced {c.get('fenced', 0)}, not leader {c.get('not_leader', 0)}, "
            f"stale metadata {c.get('stale_metadata', 0)}, commit failures {c.get('commit_failures', 0)}")


# -- 2. consume throughput ----------------------------------------------------------------------------------


class Tally:
    """Records received by one consumer: the clock from the first batch to the last record."""

    def __init__(self, job: dict[str, Any]) -> None:
        self.job = job
        self.deadline = time.monotonic() + consume_timeout_s(job["messages"]) - 10
        self.first = self.last = 0.0
        self.cpu_first = self.cpu_last = 0.0
        self.received = self.timed = self.timed_size = 0
        self.next_report = time.monotonic() + 2

    @property
    def done(self) -> bool:
        return self.received >= self.job["messages"]

    def add(self, values: list[bytes]) -> None:
        now, cpu = time.perf_counter(), time.process_time()
        if values:
            count, nbytes = len(values), sum(len(v) for v in values)
            if not self.received:
                self.first, self.cpu_first = now, cpu
            else:
                self.timed, self.timed_size = self.timed + count, self.timed_size + nbytes
            self.received, self.last, self.cpu_last = self.received + count, now, cpu
        if time.monotonic() >= self.next_report:
            progress(f"{self.job['label']}: {self.received:,} / {self.job['messages']:,} records")
            self.next_report = time.monotonic() + 2
        if time.monotonic() > self.deadline:
            raise TimeoutError(f"{self.job['label']}: only {self.received:,} of {self.job['messages']:,} records "
                               "in time")

    def result(self) -> dict[str, Any]:
        if self.received != self.job["messages"]:
            raise RuntimeError(f"{self.job['label']}: received {self.received:,} records, the topic holds "
                               f"{self.job['messages']:,}")
        return {"messages": self.timed, "bytes": self.timed_size, "seconds": self.last - self.first,
                "cpu_seconds": self.cpu_last - self.cpu_first}


def _checked(label: str, messages: list[Any]) -> list[bytes]:
    """confluent-kafka's messages' values; an error event fails the run."""
    for message in messages:
        if message.error() is not None:
            raise RuntimeError(f"{label}: {message.error()}")
    return [message.value() for message in messages]


def consume_run(job: dict[str, Any]) -> dict[str, Any]:
    """Read `messages` records of `topic` with a fresh group; the clock from the first batch to the last."""
    if job["client"] in ASYNC_CLIENTS:
        import asyncio

        return asyncio.run(consume_run_async(job))
    tally = Tally(job)
    if job["client"] == "confluent":
        import confluent_kafka

        cls = confluent_kafka.Consumer
        if job["wrapped"]:
            from client_epochs.confluent import Consumer as cls
        consumer = cls({"bootstrap.servers": job["address"], "group.id": job["group"],
                        "auto.offset.reset": "earliest", "enable.auto.commit": False, **QUIET})  # fmt: skip

        def batch() -> list[bytes]:
            return _checked(job["label"], consumer.consume(CONSUME_BATCH, 1.0))
    else:
        import kafka

        cls = kafka.KafkaConsumer
        if job["wrapped"]:
            from client_epochs.kafka_python import KafkaConsumer as cls
        consumer = cls(bootstrap_servers=job["address"], group_id=job["group"], auto_offset_reset="earliest",
                       enable_auto_commit=False)  # fmt: skip

        def batch() -> list[bytes]:
            got = consumer.poll(timeout_ms=1000, max_records=CONSUME_BATCH)
            return [record.value for records in got.values() for record in records]

    try:
        consumer.subscribe([job["topic"]])
        while not tally.done:
            tally.add(batch())
        return tally.result()
    finally:
        consumer.close()


async def consume_run_async(job: dict[str, Any]) -> dict[str, Any]:
    """`consume_run` for the asyncio clients: the same loop, each batch awaited."""
    tally = Tally(job)
    if job["client"] == "confluent-aio":
        from confluent_kafka.aio import AIOConsumer as cls

        if job["wrapped"]:
            from client_epochs.aio import AIOConsumer as cls
        consumer = cls({"bootstrap.servers": job["address"], "group.id": job["group"],
                        "auto.offset.reset": "earliest", "enable.auto.commit": False, **QUIET})  # fmt: skip
        await consumer.subscribe([job["topic"]])

        async def batch() -> list[bytes]:
            return _checked(job["label"], await consumer.consume(CONSUME_BATCH, 1.0))

        stop = consumer.close
    else:
        from aiokafka import AIOKafkaConsumer as cls

        if job["wrapped"]:
            from client_epochs.aiokafka import AIOKafkaConsumer as cls
        consumer = cls(job["topic"], bootstrap_servers=job["address"], group_id=job["group"],
                       auto_offset_reset="earliest", enable_auto_commit=False)  # fmt: skip
        await consumer.start()

        async def batch() -> list[bytes]:
            got = await consumer.getmany(timeout_ms=1000, max_records=CONSUME_BATCH)
            return [record.value for records in got.values() for record in records]

        stop = consumer.stop
    try:
        while not tally.done:
            tally.add(await batch())
        return tally.result()
    finally:
        await stop()


def consume_timeout_s(messages: int) -> float:
    return 90.0 + messages / 2_000


def consume_throughput(base: Path) -> None:
    from benchmarks.bench_broker import CLUSTER_SETTINGS, create_topic, high_watermarks, run_client, start_broker
    from quorum.launcher import LocalCluster

    topic = "consume"
    clients = [client for client in ("confluent", "kafka-python", *ASYNC_CLIENTS) if available(RAW[client])]
    runs: dict[tuple[str, bool], list[dict[str, Any]]] = {}
    cluster = LocalCluster(base / "cluster", controllers=1, brokers=1, settings=CLUSTER_SETTINGS)
    try:
        progress(f"consume throughput: 1 controller + 1 broker; {CONSUME_RECORDS:,} records of 1 KiB to read")
        address = start_broker(cluster)
        create_topic(cluster, address, topic, CONSUME_PARTITIONS)
        run_client({"operation": "produce", "address": address, "topic": topic, "messages": CONSUME_RECORDS,
                    "acks": "1", "partitions": CONSUME_PARTITIONS, "label": f"writing the {topic} topic"})
        if sum(high_watermarks(address, topic, CONSUME_PARTITIONS)) != CONSUME_RECORDS:
            raise RuntimeError(f"the {topic} topic does not hold the {CONSUME_RECORDS:,} records written")
        for repeat in range(CONSUME_REPEATS):
            for client in clients:
                order = (False, True) if repeat % 2 == 0 else (True, False)
                for wrapped in order:
                    if wrapped and not available(WRAPPERS[client]):
                        continue
                    label = f"{client} {'wrapped' if wrapped else 'raw'}, run {repeat + 1} of {CONSUME_REPEATS}"
                    progress(label)
                    job = {"client": client, "wrapped": wrapped, "address": address, "topic": topic,
                           "messages": CONSUME_RECORDS, "group": f"bench-consume-{client}-{wrapped}-{repeat}",
                           "label": label}  # fmt: skip
                    runs.setdefault((client, wrapped), []).append(
                        run_child("benchmarks.bench_client_epochs", json.dumps(job),
                                  timeout_s=consume_timeout_s(CONSUME_RECORDS)))  # fmt: skip
    finally:
        cluster.stop()
    report_throughput(clients, runs)


def report_throughput(clients: list[str], runs: dict[tuple[str, bool], list[dict[str, Any]]]) -> None:
    names = {("confluent", False): "confluent_kafka.Consumer", ("confluent", True): "client_epochs.confluent.Consumer",
             ("kafka-python", False): "kafka.KafkaConsumer",
             ("kafka-python", True): "client_epochs.kafka_python.KafkaConsumer",
             ("confluent-aio", False): "confluent_kafka.aio.AIOConsumer",
             ("confluent-aio", True): "client_epochs.aio.AIOConsumer",
             ("aiokafka", False): "aiokafka.AIOKafkaConsumer",
             ("aiokafka", True): "client_epochs.aiokafka.AIOKafkaConsumer"}
    rows: list[list[object]] = []
    for client in clients:
        medians, cpu_medians = {}, {}
        for wrapped in (False, True):
            if (client, wrapped) not in runs:
                rows.append([names[(client, wrapped)], f"not available: {WRAPPERS[client]} cannot be imported",
                             "", "", "", "", "", "", ""])
                continue
            rates = [r["messages"] / r["seconds"] for r in runs[(client, wrapped)]]
            mbs = [r["bytes"] / r["seconds"] / 1e6 for r in runs[(client, wrapped)]]
            cpus = [1e6 * r["cpu_seconds"] / r["messages"] for r in runs[(client, wrapped)]]
            medians[wrapped] = statistics.median(rates)
            cpu_medians[wrapped] = statistics.median(cpus)
            ratio = goal = cpu_ratio = ""
            if wrapped and False in medians:
                share = medians[True] / medians[False]
                ratio = f"{share:.0%}"
                goal = f">= {GOAL:.2f}x of raw: {'met' if share >= GOAL else 'NOT met'}"
                cpu_ratio = f"{cpu_medians[False] / cpu_medians[True]:.0%}"
            rows.append([names[(client, wrapped)], len(rates), round(medians[wrapped]), statistics.median(mbs),
                         " / ".join(f"{r:,.0f}" for r in rates), ratio, goal, round(cpu_medians[wrapped], 2),
                         cpu_ratio])
    print_table(f"Consume throughput, wrapped vs raw: {CONSUME_RECORDS:,} records of 1 KiB, {CONSUME_PARTITIONS} "
                f"partitions, 1 broker; subscribe with a fresh group, batches of {CONSUME_BATCH:,}; median of the runs",
                ["consumer", "runs", "msgs/s", "MB/s", "each run msgs/s", "wrapped / raw", "goal", "CPU us/msg",
                 "raw / wrapped CPU"], rows, left=(4, 6))
    print("  CPU us/msg: the consumer process's CPU time (all its threads) per record, median of the runs; "
          "raw / wrapped CPU: the throughput\n  a wrapper would keep if the consumer were CPU-bound. On a machine "
          "shared with other work the msgs/s move from run to run;\n  the CPU time per record moves less.")


def main() -> None:
    base = Path(os.environ.get("BENCH_CLIENT_EPOCHS_DIR", "."))
    directory = Path(tempfile.mkdtemp(prefix="bench-client-epochs-", dir=base)).resolve()
    progress(f"logs in {directory} (removed at the end, kept if a step fails)")
    try:
        if "replication" in PARTS:
            replication(directory / "replication")
        if "consume" in PARTS:
            consume_throughput(directory / "consume")
    except BaseException:
        print(f"bench_client_epochs: a step failed; the nodes' and replicators' logs are kept in {directory}",
              file=sys.stderr, flush=True)
        raise
    shutil.rmtree(directory, ignore_errors=True)


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "--child":
        print(json.dumps(consume_run(json.loads(sys.argv[2]))), flush=True)
    else:
        main()
