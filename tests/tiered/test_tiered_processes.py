"""Tiered storage end to end: real `quorum start` brokers against moto's S3 server, real clients.

One cluster for the module (1 controller, 3 brokers) with tiered storage on every broker, small
segments, and a remote log task every 200 ms. Topics are created with `remote.storage.enable`
and a small `local.retention.bytes`, so their early segments soon exist only in S3.
"""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from collections.abc import Iterator

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from kafka import KafkaConsumer
from kafka import TopicPartition as KafkaTopicPartition

from quorum.launcher import LocalCluster
from tests.test_controller_processes import create, metadata, topic_seen_by_a_live_broker, wait_until
from tests.tiered.fault_proxy import FaultProxy
from tiered_follower.embedded_s3 import EmbeddedS3, s3_properties
from tiered_follower.remote_log_manager import CRASH_FILE, CRASH_KNOB

QUIET = {"log_level": 0}
BROKERS = (101, 102, 103)
SEGMENT_BYTES = 16 * 1024
TIERED = {"remote.storage.enable": "true", "local.retention.bytes": "1"}


@pytest.fixture(scope="module")
def cluster(tmp_path_factory, s3_server: EmbeddedS3) -> Iterator[LocalCluster]:
    s3_server.create_bucket("tiered-cluster")
    # every broker reaches S3 through a fault proxy, which injects nothing until a test turns it up
    faults = FaultProxy(s3_server.endpoint_url, rate=0.0, seed=1405, slow_s=0.2)
    settings = {
        **s3_properties(faults.endpoint_url, "tiered-cluster", key_prefix="cluster/"),
        "offsets.topic.replication.factor": "1", "group.initial.rebalance.delay.ms": "0",
        "log.segment.bytes": str(SEGMENT_BYTES),
        "remote.log.manager.task.interval.ms": "200",
        "log.retention.check.interval.ms": "500",
        CRASH_KNOB: "true",  # test only: a CRASH_REMOTE_UPLOAD file kills a broker at an upload step
        "broker.session.timeout.ms": "5000", "broker.heartbeat.interval.ms": "500",
        "replica.lag.time.max.ms": "2000", "replica.fetch.backoff.ms": "200",
    }
    running = LocalCluster(tmp_path_factory.mktemp("tiered"), controllers=1, brokers=len(BROKERS), settings=settings)
    running.format_storage()
    running.write_configs()
    running.start()
    running.faults = faults  # type: ignore[attr-defined]
    try:
        yield running
    finally:
        running.stop()
        faults.stop()


def admin(cluster: LocalCluster) -> AdminClient:
    return AdminClient({"bootstrap.servers": cluster.bootstrap_servers, **QUIET})


def produce(cluster: LocalCluster, topic: str, count: int, start: int = 0) -> list[bytes]:
    producer = Producer({"bootstrap.servers": cluster.bootstrap_servers, "acks": "all", "linger.ms": 5,
                         "batch.num.messages": 20, "enable.idempotence": True, **QUIET})
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


def leader_of(cluster: LocalCluster, topic: str) -> int:
    """Partition 0's leader as a live broker answers Metadata, if that leader is alive; else -1."""
    found = topic_seen_by_a_live_broker(cluster, BROKERS, topic)
    return found.partitions[0].leader if found is not None and found.partitions[0].leader in cluster.alive() else -1


def read_everywhere(cluster: LocalCluster, kcat: str, topic: str, values: list[bytes]) -> None:
    """confluent-kafka, kafka-python and kcat each read the partition from offset 0, byte for byte."""
    assert read_confluent(cluster, topic, len(values)) == values
    assert read_kafka_python(cluster, topic, len(values)) == values
    lines = read_kcat(kcat, cluster, topic, len(values))
    assert [line.split(b" ", 1)[0] for line in lines] == [str(n).encode() for n in range(len(values))]
    assert [int(line.split(b" ", 1)[1]) for line in lines] == [len(v) for v in values]


def test_clients_read_from_offset_0_after_the_early_segments_are_only_in_s3(cluster, s3_server, kcat):
    topic = "tiered-read"
    tiered_topic(cluster, topic, replicas=3)
    values = produce(cluster, topic, 1000)
    wait_local_start_above(cluster, topic, 500)
    assert list_offset(cluster, topic, -2) == 0  # the log still starts at 0: in S3
    keys = remote_keys(s3_server, topic)
    assert any(k.endswith(".rsm-manifest") for k in keys) and any(k.endswith(".indexes") for k in keys)
    read_everywhere(cluster, kcat, topic, values)

    # a leader change (kill -9 of the leader): the new leader serves the S3 part too
    old = leader_of(cluster, topic)
    cluster.kill(old)
    wait_until(f"a new leader of {topic} after {old} was killed", lambda: leader_of(cluster, topic) not in (-1, old))
    more = produce(cluster, topic, 300, start=1000)
    wait_local_start_above(cluster, topic, 500)
    read_everywhere(cluster, kcat, topic, values + more)

    # the killed broker restarts; the cluster restarts it all the same
    cluster.start_node(old)
    wait_until(f"broker {old} back", lambda: old in metadata(cluster.specs[old].address)[0])
    read_everywhere(cluster, kcat, topic, values + more)


def segment_states(s3_server: EmbeddedS3, topic: str) -> tuple[dict[str, int], dict[str, set[str]]]:
    """Per segment stem (`{base}-{uuid}`): the highest metadata state recorded, and its objects' suffixes."""
    states: dict[str, int] = {}
    objects: dict[str, set[str]] = {}
    for key in remote_keys(s3_server, topic):
        name = key.rsplit("/", 1)[1]
        if "/remote_log_metadata/" in key:
            stem, _, state = name.rpartition(".")
            states[stem] = max(states.get(stem, -1), int(state.split("-")[0]))
        else:
            stem, _, suffix = name.partition(".")
            objects.setdefault(stem, set()).add(suffix)
    return states, objects


def settled(s3_server: EmbeddedS3, topic: str) -> bool:
    """No copy or deletion left half done, and objects only for segments whose copy finished, whole."""
    states, objects = segment_states(s3_server, topic)
    if any(state in (0, 2) for state in states.values()):
        return False
    return all(states.get(stem) == 1 and suffixes == {"log", "indexes", "rsm-manifest"}
               for stem, suffixes in objects.items())


@pytest.mark.parametrize("step", ["log", "indexes", "manifest", "finished"])
def test_kill_9_of_the_leader_at_each_upload_step_leaves_no_partial_segment(cluster, s3_server, step):
    """The leader dies (SIGKILL) before the named step of an upload: data written or not, indexes
    written or not, manifest written but no COPY_SEGMENT_FINISHED. Readers never see the segment;
    the next leader cleans the unfinished copy up and uploads the offsets again; nothing
    acknowledged is lost."""
    topic = f"tiered-crash-{step}"
    tiered_topic(cluster, topic, replicas=3)
    wait_until(f"a leader of {topic}", lambda: leader_of(cluster, topic) in BROKERS)
    victim = leader_of(cluster, topic)
    (cluster.specs[victim].directory / "data" / CRASH_FILE).write_text(step)
    values = produce(cluster, topic, 800)  # acks=all: every value acknowledged
    wait_until(f"broker {victim} to kill itself before the upload step {step!r}",
               lambda: victim not in cluster.alive())
    wait_until(f"a new leader of {topic}", lambda: leader_of(cluster, topic) not in (-1, victim))
    wait_until(f"the unfinished copy of {topic} cleaned up and uploaded again", lambda: settled(s3_server, topic))
    wait_local_start_above(cluster, topic, 300)
    states, _ = segment_states(s3_server, topic)
    assert 3 in states.values(), f"the unfinished copy was not deleted through DELETE_SEGMENT_FINISHED: {states}"
    assert read_confluent(cluster, topic, len(values)) == values
    cluster.start_node(victim)
    wait_until(f"broker {victim} back", lambda: victim in metadata(cluster.specs[victim].address)[0])


def get_offsets(cluster: LocalCluster, topic: str, time_spec: str) -> str:
    """`quorum get-offsets` as a user runs it."""
    return subprocess.run([sys.executable, "-m", "quorum.cli", "get-offsets", "--bootstrap-server",
                           cluster.bootstrap_servers, "--topic", topic, "--time", time_spec],
                          capture_output=True, text=True, timeout=60, check=True).stdout.strip()


def steady(cluster: LocalCluster, s3_server: EmbeddedS3, topic: str) -> tuple[int, int, int] | None:
    """(-2, -4, -5) once the remote log task has nothing left to do: two looks a few task runs
    apart agree and no copy or deletion is half done."""
    before = tuple(list_offset(cluster, topic, spec) for spec in (-2, -4, -5))
    time.sleep(1.5)  # several runs of the 200 ms task and of the 500 ms retention check
    after = tuple(list_offset(cluster, topic, spec) for spec in (-2, -4, -5))
    return after if before == after and settled(s3_server, topic) else None


def test_retention_deletes_remote_segments_and_topic_deletion_leaves_no_objects(cluster, s3_server):
    topic = "tiered-retention"
    create(admin(cluster), NewTopic(topic, 1, 1, config={**TIERED, "retention.bytes": str(4 * SEGMENT_BYTES)}))
    values = produce(cluster, topic, 2000)
    wait_until(f"retention to move {topic}'s log start past 1000", lambda: list_offset(cluster, topic, -2) > 1000)
    start, local, tiered = wait_until(f"{topic}'s uploads, remote and local retention to settle",
                                      lambda: steady(cluster, s3_server, topic))
    assert get_offsets(cluster, topic, "earliest") == f"{topic}:0:{start}"
    assert get_offsets(cluster, topic, "earliest-local") == f"{topic}:0:{local}"
    assert start <= tiered < local <= len(values)
    assert get_offsets(cluster, topic, "latest-tiered") == f"{topic}:0:{tiered}"
    assert get_offsets(cluster, topic, "earliest-pending-upload") == f"{topic}:0:{tiered + 1}"
    assert get_offsets(cluster, topic, "latest") == f"{topic}:0:{len(values)}"
    states, _ = segment_states(s3_server, topic)
    assert 3 in states.values()  # remote segments deleted through DELETE_SEGMENT_FINISHED
    consumer = Consumer({"bootstrap.servers": cluster.bootstrap_servers, "group.id": f"{topic}-reader",
                         "auto.offset.reset": "earliest", **QUIET})
    try:
        consumer.assign([TopicPartition(topic, 0, start)])
        got: list[bytes] = []

        def done() -> bool:
            got.extend(m.value() for m in consumer.consume(500, 0.5) if m.error() is None)
            return len(got) >= len(values) - start

        wait_until(f"{topic} read from its log start {start}", done)
        assert got == values[start:]
    finally:
        consumer.close()
    client = admin(cluster)
    for future in client.delete_topics([topic], request_timeout=30).values():
        future.result(timeout=30)
    wait_until(f"every object of {topic} deleted from S3", lambda: remote_keys(s3_server, topic) == [])


def test_a_topic_without_remote_storage_answers_minus_one_for_tiered_offsets(cluster):
    topic = "not-tiered"
    create(admin(cluster), NewTopic(topic, 1, 1))
    produce(cluster, topic, 10)
    assert get_offsets(cluster, topic, "latest-tiered") == f"{topic}:0:-1"
    assert get_offsets(cluster, topic, "earliest-pending-upload") == f"{topic}:0:-1"
    assert get_offsets(cluster, topic, "earliest-local") == f"{topic}:0:0"


def test_s3_faults_between_brokers_and_s3_are_retried_and_never_give_wrong_data(cluster, s3_server, kcat):
    """500s, SlowDown, throttling, connection resets, truncated bodies and slow answers on the way
    from every broker to S3, while a tiered topic is uploaded and then read from offset 0."""
    faults: FaultProxy = cluster.faults
    topic = "tiered-faults"
    tiered_topic(cluster, topic, replicas=3)
    before = faults.total_injected
    faults.rate = 0.3
    try:
        values = produce(cluster, topic, 1000)
        wait_local_start_above(cluster, topic, 500)
        wait_until(f"{topic}'s uploads to settle", lambda: settled(s3_server, topic))
        uploading = faults.total_injected - before
        read_everywhere(cluster, kcat, topic, values)
    finally:
        faults.rate = 0.0
    injected = faults.total_injected - before
    print(f"S3 faults injected: {injected} ({uploading} while uploading), by kind: {dict(faults.injected)}")
    assert uploading > 0 and injected > uploading
    assert {"500", "slowdown", "reset", "truncate"} <= {kind for kind, n in faults.injected.items() if n > 0}


def test_timestamps_are_looked_up_in_the_remote_time_indexes_too(cluster):
    topic = "tiered-times"
    tiered_topic(cluster, topic)
    base = int(time.time() * 1000) - 3_600_000
    # Idempotent, so that a batch retried cannot land after the next one: the offsets must follow the
    # timestamps. Produced right after CreateTopics, the first batches can reach the leader before it has
    # the new partition (another broker already names it leader): UNKNOWN_TOPIC_OR_PARTITION, retried after
    # later batches were written (Kafka's brokers have the same window). Without idempotence, 6 of 18 topics
    # produced that way began with record 200-900 at offset 0 (CI's "offset 0 for the second record's time");
    # with it, 0 of 12.
    producer = Producer({"bootstrap.servers": cluster.bootstrap_servers, "batch.num.messages": 20,
                         "enable.idempotence": True, **QUIET})
    for n in range(1500):
        producer.produce(topic, b"t" * 200, partition=0, timestamp=base + 10 * n)
    assert producer.flush(30) == 0
    wait_local_start_above(cluster, topic, 600)
    local = list_offset(cluster, topic, -4)
    for wanted in (0, 1, 123, 499, local + 7):
        assert get_offsets(cluster, topic, str(base + 10 * wanted - 5)) == f"{topic}:0:{wanted}"
    assert get_offsets(cluster, topic, str(base + 10 * 1500)) == f"{topic}:0:-1"


def test_a_topic_deleted_while_its_broker_was_down_loses_its_remote_data_when_the_broker_returns(cluster,
                                                                                                  s3_server):
    topic = "tiered-deleted-while-down"
    tiered_topic(cluster, topic)
    produce(cluster, topic, 600)
    wait_local_start_above(cluster, topic, 100)
    host = leader_of(cluster, topic)
    cluster.kill(host, signal.SIGTERM)
    client = admin(cluster)
    for future in client.delete_topics([topic], request_timeout=30).values():
        future.result(timeout=30)
    assert remote_keys(s3_server, topic)  # no broker hosting it was up to delete its objects
    cluster.start_node(host)
    wait_until(f"broker {host} to delete the remote objects of {topic}, deleted while it was down",
               lambda: remote_keys(s3_server, topic) == [])
