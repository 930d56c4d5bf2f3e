"""Stream a Kafka topic into a Parquet table with the `kafka_epochs` source (KIP-232 on Spark's driver).

    .venv/bin/python -m examples.spark_parquet --bootstrap 127.0.0.1:9092 --topic events \\
        --table /tmp/events-table --checkpoint /tmp/events-checkpoint [--available-now] [--seconds 60]

Spark's file sink with a checkpoint writes each record exactly once, across restarts of the query
(run the command again with the same --checkpoint): it needs a source whose batches are replayable
and never go backwards, which is what `kafka_epochs` guarantees where Spark's Kafka source accepts
whatever end offset a broker gave after three tries. The query prints, after it ends, how many
stale Metadata answers the driver refused and how often it asked again because an end offset was
below one already planned.

Needs Java 17 and the `spark` extra (pyspark, pyarrow, pandas<3); Spark's Python workers must run
this interpreter, which `spark_session()` arranges with PYSPARK_PYTHON and PYSPARK_DRIVER_PYTHON.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any


def spark_session(app: str = "kafka-epochs-example", log_level: str = "ERROR", jvm_options: str | None = None) -> Any:
    """A local[2] SparkSession with the `kafka_epochs` source registered (client_epochs.spark.local_session)."""
    from client_epochs.spark import local_session

    return local_session(app, log_level, jvm_options)


def start_copy(spark: Any, bootstrap: str, topic: str, table: str, checkpoint: str, *, available_now: bool = False,
               max_offsets_per_trigger: int | None = None, **options: str) -> Any:
    """Start the streaming query topic -> Parquet table; returns the StreamingQuery."""
    reader = (spark.readStream.format("kafka_epochs").option("kafka.bootstrap.servers", bootstrap)
              .option("subscribe", topic).option("startingOffsets", "earliest"))
    if max_offsets_per_trigger:
        reader = reader.option("maxOffsetsPerTrigger", str(max_offsets_per_trigger))
    for key, value in options.items():
        reader = reader.option(key, value)
    frame = reader.load().selectExpr("CAST(key AS STRING) AS key", "CAST(value AS STRING) AS value", "topic",
                                     "partition", "offset", "timestamp", "leaderEpoch", "topicEpoch")
    writer = frame.writeStream.format("parquet").option("path", table).option("checkpointLocation", checkpoint)
    trigger = {"availableNow": True} if available_now else {"processingTime": "1 second"}
    return writer.trigger(**trigger).start()


def counters(query: Any) -> dict[str, int]:
    """The source's driver counters from the query's latest progress report that has them."""
    for progress in reversed(query.recentProgress):
        for source in progress["sources"]:
            latest = source.get("latestOffset")
            if latest:
                found = json.loads(latest) if isinstance(latest, str) else latest
                if "counters" in found:
                    return dict(found["counters"])
    return {}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--bootstrap", required=True, help="host:port,... of the Kafka cluster")
    parser.add_argument("--topic", required=True)
    parser.add_argument("--table", required=True, help="directory of the Parquet table")
    parser.add_argument("--checkpoint", required=True, help="the query's checkpoint directory (keep it to resume)")
    parser.add_argument("--available-now", action="store_true", help="copy what is there now, then stop")
    parser.add_argument("--seconds", type=float, default=60.0, help="how long to run without --available-now")
    parser.add_argument("--max-offsets-per-trigger", type=int, default=None)
    args = parser.parse_args(argv)
    spark = spark_session()
    try:
        query = start_copy(spark, args.bootstrap, args.topic, args.table, args.checkpoint,
                           available_now=args.available_now, max_offsets_per_trigger=args.max_offsets_per_trigger)
        query.awaitTermination(None if args.available_now else args.seconds)
        query.stop()
        if query.exception() is not None:
            print(f"query failed: {query.exception()}", file=sys.stderr)
            return 1
        rows = spark.read.parquet(args.table).count()
        print(f"table {args.table}: {rows} rows; source counters: {counters(query)}")
    finally:
        spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
