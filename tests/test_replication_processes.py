"""Replication between real broker processes: a topic with replication factor 3 and
min.insync.replicas=2 keeps every acks=all message through `kill -9` of a follower and then of
the leader, the ISR heals back to all three replicas, and the replicas' logs end up byte-identical."""

from __future__ import annotations

import signal
from pathlib import Path

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

from quorum.launcher import LocalCluster
from quorum.log.log import Log
from tests.test_broker_processes import read_partitions
from tests.test_controller_processes import create, metadata, wait_until

pytestmark = pytest.mark.timeout(240)

BROKERS = (101, 102, 103)
TOPIC = "replicated"
PARTITIONS = 2
SETTINGS = {
    "offsets.topic.replication.factor": "3", "offsets.topic.num.partitions": "1",
    "broker.session.timeout.ms": "5000", "broker.heartbeat.interval.ms": "500",
    # Below the session timeout, so the leader shrinks the ISR (AlterPartition) before the controller fences.
    "replica.lag.time.max.ms": "2000", "replica.fetch.backoff.ms": "200",
}
QUIET = {"log_level": 0}  # librdkafka's notes about the killed brokers are expected here


def live_address(cluster: LocalCluster, *exclude: int) -> str:
    return next(cluster.specs[b].address for b in BROKERS if b not in exclude and b in cluster.alive())


def partitions_of(address: str) -> dict[int, object]:
    """The topic's partitions as `address` sees them; none until that broker has applied the topic
    (CreateTopics answers once the controller committed it, brokers learn it a moment later)."""
    topic = metadata(address)[1].get(TOPIC)
    return topic.partitions if topic is not None else {}


def fully_replicated(address: str) -> bool:
    parts = partitions_of(address)
    return len(parts) == PARTITIONS and all(sorted(p.isr) == list(BROKERS) and p.leader in BROKERS
                                            for p in parts.values())


def log_batches(directory: Path) -> list[bytes]:
    with Log(directory, verify_all_segments=True) as log:
        return [bytes(batch.raw) for batch in log.iter_batches()]


def test_acks_all_survives_kill_9_of_a_follower_and_of_the_leader(tmp_path):
    cluster = LocalCluster(tmp_path, controllers=1, brokers=len(BROKERS), settings=SETTINGS)
    cluster.format_storage()
    cluster.start()
    try:
        first = cluster.specs[BROKERS[0]].address
        wait_until("the brokers to be unfenced", lambda: metadata(first)[0] == set(BROKERS))
        create(AdminClient({"bootstrap.servers": first, **QUIET}),
               NewTopic(TOPIC, PARTITIONS, 3, config={"min.insync.replicas": "2"}))
        wait_until("the topic to be fully replicated", lambda: fully_replicated(first))

        acked: dict[int, list[int]] = {p: [] for p in range(PARTITIONS)}
        failed: list[str] = []

        def delivered(error, message) -> None:
            if error is None:
                acked[message.partition()].append(int(message.value()))
            else:
                failed.append(str(error))

        bootstrap = ",".join(cluster.specs[b].address for b in BROKERS)
        producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "enable.idempotence": True,
                             "linger.ms": 5, "message.timeout.ms": 120_000, **QUIET})
        sent = 0

        def total() -> int:
            return sum(len(v) for v in acked.values())

        def produce_until(count: int, what: str) -> None:
            nonlocal sent
            target = total() + count

            def progressed() -> bool:
                nonlocal sent
                for _ in range(100):
                    producer.produce(TOPIC, str(sent).encode(), key=str(sent % 13).encode(), on_delivery=delivered)
                    sent += 1
                producer.poll(0.05)
                return total() >= target

            wait_until(what, progressed, timeout_s=60)

        produce_until(2000, "the first acknowledgements")

        leaders = {p.leader for p in partitions_of(first).values()}
        follower = next(b for b in BROKERS if b not in leaders)  # 2 partitions, 3 brokers: one leads none
        cluster.kill(follower, signal.SIGKILL)
        produce_until(1500, f"acks=all to go on with follower {follower} killed (ISR shrinks to 2)")
        cluster.start_node(follower)
        wait_until(f"follower {follower} back in every ISR", lambda: fully_replicated(first), timeout_s=60)
        produce_until(1000, "acks=all with the ISR back to 3")

        leader = partitions_of(first)[0].leader
        cluster.kill(leader, signal.SIGKILL)
        survivor = live_address(cluster, leader)
        produce_until(1500, f"acks=all to go on after leader {leader} was killed (a new leader elected)")
        cluster.start_node(leader)
        wait_until(f"broker {leader} back in every ISR", lambda: fully_replicated(survivor), timeout_s=60)
        produce_until(500, "acks=all after the old leader is back")
        assert producer.flush(60) == 0, "the producer did not deliver everything"
        assert not failed, failed[:5]
        wait_until("the ISR to stay at 3 after the last writes", lambda: fully_replicated(survivor))

        values = read_partitions(survivor, TOPIC, PARTITIONS)
        for p in range(PARTITIONS):
            numbers = [int(v) for v in values[p]]
            assert len(numbers) == len(set(numbers)), f"partition {p}: duplicates"
            assert numbers == sorted(numbers), f"partition {p}: out of order"
            assert set(acked[p]) <= set(numbers), f"partition {p}: {len(set(acked[p]) - set(numbers))} acked lost"
        assert total() == sent
    finally:
        cluster.stop()

    for p in range(PARTITIONS):
        logs = {b: log_batches(cluster.specs[b].directory / "data" / f"{TOPIC}-{p}") for b in BROKERS}
        common = min(len(batches) for batches in logs.values())
        assert sum(1 for _ in logs[BROKERS[0]][:common]) > 0
        for b in BROKERS[1:]:
            assert logs[b][:common] == logs[BROKERS[0]][:common], f"partition {p}: broker {b}'s log differs"
        records = sum(_record_count(batch) for batch in logs[BROKERS[0]][:common])
        assert records >= len(acked[p]), f"partition {p}: the common log prefix misses acknowledged records"


def _record_count(raw: bytes) -> int:
    from quorum.wire.records import RecordBatch

    return RecordBatch(raw).last_offset_delta + 1
