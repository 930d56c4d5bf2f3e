"""`client_epochs.kafka_python.KafkaConsumer` against a real one-broker cluster, beside the raw
kafka-python client in the same scenarios: commits keep the user's metadata and hide the internal
one (which the raw client sees, prefixed `kip232:`), seek refuses garbage internal metadata by
partition, positions come with the cluster's epochs, and a recreated topic is an
error (or, asked for, a reset to its beginning) for a consumer running through it, while the raw
client (whose commit went with the topic) starts again by its reset policy. A broker answering from a
paused (old) metadata image: tests/client_epochs/test_paused_metadata.py, one scenario for every wrapper.

One kafka-python group member at a time: kafka-python 3.0.12 misbehaves when several members join
from one process concurrently, so each raw consumer is closed before the next one joins a group."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator

import pytest
from kafka import KafkaConsumer as RawConsumer
from kafka import OffsetAndMetadata, TopicPartition
from kafka.errors import KafkaConnectionError

from client_epochs import TopicPartition as Key
from client_epochs.errors import TopicRecreatedError
from client_epochs.kafka_python import KafkaConsumer
from quorum.wire.internal_metadata import InvalidInternalMetadataError
from tests.client_epochs.wrapper_cluster import OneBrokerCluster, internal_of, kip_json
from tests.test_broker_processes import one_broker

pytestmark = pytest.mark.timeout(120)

GROUP_SETTINGS = {"enable_auto_commit": False, "auto_offset_reset": "earliest", "session_timeout_ms": 6000,
                  "heartbeat_interval_ms": 500}


class Cluster(OneBrokerCluster):
    def consumer(self, group: str | None, *topics: str, **options) -> KafkaConsumer:
        return KafkaConsumer(*topics, bootstrap_servers=self.address, group_id=group, **GROUP_SETTINGS, **options)

    def raw(self, group: str | None, **options) -> RawConsumer:
        return RawConsumer(bootstrap_servers=self.address, group_id=group, **GROUP_SETTINGS, **options)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory) -> Iterator[Cluster]:
    with one_broker(tmp_path_factory.mktemp("kafka-python-wrapper")) as (cluster, address):
        yield Cluster(cluster, address)


def consume(consumer, count: int, timeout_s: float = 30.0) -> list:
    got: list = []
    deadline = time.monotonic() + timeout_s
    while len(got) < count and time.monotonic() < deadline:
        for records in consumer.poll(500, max_records=count - len(got)).values():
            got += records
    return got


def poll_until(consumer, what: str, condition: Callable[[], bool], timeout_s: float = 30.0) -> list:
    """Poll until `condition` holds or records come (AssertionError naming `what` if neither happens);
    the records polled."""
    got: list = []
    deadline = time.monotonic() + timeout_s
    while not condition() and not got:
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        for records in consumer.poll(200).values():
            got += records
    return got


def test_commit_keeps_user_metadata_and_hides_the_internal_one(cluster):
    cluster.topic("kp-round-trip", 10)
    tp = TopicPartition("kp-round-trip", 0)
    consumer = cluster.consumer("kp-round-trip-group")
    try:
        consumer.subscribe(["kp-round-trip"])
        assert [r.offset for r in consume(consumer, 10)] == list(range(10))
        consumer.commit({tp: OffsetAndMetadata(7, "user says hi\nsecond line", -1)})
        assert consumer.committed(tp, metadata=True)[:2] == (7, "user says hi\nsecond line")
        assert consumer.committed(tp) == 7

        # The user's own metadata may even look like internal metadata; the callback sees it as given.
        looks_internal = 'kip232:{"version":1,"topic_epoch":999,"leader_epoch":999}\nthe user\'s'
        answered: list = []
        consumer.commit_async({tp: OffsetAndMetadata(8, looks_internal, -1)},
                              callback=lambda offsets, response: answered.append((offsets, response)))
        poll_until(consumer, "the commit_async callback", lambda: bool(answered))
        ((offsets, response),) = answered
        assert not isinstance(response, Exception), response
        assert offsets == {tp: OffsetAndMetadata(8, looks_internal, -1)}
        assert consumer.committed(tp, metadata=True)[:2] == (8, looks_internal)

        consumer.commit()  # the consumed position, no user metadata
        assert consumer.committed(tp, metadata=True) == OffsetAndMetadata(10, "", 0)
    finally:
        consumer.close()
    # What is stored: the KIP's internal metadata with the cluster's epochs, ahead of the user's, as a raw
    # kafka-python consumer of the same group reads it (the format other clients see).
    epochs = cluster.epochs("kp-round-trip")
    assert epochs.topic_epoch >= 1
    raw = cluster.raw("kp-round-trip-group")
    try:
        stored = raw.committed(tp, metadata=True)
    finally:
        raw.close()
    assert stored.metadata == f"kip232:{kip_json(epochs)}\n"
    consumer = cluster.consumer("kp-round-trip-group")
    try:
        internal = consumer.committed_internal_metadata([tp])
    finally:
        consumer.close()
    assert internal == {Key("kp-round-trip", 0): internal_of(epochs)}


@pytest.mark.parametrize("garbage", [
    "not json", "{}", '{"version":2,"topic_epoch":1,"leader_epoch":0}', '{"version":1,"topic_epoch":"x"}',
    "[1,2]", '{"version":1,"topic_epoch":1,"leader_epoch":99999999999}', 42,
])
def test_seek_with_garbage_internal_metadata_names_the_partition(cluster, garbage):
    tp = TopicPartition("kp-round-trip", 0)
    consumer = cluster.consumer(None)
    try:
        consumer.assign([tp])
        with pytest.raises(InvalidInternalMetadataError) as caught:
            consumer.seek(tp, 3, garbage)
        assert "kp-round-trip-0" in str(caught.value) and repr(garbage) in str(caught.value)
        assert consumer.position(tp) == 0, "a refused seek moved the position"
    finally:
        consumer.close()


def test_position_with_internal_metadata_gives_the_kip_json_with_the_clusters_epochs(cluster):
    cluster.topic("kp-positions", 6)
    tp = TopicPartition("kp-positions", 0)
    consumer = cluster.consumer("kp-positions-group", consumer_timeout_ms=30_000)
    try:
        consumer.assign([tp])
        assert [next(consumer).offset for _ in range(6)] == list(range(6))  # iteration goes through poll
        offset, internal = consumer.position_with_internal_metadata(tp)
    finally:
        consumer.close()
    epochs = cluster.epochs("kp-positions")
    assert offset == 6
    assert internal == kip_json(epochs)
    # Stored outside Kafka and given back to seek (KIP-232, 7): current metadata, so nothing to wait for.
    consumer = cluster.consumer(None)
    try:
        consumer.assign([tp])
        consumer.seek(tp, 2, internal)
        assert [r.offset for r in consume(consumer, 4)] == [2, 3, 4, 5]
    finally:
        consumer.close()


def test_a_refused_connection_kafka_python_raises_out_of_poll_is_polled_through(cluster, monkeypatch, caplog):
    """kafka-python 3.0 raises KafkaConnectionError out of poll when its coordinator lookup asks a broker
    that was just killed (the soak's member died of it, seeds 46 and 48); the wrapper polls on until
    its timeout, as Java's consumer does, and says so."""
    cluster.topic("kp-refused", 3)
    consumer = cluster.consumer("kp-refused-group", "kp-refused")
    real, raised = RawConsumer.poll, []

    def refused_twice(self, *args, **kwargs):
        if len(raised) < 2:
            raised.append(True)
            raise KafkaConnectionError("111 ECONNREFUSED")
        return real(self, *args, **kwargs)

    monkeypatch.setattr(RawConsumer, "poll", refused_twice)
    try:
        with caplog.at_level("WARNING", logger="client_epochs.kafka_python"):
            assert [r.offset for r in consume(consumer, 3)] == [0, 1, 2]
    finally:
        consumer.close()
    assert raised == [True, True]
    assert caplog.text.count("could not reach a broker inside poll (KafkaConnectionError: 111 ECONNREFUSED)") == 1


def commit_and_recreate(cluster: Cluster, wrapped: KafkaConsumer, name: str) -> None:
    """`wrapped` consumes `name`'s 5 messages and commits; then the topic is deleted, created again and given
    8 new messages."""
    wrapped.subscribe([name])
    assert len(consume(wrapped, 5)) == 5
    wrapped.commit()
    first = cluster.epochs(name)
    cluster.recreate(name)
    cluster.produce(name, 8)
    second = cluster.epochs(name)
    assert second.topic_id != first.topic_id and second.topic_epoch > first.topic_epoch


def test_a_recreated_topic_raises_while_the_raw_client_starts_again_by_its_reset_policy(cluster):
    """The raw kafka-python consumer's commit (offset 5 of the old topic) went with the deleted topic (the
    broker deletes a topic's offsets with it, as Apache Kafka does), so it reads the new topic from its
    reset policy (earliest here), not from offset 5. More in tests/client_epochs/test_recreation.py."""
    cluster.topic("kp-again", 5)
    tp = TopicPartition("kp-again", 0)
    raw = cluster.raw("kp-again-raw")
    try:
        raw.subscribe(["kp-again"])
        assert len(consume(raw, 5)) == 5
        raw.commit()
    finally:
        raw.close()
    wrapped = cluster.consumer("kp-again-wrapped", metadata_check_interval_s=0.3)
    try:
        commit_and_recreate(cluster, wrapped, "kp-again")
        with pytest.raises(TopicRecreatedError) as caught:
            deadline = time.monotonic() + 30
            while time.monotonic() < deadline:
                wrapped.poll(500)
        assert Key("kp-again", 0) in caught.value.partitions and "kp-again-0" in str(caught.value)
    finally:
        wrapped.close()
    raw = cluster.raw("kp-again-raw")
    try:
        assert raw.committed(tp) is None, "the commit of offset 5 went with the deleted topic"
        raw.subscribe(["kp-again"])
        got = consume(raw, 8)
    finally:
        raw.close()
    assert [(r.offset, r.value) for r in got] == [(n, f"kp-again-{n}".encode()) for n in range(8)]


def test_a_recreated_topic_is_read_from_its_beginning_when_asked(cluster):
    """on_topic_recreated="earliest": the new topic's first messages are not skipped. (Records 5.. of the
    new topic may come once before the recreation is noticed; what matters is that 0..4 come at all.)"""
    wrapped = cluster.consumer("kp-again-earliest-wrapped", on_topic_recreated="earliest",
                               metadata_check_interval_s=0.3)
    try:
        cluster.topic("kp-again-earliest", 5)
        commit_and_recreate(cluster, wrapped, "kp-again-earliest")
        values: set[bytes] = set()
        deadline = time.monotonic() + 30
        while len(values) < 8 and time.monotonic() < deadline:
            for records in wrapped.poll(200).values():
                values.update(r.value for r in records)
    finally:
        wrapped.close()
    assert values == {f"kp-again-earliest-{n}".encode() for n in range(8)}
