"""Partition reassignment (KIP-455) between real broker processes, as a platform engineer runs it:
`quorum reassign-partitions --execute / --verify / --list` moves a partition holding data from
brokers [101, 102] to [102, 103] while a confluent-kafka producer keeps writing with acks=all;
every acknowledged record is readable at its offset afterwards, and broker 101 no longer has the
partition's directory. kafka-python's admin client moves a partition through the same APIs.

One cluster (one controller, three brokers) for the module."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from kafka import TopicPartition as KafkaTopicPartition
from kafka.admin import KafkaAdminClient

from quorum.cli import main
from quorum.launcher import LocalCluster
from tests.test_controller_processes import create, metadata, wait_until

pytestmark = pytest.mark.timeout(240)

BROKERS = (101, 102, 103)
SETTINGS = {"offsets.topic.replication.factor": "1", "offsets.topic.num.partitions": "1",
            "broker.session.timeout.ms": "6000", "broker.heartbeat.interval.ms": "500",
            "replica.fetch.backoff.ms": "100"}
QUIET = {"log_level": 0}


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    running = LocalCluster(tmp_path_factory.mktemp("reassign"), controllers=1, brokers=len(BROKERS),
                           settings=SETTINGS)
    running.format_storage()
    running.start()
    try:
        first = running.specs[BROKERS[0]].address
        wait_until("three unfenced brokers", lambda: metadata(first)[0] == set(BROKERS))
        yield running
    finally:
        running.stop()


def replicas_of(address: str, topic: str, partition: int = 0) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """(replicas, ISR) of a partition as a broker's Metadata answer has them."""
    found = AdminClient({"bootstrap.servers": address, **QUIET}).list_topics(topic, timeout=15).topics[topic]
    part = found.partitions[partition]
    return tuple(part.replicas), tuple(part.isrs)


def tool(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str]:
    """Run `quorum reassign-partitions ARGS` as the command line does: exit code and what it printed."""
    code = main(["reassign-partitions", *args])
    return code, capsys.readouterr().out


def test_move_a_partition_with_data_while_producing(cluster: LocalCluster, tmp_path: Path,
                                                    capsys: pytest.CaptureFixture[str]) -> None:
    address = cluster.specs[101].address
    create(AdminClient({"bootstrap.servers": address, **QUIET}),
           NewTopic("moving", num_partitions=1, replication_factor=-1, replica_assignment=[[101, 102]]))
    wait_until("moving-0 replicated on 101 and 102", lambda: replicas_of(address, "moving") == ((101, 102),
                                                                                                (101, 102)))
    acked: dict[bytes, int] = {}
    failed: list[str] = []
    stop = threading.Event()

    def delivered(error, message) -> None:
        if error is None:
            acked[message.value()] = message.offset()
        else:
            failed.append(str(error))

    def produce() -> None:
        producer = Producer({"bootstrap.servers": address, "acks": "all", **QUIET})
        n = 0
        while not stop.is_set() or n < 2000:
            producer.produce("moving", f"record-{n}".encode() * 20, partition=0, on_delivery=delivered)
            producer.poll(0)
            n += 1
            if n % 200 == 0:
                producer.flush(30)
        assert producer.flush(60) == 0

    writer = threading.Thread(target=produce, name="producer")
    writer.start()
    try:
        wait_until("1000 records acknowledged before the move", lambda: len(acked) >= 1000)
        plan = tmp_path / "move.json"
        plan.write_text(json.dumps({"version": 1, "partitions": [
            {"topic": "moving", "partition": 0, "replicas": [102, 103], "log_dirs": ["any", "any"]}]}))
        code, out = tool(capsys, "--bootstrap-server", address, "--reassignment-json-file", str(plan), "--execute")
        assert code == 0, out
        lines = out.splitlines()
        assert lines[0] == "Current partition replica assignment"
        assert json.loads(lines[2]) == {"version": 1, "partitions": [
            {"topic": "moving", "partition": 0, "replicas": [101, 102], "log_dirs": ["any", "any"]}]}
        assert lines[4] == "Save this to use as the --reassignment-json-file option during rollback"
        assert lines[5] == "Successfully started partition reassignment for moving-0"

        def verified() -> bool:
            code, out = tool(capsys, "--bootstrap-server", address, "--reassignment-json-file", str(plan),
                             "--verify")
            assert out.splitlines()[0] == "Status of partition reassignment:"
            assert out.splitlines()[1] in ("Reassignment of partition moving-0 is completed.",
                                           "Reassignment of partition moving-0 is still in progress."), out
            return code == 0

        wait_until("the reassignment of moving-0 to [102, 103] to complete (quorum reassign-partitions --verify)",
                   verified, timeout_s=90)
    finally:
        stop.set()
        writer.join(120)
    assert not failed, failed[:3]
    assert replicas_of(address, "moving")[0] == (102, 103)
    code, out = tool(capsys, "--bootstrap-server", address, "--list")
    assert (code, out.strip()) == (0, "No partition reassignments found.")

    # Every acknowledged record, once, at the offset it was acknowledged with, from the new replicas.
    consumer = Consumer({"bootstrap.servers": address, "group.id": "reassign-check", "enable.auto.commit": False,
                         **QUIET})
    try:
        end = consumer.get_watermark_offsets(TopicPartition("moving", 0), timeout=30)[1]
        consumer.assign([TopicPartition("moving", 0, 0)])
        read: dict[int, bytes] = {}
        while len(read) < end:
            for message in consumer.consume(500, 1.0):
                assert message.error() is None, message.error()
                read[message.offset()] = message.value()
    finally:
        consumer.close()
    assert len(acked) >= 2000
    assert all(read.get(offset) == value for value, offset in acked.items())
    gone = cluster.specs[101].directory / "data" / "moving-0"
    wait_until(f"{gone} deleted by broker 101", lambda: not gone.exists())
    assert (cluster.specs[103].directory / "data" / "moving-0").is_dir()


def test_kafka_python_admin_client_reassigns_and_lists(cluster: LocalCluster) -> None:
    address = cluster.specs[102].address
    create(AdminClient({"bootstrap.servers": address, **QUIET}),
           NewTopic("kp-moving", num_partitions=1, replication_factor=-1, replica_assignment=[[103]]))
    wait_until("kp-moving-0 on 103", lambda: replicas_of(address, "kp-moving") == ((103,), (103,)))
    moved = KafkaTopicPartition("kp-moving", 0)
    admin = KafkaAdminClient(bootstrap_servers=address, client_id="reassign-test")
    try:
        assert admin.list_partition_reassignments() == {}
        cancelled = admin.alter_partition_reassignments({moved: None})
        assert cancelled[moved].__name__ == "NoReassignmentInProgressError"
        assert admin.alter_partition_reassignments({moved: [101]}) == {moved: None}
        wait_until("kp-moving-0 moved to broker 101", lambda: replicas_of(address, "kp-moving") == ((101,), (101,)))
        assert admin.list_partition_reassignments({"kp-moving": [0]}) == {}
    finally:
        admin.close()
