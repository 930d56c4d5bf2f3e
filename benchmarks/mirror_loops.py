"""The raw replicators `bench_client_epochs` sets beside the project's: a consumer -> producer loop.

    python -m benchmarks.mirror_loops --client confluent|kafka-python --source-bootstrap A
        --target-bootstrap B --topics T [--group G] [--status-interval-s S] [--session-timeout-ms MS]

Written the way MirrorMaker-style loops are written with these clients, nothing more: a group-managed
`subscribe()`, `auto.offset.reset=earliest`, auto-commit off; an idempotent acks=all producer; each
record copied to the same topic and partition on the target with its key, value, timestamp and
headers, plus the provenance header `client_epochs.source` = "<topic>/<partition>/<offset>" (the
header the project's replicator writes, so one reader judges all three); and, every 500 records or
every second, `flush()` of the producer and then a synchronous commit of the consumed positions.
A commit that fails is counted and tried again at the next round (a loop that died on it would end
the benchmark, not show the client's behaviour); a delivery that fails is counted.

Output (stdout): `mirror-loop status: copied=N commits=N ... errors=...` every `--status-interval-s`,
the same line prefixed `mirror-loop summary:` after SIGTERM/SIGINT (which stop it cleanly: flush,
commit, close), and `mirror-loop event: <kind>: <the client's own words>` for the first few events
of each kind. The counts beyond the loop's own (commits, failures) say what the client did with its
offsets and metadata, read from the client's own log lines, matched by the phrases each library uses:
librdkafka's (its logger, with the "metadata,topic" debug contexts: each Metadata answer's leaders
and epochs, a few hundred lines a run) and kafka-python's (`kafka.*` loggers at INFO, the fetcher's
at DEBUG, where it reports fetch errors; and, for epochs, a listener on its metadata cache, reached
through the consumer's `_client`: instrumentation only, the loop does not use it):

- initial_resets / offset_resets: auto.offset.reset applied to a partition before / after this
  process copied from it (the first is the start without a commit, the second KAFKA-6262's rewind);
- out_of_range: OFFSET_OUT_OF_RANGE answers; truncations: KIP-320 log truncation detected;
- fenced: FENCED_LEADER_EPOCH / UNKNOWN_LEADER_EPOCH answers; not_leader: NOT_LEADER_OR_FOLLOWER;
- stale_metadata: Metadata answers giving a partition a leader epoch older than one the client had
  seen (librdkafka logs that it ignores them; kafka-python's cache takes them).
"""

from __future__ import annotations

import argparse
import logging
import re
import signal
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable
from typing import Any

PROVENANCE_HEADER = "client_epochs.source"
"""The provenance header of `client_epochs.mirror.progress`, spelled out: the raw loops use no SDK code."""
COMMIT_EVERY_RECORDS = 500
COMMIT_EVERY_S = 1.0
FLUSH_TIMEOUT_S = 60.0
MAX_EVENT_LINES = 10
"""Client log lines echoed per kind of event."""

_PATTERNS = (  # (count, pattern) over the clients' log lines, first match wins
    ("truncations", re.compile(r"truncation detected|diverg", re.I)),
    ("out_of_range", re.compile(r"out of range|OFFSET_OUT_OF_RANGE", re.I)),
    ("offset_resets", re.compile(r"offset reset|resetting offset for partition", re.I)),
    ("fenced", re.compile(r"FencedLeaderEpoch|UnknownLeaderEpoch|Leader epoch is (older|newer) than broker", re.I)),
    ("not_leader", re.compile(r"NotLeaderForPartition|Not leader for partition", re.I)),
)
_PARTITION = re.compile(r"partition=(\d+)|\[(\d+)\]")
"""The partition in kafka-python's "TopicPartition(topic=.., partition=N)" or librdkafka's "topic [N]"."""
_RDKAFKA_LEADER = re.compile(r"Topic (\S+) \[(\d+)\] Leader (-?\d+) Epoch (-?\d+)")
"""librdkafka's line for each partition of each Metadata answer it reads (debug context "metadata")."""
RDKAFKA_DEBUG = "metadata,topic"
"""librdkafka's debug contexts for the loop's consumer: each Metadata answer's leaders and epochs, and
what the consumer does with them (some hundreds of lines a run, not one per fetch)."""


class Events(logging.Handler):
    """Counts the client log lines that say what the client did with its offsets; echoes the first ones.

    An offset reset of a partition this process has not copied from yet is the start without a
    committed offset ("initial_resets"); one of a partition it was copying is what KAFKA-6262 is about.
    """

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.counts: Counter[str] = Counter()
        self.errors: Counter[str] = Counter()
        self.copied_partitions: set[int] = set()
        self.epochs: dict[str, int] = {}
        self._echoed: Counter[str] = Counter()
        self._lock = threading.Lock()

    def emit(self, record: logging.LogRecord) -> None:
        text = record.getMessage()
        leader = _RDKAFKA_LEADER.search(text)
        if leader is not None:
            self.saw_epoch(f"{leader[1]}-{leader[2]}", int(leader[3]), int(leader[4]))
            return
        for name, pattern in _PATTERNS:
            if pattern.search(text):
                if name == "offset_resets":
                    found = _PARTITION.search(text)
                    if found is None or int(found[1] or found[2]) not in self.copied_partitions:
                        name = "initial_resets"
                with self._lock:
                    self.counts[name] += 1
                    if self._echoed[name] < MAX_EVENT_LINES:
                        self._echoed[name] += 1
                        print(f"mirror-loop event: {name}: {' '.join(text.split())[:400]}", flush=True)
                return

    def saw_epoch(self, partition: str, leader: int, epoch: int) -> None:
        """A Metadata answer the client read: one older than an epoch it saw before is stale (KAFKA-6262)."""
        with self._lock:
            newest = self.epochs.get(partition, -1)
            self.epochs[partition] = max(newest, epoch)
            if epoch >= newest:
                return
            self.counts["stale_metadata"] += 1
            if self._echoed["stale_metadata"] < MAX_EVENT_LINES:
                self._echoed["stale_metadata"] += 1
                print(f"mirror-loop event: stale_metadata: {partition} leader {leader} epoch {epoch}, after epoch "
                      f"{newest} was seen", flush=True)

    def line(self, prefix: str, copied: int) -> str:
        names = ("commits", "commit_failures", "delivery_failures", "initial_resets", "offset_resets", "out_of_range",
                 "truncations", "fenced", "not_leader", "stale_metadata")
        errors = ",".join(f"{k}:{v}" for k, v in sorted(self.errors.items())) or "-"
        return f"mirror-loop {prefix}: copied={copied} " + " ".join(f"{n}={self.counts[n]}" for n in names) + \
            f" errors={errors}"


def provenance(topic: str, partition: int, offset: int) -> tuple[str, bytes]:
    return PROVENANCE_HEADER, f"{topic}/{partition}/{offset}".encode()


class Loop:
    """The shared skeleton: copy what `poll_and_send` gets, commit every 500 records or 1 s."""

    def __init__(self, args: argparse.Namespace, events: Events) -> None:
        self.args = args
        self.events = events
        self.copied = 0
        self.stopping = False

    def run(self, poll_and_send: Callable[[], int], flush: Callable[[], int], commit: Callable[[], None]) -> None:
        uncommitted = 0
        last_commit = next_status = time.monotonic()
        next_status += self.args.status_interval_s
        try:
            while not self.stopping:
                sent = poll_and_send()
                self.copied += sent
                uncommitted += sent
                now = time.monotonic()
                due = uncommitted >= COMMIT_EVERY_RECORDS or (uncommitted and now - last_commit >= COMMIT_EVERY_S)
                if due and self._flush_and_commit(flush, commit):
                    uncommitted, last_commit = 0, now
                if now >= next_status:
                    print(self.events.line("status", self.copied), flush=True)
                    next_status = now + self.args.status_interval_s
        finally:
            if uncommitted:
                self._flush_and_commit(flush, commit)
            print(self.events.line("summary", self.copied), flush=True)

    def _flush_and_commit(self, flush: Callable[[], int], commit: Callable[[], None]) -> bool:
        left = flush()
        if left:
            self.events.counts["commit_failures"] += 1
            print(f"mirror-loop event: flush: {left} copies unacknowledged after {FLUSH_TIMEOUT_S:g} s; not committing",
                  flush=True)
            return False
        try:
            commit()
        except Exception as exc:  # noqa: BLE001 - a coordinator moving; counted, tried again next round
            self.events.counts["commit_failures"] += 1
            self.events.errors[f"commit:{type(exc).__name__}"] += 1
            return False
        self.events.counts["commits"] += 1
        return True


def run_confluent(args: argparse.Namespace, events: Events, loop: Loop) -> None:
    from confluent_kafka import Consumer, KafkaError, KafkaException, Producer

    logger = logging.getLogger("librdkafka")
    logger.setLevel(logging.DEBUG)
    logger.addHandler(events)
    logger.propagate = False
    debug = {"debug": RDKAFKA_DEBUG}
    consumer = Consumer({"bootstrap.servers": args.source_bootstrap, "group.id": args.group,
                         "client.id": "mirror-loop-confluent", "auto.offset.reset": "earliest",
                         "enable.auto.commit": False, "session.timeout.ms": args.session_timeout_ms,
                         "logger": logger, **debug})  # fmt: skip
    producer = Producer({"bootstrap.servers": args.target_bootstrap, "client.id": "mirror-loop-confluent",
                         "enable.idempotence": True, "acks": "all", "linger.ms": 5, "logger": logger})

    def delivered(error: Any, _: Any) -> None:
        if error is not None:
            events.counts["delivery_failures"] += 1

    def poll_and_send() -> int:
        sent = 0
        for message in consumer.consume(500, 0.2):
            error = message.error()
            if error is not None:
                events.errors[error.name()] += 1
                if error.code() == KafkaError.OFFSET_OUT_OF_RANGE:
                    events.counts["out_of_range"] += 1
                continue
            headers = list(message.headers() or [])
            headers.append(provenance(message.topic(), message.partition(), message.offset()))
            events.copied_partitions.add(message.partition())
            kind, stamp = message.timestamp()
            while True:
                try:
                    producer.produce(message.topic(), message.value(), message.key(), partition=message.partition(),
                                     headers=headers, timestamp=stamp if kind else 0, on_delivery=delivered)
                    break
                except BufferError:
                    producer.poll(0.1)
            sent += 1
        producer.poll(0)
        return sent

    def commit() -> None:
        try:
            consumer.commit(asynchronous=False)
        except KafkaException as exc:
            if exc.args[0].code() != KafkaError._NO_OFFSET:
                raise

    consumer.subscribe(args.topics)
    try:
        loop.run(poll_and_send, lambda: producer.flush(FLUSH_TIMEOUT_S), commit)
    finally:
        consumer.close()


def run_kafka_python(args: argparse.Namespace, events: Events, loop: Loop) -> None:
    from kafka import KafkaConsumer, KafkaProducer, TopicPartition
    from kafka.errors import KafkaTimeoutError

    logger = logging.getLogger("kafka")
    logger.setLevel(logging.INFO)
    logger.addHandler(events)
    logging.getLogger("kafka.consumer.fetcher").setLevel(logging.DEBUG)  # its fetch errors are debug lines
    consumer = KafkaConsumer(bootstrap_servers=args.source_bootstrap.split(","), group_id=args.group,
                             client_id="mirror-loop-kafka-python", auto_offset_reset="earliest",
                             enable_auto_commit=False, session_timeout_ms=args.session_timeout_ms)  # fmt: skip
    producer = KafkaProducer(bootstrap_servers=args.target_bootstrap.split(","), client_id="mirror-loop-kafka-python",
                             acks="all", enable_idempotence=True, linger_ms=5)  # fmt: skip

    def failed(_: Exception) -> None:
        events.counts["delivery_failures"] += 1

    def metadata_updated(cluster: Any) -> None:  # kafka-python has no log line with the epochs it takes
        for topic in args.topics:
            for partition in cluster.partitions_for_topic(topic) or ():
                tp = TopicPartition(topic, partition)
                epoch = cluster.leader_epoch_for_partition(tp)
                if epoch is not None:
                    events.saw_epoch(f"{topic}-{partition}", cluster.leader_for_partition(tp), epoch)

    consumer._client.cluster.add_listener(metadata_updated)  # instrumentation only: a public listener hook

    def poll_and_send() -> int:
        sent = 0
        for tp, records in consumer.poll(timeout_ms=200, max_records=500).items():
            events.copied_partitions.add(tp.partition)
            for record in records:
                headers = list(record.headers or [])
                headers.append(provenance(record.topic, record.partition, record.offset))
                producer.send(record.topic, value=record.value, key=record.key, partition=record.partition,
                              headers=headers, timestamp_ms=record.timestamp).add_errback(failed)
                sent += 1
        return sent

    def flush() -> int:
        try:
            producer.flush(timeout=FLUSH_TIMEOUT_S)
        except KafkaTimeoutError:
            return 1
        return 0

    consumer.subscribe(args.topics)
    try:
        loop.run(poll_and_send, flush, consumer.commit)
    finally:
        consumer.close(autocommit=False)
        producer.close(timeout=10)


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m benchmarks.mirror_loops", description=__doc__.split("\n")[0])
    p.add_argument("--client", required=True, choices=("confluent", "kafka-python"))
    p.add_argument("--source-bootstrap", required=True)
    p.add_argument("--target-bootstrap", required=True)
    p.add_argument("--topics", required=True, type=lambda v: [t for t in v.split(",") if t])
    p.add_argument("--group", default="mirror-loop")
    p.add_argument("--status-interval-s", type=float, default=5.0)
    p.add_argument("--session-timeout-ms", type=int, default=10_000,
                   help="the group session timeout (default: kafka-python's 10 s, for both clients)")
    return p


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    logging.basicConfig(level=logging.WARNING, stream=sys.stderr,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    for handler in logging.getLogger().handlers:
        handler.setLevel(logging.WARNING)  # the kafka loggers run at INFO for the counts, not for stderr
    events = Events()
    loop = Loop(args, events)

    def stop(_signum: int, _frame: Any) -> None:
        loop.stopping = True

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    (run_confluent if args.client == "confluent" else run_kafka_python)(args, events, loop)
    return 0


if __name__ == "__main__":
    sys.exit(main())
