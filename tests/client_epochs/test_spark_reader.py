"""The streaming reader's driver loop without Spark running or a broker: what it does with the answers
its prober gets (a fake one here), for the never-backwards retries and Trigger.AvailableNow."""

from __future__ import annotations

import uuid

import pytest

pytest.importorskip("pyspark")

from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadMaxRows, ReadMinRows  # noqa: E402

from client_epochs import TopicPartition  # noqa: E402
from client_epochs.spark import KafkaEpochsStreamReader  # noqa: E402
from client_epochs.spark.planning import Observed, OffsetsWentBackwardsError, parse_options  # noqa: E402
from quorum.wire.internal_metadata import topic_id_text  # noqa: E402

T0 = TopicPartition("t", 0)


class FakeProber:
    """Answers log ends from a script, one per observe(); the last one repeats."""

    def __init__(self, ends: list[int]) -> None:
        self.ends = list(ends)
        self.asked = 0
        self.refusals = 0

    def partitions(self, known=()) -> list[TopicPartition]:
        return [T0]

    def observe(self, partitions, planned) -> dict[TopicPartition, Observed]:
        end = self.ends[min(self.asked, len(self.ends) - 1)]
        self.asked += 1
        return {T0: Observed(0, end, 4, 7, "leader 101 (127.0.0.1:1, leader epoch 4)", current_broker="127.0.0.1:3")}

    def close(self) -> None:
        pass


def reader(ends: list[int], **options: str) -> tuple[KafkaEpochsStreamReader, FakeProber]:
    made = KafkaEpochsStreamReader(
        parse_options(
            {"kafka.bootstrap.servers": "127.0.0.1:1", "subscribe": "t", "fetchOffset.retryIntervalMs": "1", **options}
        )
    )
    prober = FakeProber(ends)
    made._prober = prober
    return made, prober


START = {"t": {"0": {"offset": 50, "leader_epoch": 4, "topic_epoch": 7}}}


def test_a_backwards_end_is_asked_again_and_a_later_good_answer_is_planned() -> None:
    source, prober = reader([40, 45, 60])
    end = source.latestOffset(START, ReadAllAvailable())
    assert end == {"t": {"0": {"offset": 60, "leader_epoch": 4, "topic_epoch": 7}}}
    assert prober.asked == 3 and source.counters()["backwardsRetries"] == 2


def test_a_backwards_end_that_stays_fails_naming_the_partition_and_both_offsets() -> None:
    source, prober = reader([40], **{"fetchOffset.numRetries": "2"})
    with pytest.raises(
        OffsetsWentBackwardsError,
        match=r"t-0: the latest offset 40 from leader 101 .* below the "
        r"offset 50 already planned, after 3 attempt",
    ):
        source.latestOffset(START, ReadAllAvailable())
    assert prober.asked == 3


def test_max_rows_and_available_now_hold_the_end_back() -> None:
    source, prober = reader([100, 500])
    assert source.getDefaultReadLimit() == ReadAllAvailable()
    source.prepareForTriggerAvailableNow()
    first = source.latestOffset(START, ReadMaxRows(20))
    assert first["t"]["0"]["offset"] == 70
    # the records that arrived after the query started (500) are not planned by an AvailableNow query
    assert source.latestOffset(first, ReadAllAvailable())["t"]["0"]["offset"] == 100
    assert source.reportLatestOffset()["metrics"]["maxOffsetsBehindLatest"] == "400"  # behind the 500 there now
    assert reader([1], maxOffsetsPerTrigger="5")[0].getDefaultReadLimit() == ReadMaxRows(5)


class GrowingProber(FakeProber):
    """FakeProber whose topic gains partitions after the first answer: a higher topic epoch, the same id."""

    def observe(self, partitions, planned) -> dict[TopicPartition, Observed]:
        topic_epoch = 7 if self.asked == 0 else 8
        seen = super().observe(partitions, planned)[T0]
        return {T0: Observed(seen.log_start, seen.log_end, 4, topic_epoch, seen.source, TOPIC_ID)}


TOPIC_ID = uuid.UUID(int=0x5151)


def test_available_now_holds_the_end_back_through_partition_growth() -> None:
    source, _ = reader([])
    source._prober = GrowingProber([100, 500])
    source.prepareForTriggerAvailableNow()
    # the target is planned at topic epoch 7 (end 100); the end asked next is 500 at topic epoch 8, the
    # same topic grown: still held back to the target, under the newer epochs
    first = source.latestOffset(START, ReadAllAvailable())["t"]["0"]
    assert (first["offset"], first["topic_epoch"], first["topic_id"]) == (100, 8, topic_id_text(TOPIC_ID))


def test_tasks_are_bootstrapped_from_the_broker_whose_current_metadata_planned_them() -> None:
    """librdkafka asks the broker it first reached for metadata while it knows no leader: a task must
    start from a broker the driver accepted as current, not from any bootstrap broker (the stale one)."""
    source, _ = reader([60])
    end = source.latestOffset(START, ReadAllAvailable())
    [task] = source.partitions(START, end)
    assert (task.value.start, task.value.end, task.value.leader_epoch) == (50, 60, 4)
    assert task.value.bootstrap_from == "127.0.0.1:3"
    # a batch planned before a restart, run again from the checkpoint: nothing observed yet, the bootstrap list
    restarted, _ = reader([60])
    [again] = restarted.partitions(START, end)
    assert again.value.bootstrap_from == "" and again.value.end == 60


def test_min_offsets_per_trigger_holds_a_batch_back_and_lag_is_reported_with_each_plan() -> None:
    source, _ = reader([55, 55, 58, 90], minOffsetsPerTrigger="10", maxTriggerDelay="1h")
    assert source.getDefaultReadLimit() == ReadMinRows(10)
    first = source.latestOffset(START, ReadMinRows(10))  # the query's first trigger reads at once (Spark's)
    assert first["t"]["0"]["offset"] == 55
    assert source.reportLatestOffset()["metrics"] == {
        "minOffsetsBehindLatest": "0",
        "maxOffsetsBehindLatest": "0",
        "avgOffsetsBehindLatest": "0.0",
    }
    assert source.latestOffset(first, ReadMinRows(10)) == first  # 0 new records: no batch
    assert source.latestOffset(first, ReadMinRows(10)) == first  # 3 new records: still none
    assert source.reportLatestOffset()["metrics"]["maxOffsetsBehindLatest"] == "3"
    assert source.latestOffset(first, ReadMinRows(10))["t"]["0"]["offset"] == 90  # 35 new: a batch
    both = reader([1], minOffsetsPerTrigger="10", maxOffsetsPerTrigger="5")[0]
    assert both.getDefaultReadLimit() == ReadMaxRows(5)  # PySpark has no composite limit: the minimum is ours


def test_an_available_now_query_does_not_wait_for_min_offsets_per_trigger() -> None:
    source, _ = reader([55, 58], minOffsetsPerTrigger="10", maxTriggerDelay="1h")
    source.latestOffset(START, ReadMinRows(10))
    source.prepareForTriggerAvailableNow()
    assert source.latestOffset(source.latestOffset(START, ReadMinRows(10)), ReadMinRows(10))["t"]["0"]["offset"] == 58
