"""The `kafka_epochs` Spark source with real processes: one local[2] SparkSession and one cluster (one
controller, three brokers, broker 103 answering Metadata 2 s old) for the module.

- a streaming query copies a topic into Parquet while partition leaders are killed with kill -9, and
  is stopped and restarted from its checkpoint twice: the table holds every acknowledged record
  exactly once, and the driver's counters show the stale answers it refused;
- a batch read with endingOffsets returns exactly the range;
- a recreated topic fails the query with TopicRecreatedError, or with onTopicRecreated=earliest the
  query goes on with the new topic from its beginning.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

from client_epochs import MetadataClient
from quorum.launcher import LocalCluster
from tests.test_broker_processes import QUIET
from tests.test_controller_processes import create, wait_until

pyspark = pytest.importorskip("pyspark")

pytestmark = pytest.mark.timeout(400)

STALE_BROKER = 103
SETTINGS = {"replica.lag.time.max.ms": "3000", "broker.session.timeout.ms": "3000",
            "broker.heartbeat.interval.ms": "500", "offsets.topic.replication.factor": "3",
            "offsets.topic.num.partitions": "2", "group.initial.rebalance.delay.ms": "0"}


class Cluster:
    def __init__(self, running: LocalCluster) -> None:
        self.running = running
        stale = running.specs[STALE_BROKER].address
        others = [s.address for n, s in sorted(running.specs.items()) if s.role == "broker" and n != STALE_BROKER]
        self.bootstrap = ",".join([stale, *others])  # the stale broker first: the driver asks it in turn
        self.admin = AdminClient({"bootstrap.servers": self.bootstrap, **QUIET})

    def topic(self, name: str, partitions: int, replicas: int = 3) -> None:
        create(self.admin, NewTopic(name, partitions, replicas))
        wait_until(f"{name} has leaders", lambda: len(self.leaders(name)) == partitions)

    def leaders(self, name: str) -> dict[int, int]:
        with MetadataClient(",".join(s.address for n, s in self.running.specs.items() if n != STALE_BROKER
                                     and s.role == "broker" and n in self.running.alive())) as client:
            parts = client.fetch([name]).partitions_of(name)
        return {tp.partition: meta.leader_id for tp, meta in parts.items() if meta.leader_id >= 0}

    def produce(self, name: str, values: list[str], partitions: int) -> None:
        producer = Producer({"bootstrap.servers": self.bootstrap, "acks": "all", "enable.idempotence": True, **QUIET})
        for n, value in enumerate(values):
            producer.produce(name, value.encode(), partition=n % partitions)
        assert producer.flush(60) == 0

    def kill_leader(self, name: str, run: int) -> int:
        """kill -9 the leader of one of the topic's partitions, a different one each run, then start it
        again once another broker leads the partition. Leaders other than the stale broker go first,
        since it must be up to be asked; when it leads every partition, it is the one killed."""
        leaders = sorted(self.leaders(name).items())
        led = [(p, leader) for p, leader in leaders if leader != STALE_BROKER] or leaders
        partition, leader = led[run % len(led)]
        self.running.kill(leader)
        wait_until(f"a new leader for {name}-{partition}", lambda: self.leaders(name).get(partition) not in
                   (None, leader), timeout_s=60)
        self.running.start_node(leader)
        return leader


@pytest.fixture(scope="module")
def cluster(tmp_path_factory) -> Iterator[Cluster]:
    running = LocalCluster(tmp_path_factory.mktemp("spark-cluster"), controllers=1, brokers=3, settings=SETTINGS,
                           stale_brokers={STALE_BROKER: 2000})
    running.format_storage()
    running.write_configs()
    running.start()
    try:
        yield Cluster(running)
    finally:
        running.stop()


@pytest.fixture(scope="module")
def spark():
    from client_epochs.spark import local_session

    session = local_session("kafka-epochs-tests")
    try:
        yield session
    finally:
        session.stop()


def stream(spark, cluster: Cluster, topic: str, **options: str):
    reader = (spark.readStream.format("kafka_epochs").option("kafka.bootstrap.servers", cluster.bootstrap)
              .option("subscribe", topic).option("startingOffsets", "earliest"))
    for key, value in options.items():
        reader = reader.option(key, value)
    return reader.load()


def counters_of(query) -> dict[str, int]:
    """The driver's counters from the last progress report that has them."""
    for progress in reversed(query.recentProgress):
        for source in progress["sources"]:
            latest = source.get("latestOffset")
            if latest:
                found = json.loads(latest) if isinstance(latest, str) else latest
                return found.get("counters", {})
    return {}


def test_batch_read_with_ending_offsets_returns_exactly_the_range(spark, cluster):
    cluster.topic("batch", 2)
    cluster.produce("batch", [f"b-{n}" for n in range(40)], 2)
    ending = json.dumps({"batch": {"0": 15, "1": {"offset": 20}}})
    frame = (spark.read.format("kafka_epochs").option("kafka.bootstrap.servers", cluster.bootstrap)
             .option("subscribe", "batch").option("startingOffsets", json.dumps({"batch": {"0": 5, "1": -2}}))
             .option("endingOffsets", ending).option("includeHeaders", "true").load())
    rows = frame.select("partition", "offset", "value", "leaderEpoch", "topicEpoch", "headers").collect()
    got = sorted((r.partition, r.offset) for r in rows)
    assert got == [(0, n) for n in range(5, 15)] + [(1, n) for n in range(20)]
    assert {bytes(r.value).decode() for r in rows if r.partition == 0} == {f"b-{2 * n}" for n in range(5, 15)}
    assert all(r.leaderEpoch >= 0 and r.topicEpoch > 0 and r.headers == [] for r in rows)
    with pytest.raises(Exception, match="past the log end"):
        (spark.read.format("kafka_epochs").option("kafka.bootstrap.servers", cluster.bootstrap)
         .option("subscribe", "batch").option("endingOffsets", json.dumps({"batch": {"0": 500}})).load().collect())


def test_stream_into_parquet_exactly_once_through_leader_kills_and_two_restarts(spark, cluster, tmp_path):
    topic, partitions = "events", 2
    cluster.topic(topic, partitions)
    table, checkpoint = str(tmp_path / "table"), str(tmp_path / "checkpoint")
    acked: list[str] = []
    stop = threading.Event()

    def produce() -> None:
        producer = Producer({"bootstrap.servers": cluster.bootstrap, "acks": "all", "enable.idempotence": True,
                             "linger.ms": 5, "message.timeout.ms": 120_000, **QUIET})
        n = 0
        while not stop.is_set():
            value = f"e-{n}"
            producer.produce(topic, value.encode(), partition=n % partitions,
                             on_delivery=lambda err, msg: err is None and acked.append(msg.value().decode()))
            n += 1
            producer.poll(0.004)
        assert producer.flush(120) == 0

    def run_query(**trigger):
        return (stream(spark, cluster, topic, maxOffsetsPerTrigger="400").writeStream.format("parquet")
                .option("path", table).option("checkpointLocation", checkpoint).trigger(**trigger).start())

    producer = threading.Thread(target=produce, daemon=True)
    producer.start()
    counters: list[dict[str, int]] = []
    killed = []
    try:
        for run in range(2):
            query = run_query(processingTime="500 milliseconds")
            wait_until("the query copies records", lambda q=query: q.lastProgress and
                       q.lastProgress["numInputRows"] >= 0 and len(q.recentProgress) >= 2, timeout_s=120)
            killed.append(cluster.kill_leader(topic, run))
            done = len(query.recentProgress)
            wait_until("batches after the kill", lambda q=query, d=done: len(q.recentProgress) >= d + 3, timeout_s=120)
            query.stop()
            assert query.exception() is None
            counters.append(counters_of(query))
    finally:
        stop.set()
        producer.join(150)
    expected = sorted(acked)
    final = run_query(availableNow=True)
    final.awaitTermination(240)
    assert final.exception() is None
    counters.append(counters_of(final))
    values = [r.value.decode() if isinstance(r.value, bytes) else bytes(r.value).decode()
              for r in spark.read.parquet(table).select("value").collect()]
    assert len(values) == len(set(values)), "a record was written to the table twice"
    assert sorted(values) == expected, f"{len(expected) - len(set(values) & set(expected))} acknowledged missing"
    print(f"copied {len(values)} records; killed leaders {killed}; driver counters per run {counters}")
    assert any(c.get("batchesPlanned", 0) > 0 for c in counters)
    assert sum(c.get("staleMetadataRefused", 0) for c in counters) >= 1, counters


def test_a_recreated_topic_fails_the_query_or_starts_the_new_topic(spark, cluster, tmp_path):
    cluster.topic("again", 1)
    cluster.produce("again", [f"old-{n}" for n in range(10)], 1)
    queries = {}
    for mode in ("fail", "earliest"):
        queries[mode] = (stream(spark, cluster, "again", onTopicRecreated=mode).writeStream.format("memory")
                         .queryName(f"again_{mode}").trigger(processingTime="500 milliseconds").start())
        wait_until(f"{mode} query read the old topic",
                   lambda m=mode: spark.sql(f"select count(*) c from again_{m}").collect()[0].c == 10, timeout_s=120)
    for future in cluster.admin.delete_topics(["again"], request_timeout=30).values():
        future.result(timeout=30)

    def created() -> bool:
        try:
            create(cluster.admin, NewTopic("again", 1, 3))
        except Exception:
            return False
        return True

    wait_until("again created again", created, timeout_s=60)
    cluster.produce("again", [f"new-{n}" for n in range(4)], 1)
    with pytest.raises(Exception, match="TopicRecreatedError|recreated"):
        queries["fail"].awaitTermination(120)
    wait_until("the earliest query reads the new topic",
               lambda: spark.sql("select count(*) c from again_earliest").collect()[0].c == 14, timeout_s=120)
    queries["earliest"].stop()
    values = sorted(bytes(r.value).decode() for r in spark.sql("select value from again_earliest").collect())
    assert values == sorted([f"old-{n}" for n in range(10)] + [f"new-{n}" for n in range(4)])

