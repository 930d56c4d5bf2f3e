"""OFFSET_OUT_OF_RANGE resets only when the data is really gone.

The rule (`client_epochs.out_of_range.resolve`) as hypothesis properties; the guard's counters with a
fake bounds source (a position the current leader holds is not a reset, whoever answered out of
range); `LogBoundsClient` against a real broker, retrying a leader epoch the broker does not know;
and the wrappers against a real broker whose retention deleted the records below the committed
offset, with no committed offset at all, and with policy error/none: `client_epochs.confluent.Consumer`
in tests of its own (librdkafka's restart paths), kafka-python's and the async wrappers
(`client_epochs.aio.AIOConsumer`, `client_epochs.aiokafka.AIOKafkaConsumer`) in scenarios written once
with the sides of tests/client_epochs/sides.py.
"""

from __future__ import annotations

import dataclasses
import logging
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import Consumer as RawConsumer
from confluent_kafka import KafkaError, Producer
from confluent_kafka import TopicPartition as CkPartition
from confluent_kafka.admin import AdminClient, NewTopic
from hypothesis import given
from hypothesis import strategies as st

from client_epochs import EVERYTHING, MetadataClient, PartitionMetadata, TopicPartition
from client_epochs.confluent import Consumer
from client_epochs.consumer_guard import EpochGuard
from client_epochs.errors import NoOffsetForPartitionError, OffsetOutOfRangeError
from client_epochs.log_bounds import LogBounds, LogBoundsClient, LogBoundsUnavailableError
from client_epochs.out_of_range import normalize_policy, resolve
from quorum.wire.internal_metadata import InternalMetadata
from tests.client_epochs.sides import ASYNC_SIDES, KafkaPythonSide, Side, offsets_of, side_of
from tests.client_epochs.sides import consume as consume_sides
from tests.client_epochs.wrapper_cluster import consume
from tests.test_broker_processes import BROKER, QUIET, one_broker
from tests.test_controller_processes import create, wait_until

pytestmark = pytest.mark.timeout(120)

TP = TopicPartition("events", 0)
POLICIES = ["earliest", "latest", "smallest", "largest", "beginning", "end"]


@st.composite
def bounds_and_position(draw) -> tuple[int, int, int]:
    log_start = draw(st.integers(0, 1 << 40))
    log_end = log_start + draw(st.integers(0, 1 << 20))
    position = draw(st.one_of(st.integers(0, log_start + 5), st.integers(max(log_end - 5, 0), log_end + (1 << 20)),
                              st.integers(0, 1 << 41)))
    return log_start, log_end, position


# --- the rule ---------------------------------------------------------------------------------------------


@given(bounds_and_position(), st.sampled_from(POLICIES))
def test_the_result_is_in_the_log_and_never_below_the_position_unless_the_log_is_shorter(case, policy):
    log_start, log_end, position = case
    got = resolve(TP, position, log_start, log_end, policy)
    assert log_start <= got.offset <= log_end
    assert got.reset == (not log_start <= position <= log_end)
    if got.offset < position:  # going back only to the end of a log shorter than what was read
        assert position > log_end and got.offset == log_end
    if position > log_end:  # never to the start, which would deliver again what was consumed
        assert got.offset == log_end


@given(bounds_and_position(), st.sampled_from(POLICIES))
def test_a_position_the_leader_holds_is_resumed_and_is_not_a_reset(case, policy):
    log_start, log_end, _ = case
    for position in {log_start, log_end, (log_start + log_end) // 2}:
        got = resolve(TP, position, log_start, log_end, policy)
        assert (got.offset, got.reset) == (position, False)
        assert "stale" in got.reason


@given(bounds_and_position(), st.sampled_from(POLICIES))
def test_deleted_records_reset_by_the_policy(case, policy):
    log_start, log_end, _ = case
    if log_start == 0:
        return
    got = resolve(TP, log_start - 1, log_start, log_end, policy)
    assert got.reset
    assert got.offset == (log_start if normalize_policy(policy) == "earliest" else log_end)


@given(bounds_and_position(), st.sampled_from(POLICIES), st.sampled_from([None, -1, -1001]))
def test_no_known_position_starts_by_the_policy_and_is_not_a_reset(case, policy, position):
    log_start, log_end, _ = case
    got = resolve(TP, position, log_start, log_end, policy)
    assert got.offset == (log_start if normalize_policy(policy) == "earliest" else log_end)
    assert not got.reset


@given(bounds_and_position(), st.sampled_from(["error", "none", "ERROR"]))
def test_policy_error_raises_exactly_where_the_others_would_reset(case, policy):
    log_start, log_end, position = case
    if log_start <= position <= log_end:
        assert resolve(TP, position, log_start, log_end, policy).offset == position
        return
    with pytest.raises(OffsetOutOfRangeError) as caught:
        resolve(TP, position, log_start, log_end, policy)
    error = caught.value
    assert (error.partition, error.position, error.log_start, error.log_end) == (TP, position, log_start, log_end)
    assert "events-0" in str(error) and str(position) in str(error) and f"[{log_start}, {log_end}]" in str(error)


def test_policy_error_without_a_position_is_no_offset_for_partition():
    with pytest.raises(NoOffsetForPartitionError, match=r"events-0 has no committed .* is \[3, 9\]"):
        resolve(TP, None, 3, 9, "none")


@pytest.mark.parametrize("bad", ["oldest", "", "by_duration:PT1H"])
def test_an_unknown_policy_is_refused_by_name(bad):
    with pytest.raises(ValueError, match=repr(bad)):
        resolve(TP, 5, 0, 10, bad)


# --- the guard, with a fake source of bounds --------------------------------------------------------------


class FakeBounds:
    def __init__(self, log_start: int, log_end: int) -> None:
        self.bounds = LogBounds(TP, log_start, log_end, leader_id=2, leader_epoch=7, broker="leader:9092")
        self.asked: list[tuple[TopicPartition, object]] = []

    def fetch(self, tp, floor=None, timeout=30.0) -> LogBounds:
        self.asked.append((tp, floor))
        return self.bounds

    def close(self) -> None:
        pass


def guard_with(log_start: int, log_end: int) -> tuple[EpochGuard, FakeBounds]:
    bounds = FakeBounds(log_start, log_end)
    return EpochGuard(MetadataClient("127.0.0.1:1"), log_bounds=bounds), bounds


def test_an_out_of_range_answer_for_a_position_the_current_leader_holds_is_not_a_reset():
    """KAFKA-6262: a broker named leader by stale metadata answered OFFSET_OUT_OF_RANGE for 500; the
    current leader holds [100, 900]. The consumer goes on at 500, whatever its policy."""
    guard, bounds = guard_with(100, 900)
    for policy in ("earliest", "latest", "error"):
        got = guard.resolve_out_of_range(TP, 500, policy)
        assert (got.offset, got.reset) == (500, False)
    assert (guard.resets, guard.out_of_range_without_reset) == (0, 3)
    assert bounds.asked == [(TP, None)] * 3


def test_only_deleted_or_truncated_data_counts_as_a_reset():
    guard, _ = guard_with(100, 900)
    assert guard.resolve_out_of_range(TP, 40, "earliest").offset == 100
    assert guard.resolve_out_of_range(TP, 950, "earliest").offset == 900
    assert guard.resolve_out_of_range(TP, None, "earliest").offset == 100  # a start, not a reset
    assert (guard.resets, guard.out_of_range_without_reset) == (2, 0)


def test_the_lookup_honours_the_floor_the_guard_holds_and_refuses_a_bad_policy_first():
    guard, bounds = guard_with(0, 10)
    floor = InternalMetadata(4, 7)
    guard.floors[TP] = floor
    guard.resolve_out_of_range(TP, 5, "latest")
    assert bounds.asked == [(TP, floor)]
    with pytest.raises(ValueError, match="'oldest'"):
        guard.resolve_out_of_range(TP, 5, "oldest")
    assert len(bounds.asked) == 1


# --- against a real broker --------------------------------------------------------------------------------


class Broker:
    def __init__(self, cluster, address: str) -> None:
        self.address = address
        self.admin = AdminClient({"bootstrap.servers": address, **QUIET})
        self.data = Path(cluster.specs[BROKER].directory) / "data"

    def topic(self, name: str, messages: int, partitions: int = 1, **config: str) -> None:
        create(self.admin, NewTopic(name, partitions, 1, config=config))
        for partition in range(partitions):
            self.produce(name, range(messages), partition)

    def produce(self, name: str, numbers, partition: int = 0) -> None:
        producer = Producer({"bootstrap.servers": self.address, "linger.ms": 0, **QUIET})
        for n in numbers:  # one batch each, so that segment.ms=1 rolls a segment for each
            producer.produce(name, f"{name}-{n}".encode(), partition=partition)
            assert producer.flush(30) == 0

    def retained(self, name: str, messages: int) -> int:
        """A topic whose retention deleted every segment but the active one: its log start offset."""
        self.topic(name, messages, **{"segment.ms": "1", "retention.bytes": "0"})
        directory = self.data / f"{name}-0"

        def one_segment_left() -> list[Path]:
            segments = list(directory.glob("*.log"))
            return segments if len(segments) == 1 else []

        log_start = int(wait_until(f"retention of {name}", one_segment_left)[0].stem)
        assert 0 < log_start < messages
        return log_start

    def commit(self, group: str, name: str, offset: int) -> None:
        raw = RawConsumer({"bootstrap.servers": self.address, "group.id": group, **QUIET})
        try:
            raw.commit(offsets=[CkPartition(name, 0, offset)], asynchronous=False)
        finally:
            raw.close()

    def consumer(self, group: str, reset: str, **config) -> Consumer:
        # KIP-848's members take their session and heartbeat interval from the broker, and refuse these
        classic = {} if config.get("group.protocol") == "consumer" else {"session.timeout.ms": 6000,
                                                                          "heartbeat.interval.ms": 500}
        return Consumer({"bootstrap.servers": self.address, "group.id": group, "auto.offset.reset": reset,
                         "enable.auto.commit": False, **classic, **config, **QUIET})


@pytest.fixture(scope="module")
def broker(tmp_path_factory) -> Iterator[Broker]:
    with one_broker(tmp_path_factory.mktemp("out-of-range"), {"log.retention.check.interval.ms": "200"}) as (
            cluster, address):
        yield Broker(cluster, address)


def test_log_bounds_come_from_the_leader_and_an_unknown_leader_epoch_is_asked_again(broker):
    broker.topic("bounds", 6)

    class AheadOnce(MetadataClient):
        """The first answer names a leader epoch the broker does not have yet (UNKNOWN_LEADER_EPOCH)."""

        calls = 0

        def refresh_until_current(self, topics, floors=None, timeout=30.0):
            got = super().refresh_until_current(topics, floors, timeout)
            AheadOnce.calls += 1
            if AheadOnce.calls > 1:
                return got
            tp = TopicPartition("bounds", 0)
            ahead = dataclasses.replace(got.partitions[tp], leader_epoch=got.partitions[tp].leader_epoch + 1)
            return dataclasses.replace(got, partitions={**got.partitions, tp: ahead})

    with AheadOnce(broker.address) as metadata:
        client = LogBoundsClient(metadata, backoff_s=0.01)
        try:
            bounds = client.fetch(TopicPartition("bounds", 0))
        finally:
            client.close()
    assert (bounds.log_start, bounds.log_end, bounds.leader_id) == (0, 6, BROKER)
    assert client.retries == 1 and AheadOnce.calls == 2


@pytest.mark.parametrize("strategy", ["range", "cooperative-sticky", "consumer"])
def test_retention_removed_the_committed_offset_the_wrapper_resets_to_the_new_log_start(broker, strategy):
    """Committed offset 2; retention deleted everything below the active segment. A reset, confirmed by
    the leader: the wrapper goes to the new log start and counts one. Eager groups restart the
    partition with assign(), cooperative ones and KIP-848's (`group.protocol=consumer`, "consumer"
    here, whose member takes over the simple group the commit made) with incremental (un)assign."""
    name = f"retained-{strategy}"
    log_start = broker.retained(name, 10)
    broker.commit(f"{name}-group", name, 2)
    protocol = {"group.protocol": "consumer"} if strategy == "consumer" else {"partition.assignment.strategy": strategy}
    consumer = broker.consumer(f"{name}-group", "earliest", **protocol)
    try:
        consumer.subscribe([name])
        got = consume(consumer, 10 - log_start)
        assert [m.offset() for m in got] == list(range(log_start, 10))
        assert [m.value() for m in got] == [f"{name}-{n}".encode() for n in range(log_start, 10)]
        assert (consumer.resets, consumer.out_of_range_without_reset) == (1, 0)
    finally:
        consumer.close()


def test_policy_error_with_the_data_gone_raises_until_the_partition_is_seeked(broker):
    log_start = broker.retained("retained-error", 10)
    broker.commit("retained-error-group", "retained-error", 2)
    consumer = broker.consumer("retained-error-group", "error")
    try:
        consumer.subscribe(["retained-error"])
        with pytest.raises(OffsetOutOfRangeError) as caught:
            consume(consumer, 1)
        error = caught.value
        assert (error.partition, error.position, error.log_start, error.log_end) == (
            TopicPartition("retained-error", 0), 2, log_start, 10)
        assert "retained-error-0" in str(error) and "records 2.." in str(error)
        with pytest.raises(OffsetOutOfRangeError):  # still stopped: asked again, same answer
            consume(consumer, 1)
        consumer.seek(CkPartition("retained-error", 0, log_start))
        assert [m.offset() for m in consume(consumer, 10 - log_start)] == list(range(log_start, 10))
        assert consumer.resets == 0
    finally:
        consumer.close()


def test_without_a_committed_offset_earliest_reads_from_the_start_and_latest_only_new_records(broker):
    broker.topic("fresh", 5)
    earliest = broker.consumer("fresh-earliest", "smallest")
    latest = broker.consumer("fresh-latest", "latest")
    try:
        earliest.subscribe(["fresh"])
        assert [m.offset() for m in consume(earliest, 5)] == list(range(5))
        latest.subscribe(["fresh"])

        def started_at_the_end() -> bool:
            assert latest.consume(10, 0.2) == []
            return [p.offset for p in latest.assignment()] == [5]

        wait_until("the latest consumer assigned at the log end", started_at_the_end)
        broker.produce("fresh", range(5, 8))
        got = consume(latest, 3)
        assert [(m.offset(), m.value()) for m in got] == [(n, f"fresh-{n}".encode()) for n in range(5, 8)]
        for consumer in (earliest, latest):
            assert (consumer.resets, consumer.out_of_range_without_reset) == (0, 0)
    finally:
        earliest.close()
        latest.close()


def test_an_eager_restart_keeps_the_other_partitions_positions_and_the_users_pauses(broker):
    """An eager group can restart a stopped partition only by assigning everything again: partition 1
    (nothing committed, latest) is restarted at its end while partition 0, which the user paused
    before delivering anything, stays paused and later starts at its committed offset."""
    broker.topic("two", 3, partitions=2)
    broker.commit("two-group", "two", 1)
    consumer = broker.consumer("two-group", "latest", **{"partition.assignment.strategy": "range"})

    def on_assign(consumer: Consumer, partitions: list) -> None:
        consumer.assign(partitions)
        consumer.pause([CkPartition("two", 0)])

    try:
        consumer.subscribe(["two"], on_assign=on_assign)

        def restarted() -> bool:
            assert consumer.consume(10, 0.2) == []
            return sorted((p.partition, p.offset) for p in consumer.assignment())[1] == (1, 3)

        wait_until("partition 1 restarted at its end", restarted)
        for partition in (0, 1):
            broker.produce("two", range(3, 5), partition)
        got = consume(consumer, 2)
        for _ in range(4):
            got += consumer.consume(10, 0.5)
        assert [(m.partition(), m.offset()) for m in got] == [(1, 3), (1, 4)], "paused partition 0 was fetched"
        consumer.resume([CkPartition("two", 0)])
        assert [(m.partition(), m.offset()) for m in consume(consumer, 4)] == [(0, n) for n in range(1, 5)]
        assert consumer.resets == 0
    finally:
        consumer.close()


def test_a_stop_queued_before_the_partition_was_assigned_again_does_not_rewind_what_was_read_since(broker, caplog):
    """The soak's rewind (seed 7). A partition assigned without a position and nothing committed queues
    librdkafka's stop; assigned again at 0 (by the user here, by an eager restart of another partition
    in the soak) it is fetched, but the stop queued before still arrives. Its leader is gone for a
    while, so the stop waits unresolved while librdkafka reads the partition; once resolved it must
    not restart the partition at 0 again: every record is read once."""
    name, count = "stale-stop", 200
    create(broker.admin, NewTopic(name, 1, 1))
    producer = Producer({"bootstrap.servers": broker.address, "linger.ms": 5, **QUIET})
    for n in range(count):
        producer.produce(name, f"{name}-{n}".encode())
    assert producer.flush(30) == 0
    consumer = broker.consumer(f"{name}-group", "earliest")
    resolve, calls = consumer._guard.resolve_out_of_range, []

    def leader_gone_for_two_seconds(tp, position, policy, timeout=30.0):
        calls.append(time.monotonic())
        if calls[-1] - calls[0] < 2.0:
            raise LogBoundsUnavailableError(tp, 1, "its leader was killed")
        return resolve(tp, position, policy, timeout)

    consumer._guard.resolve_out_of_range = leader_gone_for_two_seconds
    try:
        consumer.assign([CkPartition(name, 0)])
        time.sleep(1.0)  # not polled: librdkafka finds no commit and queues its stop meanwhile
        with caplog.at_level(logging.INFO, logger="client_epochs.confluent"):
            consumer.assign([CkPartition(name, 0, 0)])
            got = consume(consumer, count)
            until = time.monotonic() + 4.0  # past the moment the leader is back and the stop resolves
            while time.monotonic() < until:
                got += consumer.consume(10, 0.5)
        assert [m.offset() for m in got] == list(range(count))
        assert f"{name}-0 stopped by librdkafka" in caplog.text, "the stop queued before was not polled"
    finally:
        consumer.close()


def test_other_errors_pass_through_unchanged(broker):
    """Only librdkafka's _AUTO_OFFSET_RESET events are the wrapper's: an unknown topic's error reaches
    the user as it would from confluent-kafka."""
    consumer = broker.consumer("unknown-topic-group", "earliest", **{"allow.auto.create.topics": False,
                                                                       "topic.metadata.refresh.interval.ms": 500})
    try:
        consumer.subscribe(["no-such-topic"])
        deadline = time.monotonic() + 30
        errors = []
        while not errors and time.monotonic() < deadline:
            errors = [m.error() for m in consumer.consume(10, 0.5) if m.error() is not None]
        assert errors and errors[0].code() == KafkaError.UNKNOWN_TOPIC_OR_PART
    finally:
        consumer.close()


# --- every wrapper: one scenario text, a side per client (tests/client_epochs/sides.py) ------------------------


@pytest.fixture(params=[KafkaPythonSide, *ASYNC_SIDES], ids=lambda side: side.name)
def side(request, broker: Broker) -> Iterator[Side]:
    """kafka-python's wrapper and the async ones (the confluent-kafka wrapper has the tests above, which
    cover librdkafka's own paths: eager and cooperative restarts, stops queued before a restart)."""
    with side_of(request.param, broker.address) as made:
        yield made


def test_the_wrapper_resets_to_the_new_log_start_when_retention_removed_the_committed_offset(broker, side):
    """The client runs without a reset policy of its own (kafka-python and aiokafka with "none", librdkafka
    with "error"); its out-of-range error goes to the guard, the leader confirms the data is gone, one reset."""
    name = f"{side.name}-retained"
    log_start = broker.retained(name, 10)
    broker.commit(f"{name}-group", name, 2)
    consumer = side.consumer(f"{name}-group", "earliest")
    try:
        side.subscribe(consumer, name)
        got = consume_sides(side, consumer, 10 - log_start)
        assert [(offset, value) for _, offset, value in got] == [
            (n, f"{name}-{n}".encode()) for n in range(log_start, 10)]
        assert (consumer.resets, consumer.out_of_range_without_reset) == (1, 0)
    finally:
        consumer.close()


def test_without_a_committed_offset_the_wrapper_starts_by_the_users_policy(broker, side):
    """A partition never committed starts where the user's policy says, which is not a reset: earliest reads
    from offset 0; latest delivers only records written after it started (never one of the first five)."""
    name = f"{side.name}-fresh"
    broker.topic(name, 5)
    earliest = side.consumer(f"{name}-earliest", "earliest")
    latest = side.consumer(f"{name}-latest", "latest")
    try:
        side.subscribe(earliest, name)
        assert offsets_of(consume_sides(side, earliest, 5)) == [0, 1, 2, 3, 4]
        side.subscribe(latest, name)
        got: list = []
        deadline, written = time.monotonic() + 30, 5
        while not got:  # write one record at a time until the consumer, positioned at some log end, gets one
            assert time.monotonic() < deadline, "the latest consumer got nothing in 30 s"
            broker.produce(name, [written])
            written += 1
            got = side.poll(latest) + side.poll(latest)
        got += consume_sides(side, latest, written - got[0][1] - len(got), timeout_s=10)
        assert got[0][1] >= 5 and offsets_of(got) == list(range(got[0][1], written)), offsets_of(got)
        for consumer in (earliest, latest):
            assert (consumer.resets, consumer.out_of_range_without_reset) == (0, 0)
    finally:
        earliest.close()
        latest.close()


def test_with_no_reset_policy_the_wrapper_raises_the_clients_own_error(broker, side):
    """Policy none: where the data is gone the client's own out-of-range error is raised, caused by the
    SDK's (which names the partition and the log's bounds; librdkafka has no such error, so the
    confluent-kafka wrappers raise the SDK's itself); nothing is reset."""
    name = f"{side.name}-retained-none"
    broker.retained(name, 10)
    broker.commit(f"{name}-group", name, 2)
    consumer = side.consumer(f"{name}-group", "none")
    try:
        side.subscribe(consumer, name)
        with pytest.raises(side.out_of_range_error) as caught:
            consume_sides(side, consumer, 1)
        sdk = caught.value if isinstance(caught.value, OffsetOutOfRangeError) else caught.value.__cause__
        assert isinstance(sdk, OffsetOutOfRangeError) and f"{name}-0" in str(sdk), repr(caught.value)
        assert consumer.resets == 0
    finally:
        consumer.close()


# --- the epochs a commit carries ------------------------------------------------------------------------------


@given(st.integers(0, 20), st.lists(st.integers(0, 20), min_size=1, max_size=12), st.integers(0, 5))
def test_committed_internal_metadata_never_goes_back_while_old_records_are_read(cached_epoch, written, topic_epoch):
    """KIP-232 has a consumer commit the epochs of its cached metadata. Records written before an
    election carry older leader epochs; committing theirs would go backwards after a resume, and the
    coordinator refuses that (INVALID_INTERNAL_METADATA) until the consumer reaches newer records. The
    internal metadata takes the larger of the cached and the consumed epoch: monotonic along a log."""
    guard = EpochGuard(MetadataClient("127.0.0.1:1"))
    guard.metadata.cache.offer({TP: PartitionMetadata(1, cached_epoch, None, topic_epoch)}, interest=EVERYTHING)
    committed = [guard.internal_metadata(TP, epoch) for epoch in sorted(written)]  # epochs only grow along a log
    assert committed == sorted(committed)
    assert all(c.topic_epoch == topic_epoch and c.leader_epoch >= cached_epoch for c in committed)
    assert committed[-1].leader_epoch == max(cached_epoch, max(written))
    assert guard.internal_metadata(TP, None) == InternalMetadata(topic_epoch, cached_epoch)
