"""Kafka's request metrics and the acks=all breakdown on real brokers, as an operator scrapes them:
confluent-kafka produces with acks=all to a topic of replication factor 3 and consumes it back; the
leader's endpoint then counts the Produce requests, its followers' fetches and the consumer's under
Kafka's names, each request's phases add up to its total, and the acks=all waits are split into
their parts, the followers timing their appends (issue 37's bench_replication prints these)."""

from __future__ import annotations

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from quorum.launcher import LocalCluster
from tests.test_broker_processes import QUIET
from tests.test_controller_processes import create, wait_until
from tests.test_snapshot_processes import scrape

pytestmark = pytest.mark.timeout(300)

BROKERS = (101, 102, 103)
FLUSHES = 5
PER_FLUSH = 20
PHASES = ("RequestQueueTimeMs", "LocalTimeMs", "RemoteTimeMs", "ResponseQueueTimeMs", "ResponseSendTimeMs")


def request_metric(found: dict[str, float], name: str, request: str, part: str = "count") -> float:
    return found.get(f'kafka_network_RequestMetrics_{name}_{part}{{request="{request}"}}', 0.0)


def test_an_acks_all_produce_and_a_fetch_show_in_kafka_request_metrics_and_the_wait_in_its_parts(tmp_path):
    cluster = LocalCluster(tmp_path, controllers=1, brokers=3, settings={"quorum.metrics.port": "0"})
    cluster.format_storage()
    try:
        cluster.start()
        bootstrap = cluster.bootstrap_servers
        admin = AdminClient({"bootstrap.servers": bootstrap, **QUIET})
        create(admin, NewTopic("rf3", 1, 3, config={"min.insync.replicas": "3"}))

        def full_isr() -> int | None:
            partition = admin.list_topics("rf3", timeout=10).topics["rf3"].partitions[0]
            return partition.leader if len(partition.isrs) == 3 else None

        leader = wait_until("rf3 to have a leader and three in its ISR", full_isr)
        producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", **QUIET})
        for flush in range(FLUSHES):  # each flush one Produce request at least, each waiting for both followers
            for n in range(PER_FLUSH):
                producer.produce("rf3", b"value-%d-%d" % (flush, n), partition=0)
            assert producer.flush(30) == 0, "acks=all messages undelivered after 30 s"
        consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "metrics", **QUIET})
        consumer.assign([TopicPartition("rf3", 0, 0)])
        read = 0
        while read < FLUSHES * PER_FLUSH:
            messages = consumer.consume(100, 10)
            assert messages, f"read only {read} of {FLUSHES * PER_FLUSH} messages back in 10 s"
            read += sum(1 for m in messages if m.error() is None)
        consumer.close()

        found = scrape(cluster, leader)
        produces = request_metric(found, "TotalTimeMs", "Produce")
        assert produces >= FLUSHES
        for request in ("Produce", "Fetch", "FetchFollower", "FetchConsumer", "Metadata"):
            count = request_metric(found, "TotalTimeMs", request)
            assert count > 0, f"no {request} request counted on the leader"
            assert all(request_metric(found, phase, request) == count for phase in PHASES)
            phases = sum(request_metric(found, phase, request, "sum") for phase in PHASES)
            assert phases == pytest.approx(request_metric(found, "TotalTimeMs", request, "sum"), rel=1e-6, abs=1e-6)
        assert request_metric(found, "RemoteTimeMs", "Produce", "sum") > 0  # the acks=all waits
        assert sum(v for k, v in found.items()
                   if k.startswith('kafka_network_RequestMetrics_RequestsPerSec_total{request="Produce"')) == produces
        split = {part: found.get(f"quorum_replication_{part}_count", 0.0)
                 for part in ("FollowerFetchWaitMs", "FollowerRoundMs", "HighWatermarkAdvanceMs")}
        assert 0 < split["FollowerFetchWaitMs"] == split["FollowerRoundMs"] == split["HighWatermarkAdvanceMs"]
        assert split["FollowerFetchWaitMs"] <= produces
        for follower in (b for b in BROKERS if b != leader):
            timed = scrape(cluster, follower)
            assert timed.get("quorum_replication_FollowerAppendMs_count", 0) > 0, f"broker {follower} timed no append"
            assert timed.get("quorum_replication_FollowerTurnaroundMs_count", 0) > 0, (
                f"broker {follower} timed no turnaround between its fetches")
    finally:
        cluster.stop()
