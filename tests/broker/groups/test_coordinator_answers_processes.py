"""What a group's coordinator answers while its `__consumer_offsets` partition is becoming its own
(issue 31, item 4), on a fresh 1-controller, 3-broker cluster.

A broker learns that it leads a partition when it replays the metadata record (FindCoordinator,
on any broker, names it from then on), and its group coordinator loads the partition once the
broker has applied that image (opened the partition logs it names, off the event loop). Kafka's
coordinator counts as loading from the moment its metadata names it the leader
(GroupCoordinator.onElection / CoordinatorRuntime.scheduleLoadOperation) and answers
COORDINATOR_LOAD_IN_PROGRESS, which every client retries, until its groups are loaded. Answering
NOT_COORDINATOR meanwhile ("ask again who it is") made librdkafka's committed() fail, since
librdkafka does not retry an OffsetFetch answered NOT_COORDINATOR.

The window is widened here the way it opened in the failing run: the brokers are busy opening the
logs of a large topic created a moment before `__consumer_offsets`."""

from __future__ import annotations

import pytest
from confluent_kafka import Consumer, KafkaException, TopicPartition
from confluent_kafka.admin import NewTopic

from tests.broker.groups.group_cluster import consumer_config, group_cluster

pytestmark = pytest.mark.timeout(300)

BULK_PARTITIONS = 600
GROUPS = 12


def test_committed_while_the_coordinator_loads_is_retried_not_answered_not_coordinator(tmp_path) -> None:
    with group_cluster(tmp_path) as cluster:
        cluster.topics(1, "load-race")
        # No waiting: the brokers apply the bulk topic's image (200 logs each to open) while the
        # first FindCoordinator below creates __consumer_offsets.
        cluster.admin.create_topics([NewTopic("load-race-bulk", BULK_PARTITIONS, 1)], request_timeout=30)
        failures: list[str] = []
        consumers = [Consumer(consumer_config(cluster, f"load-race-{n}")) for n in range(GROUPS)]
        try:
            for n, consumer in enumerate(consumers):
                try:
                    [committed] = consumer.committed([TopicPartition("load-race", 0)], timeout=30)
                except KafkaException as exc:
                    failures.append(f"load-race-{n}: committed() before any commit: {exc}")
                    continue
                assert committed.offset < 0, "nothing was committed yet"
            for n, consumer in enumerate(consumers):
                consumer.commit(offsets=[TopicPartition("load-race", 0, n + 1)], asynchronous=False)
                try:
                    [committed] = consumer.committed([TopicPartition("load-race", 0)], timeout=30)
                except KafkaException as exc:
                    failures.append(f"load-race-{n}: committed() right after the commit: {exc}")
                    continue
                if committed.offset != n + 1:
                    failures.append(f"load-race-{n}: committed() read {committed.offset}, not {n + 1}")
        finally:
            for consumer in consumers:
                consumer.close()
        assert not failures, failures
