"""The Spark source's driver rules without Spark or a broker: options, offsets with epochs, next_end."""

from __future__ import annotations

import json
import uuid

import pytest
from hypothesis import given
from hypothesis import strategies as st

from client_epochs import TopicPartition, TopicRecreatedError
from client_epochs.spark.planning import (
    EARLIEST,
    Backwards,
    DataLossError,
    Observed,
    OffsetsWentBackwardsError,
    PartitionOffset,
    SourceOptionError,
    floors,
    initial_offsets,
    next_end,
    offsets_from_json,
    offsets_to_json,
    parse_options,
    ranges,
)
from quorum.wire.internal_metadata import topic_id_text

T0, T1 = TopicPartition("t", 0), TopicPartition("t", 1)
BASE = {"kafka.bootstrap.servers": "127.0.0.1:9092", "subscribe": "t"}


def options(**more: str):
    return parse_options({**BASE, **more})


def test_offsets_json_round_trip_with_epochs() -> None:
    text = '{"t": {"0": {"offset": 42, "leader_epoch": 3, "topic_epoch": 7}, "1": 5}}'
    parsed = offsets_from_json(text)
    assert parsed == {T0: PartitionOffset(42, 3, 7), T1: PartitionOffset(5)}
    assert offsets_to_json(parsed) == {
        "t": {
            "0": {"offset": 42, "leader_epoch": 3, "topic_epoch": 7},
            "1": {"offset": 5, "leader_epoch": -1, "topic_epoch": -1},
        }
    }
    assert floors(parsed) == {T0: PartitionOffset(42, 3, 7).floor}


@pytest.mark.parametrize(
    ("text", "named"),
    [
        ("[1]", "must map topics"),
        ('{"t": 3}', "topic 't'"),
        ('{"t": {"x": 1}}', "'x' is not a number"),
        ('{"t": {"0": {"offset": "1"}}}', "t-0"),
        ('{"t": {"0": {"offset": 1, "epoch": 2}}}', "unknown field"),
        ("{", "not JSON"),
    ],
)
def test_bad_offsets_json_names_what_is_wrong(text: str, named: str) -> None:
    with pytest.raises(SourceOptionError, match=named):
        offsets_from_json(text)


@pytest.mark.parametrize(
    ("given_options", "named"),
    [
        ({"subscribe": None}, "exactly one of"),
        ({"assign": '{"t": [0]}'}, "exactly one of"),
        ({"kafka.bootstrap.servers": None}, "kafka.bootstrap.servers"),
        ({"maxOffsetsPerTrigger": "0"}, "maxOffsetsPerTrigger"),
        ({"failOnDataLoss": "maybe"}, "failOnDataLoss"),
        ({"onTopicRecreated": "latest"}, "onTopicRecreated"),
        ({"startingOffset": "earliest"}, "unknown option"),
        ({"endingOffsets": "latest"}, "batch reads only"),
        ({"subscribe": " , "}, "names no topic"),
    ],
)
def test_bad_options_are_named(given_options: dict, named: str) -> None:
    merged = {**BASE, **given_options}
    with pytest.raises(SourceOptionError, match=named):
        parse_options({k: v for k, v in merged.items() if v is not None})


def test_options_keep_spark_kafka_names_and_pass_kafka_star() -> None:
    parsed = parse_options(
        {
            "kafka.bootstrap.servers": "h:1",
            "assign": '{"t": [1, 0]}',
            "MAXOFFSETSPERTRIGGER": "10",
            "kafka.fetch.max.bytes": "1000",
            "startingOffsets": "earliest",
        }
    )
    assert parsed.assigned == (T0, T1) and parsed.max_offsets_per_trigger == 10
    assert parsed.client == {"fetch.max.bytes": "1000", "isolation.level": "read_uncommitted"}
    assert parsed.starting == "earliest"
    batch = parse_options({**BASE, "endingOffsets": '{"t": {"0": 5}}'}, streaming=False)
    assert batch.starting == "earliest" and batch.ending == {T0: PartitionOffset(5)}
    assert parse_options({"kafka.bootstrap.servers": "h:1", "subscribePattern": "t.*"}).wants("tx")


def seen(start: int, end: int, leader: int = 1, topic: int = 5, topic_id: uuid.UUID | None = None) -> Observed:
    return Observed(start, end, leader, topic, "leader 1", topic_id)


def test_next_end_moves_forward_with_the_epochs_it_was_planned_under() -> None:
    start = {T0: PartitionOffset(10, 1, 5)}
    end = next_end(start, {T0: seen(0, 30, leader=2), T1: seen(4, 9)}, options())
    assert end == {T0: PartitionOffset(30, 2, 5), T1: PartitionOffset(9, 1, 5)}
    # a new partition is read from its log start: it is absent from the start
    assert [(r.partition, r.start, r.end) for r in ranges(start, end)] == [(T0, 10, 30), (T1, EARLIEST, 9)]
    assert ranges({}, {T1: PartitionOffset(0, 1, 5)}) == []  # a new partition nobody wrote to: no task


def test_an_end_below_the_start_is_never_planned() -> None:
    start = {T0: PartitionOffset(50, 3, 5), T1: PartitionOffset(7, 1, 5)}
    result = next_end(start, {T0: seen(0, 40, leader=3), T1: seen(0, 9)}, options())
    assert result == [Backwards(T0, 50, 40, "leader 1")]
    with pytest.raises(OffsetsWentBackwardsError, match="t-0.* 40 .* 50"):
        ranges(start, {T0: PartitionOffset(40, 3, 5)})


def test_recreated_topic_fails_or_restarts_from_the_new_log_start() -> None:
    start = {T0: PartitionOffset(50, 3, 5)}
    with pytest.raises(TopicRecreatedError, match="t-0"):
        next_end(start, {T0: seen(0, 20, leader=0, topic=9)}, options())
    end = next_end(start, {T0: seen(0, 20, leader=0, topic=9)}, options(onTopicRecreated="earliest"))
    assert end == {T0: PartitionOffset(0, 0, 9)}
    assert ranges(start, end) == []  # nothing of the old topic is read; the next batch reads the new one
    follow = next_end(end, {T0: seen(0, 20, leader=0, topic=9)}, options())
    assert [(r.start, r.end, r.topic_epoch) for r in ranges(end, follow)] == [(0, 20, 9)]


def test_retention_past_the_start_follows_fail_on_data_loss() -> None:
    start = {T0: PartitionOffset(5, 1, 5)}
    with pytest.raises(DataLossError, match="t-0: offsets 5 to 11"):
        next_end(start, {T0: seen(12, 30)}, options())
    assert next_end(start, {T0: seen(12, 30)}, options(failOnDataLoss="false"))[T0].offset == 30


def test_initial_offsets_earliest_latest_and_json() -> None:
    observed = {T0: seen(3, 30), T1: seen(0, 9)}
    assert initial_offsets("earliest", observed) == {T0: PartitionOffset(3, 1, 5), T1: PartitionOffset(0, 1, 5)}
    assert initial_offsets("latest", observed)[T0].offset == 30
    given_json = {T0: PartitionOffset(-1), T1: PartitionOffset(4, 0, 5)}
    assert initial_offsets(given_json, observed) == {T0: PartitionOffset(30, 1, 5), T1: PartitionOffset(4, 0, 5)}


@given(st.lists(st.tuples(st.integers(0, 1000), st.integers(0, 5000)), min_size=1, max_size=6), st.integers(1, 3000))
def test_max_offsets_per_trigger_caps_the_batch_and_never_goes_backwards(parts, limit) -> None:
    start, observed = {}, {}
    for n, (begin, more) in enumerate(parts):
        tp = TopicPartition("t", n)
        start[tp] = PartitionOffset(begin, 1, 5)
        observed[tp] = seen(0, begin + more)
    end = next_end(start, observed, options(), max_rows=limit)
    assert isinstance(end, dict)
    read = sum(end[tp].offset - start[tp].offset for tp in start)
    assert read <= max(limit, len(parts)) and read <= sum(more for _, more in parts)
    assert all(start[tp].offset <= end[tp].offset <= observed[tp].log_end for tp in start)
    if sum(more for _, more in parts) > 0:
        assert read > 0  # a capped batch still makes progress


OLD_ID, NEW_ID = uuid.UUID(int=0x1111), uuid.UUID(int=0x2222)
T2 = TopicPartition("t", 2)


def test_offsets_json_carries_the_topic_id_as_kafka_prints_it_and_old_checkpoints_still_parse() -> None:
    offsets = {T0: PartitionOffset(42, 3, 7, OLD_ID)}
    text = json.dumps(offsets_to_json(offsets))
    assert json.loads(text)["t"]["0"]["topic_id"] == topic_id_text(OLD_ID)
    assert offsets_from_json(text) == offsets
    old = offsets_from_json('{"t": {"0": {"offset": 42, "leader_epoch": 3, "topic_epoch": 7}}}')
    assert old == {T0: PartitionOffset(42, 3, 7)} and "topic_id" not in offsets_to_json(old)["t"]["0"]
    assert floors(offsets)[T0].topic_id == OLD_ID  # what commitOffsetsToGroup's internal metadata names
    with pytest.raises(SourceOptionError, match="t-0.*topic_id 'nope'"):
        offsets_from_json('{"t": {"0": {"offset": 1, "topic_id": "nope"}}}')


def test_partition_growth_under_the_same_topic_id_is_read_on_and_new_partitions_from_their_start() -> None:
    start = {T0: PartitionOffset(50, 3, 5, OLD_ID)}
    grown = {
        T0: seen(0, 60, leader=3, topic=6, topic_id=OLD_ID),
        T1: seen(0, 4, topic=6, topic_id=OLD_ID),
        T2: seen(0, 0, topic=6, topic_id=OLD_ID),
    }
    end = next_end(start, grown, options())
    assert end == {
        T0: PartitionOffset(60, 3, 6, OLD_ID),
        T1: PartitionOffset(4, 1, 6, OLD_ID),
        T2: PartitionOffset(0, 1, 6, OLD_ID),
    }
    assert [(r.partition, r.start, r.end) for r in ranges(start, end)] == [(T0, 50, 60), (T1, EARLIEST, 4)]


def test_a_different_topic_id_is_a_recreation_whatever_the_epochs_say() -> None:
    start = {T0: PartitionOffset(50, 3, 5, OLD_ID)}
    newer = {T0: seen(0, 80, leader=4, topic=6, topic_id=NEW_ID)}  # epochs alone would look like growth
    with pytest.raises(TopicRecreatedError, match="t-0") as raised:
        next_end(start, newer, options())
    assert topic_id_text(NEW_ID) in str(raised.value)
    end = next_end(start, newer, options(onTopicRecreated="earliest"))
    assert end == {T0: PartitionOffset(0, 4, 6, NEW_ID)} and ranges(start, end) == []


def test_without_topic_ids_a_higher_topic_epoch_is_growth_unless_the_leader_epoch_went_back() -> None:
    old_checkpoint = offsets_from_json('{"t": {"0": {"offset": 50, "leader_epoch": 3, "topic_epoch": 5}}}')
    grown = {T0: seen(0, 60, leader=3, topic=6, topic_id=OLD_ID), T1: seen(0, 4, topic=6, topic_id=OLD_ID)}
    end = next_end(old_checkpoint, grown, options())
    assert end[T0] == PartitionOffset(60, 3, 6, OLD_ID)  # from now on the checkpoint names the id
    assert [(r.start, r.end) for r in ranges(old_checkpoint, end)] == [(50, 60), (EARLIEST, 4)]
    with pytest.raises(TopicRecreatedError, match="t-0"):
        next_end(old_checkpoint, {T0: seen(0, 60, leader=0, topic=6)}, options())


@given(
    st.integers(0, 100),
    st.integers(0, 10),
    st.integers(0, 10),
    st.integers(0, 3),
    st.integers(-3, 3),
    st.sampled_from(["same", "other", "none"]),
    st.booleans(),
)
def test_growth_is_never_an_error_nor_read_again_and_another_id_always_is(
    offset, more, leader, topic_up, leader_move, which, start_has_id
) -> None:
    """Same id: whatever the epochs, the end goes on from the start. Another id: always a recreation.
    No id on one side: a recreation exactly when the topic epoch rose and the leader epoch went back."""
    start = {T0: PartitionOffset(offset, leader, 5, OLD_ID if start_has_id else None)}
    now_leader = max(leader + leader_move, 0)
    now_id = {"same": OLD_ID, "other": NEW_ID, "none": None}[which]
    observed = {T0: seen(0, offset + more, leader=now_leader, topic=5 + topic_up, topic_id=now_id)}
    with_ids = start_has_id and now_id is not None
    recreated = now_id != OLD_ID if with_ids else topic_up > 0 and now_leader < leader
    if recreated:
        with pytest.raises(TopicRecreatedError):
            next_end(start, observed, options())
        end = next_end(start, observed, options(onTopicRecreated="earliest"))
        assert end[T0].offset == 0 and ranges(start, end) == []
        return
    end = next_end(start, observed, options())
    assert end[T0] == PartitionOffset(offset + more, now_leader, 5 + topic_up, now_id)
    read = ranges(start, end)
    assert [(r.start, r.end) for r in read] == ([(offset, offset + more)] if more else [])
