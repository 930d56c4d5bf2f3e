"""A topic deleted and created again while the broker coordinating a group was down: when that broker
comes back it loads `__consumer_offsets` with the old commit still in the log (it never saw the
deletion as it happened, and no tombstone was written), and must drop the commit anyway, so a raw
client finds no committed offset for the new topic (auto.offset.reset), as on Apache Kafka."""

from __future__ import annotations

import signal

import pytest
from confluent_kafka import Consumer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from quorum.launcher import LocalCluster
from tests.test_broker_processes import QUIET
from tests.test_controller_processes import create, metadata, wait_until

pytestmark = pytest.mark.timeout(240)

BROKERS = (101, 102)
SETTINGS = {"offsets.topic.replication.factor": "1", "offsets.topic.num.partitions": "1",
            "group.initial.rebalance.delay.ms": "0", "auto.create.topics.enable": "false"}


def committed(bootstrap: str, *topics: str) -> list[int]:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "readers", "enable.auto.commit": False, **QUIET})
    try:
        return [p.offset for p in consumer.committed([TopicPartition(t, 0) for t in topics], timeout=30)]
    finally:
        consumer.close()


def test_a_coordinator_down_during_delete_and_recreate_drops_the_old_topics_offsets_when_it_loads(tmp_path):
    cluster = LocalCluster(tmp_path, controllers=1, brokers=len(BROKERS), settings=SETTINGS)
    cluster.format_storage()
    cluster.write_configs()
    cluster.start()
    try:
        address = {b: cluster.specs[b].address for b in BROKERS}
        bootstrap = ",".join(address.values())
        wait_until("both brokers to be unfenced", lambda: metadata(address[101])[0] == set(BROKERS))
        create(AdminClient({"bootstrap.servers": bootstrap, **QUIET}), NewTopic("rc", 1, 1), NewTopic("kept", 1, 1))
        consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "readers", "enable.auto.commit": False,
                             **QUIET})
        try:
            consumer.commit(offsets=[TopicPartition("rc", 0, 20), TopicPartition("kept", 0, 3)], asynchronous=False)
        finally:
            consumer.close()
        # the commit created __consumer_offsets on its coordinator; broker 101 may not have applied that image yet
        wait_until("broker 101 to list __consumer_offsets", lambda: "__consumer_offsets" in metadata(address[101])[1])
        coordinator = metadata(address[101])[1]["__consumer_offsets"].partitions[0].leader
        (survivor,) = set(BROKERS) - {coordinator}
        old_id = metadata(address[survivor])[1]["rc"].topic_id

        cluster.kill(coordinator, signal.SIGKILL)
        wait_until("the coordinator to be fenced", lambda: metadata(address[survivor])[0] == {survivor}, 60)
        admin = AdminClient({"bootstrap.servers": address[survivor], **QUIET})
        for future in admin.delete_topics(["rc"], request_timeout=30).values():
            future.result(timeout=30)

        def created_again() -> bool:
            try:
                create(admin, NewTopic("rc", 1, 1))
            except Exception:  # TOPIC_ALREADY_EXISTS while the deletion is still being applied
                return False
            return True

        wait_until("rc created again", created_again, 30)
        # one answer per look: two in a row could see the old rc, then none (the deletion applied, the
        # re-creation not yet), and the second look's KeyError ended the wait
        wait_until("the survivor to serve the new rc",
                   lambda: getattr(metadata(address[survivor])[1].get("rc"), "topic_id", old_id) != old_id)

        cluster.start_node(coordinator)
        wait_until("the coordinator to be back", lambda: metadata(address[survivor])[0] == set(BROKERS), 60)
        assert committed(bootstrap, "rc", "kept") == [-1001, 3], (
            "the deleted topic's commit is gone (OFFSET_INVALID), the other topic's is kept")
    finally:
        cluster.stop()
