"""Fetch for consumers: errors in Kafka's order, offsets in every answer, KIP-74 sizes, the long
poll, sessions through the handler, and every version read back by kafka-python's client classes."""

from __future__ import annotations

import asyncio
import uuid

import pytest
from kafka.protocol.consumer import FetchResponse as ClientFetchResponse

from quorum.broker.fetch import FETCH, FetchHandler, register_read_path
from quorum.broker.fetch_sessions import FetchSessionCache
from quorum.broker.partition_view import AppendNotifier
from quorum.image.image import BrokerInfo, MetadataImage, PartitionInfo, TopicInfo, single_node_image
from quorum.net.dispatch import Dispatcher
from quorum.wire.errors import ErrorCode
from quorum.wire.records import iter_batches
from tests.broker.fake_partitions import FakeLookup, FakePartition
from tests.broker.wire_calls import call

Req = FETCH.request
FetchTopic = Req.FetchTopic
FetchPartition = FetchTopic.FetchPartition
VERSIONS = range(FETCH.min_version, FETCH.max_version + 1)


class Broker:
    """One broker leading topic "a" (2 partitions, both hosted here) and "b" (led by broker 2)."""

    def __init__(self) -> None:
        image = single_node_image(1, "127.0.0.1", 9092, {"a": 2, "b": 1}, cluster_id="c")
        b = image.topics["b"]
        b = TopicInfo("b", b.topic_id, (PartitionInfo(0, 2, 7, (2,), (2,)),), b.topic_epoch)
        self.image = MetadataImage(cluster_id="c", controller_id=1,
                                   brokers={**image.brokers, 2: BrokerInfo(2, "10.0.0.2", 9093, "rack-2")},
                                   topics={**image.topics, "b": b})
        a = image.topics["a"]
        self.a0 = FakePartition("a", 0, a.topic_id, leader_epoch=0)
        self.a1 = FakePartition("a", 1, a.topic_id, leader_epoch=0)
        self.lookup = FakeLookup(self.a0, self.a1)
        self.notifier = AppendNotifier()
        self.handler = FetchHandler(self.lookup, self.notifier, lambda: self.image)

    async def fetch(self, version: int, wanted: list[tuple], **fields) -> dict:
        response = await call(self.handler.handle, 1, version, request(version, wanted, **fields))
        self.last = response
        return answers(response, version)


def request(version: int, wanted: list[tuple], max_wait_ms: int = 0, min_bytes: int = 1,
            max_bytes: int = 1 << 20, session_id: int = 0, session_epoch: int = -1, isolation_level: int = 0,
            replica_id: int = -1, forgotten: list[tuple] = ()) -> object:
    """`wanted`: (topic name, topic id, partition, fetch offset, partition max bytes, current leader epoch
    [, last fetched epoch])."""
    topics: dict = {}
    for name, topic_id, index, offset, max_part, epoch, *last in wanted:
        topics.setdefault((name, topic_id), []).append(FetchPartition(
            partition=index, current_leader_epoch=epoch, fetch_offset=offset,
            last_fetched_epoch=last[0] if last else -1, log_start_offset=-1, partition_max_bytes=max_part))
    fields = dict(
        max_wait_ms=max_wait_ms, min_bytes=min_bytes, max_bytes=max_bytes, isolation_level=isolation_level,
        session_id=session_id, session_epoch=session_epoch, rack_id="",
        topics=[FetchTopic(topic=name, topic_id=topic_id, partitions=parts)
                for (name, topic_id), parts in topics.items()],
        forgotten_topics_data=[Req.ForgottenTopic(topic=name, topic_id=topic_id, partitions=parts)
                               for name, topic_id, parts in forgotten],
    )
    if version >= 15:
        fields["replica_state"] = Req.ReplicaState(replica_id=replica_id, replica_epoch=-1)
    else:
        fields["replica_id"] = replica_id
    return Req(**fields)


def answers(response, version: int) -> dict:
    """Partition answers by (topic name or id, partition)."""
    return {(t.topic_id if version >= 13 else t.topic, p.partition_index): p
            for t in response.responses for p in t.partitions}


def want(p: FakePartition, offset: int, max_bytes: int = 1 << 20, epoch: int = -1, last_fetched: int = -1) -> tuple:
    return (p.topic, p.topic_id, p.partition, offset, max_bytes, epoch, last_fetched)


def key(p: FakePartition, version: int) -> tuple:
    return (p.topic_id if version >= 13 else p.topic, p.partition)


def offsets(records: bytes | None) -> list[int]:
    return [record.offset for batch in iter_batches(records or b"") for record in batch]


def run(coro):
    return asyncio.run(coro)


@pytest.mark.parametrize("version", VERSIONS)
def test_records_and_offsets_at_every_version_and_kafka_python_reads_them(version):
    broker = Broker()
    for _ in range(3):
        broker.a0.append(2)
    broker.a0.delete_before(2)
    broker.a0.hold_high_watermark(6)  # the last batch (6, 7) is not committed yet
    got = run(broker.fetch(version, [want(broker.a0, 3)]))[key(broker.a0, version)]
    assert got.error_code == ErrorCode.NONE
    assert (got.high_watermark, got.last_stable_offset, got.log_start_offset) == (6, 6, 2 if version >= 5 else -1)
    assert offsets(got.records) == [2, 3, 4, 5]  # whole batches, from the one holding offset 3
    client = ClientFetchResponse.decode(broker.last.encode(version=version), version=version)
    assert client.responses[0].partitions[0].high_watermark == 6


def test_an_offset_between_the_high_watermark_and_the_log_end_is_valid_and_empty():
    broker = Broker()
    broker.a0.append(4)
    broker.a0.hold_high_watermark(2)
    got = run(broker.fetch(12, [want(broker.a0, 3)]))[("a", 0)]
    assert (got.error_code, got.high_watermark, offsets(got.records)) == (ErrorCode.NONE, 2, [])


@pytest.mark.parametrize("offset", [0, 7, -1])
def test_offsets_outside_the_log_are_out_of_range_with_unknown_offsets(offset):
    broker = Broker()
    broker.a0.append(4)
    broker.a0.append(2)
    broker.a0.delete_before(4)
    got = run(broker.fetch(12, [want(broker.a0, offset)]))[("a", 0)]
    assert got.error_code == ErrorCode.OFFSET_OUT_OF_RANGE
    assert (got.high_watermark, got.last_stable_offset, got.log_start_offset) == (-1, -1, -1)


@pytest.mark.parametrize(("epoch", "error"), [(-1, ErrorCode.NONE), (5, ErrorCode.NONE),
                                              (4, ErrorCode.FENCED_LEADER_EPOCH), (6, ErrorCode.UNKNOWN_LEADER_EPOCH)])
def test_current_leader_epoch_is_checked(epoch, error):
    broker = Broker()
    broker.a0.leader_epoch = 5
    broker.a0.append(1)
    assert run(broker.fetch(12, [want(broker.a0, 0, epoch=epoch)]))[("a", 0)].error_code == error


def diverging_log() -> Broker:
    """Epoch 1 wrote offsets 0-3; a new leader (epoch 2) kept only 0-1 and wrote 2-4."""
    broker = Broker()
    broker.a0.leader_epoch = 2
    broker.a0.append(2, epoch=1)
    broker.a0.append(3, epoch=2)
    return broker


def test_a_consumer_past_the_end_of_its_epoch_is_told_where_the_logs_diverge():
    broker = diverging_log()
    # The consumer read 0-3 from the old leader (last batch in epoch 1) and asks for offset 4.
    got = run(broker.fetch(12, [want(broker.a0, 4, last_fetched=1)], max_wait_ms=600_000))[("a", 0)]
    assert (got.error_code, offsets(got.records), got.high_watermark) == (ErrorCode.NONE, [], 5)
    assert (got.diverging_epoch.epoch, got.diverging_epoch.end_offset) == (1, 2)
    client = ClientFetchResponse.decode(broker.last.encode(version=12), version=12)
    assert client.responses[0].partitions[0].diverging_epoch.end_offset == 2


def test_a_consumer_whose_epoch_agrees_reads_on():
    broker = diverging_log()
    got = run(broker.fetch(12, [want(broker.a0, 2, last_fetched=1), want(broker.a1, 0)]))[("a", 0)]
    assert got.diverging_epoch is None and offsets(got.records) == [2, 3, 4]
    got = run(broker.fetch(12, [want(broker.a0, 3, last_fetched=2)]))[("a", 0)]
    assert got.diverging_epoch is None and offsets(got.records) == [2, 3, 4]


def test_a_last_fetched_epoch_the_log_does_not_know_is_out_of_range():
    broker = diverging_log()
    got = run(broker.fetch(12, [want(broker.a0, 1, last_fetched=0)]))[("a", 0)]
    assert got.error_code == ErrorCode.OFFSET_OUT_OF_RANGE


def test_the_epoch_is_checked_before_leadership_as_kafka_does():
    broker = Broker()
    broker.a0.is_leader = False
    broker.a0.leader_epoch = 5
    got = run(broker.fetch(12, [want(broker.a0, 0, epoch=4), want(broker.a1, 0)]))
    assert got[("a", 0)].error_code == ErrorCode.FENCED_LEADER_EPOCH
    broker.a0.leader_epoch = 4
    assert run(broker.fetch(12, [want(broker.a0, 0, epoch=4)]))[("a", 0)].error_code == ErrorCode.NOT_LEADER_OR_FOLLOWER


def test_partitions_not_hosted_unknown_or_missing_get_kafkas_errors():
    broker = Broker()
    b = broker.image.topics["b"]
    wanted = [("b", b.topic_id, 0, 0, 100, -1), ("a", broker.a0.topic_id, 9, 0, 100, -1),
              ("nope", uuid.uuid4(), 0, 0, 100, -1)]
    got = run(broker.fetch(12, wanted))
    assert got[("b", 0)].error_code == ErrorCode.NOT_LEADER_OR_FOLLOWER
    assert got[("a", 9)].error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    assert got[("nope", 0)].error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    got = run(broker.fetch(13, wanted))
    assert got[(b.topic_id, 0)].error_code == ErrorCode.NOT_LEADER_OR_FOLLOWER
    assert got[(wanted[2][1], 0)].error_code == ErrorCode.UNKNOWN_TOPIC_ID


def test_v16_leadership_errors_name_the_current_leader_and_its_endpoint():
    broker = Broker()
    b = broker.image.topics["b"]
    got = run(broker.fetch(16, [("b", b.topic_id, 0, 0, 100, -1)]))[(b.topic_id, 0)]
    assert (got.current_leader.leader_id, got.current_leader.leader_epoch) == (2, 7)
    [endpoint] = broker.last.node_endpoints
    assert (endpoint.node_id, endpoint.host, endpoint.port, endpoint.rack) == (2, "10.0.0.2", 9093, "rack-2")
    client = ClientFetchResponse.decode(broker.last.encode(version=16), version=16)
    assert client.node_endpoints[0].node_id == 2


def test_follower_fetches_are_not_served_yet():
    broker = Broker()
    broker.a0.append(1)
    for version in (12, 15):
        got = run(broker.fetch(version, [want(broker.a0, 0)], replica_id=3))
        assert got[key(broker.a0, version)].error_code == ErrorCode.NOT_LEADER_OR_FOLLOWER


def test_read_committed_reads_up_to_the_last_stable_offset():
    broker = Broker()
    broker.a0.append(2)
    broker.a0.append(2)
    broker.a0.hold_last_stable_offset(2)
    got = run(broker.fetch(12, [want(broker.a0, 0)], isolation_level=1))[("a", 0)]
    assert (offsets(got.records), got.last_stable_offset, got.high_watermark) == ([0, 1], 2, 4)
    assert got.aborted_transactions == []
    plain = run(broker.fetch(12, [want(broker.a0, 0)]))[("a", 0)]
    assert offsets(plain.records) == [0, 1, 2, 3] and plain.aborted_transactions is None


# -- sizes (KIP-74) --------------------------------------------------------------------------------


def test_the_first_batch_is_returned_whole_even_past_both_limits():
    broker = Broker()
    big = broker.a0.append(5, value_size=500)
    broker.a0.append(1)
    got = run(broker.fetch(12, [want(broker.a0, 0, max_bytes=10)], max_bytes=10))[("a", 0)]
    assert got.records == big


def test_partition_max_bytes_keeps_whole_batches_that_fit():
    broker = Broker()
    first = broker.a0.append(1, value_size=100)
    broker.a0.append(1, value_size=100)
    got = run(broker.fetch(12, [want(broker.a0, 0, max_bytes=len(first) + 10)]))[("a", 0)]
    assert got.records == first


def test_the_response_limit_leaves_later_partitions_only_what_fits():
    broker = Broker()
    first = broker.a0.append(1, value_size=300)
    broker.a1.append(1, value_size=300)
    got = run(broker.fetch(12, [want(broker.a0, 0), want(broker.a1, 0)], max_bytes=len(first) + 50))
    assert got[("a", 0)].records == first
    assert got[("a", 1)].records in (b"", None) and got[("a", 1)].high_watermark == 1
    # With room for both, both come.
    got = run(broker.fetch(12, [want(broker.a0, 0), want(broker.a1, 0)], max_bytes=4 * len(first)))
    assert offsets(got[("a", 1)].records) == [0]


def test_an_empty_first_partition_does_not_use_up_the_oversize_allowance():
    broker = Broker()
    big = broker.a1.append(3, value_size=400)
    got = run(broker.fetch(12, [want(broker.a0, 0), want(broker.a1, 0)], max_bytes=10))
    assert got[("a", 1)].records == big


# -- long poll --------------------------------------------------------------------------------------


def test_a_waiting_fetch_is_answered_when_records_arrive():
    broker = Broker()

    async def scenario():
        task = asyncio.create_task(broker.fetch(12, [want(broker.a0, 0)], max_wait_ms=30_000))
        for _ in range(5):
            await asyncio.sleep(0)
        assert not task.done()
        broker.notifier.appended()  # a wake-up with nothing new: it waits on
        for _ in range(5):
            await asyncio.sleep(0)
        assert not task.done()
        broker.a0.append(3)
        broker.notifier.appended()
        return await asyncio.wait_for(task, 10)

    got = run(scenario())[("a", 0)]
    assert offsets(got.records) == [0, 1, 2]


def test_min_bytes_holds_the_answer_until_enough_has_arrived():
    broker = Broker()

    async def scenario():
        task = asyncio.create_task(broker.fetch(12, [want(broker.a0, 0)], max_wait_ms=30_000, min_bytes=400))
        await asyncio.sleep(0.01)
        broker.a0.append(1, value_size=10)
        broker.notifier.appended()
        await asyncio.sleep(0.01)
        assert not task.done()
        broker.a0.append(1, value_size=500)
        broker.notifier.appended()
        return await asyncio.wait_for(task, 10)

    assert offsets(run(scenario())[("a", 0)].records) == [0, 1]


def test_a_fetch_with_nothing_to_read_is_answered_empty_after_max_wait():
    broker = Broker()
    broker.a0.append(2)
    got = run(broker.fetch(12, [want(broker.a0, 2)], max_wait_ms=20))[("a", 0)]
    assert (got.error_code, got.high_watermark, offsets(got.records)) == (ErrorCode.NONE, 2, [])


def test_an_error_is_answered_at_once_however_long_the_wait():
    broker = Broker()

    async def scenario():
        return await asyncio.wait_for(broker.fetch(12, [want(broker.a0, 0), want(broker.a1, 5)],
                                                   max_wait_ms=600_000), 10)

    assert run(scenario())[("a", 1)].error_code == ErrorCode.OFFSET_OUT_OF_RANGE


# -- sessions through the handler -----------------------------------------------------------------


@pytest.mark.parametrize("version", [7, 12, 13])
def test_a_session_answers_only_what_changed(version):
    broker = Broker()
    broker.a0.append(2)
    broker.a1.append(2)
    got = run(broker.fetch(version, [want(broker.a0, 0), want(broker.a1, 2)], session_epoch=0))
    session_id = broker.last.session_id
    assert session_id != 0 and set(got) == {key(broker.a0, version), key(broker.a1, version)}
    # Incremental, a0 moved to offset 2 (re-sent), a1 unchanged (not sent): nothing new anywhere.
    got = run(broker.fetch(version, [want(broker.a0, 2)], session_id=session_id, session_epoch=1))
    assert got == {} and broker.last.session_id == session_id
    broker.a1.append(1)
    got = run(broker.fetch(version, [], session_id=session_id, session_epoch=2))
    assert list(got) == [key(broker.a1, version)] and offsets(got[key(broker.a1, version)].records) == [2]
    # A stale epoch is refused for the whole request.
    run(broker.fetch(version, [], session_id=session_id, session_epoch=2))
    assert (broker.last.error_code, broker.last.session_id, broker.last.responses) == (
        ErrorCode.INVALID_FETCH_SESSION_EPOCH, 0, [])


def test_an_unknown_session_is_refused_and_forgetting_everything_closes_it():
    broker = Broker()
    run(broker.fetch(12, [], session_id=12345, session_epoch=1))
    assert broker.last.error_code == ErrorCode.FETCH_SESSION_ID_NOT_FOUND
    run(broker.fetch(12, [want(broker.a0, 0)], session_epoch=0))
    session_id = broker.last.session_id
    run(broker.fetch(12, [], session_id=session_id, session_epoch=1, forgotten=[("a", None, [0])]))
    assert broker.last.session_id == 0 and broker.handler.sessions.get(session_id) is None


def test_a_full_cache_still_answers_without_a_session():
    broker = Broker()
    broker.handler.sessions = FetchSessionCache(max_slots=0)
    broker.a0.append(1)
    got = run(broker.fetch(12, [want(broker.a0, 0)], session_epoch=0))
    assert broker.last.session_id == 0 and offsets(got[("a", 0)].records) == [0]


def test_register_read_path_serves_fetch_list_offsets_and_offset_for_leader_epoch():
    broker = Broker()
    dispatcher = Dispatcher()
    path = register_read_path(dispatcher, broker.lookup, broker.notifier, lambda: broker.image)
    assert {1, 2, 23} <= set(dispatcher.served)
    assert dispatcher.served[1].max_version == FETCH.max_version
    assert path.fetch.sessions.max_slots == 1000
