"""The `kafka_epochs` Spark source with real processes: one local[2] SparkSession and one cluster (one
controller, three brokers, broker 103 answering Metadata 2 s old) for the module.

- a streaming query copies a topic into Parquet while partition leaders are killed with kill -9, and
  is stopped and restarted from its checkpoint twice: the table holds every acknowledged record
  exactly once (the stale answers the driver refuses are asserted where they are certain: the paused broker);
- a batch read with endingOffsets returns exactly the range;
- a broker whose Metadata answers are paused (PAUSE_METADATA) while the leader moves: the source
  refuses its answers and never plans a batch backwards; a plain raw-client loop is recorded beside;
- a recreated topic fails the query with TopicRecreatedError, or with onTopicRecreated=earliest the
  query goes on with the new topic from its beginning;
- partitions added to a topic (CreatePartitions, a higher topic epoch, the same topic id) are picked
  up by the running query: every record exactly once, no error.
"""

from __future__ import annotations

import collections
import itertools
import json
import logging
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import Consumer, Producer
from confluent_kafka import TopicPartition as KafkaTopicPartition
from confluent_kafka.admin import AdminClient, NewPartitions, NewTopic

from client_epochs import MetadataClient, TopicPartition
from client_epochs.committed import split
from client_epochs.offset_fetch import OffsetFetcher
from quorum.launcher import KAFKA_COMPATIBLE, LocalCluster
from quorum.wire.internal_metadata import topic_id_text
from tests.test_broker_processes import QUIET
from tests.test_controller_processes import create, wait_until

pyspark = pytest.importorskip("pyspark")

pytestmark = pytest.mark.timeout(400)

STALE_BROKER = 103
SETTINGS = {
    "replica.lag.time.max.ms": "3000",
    "broker.session.timeout.ms": "3000",
    "broker.heartbeat.interval.ms": "500",
    "offsets.topic.replication.factor": "3",
    "offsets.topic.num.partitions": "2",
    "group.initial.rebalance.delay.ms": "0",
}


class Cluster:
    def __init__(self, running: LocalCluster) -> None:
        self.running = running
        stale = running.specs[STALE_BROKER].address
        others = [s.address for n, s in sorted(running.specs.items()) if s.role == "broker" and n != STALE_BROKER]
        self.bootstrap = ",".join([stale, *others])  # the stale broker first: the driver asks it in turn
        self.current = ",".join(others)
        """The brokers whose metadata is not delayed: what a test's own checks ask (the stale one answers
        a topic created in the last 2 s with no partitions, and librdkafka fails at once on those)."""
        self.admin = AdminClient({"bootstrap.servers": self.bootstrap, **QUIET})
        self.mode = "kafka_compatible" if running.settings.get("quorum.kip232.enable") == "false" else "kip232"
        """The brokers' mode; also in the names of the memory tables a scenario run in both makes."""

    def topic(self, name: str, partitions: int, replicas: int = 3, leaders: tuple[int, ...] = ()) -> None:
        """Create `name`; `leaders` pins each partition's first (preferred) replica, the others follow."""
        if leaders:
            brokers = sorted(n for n, s in self.running.specs.items() if s.role == "broker")
            assignment = [[first, *(b for b in brokers if b != first)][:replicas] for first in leaders]
            create(
                self.admin,
                NewTopic(name, num_partitions=partitions, replication_factor=-1, replica_assignment=assignment),
            )
        else:
            create(self.admin, NewTopic(name, partitions, replicas))
        wait_until(f"{name} has leaders", lambda: len(self.leaders(name)) == partitions)

    def leaders(self, name: str, ask: tuple[int, ...] = ()) -> dict[int, int]:
        """Leader per partition, from the live brokers in `ask` (default: every live one but the stale one)."""
        ask = ask or tuple(n for n in self.running.specs if n != STALE_BROKER)
        with MetadataClient(
            ",".join(
                s.address
                for n, s in self.running.specs.items()
                if n in ask and s.role == "broker" and n in self.running.alive()
            )
        ) as client:
            parts = client.fetch([name]).partitions_of(name)
        return {tp.partition: meta.leader_id for tp, meta in parts.items() if meta.leader_id >= 0}

    def produce(self, name: str, values: list[str], partitions: int, bootstrap: str | None = None) -> None:
        """Produce `values` with acks=all; a flush that leaves records undelivered fails with what the
        client saw (its delivery errors and the last lines of its own debug log) and what each live
        broker says of the partitions' leaders and ISRs, since such a stall has been seen only under load."""
        client_log = ClientLog()
        errors: list[str] = []
        producer = Producer(
            {
                "bootstrap.servers": bootstrap or self.bootstrap,
                "acks": "all",
                "enable.idempotence": True,
                "debug": "broker,topic,msg,eos,metadata",
                "logger": client_log.logger,
            }
        )
        for n, value in enumerate(values):
            producer.produce(
                name,
                value.encode(),
                partition=n % partitions,
                on_delivery=lambda err, _msg: err is not None and errors.append(str(err)),
            )
        left = producer.flush(60)
        assert left == 0, (
            f"{left} of {len(values)} records to {name} undelivered after 60 s; delivery errors "
            f"{errors[:3]}; partition state per broker {self.partition_states(name)}; "
            f"the producer's last log lines:\n{client_log.tail()}"
        )

    def partition_states(self, name: str) -> dict[int, object]:
        """(leader, leader epoch, ISR) per partition as each live broker answers Metadata, or its error."""
        states: dict[int, object] = {}
        for node, spec in self.running.specs.items():
            if spec.role != "broker" or node not in self.running.alive():
                continue
            try:
                with MetadataClient(spec.address) as client:
                    parts = client.fetch([name]).partitions_of(name)
                states[node] = {
                    tp.partition: (meta.leader_id, meta.leader_epoch, meta.isr) for tp, meta in parts.items()
                }
            except Exception as exc:  # a diagnostic: the error is what there is to say
                states[node] = f"{type(exc).__name__}: {exc}"
        return states

    def kill_leader(self, name: str, run: int) -> int:
        """kill -9 the leader of one of the topic's partitions, a different one each run, then start it
        again once another broker leads the partition. Leaders other than the stale broker go first,
        since it must be up to be asked; when it leads every partition, it is the one killed."""
        leaders = sorted(self.leaders(name).items())
        led = [(p, leader) for p, leader in leaders if leader != STALE_BROKER] or leaders
        partition, leader = led[run % len(led)]
        self.running.kill(leader)
        wait_until(
            f"a new leader for {name}-{partition}",
            lambda: self.leaders(name).get(partition) not in (None, leader),
            timeout_s=60,
        )
        self.running.start_node(leader)
        return leader


class ClientLog:
    """librdkafka's debug lines for one client, kept in memory (the last few hundred) for a failure message."""

    KEEP = 400
    WORTH_SHOWING = ("error", "fail", "leader", "pid", "produce", "isr", "stale", "timed out", "drain")

    def __init__(self) -> None:
        self.lines: collections.deque[str] = collections.deque(maxlen=self.KEEP)
        self.logger = logging.getLogger(f"rdkafka.{id(self)}")
        self.logger.propagate = False
        self.logger.setLevel(logging.DEBUG)
        handler = logging.Handler()
        handler.emit = lambda record: self.lines.append(record.getMessage())  # type: ignore[method-assign]
        self.logger.addHandler(handler)

    def tail(self, count: int = 40) -> str:
        shown = [line for line in self.lines if any(word in line.lower() for word in self.WORTH_SHOWING)]
        return "\n".join(shown[-count:])


def running_cluster(directory: Path, settings: dict[str, str]) -> Iterator[Cluster]:
    running = LocalCluster(directory, controllers=1, brokers=3, settings=settings, stale_brokers={STALE_BROKER: 2000})
    running.format_storage()
    running.write_configs()
    running.start()
    try:
        yield Cluster(running)
    finally:
        running.stop()


@pytest.fixture(scope="module")
def cluster(tmp_path_factory) -> Iterator[Cluster]:
    yield from running_cluster(tmp_path_factory.mktemp("spark-cluster"), SETTINGS)


@pytest.fixture(scope="module")
def kafka_compatible_cluster(tmp_path_factory) -> Iterator[Cluster]:
    """The same cluster with brokers that answer as Apache Kafka's (issue 33): no topic epochs."""
    yield from running_cluster(tmp_path_factory.mktemp("spark-kafka-compatible"), {**SETTINGS, **KAFKA_COMPATIBLE})


@pytest.fixture(params=["kip232", "kafka-compatible"])
def either_cluster(request) -> Cluster:
    """The scenarios that must hold in both broker modes run against each (the second cluster starts
    only when the first of them needs it)."""
    return request.getfixturevalue("cluster" if request.param == "kip232" else "kafka_compatible_cluster")


@pytest.fixture(scope="module")
def spark():
    from client_epochs.spark import SHORT_LIVED_JVM, local_session

    session = local_session("kafka-epochs-tests", jvm_options=SHORT_LIVED_JVM)
    try:
        yield session
    finally:
        session.stop()


def stream(spark, cluster: Cluster, topic: str, **options: str):
    reader = (
        spark.readStream.format("kafka_epochs")
        .option("kafka.bootstrap.servers", cluster.bootstrap)
        .option("subscribe", topic)
        .option("startingOffsets", "earliest")
    )
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


def wait_for_query(query, what: str, condition, timeout_s: float) -> None:
    """wait_until for a streaming query, failing at once when the query stopped and, at the deadline,
    with what the query was doing (its status, last progress, driver counters): a stall is named."""

    def check():
        if not query.isActive:
            raise RuntimeError(f"the query stopped while waiting for {what}: {query.exception()}")
        return condition()

    try:
        wait_until(what, check, timeout_s=timeout_s)
    except AssertionError as exc:
        last = query.lastProgress or {}
        summary = {key: last.get(key) for key in ("batchId", "timestamp", "numInputRows", "durationMs")}
        raise AssertionError(
            f"{exc}; query status {query.status}; progress entries {len(query.recentProgress)}; "
            f"last {summary}; driver counters {counters_of(query)}; "
            f"exception {query.exception()}"
        ) from exc


def test_batch_read_with_ending_offsets_returns_exactly_the_range(spark, cluster):
    cluster.topic("batch", 2)
    cluster.produce("batch", [f"b-{n}" for n in range(40)], 2)
    ending = json.dumps({"batch": {"0": 15, "1": {"offset": 20}}})
    frame = (
        spark.read.format("kafka_epochs")
        .option("kafka.bootstrap.servers", cluster.bootstrap)
        .option("subscribe", "batch")
        .option("startingOffsets", json.dumps({"batch": {"0": 5, "1": -2}}))
        .option("endingOffsets", ending)
        .option("includeHeaders", "true")
        .load()
    )
    rows = frame.select("partition", "offset", "value", "leaderEpoch", "topicEpoch", "headers").collect()
    got = sorted((r.partition, r.offset) for r in rows)
    assert got == [(0, n) for n in range(5, 15)] + [(1, n) for n in range(20)]
    assert {bytes(r.value).decode() for r in rows if r.partition == 0} == {f"b-{2 * n}" for n in range(5, 15)}
    assert all(r.leaderEpoch >= 0 and r.topicEpoch > 0 and r.headers == [] for r in rows)
    by_pattern = (
        spark.read.format("kafka_epochs")
        .option("kafka.bootstrap.servers", cluster.bootstrap)
        .option("subscribePattern", "bat.*")
        .load()
    )
    assert by_pattern.count() == 40
    assigned = (
        spark.read.format("kafka_epochs")
        .option("kafka.bootstrap.servers", cluster.bootstrap)
        .option("assign", json.dumps({"batch": [1]}))
        .load()
        .select("partition", "offset")
        .collect()
    )
    assert sorted((r.partition, r.offset) for r in assigned) == [(1, n) for n in range(20)]
    with pytest.raises(Exception, match="past the log end"):
        (
            spark.read.format("kafka_epochs")
            .option("kafka.bootstrap.servers", cluster.bootstrap)
            .option("subscribe", "batch")
            .option("endingOffsets", json.dumps({"batch": {"0": 500}}))
            .load()
            .collect()
        )


def test_stream_into_parquet_exactly_once_through_leader_kills_and_two_restarts(spark, cluster, tmp_path):
    topic, partitions = "events", 2
    cluster.topic(topic, partitions, leaders=(101, 102))  # leaders the test may kill: not the stale broker
    table, checkpoint = str(tmp_path / "table"), str(tmp_path / "checkpoint")
    acked: list[str] = []
    stop = threading.Event()

    def produce() -> None:
        producer = Producer(
            {
                "bootstrap.servers": cluster.bootstrap,
                "acks": "all",
                "enable.idempotence": True,
                "linger.ms": 5,
                "message.timeout.ms": 120_000,
                **QUIET,
            }
        )
        n = 0
        while not stop.is_set():
            value = f"e-{n}"
            producer.produce(
                topic,
                value.encode(),
                partition=n % partitions,
                on_delivery=lambda err, msg: err is None and acked.append(msg.value().decode()),
            )
            n += 1
            producer.poll(0.02)  # about 50 records a second: the final catch-up takes a few batches, not 28
        assert producer.flush(120) == 0

    def run_query(**trigger):
        return (
            stream(spark, cluster, topic, maxOffsetsPerTrigger="400", commitOffsetsToGroup="spark-copy")
            .writeStream.format("parquet")
            .option("path", table)
            .option("checkpointLocation", checkpoint)
            .trigger(**trigger)
            .start()
        )

    producer = threading.Thread(target=produce, daemon=True)
    producer.start()
    counters: list[dict[str, int]] = []
    killed = []
    try:
        for run in range(2):
            query = run_query(processingTime="500 milliseconds")
            wait_for_query(
                query,
                "the query copies records",
                lambda q=query: q.lastProgress and q.lastProgress["numInputRows"] >= 0 and len(q.recentProgress) >= 2,
                timeout_s=120,
            )
            killed.append(cluster.kill_leader(topic, run))
            done = len(query.recentProgress)
            # a few batches planned after the kill; whether one of them meets the stale broker's 2 s old
            # answer is a race, so refusals are asserted by test_paused_metadata, where they are certain
            wait_for_query(
                query,
                "batches after the kill",
                lambda q=query, d=done: len(q.recentProgress) >= d + 3,
                timeout_s=180,
            )
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
    values = [
        r.value.decode() if isinstance(r.value, bytes) else bytes(r.value).decode()
        for r in spark.read.parquet(table).select("value").collect()
    ]
    assert len(values) == len(set(values)), "a record was written to the table twice"
    assert sorted(values) == expected, f"{len(expected) - len(set(values) & set(expected))} acknowledged missing"
    print(f"copied {len(values)} records; killed leaders {killed}; driver counters per run {counters}")
    assert any(c.get("batchesPlanned", 0) > 0 for c in counters), counters
    # commitOffsetsToGroup: the group holds end offsets the job planned, with KIP-232 internal metadata
    fetcher = OffsetFetcher(cluster.bootstrap)
    try:
        committed = fetcher.fetch("spark-copy", [TopicPartition(topic, p) for p in range(partitions)])
    finally:
        fetcher.close()
    ends = planned_ends(Path(checkpoint))[-1][topic]
    for tp, entry in committed.items():
        user, internal = split(tp, entry.metadata)
        assert 0 < entry.offset <= ends[str(tp.partition)]["offset"], (tp, entry, ends)
        assert internal is not None and internal.topic_epoch == ends[str(tp.partition)]["topic_epoch"] and user == ""
        assert internal.topic_id is not None and topic_id_text(internal.topic_id) == ends[str(tp.partition)]["topic_id"]


def test_a_recreated_topic_fails_the_query_or_starts_the_new_topic(spark, either_cluster, tmp_path):
    cluster = either_cluster
    table = {mode: f"again_{mode}_{cluster.mode}" for mode in ("fail", "earliest")}
    cluster.topic("again", 1)
    cluster.produce("again", [f"old-{n}" for n in range(10)], 1)
    queries = {}
    for mode in ("fail", "earliest"):
        queries[mode] = (
            stream(spark, cluster, "again", onTopicRecreated=mode)
            .writeStream.format("memory")
            .queryName(table[mode])
            .trigger(processingTime="500 milliseconds")
            .start()
        )
        wait_for_query(
            queries[mode],
            f"{mode} query read the old topic",
            lambda m=mode: spark.sql(f"select count(*) c from {table[m]}").collect()[0].c == 10,
            timeout_s=120,
        )
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
    wait_until(
        "the earliest query reads the new topic",
        lambda: spark.sql(f"select count(*) c from {table['earliest']}").collect()[0].c == 14,
        timeout_s=120,
    )
    queries["earliest"].stop()
    values = sorted(bytes(r.value).decode() for r in spark.sql(f"select value from {table['earliest']}").collect())
    assert values == sorted([f"old-{n}" for n in range(10)] + [f"new-{n}" for n in range(4)])


def test_partitions_added_under_a_running_query_are_read_and_nothing_is_read_twice(spark, cluster, tmp_path):
    """CreatePartitions raises the topic epoch, as a recreation does: the query must go on (the topic id
    in its offsets is unchanged), read the new partitions from their start and the old one on."""
    cluster.topic("grow", 1)
    cluster.produce("grow", [f"a-{n}" for n in range(10)], 1)
    checkpoint = tmp_path / "checkpoint"
    query = (
        stream(spark, cluster, "grow")
        .writeStream.format("memory")
        .queryName("grow")
        .option("checkpointLocation", str(checkpoint))
        .trigger(processingTime="500 milliseconds")
        .start()
    )

    def rows() -> int:
        assert query.isActive, f"the query stopped: {query.exception()}"
        return spark.sql("select count(*) c from grow").collect()[0].c

    try:
        wait_for_query(query, "the query read grow's first 10 records", lambda: rows() == 10, timeout_s=120)
        before = planned_ends(checkpoint)[-1]["grow"]["0"]
        for future in cluster.admin.create_partitions([NewPartitions("grow", 3)]).values():
            future.result(timeout=30)
        for ask in ((), (STALE_BROKER,)):  # the producer may bootstrap from the stale broker
            wait_until("grow has 3 partitions with leaders", lambda a=ask: len(cluster.leaders("grow", a)) == 3)
        cluster.produce("grow", [f"b-{n}" for n in range(30)], 3)
        wait_for_query(
            query, "the query read the 30 records produced after the growth", lambda: rows() == 40, timeout_s=120
        )
        assert query.exception() is None
    finally:
        query.stop()
    values = sorted(bytes(r.value).decode() for r in spark.sql("select value from grow").collect())
    assert values == sorted([f"a-{n}" for n in range(10)] + [f"b-{n}" for n in range(30)])  # each exactly once
    after = planned_ends(checkpoint)[-1]["grow"]
    assert sorted(after) == ["0", "1", "2"]
    assert after["0"]["topic_epoch"] > before["topic_epoch"] and after["0"]["offset"] == 20
    assert {entry["topic_id"] for entry in after.values()} == {before["topic_id"]}


def planned_ends(checkpoint: Path) -> list[dict[str, dict[str, dict[str, int]]]]:
    """The source's end offsets of every batch, from the query's offset log (checkpoint/offsets/N)."""
    files = sorted((f for f in (checkpoint / "offsets").iterdir() if f.name.isdigit()), key=lambda f: int(f.name))
    return [json.loads(f.read_text().splitlines()[2]) for f in files]


def test_paused_metadata_while_the_leader_moves_never_plans_backwards(spark, either_cluster, tmp_path):
    """KAFKA-6262 on the driver: broker 102's Metadata answers are frozen (PAUSE_METADATA) while the
    partition's leader is killed and another takes over. The source asks every broker in turn, refuses
    102's old answers once it has seen a newer one, and its planned ends only move forward. A plain
    loop with the raw client (confluent-kafka's query_watermark_offsets, bootstrapped from 102, as a
    Spark-style planner would ask for the latest offset) is recorded through the same script. In both
    broker modes: without topic epochs, 102's answers are refused by their older leader epoch alone."""
    cluster = either_cluster
    topic, paused = "paused", 102
    create(
        cluster.admin, NewTopic(topic, num_partitions=1, replication_factor=-1, replica_assignment=[[101, 102, 103]])
    )
    wait_until(f"{topic} has a leader", lambda: cluster.leaders(topic).get(0) == 101)
    cluster.produce(topic, [f"p-{n}" for n in range(100)], 1)
    pause_file = cluster.running.specs[paused].directory / "data" / "__cluster_metadata-0" / "PAUSE_METADATA"
    checkpoint = tmp_path / "checkpoint"
    table = f"paused_{cluster.mode}"
    query = (
        stream(spark, cluster, topic)
        .writeStream.format("memory")
        .queryName(table)
        .option("checkpointLocation", str(checkpoint))
        .trigger(processingTime="500 milliseconds")
        .start()
    )
    raw_ends: list[int | str] = []
    stop = threading.Event()

    def raw_loop() -> None:
        consumer = Consumer(
            {"bootstrap.servers": cluster.running.specs[paused].address, "group.id": "raw-plan", **QUIET}
        )
        while not stop.is_set():
            try:
                raw_ends.append(consumer.get_watermark_offsets(KafkaTopicPartition(topic, 0), timeout=2)[1])
            except Exception as exc:  # the raw client's own error, recorded as it is
                raw_ends.append(type(exc).__name__ + ": " + str(exc)[:60])
            stop.wait(0.2)
        consumer.close()

    try:
        wait_for_query(
            query,
            "the query read the first records",
            lambda: spark.sql(f"select count(*) c from {table}").collect()[0].c == 100,
            timeout_s=120,
        )
        pause_file.touch()
        time.sleep(1.0)  # the paused answers must be the ones from before the kill (checked each 100 ms)
        looper = threading.Thread(target=raw_loop, daemon=True)
        looper.start()
        cluster.running.kill(101)
        wait_until(
            "a new leader", lambda: cluster.leaders(topic, ask=(STALE_BROKER,)).get(0) not in (None, 101), timeout_s=60
        )
        # 101 is started again before producing: librdkafka asks any broker it reached for metadata, and
        # the paused 102's answer names 101; were 101 still dead, the producer would wait for it for ever.
        # Back up as a follower, 101 answers NOT_LEADER_OR_FOLLOWER naming the new leader (KIP-951).
        cluster.running.start_node(101)
        cluster.produce(
            topic, [f"p-{n}" for n in range(100, 200)], 1, bootstrap=cluster.running.specs[STALE_BROKER].address
        )
        done = len(query.recentProgress)
        wait_for_query(
            query, "batches while 102 is paused", lambda: len(query.recentProgress) >= done + 3, timeout_s=120
        )
        refused_while_paused = counters_of(query).get("staleMetadataRefused", 0)
    finally:
        pause_file.unlink(missing_ok=True)
        stop.set()
    wait_for_query(
        query,
        "the query read every record",
        lambda: spark.sql(f"select count(*) c from {table}").collect()[0].c == 200,
        timeout_s=120,
    )
    query.stop()
    assert query.exception() is None
    ends = [e[topic]["0"]["offset"] for e in planned_ends(checkpoint)]
    numbers = [e for e in raw_ends if isinstance(e, int)]
    raw_backwards = sum(1 for a, b in itertools.pairwise(numbers) if b < a)
    print(f"kafka_epochs planned ends {ends}; stale answers refused while paused {refused_while_paused}")
    print(
        f"raw loop (bootstrap broker {paused}, paused): {len(raw_ends)} answers, {raw_backwards} backwards, "
        f"{len(raw_ends) - len(numbers)} errors: {raw_ends[:6]} ... {raw_ends[-6:]}"
    )
    assert ends == sorted(ends), f"a batch was planned backwards: {ends}"
    assert refused_while_paused >= 1
    values = sorted(bytes(r.value).decode() for r in spark.sql(f"select value from {table}").collect())
    assert values == sorted(f"p-{n}" for n in range(200))


def test_executor_consumers_are_reused_across_tasks_and_still_read_exact_ranges(cluster, monkeypatch):
    """The executor's consumer cache with librdkafka and a real broker, as consecutive tasks of one partition
    run on one Python worker: the next batch's range reads on with the paused consumer the last task left,
    a range elsewhere (a split or retried task) reassigns it; one consumer opened for all, every range exact."""
    from client_epochs.spark import read
    from client_epochs.spark.consumer_cache import ConsumerCache
    from client_epochs.spark.planning import Range

    cluster.topic("reuse", 1)
    cluster.produce("reuse", [f"r-{n}" for n in range(300)], 1)
    opened = []
    real_open = read._open
    monkeypatch.setattr(read, "_open", lambda *args: opened.append(args) or real_open(*args))
    monkeypatch.setattr(read, "CONSUMERS", ConsumerCache())
    states = cluster.partition_states("reuse")  # (leader, leader epoch, ISR) per partition, per broker
    epoch = next(s[0][1] for n, s in states.items() if n != STALE_BROKER and isinstance(s, dict) and 0 in s)
    client = {"group.id": "reuse-test", "isolation.level": "read_uncommitted", **QUIET}
    try:
        for start, end in [(0, 10), (10, 25), (25, 200), (5, 8), (8, 9), (150, 300), (0, 300)]:
            rng = Range(TopicPartition("reuse", 0), start, end, epoch, -1)
            batches = read.read_range(rng, cluster.bootstrap, client, timeout_s=60)
            got = [offset for batch in batches for offset in batch.column("offset").to_pylist()]
            assert got == list(range(start, end)), (start, end, got[:3], len(got))
        assert len(opened) == 1 and read.CONSUMERS.hits == 6
    finally:
        read.CONSUMERS.clear()
