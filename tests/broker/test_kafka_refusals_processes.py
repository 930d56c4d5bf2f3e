"""What real clients see when Kafka's broker refuses them, on a 1-controller, 3-broker cluster
(one per module), as a client library's integration tests check it against Kafka:

* KIP-467: records a topic refuses (no key on a compacted topic; a CreateTime timestamp out of
  `message.timestamp.before.max.ms` / `after.max.ms` / the older `difference.max.ms`) fail
  exactly as the client reports Kafka's RecordErrors: librdkafka gives each record at fault the
  partition's error (INVALID_RECORD when there are several) and the rest of the batch
  `_INVALID_DIFFERENT_RECORD`; kafka-python fails the records at fault with InvalidRecordError and the
  rest with a KafkaError saying why; with one record per batch only the bad records fail.
* An illegal topic name fails a producer's messages at once with TOPIC_EXCEPTION (Metadata answers
  INVALID_TOPIC_EXCEPTION), not after `message.timeout.ms`.
* Auto-creation as the client asks (AllowAutoTopicCreation with the broker's
  `auto.create.topics.enable`): a producer creates the topic it names, a subscribed consumer with
  `allow.auto.create.topics=true` too and sees it at once, one with `false` gets
  UNKNOWN_TOPIC_OR_PART and the topic stays uncreated.
"""

from __future__ import annotations

import time
import uuid
from collections import Counter
from collections.abc import Iterator

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer
from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource, NewTopic
from kafka import KafkaConsumer, KafkaProducer
from kafka import errors as kafka_errors

from quorum.launcher import LocalCluster
from tests.test_broker_processes import QUIET
from tests.test_controller_processes import create, wait_until

pytestmark = pytest.mark.timeout(300)

AUTO_PARTITIONS = 12
SETTINGS = {"offsets.topic.replication.factor": "1", "offsets.topic.num.partitions": "4",
            "group.initial.rebalance.delay.ms": "0", "num.partitions": str(AUTO_PARTITIONS),
            "default.replication.factor": "3"}
"""Auto-created topics get 12 partitions on every broker: opening their logs takes long enough that
a broker answering before its logs were open showed (see the auto-creation tests)."""
ONE_BATCH = {"linger.ms": 2000, "batch.num.messages": 10_000}
"""librdkafka settings that put 100 messages produced in a loop into one batch."""
HOUR_MS = 3_600_000
DELIVERY_DEADLINE_S = 60


@pytest.fixture(scope="module")
def bootstrap(tmp_path_factory) -> Iterator[str]:
    cluster = LocalCluster(tmp_path_factory.mktemp("refusals"), controllers=1, brokers=3, settings=SETTINGS)
    cluster.format_storage()
    cluster.write_configs()
    try:
        cluster.start()
        yield cluster.bootstrap_servers
    finally:
        cluster.stop()


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def topic_names(bootstrap: str) -> set[str]:
    admin = AdminClient({"bootstrap.servers": bootstrap, **QUIET})
    return set(admin.list_topics(timeout=30).topics)


def produce_reports(bootstrap: str, topic: str, messages: list[tuple[bytes | None, bytes, int | None]],
                    **settings) -> list[KafkaError | None]:
    """Produce (key, value, timestamp) each to partition 0 of `topic` with confluent-kafka; the
    error of each one's delivery report (None: delivered), in the order they were produced."""
    producer = Producer({"bootstrap.servers": bootstrap, "message.timeout.ms": 120_000, **QUIET, **settings})
    # Connected and with the partition's leader known before the messages come, so that they are
    # batched as `settings` say (the first one is otherwise sent on its own as soon as the leader is known).
    producer.list_topics(topic, timeout=30)
    reports: dict[int, KafkaError | None] = {}
    for n, (key, value, timestamp) in enumerate(messages):
        producer.produce(topic, value, key, partition=0, timestamp=timestamp or 0,
                         on_delivery=lambda error, _message, n=n: reports.__setitem__(n, error))
    left = producer.flush(DELIVERY_DEADLINE_S)
    assert left == 0, f"{left} message(s) to {topic} still undelivered after {DELIVERY_DEADLINE_S} s"
    return [reports[n] for n in range(len(messages))]


def codes(reports: list[KafkaError | None]) -> Counter:
    return Counter("delivered" if error is None else error.name() for error in reports)


def every_tenth_keyless(count: int = 100) -> list[tuple[bytes | None, bytes, int | None]]:
    """librdkafka's 0011 test's messages: every tenth has no key."""
    return [(None if n % 10 == 0 else b"key-%d" % n, b"message %d" % n, None) for n in range(count)]


def compacted_topic(bootstrap: str) -> str:
    name = unique("compacted")
    create(AdminClient({"bootstrap.servers": bootstrap, **QUIET}),
           NewTopic(name, 1, 3, config={"cleanup.policy": "compact"}))
    return name


# -- KIP-467: record errors ------------------------------------------------------------------------


def test_compacted_topic_refuses_keyless_records_with_record_errors(bootstrap):
    """One batch of 100 with ten keyless: librdkafka fails those ten INVALID_RECORD and the other 90
    _INVALID_DIFFERENT_RECORD (the whole batch is refused). The broker's reason for each record is
    librdkafka's rd_kafka_message_errstr(); confluent-kafka's delivery error shows the code's text only."""
    topic = compacted_topic(bootstrap)
    reports = produce_reports(bootstrap, topic, every_tenth_keyless(), **ONE_BATCH)
    assert codes(reports) == {"INVALID_RECORD": 10, "_INVALID_DIFFERENT_RECORD": 90}
    assert {n for n, error in enumerate(reports) if error.name() == "INVALID_RECORD"} == set(range(0, 100, 10))


def test_compact_appended_to_a_topics_policy_refuses_keyless_records_with_record_errors(bootstrap):
    """librdkafka 0011's own flow: a topic the producer created, `compact` APPENDed to its
    cleanup.policy by IncrementalAlterConfigs, then one batch of 100 with ten keyless. The leader
    applies the policy from its metadata image a moment after the controller answers: a keyless probe
    is produced until it is refused, before the batch."""
    topic = unique("appended-compact")
    assert produce_reports(bootstrap, topic, [(b"k", b"first", None)]) == [None]
    admin = AdminClient({"bootstrap.servers": bootstrap, **QUIET})
    policy = ConfigResource(ConfigResource.Type.TOPIC, topic, incremental_configs=[
        ConfigEntry("cleanup.policy", "compact", incremental_operation=AlterConfigOpType.APPEND)])
    for future in admin.incremental_alter_configs([policy]).values():
        future.result(timeout=30)

    def keyless_refused() -> bool:
        (error,) = produce_reports(bootstrap, topic, [(None, b"probe", None)])
        return error is not None and error.name() == "INVALID_RECORD"

    wait_until(f"the leader of {topic}-0 to refuse a keyless record (cleanup.policy=delete,compact applied)",
               keyless_refused, 30)
    reports = produce_reports(bootstrap, topic, every_tenth_keyless(), **ONE_BATCH)
    assert codes(reports) == {"INVALID_RECORD": 10, "_INVALID_DIFFERENT_RECORD": 90}


def test_compacted_topic_refuses_only_keyless_records_sent_one_per_batch(bootstrap):
    """librdkafka's variation with batch.size=1: each record is its own batch, so only the ten keyless
    ones fail (INVALID_RECORD) and the 90 others are appended."""
    topic = compacted_topic(bootstrap)
    reports = produce_reports(bootstrap, topic, every_tenth_keyless(), **{"batch.size": 1})
    assert codes(reports) == {"INVALID_RECORD": 10, "delivered": 90}


def test_compacted_topic_refuses_keyless_records_with_record_errors_to_kafka_python(bootstrap):
    """kafka-python reads the same RecordErrors: the keyless records fail InvalidRecordError with
    Kafka's reason, the rest of their batch a KafkaError saying a record beside them was invalid."""
    topic = compacted_topic(bootstrap)
    producer = KafkaProducer(bootstrap_servers=bootstrap, linger_ms=2000, batch_size=1 << 20)
    try:
        futures = [producer.send(topic, value=value, key=key, partition=0)
                   for key, value, _ in every_tenth_keyless()]
        producer.flush(DELIVERY_DEADLINE_S)
        failures = [future.exception for future in futures]
    finally:
        producer.close(10)
    assert all(future.is_done for future in futures), "kafka-python did not complete every send"
    keyless = [failures[n] for n in range(0, 100, 10)]
    assert all(isinstance(exc, kafka_errors.InvalidRecordError) for exc in keyless), keyless[:2]
    assert "Compacted topic cannot accept message without key" in str(keyless[0])
    others = [failures[n] for n in range(100) if n % 10]
    assert all(type(exc) is kafka_errors.KafkaError and "invalid records" in str(exc) for exc in others), others[:2]


def test_timestamps_outside_before_and_after_max_ms_are_refused_with_invalid_timestamp(bootstrap):
    """CreateTime bounds (KIP-937): Kafka 4.0's defaults take any past timestamp and one up to an hour
    ahead; `message.timestamp.before.max.ms` bounds the past. A record out of bounds fails
    INVALID_TIMESTAMP, alone in its batch."""
    admin = AdminClient({"bootstrap.servers": bootstrap, **QUIET})
    default, bounded = unique("ts-default"), unique("ts-before")
    create(admin, NewTopic(default, 1, 1), NewTopic(bounded, 1, 1, config={"message.timestamp.before.max.ms": "60000"}))
    now = int(time.time() * 1000)
    messages = [(b"k", b"v", stamp) for stamp in (now - 24 * HOUR_MS, now + 2 * HOUR_MS, now + HOUR_MS // 6)]
    assert [e and e.name() for e in produce_reports(bootstrap, default, messages, **{"batch.size": 1})] == [
        None, "INVALID_TIMESTAMP", None]
    assert [e and e.name() for e in produce_reports(bootstrap, bounded, messages, **{"batch.size": 1})] == [
        "INVALID_TIMESTAMP", "INVALID_TIMESTAMP", None]


def test_the_older_timestamp_difference_max_ms_bounds_both_sides(bootstrap):
    """A topic made for Kafka 3.x with `message.timestamp.difference.max.ms` (deprecated by KIP-937)
    is created and refuses records that far in the past or the future, in one batch: each is named."""
    older = unique("ts-difference")
    create(AdminClient({"bootstrap.servers": bootstrap, **QUIET}),
           NewTopic(older, 1, 1, config={"message.timestamp.difference.max.ms": "60000"}))
    now = int(time.time() * 1000)
    messages = [(b"k", b"v", stamp) for stamp in (now, now - HOUR_MS, now, now + HOUR_MS // 6)]
    reports = produce_reports(bootstrap, older, messages, **ONE_BATCH)
    # Two records at fault: librdkafka gives them INVALID_RECORD (it cannot tell which partition-level
    # error each had) and the others _INVALID_DIFFERENT_RECORD.
    assert [e and e.name() for e in reports] == ["_INVALID_DIFFERENT_RECORD", "INVALID_RECORD",
                                                 "_INVALID_DIFFERENT_RECORD", "INVALID_RECORD"]


# -- illegal topic names ----------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["illegal$#!", "x" * 250, ".", ".."], ids=["characters", "250-long", "dot", "dots"])
def test_producing_to_an_illegal_topic_name_fails_at_once_with_topic_exception(bootstrap, name):
    """librdkafka's 0057: the broker's INVALID_TOPIC_EXCEPTION is permanent, so the messages fail
    with TOPIC_EXCEPTION without waiting for the topic to appear (librdkafka's 30 s of metadata
    propagation, after which they failed UNKNOWN_TOPIC_OR_PART) or for `message.timeout.ms`; a
    message produced once librdkafka knows is refused at once (_UNKNOWN_TOPIC). Messages to a legal
    new topic beside them are delivered."""
    good = unique("legal")
    producer = Producer({"bootstrap.servers": bootstrap, "message.timeout.ms": 120_000, **QUIET})
    bad: list[str] = []
    delivered: list[KafkaError | None] = []
    for partition in (-1, 0):
        try:
            producer.produce(name, b"bad", partition=partition,
                             on_delivery=lambda error, _m: bad.append(error and error.name()))
        except KafkaException as exc:  # librdkafka already knows the topic is refused: it fails at once
            bad.append(exc.args[0].name())
        producer.produce(good, b"good", partition=partition, on_delivery=lambda error, _m: delivered.append(error))
    left = producer.flush(DELIVERY_DEADLINE_S)
    assert left == 0, f"{left} message(s) still queued after {DELIVERY_DEADLINE_S} s: bad {bad}, good {delivered}"
    assert delivered == [None, None]
    assert len(bad) == 2 and "TOPIC_EXCEPTION" in bad and set(bad) <= {"TOPIC_EXCEPTION", "_UNKNOWN_TOPIC"}, bad
    assert name not in topic_names(bootstrap)


# -- auto-creation as the client asks ---------------------------------------------------------------


def consume_until_eof(consumer: Consumer, topics: set[str], deadline_s: float = 60.0) -> list[KafkaError]:
    """Poll until partition 0 of each of `topics` reports its end (the consumer holds it, and any
    error about the subscription came first); the errors seen on the way."""
    errors: list[KafkaError] = []
    waiting = set(topics)
    deadline = time.monotonic() + deadline_s
    while waiting and time.monotonic() < deadline:
        message = consumer.poll(0.5)
        if message is None:
            continue
        error = message.error()
        if error is not None and error.code() == KafkaError._PARTITION_EOF:
            waiting.discard(message.topic())
        elif error is not None:
            errors.append(error)
    assert not waiting, f"waited {deadline_s} s for the end of {sorted(waiting)}; errors on the way: {errors}"
    return errors


def subscriber(bootstrap: str, group: str, allow: bool) -> Consumer:
    return Consumer({"bootstrap.servers": bootstrap, "group.id": group, "enable.partition.eof": True,
                     "allow.auto.create.topics": allow, "topic.metadata.refresh.interval.ms": 1000,
                     "auto.offset.reset": "earliest", **QUIET})


def test_a_producer_creates_the_topic_it_names(bootstrap):
    """A producer's Metadata asks for creation (librdkafka's default for producers): every message
    to a new topic is delivered, none refused."""
    topic = unique("produced-new")
    reports = produce_reports(bootstrap, topic, [(b"k", b"v%d" % n, None) for n in range(20)])
    assert codes(reports) == {"delivered": 20}
    assert topic in topic_names(bootstrap)


@pytest.mark.parametrize("allow", [True, False], ids=["allowed", "disallowed"])
def test_a_subscribed_consumer_auto_creates_only_when_it_allows(bootstrap, allow):
    """librdkafka's 0109 without wildcards, five times over: a consumer subscribed to a topic just
    created (and seen in one broker's Metadata, as the test waits for it) and to a missing one.
    The existing topic is never reported unavailable, whichever broker the consumer asks: a broker
    that has replayed a topic waits for the image it answers from to hold it (the race: it answered
    UNKNOWN_TOPIC_OR_PARTITION until its logs were open). With allow.auto.create.topics=true the
    missing topic is created (librdkafka asks for it once the consumer holds a topic) and consumed to
    its end; its UNKNOWN_TOPIC_OR_PART before that is expected. With false it stays uncreated and
    UNKNOWN_TOPIC_OR_PART is reported for it, and nothing else."""
    admin = AdminClient({"bootstrap.servers": bootstrap, **QUIET})
    for _ in range(5):
        exists, missing = unique("exists"), unique("missing")
        create(admin, NewTopic(exists, 1, 3))
        wait_until(f"{exists} in Metadata", lambda exists=exists: exists in topic_names(bootstrap), 30)
        consumer = subscriber(bootstrap, unique("auto-create-group"), allow)
        try:
            consumer.subscribe([missing, exists])
            errors = consume_until_eof(consumer, {exists, missing} if allow else {exists})
        finally:
            consumer.close()
        unexpected = [e for e in errors if not (e.code() == KafkaError.UNKNOWN_TOPIC_OR_PART and missing in e.str())]
        assert not unexpected, f"errors other than {missing}'s unknown topic: {unexpected}"
        if not allow:
            assert errors, f"no UNKNOWN_TOPIC_OR_PART for {missing}"
            assert missing not in topic_names(bootstrap)


def test_a_client_that_asks_for_a_new_topic_is_answered_with_it_once_created(bootstrap):
    """The broker that creates a topic for a Metadata request answers with it, all its partitions
    listed, every time: it waits for the image it answers from (partition logs open). It waited for the
    replayed image instead and answered from the other, so the answer came before the logs were open
    and said UNKNOWN_TOPIC_OR_PART (20 times in 20 with 12 partitions of 3 replicas each). librdkafka's
    metadata call for one topic asks for creation (a producer's default)."""
    producer = Producer({"bootstrap.servers": bootstrap, **QUIET})
    answers = []
    for _ in range(10):
        topic = unique("asked-for")
        answer = producer.list_topics(topic, timeout=30).topics[topic]
        answers.append((topic, answer.error and answer.error.name(), len(answer.partitions)))
    assert [(error, count) for _, error, count in answers] == [(None, AUTO_PARTITIONS)] * 10, answers


def test_a_kafka_python_consumer_creates_the_topic_it_subscribes_to(bootstrap):
    """kafka-python asks for creation with every subscription Metadata (allow_auto_create_topics,
    true by default; 3.0.12 sends true even when it is false: its ClusterMetadata is built without
    the setting): the topic is created. (Whether the consumer is then assigned it is kafka-python's
    metadata-driven rejoin, which 3.0.12 may drop: see client_epochs' wrapped consumer.)"""
    topic = unique("kafka-python-subscribed")
    consumer = KafkaConsumer(bootstrap_servers=bootstrap, group_id=unique("kp-group"), auto_offset_reset="earliest",
                             metadata_max_age_ms=1000)
    try:
        consumer.subscribe([topic])

        def created() -> bool:
            consumer.poll(200)
            return topic in consumer.topics()

        wait_until(f"kafka-python's subscription to create {topic}", created, 60)
    finally:
        consumer.close()
    assert topic in topic_names(bootstrap)
