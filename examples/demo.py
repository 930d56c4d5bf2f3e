"""The embedded demo: real clients against a local node, then a 3-voter KRaft quorum surviving kill -9.

Run it with `./run demo`. It grows as the project does. Part 1: a standalone broker serving a
fixed metadata image, listed by confluent-kafka (librdkafka), kafka-python and Debian's kcat, each
unchanged. Part 2: `quorum local-cluster` with three controllers elects a leader, commits records,
loses its leader to SIGKILL, elects another and keeps every committed record; then, with the old
leader still down, the others commit on, snapshot (KIP-630) and drop the log below their
snapshot, so the old leader, restarted, rejoins by FetchSnapshot. Part 4: the same cluster's
two brokers, registered with the active controller; confluent-kafka's AdminClient creates topics
through them, all three clients list them, and a broker killed with SIGKILL is fenced: its
partitions get new leaders. Part 5: the killed broker is restarted (and the cluster waited for until
it is ready again), then `client-epochs-mirror` (KIP-232 epoch-aware consumer, idempotent producer)
copies `orders` to a second local cluster and commits with internal metadata. Part 6
(`examples.tiered_demo`): `quorum local-cluster --tiered` uploads a topic's segments to an embedded S3,
and a real client reads it from offset 0 once the local copies are gone. Part 7 (`examples.spark_demo`):
the `kafka_epochs` Spark source streams a topic into Parquet on a cluster with a stale broker through
a kill -9 of a leader, and shows the stale answers its driver refused; then the Spark pipeline
(kafka_epochs source into the exactly-once kafka_epochs sink) copies the topic to another. Part 8
(`examples.bootstrap_demo`): a broker of a tiered cluster loses its disk and comes back with the same
id; its replicas bootstrap from the earliest pending upload offset (KIP-1023) and it prints what it did
not copy because it is in S3.
Part 9 (`examples.security_demo`): `quorum local-cluster --security sasl_ssl` refuses a wrong password and,
with its authorizer, alice's produce, until the admin grants her ACLs; then she produces and consumes in a group.

Every step that waits has a deadline (examples.demo_waits): past it the demo stops with exit status 1,
naming what it waited for and the node logs to read. Its last line says whether it succeeded.
"""

from __future__ import annotations

import re
import shutil
import signal
import subprocess
import sys
import time

from examples.bootstrap_demo import bootstrap_demo
from examples.demo_waits import DemoFailure, scratch_directory, wait_for
from examples.mirror_demo import mirror_demo
from examples.security_demo import security_demo
from examples.spark_demo import spark_demo
from examples.tiered_demo import tiered_demo
from quorum.admin import (
    METADATA_WRITES_FOR_TESTS,
    QuorumStatus,
    QuorumToolError,
    commit_values,
    format_replication,
    format_status,
    wait_for_leader,
)
from quorum.launcher import LocalCluster, start_standalone
from quorum.log.log import Log
from quorum.log.start_offset import START_OFFSET_NAME, read_start_offset
from quorum.readiness import ClusterNotReadyError
from quorum.server.config import node_config
from quorum.wire.metadata_records import ConfigRecord, encode_metadata_record

TOPICS = ("orders:3", "payments:2", "audit:1")
# Small enough that the demo's few hundred records make snapshots (Kafka's defaults: 20 MiB, 0.5).
# The demo commits raw records through the quorum, which controllers take only with the test-only
# METADATA_WRITES_FOR_TESTS (Kafka's controllers take no Produce at all).
SNAPSHOT_SETTINGS = {**METADATA_WRITES_FOR_TESTS, "metadata.log.max.record.bytes.between.snapshots": "4000",
                     "metadata.snapshot.min.changed_records.ratio": "0.5", "metadata.log.segment.bytes": "8192",
                     "broker.session.timeout.ms": "3000", "broker.heartbeat.interval.ms": "500"}


def confluent_view(bootstrap: str) -> dict[str, int]:
    from confluent_kafka.admin import AdminClient

    metadata = AdminClient({"bootstrap.servers": bootstrap}).list_topics(timeout=15)
    return {name: len(topic.partitions) for name, topic in metadata.topics.items()}


def kafka_python_view(bootstrap: str) -> dict[str, int]:
    from kafka import KafkaAdminClient

    admin = KafkaAdminClient(bootstrap_servers=bootstrap)
    try:
        described = admin.describe_topics()
    finally:
        admin.close()
    return {topic["name"]: len(topic["partitions"]) for topic in described}


def kcat_view(bootstrap: str) -> dict[str, int]:
    kcat = shutil.which("kcat")
    if kcat is None:
        raise RuntimeError("kcat is not installed (./run demo installs Debian's kcat package)")
    out = subprocess.run([kcat, "-L", "-b", bootstrap], capture_output=True, text=True, timeout=60, check=True)
    return {m[1]: int(m[2]) for m in re.finditer(r'topic "([^"]+)" with (\d+) partitions', out.stdout)}


def print_table(rows: list[tuple[str, dict[str, int] | str]], topics: list[str]) -> None:
    """One row per client, one column per topic: the partition count that client sees."""
    table = [["client", *(f"{t} partitions" for t in topics)]]
    for client, view in rows:
        if isinstance(view, str):
            table.append([client, view, *([""] * (len(topics) - 1))])
        else:
            table.append([client, *(str(view[t]) if t in view else "missing" for t in topics)])
    widths = [max(len(row[i]) for row in table) for i in range(len(table[0]))]
    for number, row in enumerate(table):
        print("  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)).rstrip())
        if number == 0:
            print("  ".join("-" * width for width in widths))


def logs(cluster: LocalCluster, role: str | None = None) -> list:
    """The node logs of `cluster` (of one role), for a failure message."""
    return [s.log_path for s in cluster.specs.values() if role is None or s.role == role]


def leader_status(cluster: LocalCluster, not_node: int | None = None) -> QuorumStatus:
    try:
        return wait_for_leader(lambda: [cluster.specs[n].address for n in cluster.alive()], not_node, 30.0)
    except QuorumToolError as exc:
        raise DemoFailure(f"a leader of the metadata quorum{'' if not_node is None else f' other than node {not_node}'}"
                          f": {exc}", logs(cluster, "controller")) from None


def commit(cluster: LocalCluster, values: list[bytes]) -> int:
    try:
        return commit_values(cluster.bootstrap_controllers.split(","), values)
    except QuorumToolError as exc:
        raise DemoFailure(f"a commit through the metadata quorum: {exc}", logs(cluster, "controller")) from None


def quorum_demo() -> None:
    print("\n== Part 2: a KRaft quorum of three controllers (quorum local-cluster --controllers 3)")
    with scratch_directory("quorum-demo-") as directory:
        cluster = LocalCluster(directory, controllers=3, brokers=2, settings=SNAPSHOT_SETTINGS)
        cluster.format_storage()
        try:
            cluster.start(timeout=60)
        except ClusterNotReadyError as exc:
            cluster.stop()
            raise DemoFailure(str(exc)) from None
        try:
            for line in cluster.describe_lines():
                print(line)
            first = leader_status(cluster)
            print(f"... node {first.leader_id} leads epoch {first.leader_epoch}; committing 100 records")
            for chunk in range(10):
                commit(cluster, [f"record-{chunk * 10 + i}".encode() for i in range(10)])
            print(format_status(leader_status(cluster)))
            print(f"\n... kill -9 of the leader, node {first.leader_id}")
            started = time.monotonic()
            cluster.kill(first.leader_id, signal.SIGKILL)
            commit(cluster, [b"after-failover"])
            print(f"... a write committed again after {time.monotonic() - started:.2f} s")
            second = leader_status(cluster, not_node=first.leader_id)
            print(f"... node {second.leader_id} leads epoch {second.leader_epoch}\n")
            print(format_replication(second))
            snapshot_demo(cluster, first.leader_id)
            brokers_demo(cluster)
        finally:
            cluster.stop()


def caught_up(status: QuorumStatus) -> bool:
    return all(status.lag(r) == 0 for r in status.replicas)


def snapshot_demo(cluster: LocalCluster, down: int) -> None:
    """While `down` stays down, commit config changes until the leader's log starts past where
    `down`'s log ends; restarted, `down` must fetch a snapshot to catch up. The replicas snapshot
    in turns the active controller gives them (KIP-631), which resigns for its own."""
    print(f"\n== Part 3: snapshots (KIP-630, turns by KIP-631); node {down} stays down while the others commit")
    with Log(node_config(cluster.properties(cluster.specs[down])).metadata_log_dir) as stopped:
        down_end = stopped.end_offset
    committed = 0
    start, snapshots, leader = 0, [], leader_status(cluster)
    while start <= down_end and committed < 4000:
        values = [encode_metadata_record(ConfigRecord(version=0, resource_type=2, resource_name="orders",
                                                      name=f"retention-{n % 20}", value=str(n)))
                  for n in range(committed, committed + 20)]
        commit(cluster, values)
        committed += len(values)
        leader = leader_status(cluster)
        directory = node_config(cluster.properties(cluster.specs[leader.leader_id])).metadata_log_dir
        start = read_start_offset(directory / START_OFFSET_NAME) or 0
        snapshots = sorted(p.name for p in directory.glob("*.checkpoint") if int(p.name.split("-")[0]) >= start)
    print(f"... {committed} config changes committed")
    for node_id in sorted(cluster.specs):
        for line in cluster.specs[node_id].log_path.read_text().splitlines():
            if "snapshot turn:" in line:
                print(f"   node {node_id}: " + line.split("snapshot turn: ", 1)[-1])
    print(f"... node {leader.leader_id} (leader): log start offset {start}, snapshots {snapshots}")
    print(f"... restarting node {down}: its log ends below the leader's log start")
    cluster.start_node(down)
    wait_for(f"node {down} to catch up with the leader by FetchSnapshot (lag 0 on every replica)",
             lambda: caught_up(leader_status(cluster)), 60, [cluster.specs[down].log_path])
    for line in cluster.specs[down].log_path.read_text().splitlines():
        if "snapshot fetched" in line or "installed snapshot" in line:
            print("   " + line.split(": ", 1)[-1].replace(str(cluster.specs[down].log_path.parent), "node-dir"))
    print()
    print(format_replication(leader_status(cluster)))


def leaders(bootstrap: str, topic: str) -> dict[int, int]:
    from confluent_kafka.admin import AdminClient

    # log_level 0: librdkafka's notes about the killed broker's connection are expected here
    metadata = AdminClient({"bootstrap.servers": bootstrap, "log_level": 0}).list_topics(timeout=15)
    return {p: m.leader for p, m in sorted(metadata.topics[topic].partitions.items())}


def brokers_demo(cluster: LocalCluster) -> None:
    from confluent_kafka.admin import AdminClient, NewTopic

    brokers = [s for s in cluster.specs.values() if s.role == "broker"]
    bootstrap = ",".join(s.address for s in brokers)
    print(f"\n== Part 4: brokers {[s.node_id for s in brokers]} (bootstrap servers {bootstrap})")
    admin = AdminClient({"bootstrap.servers": bootstrap, "log_level": 0})
    futures = admin.create_topics([NewTopic("orders", 4, 2), NewTopic("payments", 2, 2)], request_timeout=30)
    for name, future in futures.items():
        future.result(timeout=60)
        print(f"... created {name} with confluent-kafka's AdminClient (forwarded to the active controller)")
    wait_for("orders and payments, with a leader for every partition, on every broker",
             lambda: all(has_topics(s.address, {"orders": 4, "payments": 2}) for s in brokers), 30, logs(cluster))
    topics = ["orders", "payments"]
    rows: list[tuple[str, dict[str, int] | str]] = []
    for name, view in (("confluent-kafka", confluent_view), ("kafka-python", kafka_python_view), ("kcat", kcat_view)):
        try:
            rows.append((name, {t: n for t, n in view(bootstrap).items() if t in topics}))
        except Exception as exc:  # the demo reports every client, even when one fails
            rows.append((name, f"FAILED: {exc}"))
    print_table(rows, topics)
    data_demo(bootstrap, logs(cluster, "broker"))
    produced = produce_orders(bootstrap, 2000)
    before = leaders(bootstrap, "orders")
    victim = before[0]
    print(f"\n... orders partition leaders {before}; kill -9 of broker {victim}")
    cluster.kill(victim, signal.SIGKILL)
    survivor = next(s.address for s in brokers if s.node_id != victim)
    started = time.monotonic()
    after = wait_for(f"broker {victim} to be fenced and every orders partition to lead elsewhere",
                     lambda: (now := leaders(survivor, "orders")) and victim not in now.values() and now, 30,
                     logs(cluster, "controller"))
    print(f"... broker {victim} fenced after {time.monotonic() - started:.1f} s (broker.session.timeout.ms=3000); "
          f"orders partition leaders now {after}")
    read = count_messages(survivor, "orders", 4)
    print(f"... {read} of the {produced} acknowledged orders read back from broker "
          f"{next(s.node_id for s in brokers if s.node_id != victim)} alone (replication factor 2)")
    if read != produced:
        raise DemoFailure(f"all {produced} acknowledged orders read back, got {read}", logs(cluster, "broker"))
    # The demo's groups keep their offsets in a __consumer_offsets of replication factor 1 (local-cluster's
    # dev default): the killed broker held some of its partitions, so part 5 starts only once it is back.
    print(f"\n... restarting broker {victim}, and waiting until the cluster is ready again")
    cluster.start_node(victim)
    try:
        cluster.wait_ready(60)
    except ClusterNotReadyError as exc:
        raise DemoFailure(str(exc)) from None
    mirror_demo(bootstrap, logs(cluster, "broker"))


def has_topics(address: str, expected: dict[str, int]) -> bool:
    """Whether `address` lists each topic with its partition count, every partition with a leader."""
    from confluent_kafka.admin import AdminClient

    metadata = AdminClient({"bootstrap.servers": address, "log_level": 0}).list_topics(timeout=5)
    return all(name in metadata.topics and len(metadata.topics[name].partitions) == count
               and all(p.leader >= 0 for p in metadata.topics[name].partitions.values())
               for name, count in expected.items())


def produce_orders(bootstrap: str, messages: int) -> int:
    """acks=all to the replicated `orders` topic: acknowledged once both replicas have each message."""
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "enable.idempotence": True, "log_level": 0})
    acked = []
    for n in range(messages):
        producer.produce("orders", f"order {n}".encode(), key=f"customer-{n % 20}".encode(),
                         on_delivery=lambda error, _m: acked.append(error is None))
        producer.poll(0)
    unsent = producer.flush(60)
    print(f"... confluent-kafka produced {sum(acked)} orders with acks=all (both replicas of each partition)")
    if unsent or sum(acked) != messages:
        raise DemoFailure(f"acks for all {messages} orders within 60 s: {sum(acked)} acknowledged, {unsent} unsent")
    return sum(acked)


def count_messages(address: str, topic: str, partitions: int) -> int:
    """Messages up to each partition's high watermark, read with kafka-python (assign, from the start)."""
    from kafka import KafkaConsumer, TopicPartition

    consumer = KafkaConsumer(bootstrap_servers=address, enable_auto_commit=False, consumer_timeout_ms=5000)
    assigned = [TopicPartition(topic, p) for p in range(partitions)]
    consumer.assign(assigned)
    consumer.seek_to_beginning()
    ends = consumer.end_offsets(assigned)
    count = 0
    for _ in consumer:
        count += 1
        if all(consumer.position(tp) >= ends[tp] for tp in assigned):
            break
    consumer.close()
    return count


def data_demo(bootstrap: str, broker_logs: list, messages: int = 3000) -> None:
    """Each client on the data path: confluent-kafka produces (idempotent, lz4, keys and headers),
    kafka-python consumes in a group and commits with a metadata string, kcat reads it all too."""
    from confluent_kafka import Producer
    from confluent_kafka.admin import AdminClient, NewTopic
    from kafka import KafkaConsumer, OffsetAndMetadata, TopicPartition

    admin = AdminClient({"bootstrap.servers": bootstrap, "log_level": 0})
    for future in admin.create_topics([NewTopic("events", 3, 1)], request_timeout=30).values():
        future.result(timeout=60)
    wait_for("events, with a leader for every partition, on every broker",
             lambda: all(has_topics(a, {"events": 3}) for a in bootstrap.split(",")), 30, broker_logs)
    started = time.monotonic()
    producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True, "compression.type": "lz4",
                         "linger.ms": 5, "log_level": 0})
    for n in range(messages):
        producer.produce("events", f"event {n}".encode(), key=f"user-{n % 50}".encode(),
                         headers=[("source", b"demo")])
        producer.poll(0)
    unsent = producer.flush(60)
    print(f"... confluent-kafka produced {messages - unsent} messages to events (idempotent, lz4) "
          f"in {time.monotonic() - started:.2f} s")
    if unsent:
        raise DemoFailure(f"acks for all {messages} events within 60 s: {unsent} unsent", broker_logs)
    started = time.monotonic()
    consumer = KafkaConsumer("events", bootstrap_servers=bootstrap, group_id="demo-readers",
                             auto_offset_reset="earliest", enable_auto_commit=False, consumer_timeout_ms=10_000)
    seen = 0
    for _ in consumer:
        seen += 1
        if seen == messages:
            break
    if seen != messages:
        consumer.close()
        raise DemoFailure(f"group demo-readers to read all {messages} events (it read {seen}, then nothing for "
                          f"10 s)", broker_logs)
    consumer.commit({tp: OffsetAndMetadata(consumer.position(tp), "read by the demo", -1)
                     for tp in consumer.assignment()})
    consumer.close()
    print(f"... kafka-python read {seen} of them in group demo-readers (subscribe) and committed "
          f"in {time.monotonic() - started:.2f} s")
    kcat = shutil.which("kcat")
    if kcat is not None:
        out = subprocess.run([kcat, "-C", "-b", bootstrap, "-t", "events", "-e", "-q", "-f", "%k\n"],
                             capture_output=True, text=True, timeout=60, check=False)
        print(f"... kcat read {len(out.stdout.splitlines())} messages of events")
    # Read back with kafka-python: librdkafka hands a committed metadata string it fetched to Python
    # without its length (confluentinc/librdkafka#4649), so confluent-kafka may append stray bytes.
    reader = KafkaConsumer(bootstrap_servers=bootstrap, group_id="demo-readers", enable_auto_commit=False)
    committed = {p: reader.committed(TopicPartition("events", p), metadata=True) for p in range(3)}
    reader.close()
    print("... committed offsets of demo-readers, read back: "
          + ", ".join(f"events-{p}: {c.offset} ({c.metadata!r})" for p, c in committed.items()))


def main() -> int:
    started = time.monotonic()
    try:
        failures = standalone_demo()
        quorum_demo()
        tiered_demo()
        spark_demo()
        bootstrap_demo()
        security_demo()
    except DemoFailure as exc:
        print(f"\ndemo FAILED: {exc}", flush=True)
        return 1
    except Exception as exc:  # a client's error: the demo still says that it failed, and how
        print(f"\ndemo FAILED: {type(exc).__name__}: {exc}", flush=True)
        raise
    if failures:
        print(f"\ndemo FAILED: {failures} client(s) could not list the standalone node's metadata (part 1)")
        return 1
    print(f"\ndemo succeeded: all nine parts ran in {time.monotonic() - started:.0f} s", flush=True)
    return 0


def standalone_demo() -> int:
    """Part 1; the number of clients that failed."""
    print("== Part 1: real clients list a node's metadata")
    print("Starting a local node: quorum standalone --listen 127.0.0.1:0 " + " ".join(f"--topic {t}" for t in TOPICS))
    node = start_standalone(*TOPICS)
    try:
        print("".join(node.output), end="")
        topics = sorted(spec.split(":")[0] for spec in TOPICS)
        rows: list[tuple[str, dict[str, int] | str]] = []
        failures = 0
        for name, view in (("confluent-kafka", confluent_view), ("kafka-python", kafka_python_view),
                           ("kcat", kcat_view)):
            print(f"... listing metadata with {name}", flush=True)
            try:
                rows.append((name, view(node.bootstrap)))
            except Exception as exc:  # the demo reports every client, even when one fails
                failures += 1
                rows.append((name, f"FAILED: {exc}"))
        print()
        print_table(rows, topics)
    finally:
        node.stop()
    print()
    print("All three clients listed the node's metadata." if not failures else f"{failures} client(s) failed.")
    return failures


if __name__ == "__main__":
    sys.exit(main())
