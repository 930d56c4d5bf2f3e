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

from quorum import reassign
from quorum.broker.groups.config import partition_for
from tests.broker.groups.group_cluster import BROKERS, GroupCluster, group_cluster
from tests.test_broker_processes import QUIET
from tests.test_controller_processes import create, metadata, wait_until

pytestmark = pytest.mark.timeout(300)

MEMBER_SCRIPT = Path(__file__).with_name("kip848_member.py")
ROOT = Path(__file__).resolve().parents[4]
"""The project the member processes import (`client_epochs` from this checkout, not an installed copy)."""
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
STALE = BROKERS[-1]
"""The broker whose Metadata answers the wrapper's run freezes (the last in the members' bootstrap lists)."""


class MemberProcess:
    """One consumer process and the events it printed."""

    def __init__(
        self,
        name: str,
        bootstrap: str,
        group: str,
        subscription: list[str],
        wrapper: bool = False,
        revoke_work_s: float = 0.0,
    ) -> None:
        """`revoke_work_s`: how long the member's on_revoke callback works before it gives partitions up."""
        self.name = name
        self.events: list[dict[str, Any]] = []
        self.killed_at: float | None = None
        self._lock = threading.Lock()
        self.process = subprocess.Popen(
            [sys.executable, str(MEMBER_SCRIPT), name, bootstrap, group, *(["--wrapper"] * wrapper), *subscription],
            env={
                **os.environ,
                "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])),
                "KIP848_REVOKE_WORK_S": str(revoke_work_s),
            },
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

    def refusals(self) -> int:
        """Stale Metadata answers the wrapped member's metadata client refused so far."""
        return max((e["count"] for e in self.snapshot() if e["event"] == "refusals"), default=0)

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


REVOKE_WORK_S = 0.5
"""The recreation test's members work this long in on_revoke: a revocation librdkafka acknowledges before
the callback ran then shows as two owners at once, not only when the next owner is fast."""
Record = tuple[str, int, int, str]
"""(topic, partition, offset, value): the value tells a recreated topic's records from the deleted one's."""


def produce_recorded(producer: Producer, produced: set[Record], topic: str, partitions: int, count: int,
                     tag: str = "") -> None:
    """`count` records round-robin over `partitions`, each acknowledged one added to `produced`."""
    for i in range(count):
        producer.produce(
            topic,
            f"{topic}-{tag}{i}".encode(),
            partition=i % partitions,
            on_delivery=lambda err, msg: (
                err is None and produced.add((msg.topic(), msg.partition(), msg.offset(), msg.value().decode()))
            ),
        )
    assert producer.flush(30) == 0, "records left undelivered"


def records_consumed(members: list[MemberProcess]) -> set[Record]:
    """Every record any of `members` reported consuming."""
    return {
        (e["topic"], e["partition"], e["offset"], e["value"])
        for m in members
        for e in m.snapshot()
        if e["event"] == "record"
    }


@pytest.mark.parametrize("wrapper", [False, True], ids=["confluent", "client_epochs-wrapper"])
def test_consumer_protocol_members_killed_added_and_topic_changes_consume_every_record_once(
    cluster: GroupCluster, wrapper: bool
) -> None:
    """The scenario of the module docstring, with bare confluent-kafka consumers or with the `client_epochs`
    confluent wrapper (KIP-232 commits and waits), whose run goes on through a stale broker: broker STALE's
    Metadata answers are frozen (its PAUSE_METADATA file) while every partition moves to another broker;
    the members already running ask a current broker first, so their commits carry the new leader epochs;
    a member added then lists STALE first and must refuse its answers (older than the commits of the
    partitions it is given) before it fetches; then every record is still consumed once per commit.
    Records are told apart by value too (a recreated topic reuses offsets; the members print values)."""
    prefix = "kip848w-" if wrapper else "kip848-"
    group, regex, topic_a, topic_b = f"{prefix}flow", f"^{prefix}.*", f"{prefix}a", f"{prefix}b"
    stale = cluster.cluster.specs[STALE]
    pause_file = stale.directory / "data" / "__cluster_metadata-0" / "PAUSE_METADATA"
    current_first = ",".join(cluster.cluster.specs[b].address for b in BROKERS if b != STALE)
    current_first += "," + stale.address
    cluster.topics(4, topic_a)
    producer = Producer({"bootstrap.servers": current_first, **QUIET})
    produced: set[Record] = set()

    def produce(topic: str, partitions: int, count: int) -> None:
        produce_recorded(producer, produced, topic, partitions, count)

    members: list[MemberProcess] = []

    def start(name: str, bootstrap: str = current_first) -> MemberProcess:
        member = MemberProcess(name, bootstrap, group, [regex], wrapper)
        members.append(member)
        return member

    def consumed() -> set[Record]:
        return records_consumed(members)

    def owners_cover(wanted: set[TopicPartition], alive: list[MemberProcess]) -> bool:
        held = [m.owned() for m in alive]
        return set().union(*held) == wanted and all(held)

    try:
        a, b, c = start("a"), start("b"), start("c")
        partitions_a = {(topic_a, p) for p in range(4)}
        wait_until(f"three members to share {topic_a}'s 4 partitions", lambda: owners_cover(partitions_a, [a, b, c]))
        produce(topic_a, 4, 40)
        wait_until("every record of the first batch to be consumed", lambda: produced <= consumed())

        b.kill()
        produce(topic_a, 4, 40)
        wait_until(
            "a and c to own b's partitions after its session lapsed, and consume the second batch",
            lambda: owners_cover(partitions_a, [a, c]) and produced <= consumed(),
        )

        d = start("d")
        wait_until("the new member d to be given partitions", lambda: owners_cover(partitions_a, [a, c, d]))
        produce(topic_a, 4, 40)

        cluster.admin.create_partitions([NewPartitions(topic_a, 6)])[topic_a].result(timeout=30)
        cluster.topics(2, topic_b)
        wanted = {(topic_a, p) for p in range(6)} | {(topic_b, 0), (topic_b, 1)}
        alive = [a, c, d]
        wait_until(
            "the new partitions and the new topic matching the regex to be assigned",
            lambda: owners_cover(wanted, alive),
        )
        wait_until(
            f"the producer to see {topic_a}'s 6 partitions",
            lambda: len(producer.list_topics(topic_a, timeout=5).topics[topic_a].partitions) == 6,
        )
        produce(topic_a, 6, 60)
        produce(topic_b, 2, 20)
        wait_until("every record to be consumed", lambda: produced <= consumed(), timeout_s=90)

        if wrapper:
            # Broker STALE answers Metadata as it is now, while every partition of both topics moves to another
            # broker (a new leader, a higher leader epoch): the records consumed and committed afterwards
            # carry epochs newer than anything STALE says, whichever partitions the next member is given.
            # librdkafka skips STALE's answers by their older leader epochs (KIP-320); the wrappers must refuse
            # them too before fetching (KIP-232).
            pause_file.touch()
            metadata(stale.address)
            move_every_partition(cluster, topic_a)
            move_every_partition(cluster, topic_b)
            produce(topic_a, 6, 60)
            produce(topic_b, 2, 20)
            wait_until("every record to be consumed after the moves", lambda: produced <= consumed(), timeout_s=90)
            e = start("e", f"{stale.address},{current_first}")
            alive.append(e)
            wait_until(
                "the member e, asking the stale broker first, to be given partitions and refuse its answers",
                lambda: owners_cover(wanted, alive) and e.refusals() >= 1,
            )
            produce(topic_a, 6, 60)
            produce(topic_b, 2, 20)
            wait_until("every record to be consumed by four members", lambda: produced <= consumed(), timeout_s=90)
            assert metadata(stale.address)[1][topic_a].partitions[0].leader_epoch < leader_epoch(cluster, topic_a, 0)
            pause_file.unlink()

    finally:
        pause_file.unlink(missing_ok=True)
        for member in members:
            if member.killed_at is None:
                member.stop()

    assert all(m.snapshot()[-1]["event"] == "closed" for m in alive), "a member did not close cleanly"
    assert_one_owner_and_once_per_commit(members, produced, cluster.cluster.directory)


def assert_one_owner_and_once_per_commit(members: list[MemberProcess], produced: set[Record], keep: Path) -> None:
    """No partition held by two members at once; every record produced consumed, and a record consumed
    again only where its earlier consumers never committed it. On a failure every member's events
    (assignments, records, commits, with their times) go to `keep`/member-events.json beside the node
    logs: the message names one record, the events say how it came twice."""
    try:
        _check_one_owner_and_once_per_commit(members, produced)
    except AssertionError as exc:
        kept = keep / "member-events.json"
        kept.write_text(json.dumps({member.name: member.snapshot() for member in members}))
        raise AssertionError(f"{exc} (every member's events: {kept})") from exc


def delivery_committed(events: list[dict[str, Any]], index: int, key: Record) -> bool:
    """Whether the delivery of `key` at `events[index]` was committed: the member prints each record's
    commit outcome ("committed" or "commit_failed") before its next record, so the first outcome for
    `key` after it is this delivery's. (Any later "committed" of `key` counted before: a commit refused
    with STALE_MEMBER_EPOCH in a reassignment, its record read again and committed then, read as two
    committed deliveries: ci43e's failure.)"""
    for event in events[index + 1 :]:
        if event["event"] in ("committed", "commit_failed") and \
                (event["topic"], event["partition"], event["offset"], event["value"]) == key:
            return event["event"] == "committed"
    return False  # killed before its commit's outcome


def _check_one_owner_and_once_per_commit(members: list[MemberProcess], produced: set[Record]) -> None:
    for tp, spans in ownership_intervals(members).items():
        spans.sort()
        for (_, end, first), (start_, _, second) in zip(spans, spans[1:], strict=False):
            assert end <= start_, f"{tp} held by {first} until {end} and by {second} from {start_}"
    deliveries: dict[Record, list[tuple[str, bool]]] = {}
    for member in members:
        events = member.snapshot()
        for i, event in enumerate(events):
            if event["event"] == "record":
                key = (event["topic"], event["partition"], event["offset"], event["value"])
                deliveries.setdefault(key, []).append((member.name, delivery_committed(events, i, key)))
    assert set(deliveries) == produced
    twice = {key: who for key, who in deliveries.items() if len(who) > 1}
    assert all(not committed for who in twice.values() for _, committed in who[:-1]), twice


def test_wrapped_members_through_a_subscribed_topic_deleted_and_created_again_consume_the_new_topic(
    cluster: GroupCluster,
) -> None:
    """Three `client_epochs` confluent wrappers (`on_topic_recreated="earliest"`) subscribed by regex to two
    topics; one is deleted and created again under its name while they run, and a fourth member joins as
    the new topic's partitions are handed over: the coordinator revokes the deleted topic's partitions and
    hands the new topic's over, and every record of the new topic is consumed (from its beginning: nothing
    was committed on it) beside the other topic's, once per commit, no partition held twice (the members
    work REVOKE_WORK_S in on_revoke, so a revocation acknowledged before its callback ran shows). A
    partition the wrapper held while its topic was gone stayed paused in librdkafka when the new topic's
    partition of that name was assigned (a member silent for 90 s); the wrapper once started partitions
    with nothing committed again from poll, which librdkafka took for the answer to a rebalance."""
    group, regex, kept, again = "kip848r-flow", "^kip848r-.*", "kip848r-kept", "kip848r-again"
    cluster.topics(4, kept)
    cluster.topics(2, again)
    producer = Producer({"bootstrap.servers": cluster.bootstrap, **QUIET})
    produced: set[Record] = set()

    def produce(topic: str, partitions: int, count: int, tag: str) -> None:
        produce_recorded(producer, produced, topic, partitions, count, f"{tag}-")

    members: list[MemberProcess] = []

    def consumed() -> set[Record]:
        return records_consumed(members)

    def missing() -> str:
        return f"records not consumed: {sorted(produced - consumed())[:10]}"

    wanted = {(kept, p) for p in range(4)} | {(again, p) for p in range(2)}
    try:
        # one at a time: a member given a target while it lacked the topics' metadata tells the coordinator it
        # owns none of it, and librdkafka still assigns that target after the coordinator (as Kafka's) took it
        # for given up and handed it to another member joining meanwhile: two owners at once, a librdkafka
        # start-up race this test is not about
        for name in ("r1", "r2", "r3"):
            members.append(MemberProcess(name, cluster.bootstrap, group, [regex], True, REVOKE_WORK_S))
            wait_until(
                f"{len(members)} member(s) to share both topics' 6 partitions",
                lambda: set().union(*(m.owned() for m in members)) == wanted and all(m.owned() for m in members),
            )
        produce(kept, 4, 40, "first")
        produce(again, 2, 20, "first")
        wait_until("every record of the first batch to be consumed", lambda: produced <= consumed())

        for future in cluster.admin.delete_topics([again], request_timeout=30).values():
            future.result(timeout=30)
        wait_until(
            f"no broker to list {again}",
            lambda: all(again not in metadata(cluster.cluster.specs[b].address)[1] for b in BROKERS),
        )
        # the coordinator takes the deleted topic's partitions back; once they are given up, ownership by name
        # (what the members print) stays one owner at a time across the two topics of one name
        wait_until(
            f"every member to give up {again}'s partitions",
            lambda: not any(tp[0] == again for m in members for tp in m.owned()),
        )
        produce(kept, 4, 40, "between")
        cluster.topics(2, again)
        # r4 joins while the new topic's partitions, nothing committed on them, are being started: the others
        # are asked to give partitions up meanwhile (the wrapper once started such partitions again from poll,
        # which librdkafka took for its answer to a revocation it had handed over and not yet delivered)
        members.append(MemberProcess("r4", cluster.bootstrap, group, [regex], True, REVOKE_WORK_S))
        producer.list_topics(again, timeout=10)  # the producer's metadata names the new topic before it sends
        produce(again, 2, 20, "second")
        produce(kept, 4, 40, "second")
        wait_until(
            "every record, the recreated topic's too, to be consumed", lambda: produced <= consumed(), timeout_s=90
        )
    except AssertionError as exc:
        raise AssertionError(f"{exc}; {missing()}") from exc
    finally:
        for member in members:
            member.stop()

    assert all(m.snapshot()[-1]["event"] == "closed" for m in members), "a member did not close cleanly"
    assert_one_owner_and_once_per_commit(members, produced, cluster.cluster.directory)


def current_address(cluster: GroupCluster) -> str:
    return cluster.cluster.specs[BROKERS[0]].address


def leader_epoch(cluster: GroupCluster, topic: str, partition: int) -> int:
    return metadata(current_address(cluster))[1][topic].partitions[partition].leader_epoch


def move_every_partition(cluster: GroupCluster, topic: str) -> None:
    """Move each partition's one replica to the next broker (KIP-455, `quorum reassign-partitions`) and wait
    until a current broker names the new leaders."""
    partitions = metadata(current_address(cluster))[1][topic].partitions
    moves = {p: BROKERS[(BROKERS.index(meta.leader) + 1) % len(BROKERS)] for p, meta in partitions.items()}
    document = json.dumps(
        {"version": 1, "partitions": [{"topic": topic, "partition": p, "replicas": [b]} for p, b in moves.items()]}
    )
    lines, code = reassign.run("execute", current_address(cluster), document)
    assert code == 0, lines
    wait_until(
        f"the moves of {topic}'s partitions to complete",
        lambda: reassign.run("verify", current_address(cluster), document)[1] == 0,
    )
    wait_until(
        f"a current broker to name {topic}'s new leaders",
        lambda: {p: m.leader for p, m in metadata(current_address(cluster))[1][topic].partitions.items()} == moves,
    )


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


def test_a_delivery_whose_commit_was_refused_counts_as_uncommitted_though_its_next_delivery_committed() -> None:
    """ci43e: c read offset 21, its commit was refused (STALE_MEMBER_EPOCH: the group was being reassigned),
    it read 21 again and committed it; the first delivery is the uncommitted one, allowed to come twice."""
    record = {"topic": "t", "partition": 1, "offset": 21, "value": "t-5"}
    key = ("t", 1, 21, "t-5")
    events = [{"event": "record", **record}, {"event": "commit_failed", "error": "STALE_MEMBER_EPOCH", **record},
              {"event": "revoke", "partitions": [["t", 1]]}, {"event": "assign", "partitions": [["t", 1]]},
              {"event": "record", **record}, {"event": "committed", **record}]
    assert [delivery_committed(events, i, key) for i in (0, 4)] == [False, True]
    assert not delivery_committed(events[:1], 0, key)  # killed before the outcome
