"""KAFKA-6262 on one broker, one scenario for every wrapper (the sides of tests/client_epochs/sides.py:
confluent-kafka and kafka-python, and the async ones on an event loop): the broker's Metadata answers
are frozen (its PAUSE_METADATA file), then the topic grows a partition, which raises its topic epoch,
and offsets are committed under the new epoch (by a client that saw a current broker). A wrapper,
subscribed (committed epochs) or assigned and seeked with internal metadata, must not fetch until
the broker's metadata is that new, while the raw client of the same kind fetches at once; the
user's resume() does not release a partition still waiting, nor does the end of the wait release
one the user paused (confluent-kafka's wrappers released it on resume() before this scenario covered
them: `Consumer.resume` now keeps a partition the guard holds).

For the async wrappers, a 10 ms ticker on their event loop shows the wait never blocks the loop:
no gap between ticks reaches 100 ms while the wrapper waits for current metadata (a functional
assertion about blocking, not a speed goal); polls cancelled by their caller in the middle of the
wait strand nothing.
"""

from __future__ import annotations

from collections.abc import Iterator

import confluent_kafka
import pytest
from confluent_kafka.admin import NewPartitions

from client_epochs import TopicPartition as Key
from quorum.wire.internal_metadata import InternalMetadata, encode
from tests.client_epochs.sides import (
    ASYNC_SIDES,
    SYNC_SIDES,
    ConfluentKip848Side,
    Side,
    consume,
    offsets_of,
    poll_until,
    side_of,
)
from tests.client_epochs.wrapper_cluster import OneBrokerCluster
from tests.test_broker_processes import QUIET, one_broker
from tests.test_controller_processes import wait_until

pytestmark = pytest.mark.timeout(120)

LOOP_GAP_LIMIT_S = 0.1


@pytest.fixture(scope="module")
def cluster(tmp_path_factory) -> Iterator[OneBrokerCluster]:
    with one_broker(tmp_path_factory.mktemp("paused-metadata")) as (cluster, address):
        yield OneBrokerCluster(cluster, address)


@pytest.fixture(params=SYNC_SIDES + ASYNC_SIDES, ids=lambda side: side.name)
def side(request, cluster: OneBrokerCluster) -> Iterator[Side]:
    with side_of(request.param, cluster.address) as made:
        yield made


@pytest.fixture(params=ASYNC_SIDES, ids=lambda side: side.name)
def async_side(request, cluster: OneBrokerCluster) -> Iterator[Side]:
    with side_of(request.param, cluster.address) as made:
        yield made


def freeze_and_commit_newer(cluster: OneBrokerCluster, topic: str, groups: list[str]) -> InternalMetadata:
    """With the broker's Metadata answers frozen (the caller removes the pause file), grow `topic` by a
    partition and commit offset 3 of partition 0 for each group under the grown topic's epochs; returns them."""
    before = cluster.epochs(topic)
    cluster.pause_file.touch()
    cluster.epochs(topic)  # a Metadata request: the broker's answers are frozen from here on
    for future in cluster.admin.create_partitions([NewPartitions(topic, 2)]).values():
        future.result(timeout=30)
    newer = InternalMetadata(before.topic_epoch + 1, before.leader_epoch)
    committed = encode("committed through a current broker", newer)
    for group in groups:
        writer = confluent_kafka.Consumer({"bootstrap.servers": cluster.address, "group.id": group, **QUIET})
        try:
            writer.commit(offsets=[confluent_kafka.TopicPartition(topic, 0, 3, metadata=committed)],
                          asynchronous=False)
        finally:
            writer.close()
    assert cluster.epochs(topic).topic_epoch == before.topic_epoch, "the broker still answers old metadata"
    return newer


def test_a_broker_with_paused_metadata_holds_the_wrapper_back_while_the_raw_client_fetches(cluster, side):
    topic = f"{side.name}-stale"
    cluster.topic(topic, 10)
    wrappers = []
    try:
        newer = freeze_and_commit_newer(cluster, topic, [f"{topic}-wrapped", f"{topic}-raw"])
        raw = side.raw(f"{topic}-raw")
        try:
            side.subscribe(raw, topic)
            raw_got = consume(side, raw, 7)
        finally:
            raw.close()
        assert offsets_of(raw_got) == list(range(3, 10)), "the raw client fetches with old metadata"

        subscribed = side.consumer(f"{topic}-wrapped")
        wrappers.append(subscribed)
        side.subscribe(subscribed, topic)
        held_back = poll_until(side, subscribed, "ten refused Metadata answers",
                               lambda: subscribed.metadata_client.refusals >= 10)
        assert held_back == [], "the wrapper fetched although the metadata was older than the committed epochs"
        assert subscribed.waiting_for_metadata == {Key(topic, 0)}

        seeking = side.consumer(None)  # offsets stored outside Kafka (KIP-232, 7)
        wrappers.append(seeking)
        side.seek(seeking, topic, 3, newer.to_json())
        held_back = poll_until(side, seeking, "ten refused Metadata answers",
                               lambda: seeking.metadata_client.refusals >= 10)
        assert held_back == [], "the wrapper fetched although the metadata was older than the seeked epochs"
        assert seeking.waiting_for_metadata == {Key(topic, 0)}
        # The user's resume() does not release a partition that still waits ...
        refusals = seeking.metadata_client.refusals
        side.pause(seeking, topic, True)
        side.pause(seeking, topic, False)
        held_back = poll_until(side, seeking, "ten more refusals",
                               lambda: seeking.metadata_client.refusals >= refusals + 10)
        assert held_back == [], "resume() released a partition waiting for current metadata"
        # ... and the end of the wait does not release a partition the user paused (the assigned one: the
        # subscribed one's group rebalances once it sees the new partition, and a rebalance ends pauses).
        side.pause(seeking, topic, True)
    finally:
        cluster.pause_file.unlink(missing_ok=True)
    try:
        still_paused = poll_until(side, seeking, "the wait to end", lambda: not seeking.waiting_for_metadata)
        assert still_paused == [], "the end of the wait resumed a user's pause"
        assert side.poll(seeking) == [], "the end of the wait resumed a user's pause"
        side.pause(seeking, topic, False)
        for wrapper in wrappers:
            assert offsets_of(consume(side, wrapper, 7)) == list(range(3, 10))
            assert wrapper.waiting_for_metadata == frozenset()
    finally:
        for wrapper in wrappers:
            wrapper.close()


def test_under_kip848_a_broker_with_paused_metadata_holds_the_subscribed_wrapper_back(cluster):
    """The subscribed half of the scenario above with the confluent wrapper under `group.protocol=consumer`
    (the broker assigns; the assigned half does not involve the group protocol)."""
    with side_of(ConfluentKip848Side, cluster.address) as side:
        topic = f"{side.name}-stale"
        cluster.topic(topic, 10)
        subscribed = side.consumer(f"{topic}-wrapped")
        try:
            try:
                freeze_and_commit_newer(cluster, topic, [f"{topic}-wrapped"])
                side.subscribe(subscribed, topic)
                held_back = poll_until(side, subscribed, "three refused Metadata answers",
                                       lambda: subscribed.metadata_client.refusals >= 3)
                assert held_back == [], "the wrapper fetched although the metadata was older than the committed epochs"
                assert subscribed.waiting_for_metadata == {Key(topic, 0)}
            finally:
                cluster.pause_file.unlink(missing_ok=True)
            assert offsets_of(consume(side, subscribed, 7)) == list(range(3, 10))
            assert subscribed.waiting_for_metadata == frozenset()
        finally:
            subscribed.close()


def test_the_event_loop_stays_responsive_while_an_async_wrapper_waits_for_current_metadata(cluster, async_side):
    side = async_side
    topic = f"{side.name}-ticking"
    cluster.topic(topic, 5)
    try:
        newer = freeze_and_commit_newer(cluster, topic, [f"{topic}-group"])
        consumer = side.consumer(f"{topic}-group")
    except BaseException:
        cluster.pause_file.unlink(missing_ok=True)
        raise
    try:
        try:
            side.subscribe(consumer, topic)
            poll_until(side, consumer, "the partition to wait for current metadata",
                       lambda: bool(consumer.waiting_for_metadata))
            with side.ticker(0.01) as gaps:
                for _ in range(5):  # polls their callers gave up on, in the middle of the wait
                    side.cut_poll(consumer)
                held_back = poll_until(side, consumer, "ten refused Metadata answers while ticking",
                                       lambda: consumer.metadata_client.refusals >= 10)
            assert held_back == [] and consumer.waiting_for_metadata == {Key(topic, 0)}
            assert len(gaps) >= 20, f"the ticker ticked {len(gaps)} times"
            assert max(gaps) < LOOP_GAP_LIMIT_S, f"the loop was blocked for {max(gaps) * 1000:.0f} ms"
        finally:
            cluster.pause_file.unlink(missing_ok=True)
        if side.cancel_keeps_records:  # polls cancelled as the wait ends (a smoke test: the rebalance that the
            # new partition starts would also release a partition a lost check stranded)
            wait_until("the broker's Metadata to be current",
                       lambda: cluster.epochs(topic).topic_epoch >= newer.topic_epoch)
            for after_s in (0.002, 0.004, 0.006, 0.008, 0.01):  # one lands while the check is on its thread
                side.cut_poll(consumer, after_s)
        # The cancelled polls left nothing stranded: the wait ends and the committed position is read.
        assert offsets_of(consume(side, consumer, 2)) == [3, 4]
        assert consumer.waiting_for_metadata == frozenset()
    finally:
        consumer.close()
