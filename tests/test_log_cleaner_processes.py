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

from tests.test_broker_processes import BROKER, QUIET, one_broker
from tests.test_controller_processes import create, wait_until

pytestmark = pytest.mark.timeout(300)

TOPIC = "table"
KEYS = 20
ROUNDS = 15
CLEANER = {"log.cleaner.backoff.ms": "300", "log.roll.ms": "250", "log.cleaner.min.cleanable.ratio": "0.01"}


def produce_rounds(address: str) -> dict[bytes, bytes | None]:
    """ROUNDS values of every key, a round every 0.1 s so that segments roll (log.roll.ms), then a
    tombstone for key 3 and a last round of key 0; each key's latest value."""
    producer = Producer({"bootstrap.servers": address, "acks": "all", "linger.ms": 5, **QUIET})
    latest: dict[bytes, bytes | None] = {}
    for round_number in range(ROUNDS):
        for key in range(KEYS):
            name, value = b"key-%d" % key, b"value-%d-%d" % (key, round_number)
            producer.produce(TOPIC, value, name)
            latest[name] = value
        producer.flush(30)
        time.sleep(0.1)
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
