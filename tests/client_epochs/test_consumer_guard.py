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
