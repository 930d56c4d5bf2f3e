"""Replication under fire (issue 7): 3 controllers and 3 brokers, replication factor 3, acks=all,
min.insync.replicas=2. While a confluent-kafka producer writes and a consumer reads, brokers are
killed with `kill -9` and restarted, round after round, and one broker answers Metadata with
metadata 2 s old (KAFKA-6262). Afterwards every acknowledged message is present exactly once, at
the offset it was acknowledged at, on every in-sync replica; the replicas' logs are byte-identical
up to the high watermark; and nothing the consumer read along the way is missing from them.
"""

from __future__ import annotations

import random
import signal
import threading
import time
from pathlib import Path

import pytest
from confluent_kafka import Consumer, Producer
from confluent_kafka.admin import AdminClient, NewTopic

from quorum.launcher import LocalCluster
from quorum.log.log import Log
from quorum.wire.records import iter_batches
from tests.test_broker_processes import QUIET, read_all
from tests.test_controller_processes import metadata, wait_until

pytestmark = pytest.mark.timeout(420)

BROKERS = (101, 102, 103)
STALE = 103
TOPIC = "chaos"
PARTITIONS = 2
ROUNDS = 3
SETTINGS = {"replica.lag.time.max.ms": "3000", "broker.session.timeout.ms": "3000",
            "broker.heartbeat.interval.ms": "500", "offsets.topic.replication.factor": "3"}


class BackgroundProducer:
    """acks=all, idempotent, keyed messages until stopped; remembers what was acknowledged.

    A message at most every `pause_s` (the wait for delivery reports between two): the traffic each
    fault lands in, at a pace the cluster's CPU can afford beside the suite; `padding` zero bytes
    after each value keep the bytes flowing (segments rolling) at a slower pace."""

    def __init__(self, bootstrap: str, topic: str = TOPIC, pause_s: float = 0.002, padding: int = 0) -> None:
        self.topic = topic
        self._pause_s = pause_s
        self._padding = bytes(padding)
        self.acked: list[tuple[int, int, bytes]] = []  # (partition, offset, value)
        self.failed: list[str] = []
        self._stop = threading.Event()
        self._producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "enable.idempotence": True,
                                   "linger.ms": 5, "message.timeout.ms": 120_000, **QUIET})
        self._thread = threading.Thread(target=self._run, name="chaos-producer", daemon=True)

    def _delivered(self, error, message) -> None:
        if error is None:
            self.acked.append((message.partition(), message.offset(), message.value()))
        else:
            self.failed.append(str(error))

    def _run(self) -> None:
        sent = 0
        while not self._stop.is_set():
            try:
                self._producer.produce(self.topic, f"m-{sent}".encode() + self._padding, key=str(sent % 11).encode(),
                                       on_delivery=self._delivered)
                sent += 1
            except BufferError:
                pass
            self._producer.poll(self._pause_s)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> int:
        self._stop.set()
        self._thread.join(30)
        return self._producer.flush(180)


class BackgroundConsumer:
    """A group member reading all along: it must only ever see committed records (below the high
    watermark), so nothing it sees may be missing from the final logs, whatever was truncated."""

    def __init__(self, bootstrap: str) -> None:
        self.seen: list[bytes] = []
        self.errors: list[str] = []
        self._stop = threading.Event()
        # A Metadata request lost with a killed broker can leave librdkafka waiting for "up-to-date
        # metadata" before it joins, until its next periodic refresh (5 minutes by default).
        self._consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "chaos-readers",
                                   "auto.offset.reset": "earliest", "topic.metadata.refresh.interval.ms": 10_000,
                                   **QUIET})
        self._thread = threading.Thread(target=self._run, name="chaos-consumer", daemon=True)

    def _run(self) -> None:
        self._consumer.subscribe([TOPIC])
        while not self._stop.is_set():
            for message in self._consumer.consume(500, 0.2):
                if message.error() is None:
                    self.seen.append(message.value())
                elif len(self.errors) < 5:
                    self.errors.append(str(message.error()))
        self._consumer.close()

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(30)


def partition_dirs(cluster: LocalCluster, broker: int) -> dict[int, Path]:
    data = cluster.specs[broker].directory / "data"
    return {p: data / f"{TOPIC}-{p}" for p in range(PARTITIONS) if (data / f"{TOPIC}-{p}").is_dir()}


def log_bytes(directory: Path, upto: int) -> bytes:
    """The partition's batches below offset `upto`, as stored."""
    with Log(directory) as log:
        return b"".join(bytes(batch.raw) for batch in iter_batches(log.read(log.start_offset, 1 << 30, upto)))


def test_acknowledged_messages_survive_rounds_of_kill_9_with_one_stale_broker(tmp_path):
    cluster = LocalCluster(tmp_path, controllers=3, brokers=3, settings=SETTINGS, stale_brokers={STALE: 2000})
    cluster.format_storage()
    cluster.write_configs()
    cluster.start()
    rng = random.Random(7)
    try:
        addresses = {b: cluster.specs[b].address for b in BROKERS}
        bootstrap = ",".join(addresses.values())
        wait_until("three unfenced brokers", lambda: metadata(addresses[101])[0] == set(BROKERS))
        # The stale broker's first answers list no broker at all: librdkafka's admin client, told of a
        # controller it cannot find, waits for it past its timeout, so topics are made through 101.
        admin = AdminClient({"bootstrap.servers": addresses[101], **QUIET})
        for future in admin.create_topics([NewTopic(TOPIC, PARTITIONS, 3, config={"min.insync.replicas": "2"})],
                                          request_timeout=60).values():
            future.result(timeout=90)
        def full_isrs(address: str) -> bool:
            topic = metadata(address)[1].get(TOPIC)
            return topic is not None and all(len(p.isr) == 3 for p in topic.partitions.values())

        wait_until("full ISRs", lambda: full_isrs(addresses[101]))
        # The consumer may bootstrap from the stale broker: until its 2 s old view holds the topic it
        # answers UNKNOWN_TOPIC_OR_PARTITION, and librdkafka then leaves the subscription empty until
        # its next periodic refresh (topic.metadata.refresh.interval.ms, 5 minutes).
        wait_until("the stale broker knows the topic", lambda: full_isrs(addresses[STALE]))
        producer = BackgroundProducer(bootstrap)
        producer.start()
        consumer = BackgroundConsumer(bootstrap)
        consumer.start()
        for _ in range(ROUNDS):
            time.sleep(2)
            victim = rng.choice(BROKERS)
            cluster.kill(victim, signal.SIGKILL)
            time.sleep(rng.uniform(1, 4))
            cluster.start_node(victim)
            survivor = addresses[next(b for b in BROKERS if b != victim)]
            wait_until(f"broker {victim} back in every ISR", lambda s=survivor: full_isrs(s), 120)
        time.sleep(2)
        assert producer.stop() == 0, "the producer could not deliver everything"
        consumer.stop()
        assert not producer.failed, producer.failed[:5]
        assert producer.acked, "nothing was acknowledged"
        values = read_all(bootstrap, TOPIC, PARTITIONS)
        _, topics = metadata(addresses[101])
        isr = {index: part.isr for index, part in topics[TOPIC].partitions.items()}
    finally:
        cluster.stop()

    assert len(values) == len(set(values)), "a message is present twice"
    assert consumer.seen, f"the consumer read nothing while the brokers were killed: {consumer.errors}"
    phantoms = set(consumer.seen) - set(values)
    assert not phantoms, f"the consumer read {len(phantoms)} records that are not in the final logs"
    lost = {value for _, _, value in producer.acked} - set(values)
    assert not lost, f"{len(lost)} acknowledged messages lost"
    for partition in range(PARTITIONS):
        copies = {b: partition_dirs(cluster, b).get(partition) for b in isr[partition]}
        assert all(copies.values()), f"partition {partition}: an in-sync replica has no log: {copies}"
        ends = []
        for directory in copies.values():
            with Log(directory) as log:
                ends.append(log.end_offset)
        upto = min(ends)
        stored = {b: log_bytes(d, upto) for b, d in copies.items()}
        assert len(set(stored.values())) == 1, f"partition {partition}: in-sync replicas differ below offset {upto}"
        at_offset = {record.offset: record.value for batch in iter_batches(next(iter(stored.values())))
                     for record in batch.records()}
        for acked_partition, offset, value in producer.acked:
            if acked_partition == partition:
                assert at_offset.get(offset) == value, f"{partition}@{offset}: acknowledged {value!r}, stored " \
                                                       f"{at_offset.get(offset)!r}"
