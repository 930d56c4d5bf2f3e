"""Part 7 of the demo: the `kafka_epochs` Spark source copies a topic into Parquet on a cluster with a
stale broker, through a kill -9 of a partition leader; then the Kafka-to-Kafka pipeline on Spark.

A local cluster of 1 controller and 3 brokers (broker 103 answers Metadata at least 2 s old, as
`quorum local-cluster --stale-broker 103 --metadata-delay-ms 2000` starts it) holds `clicks` (2
partitions, 3 replicas). A producer writes numbered records while `examples.spark_parquet`'s query
copies them into a Parquet table (local[2]). Broker 103's Metadata answers are then frozen (its
PAUSE_METADATA file, as the source's tests do) and partition 0's leader is killed with SIGKILL and
started again: 103 goes on naming the dead leader, the source's driver asks every broker in turn and
refuses 103's answers once it has seen the new leader's epoch; the demo lets the query run until it
has refused some (at most STALE_WAIT_S) and prints the count. The table must hold every acknowledged
record exactly once. Then `examples.spark_mirror`'s pipeline (kafka_epochs source into the
kafka_epochs sink) copies `clicks` to `clicks-copy` with Trigger.AvailableNow: every record once.
"""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any

from examples.demo_waits import DemoFailure, scratch_directory, wait_for
from examples.spark_mirror import start_mirror
from examples.spark_parquet import counters, spark_session, start_copy
from quorum.launcher import LocalCluster

TOPIC = "clicks"
COPY = "clicks-copy"
STALE_WAIT_S = 30.0
"""How long the query runs with broker 103 frozen, waiting for its driver to refuse a stale answer."""
STALE_BROKER = 103
RECORDS = 3000
SETTINGS = {
    "broker.session.timeout.ms": "3000",
    "broker.heartbeat.interval.ms": "500",
    "replica.lag.time.max.ms": "3000",
    "offsets.topic.replication.factor": "3",
}
QUIET = {"log_level": 0}  # librdkafka's notes about the killed broker are expected


def spark_demo() -> None:
    print(
        "\n== Part 7: a Spark structured-streaming query that refuses stale metadata (kafka_epochs, KIP-232), "
        "and a Kafka-to-Kafka pipeline on Spark",
        flush=True,
    )
    with scratch_directory("quorum-demo-spark-") as directory:
        cluster = LocalCluster(
            Path(directory) / "cluster", controllers=1, brokers=3, settings=SETTINGS, stale_brokers={STALE_BROKER: 2000}
        )
        cluster.format_storage()
        cluster.write_configs()
        cluster.start()
        for line in cluster.describe_lines():
            print(f"  {line}")
        try:
            run_part(cluster, Path(directory))
        finally:
            cluster.stop()


def leaders(bootstrap: str) -> dict[int, int]:
    from confluent_kafka.admin import AdminClient

    metadata = AdminClient({"bootstrap.servers": bootstrap, **QUIET}).list_topics(TOPIC, timeout=15)
    return {p: m.leader for p, m in metadata.topics[TOPIC].partitions.items() if m.leader >= 0}


def run_part(cluster: LocalCluster, directory: Path) -> None:
    from confluent_kafka import Producer
    from confluent_kafka.admin import AdminClient, NewTopic

    brokers = {n: s.address for n, s in cluster.specs.items() if s.role == "broker"}
    fresh = ",".join(a for n, a in sorted(brokers.items()) if n != STALE_BROKER)
    bootstrap = ",".join([brokers[STALE_BROKER], fresh])
    logs = [s.log_path for s in cluster.specs.values()]
    admin = AdminClient({"bootstrap.servers": bootstrap, **QUIET})
    for future in admin.create_topics([NewTopic(TOPIC, 2, 3)], request_timeout=30).values():
        future.result(timeout=60)
    wait_for(f"leaders for both partitions of {TOPIC}", lambda: len(leaders(fresh)) == 2, 60, logs)
    acked: list[str] = []

    def produce() -> None:
        producer = Producer(
            {
                "bootstrap.servers": bootstrap,
                "acks": "all",
                "enable.idempotence": True,
                "message.timeout.ms": 120_000,
                **QUIET,
            }
        )
        for n in range(RECORDS):
            producer.produce(
                TOPIC,
                f"click-{n}".encode(),
                partition=n % 2,
                on_delivery=lambda err, msg: err is None and acked.append(msg.value().decode()),
            )
            producer.poll(0.004)
        producer.flush(120)

    table, checkpoint = str(directory / "table"), str(directory / "checkpoint")
    print(
        f"$ python -m examples.spark_parquet --bootstrap {bootstrap} --topic {TOPIC} --table {table} "
        f"--checkpoint {checkpoint}   (the same query, started in this process)",
        flush=True,
    )
    from client_epochs.spark import SHORT_LIVED_JVM

    spark = spark_session("kafka-epochs-demo", log_level="FATAL", jvm_options=SHORT_LIVED_JVM)  # a minute's work
    try:
        writer = threading.Thread(target=produce, daemon=True)
        writer.start()
        query = start_copy(spark, bootstrap, TOPIC, table, checkpoint)
        wait_for("the query's first batches", lambda: len(query.recentProgress) >= 2, 120, logs)
        partition, victim = next((p, b) for p, b in sorted(leaders(fresh).items()) if b != STALE_BROKER)
        pause = cluster.specs[STALE_BROKER].directory / "data" / "__cluster_metadata-0" / "PAUSE_METADATA"
        print(
            f"... broker {STALE_BROKER}'s Metadata answers frozen; kill -9 broker {victim}, leader of "
            f"{TOPIC}-{partition}, while the query runs",
            flush=True,
        )
        pause.touch()
        try:
            time.sleep(1.0)  # the frozen answers are from before the kill (the broker checks every 100 ms)
            cluster.kill(victim)
            wait_for(
                f"a new leader for {TOPIC}-{partition}",
                lambda: leaders(fresh).get(partition) not in (None, victim),
                60,
                logs,
            )
            cluster.start_node(victim)
            refused = refusals_within(query, STALE_WAIT_S)
        finally:
            pause.unlink(missing_ok=True)
        print(
            f"... broker {STALE_BROKER} answered again; the driver refused {refused} stale answers meanwhile",
            flush=True,
        )
        writer.join(180)
        if writer.is_alive():
            raise DemoFailure("the producer to finish writing its records", logs)
        expected = sorted(acked)

        def copied() -> bool:
            if query.exception() is not None:
                raise DemoFailure(f"the query failed: {query.exception()}")
            return spark.read.parquet(table).count() >= len(expected)

        wait_for(f"the Parquet table to hold the {len(expected)} acknowledged records", copied, 180, logs, 1.0)
        query.stop()
        values = sorted(r.value for r in spark.read.parquet(table).select("value").collect())
        found = counters(query)
        copy_values = run_pipeline(spark, admin, bootstrap, directory, logs)
    finally:
        spark.stop()
    duplicates = len(values) - len(set(values))
    missing = len(set(expected) - set(values))
    print(
        f"... table: {len(values)} rows for {len(expected)} acknowledged records; duplicates {duplicates}, "
        f"missing {missing}"
    )
    print(
        f"... source counters: stale Metadata answers refused {found.get('staleMetadataRefused', 0)}, "
        f"backwards ends asked again {found.get('backwardsRetries', 0)}, batches planned "
        f"{found.get('batchesPlanned', 0)}"
    )
    if duplicates or missing:
        raise DemoFailure(f"the table should hold every record once: {duplicates} duplicates, {missing} missing")
    copy_duplicates = len(copy_values) - len(set(copy_values))
    copy_missing = len(set(expected) - set(copy_values))
    print(
        f"... {COPY}: {len(copy_values)} records for {len(expected)} in {TOPIC}; duplicates {copy_duplicates}, "
        f"missing {copy_missing}"
    )
    if copy_duplicates or copy_missing:
        raise DemoFailure(
            f"{COPY} should hold every record of {TOPIC} once: {copy_duplicates} duplicates, {copy_missing} missing"
        )


def refusals_within(query: Any, timeout_s: float) -> int:
    """The driver's stale answers refused, once there are some or after `timeout_s` (the demo goes on
    either way and prints the count: it shows what the driver did, it does not fail on timing)."""
    deadline = time.monotonic() + timeout_s
    while True:
        if query.exception() is not None:
            raise DemoFailure(f"the query failed: {query.exception()}")
        refused = counters(query).get("staleMetadataRefused", 0)
        if refused or time.monotonic() >= deadline:
            return refused
        time.sleep(0.5)


def run_pipeline(spark: Any, admin: Any, bootstrap: str, directory: Path, logs: list[Path]) -> list[str]:
    """`clicks` -> `clicks-copy` by the Spark pipeline (AvailableNow); the copy's values."""
    from confluent_kafka.admin import NewTopic

    for future in admin.create_topics([NewTopic(COPY, 2, 3)], request_timeout=30).values():
        future.result(timeout=60)
    checkpoint = str(directory / "mirror-checkpoint")
    print(
        f"$ python -m examples.spark_mirror --source {bootstrap} --target {bootstrap} --topic {TOPIC} "
        f"--target-topic {COPY} --checkpoint {checkpoint} --available-now   (started in this process)",
        flush=True,
    )
    query = start_mirror(spark, bootstrap, bootstrap, TOPIC, checkpoint, target_topic=COPY, available_now=True)
    wait_for("the pipeline to copy clicks", lambda: not query.isActive, 180, logs, 0.5)
    if query.exception() is not None:
        raise DemoFailure(f"the pipeline failed: {query.exception()}", logs)
    return read_values(bootstrap, COPY, 2, logs)


def read_values(bootstrap: str, topic: str, partitions: int, logs: list[Path]) -> list[str]:
    """Every value of `topic` up to its high watermarks."""
    from confluent_kafka import Consumer
    from confluent_kafka import TopicPartition as KafkaTopicPartition

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "demo-copy-check", **QUIET})
    try:
        ends = {
            p: consumer.get_watermark_offsets(KafkaTopicPartition(topic, p), timeout=30)[1] for p in range(partitions)
        }
        consumer.assign([KafkaTopicPartition(topic, p, 0) for p in range(partitions)])
        values: list[str] = []
        positions = dict.fromkeys(ends, 0)

        def read() -> bool:
            for message in consumer.consume(1000, 0.5):
                if message.error() is None and message.offset() < ends[message.partition()]:
                    values.append(message.value().decode())
                    positions[message.partition()] = message.offset() + 1
            return all(positions[p] >= ends[p] for p in ends)

        wait_for(f"{topic} read to its end", read, 60, logs, 0.0)
        return values
    finally:
        consumer.close()
