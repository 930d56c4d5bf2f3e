"""The `kafka_epochs` sink and the Kafka-to-Kafka pipeline with real processes: one Kafka cluster (one
controller, three brokers, broker 103 answering Metadata 2 s old, as in test_spark_processes) and, for
the pipeline, a Spark standalone cluster (a master and two one-core workers started with pyspark's
own launcher), both for the module.

- a task's write run again after a first attempt wrote part of it (what a task retry, a lost executor
  or a restarted query does) leaves each record once on the target, without Spark;
- the pipeline (examples.spark_mirror) copies a 4-partition topic while a source leader and a target
  leader are killed with kill -9, an executor is killed with kill -9 in the middle of a batch, and the
  query is stopped in the middle of a batch and started again from its checkpoint: the target holds
  every source record exactly once.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pyarrow as pa
import pytest
from confluent_kafka import Consumer
from confluent_kafka import TopicPartition as KafkaTopicPartition

from client_epochs.spark.sink import write_task
from client_epochs.spark.sink_options import check_columns, parse_sink_options
from client_epochs.spark.stamps import TaskOrigin, origin_of
from examples.spark_mirror import start_mirror
from tests.client_epochs.spark_standalone import Standalone, cluster_session, standalone_cluster
from tests.client_epochs.test_spark_processes import SETTINGS, STALE_BROKER, Cluster, running_cluster, wait_for_query
from tests.test_broker_processes import QUIET
from tests.test_controller_processes import wait_until

pytest.importorskip("pyspark")

pytestmark = pytest.mark.timeout(600)

RERUN_LINE = re.compile(r"task \d+ of query \S+ batch \d+: (\d+) records of an earlier attempt are on")


@pytest.fixture(scope="module")
def cluster(tmp_path_factory) -> Iterator[Cluster]:
    yield from running_cluster(tmp_path_factory.mktemp("pipeline-kafka"), SETTINGS)


@pytest.fixture(scope="module")
def spark_cluster(tmp_path_factory) -> Iterator[Standalone]:
    with standalone_cluster(tmp_path_factory.mktemp("pipeline-spark")) as running:
        yield running


def read_all(bootstrap: str, topic: str, partitions: int) -> list:
    """Every record of `topic` up to its high watermarks, as (partition, key, value, headers)."""
    consumer = Consumer(
        {"bootstrap.servers": bootstrap, "group.id": "pipeline-check", "enable.partition.eof": False, **QUIET}
    )
    try:
        ends = {
            p: consumer.get_watermark_offsets(KafkaTopicPartition(topic, p), timeout=30)[1] for p in range(partitions)
        }
        consumer.assign([KafkaTopicPartition(topic, p, 0) for p in range(partitions) if ends[p] > 0])
        out, reached = [], {p for p, end in ends.items() if end == 0}
        wait_until(
            f"{topic} read to its high watermarks {ends}",
            lambda: _consume(consumer, ends, reached, out) or len(reached) == partitions,
            timeout_s=120,
        )
        return out
    finally:
        consumer.close()


def _consume(consumer: Consumer, ends: dict[int, int], reached: set[int], out: list) -> bool:
    for message in consumer.consume(1000, 0.5):
        if message.error() is None and message.offset() < ends[message.partition()]:
            out.append((message.partition(), message.key(), message.value(), message.headers()))
            if message.offset() + 1 >= ends[message.partition()]:
                reached.add(message.partition())
    return False


def total(bootstrap: str, topic: str, partitions: int) -> int:
    """The sum of `topic`'s high watermarks."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "pipeline-check", **QUIET})
    try:
        return sum(
            consumer.get_watermark_offsets(KafkaTopicPartition(topic, p), timeout=30)[1] for p in range(partitions)
        )
    finally:
        consumer.close()


def test_a_task_run_again_writes_only_what_its_first_attempt_did_not(cluster):
    cluster.topic("rerun", 3)
    options = parse_sink_options({"kafka.bootstrap.servers": cluster.bootstrap, "topic": "rerun", "tailChunk": "50"})
    columns = check_columns([("value", "string")], options)
    values = [f"r-{n}" for n in range(300)]
    batch = pa.record_batch([pa.array(values)], names=["value"])
    origin = TaskOrigin("query-1", 4, 1)
    first = write_task(options, columns, origin, iter([batch.slice(0, 120)]), scan=True)  # then the attempt "died"
    again = write_task(options, columns, origin, iter([batch]), scan=True, attempt=1)
    other_batch = write_task(options, columns, TaskOrigin("query-1", 5, 1), iter([batch.slice(0, 10)]), scan=True)
    assert (first.written, first.skipped) == (120, 0)
    assert (again.written, again.skipped) == (180, 120)  # null keys: the 120 landed on any of the 3 partitions
    assert (other_batch.written, other_batch.skipped) == (10, 0)  # another batch's stamps are not its own
    assert 0 < other_batch.scanned < 300  # it stopped at batch 4's records, not at the log start
    records = read_all(cluster.bootstrap, "rerun", 3)
    stamps = Counter(origin_of(headers).encode() for _, _, _, headers in records)
    assert len(records) == 310 and max(stamps.values()) == 1
    assert sorted(v.decode() for _, _, v, h in records if origin_of(h).batch == 4) == sorted(values)


def mid_batch(query, cluster: Cluster, committed: int, target: str) -> bool:
    """The query is in a batch whose first records are on the target already (more than `committed`)."""
    return bool(query.status["isTriggerActive"]) and total(cluster.bootstrap, target, 4) > committed


def committed_rows(*queries) -> int:
    return sum(p["numInputRows"] for q in queries for p in q.recentProgress)


def test_the_pipeline_on_a_standalone_cluster_copies_exactly_once_through_kills_and_a_restart(
    cluster, spark_cluster, tmp_path
):
    source, target = "pipeline-in", "pipeline-out"
    cluster.topic(source, 4, leaders=(101, 102, 101, 102))  # leaders the test may kill: not the stale broker
    cluster.topic(target, 4, leaders=(102, 101, 102, 101))
    sent = [f"m-{n}" for n in range(4000)]
    cluster.produce(source, sent, 4)
    checkpoint = str(tmp_path / "checkpoint")
    spark = cluster_session(spark_cluster, "pipeline-test")
    events: list[str] = []

    def mirror():
        return start_mirror(
            spark,
            cluster.bootstrap,
            cluster.bootstrap,
            source,
            checkpoint,
            target_topic=target,
            max_offsets_per_trigger=1000,
        )

    try:
        first = mirror()
        wait_for_query(first, "a batch writing to the target", lambda: mid_batch(first, cluster, 0, target), 240)
        executor = spark_cluster.executors()[0]
        spark_cluster.kill_executor(executor)
        events.append(f"executor {executor} killed mid-batch")
        done = len(first.recentProgress)
        wait_for_query(first, "a batch after the executor kill", lambda: len(first.recentProgress) > done, 240)
        events.append(f"source leader {cluster.kill_leader(source, 0)} killed and restarted")
        events.append(f"target leader {cluster.kill_leader(target, 1)} killed and restarted")
        more = [f"m-{n}" for n in range(4000, 6000)]  # the first 4,000 may all be copied by now
        cluster.produce(source, more, 4)
        sent += more
        wait_for_query(
            first,
            "a batch in progress after the leader kills",
            lambda: mid_batch(first, cluster, committed_rows(first), target),
            240,
        )
        first.stop()
        assert first.exception() is None
        events.append(
            f"query stopped after {len(first.recentProgress)} batches, planned "
            f"{len(list((Path(checkpoint) / 'offsets').glob('[0-9]*')))}, committed "
            f"{len(list((Path(checkpoint) / 'commits').glob('[0-9]*')))}"
        )
        second = mirror()
        try:
            wait_for_query(
                second,
                "the target holds as many records as the source",
                lambda: total(cluster.bootstrap, target, 4) >= len(sent),
                300,
            )
            wait_for_query(
                second,
                "a batch with nothing left to copy",
                lambda: second.lastProgress is not None and second.lastProgress["numInputRows"] == 0,
                120,
            )
        finally:
            second.stop()
        assert second.exception() is None
    finally:
        spark.stop()
    records = read_all(cluster.bootstrap, target, 4)
    copies = Counter(value.decode() for _, _, value, _ in records)
    twice = sorted(v for v, n in copies.items() if n > 1)
    assert not twice, f"{len(twice)} source records are on the target more than once, e.g. {twice[:5]}; {events}"
    assert sorted(copies) == sorted(sent), f"{len(set(sent) - set(copies))} source records missing; {events}"
    by_partition = {int(value.decode().split("-")[1]) % 4: p for p, _, value, _ in records}
    assert by_partition == {0: 0, 1: 1, 2: 2, 3: 3}  # source partition p went to target partition p
    skipped = [int(m.group(1)) for m in RERUN_LINE.finditer(spark_cluster.executor_logs())]
    print(f"pipeline events: {events}; re-run tasks that found their records on the target: {skipped}")
    assert skipped and sum(skipped) > 0, f"no re-run found records of its first attempt on the target: {events}"
    assert STALE_BROKER in cluster.running.alive()
