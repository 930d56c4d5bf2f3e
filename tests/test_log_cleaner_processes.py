"""The log cleaner in a broker process, read by real clients: a compacted topic keeps each key's
latest value (and drops an expired tombstone's key), confluent-kafka and kafka-python read the
cleaned log from the start to its end without stalling on the emptied batches, and after a
restart the broker serves the same records and a group coordinator loads its compacted
`__consumer_offsets` to the last commit."""

from __future__ import annotations

import time

import pytest
from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from kafka import KafkaConsumer
from kafka import TopicPartition as KafkaTopicPartition

from quorum.launcher import LocalCluster
from tests.test_broker_processes import BROKER, QUIET, one_broker
from tests.test_controller_processes import create, metadata, wait_until
from tests.test_replication_processes import SETTINGS as REPLICATION_SETTINGS

pytestmark = pytest.mark.timeout(300)

TOPIC = "table"
KEYS = 20
ROUNDS = 15
CLEANER = {"log.cleaner.backoff.ms": "300", "log.roll.ms": "250", "log.cleaner.min.cleanable.ratio": "0.01"}


def producer_for(address: str) -> Producer:
    return Producer({"bootstrap.servers": address, "acks": "all", "linger.ms": 5, "message.timeout.ms": 60_000,
                     **QUIET})  # fmt: skip


def produce_keyed(producer: Producer, topic: str, rounds: range) -> dict[bytes, bytes | None]:
    """Each key once per round (acks=all), a round every 0.1 s so that segments roll (log.roll.ms);
    each key's latest value."""
    latest: dict[bytes, bytes | None] = {}
    for round_number in rounds:
        for key in range(KEYS):
            name, value = b"key-%d" % key, b"value-%d-%d" % (key, round_number)
            producer.produce(topic, value, name)
            latest[name] = value
        producer.flush(60)
        time.sleep(0.1)
    assert producer.flush(60) == 0
    return latest


def produce_rounds(address: str) -> dict[bytes, bytes | None]:
    """ROUNDS values of every key, then a tombstone for key 3 and a last round of key 0; each key's
    latest value."""
    producer = producer_for(address)
    latest = produce_keyed(producer, TOPIC, range(ROUNDS))
    producer.produce(TOPIC, None, b"key-3")
    latest[b"key-3"] = None
    for tail in range(6):  # later segments, so the tombstone is rolled and below the high watermark
        producer.produce(TOPIC, b"tail-%d" % tail, b"key-0")
        latest[b"key-0"] = b"tail-%d" % tail
        producer.flush(30)
        time.sleep(0.1)
    assert producer.flush(30) == 0
    return latest


def read_with_confluent(address: str, start: int = 0) -> tuple[dict[bytes, bytes | None], int, int]:
    """(key -> last value, records read, high watermark) of the topic, read from `start`."""
    consumer = Consumer({"bootstrap.servers": address, "group.id": "cleaner-reader", "enable.auto.commit": False,
                         **QUIET})  # fmt: skip
    try:
        end = consumer.get_watermark_offsets(TopicPartition(TOPIC, 0), timeout=30)[1]
        consumer.assign([TopicPartition(TOPIC, 0, start)])
        values: dict[bytes, bytes | None] = {}
        count = 0
        deadline = time.monotonic() + 60
        while consumer.position([TopicPartition(TOPIC, 0)])[0].offset < end:
            assert time.monotonic() < deadline, f"confluent-kafka stalled below the high watermark {end}"
            for message in consumer.consume(500, 0.5):
                assert message.error() is None, message.error()
                values[message.key()] = message.value()
                count += 1
        return values, count, end
    finally:
        consumer.close()


def read_with_kafka_python(address: str, end: int, start: int = 0) -> dict[bytes, bytes | None]:
    consumer = KafkaConsumer(bootstrap_servers=address, enable_auto_commit=False, group_id=None)
    try:
        partition = KafkaTopicPartition(TOPIC, 0)
        consumer.assign([partition])
        consumer.seek(partition, start)
        values: dict[bytes, bytes | None] = {}
        deadline = time.monotonic() + 60
        while consumer.position(partition) < end:
            assert time.monotonic() < deadline, f"kafka-python stalled at {consumer.position(partition)} below {end}"
            for records in consumer.poll(500).values():
                for record in records:
                    values[record.key] = record.value
        return values
    finally:
        consumer.close()


def served(address: str) -> dict[bytes, bytes | None] | None:
    """What a reader gets once the broker leads the partition again (None before)."""
    try:
        return read_with_confluent(address)[0]
    except KafkaException:
        return None


def commit_many(address: str, group: str, commits: int) -> None:
    consumer = Consumer({"bootstrap.servers": address, "group.id": group, "enable.auto.commit": False, **QUIET})
    try:
        for offset in range(1, commits + 1):
            consumer.commit(offsets=[TopicPartition(TOPIC, 0, offset)], asynchronous=False)
            if offset % 20 == 0:
                time.sleep(0.3)  # a roll of __consumer_offsets between commits (log.roll.ms)
    finally:
        consumer.close()


def committed(address: str, group: str) -> int:
    consumer = Consumer({"bootstrap.servers": address, "group.id": group, "enable.auto.commit": False, **QUIET})
    try:
        return consumer.committed([TopicPartition(TOPIC, 0)], timeout=30)[0].offset
    finally:
        consumer.close()


def test_a_compacted_topic_and_consumer_offsets_are_cleaned_and_read_back_by_real_clients(tmp_path):
    with one_broker(tmp_path, CLEANER) as (cluster, address):
        create(AdminClient({"bootstrap.servers": address, **QUIET}),
               NewTopic(TOPIC, 1, 1, config={"cleanup.policy": "compact", "delete.retention.ms": "0"}))
        latest = produce_rounds(address)
        produced = KEYS * ROUNDS + 7
        expected = {key: value for key, value in latest.items() if value is not None}

        def compacted() -> bool:
            values, count, _ = read_with_confluent(address)
            return values == expected and count < produced / 3

        wait_until(f"the cleaner to compact {TOPIC!r} to each key's latest value", compacted, 90)
        values, count, end = read_with_confluent(address)
        assert end == produced and b"key-3" not in values, "the expired tombstone went, with its key"
        assert read_with_kafka_python(address, end) == expected
        # From inside a run of emptied batches the cleaner wrote as one (its base below the position):
        assert read_with_confluent(address, 107)[0] == expected
        assert read_with_kafka_python(address, end, 107) == expected
        commit_many(address, "committer", 200)
        log_path = cluster.specs[BROKER].log_path
        wait_until("__consumer_offsets to be compacted",
                   lambda: "__consumer_offsets-" in log_path.read_text() and any(
                       "__consumer_offsets-" in line and ": compacted" in line
                       for line in log_path.read_text().splitlines()), 90)  # fmt: skip
        cluster.kill(BROKER)
        cluster.start_node(BROKER)
        assert wait_until("the restarted broker to serve the cleaned segments", lambda: served(address), 90) == expected
        assert wait_until("the coordinator to load the group's last commit",
                          lambda: committed(address, "committer") == 200, 90)


REPLICATED = "table3"


def read_replicated(address: str) -> dict[bytes, bytes | None] | None:
    """key -> last value of REPLICATED as the broker at `address` serves it from 0; None while it cannot."""
    consumer = Consumer({"bootstrap.servers": address, "group.id": "replicated-reader", "enable.auto.commit": False,
                         **QUIET})  # fmt: skip
    try:
        end = consumer.get_watermark_offsets(TopicPartition(REPLICATED, 0), timeout=10)[1]
        consumer.assign([TopicPartition(REPLICATED, 0, 0)])
        values: dict[bytes, bytes | None] = {}
        deadline = time.monotonic() + 30
        while consumer.position([TopicPartition(REPLICATED, 0)])[0].offset < end:
            if time.monotonic() > deadline:
                return None
            for message in consumer.consume(500, 0.5):
                if message.error() is not None:
                    return None
                values[message.key()] = message.value()
        return values
    except KafkaException:
        return None
    finally:
        consumer.close()


def test_a_follower_behind_the_leaders_cleaning_catches_up_and_leads_with_the_same_values(tmp_path):
    """The follower stops inside what its leader then cleans into one empty batch; back, it takes
    that batch from its own end, rejoins the ISR, and once it alone is left it serves each key's
    latest value."""
    settings = {**REPLICATION_SETTINGS, **CLEANER, "offsets.topic.replication.factor": "1"}
    cluster = LocalCluster(tmp_path, controllers=1, brokers=3, settings=settings)
    cluster.format_storage()
    cluster.start()
    try:
        brokers = (101, 102, 103)
        first = cluster.specs[brokers[0]].address
        wait_until("the brokers to be unfenced", lambda: metadata(first)[0] == set(brokers))
        create(AdminClient({"bootstrap.servers": first, **QUIET}),
               NewTopic(REPLICATED, 1, 3, config={"cleanup.policy": "compact"}))

        def partition():
            topic = metadata(first)[1].get(REPLICATED)
            assert topic is not None, f"{REPLICATED} not in broker {brokers[0]}'s metadata yet"
            return topic.partitions[0]

        wait_until(f"{REPLICATED} to be fully replicated", lambda: sorted(partition().isr) == list(brokers))
        bootstrap = ",".join(cluster.specs[b].address for b in brokers)
        producer = producer_for(bootstrap)
        produce_keyed(producer, REPLICATED, range(0, 3))
        leader = partition().leader
        follower = next(b for b in brokers if b != leader)
        wait_until(f"follower {follower} to copy the first rounds", lambda: sorted(partition().isr) == list(brokers))
        cluster.kill(follower)
        latest = produce_keyed(producer, REPLICATED, range(3, 15))
        leader_log = cluster.specs[leader].log_path
        wait_until(f"leader {leader} to compact {REPLICATED}",
                   lambda: f"{REPLICATED}-0: compacted" in leader_log.read_text(), 90)  # fmt: skip
        cluster.start_node(follower)
        wait_until(f"follower {follower} back in the ISR", lambda: sorted(partition().isr) == list(brokers), 90)
        for other in brokers:
            if other != follower:
                cluster.kill(other)
        survivor = cluster.specs[follower].address
        assert wait_until(f"broker {follower} alone to serve {REPLICATED}",
                          lambda: read_replicated(survivor), 90) == latest  # fmt: skip
        assert "records from broker" not in cluster.specs[follower].log_path.read_text(), "no fetched batch refused"
    finally:
        cluster.stop()
