"""The pieces that wire the replication cores into the broker: the follower's log operations on a
Partition, the leader's epoch answers, and the replica fetcher's requests on the wire."""

from __future__ import annotations

import uuid

from quorum.broker import replica_fetcher_events as ev
from quorum.broker import replica_fetcher_rpc as rpc
from quorum.broker.alter_partition_rpc import decode as decode_alter
from quorum.broker.alter_partition_rpc import encode as encode_alter
from quorum.broker.fetch import replica_epoch, replica_id, requested_positions
from quorum.broker.isr import AlterPartitionRequest
from quorum.broker.log_config import LogConfig
from quorum.broker.partition import Partition
from quorum.broker.replica_fetcher_manager import PartitionFollowerLog
from quorum.raft.interface import OffsetAndEpoch
from quorum.wire.errors import ErrorCode
from quorum.wire.framing import RequestHeader
from quorum.wire.protocol import APIS, decode_request, encode_request
from quorum.wire.records import Record, build_batch
from tests.broker.test_partition import T0, TOPIC_ID, client_batch, open_partition


def leader_batch(offset: int, epoch: int, count: int = 2, pid: int = -1, seq: int = -1) -> bytes:
    records = [Record(offset + i, 1000 + i, b"k", b"v%d" % (offset + i)) for i in range(count)]
    return build_batch(records, base_offset=offset, partition_leader_epoch=epoch, producer_id=pid, producer_epoch=0,
                       base_sequence=seq)


def follower(tmp_path) -> Partition:
    partition = Partition("orders", 0, TOPIC_ID, tmp_path / "orders-0", LogConfig(), broker_id=2)
    partition.hw_follows_log_end = False
    partition.update_state(1, 5, (1, 2))
    return partition


def test_follower_appends_the_leaders_batches_and_their_producer_state(tmp_path):
    partition = follower(tmp_path)
    data = leader_batch(0, 3, pid=42, seq=0) + leader_batch(2, 5, pid=42, seq=2)
    assert partition.append_as_follower(data) == 4
    assert [(e.epoch, e.start_offset) for e in partition.log.epoch_entries] == [(3, 0), (5, 2)]
    assert partition.high_watermark == 0  # a follower's high watermark is the fetcher's to set
    partition.set_follower_high_watermark(10)
    assert partition.high_watermark == 4
    # The producer state followed: once leader, a retry of the last batch is a duplicate.
    partition.update_state(2, 6, (1, 2))
    duplicate = client_batch(2, pid=42, epoch=0, seq=2)
    assert partition.append_as_leader(duplicate, T0).duplicate  # at the records' time: Kafka refuses them an hour early


def test_a_follower_append_checked_by_the_fetcher_core_computes_no_crc_again(tmp_path, monkeypatch):
    """The fetcher core checks every batch's CRC before it asks for the append; the log does not
    compute it a second time then, and still does for any other caller."""
    from quorum.log.errors import InvalidAppendError
    from quorum.wire.records import RecordBatch

    computed = []
    original = RecordBatch.compute_crc
    monkeypatch.setattr(RecordBatch, "compute_crc", lambda batch: computed.append(1) or original(batch))
    partition = follower(tmp_path)
    assert partition.append_as_follower(leader_batch(0, 3) + leader_batch(2, 3), crc_checked=True) == 4
    assert computed == []
    corrupt = bytearray(leader_batch(4, 3))
    corrupt[-1] ^= 0xFF
    try:
        partition.append_as_follower(bytes(corrupt))
    except InvalidAppendError as exc:
        assert "CRC" in str(exc)
    else:
        raise AssertionError("a corrupt batch was appended")
    assert computed and partition.log_end_offset == 4


def test_truncation_inside_a_batch_takes_the_whole_batch(tmp_path):
    partition = follower(tmp_path)
    partition.append_as_follower(leader_batch(0, 3, count=3) + leader_batch(3, 4, count=3))
    partition.set_follower_high_watermark(6)
    partition.truncate_to(4)
    assert partition.log_end_offset == 3
    assert partition.high_watermark == 3
    assert [(e.epoch, e.start_offset) for e in partition.log.epoch_entries] == [(3, 0)]
    log = PartitionFollowerLog(partition)
    assert log.latest_epoch() == 3
    assert log.end_offset_for_epoch(7) == OffsetAndEpoch(3, 3)
    assert log.end_offset_for_epoch(2) is None


def test_an_epoch_below_every_entry_ends_where_the_first_entry_starts(tmp_path):
    partition = open_partition(tmp_path)
    partition.log.append(leader_batch(0, 4) + leader_batch(2, 6))
    found = partition.end_offset_for_epoch(2)
    assert (found.leader_epoch, found.end_offset) == (2, 0)
    found = partition.end_offset_for_epoch(5)
    assert (found.leader_epoch, found.end_offset) == (4, 2)


def test_the_fetchers_fetch_is_a_replica_fetch_on_the_wire():
    topic_id = uuid.uuid4()
    request = ev.FetchRequest(2, 17, 500, 1, 1 << 20, (
        ev.FetchPartition(("orders", 0), topic_id, 5, 10, 4, 0, 1 << 16),))
    body = rpc.encode_fetch(request)
    frame = encode_request(rpc.FETCH, RequestHeader(1, rpc.FETCH_VERSION, 1, "t"), body)
    decoded = decode_request(frame[4:]).body  # as the leader's listener reads it
    assert replica_id(decoded, rpc.FETCH_VERSION) == 2
    assert replica_epoch(decoded, rpc.FETCH_VERSION) == 17
    positions, forgotten = requested_positions(decoded, rpc.FETCH_VERSION)
    assert list(positions) == [(topic_id, 0)] and not forgotten
    position = positions[(topic_id, 0)]
    assert (position.fetch_offset, position.current_leader_epoch, position.last_fetched_epoch) == (10, 5, 4)

    schema = rpc.FETCH.response
    data = schema.FetchableTopicResponse.PartitionData
    response = schema(throttle_time_ms=0, error_code=0, session_id=0, responses=[
        schema.FetchableTopicResponse(topic="", topic_id=topic_id, partitions=[
            data(partition_index=0, error_code=0, high_watermark=8, last_stable_offset=8, log_start_offset=0,
                 diverging_epoch=data.EpochEndOffset(epoch=4, end_offset=9), records=b""),
        ])])
    answer = rpc.decode_fetch(request, response)
    assert answer.partitions[0].topic_partition == ("orders", 0)
    assert answer.partitions[0].diverging_epoch == OffsetAndEpoch(9, 4)


def test_alter_partition_goes_with_broker_epochs_and_comes_back_for_our_partition():
    topic_id = uuid.uuid4()
    request = AlterPartitionRequest(topic_id, 1, 101, 7, 9, ((101, 3), (102, 5)))
    body = encode_alter(request, 3)
    encode_request(APIS[56], RequestHeader(56, 3, 1, "t"), body)  # encodes at v3
    assert [(b.broker_id, b.broker_epoch) for b in body.topics[0].partitions[0].new_isr_with_epochs] == [
        (101, 3), (102, 5)]
    schema = APIS[56].response
    data = schema.TopicData.PartitionData
    answer = decode_alter(request, schema(throttle_time_ms=0, error_code=0, topics=[schema.TopicData(
        topic_id=topic_id, partitions=[data(partition_index=1, error_code=0, leader_id=101, leader_epoch=8,
                                            isr=[101, 102], leader_recovery_state=0, partition_epoch=10)])]))
    assert (answer.error, answer.leader_epoch, answer.partition_epoch, answer.isr) == (0, 8, 10, (101, 102))
    refused = decode_alter(request, schema(throttle_time_ms=0, error_code=ErrorCode.STALE_BROKER_EPOCH, topics=[]))
    assert refused.error == ErrorCode.STALE_BROKER_EPOCH
