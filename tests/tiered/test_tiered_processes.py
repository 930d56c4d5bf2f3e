"""Tiered storage end to end: real `quorum start` brokers against moto's S3 server, real clients.

One cluster for the module (1 controller, 3 brokers) with tiered storage on every broker, small
segments, and a remote log task every 200 ms. Topics are created with `remote.storage.enable`
and a small `local.retention.bytes`, so their early segments soon exist only in S3.
"""

from __future__ import annotations

import subprocess
from collections.abc import Iterator

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from kafka import KafkaConsumer
from kafka import TopicPartition as KafkaTopicPartition

from quorum.launcher import LocalCluster
from tests.test_controller_processes import create, wait_until
from tiered_follower.embedded_s3 import EmbeddedS3

QUIET = {"log_level": 0}
BROKERS = (101, 102, 103)
SEGMENT_BYTES = 16 * 1024
TIERED = {"remote.storage.enable": "true", "local.retention.bytes": "1"}


@pytest.fixture(scope="module")
def cluster(tmp_path_factory, s3_server: EmbeddedS3) -> Iterator[LocalCluster]:
    s3_server.create_bucket("tiered-cluster")
    settings = {
        **s3_server.properties("tiered-cluster", key_prefix="cluster/"),
        "offsets.topic.replication.factor": "1", "group.initial.rebalance.delay.ms": "0",
        "log.segment.bytes": str(SEGMENT_BYTES),
        "remote.log.manager.task.interval.ms": "200",
        "log.retention.check.interval.ms": "500",
    }
    running = LocalCluster(tmp_path_factory.mktemp("tiered"), controllers=1, brokers=len(BROKERS), settings=settings)
    running.format_storage()
    running.write_configs()
    running.start()
    try:
        yield running
    finally:
        running.stop()


def admin(cluster: LocalCluster) -> AdminClient:
    return AdminClient({"bootstrap.servers": cluster.bootstrap_servers, **QUIET})


def produce(cluster: LocalCluster, topic: str, count: int, start: int = 0) -> list[bytes]:
    producer = Producer({"bootstrap.servers": cluster.bootstrap_servers, "acks": "all", "linger.ms": 5,
                         "batch.num.messages": 20, **QUIET})
    values = [f"{topic}-{n:06d}-".encode() + bytes([n % 251]) * 200 for n in range(start, start + count)]
    for value in values:
        producer.produce(topic, value, partition=0)
    assert producer.flush(30) == 0
    return values


def list_offset(cluster: LocalCluster, topic: str, spec: int) -> int:
    """ListOffsets for partition 0 of `topic` with a timestamp spec (-2, -4, -5, -6, ...)."""
    from quorum.get_offsets import list_offsets  # the `quorum get-offsets` client

    return list_offsets(cluster.bootstrap_servers, topic, [0], spec)[0][0]


def remote_keys(s3_server: EmbeddedS3, topic: str) -> list[str]:
    listing = s3_server.client().list_objects_v2(Bucket="tiered-cluster", Prefix=f"cluster/{topic}-")
    return [entry["Key"] for entry in listing.get("Contents", ())]


def read_confluent(cluster: LocalCluster, topic: str, end: int) -> list[bytes]:
    consumer = Consumer({"bootstrap.servers": cluster.bootstrap_servers, "group.id": f"{topic}-reader",
                         "enable.auto.commit": False, "max.partition.fetch.bytes": 32 * 1024, **QUIET})
    values: list[bytes] = []
    try:
        consumer.assign([TopicPartition(topic, 0, 0)])

        def done() -> bool:
            for message in consumer.consume(500, 0.5):
                assert message.error() is None, message.error()
                assert message.offset() == len(values), (message.offset(), len(values))
                values.append(message.value())
            return len(values) >= end

        wait_until(f"confluent-kafka reading {topic} to {end}", done)
    finally:
        consumer.close()
    return values


def read_kafka_python(cluster: LocalCluster, topic: str, end: int) -> list[bytes]:
    consumer = KafkaConsumer(bootstrap_servers=cluster.bootstrap_servers, enable_auto_commit=False,
                             fetch_max_bytes=64 * 1024, max_partition_fetch_bytes=32 * 1024)
    values: list[bytes] = []
    try:
        partition = KafkaTopicPartition(topic, 0)
        consumer.assign([partition])
        consumer.seek(partition, 0)

        def done() -> bool:
            for records in consumer.poll(timeout_ms=500).values():
                for record in records:
                    assert record.offset == len(values), (record.offset, len(values))
                    values.append(record.value)
            return len(values) >= end

        wait_until(f"kafka-python reading {topic} to {end}", done)
    finally:
        consumer.close()
    return values


def read_kcat(kcat: str, cluster: LocalCluster, topic: str, end: int) -> list[bytes]:
    out = subprocess.run([kcat, "-C", "-b", cluster.bootstrap_servers, "-t", topic, "-p", "0", "-o", "beginning",
                          "-c", str(end), "-e", "-f", "%o %S\n", "-X", "max.partition.fetch.bytes=32768"],
                         capture_output=True, timeout=60, check=True).stdout
    return out.splitlines()


def tiered_topic(cluster: LocalCluster, name: str, replicas: int = 1) -> None:
    create(admin(cluster), NewTopic(name, 1, replicas, config=TIERED))


def wait_local_start_above(cluster: LocalCluster, topic: str, offset: int) -> None:
    wait_until(f"{topic}'s local log to start above {offset} (segments uploaded and deleted locally)",
               lambda: list_offset(cluster, topic, -4) > offset)


def test_clients_read_from_offset_0_after_the_early_segments_are_only_in_s3(cluster, s3_server, kcat):
    topic = "tiered-read"
    tiered_topic(cluster, topic)
    values = produce(cluster, topic, 2000)
    wait_local_start_above(cluster, topic, 500)
    assert list_offset(cluster, topic, -2) == 0  # the log still starts at 0: in S3
    keys = remote_keys(s3_server, topic)
    assert any(k.endswith(".rsm-manifest") for k in keys) and any(k.endswith(".indexes") for k in keys)
    assert read_confluent(cluster, topic, len(values)) == values
    assert read_kafka_python(cluster, topic, len(values)) == values
    lines = read_kcat(kcat, cluster, topic, len(values))
    assert [line.split(b" ", 1)[0] for line in lines] == [str(n).encode() for n in range(len(values))]
    assert [int(line.split(b" ", 1)[1]) for line in lines] == [len(v) for v in values]
