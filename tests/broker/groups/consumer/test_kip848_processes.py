"""KIP-848 end to end: confluent-kafka consumers with `group.protocol=consumer` (each its own process)
on a 3-broker cluster. Three members subscribed by regex share a topic; one is killed -9, one is
added, the topic gains partitions and a new topic matching the regex is created. Every record is
consumed, a record is consumed twice only when its first consumer never committed it (killed first),
and no partition is ever held by two members at once: each member logs when it is given and when it
gives up a partition with the system-wide monotonic clock, and the new owner's callback comes after
the old owner's (the coordinator hands a partition over only once its owner's heartbeat released it),
so the intervals of one partition never overlap; a killed member's end at the moment of its kill.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, ConsumerGroupState, ConsumerGroupType, KafkaError, Producer
from confluent_kafka.admin import NewPartitions, NewTopic

from quorum.broker.groups.config import partition_for
from tests.broker.groups.group_cluster import BROKERS, GroupCluster, group_cluster
from tests.test_broker_processes import QUIET
from tests.test_controller_processes import create, metadata, wait_until

pytestmark = pytest.mark.timeout(300)

MEMBER_SCRIPT = Path(__file__).with_name("kip848_member.py")
SETTINGS = {
    "offsets.topic.replication.factor": "3",
    "group.consumer.session.timeout.ms": "6000",
    "group.consumer.min.session.timeout.ms": "2000",
    "group.consumer.heartbeat.interval.ms": "500",
    "group.consumer.min.heartbeat.interval.ms": "100",
}
"""A killed member's partitions move after 6 s instead of Kafka's 45 s; `__consumer_offsets` has a replica
on every broker, so a killed coordinator's partition gets a new leader that loads the group."""
TopicPartition = tuple[str, int]


class MemberProcess:
    """One consumer process and the events it printed."""

    def __init__(self, name: str, bootstrap: str, group: str, subscription: list[str]) -> None:
        self.name = name
        self.events: list[dict[str, Any]] = []
        self.killed_at: float | None = None
        self._lock = threading.Lock()
        self.process = subprocess.Popen(
            [sys.executable, str(MEMBER_SCRIPT), name, bootstrap, group, *subscription],
            stdout=subprocess.PIPE,
            stderr=open(os.environ["KIP848_MEMBER_STDERR"] + "-" + name, "w")  # noqa: SIM115
            if "KIP848_MEMBER_STDERR" in os.environ
            else subprocess.DEVNULL,
            text=True,
        )
        self._reader = threading.Thread(target=self._read, name=f"{name}-events", daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            with self._lock:
                self.events.append(json.loads(line))

    def snapshot(self) -> list[dict[str, Any]]:
        with self._lock:
            return list(self.events)

    def owned(self) -> set[TopicPartition]:
        owned: set[TopicPartition] = set()
        for event in self.snapshot():
            parts = {(t, p) for t, p in event.get("partitions", ())}
            if event["event"] == "assign":
                owned |= parts
            elif event["event"] in ("revoke", "lost"):
                owned -= parts
        return owned

    def kill(self) -> None:
        self.killed_at = time.monotonic()
        self.process.kill()
        self.process.wait(timeout=10)

    def stop(self) -> None:
        """Close the consumer (it leaves the group); kill it if it does not exit in time."""
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(timeout=10)
        self._reader.join(timeout=10)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory) -> Iterator[GroupCluster]:
    with group_cluster(tmp_path_factory.mktemp("kip848"), SETTINGS) as started:
        yield started


def ownership_intervals(members: list[MemberProcess]) -> dict[TopicPartition, list[tuple[float, float, str]]]:
    """Partition -> (start, end, member) of every time a member held it."""
    intervals: dict[TopicPartition, list[tuple[float, float, str]]] = {}
    for member in members:
        since: dict[TopicPartition, float] = {}
        for event in member.snapshot():
            for tp in ((t, p) for t, p in event.get("partitions", ())):
                if event["event"] == "assign":
                    since[tp] = event["t"]
                elif event["event"] in ("revoke", "lost") and tp in since:
                    intervals.setdefault(tp, []).append((since.pop(tp), event["t"], member.name))
        end = member.killed_at if member.killed_at is not None else float("inf")
        for tp, start in since.items():
            intervals.setdefault(tp, []).append((start, end, member.name))
    return intervals


def test_consumer_protocol_members_killed_added_and_topic_changes_consume_every_record_once(
    cluster: GroupCluster,
) -> None:
    group, regex = "kip848-flow", "^kip848-.*"
    cluster.topics(4, "kip848-a")
    producer = Producer({"bootstrap.servers": cluster.bootstrap, **QUIET})
    produced: set[tuple[str, int, int]] = set()

    def produce(topic: str, partitions: int, count: int) -> None:
        for i in range(count):
            producer.produce(
                topic,
                f"{topic}-{i}".encode(),
                partition=i % partitions,
                on_delivery=lambda err, msg: err is None and produced.add((msg.topic(), msg.partition(), msg.offset())),
            )
        assert producer.flush(30) == 0, "records left undelivered"

    members: list[MemberProcess] = []

    def start(name: str) -> MemberProcess:
        member = MemberProcess(name, cluster.bootstrap, group, [regex])
        members.append(member)
        return member

    def consumed() -> set[tuple[str, int, int]]:
        return {
            (e["topic"], e["partition"], e["offset"]) for m in members for e in m.snapshot() if e["event"] == "record"
        }

    def owners_cover(wanted: set[TopicPartition], alive: list[MemberProcess]) -> bool:
        held = [m.owned() for m in alive]
        return set().union(*held) == wanted and all(held)

    try:
        a, b, c = start("a"), start("b"), start("c")
        topic_a = {("kip848-a", p) for p in range(4)}
        wait_until("three members to share kip848-a's 4 partitions", lambda: owners_cover(topic_a, [a, b, c]))
        produce("kip848-a", 4, 40)
        wait_until("every record of the first batch to be consumed", lambda: produced <= consumed())

        b.kill()
        produce("kip848-a", 4, 40)
        wait_until(
            "a and c to own b's partitions after its session lapsed, and consume the second batch",
            lambda: owners_cover(topic_a, [a, c]) and produced <= consumed(),
        )

        d = start("d")
        wait_until("the new member d to be given partitions", lambda: owners_cover(topic_a, [a, c, d]))
        produce("kip848-a", 4, 40)

        cluster.admin.create_partitions([NewPartitions("kip848-a", 6)])["kip848-a"].result(timeout=30)
        cluster.topics(2, "kip848-b")
        wanted = {("kip848-a", p) for p in range(6)} | {("kip848-b", 0), ("kip848-b", 1)}
        wait_until(
            "the new partitions and the new topic matching the regex to be assigned",
            lambda: owners_cover(wanted, [a, c, d]),
        )
        wait_until(
            "the producer to see kip848-a's 6 partitions",
            lambda: len(producer.list_topics("kip848-a", timeout=5).topics["kip848-a"].partitions) == 6,
        )
        produce("kip848-a", 6, 60)
        produce("kip848-b", 2, 20)
        wait_until("every record to be consumed", lambda: produced <= consumed(), timeout_s=90)
    finally:
        for member in members:
            if member.killed_at is None:
                member.stop()

    assert all(m.snapshot()[-1]["event"] == "closed" for m in (a, c, d)), "a member did not close cleanly"
    for tp, spans in ownership_intervals(members).items():
        spans.sort()
        for (_, end, first), (start_, _, second) in zip(spans, spans[1:], strict=False):
            assert end <= start_, f"{tp} held by {first} until {end} and by {second} from {start_}"
    deliveries: dict[tuple[str, int, int], list[tuple[str, bool]]] = {}
    for member in members:
        events = member.snapshot()
        for i, event in enumerate(events):
            if event["event"] == "record":
                key = (event["topic"], event["partition"], event["offset"])
                committed = any(
                    e["event"] == "committed" and (e["topic"], e["partition"], e["offset"]) == key
                    for e in events[i + 1 :]
                )
                deliveries.setdefault(key, []).append((member.name, committed))
    assert set(deliveries) == produced
    twice = {key: who for key, who in deliveries.items() if len(who) > 1}
    assert all(not committed for who in twice.values() for _, committed in who[:-1]), twice


def test_a_classic_consumer_is_refused_by_a_consumer_group_with_kafkas_error(cluster: GroupCluster) -> None:
    """A group is one kind or the other: a classic confluent-kafka consumer asking to join a KIP-848
    group that has a member gets INCONSISTENT_GROUP_PROTOCOL, and the member keeps its partitions."""
    group, topic = "kip848-kinds", "kip848-kinds"
    cluster.topics(2, topic)
    member = MemberProcess("g", cluster.bootstrap, group, [topic])
    classic = Consumer({"bootstrap.servers": cluster.bootstrap, "group.id": group, "session.timeout.ms": 6000, **QUIET})
    try:
        wait_until("the KIP-848 member to hold both partitions", lambda: len(member.owned()) == 2)
        classic.subscribe([topic])
        errors: list[int] = []

        def refused() -> bool:
            message = classic.poll(0.2)
            if message is not None and message.error() is not None:
                errors.append(message.error().code())
            return KafkaError.INCONSISTENT_GROUP_PROTOCOL in errors

        wait_until("the classic consumer to be refused INCONSISTENT_GROUP_PROTOCOL", refused)
        assert classic.assignment() == [] and len(member.owned()) == 2
    finally:
        classic.close()
        member.stop()


def test_a_coordinator_killed_mid_group_is_replaced_by_one_that_resumes_the_group_from_its_records(
    cluster: GroupCluster,
) -> None:
    """The group's coordinator broker is killed -9 (and stays down): once the controller fences it, another
    broker leads the group's `__consumer_offsets` partition and loads the group from its KIP-848 records,
    so the members' next heartbeats (same member ids, same epochs) are accepted and nobody loses or is
    given a partition; ConsumerGroupDescribe (API 69, the admin client's) shows the same members and
    assignments before and after, and consuming goes on. The last test of the module: a broker stays down."""
    group, topic = "kip848-coordinator-move", "kip848-move"
    create(cluster.admin, NewTopic(topic, 4, 3))  # its partitions outlive the killed broker too
    wait_until(
        f"every broker to list {topic}",
        lambda: all(topic in metadata(cluster.cluster.specs[b].address)[1] for b in BROKERS),
    )
    producer = Producer({"bootstrap.servers": cluster.bootstrap, **QUIET})
    produced: set[tuple[str, int, int]] = set()

    def produce(count: int) -> None:
        for i in range(count):
            producer.produce(
                topic,
                f"{i}".encode(),
                partition=i % 4,
                on_delivery=lambda err, msg: err is None and produced.add((msg.topic(), msg.partition(), msg.offset())),
            )
        assert producer.flush(30) == 0, "records left undelivered"

    members = [MemberProcess(name, cluster.bootstrap, group, [topic]) for name in ("e", "f")]

    def consumed() -> set[tuple[str, int, int]]:
        return {
            (e["topic"], e["partition"], e["offset"]) for m in members for e in m.snapshot() if e["event"] == "record"
        }

    def described_members() -> dict[str, int]:
        description = cluster.describe(group)
        assert description.type == ConsumerGroupType.CONSUMER and description.state == ConsumerGroupState.STABLE
        return {m.member_id: len(m.assignment.topic_partitions) for m in description.members}

    try:
        wait_until(
            "two members to share the 4 partitions",
            lambda: all(m.owned() for m in members) and len(members[0].owned() | members[1].owned()) == 4,
        )
        produce(20)
        wait_until("the first records to be consumed", lambda: produced <= consumed())
        before = wait_until("the group to be described Stable with both members", described_members)
        events_before = [len(m.snapshot()) for m in members]
        killed = coordinator_of(cluster, group)
        cluster.cluster.kill(killed, signal.SIGKILL)
        survivor = cluster.cluster.specs[next(b for b in BROKERS if b != killed)].address
        moved_to = wait_until(
            "another broker to lead the group's partition",
            lambda: (leader := coordinator_of(cluster, group, survivor)) not in (killed, -1) and leader,
        )
        produce(20)
        wait_until(
            f"the records produced after the move to broker {moved_to} to be consumed",
            lambda: produced <= consumed(),
            timeout_s=90,
        )
        after = wait_until("the new coordinator to describe the group", described_members, timeout_s=60)
        assert after == before, "the group did not resume with the same members and assignments"
        for member, count in zip(members, events_before, strict=True):
            moved = [e for e in member.snapshot()[count:] if e["event"] in ("assign", "revoke", "lost")]
            assert not moved, f"{member.name} saw {moved} across the coordinator move"
    finally:
        for member in members:
            member.stop()


def coordinator_of(cluster: GroupCluster, group: str, address: str | None = None) -> int:
    """The broker leading the group's `__consumer_offsets` partition, as `address` (default the first
    broker) answers Metadata."""
    address = address or cluster.cluster.specs[BROKERS[0]].address
    return metadata(address)[1]["__consumer_offsets"].partitions[partition_for(group)].leader
