"""ListOffsets for each special timestamp and by time, with leader epochs and Kafka's errors; and
OffsetForLeaderEpoch from the partition's epoch history."""

from __future__ import annotations

import asyncio

import pytest
from kafka.protocol.consumer import ListOffsetsResponse as ClientListOffsetsResponse

from quorum.broker.list_offsets import LIST_OFFSETS, OFFSET_FOR_LEADER_EPOCH, ListOffsetsHandler
from quorum.image.image import single_node_image
from quorum.wire.errors import ErrorCode
from tests.broker.fake_partitions import NOW_MS, FakeLookup, FakePartition
from tests.broker.wire_calls import call

ListReq = LIST_OFFSETS.request
EpochReq = OFFSET_FOR_LEADER_EPOCH.request
IMAGE = single_node_image(1, "127.0.0.1", 9092, {"a": 2}, cluster_id="c")


def partition() -> FakePartition:
    """Epoch 1: offsets 0-3 (timestamps 100, 300, 200, 400); epoch 3: 4-5 (150, 500); 6 not committed."""
    p = FakePartition("a", 0, IMAGE.topics["a"].topic_id, leader_epoch=3)
    p.append(2, timestamps=[NOW_MS + 100, NOW_MS + 300], epoch=1)
    p.append(2, timestamps=[NOW_MS + 200, NOW_MS + 400], epoch=1)
    p.append(2, timestamps=[NOW_MS + 150, NOW_MS + 500], epoch=3)
    p.append(1, timestamps=[NOW_MS + 900], epoch=3)
    p.hold_high_watermark(6)
    return p


def list_offsets(p: FakePartition, timestamp: int, version: int = 8, isolation_level: int = 0,
                 current_leader_epoch: int = -1, replica_id: int = -1, index: int = 0, twice: bool = False):
    handler = ListOffsetsHandler(FakeLookup(p), lambda: IMAGE)
    part = ListReq.ListOffsetsTopic.ListOffsetsPartition(
        partition_index=index, current_leader_epoch=current_leader_epoch, timestamp=timestamp)
    body = ListReq(replica_id=replica_id, isolation_level=isolation_level, timeout_ms=1000,
                   topics=[ListReq.ListOffsetsTopic(name="a", partitions=[part, part] if twice else [part])])
    response = asyncio.run(call(handler.list_offsets, 2, version, body))
    answer = response.topics[0].partitions[0]
    return answer.error_code, answer.timestamp, answer.offset, answer.leader_epoch


def test_latest_is_the_high_watermark_with_the_current_epoch():
    assert list_offsets(partition(), -1) == (ErrorCode.NONE, -1, 6, 3)


def test_latest_read_committed_is_the_last_stable_offset():
    p = partition()
    p.hold_last_stable_offset(4)
    assert list_offsets(p, -1, isolation_level=1) == (ErrorCode.NONE, -1, 4, 3)
    assert list_offsets(p, -1, isolation_level=0)[2] == 6


def test_latest_for_a_debugging_request_is_the_log_end_even_on_a_follower():
    p = partition()
    p.is_leader = False
    assert list_offsets(p, -1, replica_id=-2) == (ErrorCode.NONE, -1, 7, 3)
    assert list_offsets(p, -1)[0] == ErrorCode.NOT_LEADER_OR_FOLLOWER


@pytest.mark.parametrize("timestamp", [-2, -4])
def test_earliest_and_earliest_local_are_the_log_start_with_its_batch_epoch(timestamp):
    p = partition()
    assert list_offsets(p, timestamp) == (ErrorCode.NONE, -1, 0, 1)
    p.delete_before(4)
    assert list_offsets(p, timestamp) == (ErrorCode.NONE, -1, 4, 3)


def test_max_timestamp_is_the_newest_committed_record():
    p = partition()
    p.hold_high_watermark(7)
    assert list_offsets(p, -3) == (ErrorCode.NONE, NOW_MS + 900, 6, 3)


def test_max_timestamp_past_the_high_watermark_is_not_revealed():
    assert list_offsets(partition(), -3) == (ErrorCode.NONE, -1, -1, -1)


@pytest.mark.parametrize("timestamp", [-5, -6])
def test_tiered_offsets_without_a_remote_tier_are_unknown(timestamp):
    assert list_offsets(partition(), timestamp, version=11) == (ErrorCode.NONE, -1, -1, -1)


@pytest.mark.parametrize(("timestamp", "expected"), [
    (0, (NOW_MS + 100, 0, 1)),
    (NOW_MS + 250, (NOW_MS + 300, 1, 1)),
    (NOW_MS + 450, (NOW_MS + 500, 5, 3)),
    (NOW_MS + 600, (-1, -1, -1)),  # only offset 6 is that new, and it is not committed
    (NOW_MS + 1000, (-1, -1, -1)),
])
def test_by_timestamp_the_first_offset_at_or_after_it(timestamp, expected):
    assert list_offsets(partition(), timestamp) == (ErrorCode.NONE, *expected)


def test_an_empty_partition():
    p = FakePartition("a", 0, IMAGE.topics["a"].topic_id)
    assert list_offsets(p, -1) == (ErrorCode.NONE, -1, 0, 0)
    assert list_offsets(p, -2) == (ErrorCode.NONE, -1, 0, -1)
    assert list_offsets(p, -3) == (ErrorCode.NONE, -1, -1, -1)
    assert list_offsets(p, 0) == (ErrorCode.NONE, -1, -1, -1)


def test_a_new_leader_behind_its_epoch_start_answers_offset_not_available():
    p = partition()
    p.leader_epoch = 4  # elected at log end 7, high watermark still 6, nothing appended in epoch 4 yet
    assert list_offsets(p, -1) == (ErrorCode.OFFSET_NOT_AVAILABLE, -1, -1, -1)
    assert list_offsets(p, NOW_MS + 600)[0] == ErrorCode.OFFSET_NOT_AVAILABLE  # nothing found below the HW
    assert list_offsets(p, NOW_MS + 250) == (ErrorCode.NONE, NOW_MS + 300, 1, 1)  # found below it: answered
    assert list_offsets(p, -2) == (ErrorCode.NONE, -1, 0, 1)
    assert list_offsets(p, -1, replica_id=-2)[2] == 7  # no isolation level: no check
    p.hold_high_watermark(7)
    assert list_offsets(p, -1) == (ErrorCode.NONE, -1, 7, 4)


@pytest.mark.parametrize(("epoch", "error"), [(3, ErrorCode.NONE), (2, ErrorCode.FENCED_LEADER_EPOCH),
                                              (4, ErrorCode.UNKNOWN_LEADER_EPOCH)])
def test_current_leader_epoch_is_checked(epoch, error):
    assert list_offsets(partition(), -1, current_leader_epoch=epoch)[0] == error


def test_errors_carry_unknown_offsets():
    assert list_offsets(partition(), -1, index=1) == (ErrorCode.NOT_LEADER_OR_FOLLOWER, -1, -1, -1)
    assert list_offsets(partition(), -1, index=7)[0] == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    assert list_offsets(partition(), -1, twice=True)[0] == ErrorCode.INVALID_REQUEST


@pytest.mark.parametrize("version", range(LIST_OFFSETS.min_version, LIST_OFFSETS.max_version + 1))
def test_every_version_is_read_by_kafka_pythons_client_classes(version):
    handler = ListOffsetsHandler(FakeLookup(partition()), lambda: IMAGE)
    part = ListReq.ListOffsetsTopic.ListOffsetsPartition(partition_index=0, current_leader_epoch=-1, timestamp=-2)
    body = ListReq(replica_id=-1, isolation_level=0, timeout_ms=1000,
                   topics=[ListReq.ListOffsetsTopic(name="a", partitions=[part])])
    response = asyncio.run(call(handler.list_offsets, 2, version, body))
    client = ClientListOffsetsResponse.decode(response.encode(version=version), version=version)
    assert client.topics[0].partitions[0].offset == 0


# -- OffsetForLeaderEpoch ----------------------------------------------------------------------------


def end_offset(p: FakePartition, leader_epoch: int, current_leader_epoch: int = -1, index: int = 0,
               version: int = 4) -> tuple[int, int, int]:
    handler = ListOffsetsHandler(FakeLookup(p), lambda: IMAGE)
    part = EpochReq.OffsetForLeaderTopic.OffsetForLeaderPartition(
        partition=index, current_leader_epoch=current_leader_epoch, leader_epoch=leader_epoch)
    body = EpochReq(replica_id=-1, topics=[EpochReq.OffsetForLeaderTopic(topic="a", partitions=[part])])
    response = asyncio.run(call(handler.offset_for_leader_epoch, 23, version, body))
    answer = response.topics[0].partitions[0]
    return answer.error_code, answer.leader_epoch, answer.end_offset


@pytest.mark.parametrize("version", range(OFFSET_FOR_LEADER_EPOCH.min_version, OFFSET_FOR_LEADER_EPOCH.max_version + 1))
def test_end_offset_of_each_epoch(version):
    p = partition()
    assert end_offset(p, 1, version=version) == (ErrorCode.NONE, 1, 4)
    assert end_offset(p, 2, version=version) == (ErrorCode.NONE, 1, 4)  # epoch 2 led nothing: epoch 1's end
    assert end_offset(p, 3, version=version) == (ErrorCode.NONE, 3, 7)  # the current epoch ends at the log end
    assert end_offset(p, 0, version=version) == (ErrorCode.NONE, -1, -1)


def test_offset_for_leader_epoch_errors():
    p = partition()
    assert end_offset(p, 1, current_leader_epoch=2) == (ErrorCode.FENCED_LEADER_EPOCH, -1, -1)
    assert end_offset(p, 1, current_leader_epoch=9) == (ErrorCode.UNKNOWN_LEADER_EPOCH, -1, -1)
    assert end_offset(p, 1, index=1) == (ErrorCode.NOT_LEADER_OR_FOLLOWER, -1, -1)
    p.is_leader = False
    assert end_offset(p, 1)[0] == ErrorCode.NOT_LEADER_OR_FOLLOWER
