"""The `kafka_epochs` sink, the Kafka-to-Kafka pipeline and the source's offsets-by-time, split tasks and
lag metrics with real processes: one Kafka cluster (one controller, three brokers, broker 103 answering
Metadata 2 s old, as in test_spark_processes) and one Spark standalone cluster (a master and two one-core
workers started with pyspark's own launcher) with one SparkSession on it, for the module; the Kafka
cluster starts in a thread while the Spark cluster and its session start.

- a task's write run again after a first attempt wrote part of it (what a task retry, a lost executor
  or a restarted query does) leaves each record once on the target, without Spark;
- the pipeline (examples.spark_mirror) copies a 4-partition topic while a source leader and a target
  leader are killed with kill -9, an executor is killed with kill -9 in the middle of a batch, and the
  query is stopped in the middle of a batch and started again from its checkpoint: the target holds
  every source record exactly once;
- a source query with startingOffsetsByTimestamp, minPartitions=8 and maxOffsetsPerTrigger reads exactly
  the expected rows in capped batches of 8 tasks, and every progress report carries the lag metrics."""

from __future__ import annotations

import json
import re
import time
from collections import Counter
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from confluent_kafka import Consumer, KafkaException, Producer
from confluent_kafka import TopicPartition as KafkaTopicPartition
from confluent_kafka.admin import NewTopic

from client_epochs.spark.sink import SinkWriteError, write_task
from client_epochs.spark.sink_options import check_columns, parse_sink_options
from client_epochs.spark.stamps import TEXT_ORIGIN_HEADER, TaskOrigin, origin_of
from examples.spark_mirror import start_mirror
from tests.client_epochs.spark_standalone import Standalone, cluster_session, standalone_cluster
from tests.client_epochs.test_spark_processes import (
    SETTINGS,
    STALE_BROKER,
    Cluster,
    create,
    running_cluster,
    stream,
    wait_for_query,
)
from tests.test_broker_processes import QUIET
from tests.test_controller_processes import wait_until

pytest.importorskip("pyspark")

pytestmark = pytest.mark.timeout(600)

RERUN_LINE = re.compile(r"task \d+ of query \S+ batch \d+: (\d+) records of an earlier attempt are on")


@pytest.fixture(scope="module")
def clusters(tmp_path_factory) -> Iterator[tuple[Cluster, Standalone, Any]]:
    """The Kafka cluster, started in a thread while this one starts the Spark standalone cluster, one
    SparkSession on it and a first small job that starts the executors' Python workers; all of it
    stopped at the end of the module, each start bounded by its own deadlines."""
    kafka = running_cluster(tmp_path_factory.mktemp("pipeline-kafka"), SETTINGS)
    with ThreadPoolExecutor(1, thread_name_prefix="kafka-start") as pool:
        kafka_started = pool.submit(next, kafka)
        try:
            with standalone_cluster(tmp_path_factory.mktemp("pipeline-spark")) as standalone:
                session = cluster_session(standalone, "pipeline-test")
                try:
                    imported = session.sparkContext.parallelize(range(4), 4).map(
                        lambda n: __import__("client_epochs.spark.sink") and n
                    )
                    assert imported.count() == 4
                    yield kafka_started.result(), standalone, session
                finally:
                    session.stop()
        finally:
            if kafka_started.exception() is None:  # waits for the start to end
                kafka.close()  # running_cluster's finally: the brokers and the controller stopped


@pytest.fixture(scope="module")
def cluster(clusters) -> Cluster:
    return clusters[0]


@pytest.fixture(scope="module")
def spark_cluster(clusters) -> Standalone:
    return clusters[1]


@pytest.fixture(scope="module")
def spark(clusters):
    """The module's one SparkSession, on the standalone cluster."""
    return clusters[2]


def read_all(bootstrap: str, topic: str, partitions: int) -> list:
    """Every record of `topic` up to its high watermarks, as (partition, key, value, headers)."""
    consumer = Consumer(
        {"bootstrap.servers": bootstrap, "group.id": "pipeline-check", "enable.partition.eof": False, **QUIET}
    )
    try:
        ends = wait_until(
            f"{topic}'s high watermarks (a broker answering old metadata learns of a new topic late)",
            lambda: _high_watermarks(consumer, topic, partitions),
            timeout_s=30,
        )
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


def _high_watermarks(consumer: Consumer, topic: str, partitions: int) -> dict[int, int] | None:
    try:
        return {
            p: consumer.get_watermark_offsets(KafkaTopicPartition(topic, p), timeout=10)[1] for p in range(partitions)
        }
    except KafkaException:
        return None


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
    stale = cluster.running.specs[STALE_BROKER].address  # it learns of "rerun" 2 s late: the scans start there
    options = parse_sink_options({"kafka.bootstrap.servers": stale, "topic": "rerun", "tailChunk": "50"})
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


def test_a_task_run_again_after_an_upgrade_skips_what_the_text_stamping_sink_wrote(cluster):
    """A query restarted from its checkpoint after an upgrade: the records its earlier attempt wrote carry
    the text stamp of the sink before the binary one (written here as that sink did), and are not
    written again."""
    cluster.topic("upgraded", 2)
    options = parse_sink_options({"kafka.bootstrap.servers": cluster.bootstrap, "topic": "upgraded"})
    columns = check_columns([("value", "string")], options)
    values = [f"u-{n}" for n in range(80)]
    origin = TaskOrigin("query-3", 2, 0)
    earlier = Producer({"bootstrap.servers": cluster.bootstrap, "acks": "all", "enable.idempotence": True, **QUIET})
    for n, value in enumerate(values[:50]):
        earlier.produce("upgraded", value.encode(), headers=[(TEXT_ORIGIN_HEADER, origin.text(n).encode())])
    assert earlier.flush(60) == 0
    batch = pa.record_batch([pa.array(values)], names=["value"])
    again = write_task(options, columns, origin, iter([batch]), scan=True, attempt=1)
    assert (again.written, again.skipped) == (30, 50)
    assert sorted(v.decode() for _, _, v, _ in read_all(cluster.bootstrap, "upgraded", 2)) == sorted(values)


def test_a_record_the_target_refuses_fails_its_task_naming_the_partition(cluster):
    """Only refused records get a delivery report (the rest are counted once nothing is in flight): a
    record over the topic's max.message.bytes must still fail the task, not be counted as written."""
    create(cluster.admin, NewTopic("refusing", 1, 3, config={"max.message.bytes": "2000"}))
    wait_until("refusing has a leader", lambda: len(cluster.leaders("refusing")) == 1)
    options = parse_sink_options({"kafka.bootstrap.servers": cluster.bootstrap, "topic": "refusing"})
    columns = check_columns([("value", "binary")], options)
    batch = pa.record_batch([pa.array([b"small", b"x" * 5000, b"small too"], pa.binary())], names=["value"])
    with pytest.raises(SinkWriteError, match=r"refusing-0: the target did not acknowledge a record of task 2"):
        write_task(options, columns, TaskOrigin("query-2", 0, 2), iter([batch]), scan=False)


def mid_batch(query, cluster: Cluster, committed: int, target: str) -> bool:
    """The query is in a batch whose first records are on the target already (more than `committed`)."""
    return bool(query.status["isTriggerActive"]) and total(cluster.current, target, 4) > committed


def committed_rows(*queries) -> int:
    return sum(p["numInputRows"] for q in queries for p in q.recentProgress)


def test_the_pipeline_on_a_standalone_cluster_copies_exactly_once_through_kills_and_a_restart(
    cluster, spark_cluster, spark, tmp_path
):
    source, target = "pipeline-in", "pipeline-out"
    cluster.topic(source, 4, leaders=(101, 102, 101, 102))  # leaders the test may kill: not the stale broker
    cluster.topic(target, 4, leaders=(102, 101, 102, 101))
    sent = [f"m-{n}" for n in range(2000)]
    cluster.produce(source, sent, 4)
    checkpoint = str(tmp_path / "checkpoint")
    started = time.monotonic()
    events: list[str] = []

    def event(what: str) -> None:
        """What happened, and when (s since the query's first start): the failure message's timeline."""
        events.append(f"{time.monotonic() - started:.0f}s {what}")

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

    first = mirror()
    try:
        wait_for_query(first, "a batch writing to the target", lambda: mid_batch(first, cluster, 0, target), 240)
        executor = spark_cluster.executors()[0]
        spark_cluster.kill_executor(executor)
        event(f"executor {executor} killed mid-batch")
        done = len(first.recentProgress)
        with ThreadPoolExecutor(1, thread_name_prefix="leader-kills") as pool:  # while the batch is retried

            def kill_leaders() -> None:
                event(f"source leader {cluster.kill_leader(source, 0)} killed and restarted")
                event(f"target leader {cluster.kill_leader(target, 1)} killed and restarted")

            killed = pool.submit(kill_leaders)
            wait_for_query(first, "a batch after the executor kill", lambda: len(first.recentProgress) > done, 240)
            event("a batch done after the executor kill")
            killed.result(timeout=150)  # each kill_leader waits at most 60 s for a new leader
        more = [f"m-{n}" for n in range(2000, 3000)]  # the first 2,000 may all be copied by now
        cluster.produce(source, more, 4)
        sent += more
        wait_for_query(
            first,
            "a batch in progress after the leader kills",
            lambda: mid_batch(first, cluster, committed_rows(first), target),
            240,
        )
    finally:
        first.stop()
    assert first.exception() is None
    event(
        f"query stopped after {len(first.recentProgress)} batches, planned "
        f"{len(list((Path(checkpoint) / 'offsets').glob('[0-9]*')))}, committed "
        f"{len(list((Path(checkpoint) / 'commits').glob('[0-9]*')))}"
    )
    second = mirror()
    try:
        # the target's count is asked only once the query reports a trigger with no rows (each second when
        # idle): polling it with a new client every 0.2 s meanwhile takes CPU from the query on 2 cores
        wait_for_query(
            second,
            "a trigger with nothing left to copy and the target holding as many records as the source",
            lambda: (
                second.lastProgress is not None
                and second.lastProgress["numInputRows"] == 0
                and total(cluster.current, target, 4) >= len(sent)
            ),
            300,
        )
        event(f"the restarted query is idle after {len(second.recentProgress)} progress reports, all copied")
    finally:
        second.stop()
    assert second.exception() is None
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


def run_available_now(writer, timeout_s: float = 180):
    """Start `writer` with Trigger.AvailableNow and wait (at most `timeout_s`) for it to read all there was:
    the finished query, which failed nothing; at the deadline it is stopped and the test fails saying so."""
    query = writer.trigger(availableNow=True).start()
    try:
        assert query.awaitTermination(timeout_s), (
            f"the AvailableNow query did not finish in {timeout_s} s: {query.status}"
        )
    finally:
        query.stop()
    assert query.exception() is None, query.exception()
    return query


def test_offsets_by_time_split_tasks_capped_batches_and_lag_metrics(spark, cluster):
    """On the standalone cluster's two executors: startingOffsetsByTimestamp (ListOffsets with timestamps
    at the current leaders) picks the first record at or after the time in each partition;
    maxOffsetsPerTrigger caps each batch; minPartitions=8 cuts each batch's two partition ranges into 8
    tasks that still read every row once; each progress report carries Spark's
    min/max/avgOffsetsBehindLatest. A batch read by startingTimestamp/endingTimestamp with
    maxRecordsPerPartition returns exactly the records of that time window. minOffsetsPerTrigger does not
    hold an AvailableNow query back."""
    topic, first = "bytime", int(time.time() * 1000) - 300_000
    cluster.topic(topic, 2)
    producer = Producer({"bootstrap.servers": cluster.bootstrap, "acks": "all", **QUIET})
    for n in range(200):  # record n at first + n seconds, in partition n % 2 at offset n // 2
        producer.produce(topic, f"t-{n}".encode(), partition=n % 2, timestamp=first + n * 1000)
    assert producer.flush(60) == 0
    by_time = json.dumps({topic: {"0": first + 50_000, "1": first + 50_000}})
    batches: list[tuple[int, int, list[tuple[int, int]]]] = []

    def keep(frame, batch_id: int) -> None:
        rows = [(r.partition, r.offset) for r in frame.select("partition", "offset").collect()]
        batches.append((batch_id, frame.rdd.getNumPartitions(), rows))

    query = run_available_now(
        stream(
            spark, cluster, topic, startingOffsetsByTimestamp=by_time, minPartitions="8", maxOffsetsPerTrigger="60"
        ).writeStream.foreachBatch(keep)
    )
    got = sorted(row for _, _, rows in batches for row in rows)
    assert got == sorted((n % 2, n // 2) for n in range(50, 200))  # records at or after the time, each once
    assert all(len(rows) <= 60 for _, _, rows in batches) and len([b for b in batches if b[2]]) >= 3
    assert max(tasks for _, tasks, _ in batches) == 8, [(b, t, len(r)) for b, t, r in batches]
    reports = [
        json.loads(p["sources"][0]["latestOffset"])
        if isinstance(p["sources"][0]["latestOffset"], str)
        else p["sources"][0]["latestOffset"]
        for p in query.recentProgress
        if p["numInputRows"] > 0
    ]
    lag = [report["metrics"] for report in reports]
    assert lag[0] == {
        "minOffsetsBehindLatest": "45",
        "maxOffsetsBehindLatest": "45",
        "avgOffsetsBehindLatest": "45.0",
    }, lag  # 75 records per partition, 30 read of each
    assert lag[-1]["maxOffsetsBehindLatest"] == "0" and all(set(m) == set(lag[0]) for m in lag)
    window = (
        spark.read.format("kafka_epochs")
        .option("kafka.bootstrap.servers", cluster.bootstrap)
        .option("subscribe", topic)
        .option("startingTimestamp", str(first + 20_000))
        .option("endingTimestamp", str(first + 30_000))
        .option("maxRecordsPerPartition", "2")
        .load()
    )
    # minOffsetsPerTrigger alone: Spark takes the source's ReadMinRows limit, and an AvailableNow query is not
    # held back by it (1000 records never come), it reads what there is
    run_available_now(
        stream(spark, cluster, topic, minOffsetsPerTrigger="1000", maxTriggerDelay="1h")
        .writeStream.format("memory")
        .queryName("bytime_paced")
    )
    assert spark.sql("select count(*) c from bytime_paced").collect()[0].c == 200
    assert window.rdd.getNumPartitions() == 6  # 5 records per partition, at most 2 per task
    assert sorted((r.partition, r.offset) for r in window.select("partition", "offset").collect()) == sorted(
        (n % 2, n // 2) for n in range(20, 30)
    )
