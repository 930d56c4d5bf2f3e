"""`client_epochs.confluent.Consumer` against a real one-broker cluster: commits keep the user's
metadata and hide the internal one, seek refuses garbage internal metadata by partition, positions
come with the cluster's epochs, and a recreated topic is an error for a consumer running
through it, while the raw client (whose commit went with the topic) starts again by its reset policy.
A broker answering from a paused (old) metadata image: tests/client_epochs/test_paused_metadata.py, one
scenario for every wrapper."""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator

import pytest
from confluent_kafka import Consumer as RawConsumer
from confluent_kafka import TopicPartition

from client_epochs import TopicPartition as Key
from client_epochs.confluent import Consumer
from client_epochs.errors import TopicRecreatedError
from client_epochs.offset_fetch import OffsetFetchError
from quorum.wire.errors import ErrorCode
from quorum.wire.internal_metadata import InternalMetadata, InvalidInternalMetadataError, encode
from tests.client_epochs.wrapper_cluster import OneBrokerCluster, consume, internal_of, kip_json
from tests.test_broker_processes import QUIET, one_broker

pytestmark = pytest.mark.timeout(120)

GROUP_SETTINGS = {"enable.auto.commit": False, "auto.offset.reset": "earliest", "session.timeout.ms": 6000,
                  "heartbeat.interval.ms": 500, **QUIET}


KIP848_SETTINGS = {**{k: v for k, v in GROUP_SETTINGS.items() if not k.endswith((".timeout.ms", ".interval.ms"))},
                   "group.protocol": "consumer"}
"""Under KIP-848 the session and heartbeat interval are the broker's (librdkafka refuses them here)."""


class Cluster(OneBrokerCluster):
    def consumer(self, group: str, kip848: bool = False, **options) -> Consumer:
        settings = KIP848_SETTINGS if kip848 else GROUP_SETTINGS
        return Consumer({"bootstrap.servers": self.address, "group.id": group, **settings}, **options)

    def raw(self, group: str, kip848: bool = False) -> RawConsumer:
        settings = KIP848_SETTINGS if kip848 else GROUP_SETTINGS
        return RawConsumer({"bootstrap.servers": self.address, "group.id": group, **settings})


@pytest.fixture(scope="module")
def cluster(tmp_path_factory) -> Iterator[Cluster]:
    with one_broker(tmp_path_factory.mktemp("confluent-wrapper")) as (cluster, address):
        yield Cluster(cluster, address)


def test_commit_keeps_user_metadata_and_hides_the_internal_one(cluster):
    cluster.topic("round-trip", 10)
    consumer = cluster.consumer("round-trip-group")
    try:
        consumer.subscribe(["round-trip"])
        assert [m.offset() for m in consume(consumer, 10)] == list(range(10))
        consumer.commit(offsets=[TopicPartition("round-trip", 0, 7, metadata="user says hi\nsecond line")],
                        asynchronous=False)
        (got,) = consumer.committed([TopicPartition("round-trip", 0)], timeout=10)
        assert (got.offset, got.metadata) == (7, "user says hi\nsecond line")
        consumer.commit(asynchronous=False)  # the consumed position, no user metadata
        (got,) = consumer.committed([TopicPartition("round-trip", 0)], timeout=10)
        assert (got.offset, got.metadata, got.leader_epoch) == (10, None, 0)
    finally:
        consumer.close()
    # What is stored: the KIP's internal metadata with the cluster's epochs, ahead of the user's.
    epochs = cluster.epochs("round-trip")
    consumer = cluster.consumer("round-trip-group")
    try:
        stored = consumer.committed_internal_metadata([Key("round-trip", 0)])
    finally:
        consumer.close()
    assert epochs.topic_epoch >= 1
    assert stored == {Key("round-trip", 0): internal_of(epochs)}


@pytest.mark.parametrize("garbage", [
    "not json", "{}", '{"version":2,"topic_epoch":1,"leader_epoch":0}', '{"version":1,"topic_epoch":"x"}',
    "[1,2]", '{"version":1,"topic_epoch":1,"leader_epoch":99999999999}', 42,
])
def test_seek_with_garbage_internal_metadata_names_the_partition(cluster, garbage):
    consumer = cluster.consumer("seek-garbage")
    try:
        with pytest.raises(InvalidInternalMetadataError) as caught:
            consumer.seek(TopicPartition("round-trip", 0), 3, garbage)
        assert "round-trip-0" in str(caught.value) and repr(garbage) in str(caught.value)
    finally:
        consumer.close()


def test_position_with_internal_metadata_gives_the_kip_json_with_the_clusters_epochs(cluster):
    cluster.topic("positions", 6)
    consumer = cluster.consumer("positions-group")
    try:
        consumer.assign([TopicPartition("positions", 0, 0)])
        assert len(consume(consumer, 6)) == 6
        offset, internal = consumer.position_with_internal_metadata(TopicPartition("positions", 0))
    finally:
        consumer.close()
    epochs = cluster.epochs("positions")
    assert offset == 6
    assert internal == kip_json(epochs)
    assert InternalMetadata.from_json(internal) == internal_of(epochs)


def test_new_partitions_wait_paused_while_the_coordinator_cannot_say_what_was_committed(cluster, caplog):
    """Issue 19's soak: the group's __consumer_offsets partition had no leader for over 30 s, and the
    wrapper's own OffsetFetch, run from the assignment callback, raised COORDINATOR_NOT_AVAILABLE out of
    the user's poll, ending the consumer. As Kafka's consumer, it must keep the new partitions paused
    (their committed epochs unknown, nothing may be fetched under older metadata) and ask again at each
    poll, saying which group and partitions wait; then start from the committed offset."""
    cluster.topic("no-coordinator", 10)
    now = cluster.epochs("no-coordinator")
    committed = encode("", InternalMetadata(now.topic_epoch, now.leader_epoch, now.topic_id))
    writer = cluster.raw("no-coordinator-group")
    writer.commit(offsets=[TopicPartition("no-coordinator", 0, 4, metadata=committed)], asynchronous=False)
    writer.close()
    wrapped = cluster.consumer("no-coordinator-group")
    real_fetch, asked = wrapped._offsets.fetch, []
    down = True

    def fetch(group, partitions, timeout=30.0):
        asked.append(group)
        if down:
            raise OffsetFetchError(cluster.address, f"FindCoordinator for group {group!r}",
                                   ErrorCode.COORDINATOR_NOT_AVAILABLE)
        return real_fetch(group, partitions, timeout)

    wrapped._offsets.fetch = fetch
    try:
        wrapped.subscribe(["no-coordinator"])
        with caplog.at_level(logging.WARNING, logger="client_epochs.confluent"):
            deadline, held_back = time.monotonic() + 4, []
            while time.monotonic() < deadline:
                held_back += wrapped.consume(10, 0.5)
        assert held_back == [], "the wrapper fetched before it knew the committed epochs"
        assert wrapped.waiting_for_committed == {Key("no-coordinator", 0)} and len(asked) >= 2
        said = [r.getMessage() for r in caplog.records if "not read for" in r.getMessage()]
        assert said and "'no-coordinator-group'" in said[0] and "no-coordinator-0" in said[0], said
        assert "COORDINATOR_NOT_AVAILABLE" in said[0], said
        down = False
        got = consume(wrapped, 6)
        assert [m.offset() for m in got] == list(range(4, 10))
        assert wrapped.waiting_for_committed == frozenset()
    finally:
        wrapped.close()


@pytest.mark.parametrize("kip848", [False, True], ids=["classic", "kip848"])
def test_a_recreated_topic_raises_while_the_raw_client_starts_again_by_its_reset_policy(cluster, kip848):
    """The wrapper, running through the recreation, raises. The raw client's commit went with the deleted
    topic (the broker deletes a topic's offsets with it, as Apache Kafka does), so it starts the new topic
    by auto.offset.reset (earliest here), not at the old offset 5. More in tests/client_epochs/test_recreation.py.
    Both clients in a classic group, or both under KIP-848 (`group.protocol=consumer`)."""
    again = "again-kip848" if kip848 else "again"
    cluster.topic(again, 5)
    wrapped = cluster.consumer(f"{again}-wrapped", kip848, metadata_check_interval_s=0.3)
    raw = cluster.raw(f"{again}-raw", kip848)
    try:
        for consumer in (wrapped, raw):
            consumer.subscribe([again])
            assert len(consume(consumer, 5)) == 5
            consumer.commit(asynchronous=False)
        raw.close()
        first = cluster.epochs(again)
        cluster.recreate(again)
        cluster.produce(again, 8)
        second = cluster.epochs(again)
        assert second.topic_id != first.topic_id and second.topic_epoch > first.topic_epoch

        with pytest.raises(TopicRecreatedError) as caught:
            deadline = time.monotonic() + 30
            while time.monotonic() < deadline:
                wrapped.consume(10, 0.5)
        assert Key(again, 0) in caught.value.partitions and f"{again}-0" in str(caught.value)
    finally:
        wrapped.close()
    raw = cluster.raw(f"{again}-raw", kip848)
    try:
        (committed,) = raw.committed([TopicPartition(again, 0)], timeout=10)
        assert committed.offset < 0, "the commit of offset 5 went with the deleted topic"
        raw.subscribe([again])
        got = consume(raw, 8)
        assert [(m.offset(), m.value()) for m in got] == [(n, f"{again}-{n}".encode()) for n in range(8)]
    finally:
        raw.close()
