"""The wrappers' recreated-topic decisions (EpochGuard), fed Metadata answers by hand: a topic id in the
internal metadata decides with certainty; without one the evidence rules stay; a topic gone under a
running consumer holds its partitions until it is back; commits name the id positions were read under."""

from __future__ import annotations

import uuid
from typing import Any

import pytest

from client_epochs.consumer_guard import EpochGuard
from client_epochs.errors import TopicRecreatedError
from client_epochs.model import ClusterMetadata, PartitionMetadata, TopicPartition
from client_epochs.offset_fetch import CommittedOffset
from quorum.wire.internal_metadata import InternalMetadata, topic_id_text

TP = TopicPartition("rc", 0)
OLD, NEW = uuid.UUID(int=1), uuid.UUID(int=2)


class FakeMetadata:
    """What EpochGuard asks of its MetadataClient: the next answer, and a cache of the last."""

    def __init__(self) -> None:
        self.answer = ClusterMetadata("fake:1", 12, "c", 1)
        self.cache: dict[TopicPartition, PartitionMetadata] = {}

    def refresh_until_current(self, topics: Any, floors: Any = None, timeout: float = 0.0) -> ClusterMetadata:
        self.cache.update(self.answer.partitions)
        return self.answer

    def close(self) -> None:
        pass


def guard(policy: str = "raise") -> tuple[EpochGuard, FakeMetadata]:
    metadata = FakeMetadata()
    return EpochGuard(metadata, on_topic_recreated=policy, log_bounds=metadata), metadata  # type: ignore[arg-type]


def now(metadata: FakeMetadata, topic_id: uuid.UUID, topic_epoch: int, leader_epoch: int = 0) -> None:
    metadata.answer = ClusterMetadata("fake:1", 12, "c", 1,
                                      partitions={TP: PartitionMetadata(1, leader_epoch, topic_id, topic_epoch)})


def gone(metadata: FakeMetadata) -> None:
    metadata.answer = ClusterMetadata("fake:1", 12, "c", 1, topic_errors={"rc": 3})


@pytest.mark.parametrize("topic_epoch", [3, 9, 10])
def test_a_floor_naming_another_topic_id_is_a_recreation_whatever_the_epochs(topic_epoch):
    epoch_guard, metadata = guard()
    now(metadata, NEW, topic_epoch)
    assert epoch_guard.expect({TP: InternalMetadata(9, 4, OLD)}) == [TP]
    with pytest.raises(TopicRecreatedError) as caught:
        epoch_guard.settle(0.1)
    assert topic_id_text(OLD) in str(caught.value) and topic_id_text(NEW) in str(caught.value)


def test_a_floor_naming_the_current_id_is_growth_not_recreation():
    epoch_guard, metadata = guard()
    now(metadata, OLD, 12)
    epoch_guard.expect({TP: InternalMetadata(9, 4, OLD)})
    assert epoch_guard.settle(0.1).ready == (TP,)


def test_without_an_id_a_higher_topic_epoch_alone_is_not_a_recreation_but_a_seen_id_change_is():
    epoch_guard, metadata = guard()
    now(metadata, NEW, 12, leader_epoch=4)
    epoch_guard.expect({TP: InternalMetadata(9, 4)})
    assert epoch_guard.settle(0.1).recreated == ()
    epoch_guard, metadata = guard("earliest")
    epoch_guard.topic_ids["rc"] = OLD  # seen earlier in this process
    now(metadata, NEW, 12)
    epoch_guard.expect({TP: InternalMetadata(9, 4)})
    assert epoch_guard.settle(0.1).recreated == (TP,)


def test_a_topic_gone_under_a_running_consumer_holds_it_until_the_ids_are_compared():
    epoch_guard, metadata = guard()
    now(metadata, OLD, 9)
    assert epoch_guard.watch([TP], force=True).held == ()
    gone(metadata)
    assert epoch_guard.watch([TP], force=True).held == (TP,)
    assert epoch_guard.floors[TP].topic_id == OLD
    now(metadata, NEW, 11)
    with pytest.raises(TopicRecreatedError):
        epoch_guard.settle(0.1)
    assert epoch_guard.internal_metadata(TP).topic_id == OLD, "commits still name the id positions were read under"


def test_a_topic_back_with_the_same_id_is_resumed():
    epoch_guard, metadata = guard()
    now(metadata, OLD, 9)
    epoch_guard.watch([TP], force=True)
    gone(metadata)
    epoch_guard.watch([TP], force=True)
    now(metadata, OLD, 9)
    assert epoch_guard.settle(0.1).ready == (TP,)


def test_a_reset_policy_moves_commits_to_the_new_id():
    epoch_guard, metadata = guard("latest")
    now(metadata, OLD, 9)
    epoch_guard.watch([TP], force=True)
    now(metadata, NEW, 11)
    assert epoch_guard.watch([TP], force=True).recreated == (TP,)
    assert epoch_guard.internal_metadata(TP) == InternalMetadata(11, 0, NEW)



def wrapped_consumer() -> Any:
    """The confluent wrapper (on_topic_recreated="earliest") on a bootstrap address where no broker listens,
    so librdkafka never starts a partition's fetch (no committed offset read, no reset done): the state a
    partition just assigned is in. It read topic "rc" under OLD; its metadata checks now answer NEW."""
    from client_epochs.confluent import Consumer

    config = {"bootstrap.servers": "127.0.0.1:1", "group.id": "rc-group", "log_level": 0}
    consumer = Consumer(config, on_topic_recreated="earliest", no_partitions_warning_s=None)
    metadata = FakeMetadata()
    consumer._guard.metadata = metadata  # type: ignore[assignment]
    consumer._guard.topic_ids["rc"] = OLD
    now(metadata, NEW, 5)
    return consumer


def test_the_confluent_wrapper_restarts_a_recreated_partition_librdkafka_will_not_seek_yet():
    """librdkafka refuses to seek a partition whose fetch has not started (_STATE). Under KIP-848 the broker
    revokes a deleted topic's partitions and assigns the new topic's, and the wrapper's next metadata check
    finds the topic recreated (another id than the one it read) while the partition is in that state: the
    wrapper used to seek and raise librdkafka's _STATE error from poll (a member process died of it in
    test_kip848_processes.py); it assigns the partition again at the new topic's beginning instead."""
    import confluent_kafka

    consumer = wrapped_consumer()
    consumer._offsets.fetch = lambda group, partitions, timeout: {  # nothing committed, the wrapper reads
        tp: CommittedOffset(-1, -1, None) for tp in partitions
    }
    try:
        consumer.assign([confluent_kafka.TopicPartition("rc", 0)])
        assert consumer.poll(0.1) is None
        assert [(p.topic, p.partition, p.offset) for p in consumer.assignment()] == [
            ("rc", 0, confluent_kafka.OFFSET_BEGINNING)
        ]
        assert consumer.read_topic_id(TP) == NEW
    finally:
        consumer.close()


def test_the_confluent_wrapper_leaves_a_partition_whose_commit_is_unread_to_the_commit():
    """A partition assigned afresh whose committed offset the wrapper could not read yet (the coordinator
    does not answer) is not judged by the ids the consumer saw before: its commit names the topic id it
    was made under (another member may have committed on the new topic already), and that decides once
    read. The wrapper used to reset it on the older id it remembered, and to die of librdkafka's _STATE."""
    import confluent_kafka

    consumer = wrapped_consumer()
    try:
        consumer.assign([confluent_kafka.TopicPartition("rc", 0)])
        assert consumer.poll(0.1) is None
        assert consumer.waiting_for_committed == {TP}
        assert [(p.topic, p.partition) for p in consumer.assignment()] == [("rc", 0)]
        assert consumer.assignment()[0].offset != confluent_kafka.OFFSET_BEGINNING, "reset before the commit was read"
    finally:
        consumer.close()
