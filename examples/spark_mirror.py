"""Kafka -> Kafka replication as a Spark structured-streaming job: the `kafka_epochs` source into the
`kafka_epochs` sink.

    .venv/bin/python -m examples.spark_mirror --source 127.0.0.1:9092 --target 127.0.0.1:9192 \\
        --topic events --checkpoint /tmp/mirror-checkpoint [--target-topic events-copy] \\
        [--master local[2] | --master spark://host:7077] [--available-now | --seconds 60]

Source partition p is copied to target partition p (the target topic needs at least as many
partitions), keys, values and headers kept; every copy carries the sink's origin stamp. What the
two halves give together: the source plans every batch from the current leaders under metadata it
accepted (KIP-232: a stale broker's answer is refused, a batch never planned backwards, a recreated
topic named), and the sink writes every planned record once, across task retries, lost executors
and restarts from the checkpoint (`client_epochs.spark.stamps`). Run it again with the same
--checkpoint to resume where it stopped.

On a Spark standalone cluster every worker needs this package, confluent-kafka and pyarrow in the
Python its executors run (a Python Data Source is not a jar): see the README, "A pipeline on a
Spark cluster".
"""

from __future__ import annotations

import argparse
import os
import sys
from typing import Any


def session(
    master: str | None = "local[2]",
    app: str = "kafka-epochs-mirror",
    log_level: str = "ERROR",
    conf: dict[str, str] | None = None,
) -> Any:
    """A SparkSession on `master` (None: the one spark-submit gives) with `kafka_epochs` registered;
    Spark's Python workers run this interpreter unless PYSPARK_PYTHON says otherwise (a packed venv's
    python on a cluster)."""
    from client_epochs.spark import KafkaEpochsSource, python_executable

    os.environ.setdefault("PYSPARK_PYTHON", python_executable())
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    from pyspark.sql import SparkSession

    builder = (
        SparkSession.builder.appName(app)
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.shuffle.partitions", "2")
    )
    if master:  # None: spark-submit's --master
        builder = builder.master(master)
    for key, value in (conf or {}).items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel(log_level)
    spark.dataSource.register(KafkaEpochsSource)
    return spark


def start_mirror(
    spark: Any,
    source: str,
    target: str,
    topic: str,
    checkpoint: str,
    *,
    target_topic: str | None = None,
    max_offsets_per_trigger: int | None = None,
    available_now: bool = False,
    processing_time: str | None = None,
) -> Any:
    """Start the copy topic (on `source`) -> target_topic (on `target`); returns the StreamingQuery.
    The source's partition column says where each record goes, its headers are copied."""
    reader = (
        spark.readStream.format("kafka_epochs")
        .option("kafka.bootstrap.servers", source)
        .option("subscribe", topic)
        .option("startingOffsets", "earliest")
        .option("includeHeaders", "true")
    )
    if max_offsets_per_trigger:
        reader = reader.option("maxOffsetsPerTrigger", str(max_offsets_per_trigger))
    copy = reader.load().select("key", "value", "partition", "headers")
    writer = (
        copy.writeStream.format("kafka_epochs")
        .option("kafka.bootstrap.servers", target)
        .option("topic", target_topic or topic)
        .option("checkpointLocation", checkpoint)
    )
    if available_now:
        writer = writer.trigger(availableNow=True)
    elif processing_time:
        writer = writer.trigger(processingTime=processing_time)
    return writer.start()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--source", required=True, help="host:port,... of the source cluster")
    parser.add_argument("--target", required=True, help="host:port,... of the target cluster")
    parser.add_argument("--topic", required=True)
    parser.add_argument("--target-topic", default=None, help="the copy's name on the target (default: --topic)")
    parser.add_argument("--checkpoint", required=True, help="the query's checkpoint directory (keep it to resume)")
    parser.add_argument(
        "--master", default=None, help="local[2] or spark://host:port (default: spark-submit's --master, else local[2])"
    )
    parser.add_argument("--available-now", action="store_true", help="copy what is there now, then stop")
    parser.add_argument("--seconds", type=float, default=60.0, help="how long to run without --available-now")
    parser.add_argument("--max-offsets-per-trigger", type=int, default=None)
    args = parser.parse_args(argv)
    # spark-submit starts the JVM first and hands the driver its gateway: its --master then holds
    submitted = "PYSPARK_GATEWAY_PORT" in os.environ
    spark = session(args.master or (None if submitted else "local[2]"))
    try:
        query = start_mirror(
            spark,
            args.source,
            args.target,
            args.topic,
            args.checkpoint,
            target_topic=args.target_topic,
            max_offsets_per_trigger=args.max_offsets_per_trigger,
            available_now=args.available_now,
        )
        query.awaitTermination(None if args.available_now else args.seconds)
        query.stop()
        if query.exception() is not None:
            print(f"query failed: {query.exception()}", file=sys.stderr)
            return 1
        rows = sum(p["numInputRows"] for p in query.recentProgress)
        last = query.lastProgress or {"sources": [{}]}
        print(
            f"copied {rows} records from {args.topic} to {args.target_topic or args.topic} in "
            f"{len(query.recentProgress)} batches; the source's last report: {last['sources'][0].get('latestOffset')}"
        )
    finally:
        spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
