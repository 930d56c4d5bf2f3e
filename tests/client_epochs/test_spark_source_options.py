"""The Spark source's options taken from Spark's Kafka source, each rule without Spark or a broker:
offsets by time, task splitting (minPartitions, maxRecordsPerPartition), trigger pacing
(minOffsetsPerTrigger, maxTriggerDelay), lag metrics, isolation level, group ids, a given topic id."""

from __future__ import annotations

import uuid

import pytest
from hypothesis import given
from hypothesis import strategies as st

from client_epochs import TopicPartition, TopicRecreatedError
from client_epochs.spark.options import parse_options
from client_epochs.spark.pacing import TriggerPacing, available_rows, offsets_behind, split_ranges
from client_epochs.spark.planning import (
    EARLIEST,
    NO_OFFSET,
    Observed,
    PartitionOffset,
    Range,
    SourceOptionError,
    initial_offsets,
    next_end,
    offsets_at_times,
    recreated_since,
    timestamps_to_ask,
)
from quorum.wire.internal_metadata import topic_id_text

T0, T1, T2 = TopicPartition("t", 0), TopicPartition("t", 1), TopicPartition("t", 2)
BASE = {"kafka.bootstrap.servers": "127.0.0.1:9092", "subscribe": "t"}
OLD_ID, NEW_ID = uuid.UUID(int=11), uuid.UUID(int=22)


def seen(start: int, end: int, topic_id: uuid.UUID | None = None) -> Observed:
    return Observed(start, end, 1, 5, "leader 1", topic_id)


# ---------------------------------------------------------------------------------------------
# Option parsing: every new option converted, every malformed value refused by name


def test_new_options_are_converted_with_spark_names_and_defaults() -> None:
    parsed = parse_options(
        {
            **BASE,
            "startingOffsetsByTimestamp": '{"t": {"0": 1000, "1": -2}}',
            "startingOffsetsByTimestampStrategy": "LATEST",
            "minPartitions": "8",
            "maxRecordsPerPartition": "500",
            "minOffsetsPerTrigger": "100",
            "maxTriggerDelay": "30s",
            "groupIdPrefix": "jobs",
            "kafka.isolation.level": "READ_COMMITTED",
        }
    )
    assert parsed.starting_time == {T0: 1000, T1: -2} and parsed.starting_time_strategy == "latest"
    assert (parsed.min_partitions, parsed.max_records_per_partition) == (8, 500)
    assert (parsed.min_offsets_per_trigger, parsed.max_trigger_delay_ms) == (100, 30_000)
    assert parsed.read_committed and parsed.client["isolation.level"] == "read_committed"
    assert parsed.executor_group_id("abc", streaming=True) == "jobs-abc-executor"
    defaults = parse_options(BASE)
    assert defaults.max_trigger_delay_ms == 15 * 60_000 and defaults.starting_time is None
    assert defaults.client["isolation.level"] == "read_uncommitted"  # Spark's (the Java consumer's) default
    assert defaults.executor_group_id("u", streaming=True) == "spark-kafka-source-u-executor"
    assert defaults.executor_group_id("u", streaming=False) == "spark-kafka-relation-u-executor"
    given_group = parse_options({**BASE, "kafka.group.id": "mine", "groupIdPrefix": "ignored"})
    assert given_group.executor_group_id("u", streaming=True) == "mine"  # kafka.group.id wins, as in Spark


def test_a_global_timestamp_wins_over_one_per_partition_and_over_starting_offsets() -> None:
    parsed = parse_options(
        {
            **BASE,
            "startingTimestamp": "1700000000000",
            "startingOffsetsByTimestamp": '{"t": {"0": 5}}',
            "startingOffsets": "earliest",
        }
    )
    assert parsed.starting_time == 1_700_000_000_000
    batch = parse_options(
        {
            **BASE,
            "startingTimestamp": "10",
            "endingOffsetsByTimestamp": '{"t": {"0": 99}}',
            "startingOffsets": "latest",
        },
        streaming=False,
    )  # latest is not used: no error
    assert batch.starting_time == 10 and batch.ending_time == {T0: 99}


@pytest.mark.parametrize(
    ("given_options", "named"),
    [
        ({"startingTimestamp": "yesterday"}, "startingTimestamp"),
        ({"startingTimestamp": "-5"}, "startingTimestamp"),
        ({"startingOffsetsByTimestamp": "{"}, "startingOffsetsByTimestamp"),
        ({"startingOffsetsByTimestamp": '{"t": {"0": "noon"}}'}, "startingOffsetsByTimestamp of t-0"),
        ({"startingOffsetsByTimestamp": '{"t": {"0": -3}}'}, "startingOffsetsByTimestamp of t-0"),
        ({"startingOffsetsByTimestamp": '{"t": {"x": 1}}'}, "'x' is not a number"),
        ({"startingOffsetsByTimestamp": '{"t": 5}'}, "startingOffsetsByTimestamp: topic 't'"),
        ({"startingOffsetsByTimestampStrategy": "earliest"}, "startingOffsetsByTimestampStrategy"),
        ({"endingTimestamp": "5"}, "batch reads only"),
        ({"endingOffsetsByTimestamp": '{"t": {"0": 5}}'}, "batch reads only"),
        ({"minPartitions": "0"}, "minPartitions"),
        ({"minPartitions": "many"}, "minPartitions"),
        ({"maxRecordsPerPartition": "-1"}, "maxRecordsPerPartition"),
        ({"minOffsetsPerTrigger": "0"}, "minOffsetsPerTrigger"),
        ({"maxTriggerDelay": "soon"}, "maxTriggerDelay"),
        ({"maxTriggerDelay": "5 weeks"}, "maxTriggerDelay"),
        ({"groupIdPrefix": " "}, "groupIdPrefix"),
        ({"kafka.isolation.level": "serializable"}, "kafka.isolation.level"),
    ],
)
def test_malformed_new_options_are_refused_by_name(given_options: dict, named: str) -> None:
    with pytest.raises(SourceOptionError, match=named):
        parse_options({**BASE, **given_options})


@pytest.mark.parametrize(
    ("text", "ms"),
    [
        ("250", 250),
        ("250ms", 250),
        ("2s", 2000),
        ("15m", 900_000),
        ("2min", 120_000),
        ("1h", 3_600_000),
        ("1d", 86_400_000),
    ],
)
def test_max_trigger_delay_reads_spark_durations(text: str, ms: int) -> None:
    assert parse_options({**BASE, "maxTriggerDelay": text}).max_trigger_delay_ms == ms


# ---------------------------------------------------------------------------------------------
# Offsets by time


def test_timestamps_asked_cover_exactly_the_subscription() -> None:
    assert timestamps_to_ask(1000, [T1, T0], "startingTimestamp") == {T0: 1000, T1: 1000}
    assert timestamps_to_ask({T0: 5, T1: -2}, [T0, T1], "x") == {T0: 5, T1: -2}
    with pytest.raises(SourceOptionError, match=r"startingOffsetsByTimestamp .*missing \['t-1'\]"):
        timestamps_to_ask({T0: 5}, [T0, T1], "startingOffsetsByTimestamp")
    with pytest.raises(SourceOptionError, match=r"not subscribed \['t-2'\]"):
        timestamps_to_ask({T0: 5, T1: 5, T2: 5}, [T0, T1], "startingOffsetsByTimestamp")


def test_offsets_at_times_follow_spark_when_no_record_is_that_late() -> None:
    observed = {T0: seen(3, 40), T1: seen(0, 9), T2: seen(7, 20)}
    asked = {T0: 1000, T1: 5000, T2: -2}
    found = {T0: 12, T1: NO_OFFSET}
    with pytest.raises(SourceOptionError, match="t-1: no record .* 5000.*Strategy=latest"):
        offsets_at_times(asked, found, observed, starting=True)
    start = offsets_at_times(asked, found, observed, starting=True, strategy="latest")
    assert start == {T0: PartitionOffset(12, 1, 5), T1: PartitionOffset(9, 1, 5), T2: PartitionOffset(7, 1, 5)}
    end = offsets_at_times({T0: 1000, T1: 5000, T2: -1}, found, observed, starting=False)  # an end: latest
    assert {tp: po.offset for tp, po in end.items()} == {T0: 12, T1: 9, T2: 20}


# ---------------------------------------------------------------------------------------------
# A user-given topic id in startingOffsets


def test_a_given_topic_id_is_kept_and_checked_against_the_topic_now() -> None:
    given_start = {T0: PartitionOffset(4, topic_id=OLD_ID)}
    start = initial_offsets(given_start, {T0: seen(0, 10, OLD_ID)})
    assert start[T0].topic_id == OLD_ID and start[T0].to_json()["topic_id"] == topic_id_text(OLD_ID)
    # the stream's first plan: the same topic is read on, another one under the name is a recreation
    assert next_end(start, {T0: seen(0, 10, OLD_ID)}, parse_options(BASE))[T0].offset == 10
    with pytest.raises(TopicRecreatedError, match="t-0"):
        next_end(start, {T0: seen(0, 10, NEW_ID)}, parse_options(BASE))
    # the batch reader's one plan
    assert recreated_since(start, {T0: seen(0, 10, OLD_ID)}, "fail") == start
    with pytest.raises(TopicRecreatedError, match="t-0"):
        recreated_since(start, {T0: seen(2, 10, NEW_ID)}, "fail")
    assert recreated_since(start, {T0: seen(2, 10, NEW_ID)}, "earliest") == {T0: PartitionOffset(2, 1, 5, NEW_ID)}


# ---------------------------------------------------------------------------------------------
# Task splitting: Spark's KafkaOffsetRangeCalculator


def rng(tp: TopicPartition, start: int, end: int) -> Range:
    return Range(tp, start, end, 1, 5, "b:1")


def cut(
    tasks: list[Range],
    min_partitions: int | None = None,
    max_records: int | None = None,
    log_starts: dict | None = None,
) -> list[tuple[int, int, int]]:
    return [
        (r.partition.partition, r.start, r.end) for r in split_ranges(tasks, min_partitions, max_records, log_starts)
    ]


def test_min_partitions_splits_by_spark_rules() -> None:
    assert cut([rng(T0, 1, 4)], 3) == [(0, 1, 2), (0, 2, 3), (0, 3, 4)]
    assert cut([rng(T0, 1, 11)], 4) == [(0, 1, 3), (0, 3, 5), (0, 5, 8), (0, 8, 11)]  # the remainder last
    # a small range stays whole; the large one takes the remaining tasks (Spark's "unsplit" ranges)
    assert cut([rng(T0, 1, 5), rng(T1, 1, 21)], 3) == [(0, 1, 5), (1, 1, 11), (1, 11, 21)]
    assert cut([rng(T0, 1, 5), rng(T1, 1, 21)], 2) == [(0, 1, 5), (1, 1, 21)]  # enough tasks already
    assert cut([rng(T0, 0, 1)], 4) == [(0, 0, 1)]  # one record is one task


def test_max_records_per_partition_splits_every_range_longer_than_it() -> None:
    assert cut([rng(T0, 0, 10), rng(T1, 0, 4)], max_records=4) == [(0, 0, 3), (0, 3, 6), (0, 6, 10), (1, 0, 4)]
    # then minPartitions over the pieces: [0, 5) and [5, 10) each take half of the 6 tasks
    assert cut([rng(T0, 0, 10)], 6, 5) == [(0, 0, 1), (0, 1, 3), (0, 3, 5), (0, 5, 6), (0, 6, 8), (0, 8, 10)]
    # a new partition (start EARLIEST) is cut from its log start when it is known, else left whole
    assert cut([rng(T0, EARLIEST, 10)], 2, log_starts={T0: 4}) == [(0, 4, 7), (0, 7, 10)]
    assert cut([rng(T0, EARLIEST, 10)], 2) == [(0, EARLIEST, 10)]


@given(
    st.lists(st.tuples(st.integers(0, 10_000), st.integers(0, 5_000)), min_size=1, max_size=5),
    st.one_of(st.none(), st.integers(1, 40)),
    st.one_of(st.none(), st.integers(1, 3_000)),
)
def test_splits_tile_each_range_exactly(spans, min_partitions, max_records) -> None:
    tasks = [rng(TopicPartition("t", p), start, start + 1 + size) for p, (start, size) in enumerate(spans)]
    out = split_ranges(tasks, min_partitions, max_records)
    for task in tasks:
        pieces = [(r.start, r.end) for r in out if r.partition == task.partition]
        assert pieces[0][0] == task.start and pieces[-1][1] == task.end
        assert all(a[1] == b[0] and a[0] < a[1] for a, b in zip(pieces, pieces[1:], strict=False))
        if max_records is not None and min_partitions is None:
            assert all(end - start <= max_records for start, end in pieces)
    assert all(r.leader_epoch == 1 and r.bootstrap_from == "b:1" for r in out)


# ---------------------------------------------------------------------------------------------
# Trigger pacing and lag metrics


def test_min_offsets_per_trigger_waits_until_enough_or_the_delay() -> None:
    pacing = TriggerPacing(min_rows=100, max_delay_ms=60_000)
    assert pacing.admit(5, now_ms=1_000_000)  # the first trigger reads at once, as Spark's (last trigger 0)
    assert not pacing.admit(99, now_ms=1_010_000)
    assert pacing.admit(100, now_ms=1_020_000)
    assert not pacing.admit(1, now_ms=1_079_999)
    assert pacing.admit(1, now_ms=1_080_000)  # maxTriggerDelay since the last batch: read what there is


def test_available_rows_and_offsets_behind_latest() -> None:
    start = {T0: PartitionOffset(10, 1, 5), T1: PartitionOffset(EARLIEST)}
    observed = {T0: seen(0, 30), T1: seen(4, 9), T2: seen(2, 2)}
    assert available_rows(start, observed) == 20 + 5 + 0
    end = {T0: PartitionOffset(25, 1, 5), T1: PartitionOffset(9, 1, 5), T2: PartitionOffset(2, 1, 5)}
    assert offsets_behind(end, observed) == {
        "minOffsetsBehindLatest": "0",
        "maxOffsetsBehindLatest": "5",
        "avgOffsetsBehindLatest": str(5 / 3),
    }
    assert offsets_behind({}, observed) == {}
