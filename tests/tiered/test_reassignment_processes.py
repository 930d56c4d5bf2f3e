"""Partition reassignment (KIP-455) between real broker processes, as a platform engineer runs it:
`quorum reassign-partitions --execute / --verify / --list` moves a partition holding data from
brokers [101, 102] to [102, 103] while a confluent-kafka producer keeps writing with acks=all;
every acknowledged record is readable at its offset afterwards, and broker 101 no longer has the
partition's directory. kafka-python's admin client moves a partition through the same APIs. A
tiered partition moved to a new broker is bootstrapped there from the tiered offset (KIP-1023),
and that replica, short of local retention, is passed over when the leader leaves.

One cluster for the module (one controller, three brokers), tiered storage on every broker against
the tests' moto S3 server and `follower.fetch.last.tiered.offset.enable` on; topics without
`remote.storage.enable` move the classic way."""

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
from quorum.get_offsets import list_offsets
from quorum.launcher import LocalCluster
from tests.test_controller_processes import create, metadata, wait_until
from tiered_follower.embedded_s3 import EmbeddedS3, s3_properties

pytestmark = pytest.mark.timeout(240)

BROKERS = (101, 102, 103)
SEGMENT_BYTES = 16 * 1024
SETTINGS = {"offsets.topic.replication.factor": "1", "offsets.topic.num.partitions": "1",
            "broker.session.timeout.ms": "6000", "broker.heartbeat.interval.ms": "500",
            "replica.fetch.backoff.ms": "100", "log.segment.bytes": str(SEGMENT_BYTES),
            "remote.log.manager.task.interval.ms": "200", "follower.fetch.last.tiered.offset.enable": "true"}
QUIET = {"log_level": 0}


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory, s3_server: EmbeddedS3) -> Iterator[LocalCluster]:
    s3_server.create_bucket("reassign-cluster")
    settings = {**SETTINGS, **s3_properties(s3_server.endpoint_url, "reassign-cluster", key_prefix="reassign/")}
    running = LocalCluster(tmp_path_factory.mktemp("reassign"), controllers=1, brokers=len(BROKERS),
                           settings=settings)
    running.format_storage()
    running.start()
    try:
        first = running.specs[BROKERS[0]].address
        wait_until("three unfenced brokers", lambda: metadata(first)[0] == set(BROKERS))
        yield running
    finally:
        running.stop()


def replicas_of(address: str, topic: str, partition: int = 0) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """(replicas, ISR) of a partition as a broker's Metadata answer has them; empty while the broker
    does not name it yet (it names a new topic once it has opened its partitions)."""
    found = AdminClient({"bootstrap.servers": address, **QUIET}).list_topics(topic, timeout=15).topics[topic]
    part = found.partitions.get(partition)
    return ((), ()) if part is None else (tuple(part.replicas), tuple(part.isrs))


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


def test_a_tiered_partition_moved_to_a_new_broker_bootstraps_there_and_is_passed_over_while_short(
        cluster: LocalCluster, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    address = cluster.specs[102].address
    create(AdminClient({"bootstrap.servers": address, **QUIET}),
           NewTopic("tiered-move", num_partitions=1, replication_factor=-1, replica_assignment=[[101, 102]],
                    config={"remote.storage.enable": "true"}))  # local retention: keep everything
    wait_until("tiered-move-0 on 101 and 102", lambda: replicas_of(address, "tiered-move") == ((101, 102),
                                                                                                (101, 102)))
    producer = Producer({"bootstrap.servers": address, "acks": "all", "linger.ms": 5, "batch.num.messages": 20,
                         **QUIET})
    values = [f"tiered-{n:05d}-".encode() + b"v" * 500 for n in range(600)]  # ~20 segments
    for value in values:
        producer.produce("tiered-move", value, partition=0)
        producer.poll(0)
    assert producer.flush(60) == 0
    pending = wait_until("segments of tiered-move-0 uploaded (earliest pending upload offset above 0)",
                         lambda: list_offsets(address, "tiered-move", [0], -6)[0][0], timeout_s=60)

    def move(target: list[int]) -> None:
        plan = tmp_path / f"move-{'-'.join(map(str, target))}.json"
        plan.write_text(json.dumps({"version": 1, "partitions": [
            {"topic": "tiered-move", "partition": 0, "replicas": target}]}))
        code, out = tool(capsys, "--bootstrap-server", address, "--reassignment-json-file", str(plan), "--execute")
        assert code == 0, out
        wait_until(f"tiered-move-0 moved to {target} (quorum reassign-partitions --verify)",
                   lambda: tool(capsys, "--bootstrap-server", address, "--reassignment-json-file", str(plan),
                                "--verify")[0] == 0, timeout_s=90)

    # Add broker 103: it starts its local log at the earliest pending upload offset, not at 0 (where
    # the leader's local log, which keeps everything, starts: KIP-405's path would copy it all).
    move([101, 102, 103])
    directory = cluster.specs[103].directory / "data" / "tiered-move-0"
    first_local = min(int(f.name.split(".")[0]) for f in directory.glob("*.log"))
    assert first_local >= pending > 0
    topic_id = metadata(address)[1]["tiered-move"].topic_id
    controller_log = cluster.specs[1].log_path
    wait_until("the controller to learn that broker 103's replica of tiered-move-0 is short",
               lambda: f"broker 103: 1 replica(s) with a short local log: {topic_id}-0"
               in controller_log.read_text(errors="replace"))
    # Move off the leader: 103 comes first in the target, but its local log is short, so 102 leads.
    move([103, 102])
    assert replicas_of(address, "tiered-move")[0] == (103, 102)
    assert metadata(address)[1]["tiered-move"].partitions[0].leader == 102
    # Every record, from offset 0, through the cluster (below 103's local start it is in S3).
    consumer = Consumer({"bootstrap.servers": address, "group.id": "tiered-move-check", "enable.auto.commit": False,
                         **QUIET})
    try:
        consumer.assign([TopicPartition("tiered-move", 0, 0)])
        read: list[bytes] = []
        while len(read) < len(values):
            for message in consumer.consume(500, 1.0):
                assert message.error() is None, message.error()
                read.append(message.value())
    finally:
        consumer.close()
    assert read == values
