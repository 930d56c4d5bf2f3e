"""The executor's Arrow batches and its read loop over what librdkafka hands back, with confluent-kafka's
own Message objects (its constructor for tests) and no broker: every row is the record it came from, in
Spark's Kafka source's columns, and a task's rows are exactly its range whatever the consume calls return."""

from __future__ import annotations

import datetime
from collections.abc import Iterator
from typing import Any

import pytest

pytest.importorskip("pyarrow")
confluent_kafka = pytest.importorskip("confluent_kafka")

from confluent_kafka import KafkaError  # noqa: E402

from client_epochs import TopicPartition  # noqa: E402
from client_epochs.spark import read  # noqa: E402
from client_epochs.spark.consumer_cache import ConsumerCache  # noqa: E402
from client_epochs.spark.planning import Range  # noqa: E402

TP = TopicPartition("orders", 2)
UTC = datetime.UTC


def record(offset: int, **fields: Any) -> Any:
    made = {"topic": TP.topic, "partition": TP.partition, "offset": offset, "key": f"k{offset}".encode(),
            "value": f"v{offset}".encode(), "timestamp": (1, 1_700_000_000_000 + offset), "leader_epoch": 4}
    made.update(fields)
    if made["leader_epoch"] is None:
        del made["leader_epoch"]  # librdkafka: a record from a broker that sent no leader epoch
    return confluent_kafka.Message(**made)


@pytest.mark.parametrize("include_headers", [False, True])
def test_each_row_is_its_record_in_the_kafka_source_columns(include_headers: bool) -> None:
    messages = [
        record(10),
        record(11, key=None, timestamp=(2, 1_700_000_000_500), headers=[("h", b"x"), ("e", None)]),
        record(12, timestamp=(0, -1), leader_epoch=None, value=None),
    ]
    batch = read._batch(messages, read.arrow_schema(include_headers), 7, include_headers)
    rows = batch.to_pylist()
    assert [r["offset"] for r in rows] == [10, 11, 12]
    assert [r["key"] for r in rows] == [b"k10", None, b"k12"]
    assert [r["value"] for r in rows] == [b"v10", b"v11", None]
    assert {(r["topic"], r["partition"], r["topicEpoch"]) for r in rows} == {("orders", 2, 7)}
    assert [r["timestamp"] for r in rows] == [
        datetime.datetime.fromtimestamp(1_700_000_000, UTC) + datetime.timedelta(milliseconds=10),
        datetime.datetime.fromtimestamp(1_700_000_000, UTC) + datetime.timedelta(milliseconds=500),
        None,  # no timestamp (librdkafka's -1)
    ]
    assert [r["timestampType"] for r in rows] == [0, 1, -1]  # create time, log append time, none
    assert [r["leaderEpoch"] for r in rows] == [4, 4, -1]
    if include_headers:
        assert [r["headers"] for r in rows] == [[], [{"key": "h", "value": b"x"}, {"key": "e", "value": None}], []]
    assert batch.schema == read.arrow_schema(include_headers)


class ScriptedConsumer:
    """Hands back the scripted lists, one per consume(), then nothing."""

    def __init__(self, script: list[list[Any]]) -> None:
        self.script = list(script)
        self.paused = False

    def consume(self, count: int, timeout: float) -> list[Any]:
        return self.script.pop(0) if self.script else []

    def position(self, partitions: list[Any]) -> list[Any]:
        partitions[0].offset = -1001
        return partitions

    def pause(self, partitions: list[Any]) -> None:
        self.paused = True

    def close(self) -> None:
        pass


@pytest.fixture
def scripted(monkeypatch) -> Iterator[list[list[Any]]]:
    script: list[list[Any]] = []
    monkeypatch.setattr(read, "_open", lambda entry, client, rng, position: ScriptedConsumer(script))
    monkeypatch.setattr(read, "CONSUMERS", ConsumerCache())
    yield script
    read.CONSUMERS.clear()


def test_a_task_reads_exactly_its_range_whatever_each_consume_returns(scripted) -> None:
    retriable = KafkaError(KafkaError._TRANSPORT, "broker down")
    scripted.extend([
        [record(3), record(4)],  # fetched before the range (a reused consumer's earlier prefetch)
        [record(5), record(6), record(7)],  # a clean list: taken whole
        [record(8), confluent_kafka.Message(error=retriable), record(9)],  # an error among records
        [record(10), record(11), record(12)],  # runs past the end: 12 is the next task's
    ])
    rng = Range(TP, 5, 12, 4, 7, "b:1")
    rows = [row for batch in read.read_range(rng, "b:1", {"group.id": "g"}) for row in batch.to_pylist()]
    assert [row["offset"] for row in rows] == list(range(5, 12))
    [(_, idle)] = read.CONSUMERS._idle.items()
    assert idle.next_offset == 12 and [m.offset() for m in idle.leftover] == [12] and idle.consumer.paused
