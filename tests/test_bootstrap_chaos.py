"""KIP-1023 under fire (issue 15): brokers whose disks die come back with the same id and bootstrap
their replicas from the earliest pending upload offset while an idempotent acks=all producer runs.

One cluster for the module: 1 controller and 3 brokers with tiered storage on an embedded S3
(moto's server on 127.0.0.1), `follower.fetch.last.tiered.offset.enable=true` cluster-wide, small
segments, a remote log task every 200 ms, and topics that keep a few segments locally. A wiped
broker is `LocalCluster.wipe`: kill -9, log dirs deleted and formatted again, then started.
"""

from __future__ import annotations

import random
import signal
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from quorum.launcher import LocalCluster
from quorum.log.log import Log
from tests.test_controller_processes import create, topic_seen_by_a_live_broker, wait_until
from tests.test_replication_chaos import BackgroundProducer
from tiered_follower.embedded_s3 import s3_properties, start_embedded_s3

pytestmark = pytest.mark.timeout(300)

QUIET = {"log_level": 0}
BROKERS = (101, 102, 103)
FLAG = "follower.fetch.last.tiered.offset.enable"
SEGMENT_BYTES = 16 * 1024
TIERED = {"remote.storage.enable": "true", "local.retention.bytes": str(4 * SEGMENT_BYTES),
          "min.insync.replicas": "2"}
SETTINGS = {
    FLAG: "true", "log.segment.bytes": str(SEGMENT_BYTES),
    "remote.log.manager.task.interval.ms": "200", "log.retention.check.interval.ms": "500",
    "broker.session.timeout.ms": "3000", "broker.heartbeat.interval.ms": "500",
    "replica.lag.time.max.ms": "3000", "replica.fetch.backoff.ms": "200",
}


@pytest.fixture(scope="module")
def cluster(tmp_path_factory) -> Iterator[LocalCluster]:
    s3 = start_embedded_s3()
    s3.create_bucket("bootstrap-chaos")
    running = LocalCluster(tmp_path_factory.mktemp("bootstrap"), controllers=1, brokers=len(BROKERS),
                           settings={**s3_properties(s3.endpoint_url, "bootstrap-chaos"), **SETTINGS})
    running.format_storage()
    running.start()
    try:
        yield running
    finally:
        running.stop()
        s3.stop()


def partitions(cluster: LocalCluster, topic: str) -> dict:
    """The topic's partitions as a live broker answers Metadata (leader, leader epoch, ISR)."""
    found = topic_seen_by_a_live_broker(cluster, BROKERS, topic)
    return {} if found is None else found.partitions


def full_isrs(cluster: LocalCluster, topic: str, count: int) -> bool:
    found = partitions(cluster, topic)
    return len(found) == count and all(sorted(p.isr) == list(BROKERS) for p in found.values())


def local_start(cluster: LocalCluster, broker: int, topic: str, partition: int) -> int:
    """The base offset of the first local segment of the broker's replica."""
    names = sorted((cluster.specs[broker].directory / "data" / f"{topic}-{partition}").glob("*.log"))
    return int(names[0].name.split(".")[0])


def active_segment(cluster: LocalCluster, topic: str, partition: int) -> int:
    """The base offset of the last segment of the partition's leader."""
    leader = partitions(cluster, topic)[partition].leader
    names = sorted((cluster.specs[leader].directory / "data" / f"{topic}-{partition}").glob("*.log"))
    return int(names[-1].name.split(".")[0])


def list_offset(cluster: LocalCluster, topic: str, partition: int, spec: int) -> int:
    """The offset for `spec`; an answer still retriable after the tool's own 10 s (a broker that does
    not name the topic yet) is an AssertionError, which `wait_until` asks again after."""
    from quorum.get_offsets import GetOffsetsError, list_offsets

    try:
        return list_offsets(cluster.bootstrap_servers, topic, [partition], spec)[partition][0]
    except GetOffsetsError as exc:
        if exc.retriable:
            raise AssertionError(str(exc)) from exc
        raise


def wipe_and_rejoin(cluster: LocalCluster, broker: int, topic: str, count: int) -> None:
    """The broker's disk dies (kill -9, log dirs gone); once the controller has it out of every ISR,
    it starts with an empty disk and the same id, and every partition is back to a full ISR."""
    cluster.wipe(broker)
    wait_until(f"broker {broker} out of every ISR of {topic}",
               lambda: all(broker not in p.isr for p in partitions(cluster, topic).values()), 60)
    cluster.start_node(broker)
    wait_until(f"wiped broker {broker} back in every ISR of {topic}", lambda: full_isrs(cluster, topic, count), 120)


def bootstraps_done(cluster: LocalCluster, broker: int, topic: str, count: int, need: int | None = None) -> list[str]:
    """The broker's report lines of the bootstraps of `topic`'s partitions that reached the ISR, once
    they name `need` of its `count` partitions (default: all): the broker writes a report when its own
    replayed image has it in the ISR, a moment after another broker's Metadata answer shows it."""
    need = count if need is None else need

    def lines() -> list[str]:
        text = cluster.specs[broker].log_path.read_text(encoding="utf-8", errors="replace")
        found = [line for line in text.splitlines() if f" {topic}-" in line and ": bootstrap from offset" in line
                 and "in the ISR after" in line]
        covered = {p for p in range(count) if any(f" {topic}-{p}: bootstrap from offset" in line for line in found)}
        return found if len(covered) >= need else []

    return wait_until(f"broker {broker}'s bootstrap reports (in the ISR) for {need} of {topic}'s {count} partitions",
                      lines, 60)


def test_a_broker_wiped_and_restarted_with_the_same_id_bootstraps_from_the_earliest_pending_upload(cluster):
    topic = "wiped"
    create(AdminClient({"bootstrap.servers": cluster.bootstrap_servers, **QUIET}), NewTopic(topic, 2, 3, config=TIERED))
    wait_until(f"full ISRs of {topic}", lambda: full_isrs(cluster, topic, 2))
    producer = Producer({"bootstrap.servers": cluster.bootstrap_servers, "acks": "all", "enable.idempotence": True,
                         "linger.ms": 5, "batch.num.messages": 20, **QUIET})
    for n in range(4000):
        producer.produce(topic, f"{n:06d}-".encode() + bytes(200), partition=n % 2)
    assert producer.flush(60) == 0
    for partition in (0, 1):
        # the leader keeps some uploaded segments locally: KIP-405 would start below KIP-1023's offset
        wait_until(f"{topic}-{partition} uploaded up to its active segment, some uploaded ones still local",
                   lambda p=partition: 0 < list_offset(cluster, topic, p, -4) < list_offset(cluster, topic, p, -6)
                   == active_segment(cluster, topic, p))
    # nothing is produced from here on: the leaders' offsets stay where they are
    pending = {p: list_offset(cluster, topic, p, -6) for p in (0, 1)}
    leaders = {p.leader for p in partitions(cluster, topic).values()}
    victim = next(b for b in BROKERS if b not in leaders)
    wipe_and_rejoin(cluster, victim, topic, 2)
    for partition in (0, 1):
        assert local_start(cluster, victim, topic, partition) == pending[partition], \
            f"{topic}-{partition}: broker {victim}'s replica does not start at the earliest pending upload offset"
    done = bootstraps_done(cluster, victim, topic, 2)
    for partition in (0, 1):
        start = local_start(cluster, victim, topic, partition)
        assert any(f"{topic}-{partition}: bootstrap from offset {start} " in line for line in done), done


def batches(directory: Path) -> tuple[int, int, dict[int, bytes]]:
    """(local start, end, {base offset: the batch as stored}) of a replica's local log."""
    with Log(directory) as log:
        start = log.segment_base_offsets[0]
        return start, log.end_offset, {batch.base_offset: bytes(batch.raw) for batch in log.iter_batches(start)}


def assert_identical_where_they_overlap(cluster: LocalCluster, topic: str, partition: int) -> None:
    copies = {b: batches(cluster.specs[b].directory / "data" / f"{topic}-{partition}") for b in BROKERS}
    low = max(start for start, _, _ in copies.values())
    high = min(end for _, end, _ in copies.values())
    assert low < high, f"{topic}-{partition}: the replicas' local logs do not overlap: {copies.keys()}"
    ranges = {b: {base: raw for base, raw in found.items() if low <= base < high}
              for b, (_, _, found) in copies.items()}
    first = ranges[BROKERS[0]]
    assert first, f"{topic}-{partition}: no whole batch in the overlap [{low}, {high})"
    for broker in BROKERS[1:]:
        differing = sorted({base for base in first.keys() | ranges[broker].keys()
                            if first.get(base) != ranges[broker].get(base)})
        assert not differing, (f"{topic}-{partition}: brokers {BROKERS[0]} and {broker} differ in [{low}, {high}) at "
                               f"base offsets {differing[:5]}")


def read_from_zero(cluster: LocalCluster, topic: str, count: int) -> dict[int, dict[int, bytes]]:
    """Partition -> offset -> value, every partition read from offset 0 to its high watermark
    (what is in S3 only included)."""
    consumer = Consumer({"bootstrap.servers": cluster.bootstrap_servers, "group.id": f"{topic}-check",
                         "enable.auto.commit": False, **QUIET})
    try:
        ends = {p: consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=30)[1] for p in range(count)}
        consumer.assign([TopicPartition(topic, p, 0) for p in range(count)])
        read: dict[int, dict[int, bytes]] = {p: {} for p in range(count)}

        def done() -> bool:
            for message in consumer.consume(1000, 1.0):
                assert message.error() is None, message.error()
                assert message.offset() not in read[message.partition()], \
                    f"{topic}-{message.partition()}@{message.offset()} read twice"
                read[message.partition()][message.offset()] = message.value()
            return all(len(read[p]) >= ends[p] for p in range(count))

        wait_until(f"{topic} read from offset 0 to its high watermarks {ends}", done, 120)
        return read
    finally:
        consumer.close()


def test_acknowledged_records_survive_wiped_brokers_and_a_killed_leader_under_acks_all_traffic(cluster):
    topic, count = "chaos", 2
    create(AdminClient({"bootstrap.servers": cluster.bootstrap_servers, **QUIET}),
           NewTopic(topic, count, 3, config=TIERED))
    wait_until(f"full ISRs of {topic}", lambda: full_isrs(cluster, topic, count))
    # about 100 messages/s of 200 bytes: every fault still lands amid acks=all batches in flight, and the
    # segments roll (and are tiered) as fast as with 2 ms pauses and bare values, for a quarter fewer
    # CPU-s (paired runs: 56.5 -> 41.2 CPU-s for this test; 13,900 acknowledged records -> 3,700)
    producer = BackgroundProducer(cluster.bootstrap_servers, topic, pause_s=0.01, padding=200)
    producer.start()
    rng = random.Random(1023)
    wiped: list[int] = []
    try:
        wait_until(f"{topic}-0's early segments uploaded and deleted locally",
                   lambda: list_offset(cluster, topic, 0, -4) > 0)
        for step in ("wipe", "kill the leader", "wipe"):
            time.sleep(rng.uniform(1, 2))
            leader = partitions(cluster, topic)[0].leader
            if step == "wipe":
                followers = [b for b in BROKERS if b != leader]
                victim = wiped[-1] if wiped and wiped[-1] in followers else rng.choice(followers)
                wipe_and_rejoin(cluster, victim, topic, count)
                wiped.append(victim)
            else:
                cluster.kill(leader, signal.SIGKILL)
                wait_until(f"a new leader of {topic}-0 after broker {leader} was killed",
                           lambda old=leader: partitions(cluster, topic)[0].leader not in (old, -1), 60)
                cluster.start_node(leader)
                wait_until(f"broker {leader} back in every ISR of {topic}",
                           lambda: full_isrs(cluster, topic, count), 120)
        time.sleep(1)
    finally:
        undelivered = producer.stop()
    assert undelivered == 0, "the producer could not deliver everything"
    assert not producer.failed, producer.failed[:5]
    assert producer.acked, "nothing was acknowledged"
    read = read_from_zero(cluster, topic, count)
    final = partitions(cluster, topic)
    bootstrapped = {b: bootstraps_done(cluster, b, topic, count, need=1) for b in set(wiped)}
    cluster.stop()  # the replicas' files are compared at rest

    for partition, offset, value in producer.acked:
        assert read[partition].get(offset) == value, \
            f"{topic}-{partition}@{offset}: acknowledged {value!r}, read {read[partition].get(offset)!r}"
    values = [value for found in read.values() for value in found.values()]
    assert len(values) == len(set(values)), "a record is present twice"
    for partition, state in final.items():
        assert set(wiped) <= set(state.isr), f"{topic}-{partition}: the wiped brokers {wiped} not all in {state.isr}"
        assert_identical_where_they_overlap(cluster, topic, partition)
    assert all(bootstrapped.values()), f"a wiped broker reported no bootstrap of {topic}: {bootstrapped}"
