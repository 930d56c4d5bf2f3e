"""A broker process with real clients: what it acknowledged survives `kill -9`, and garbage on its
client port never stops it serving other connections."""

from __future__ import annotations

import signal
import socket
import struct
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from quorum.launcher import LocalCluster
from tests.test_controller_processes import create, metadata, wait_until
from tests.test_server_bad_input import metadata_round_trip, send_garbage_and_wait_for_close

pytestmark = pytest.mark.timeout(300)

BROKER = 101
SETTINGS = {"offsets.topic.replication.factor": "1", "offsets.topic.num.partitions": "4",
            "group.initial.rebalance.delay.ms": "0"}
QUIET = {"log_level": 0}  # librdkafka's notes about the killed broker are expected here


@contextmanager
def one_broker(directory, extra: dict[str, str] | None = None) -> Iterator[tuple[LocalCluster, str]]:
    """One controller and one broker from `quorum local-cluster`'s launcher, the broker unfenced."""
    cluster = LocalCluster(directory, controllers=1, brokers=1, settings={**SETTINGS, **(extra or {})})
    cluster.format_storage()
    cluster.write_configs()
    cluster.start()
    try:
        address = cluster.specs[BROKER].address
        wait_until("the broker to be unfenced", lambda: metadata(address)[0] == {BROKER})
        yield cluster, address
    finally:
        cluster.stop()


def read_partitions(address: str, topic: str, partitions: int) -> dict[int, list[bytes]]:
    """Every value of each partition of `topic` up to its high watermark, in offset order."""
    consumer = Consumer({"bootstrap.servers": address, "group.id": "reader", "enable.auto.commit": False, **QUIET})
    try:
        ends = {p: consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=30)[1] for p in range(partitions)}
        consumer.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
        values: dict[int, list[bytes]] = {p: [] for p in range(partitions)}
        seen = dict.fromkeys(range(partitions), 0)

        def done() -> bool:
            for message in consumer.consume(1000, 1.0):
                assert message.error() is None, message.error()
                values[message.partition()].append(message.value())
                seen[message.partition()] = message.offset() + 1
            return all(seen[p] >= ends[p] for p in range(partitions))

        wait_until(f"{topic} read to its high watermarks {ends}", done)
        return values
    finally:
        consumer.close()


def read_all(address: str, topic: str, partitions: int) -> list[bytes]:
    """Every value of `topic` up to each partition's high watermark, partition by partition."""
    return [value for values in read_partitions(address, topic, partitions).values() for value in values]


def test_acks_all_messages_survive_kill_9_of_the_broker(tmp_path):
    with one_broker(tmp_path) as (cluster, address):
        create(AdminClient({"bootstrap.servers": address, **QUIET}), NewTopic("durable", 2, 1))
        acked: set[bytes] = set()
        failed: list[str] = []

        def delivered(error, message) -> None:
            if error is None:
                acked.add(message.value())
            else:
                failed.append(str(error))

        producer = Producer({"bootstrap.servers": address, "acks": "all", "enable.idempotence": True,
                             "linger.ms": 5, "message.timeout.ms": 120_000, **QUIET})
        sent = 0

        def produce(count: int) -> None:
            nonlocal sent
            for _ in range(count):
                producer.produce("durable", f"message-{sent}".encode(), key=str(sent % 7).encode(),
                                 on_delivery=delivered)
                sent += 1
                producer.poll(0)

        while len(acked) < 3000:
            produce(200)
            producer.poll(0.01)
        cluster.kill(BROKER, signal.SIGKILL)  # in the middle of production: batches in flight
        produce(2000)  # queued while the broker is down, retried once it is back
        cluster.start_node(BROKER)
        assert producer.flush(120) == 0, "the producer did not deliver everything after the restart"
        assert not failed, failed[:5]

        values = read_all(address, "durable", 2)
    assert len(acked) == sent
    assert acked <= set(values), f"{len(acked - set(values))} acknowledged messages lost"
    assert len(values) == len(set(values)), "the idempotent producer's retries were written twice"


@pytest.fixture(scope="module")
def broker_cluster(tmp_path_factory) -> Iterator[tuple[LocalCluster, str]]:
    """The module's one broker, with 50 records in `kept` that no test here writes to again."""
    with one_broker(tmp_path_factory.mktemp("garbage")) as (cluster, address):
        create(AdminClient({"bootstrap.servers": address, **QUIET}), NewTopic("kept", 1, 1))
        producer = Producer({"bootstrap.servers": address, **QUIET})
        for n in range(50):
            producer.produce("kept", f"kept-{n}".encode())
        assert producer.flush(30) == 0
        yield cluster, address


@pytest.fixture(scope="module")
def broker(broker_cluster) -> str:
    return broker_cluster[1]


BROKER_APIS = [0, 1, 2, 3, 8, 9, 10, 11, 12, 13, 14, 15, 16, 18, 19, 22, 23, 32, 60]
frames = st.one_of(
    st.binary(max_size=300),
    st.binary(max_size=300).map(lambda body: struct.pack(">i", len(body)) + body),
    st.tuples(st.sampled_from(BROKER_APIS), st.integers(-1, 20), st.binary(max_size=300)).map(
        lambda t: struct.pack(">i", 10 + len(t[2])) + struct.pack(">hhih", t[0], t[1], 5, -1) + t[2]),
)


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(garbage=frames)
def test_garbage_on_the_client_port_never_stops_the_broker(broker, garbage):
    host, port = broker.split(":")
    with socket.create_connection((host, int(port)), timeout=10) as healthy:  # connected throughout
        assert "kept" in metadata_round_trip(healthy, 1)
        send_garbage_and_wait_for_close((host, int(port)), garbage)
        assert "kept" in metadata_round_trip(healthy, 2)


def test_after_the_garbage_the_broker_still_serves_its_data(broker):
    assert read_all(broker, "kept", 1) == [f"kept-{n}".encode() for n in range(50)]


WIDE_PARTITIONS = 1_500


class RoundTrips:
    """One record at a time produced with acks=all and acknowledged, on a thread of its own; the wall-clock
    start and end of each, to set beside the broker's log."""

    def __init__(self, address: str, topic: str) -> None:
        self.done: list[tuple[float, float]] = []
        self.errors: list[str] = []
        self._producer = Producer({"bootstrap.servers": address, "acks": "all", "linger.ms": 0, **QUIET})
        self._topic = topic
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="round-trips", daemon=True)

    def __enter__(self) -> RoundTrips:
        self._thread.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self._stop.set()
        self._thread.join(60)

    def _run(self) -> None:
        while not self._stop.is_set():
            delivered: list[object] = []
            started = time.time()
            self._producer.produce(self._topic, b"probe",
                                   on_delivery=lambda error, _, into=delivered: into.append(error))
            self._producer.flush(30)
            if delivered != [None]:
                self.errors.append(f"not acknowledged: {delivered}")
            else:
                self.done.append((started, time.time()))
            self._stop.wait(0.01)


def logged_at(line: str) -> float:
    """The wall-clock time of a node log line (`2026-11-29 18:33:44,918 INFO ...`)."""
    return datetime.strptime(line[:23], "%Y-%m-%d %H:%M:%S,%f").timestamp()


def test_a_broker_deleting_a_topic_of_thousands_of_partitions_keeps_answering(broker_cluster, tmp_path):
    """Kafka's broker renames a deleted partition's directory and removes its files later on a thread of
    its own (LogManager.asyncDelete), so its request threads keep serving. Ours deleted the logs on its
    event loop: a fuzz run's topic of 4,099 partitions stopped it answering anything for 7 s, its own
    Raft observer lost the controller meanwhile. Here a producer round-trips acks=all throughout, and
    some of its records must be acknowledged between the broker's first and last deletion of a log."""
    cluster, address = broker_cluster
    admin = AdminClient({"bootstrap.servers": address, **QUIET})
    create(admin, NewTopic("round-trips", 1, 1), NewTopic("wide", WIDE_PARTITIONS, 1))
    wait_until(f"the broker to serve all {WIDE_PARTITIONS} partitions of wide", lambda: len(
        getattr(metadata(address)[1].get("wide"), "partitions", ())) == WIDE_PARTITIONS, timeout_s=180)
    log_dir = cluster.specs[BROKER].directory / "data"
    assert len(list(log_dir.glob("wide-*"))) == WIDE_PARTITIONS
    log_path = cluster.specs[BROKER].log_path
    logged_before = log_path.stat().st_size
    with RoundTrips(address, "round-trips") as trips:
        wait_until("a first acknowledged record", lambda: trips.done)
        for future in admin.delete_topics(["wide"], operation_timeout=60).values():
            future.result(timeout=60)
        wait_until("every directory of wide removed from the broker's log dir",
                   lambda: not list(log_dir.glob("wide-*")), timeout_s=120)
        wait_until("one more acknowledged record", lambda: trips.done[-1][0] > time.time() - 5)
    with log_path.open(encoding="utf-8") as log:
        log.seek(logged_before)
        lines = log.read().splitlines()
    first = min(logged_at(line) for line in lines if line.endswith("deleting its log"))
    last = max(logged_at(line) for line in lines if "/wide-" in line and line.endswith(": deleted"))
    during = [(start, end) for start, end in trips.done if first <= start and end <= last]
    assert not trips.errors, trips.errors[:3]
    assert during, (f"no record was acknowledged while the broker deleted wide's {WIDE_PARTITIONS} logs "
                    f"({last - first:.2f} s); {len(trips.done)} were before and after")
    assert metadata(address)[1].keys() >= {"kept", "round-trips"} and "wide" not in metadata(address)[1]
