"""The soak's client processes: idempotent acks=all producers and group consumers of both libraries.

    python -m benchmarks.soak_clients produce --client confluent|kafka-python --bootstrap B --topic T
        --partitions N --tag TAG --rate R --out FILE
    python -m benchmarks.soak_clients consume --client confluent|kafka-python --bootstrap B --topic T
        --group G --out FILE

Each runs until SIGTERM, then stops cleanly (a producer flushes what it has in flight; a consumer
commits and leaves its group) and exits 0. Each writes what the soak checks to `--out`, one event a
line, flushed at least every half second (a kill -9 of the cluster does not reach these processes):

- producer: `a PARTITION OFFSET VALUE` for each acknowledged record, `f VALUE ERROR` for each failed
  delivery. Record n of producer TAG has the value `TAG-n` (zero-padded), goes to partition n % N.
- consumer: `assign T P..` and `revoke T P..` (T: time.monotonic(), one clock for every process on the
  machine), `b T PARTITION FIRST LAST COUNT` for each partition of each batch handed to the loop, and
  `c T PARTITION OFFSET` for each offset whose synchronous commit succeeded.

The consumers are the project's drop-in wrappers (`client_epochs.confluent.Consumer`,
`client_epochs.kafka_python.KafkaConsumer`): they are what promises never to rewind.
"""

from __future__ import annotations

import argparse
import logging
import signal
import sys
import threading
import time
from pathlib import Path
from typing import Any, TextIO

if __package__ in (None, ""):  # run as a script: make the project importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

QUIET = {"log_level": 3}
PRODUCER_NOTES = {"log_level": 5, "debug": "eos"}
"""librdkafka's producer notices, and its idempotence steps (debug lines, a few per leader change):
which refusal made it bump its epoch ("failed due to skipped sequence numbers ... caused by previous
failed request (NOT_ENOUGH_REPLICAS ...)"), "bumped epoch to PID{...}", each partition's sequences
renumbered from which message. A record written twice under two producer epochs in the end check is
traced from them (librdkafka#4953: a bump writes possibly persisted retries again; issue 38)."""
DELIVERY_TIMEOUT_MS = 300_000
"""How long a producer retries a record through the faults before it gives up on it."""


class EventFile:
    """Lines written from several threads, flushed every half second and at close."""

    def __init__(self, path: str) -> None:
        self._file: TextIO = open(path, "w", buffering=1 << 16)  # noqa: SIM115 - closed in close()
        self._lock = threading.Lock()
        self._flushed = time.monotonic()

    def write(self, line: str) -> None:
        with self._lock:
            self._file.write(line + "\n")
            if time.monotonic() - self._flushed > 0.5:
                self._file.flush()
                self._flushed = time.monotonic()

    def close(self) -> None:
        with self._lock:
            self._file.close()


class Stop:
    """Set by SIGTERM/SIGINT: the loops finish their round and stop cleanly."""

    def __init__(self) -> None:
        self.requested = False
        signal.signal(signal.SIGTERM, self._set)
        signal.signal(signal.SIGINT, self._set)

    def _set(self, *_: Any) -> None:
        self.requested = True


def value_of(tag: str, number: int) -> bytes:
    return f"{tag}-{number:09d}".encode()


def produce(args: argparse.Namespace) -> None:
    out = EventFile(args.out)
    stop = Stop()

    def acked(partition: int, offset: int, value: bytes) -> None:
        out.write(f"a {partition} {offset} {value.decode()}")

    def failed(value: bytes, error: object) -> None:
        out.write(f"f {value.decode()} {str(error).replace(chr(10), ' ')}")

    if args.client == "confluent":
        from confluent_kafka import Producer

        producer = Producer({"bootstrap.servers": args.bootstrap, "acks": "all", "enable.idempotence": True,
                             "linger.ms": 5, "message.timeout.ms": DELIVERY_TIMEOUT_MS, **PRODUCER_NOTES})

        def report(error: Any, message: Any) -> None:
            if error is not None:
                failed(message.value(), error)
            else:
                acked(message.partition(), message.offset(), message.value())

        def send(number: int) -> None:
            value = value_of(args.tag, number)
            while True:
                try:
                    producer.produce(args.topic, value, key=value, partition=number % args.partitions,
                                     on_delivery=report)
                    break
                except BufferError:
                    producer.poll(0.05)
            producer.poll(0)

        def wait(seconds: float) -> None:
            producer.poll(seconds)

        def finish() -> None:
            producer.flush(DELIVERY_TIMEOUT_MS / 1000)
    else:
        from kafka import KafkaProducer

        producer = KafkaProducer(bootstrap_servers=args.bootstrap, acks="all", enable_idempotence=True,
                                 linger_ms=5, delivery_timeout_ms=DELIVERY_TIMEOUT_MS,
                                 request_timeout_ms=10_000)

        def send(number: int) -> None:
            value = value_of(args.tag, number)
            future = producer.send(args.topic, value=value, key=value, partition=number % args.partitions)
            future.add_callback(lambda meta, v=value: acked(meta.partition, meta.offset, v))
            future.add_errback(lambda error, v=value: failed(v, error))

        def wait(seconds: float) -> None:
            time.sleep(seconds)

        def finish() -> None:
            producer.flush(DELIVERY_TIMEOUT_MS / 1000)
            producer.close()

    start = time.monotonic()
    number = 0
    while not stop.requested:
        due = start + number / args.rate
        now = time.monotonic()
        if now < due:
            wait(min(due - now, 0.05))
            continue
        send(number)
        number += 1
    finish()
    out.close()


def consume(args: argparse.Namespace) -> None:
    out = EventFile(args.out)
    stop = Stop()

    def event(kind: str, partitions: list[int]) -> None:
        out.write(f"{kind} {time.monotonic():.6f} {' '.join(map(str, sorted(partitions)))}".rstrip())

    def batches(records: list[tuple[int, int]]) -> None:
        """(partition, offset) of a poll's records in the order handed over: one line per partition run."""
        now = f"{time.monotonic():.6f}"
        runs: dict[int, list[int]] = {}
        for partition, offset in records:
            run = runs.get(partition)
            if run is not None and offset != run[1] + 1:  # a jump inside one poll: its own line
                out.write(f"b {now} {partition} {run[0]} {run[1]} {run[2]}")
                run = None
            runs[partition] = [offset, offset, 1] if run is None else [run[0], offset, run[2] + 1]
        for partition, (first, last, count) in runs.items():
            out.write(f"b {now} {partition} {first} {last} {count}")

    if args.client == "confluent":
        from client_epochs.confluent import Consumer

        consumer = Consumer({"bootstrap.servers": args.bootstrap, "group.id": args.group,
                             "enable.auto.commit": False, "auto.offset.reset": "earliest",
                             "session.timeout.ms": 10_000, **QUIET})

        def on_assign(_: Any, partitions: list[Any]) -> None:
            event("assign", [p.partition for p in partitions])

        def on_revoke(_: Any, partitions: list[Any]) -> None:
            commit()
            event("revoke", [p.partition for p in partitions])

        def commit() -> None:
            positions = [p for p in consumer.position(consumer.assignment()) if p.offset >= 0]
            if not positions:
                return
            try:
                done = consumer.commit(offsets=positions, asynchronous=False)
            except Exception:  # noqa: BLE001 - a coordinator moving; the next round commits again
                return
            now = time.monotonic()
            for p in done or []:
                if p.error is None and p.offset >= 0:
                    out.write(f"c {now:.6f} {p.partition} {p.offset}")

        consumer.subscribe([args.topic], on_assign=on_assign, on_revoke=on_revoke, on_lost=on_revoke)
        while not stop.requested:
            messages = [m for m in consumer.consume(500, 1.0) if m.error() is None]
            batches([(m.partition(), m.offset()) for m in messages])
            commit()
        commit()
        consumer.close()
    else:
        from kafka import ConsumerRebalanceListener

        from client_epochs.kafka_python import KafkaConsumer

        consumer = KafkaConsumer(bootstrap_servers=args.bootstrap, group_id=args.group, enable_auto_commit=False,
                                 auto_offset_reset="earliest", session_timeout_ms=10_000)

        def commit() -> None:
            assigned = consumer.assignment()
            if not assigned:
                return
            try:
                # kafka-python 3 runs a plain rebalance listener on its IO thread, where position() and
                # commit() refuse to block (RuntimeError), e.g. while a position waits for KIP-320 validation
                positions = {tp: consumer.position(tp) for tp in assigned}
                consumer.commit()
            except Exception:  # noqa: BLE001 - a coordinator moving, or the IO thread; the next round commits again
                return
            now = time.monotonic()
            for tp, offset in positions.items():
                if offset is not None:
                    out.write(f"c {now:.6f} {tp.partition} {offset}")

        class Listener(ConsumerRebalanceListener):
            def on_partitions_revoked(self, revoked: Any) -> None:
                commit()
                event("revoke", [tp.partition for tp in revoked])

            def on_partitions_assigned(self, assigned: Any) -> None:
                event("assign", [tp.partition for tp in assigned])

        consumer.subscribe([args.topic], listener=Listener())
        while not stop.requested:
            polled = consumer.poll(timeout_ms=1000, max_records=500)
            batches([(tp.partition, r.offset) for tp, records in polled.items() for r in records])
            commit()
        commit()
        consumer.close(autocommit=False)
    out.close()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.soak_clients", description=__doc__.split("\n\n")[0])
    parser.add_argument("role", choices=("produce", "consume"))
    parser.add_argument("--client", choices=("confluent", "kafka-python"), required=True)
    parser.add_argument("--bootstrap", required=True)
    parser.add_argument("--topic", required=True)
    parser.add_argument("--out", required=True)
    parser.add_argument("--partitions", type=int, default=3)
    parser.add_argument("--tag", default="p")
    parser.add_argument("--rate", type=float, default=100.0, help="records a second")
    parser.add_argument("--group", default="soak")
    args = parser.parse_args(argv)
    # The SDK's own decisions (an out-of-range position resumed or reset, a wait and for what) and
    # kafka-python's group steps (joined, elected leader, assigned) go to the client's .err file: a
    # rewind or a member left without partitions in the end check is traced from them.
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    for name in ("client_epochs", "kafka.coordinator", "kafka.cluster"):
        logging.getLogger(name).setLevel(logging.INFO)
    (produce if args.role == "produce" else consume)(args)


if __name__ == "__main__":
    main()
