"""ListOffsets -2/-4/-5/-6 for tiered partitions (KIP-405, KIP-1005, KIP-1023) and the remote
metadata view, sans-IO: a partition's remote state fed by hand."""

from __future__ import annotations

import uuid

import pytest

from quorum.broker.list_offsets import offset_for
from quorum.broker.remote_tier import (
    RemoteLogState,
    RemoteSegmentMetadata,
    RemoteSegmentState,
    TopicIdPartition,
)
from quorum.log.epoch_cache import EpochEntry
from tests.broker.fake_partitions import FakePartition

TP = TopicIdPartition("t", uuid.UUID(int=7), 0)
FINISHED = RemoteSegmentState.COPY_SEGMENT_FINISHED


def segment(start: int, end: int, state: RemoteSegmentState = FINISHED, epochs: tuple[EpochEntry, ...] = (),
            at: int = 0) -> RemoteSegmentMetadata:
    return RemoteSegmentMetadata(TP, uuid.uuid4(), start, end, epochs or (EpochEntry(1, start),), 1000,
                                 1_000 + end, 101, at, state, copied=state != RemoteSegmentState.COPY_SEGMENT_STARTED)


class TieredFake(FakePartition):
    """A FakePartition whose local log starts at `local_start`, below which the remote state serves."""

    def __init__(self, local_start: int, remote: RemoteLogState | None) -> None:
        super().__init__("t", leader_epoch=3)
        self.local_start = local_start
        self.remote = remote

    @property
    def local_log_start_offset(self) -> int:
        return self.local_start

    @property
    def log_start_offset(self) -> int:  # as Partition.log_start_offset
        start = self.remote.start_offset if self.remote is not None else None
        return self.local_start if start is None else min(start, self.local_start)

    @log_start_offset.setter
    def log_start_offset(self, value: int) -> None:
        pass


def answer(partition: FakePartition, spec: int) -> tuple[int, int]:
    _, offset, epoch = offset_for(partition, spec, None)
    return offset, epoch


def test_a_topic_without_remote_storage_answers_minus_one():
    partition = TieredFake(0, None)
    partition.append(5)
    assert answer(partition, -5) == (-1, -1)
    assert answer(partition, -6) == (-1, -1)
    assert answer(partition, -4)[0] == answer(partition, -2)[0] == 0


def test_before_the_remote_metadata_is_first_read_the_log_start_is_not_guessed():
    from quorum.broker.list_offsets import OffsetNotAvailable

    remote = RemoteLogState(TP)  # just started: the remote tier may hold the head of the log
    partition = TieredFake(40, remote)
    for _ in range(45):
        partition.append(1, epoch=3)
    assert answer(partition, -6) == (-1, -1)
    assert answer(partition, -4) == (40, 3)
    for spec in (-2, -5, 0):
        with pytest.raises(OffsetNotAvailable):
            answer(partition, spec)


def test_unknown_highest_uploaded_offset_with_the_whole_log_local_answers_the_log_start():
    remote = RemoteLogState(TP)
    partition = TieredFake(0, remote)
    partition.append(5, epoch=3)
    remote.load([])  # read: nothing uploaded
    assert answer(partition, -6) == (0, 3)
    assert answer(partition, -5) == (-1, -1)
    remote.invalidate()  # became leader again: unknown until the next load, and the log is all local
    assert answer(partition, -6) == (0, 3)


def test_unknown_highest_uploaded_offset_with_remote_data_answers_minus_one():
    remote = RemoteLogState(TP)
    remote.load([segment(0, 99, epochs=(EpochEntry(1, 0), EpochEntry(2, 60)))])
    remote.invalidate()  # became leader: stale until the next load
    partition = TieredFake(100, remote)
    assert partition.log_start_offset == 0
    assert answer(partition, -6) == (-1, -1)
    assert answer(partition, -5) == (-1, -1)
    assert answer(partition, -2) == (0, 1)
    assert answer(partition, -4)[0] == 100


def test_known_highest_uploaded_offset_answers_the_next_offset_with_its_epoch():
    remote = RemoteLogState(TP)
    remote.load([segment(0, 99, epochs=(EpochEntry(1, 0), EpochEntry(2, 60))), segment(100, 199, state=FINISHED,
                                                                                      epochs=(EpochEntry(2, 100),))])
    partition = TieredFake(150, remote)
    partition.log_start_offset = 0
    for _ in range(250):
        partition.append(1, epoch=2)
    assert answer(partition, -5) == (199, 2)
    assert answer(partition, -6) == (200, 2)
    assert answer(partition, -2) == (0, 1)


def test_highest_uploaded_offset_below_the_log_start_answers_the_log_start():
    # tiered storage was on, then off while retention moved the log start past what was uploaded
    remote = RemoteLogState(TP)
    remote.load([segment(0, 99, state=RemoteSegmentState.DELETE_SEGMENT_FINISHED)])
    partition = TieredFake(300, remote)
    for _ in range(310):
        partition.append(1, epoch=3)
    assert remote.highest_uploaded_offset == 99
    assert partition.log_start_offset == 300
    assert answer(partition, -6) == (300, 3)
    assert answer(partition, -5) == (99, 1)


def test_every_offset_uploaded_answers_the_log_end_in_the_leader_epoch():
    remote = RemoteLogState(TP)
    remote.load([segment(0, 9)])
    partition = TieredFake(10, remote)
    for _ in range(10):
        partition.append(1, epoch=1)
    assert answer(partition, -6) == (10, 3)


def test_the_remote_state_prefers_the_latest_lineage_and_ignores_unfinished_copies():
    remote = RemoteLogState(TP)
    old = segment(0, 99, epochs=(EpochEntry(1, 0),), at=1)
    new = segment(50, 149, epochs=(EpochEntry(1, 50), EpochEntry(4, 80)), at=2)
    started = segment(150, 249, state=RemoteSegmentState.COPY_SEGMENT_STARTED)
    remote.load([old, new, started])
    assert remote.segment_for(60) == new
    assert remote.segment_for(10) == old
    assert remote.segment_for(200) is None
    assert remote.highest_uploaded_offset == 149
    assert remote.epoch_for(90) == 4
    assert remote.epoch_entries_upto(150) == (EpochEntry(1, 0), EpochEntry(4, 80))
    remote.apply(started.moved_to(FINISHED, 101, 3))
    assert remote.highest_uploaded_offset == 249
    remote.apply(started)  # an older event of a known segment changes nothing
    assert remote.segment_for(200) is not None


def test_states_only_move_forward():
    started = segment(0, 9, state=RemoteSegmentState.COPY_SEGMENT_STARTED)
    with pytest.raises(ValueError, match="COPY_SEGMENT_STARTED cannot move to DELETE_SEGMENT_FINISHED"):
        started.moved_to(RemoteSegmentState.DELETE_SEGMENT_FINISHED, 101, 1)
    with pytest.raises(ValueError, match="leader epochs"):
        RemoteSegmentMetadata(TP, uuid.uuid4(), 10, 20, (EpochEntry(0, 5),), 1, 1, 1, 1)


def test_fetch_below_the_local_log_start_goes_to_the_remote_tier_for_consumers_only():
    from quorum.broker.fetch import read_partition
    from quorum.broker.fetch_sessions import FetchPosition
    from quorum.wire.errors import ErrorCode

    remote = RemoteLogState(TP)
    remote.load([segment(0, 99)])
    partition = TieredFake(100, remote)
    for _ in range(120):
        partition.append(1, epoch=1)
    consumer = read_partition(partition, FetchPosition(40, 1 << 20), False, 1 << 20, True)
    assert (consumer.error_code, consumer.remote, consumer.fetch_offset, consumer.log_start_offset) == (
        ErrorCode.NONE, partition, 40, 0)
    follower = read_partition(partition, FetchPosition(40, 1 << 20), False, 1 << 20, True, to_log_end=True)
    assert follower.error_code == ErrorCode.OFFSET_MOVED_TO_TIERED_STORAGE
    assert follower.log_start_offset == 0
    local = read_partition(partition, FetchPosition(100, 1 << 20), False, 1 << 20, True)
    assert local.remote is None and local.records


def test_fetch_below_the_local_log_start_before_the_remote_metadata_is_read_is_retriable():
    from quorum.broker.fetch import read_partition
    from quorum.broker.fetch_sessions import FetchPosition
    from quorum.wire.errors import ErrorCode

    partition = TieredFake(100, RemoteLogState(TP))  # just started: not OFFSET_OUT_OF_RANGE
    for _ in range(120):
        partition.append(1, epoch=1)
    consumer = read_partition(partition, FetchPosition(40, 1 << 20), False, 1 << 20, True)
    assert consumer.error_code == ErrorCode.KAFKA_STORAGE_ERROR
    follower = read_partition(partition, FetchPosition(40, 1 << 20), False, 1 << 20, True, to_log_end=True)
    assert follower.error_code == ErrorCode.OFFSET_MOVED_TO_TIERED_STORAGE
