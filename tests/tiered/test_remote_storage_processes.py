"""The remote tier as an operator runs it, on real processes: Kafka's remote storage metrics on the
broker's Prometheus endpoint, segments compressed and encrypted at rest read back by a real consumer.

One cluster for the module (1 controller, 1 broker) against moto's S3 server through a fault proxy
that fails the `.log` PUTs while a test asks it to; the broker compresses and encrypts its segments
(a key pair made here), uploads every 200 ms, and keeps one byte of each tiered partition locally.
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import KafkaException, Producer
from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource, NewTopic

from quorum.broker.remote_tier import RemoteSegmentMetadata, RemoteSegmentState, TopicIdPartition
from quorum.launcher import LocalCluster
from tests.support.prometheus import samples
from tests.test_controller_processes import create, wait_until
from tests.tiered.fault_proxy import FaultProxy
from tests.tiered.test_segment_transform import encrypted
from tests.tiered.test_tiered_processes import read_confluent
from tiered_follower.embedded_s3 import EmbeddedS3, s3_properties
from tiered_follower.rsm_config import RsmConfig
from tiered_follower.s3_client import S3Client
from tiered_follower.s3_metadata import S3RemoteLogMetadataStore

QUIET = {"log_level": 0}
BUCKET = "remote-storage-cluster"
BROKER = 101
SECRET = b"iban-DE89-3704-0044-0532-0130-00"
"""What every record carries: the bucket must never hold it."""
M = "kafka_server_BrokerTopicMetrics_"


@pytest.fixture(scope="module")
def cluster(tmp_path_factory, s3_server: EmbeddedS3) -> Iterator[LocalCluster]:
    s3_server.create_bucket(BUCKET)
    keys = tmp_path_factory.mktemp("keys")
    faults = FaultProxy(s3_server.endpoint_url, kinds=("500",), rate=0.0, methods=("PUT",), path_filter=".log")
    settings = {
        **s3_properties(faults.endpoint_url, BUCKET, key_prefix="cluster/"), **encrypted(keys, "k1", "k1"),
        "rsm.config.storage.retries": "2",
        "offsets.topic.replication.factor": "1", "group.initial.rebalance.delay.ms": "0",
        "log.segment.bytes": str(16 * 1024), "remote.log.manager.task.interval.ms": "200",
        "log.retention.check.interval.ms": "500", "quorum.metrics.port": "0",
    }  # fmt: skip
    running = LocalCluster(tmp_path_factory.mktemp("remote"), controllers=1, brokers=1, settings=settings)
    running.format_storage()
    running.write_configs()
    running.start()
    running.faults = faults  # type: ignore[attr-defined]
    running.settings = settings  # type: ignore[attr-defined]
    try:
        yield running
    finally:
        running.stop()
        faults.stop()


def metrics(cluster: LocalCluster) -> dict[str, float]:
    log = Path(cluster.specs[BROKER].log_path).read_text()
    url = re.findall(rf"node {BROKER} metrics on (http://127.0.0.1:\d+/metrics)", log)[-1]
    return samples(url)


def create_tiered(cluster: LocalCluster, topic: str) -> None:
    create(
        admin(cluster), NewTopic(topic, 1, 1, config={"remote.storage.enable": "true", "local.retention.bytes": "1"})
    )


def admin(cluster: LocalCluster) -> AdminClient:
    return AdminClient({"bootstrap.servers": cluster.bootstrap_servers, **QUIET})


def produce(cluster: LocalCluster, topic: str, count: int, start: int = 0) -> list[bytes]:
    producer = Producer({"bootstrap.servers": cluster.bootstrap_servers, "acks": "all", "linger.ms": 5,
                         "batch.num.messages": 20, **QUIET})  # fmt: skip
    values = [SECRET + f" payment {n:06d} ".encode() * 8 for n in range(start, start + count)]
    for value in values:
        producer.produce(topic, value, partition=0)
    assert producer.flush(30) == 0
    return values


def alter_topic(cluster: LocalCluster, topic: str, **changes: str | None) -> None:
    """IncrementalAlterConfigs with confluent-kafka: SET each key (`_` for `.`), DELETE those given None."""
    entries = [
        ConfigEntry(
            name.replace("_", "."),
            value,
            incremental_operation=AlterConfigOpType.DELETE if value is None else AlterConfigOpType.SET,
        )
        for name, value in changes.items()
    ]
    resource = ConfigResource(ConfigResource.Type.TOPIC, topic, incremental_configs=entries)
    client = admin(cluster)  # kept until the answer: a client destroyed sooner fails its futures
    for future in client.incremental_alter_configs([resource]).values():
        future.result(timeout=30)


def uploaded_all(cluster: LocalCluster, topic: str, at_least: int) -> dict[str, float]:
    """Wait until the broker reports at least `at_least` remote segments of `topic` and no copy lag."""
    labels = f'{{topic="{topic}"}}'
    return wait_until(f"{topic}: {at_least} segments uploaded and no copy lag",
                      lambda: (m := metrics(cluster)).get(f"{M}RemoteLogMetadataCount{labels}", 0) >= at_least
                      and m.get(f"{M}RemoteCopyLagSegments{labels}") == 0 and m)  # fmt: skip


def finished_segments(cluster: LocalCluster, topic: str) -> list[RemoteSegmentMetadata]:
    """Partition 0's segments whose copy finished, from the remote log metadata in the bucket."""
    store = S3RemoteLogMetadataStore(S3Client(RsmConfig.from_properties(cluster.settings).s3))  # type: ignore[attr-defined]
    prefix = f"cluster/{topic}-"
    topic_ids = {key[len(prefix) :].split("/", 1)[0] for key in store.client.list_keys(prefix)}
    topic_ids = {t for t in topic_ids if len(t) == 36}  # not another topic named `{topic}-...`
    return [
        s
        for topic_id in topic_ids
        for s in store.list_segments(TopicIdPartition(topic, uuid.UUID(topic_id), 0))
        if s.state == RemoteSegmentState.COPY_SEGMENT_FINISHED
    ]


def test_copy_metrics_count_the_uploaded_segments_and_the_lag_goes_to_zero(cluster, s3_server: EmbeddedS3):
    topic = "payments"
    labels = f'{{topic="{topic}"}}'
    cluster.faults.rate = 1.0  # every .log PUT fails: nothing is copied, the lag builds up
    try:
        create_tiered(cluster, topic)
        values = produce(cluster, topic, 400)
        stuck = wait_until("failed copies counted and a copy lag of rolled segments",
                           lambda: (m := metrics(cluster)).get(f"{M}RemoteCopyErrorsPerSec_total{labels}", 0) >= 1
                           and m.get(f"{M}RemoteCopyLagSegments{labels}", 0) >= 3 and m)  # fmt: skip
    finally:
        cluster.faults.rate = 0.0
    assert stuck[f"{M}RemoteCopyLagBytes{labels}"] >= 3 * 16 * 1024 * 0.9
    assert stuck[f"{M}RemoteCopyBytesPerSec_total{labels}"] == 0
    assert stuck['tiered_storage_s3_errors_total{operation="put_object"}'] >= 1
    assert stuck['tiered_storage_s3_retries_total{code="InternalError"}'] >= 1
    # the faults stop: every rolled segment goes up and the lag goes to 0
    done = wait_until("the copy lag back to 0 with every rolled segment uploaded",
                      lambda: (m := metrics(cluster)).get(f"{M}RemoteCopyLagSegments{labels}") == 0
                      and m.get(f"{M}RemoteCopyLagBytes{labels}") == 0
                      and m.get(f"{M}RemoteLogMetadataCount{labels}", 0) >= 3 and m)  # fmt: skip
    uploaded = finished_segments(cluster, topic)
    copied = sum(s.size_in_bytes for s in uploaded)
    print(
        f"{len(uploaded)} segments, {copied} bytes uploaded; metrics: "
        f"{ {k: v for k, v in done.items() if topic in k or k.startswith('tiered_storage_s3')} }"
    )
    assert done[f"{M}RemoteCopyBytesPerSec_total{labels}"] == copied
    assert done[f"{M}RemoteLogSizeBytes{labels}"] == copied
    assert done[f"{M}RemoteLogMetadataCount{labels}"] == len(uploaded)
    assert (
        done[f"{M}RemoteCopyRequestsPerSec_total{labels}"]
        >= len(uploaded) + stuck[f"{M}RemoteCopyErrorsPerSec_total{labels}"]
    )
    assert done[f"{M}RemoteCopyBytesPerSec_total"] >= copied  # the all-topics series
    assert done["tiered_storage_s3_bytes_sent_total"] > 0
    # a consumer from offset 0 reads the first segments out of S3, decrypted
    assert read_confluent(cluster, topic, len(values)) == values
    after = metrics(cluster)
    assert after[f"{M}RemoteFetchRequestsPerSec_total{labels}"] >= 1
    assert after[f"{M}RemoteFetchBytesPerSec_total{labels}"] > 0
    assert after[f"{M}RemoteFetchErrorsPerSec_total{labels}"] == 0
    assert after["tiered_storage_s3_bytes_received_total"] > done["tiered_storage_s3_bytes_received_total"]
    # and the bucket never held the records' text
    client = s3_server.client()
    keys = [e["Key"] for e in client.list_objects_v2(Bucket=BUCKET, Prefix=f"cluster/{topic}-")["Contents"]]  # type: ignore[attr-defined]
    assert [k for k in keys if SECRET in client.get_object(Bucket=BUCKET, Key=k)["Body"].read()] == []  # type: ignore[attr-defined]


def test_kip_950_copy_disable_stops_uploads_and_keeps_serving_what_is_in_s3(cluster):
    topic, witness = "ledger", "ledger-witness"
    for name in (topic, witness):
        create_tiered(cluster, name)
    values = produce(cluster, topic, 300)
    uploaded_all(cluster, topic, 2)
    before = {s.segment_id for s in finished_segments(cluster, topic)}
    # Kafka's rule: with copies off, local.retention.* must follow retention.* (here local.retention.bytes=1)
    with pytest.raises(KafkaException, match="INVALID_CONFIG.*`local.retention.bytes` and `retention.bytes`"):
        alter_topic(cluster, topic, remote_log_copy_disable="true")
    alter_topic(cluster, topic, remote_log_copy_disable="true", local_retention_bytes=None)
    values += produce(cluster, topic, 300, start=300)
    # two uploads of another topic, the second produced after the first is seen: the remote log task
    # has gone over `ledger` at least once since its new segments rolled
    produce(cluster, witness, 200)
    first = uploaded_all(cluster, witness, 1)[f'{M}RemoteLogMetadataCount{{topic="{witness}"}}']
    produce(cluster, witness, 200, start=200)
    after = uploaded_all(cluster, witness, int(first) + 1)
    assert {s.segment_id for s in finished_segments(cluster, topic)} == before
    assert after[f'{M}RemoteLogMetadataCount{{topic="{topic}"}}'] == len(before)
    assert after[f'{M}RemoteCopyLagSegments{{topic="{topic}"}}'] == 0  # reset, as Kafka does
    assert read_confluent(cluster, topic, len(values)) == values  # its head still read from S3


def test_kip_950_turning_remote_storage_off_needs_delete_on_disable_and_deletes_the_remote_data(
        cluster, s3_server: EmbeddedS3):  # fmt: skip
    from quorum.get_offsets import list_offsets

    topic = "archive"
    create_tiered(cluster, topic)
    produce(cluster, topic, 300)
    uploaded_all(cluster, topic, 2)
    with pytest.raises(KafkaException, match="INVALID_CONFIG.*It is invalid to disable remote storage without "
                                             "deleting remote data"):  # fmt: skip
        alter_topic(cluster, topic, remote_storage_enable="false")
    assert finished_segments(cluster, topic)  # refused: nothing was deleted
    alter_topic(cluster, topic, remote_storage_enable="false", remote_log_delete_on_disable="true")
    client = s3_server.client()
    wait_until(
        f"every object of {topic} deleted from the bucket",
        lambda: client.list_objects_v2(Bucket=BUCKET, Prefix=f"cluster/{topic}-").get("KeyCount") == 0,
    )  # type: ignore[attr-defined]
    earliest, local = (list_offsets(cluster.bootstrap_servers, topic, [0], spec)[0][0] for spec in (-2, -4))
    assert earliest == local > 0  # the log now starts at the local log start
