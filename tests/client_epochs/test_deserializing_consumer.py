"""`client_epochs.confluent.DeserializingConsumer` (issue 33) with a real Schema Registry deserializer.

Records written by confluent-kafka's `SerializingProducer` with Schema Registry's JSON Schema
serializer (the schema registered, its id framed into every value) are read back as objects by the
wrapper with `JSONDeserializer`. The registry is confluent-kafka's own in-memory one
(`SchemaRegistryClient.new_client` on a `mock://` URL: `MockSchemaRegistryClient`), the simplest real registry
client, shared by the serializer and the deserializer; no registry server runs. Beside the round
trip: a value the deserializer refuses raises confluent-kafka's ValueDeserializationError naming the
message and the next poll goes on; commits carry the internal metadata and hand back the user's; a
recreated topic raises TopicRecreatedError from poll, as the plain wrapper does.
"""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest
from confluent_kafka import SerializingProducer, TopicPartition
from confluent_kafka.error import ValueDeserializationError
from confluent_kafka.schema_registry import SchemaRegistryClient
from confluent_kafka.schema_registry.json_schema import JSONDeserializer, JSONSerializer
from confluent_kafka.serialization import StringDeserializer, StringSerializer

from client_epochs import TopicPartition as Key
from client_epochs.confluent import DeserializingConsumer
from client_epochs.errors import TopicRecreatedError
from tests.client_epochs.wrapper_cluster import OneBrokerCluster, internal_of
from tests.test_broker_processes import QUIET, one_broker

pytestmark = pytest.mark.timeout(120)

SCHEMA = """{"$schema": "http://json-schema.org/draft-07/schema#", "title": "Order", "type": "object",
  "properties": {"id": {"type": "integer"}, "item": {"type": "string"}}, "required": ["id", "item"]}"""


@pytest.fixture(scope="module")
def cluster(tmp_path_factory) -> Iterator[OneBrokerCluster]:
    with one_broker(tmp_path_factory.mktemp("deserializing")) as (cluster, address):
        yield OneBrokerCluster(cluster, address)


@pytest.fixture(scope="module")
def registry() -> SchemaRegistryClient:
    return SchemaRegistryClient.new_client({"url": "mock://client-epochs-tests"})


def produce_orders(cluster: OneBrokerCluster, registry: SchemaRegistryClient, topic: str, ids: range) -> None:
    producer = SerializingProducer({"bootstrap.servers": cluster.address, "key.serializer": StringSerializer(),
                                    "value.serializer": JSONSerializer(SCHEMA, registry), **QUIET})
    for n in ids:
        producer.produce(topic, key=f"order-{n}", value={"id": n, "item": f"item {n}"})
    assert producer.flush(30) == 0


def consumer(cluster: OneBrokerCluster, registry: SchemaRegistryClient, group: str, **options) -> DeserializingConsumer:
    return DeserializingConsumer({"bootstrap.servers": cluster.address, "group.id": group,
                                  "enable.auto.commit": False, "auto.offset.reset": "earliest",
                                  "key.deserializer": StringDeserializer(),
                                  "value.deserializer": JSONDeserializer(SCHEMA, schema_registry_client=registry),
                                  **QUIET}, **options)


def poll_values(wrapped: DeserializingConsumer, count: int, timeout_s: float = 30.0) -> list:
    got: list = []
    deadline = time.monotonic() + timeout_s
    while len(got) < count and time.monotonic() < deadline:
        message = wrapped.poll(0.5)
        if message is not None:
            got.append(message)
    return got


def test_records_come_back_as_objects_and_commits_keep_the_internal_metadata(cluster, registry) -> None:
    cluster.topic("orders", 0)
    produce_orders(cluster, registry, "orders", range(5))
    wrapped = consumer(cluster, registry, "orders-group")
    try:
        wrapped.subscribe(["orders"])
        got = poll_values(wrapped, 5)
        assert [(m.key(), m.value()) for m in got] == [(f"order-{n}", {"id": n, "item": f"item {n}"})
                                                       for n in range(5)]
        with pytest.raises(NotImplementedError, match="use poll"):
            wrapped.consume(1, 0.1)
        wrapped.commit(offsets=[TopicPartition("orders", 0, 5, metadata="after order 4")], asynchronous=False)
        (committed,) = wrapped.committed([TopicPartition("orders", 0)], timeout=10)
        stored = wrapped.committed_internal_metadata([Key("orders", 0)])
    finally:
        wrapped.close()
    assert (committed.offset, committed.metadata) == (5, "after order 4")
    assert stored == {Key("orders", 0): internal_of(cluster.epochs("orders"))}


def test_a_value_the_deserializer_refuses_names_the_message_and_the_next_poll_goes_on(cluster, registry) -> None:
    cluster.topic("mixed", 0)
    produce_orders(cluster, registry, "mixed", range(2))
    cluster.produce("mixed", 1)  # "mixed-0": not framed by the registry serializer
    produce_orders(cluster, registry, "mixed", range(2, 3))
    wrapped = consumer(cluster, registry, "mixed-group")
    try:
        wrapped.assign([TopicPartition("mixed", 0, 0)])
        assert [m.value()["id"] for m in poll_values(wrapped, 2)] == [0, 1]
        with pytest.raises(ValueDeserializationError) as refused:
            poll_values(wrapped, 1)
        assert refused.value.kafka_message.offset() == 2 and refused.value.kafka_message.value() == b"mixed-0"
        assert [m.value()["id"] for m in poll_values(wrapped, 1)] == [2]
    finally:
        wrapped.close()


def test_a_recreated_topic_raises_from_poll(cluster, registry) -> None:
    cluster.topic("recreated", 0)
    produce_orders(cluster, registry, "recreated", range(3))
    wrapped = consumer(cluster, registry, "recreated-group", metadata_check_interval_s=0.3)
    try:
        wrapped.subscribe(["recreated"])
        assert len(poll_values(wrapped, 3)) == 3
        wrapped.commit(asynchronous=False)
        cluster.recreate("recreated")
        produce_orders(cluster, registry, "recreated", range(3, 6))
        with pytest.raises(TopicRecreatedError) as caught:
            poll_values(wrapped, 3)
    finally:
        wrapped.close()
    assert Key("recreated", 0) in caught.value.partitions
