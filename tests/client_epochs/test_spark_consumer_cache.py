"""The executor's consumer cache (Spark's `spark.kafka.consumer.cache.*` semantics) and `read_range` using
it, with a fake consumer in place of librdkafka's: the next task of a partition reads on with the consumer
the last one left, a task elsewhere in the log reassigns it, a failed task closes it."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

pytest.importorskip("pyarrow")
pytest.importorskip("confluent_kafka")

import confluent_kafka  # noqa: E402
from confluent_kafka import KafkaError  # noqa: E402

from client_epochs import TopicPartition  # noqa: E402
from client_epochs.spark import read  # noqa: E402
from client_epochs.spark.consumer_cache import ConsumerCache, Idle  # noqa: E402
from client_epochs.spark.planning import Range  # noqa: E402

TP = TopicPartition("t", 0)


def Message(offset: int, error: Any = None) -> confluent_kafka.Message:
    """A record of the fake partition as librdkafka hands it (confluent-kafka's constructor for tests)."""
    return confluent_kafka.Message(
        topic=TP.topic,
        partition=TP.partition,
        offset=offset,
        key=b"k",
        value=f"v-{offset}".encode(),
        timestamp=(1, 1_700_000_000_000 + offset),
        leader_epoch=3,
        error=error,
    )


class FakeConsumer:
    """A partition of 1,000 records; hands back at most 3 a call, as a consumer draining its prefetch does."""

    def __init__(self, position: int) -> None:
        self.next = position
        self.assigned = [position]
        self.closed = False
        self.paused = False
        self.fail_at: int | None = None

    def pause(self, partitions: list[Any]) -> None:
        self.paused = True

    def resume(self, partitions: list[Any]) -> None:
        self.paused = False

    def assign(self, partitions: list[Any]) -> None:
        self.assigned.append(partitions[0].offset)
        self.next = partitions[0].offset

    def consume(self, count: int, timeout: float) -> list[confluent_kafka.Message]:
        assert not self.paused, "a cached consumer is resumed before its next task reads"
        if self.fail_at is not None and self.next >= self.fail_at:
            return [Message(self.next, KafkaError(KafkaError._LOG_TRUNCATION, "truncated", fatal=True))]
        out = [Message(offset) for offset in range(self.next, min(self.next + min(count, 3), 1000))]
        self.next += len(out)
        return out

    def position(self, partitions: list[Any]) -> list[Any]:
        partitions[0].offset = self.next
        return partitions

    def close(self) -> None:
        self.closed = True


@pytest.fixture
def opened(monkeypatch) -> Iterator[list[FakeConsumer]]:
    made: list[FakeConsumer] = []

    def fake_open(entry: str, client: Any, rng: Range, position: int) -> FakeConsumer:
        made.append(FakeConsumer(position))
        return made[-1]

    monkeypatch.setattr(read, "_open", fake_open)
    monkeypatch.setattr(read, "CONSUMERS", ConsumerCache())
    yield made
    read.CONSUMERS.clear()


def offsets(start: int, end: int) -> list[int]:
    rng = Range(TP, start, end, 3, 5, "b:1")
    return [o for batch in read.read_range(rng, "b:1", {"group.id": "g"}) for o in batch.column("offset").to_pylist()]


def test_the_next_task_of_a_partition_reads_on_with_the_consumer_the_last_left(opened) -> None:
    assert offsets(0, 10) == list(range(10))
    assert opened[0].paused  # idle in the cache: fetching nothing
    assert offsets(10, 25) == list(range(10, 25))  # the next batch of a stream: no new consumer, no new assignment
    assert len(opened) == 1 and opened[0].assigned == [0] and read.CONSUMERS.hits == 1
    assert offsets(40, 45) == list(range(40, 45))  # elsewhere in the log (a retried or split task): reassigned
    assert len(opened) == 1 and opened[0].assigned == [0, 40] and not opened[0].closed
    assert offsets(0, 4) == list(range(4))  # every range is read in full, from where it starts
    assert len(opened) == 1 and len(read.CONSUMERS) == 1


def test_a_task_that_fails_closes_its_consumer_and_the_next_opens_another(opened) -> None:
    assert offsets(0, 6) == list(range(6))
    opened[0].fail_at = 8
    with pytest.raises(read.RangeReadError, match="t-0: read offsets up to 9 of \\[6, 12\\)"):
        offsets(6, 12)
    assert opened[0].closed and len(read.CONSUMERS) == 0
    assert offsets(6, 12) == list(range(6, 12)) and len(opened) == 2


def test_the_cache_keeps_at_most_its_capacity_and_closes_idle_consumers() -> None:
    closed: list[str] = []
    cache = ConsumerCache(capacity=2, idle_timeout_s=300, close=closed.append)
    for n, name in enumerate(["a", "b", "c"]):
        cache.give_back(name, Idle(name, 0), now=n)
    assert closed == ["a"] and len(cache) == 2  # the least recently used goes over capacity
    assert cache.take("b", now=10).consumer == "b" and cache.take("b", now=10) is None  # one task at a time
    cache.give_back("b", Idle("b", 5), now=10)
    assert cache.take("c", now=400) is None and closed == ["a", "c", "b"]  # idle past the timeout: closed


class LaggingPositionConsumer(FakeConsumer):
    """librdkafka after a re-assign: until its fetcher has stopped, position() still says where the previous
    assignment got to, and the first consume after it returns nothing yet."""

    def __init__(self, position: int) -> None:
        super().__init__(position)
        self.stale: int | None = None

    def assign(self, partitions: list[Any]) -> None:
        self.stale = self.next
        super().assign(partitions)

    def consume(self, count: int, timeout: float) -> list[confluent_kafka.Message]:
        if self.stale is not None and not getattr(self, "_waited", False):
            self._waited = True  # one empty call: the old fetcher is still stopping
            return []
        self.stale = None
        self._waited = False
        return super().consume(count, timeout)

    def position(self, partitions: list[Any]) -> list[Any]:
        partitions[0].offset = self.stale if self.stale is not None else self.next
        return partitions


def test_a_reassigned_consumer_reads_its_new_range_although_its_position_still_says_the_old_one(
    opened, monkeypatch
) -> None:
    """A task retried on a worker whose cached consumer read past its start: librdkafka's position right
    after the re-assign is the old range's end, which must not end the new range unread."""
    made: list[FakeConsumer] = opened

    def lagging_open(entry: str, client: Any, rng: Range, position: int) -> FakeConsumer:
        made.append(LaggingPositionConsumer(position))
        return made[-1]

    monkeypatch.setattr(read, "_open", lagging_open)
    assert offsets(0, 45) == list(range(45))
    assert offsets(10, 20) == list(range(10, 20))  # before: [] (position 45 taken as the range's end)
    assert offsets(0, 30) == list(range(30))  # and again, from an earlier start
    assert len(made) == 1 and made[0].assigned == [0, 10, 0]
