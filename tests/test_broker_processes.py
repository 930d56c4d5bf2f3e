"""A broker process with real clients: what it acknowledged survives `kill -9`, and garbage on its
client port never stops it serving other connections."""

from __future__ import annotations

import signal
import socket
import struct
from collections.abc import Iterator
from contextlib import contextmanager

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
def broker(tmp_path_factory) -> Iterator[str]:
    with one_broker(tmp_path_factory.mktemp("garbage")) as (_, address):
        create(AdminClient({"bootstrap.servers": address, **QUIET}), NewTopic("kept", 1, 1))
        producer = Producer({"bootstrap.servers": address, **QUIET})
        for n in range(50):
            producer.produce("kept", f"kept-{n}".encode())
        assert producer.flush(30) == 0
        yield address


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
