"""What the wrapper tests share: a one-broker cluster that makes topics, writes numbered records,
reads a partition's epochs and freezes the broker's Metadata answers (its PAUSE_METADATA file), and
a confluent-kafka consume loop. Each client's test adds its own consumers on top."""

from __future__ import annotations

import time
import uuid

from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

from client_epochs import MetadataClient, PartitionMetadata, TopicPartition
from quorum.wire.internal_metadata import InternalMetadata, topic_id_text
from tests.test_broker_processes import BROKER, QUIET
from tests.test_controller_processes import create, wait_until


class OneBrokerCluster:
    def __init__(self, cluster, address: str, kafka_compatible: bool = False) -> None:
        self.cluster = cluster
        self.address = address
        self.kafka_compatible = kafka_compatible
        """Whether the broker answers as Apache Kafka's (`quorum.launcher.KAFKA_COMPATIBLE`, issue 33)."""
        self.admin = AdminClient({"bootstrap.servers": address, **QUIET})
        self.pause_file = cluster.specs[BROKER].directory / "data" / "__cluster_metadata-0" / "PAUSE_METADATA"

    def topic(self, name: str, messages: int, partitions: int = 1) -> None:
        create(self.admin, NewTopic(name, partitions, 1))
        self.produce(name, messages)

    def produce(self, name: str, messages: int, partition: int = 0) -> None:
        """Records "<name>-<n>" for n below `messages`, to `partition`, each acknowledged (a record for a
        partition the producer's metadata does not know yet fails its delivery, not flush)."""
        producer = Producer({"bootstrap.servers": self.address, **QUIET})
        failed: list = []
        for n in range(messages):
            producer.produce(name, f"{name}-{n}".encode(), partition=partition,
                             on_delivery=lambda error, _: failed.append(error) if error is not None else None)
        assert producer.flush(30) == 0
        assert not failed, f"{len(failed)} record(s) to {name}-{partition} not delivered: {failed[0]}"

    def recreate(self, name: str) -> None:
        """Delete topic `name` and create it again (1 partition): a new topic id and a higher topic epoch."""
        deleted = self.epochs(name).topic_id
        self.delete(name)
        self.create_again(name, deleted)

    def delete(self, name: str) -> None:
        for future in self.admin.delete_topics([name], request_timeout=30).values():
            future.result(timeout=30)

    def create_again(self, name: str, deleted_id: uuid.UUID | None = None) -> None:
        """Create the deleted topic `name` again (1 partition), once the deletion is applied. A client
        subscribed to it may create it first: its Metadata request asks for auto-creation, which the
        broker grants (auto.create.topics.enable, true by default as in Kafka); a topic `name` with an id
        other than `deleted_id` is created again all the same."""

        last: list[str] = ["nothing tried"]

        def created() -> bool:
            try:
                create(self.admin, NewTopic(name, 1, 1))
            except Exception as exc:  # TOPIC_ALREADY_EXISTS while the deletion is still being applied
                last[0] = f"{type(exc).__name__}: {exc}"
                return deleted_id is not None and self.topic_id(name) not in (None, deleted_id)
            return True

        try:
            wait_until(f"{name} created again", created, timeout_s=30)
        except AssertionError as exc:  # which refusal kept it from being created, not only that it was not
            raise AssertionError(f"{exc}; the last CreateTopics answer: {last[0]}") from None

    def partition(self, name: str, partition: int = 0) -> PartitionMetadata | None:
        """Partition `partition` of `name` as the broker's Metadata lists it (None: not listed)."""
        with MetadataClient(self.address) as client:
            return client.fetch([name]).partitions.get(TopicPartition(name, partition))

    def topic_id(self, name: str) -> uuid.UUID | None:
        """The id of topic `name` in the broker's Metadata, None while it has none."""
        meta = self.partition(name)
        return None if meta is None else meta.topic_id

    def epochs(self, name: str, partition: int = 0) -> PartitionMetadata:
        meta = self.partition(name, partition)
        assert meta is not None, f"the broker's Metadata does not list {name}-{partition}"
        return meta

    def serves(self, name: str, partition: int) -> bool:
        """Whether the broker's Metadata lists partition `partition` of `name`, with a leader."""
        meta = self.partition(name, partition)
        return meta is not None and meta.leader_id >= 0


def consume(consumer, count: int, timeout_s: float = 30.0) -> list:
    """Up to `count` messages from a confluent-kafka consumer (wrapped or raw), none with an error."""
    got: list = []
    deadline = time.monotonic() + timeout_s
    while len(got) < count and time.monotonic() < deadline:
        for message in consumer.consume(count - len(got), 0.5):
            assert message.error() is None, message.error()
            got.append(message)
    return got


def kip_json(epochs: PartitionMetadata) -> str:
    """The internal metadata JSON the wrappers write for a partition now at `epochs`: the KIP's, plus
    the topic id as Kafka prints it."""
    return (f'{{"version":1,"topic_epoch":{epochs.topic_epoch},"leader_epoch":{epochs.leader_epoch},'
            f'"topic_id":"{topic_id_text(epochs.topic_id)}"}}')


def internal_of(epochs: PartitionMetadata) -> InternalMetadata:
    return InternalMetadata(epochs.topic_epoch, epochs.leader_epoch, epochs.topic_id)
