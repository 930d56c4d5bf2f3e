"""The wrappers' recreated-topic decisions (EpochGuard), fed Metadata answers by hand: a topic id in the
internal metadata decides with certainty; without one the evidence rules stay; a topic gone under a
running consumer holds its partitions until it is back; commits name the id positions were read under."""

from __future__ import annotations

import uuid
from typing import Any

import confluent_kafka
import pytest

from client_epochs.committed import encode
from client_epochs.consumer_guard import EpochGuard
from client_epochs.errors import TopicRecreatedError
from client_epochs.log_bounds import LogBounds
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



def wrapped_consumer(reset: str | None = None, spy: bool = False) -> Any:
    """The confluent wrapper (on_topic_recreated="earliest") on a bootstrap address where no broker listens,
    so librdkafka never starts a partition's fetch (no committed offset read, no reset done): the state a
    partition just assigned is in. It read topic "rc" under OLD; its metadata checks now answer NEW.
    `reset`: its auto.offset.reset (librdkafka's default, latest, when None); `spy`: a consumer whose
    calls into librdkafka are seen by `LibrdkafkaCalls` (the class below the wrapper)."""
    from client_epochs.confluent import Consumer

    class Spied(Consumer, LibrdkafkaCalls):
        pass

    config = {"bootstrap.servers": "127.0.0.1:1", "group.id": "rc-group", "log_level": 0}
    if reset is not None:
        config["auto.offset.reset"] = reset
    consumer = (Spied if spy else Consumer)(config, on_topic_recreated="earliest", no_partitions_warning_s=None)
    metadata = FakeMetadata()
    consumer._guard.metadata = metadata  # type: ignore[assignment]
    consumer._guard.log_bounds = FakeBounds()
    consumer._guard.topic_ids["rc"] = OLD
    now(metadata, NEW, 5)
    return consumer


class FakeBounds:
    """Every partition's current leader (broker 1) holds records [0, 10]."""

    def fetch(self, tp: TopicPartition, floor: Any = None, timeout: float = 30.0) -> LogBounds:
        return LogBounds(tp, 0, 10, 1, 0, "fake:1")

    def close(self) -> None:
        pass


class LibrdkafkaCalls(confluent_kafka.Consumer):
    """Between the wrapper and confluent-kafka (the wrapper's `super()` calls land here): records the
    (un)assignments the wrapper asks of librdkafka, and keeps the partitions librdkafka holds paused by the
    application as librdkafka does, through an unassignment and a later assignment of the same partition."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.calls: list[tuple[str, list[tuple[str, int, int]]]] = []
        self.paused: set[tuple[str, int]] = set()

    def _record(self, call: str, partitions: list[confluent_kafka.TopicPartition]) -> None:
        self.calls.append((call, [(p.topic, p.partition, p.offset) for p in partitions]))

    def pause(self, partitions: list[confluent_kafka.TopicPartition]) -> None:
        super().pause(partitions)
        self.paused |= {(p.topic, p.partition) for p in partitions}

    def resume(self, partitions: list[confluent_kafka.TopicPartition]) -> None:
        super().resume(partitions)
        self.paused -= {(p.topic, p.partition) for p in partitions}

    def incremental_assign(self, partitions: list[confluent_kafka.TopicPartition]) -> None:
        self._record("incremental_assign", partitions)
        super().incremental_assign(partitions)

    def incremental_unassign(self, partitions: list[confluent_kafka.TopicPartition]) -> None:
        self._record("incremental_unassign", partitions)
        super().incremental_unassign(partitions)


def nothing_committed(consumer: Any) -> None:
    """The group's coordinator, as the wrapper reads it, has no commit for any partition."""
    consumer._offsets.fetch = lambda group, partitions, timeout: {
        tp: CommittedOffset(-1, -1, None) for tp in partitions
    }


def test_a_partition_the_group_never_committed_is_assigned_where_auto_offset_reset_starts_it():
    """librdkafka is given auto.offset.reset=error, so a partition assigned at its committed offset without
    one is stopped, and only an assignment made again starts it; made from poll, outside the rebalance
    callback, librdkafka's KIP-848 state machine took that assignment for the answer to a rebalance it had
    just handed over (it acknowledged a revocation it never carried out: a partition held by two members in
    test_kip848_processes.py). The wrapper reads the commits first and assigns such a partition once, at
    the start auto.offset.reset names (the log start its current leader gives), so poll never assigns it
    again."""
    consumer = wrapped_consumer(reset="earliest", spy=True)
    nothing_committed(consumer)
    consumer._guard.topic_ids.clear()  # a topic it never read
    try:
        consumer.incremental_assign([confluent_kafka.TopicPartition("rc", 0)])
        assert consumer.poll(0.1) is None
        assert consumer.calls == [("incremental_assign", [("rc", 0, 0)])]
        assert consumer.waiting_for_committed == set() and consumer.paused == set()
    finally:
        consumer.close()


def test_a_recreated_topics_partition_without_a_commit_starts_where_on_topic_recreated_says():
    """A partition of a topic the consumer read under another id, handed over with nothing committed (under
    KIP-848 the broker revokes a deleted topic's partitions and assigns the new topic's), is assigned where
    on_topic_recreated says (here the beginning, although auto.offset.reset is latest), once: no seek
    librdkafka would refuse, no assignment made again from poll. The consumer takes the new id."""
    consumer = wrapped_consumer(spy=True)
    nothing_committed(consumer)
    try:
        consumer.incremental_assign([confluent_kafka.TopicPartition("rc", 0)])
        assert consumer.poll(0.1) is None
        assert consumer.calls == [("incremental_assign", [("rc", 0, confluent_kafka.OFFSET_BEGINNING)])]
        assert consumer.read_topic_id(TP) == NEW
    finally:
        consumer.close()


def test_a_partition_held_while_its_topic_was_gone_is_fetched_when_assigned_again():
    """The wrapper pauses a partition whose topic is gone from the metadata until the topic is back; KIP-848
    then revokes it, and hands the recreated topic's partition of that name over. librdkafka keeps an
    application's pause through an unassignment and the next assignment, and the wrapper forgets a revoked
    partition. A partition assigned at its committed offset was resumed once its commit was read; one
    assigned where it starts (the two tests above) is not waiting for anything, and stayed paused: with
    the first half of the fix alone, a member given a recreated topic's partition was silent for 90 s in
    test_kip848_processes.py. The partition is assigned again unpaused."""
    consumer = wrapped_consumer(reset="earliest", spy=True)
    nothing_committed(consumer)
    now(consumer._guard.metadata, OLD, 5)
    try:
        consumer.incremental_assign([confluent_kafka.TopicPartition("rc", 0)])
        gone(consumer._guard.metadata)
        assert consumer.poll(0) is None  # one metadata check (the fake has no refusals to make a wait of)
        assert consumer.paused == {("rc", 0)}, "held while its topic is gone"
        consumer.incremental_unassign([confluent_kafka.TopicPartition("rc", 0)])
        now(consumer._guard.metadata, NEW, 7)
        consumer.incremental_assign([confluent_kafka.TopicPartition("rc", 0)])
        assert consumer.poll(0.1) is None
        assert consumer.paused == set()
        assert consumer.calls[-1] == ("incremental_assign", [("rc", 0, confluent_kafka.OFFSET_BEGINNING)])
    finally:
        consumer.close()


def test_the_confluent_wrapper_restarts_a_recreated_partition_librdkafka_will_not_seek_yet():
    """librdkafka refuses to seek a partition whose fetch has not started (_STATE). A partition whose commit
    names the topic's old id (committed before the topic was recreated, the coordinator down when it was
    deleted) waits for the metadata, which finds the topic recreated while its fetch has not started: the
    wrapper used to seek and raise librdkafka's _STATE error from poll; it assigns the partition again at
    the new topic's beginning instead."""
    consumer = wrapped_consumer()
    consumer._offsets.fetch = lambda group, partitions, timeout: {
        tp: CommittedOffset(5, 0, encode("", InternalMetadata(3, 0, OLD))) for tp in partitions
    }
    try:
        consumer.assign([confluent_kafka.TopicPartition("rc", 0)])
        assert consumer.waiting_for_metadata == {TP}
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
    consumer = wrapped_consumer()
    try:
        consumer.assign([confluent_kafka.TopicPartition("rc", 0)])
        assert consumer.poll(0.1) is None
        assert consumer.waiting_for_committed == {TP}
        assert [(p.topic, p.partition) for p in consumer.assignment()] == [("rc", 0)]
        assert consumer.assignment()[0].offset != confluent_kafka.OFFSET_BEGINNING, "reset before the commit was read"
    finally:
        consumer.close()
