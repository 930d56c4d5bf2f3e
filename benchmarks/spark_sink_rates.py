"""The `kafka_epochs` sink's and pipeline's rates for `bench_spark`, each beside its peers in the same run.

- Sink: `df.write.format("kafka_epochs")` of RECORDS rows (key, 100-byte value; local[2], two tasks;
  the rows cached and a write of 200,000 rows in two tasks done first, so both of Spark's Python
  workers are running and the JVM has compiled the rows-to-Arrow path, as bench_spark's source
  warm-up) from start to end of the job, beside one raw confluent-kafka Producer writing the same rows
  (idempotent, acks=all, linger.ms=5, as the sink's tasks; its clock from the first produce() to the
  end of flush()). Goal: the sink at least 0.5x the raw producer.
- Pipeline: the topic copied to a second one-broker cluster (the replicator refuses a cluster as its
  own target) by `examples.spark_mirror`'s query
  (kafka_epochs source -> kafka_epochs sink, Trigger.AvailableNow, from start() to its end), by the
  project's replicator (`client_epochs.mirror.Replicator`, in-process, from run() until the target
  holds every record), and by a raw consume-produce loop (one confluent-kafka Consumer assigned from
  offset 0, one idempotent acks=all Producer, until every copy is acknowledged). No goal is set for
  the pipeline beside the two; the figures say where it stands.
"""

from __future__ import annotations

import io
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from benchmarks.table import progress

QUIET = {"log_level": 0}
TIMEOUT_S = 600.0


def create_topic(address: str, name: str, partitions: int) -> None:
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": address, **QUIET})
    for future in admin.create_topics([NewTopic(name, partitions, 1)], request_timeout=30).values():
        future.result(timeout=60)


def copied(address: str, topic: str, partitions: int, consumer: Any = None) -> int:
    """The sum of `topic`'s high watermarks (asked with `consumer`, else a new one)."""
    from confluent_kafka import Consumer, TopicPartition

    asker = consumer or Consumer({"bootstrap.servers": address, "group.id": "bench-count", **QUIET})
    try:
        return sum(asker.get_watermark_offsets(TopicPartition(topic, p), timeout=30)[1] for p in range(partitions))
    finally:
        if consumer is None:
            asker.close()


def _copied_so_far(address: str, topic: str, partitions: int, consumer: Any) -> int:
    """`copied`, 0 while the consumer's metadata does not list a topic created a moment ago."""
    from confluent_kafka import KafkaException

    try:
        return copied(address, topic, partitions, consumer)
    except KafkaException:
        return 0


def wait_copied(
    address: str,
    topic: str,
    partitions: int,
    records: int,
    what: str,
    failed: Callable[[], BaseException | None] = lambda: None,
) -> None:
    """Wait (TIMEOUT_S) until `topic` holds `records` records, the end of a copy's clock; the copier's
    error (`failed`) ends the wait at once."""
    from confluent_kafka import Consumer

    consumer = Consumer({"bootstrap.servers": address, "group.id": "bench-count", **QUIET})
    deadline = time.monotonic() + TIMEOUT_S
    try:
        while (held := _copied_so_far(address, topic, partitions, consumer)) < records:
            if failed() is not None:
                raise RuntimeError(f"{what} failed with {held} of {records} records copied: {failed()}")
            if time.monotonic() > deadline:
                raise RuntimeError(f"{what}: {topic} holds {held} of {records} records after {TIMEOUT_S:g} s")
            time.sleep(0.05)
    finally:
        consumer.close()


def raw_producer_rate(address: str, topic: str, records: int, value_bytes: int, partitions: int) -> float:
    from confluent_kafka import Producer

    create_topic(address, topic, partitions)
    producer = Producer(
        {"bootstrap.servers": address, "acks": "all", "enable.idempotence": True, "linger.ms": 5, **QUIET}
    )
    value = b"v" * value_bytes
    failed: list[Any] = []

    def delivered(error: Any, _: Any) -> None:
        if error is not None:
            failed.append(error)

    start = time.perf_counter()
    for n in range(records):
        while True:
            try:
                producer.produce(topic, value, str(n).encode(), on_delivery=delivered)
                break
            except BufferError:
                producer.poll(0.05)
    if producer.flush(TIMEOUT_S) != 0 or failed:
        raise RuntimeError(f"the raw producer could not write every record: {failed[:1]}")
    return records / (time.perf_counter() - start)


def _rows(spark: Any, records: int, value_bytes: int) -> Any:
    """`records` rows of a string key and a `value_bytes` binary value, in two partitions (two tasks)."""
    return (
        spark.range(records)
        .selectExpr("CAST(id AS STRING) AS key", f"CAST(repeat('v', {value_bytes}) AS BINARY) AS value")
        .repartition(2)
    )


def sink_rate(
    spark: Any, address: str, topic: str, records: int, value_bytes: int, partitions: int, warm_records: int = 1000
) -> float:
    """Rows per second of a batch write of `records` rows into the sink, from start to the job's end, after a
    write of `warm_records` rows."""
    create_topic(address, topic, partitions)
    frame = _rows(spark, records, value_bytes).cache()
    frame.count()  # the rows are made before the clock runs, as the raw producer's are
    # A warm-up write of two tasks at once, as a running query's later batches find things: both of
    # Spark's Python workers started, this package imported, and the JVM's JIT compilers done with the
    # rows-to-Arrow path (as bench_spark's source warm-up, for the same reason). One task starts one
    # worker: a warm-up of `frame.limit(1000)` (one partition) left the measured write's second task to
    # start a worker, and to import pandas in it (pyarrow does, on PySpark's pa.array of the commit
    # message: 30% of that worker's py-spy samples); 1,000 rows left the JIT's work in the measured
    # write (the driver JVM's CPU in it 3.4-4.0 s, in a second write 1.4-1.5 s)
    create_topic(address, f"{topic}-warm-up", partitions)
    _rows(spark, warm_records, value_bytes).write.format("kafka_epochs").option(
        "kafka.bootstrap.servers", address
    ).option("topic", f"{topic}-warm-up").mode("append").save()
    start = time.perf_counter()
    frame.write.format("kafka_epochs").option("kafka.bootstrap.servers", address).option("topic", topic).mode(
        "append"
    ).save()
    elapsed = time.perf_counter() - start
    frame.unpersist()
    if copied(address, topic, partitions) != records:
        raise RuntimeError(f"the sink wrote {copied(address, topic, partitions)} of {records} records")
    return records / elapsed


def pipeline_rate(
    spark: Any, address: str, to: str, source: str, target: str, records: int, partitions: int, checkpoint: str
) -> float:
    from examples.spark_mirror import start_mirror

    create_topic(to, target, partitions)
    start = time.perf_counter()
    query = start_mirror(spark, address, to, source, checkpoint, target_topic=target, available_now=True)
    query.awaitTermination(TIMEOUT_S)
    elapsed = time.perf_counter() - start
    if query.exception() is not None:
        raise RuntimeError(f"the pipeline failed: {query.exception()}")
    if copied(to, target, partitions) != records:
        raise RuntimeError(f"the pipeline copied {copied(to, target, partitions)} of {records} records")
    return records / elapsed


def replicator_rate(address: str, to: str, source: str, target: str, records: int, partitions: int) -> float:
    from client_epochs.mirror import Replicator
    from client_epochs.mirror.replicator import MirrorOptions

    create_topic(to, target, partitions)
    options = MirrorOptions(
        group="bench-spark-replicator", status_interval_s=60, consumer_config=dict(QUIET), producer_config=dict(QUIET)
    )
    replicator = Replicator(address, to, [source], options, out=io.StringIO(), target_topic=lambda _: target)
    failed: list[BaseException] = []

    def run() -> None:
        try:
            replicator.run()
        except BaseException as exc:  # reported below
            failed.append(exc)

    thread = threading.Thread(target=run, name="bench-replicator", daemon=True)
    start = time.perf_counter()
    thread.start()
    try:
        wait_copied(to, target, partitions, records, "the replicator", lambda: failed[0] if failed else None)
        elapsed = time.perf_counter() - start
    finally:
        replicator.stop()
        thread.join(60)
    if failed:
        raise RuntimeError(f"the replicator failed: {failed[0]}")
    return records / elapsed


def raw_loop_rate(address: str, to: str, source: str, target: str, records: int, partitions: int) -> float:
    """A plain consume -> produce loop with confluent-kafka: the floor any copier is compared with."""
    from confluent_kafka import Consumer, Producer, TopicPartition

    create_topic(to, target, partitions)
    consumer = Consumer(
        {"bootstrap.servers": address, "group.id": "bench-raw-loop", "enable.auto.commit": False, **QUIET}
    )
    producer = Producer({"bootstrap.servers": to, "acks": "all", "enable.idempotence": True, "linger.ms": 5, **QUIET})
    start = time.perf_counter()
    consumer.assign([TopicPartition(source, p, 0) for p in range(partitions)])
    got = 0
    deadline = time.monotonic() + TIMEOUT_S
    try:
        while got < records and time.monotonic() < deadline:
            for message in consumer.consume(10_000, 1.0):
                if message.error() is not None:
                    continue
                while True:
                    try:
                        producer.produce(
                            target,
                            message.value(),
                            message.key(),
                            partition=message.partition(),
                            headers=message.headers(),
                        )
                        break
                    except BufferError:
                        producer.poll(0.05)
                got += 1
            producer.poll(0)
        if got != records or producer.flush(TIMEOUT_S) != 0:
            raise RuntimeError(f"the raw loop copied {got} of {records} records")
        return records / (time.perf_counter() - start)
    finally:
        consumer.close()


def measure_sink(spark: Any, address: str, records: int, value_bytes: int, partitions: int) -> dict[str, float]:
    """The sink's table: the raw producer, then the sink, on the same cluster in the same run."""
    progress("sink: a raw confluent-kafka producer, then df.write.format('kafka_epochs')")
    return {
        "raw producer": raw_producer_rate(address, "bench-raw-producer", records, value_bytes, partitions),
        "sink": sink_rate(spark, address, "bench-sink", records, value_bytes, partitions, min(200_000, records // 5)),
    }


def measure(
    spark: Any, address: str, source: str, records: int, value_bytes: int, partitions: int, base: str
) -> dict[str, float]:
    """Every figure of the sink and pipeline tables, in one run (the order is the table's). The copies go
    to a second one-broker cluster started here (the replicator refuses to copy a cluster into itself)."""
    from quorum.launcher import LocalCluster

    rates = measure_sink(spark, address, records, value_bytes, partitions)
    progress(
        "pipeline: a target cluster (1 controller + 1 broker), then the raw loop, the replicator and the Spark pipeline"
    )
    target_cluster = LocalCluster(Path(base) / "target-cluster", controllers=1, brokers=1)
    target_cluster.format_storage()
    target_cluster.write_configs()
    target_cluster.start()
    try:
        target = target_cluster.bootstrap_servers
        rates["raw loop"] = raw_loop_rate(address, target, source, "bench-copy-raw", records, partitions)
        rates["replicator"] = replicator_rate(address, target, source, "bench-copy-replicator", records, partitions)
        rates["pipeline"] = pipeline_rate(
            spark, address, target, source, "bench-copy-spark", records, partitions, f"{base}/checkpoint-pipeline"
        )
    finally:
        target_cluster.stop()
    return rates
