"""Group behaviours that real clients' integration tests check against Apache Kafka, on a
1-controller, 3-broker cluster shared by the module (issue 31, items 1-3): static membership
(KIP-345), commits from members that are no longer current, and cooperative rebalancing (KIP-429).
Each test has its own group and topics."""

from __future__ import annotations

import signal
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, TopicPartition
from kafka import ConsumerRebalanceListener, KafkaConsumer, OffsetAndMetadata
from kafka import TopicPartition as KafkaTopicPartition
from kafka.errors import CommitFailedError

from client_epochs.kafka_python import finish_abandoned_join
from quorum.broker.groups.config import partition_for
from tests.broker.groups.group_cluster import (
    BROKERS,
    GroupCluster,
    Member,
    consumer_config,
    group_cluster,
    poll_until,
)
from tests.test_controller_processes import metadata, metadata_answers, wait_until

pytestmark = pytest.mark.timeout(300)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory) -> Iterator[GroupCluster]:
    # brokers stay registered through the 8 s pause of test_a_commit_from_a_member_whose_session_expired...
    with group_cluster(tmp_path_factory.mktemp("group-rules"), {"broker.session.timeout.ms": "30000"}) as started:
        yield started


def poll_kafka_python(consumer: KafkaConsumer) -> None:
    """One short poll of a plain kafka-python member, after `finish_abandoned_join`: kafka-python
    3.0.12 drops a rebalance its leader began on a metadata change (a first join that went out
    before the topic's metadata came) when SyncGroup is answered after a poll's timeout, and the
    member then never takes its assignment nor heartbeats again (the fresh-clone failures of the
    kafka-python tests here on a loaded machine: generation 3 formed, the member silent after)."""
    finish_abandoned_join(consumer)
    consumer.poll(timeout_ms=50)


# ------------------------------------------------------------------------------------------------
# Static membership (KIP-345)


def static_member(cluster: GroupCluster, group: str, name: str, instance: str) -> Member:
    return Member(name, Consumer(consumer_config(cluster, group, **{"group.instance.id": instance})))


def test_static_member_restart_keeps_assignment_without_rebalance(cluster: GroupCluster) -> None:
    """librdkafka's 0102: a static member closed (librdkafka sends no LeaveGroup for one) and started
    again within session.timeout.ms gets its previous partitions back, and the other member sees no
    revoke and no assign: Kafka replaces the instance's member id and keeps the group Stable."""
    group, topic = "static-restart", "static-restart"
    cluster.topics(4, topic)
    first = static_member(cluster, group, "first", "instance-1")
    second = static_member(cluster, group, "second", "instance-2")
    members = [first, second]
    try:
        for member in members:
            member.subscribe([topic])
        poll_until("both static members to share the 4 partitions",
                   lambda: len(first.owned) + len(second.owned) == 4 and first.owned and second.owned
                   and cluster.describe(group).state.name == "STABLE", members)
        before, first_events = set(second.owned), len(first.events)
        second.close()
        members.remove(second)
        second = static_member(cluster, group, "second again", "instance-2")
        members.append(second)
        second.subscribe([topic])
        poll_until("the restarted static member to be assigned", lambda: bool(second.owned), members)
        for _ in range(20):  # a rebalance the restart set off would reach the first member's heartbeat by now
            first.poll(0.1)
        assert second.owned == before, "the restarted member got its previous assignment back"
        assert first.events[first_events:] == [], "the other member saw no rebalance"
        assert second.events == [("assign", tuple(sorted(before)))], "the restarted member saw only its assign"
        assert cluster.describe(group).state.name == "STABLE"
    finally:
        for member in members:
            member.close()


def test_static_kafka_python_member_restart_keeps_assignment_without_rebalance(cluster: GroupCluster) -> None:
    """The same with kafka-python as the restarted static member (it too skips LeaveGroup on close
    when it has a group_instance_id), beside a confluent-kafka static member."""
    group, topic = "static-restart-kp", "static-restart-kp"
    cluster.topics(4, topic)
    first = static_member(cluster, group, "first", "kp-instance-1")
    assigned: list[set[tuple[str, int]]] = []

    class Listener(ConsumerRebalanceListener):
        def on_partitions_revoked(self, revoked) -> None:
            assigned.append(set())

        def on_partitions_assigned(self, parts) -> None:
            assigned.append({(p.topic, p.partition) for p in parts})

    def kafka_python() -> KafkaConsumer:
        consumer = KafkaConsumer(bootstrap_servers=cluster.bootstrap, group_id=group,
                                 group_instance_id="kp-instance-2", enable_auto_commit=False,
                                 session_timeout_ms=10000, heartbeat_interval_ms=500, metadata_max_age_ms=5000)
        consumer.subscribe([topic], listener=Listener())
        return consumer

    second = kafka_python()
    try:
        first.subscribe([topic])
        poll_until("the two static members to share the 4 partitions",
                   lambda: bool(first.owned) and bool(assigned) and bool(assigned[-1])
                   and len(first.owned | assigned[-1]) == 4
                   and not first.owned & assigned[-1], [first], extra=lambda: poll_kafka_python(second))
        before, first_events = assigned[-1], len(first.events)
        second.close()
        assigned.clear()
        second = kafka_python()
        poll_until("the restarted kafka-python member to be assigned", lambda: bool(assigned) and bool(assigned[-1]),
                   [first], extra=lambda: poll_kafka_python(second))
        for _ in range(20):
            first.poll(0.1)
            poll_kafka_python(second)
        # (kafka-python calls on_partitions_revoked with nothing on its first join)
        assert [a for a in assigned if a] == [before], "the restarted member got its previous assignment back"
        assert first.events[first_events:] == [], "the other member saw no rebalance"
    finally:
        first.close()
        second.close()


def test_static_member_ids_survive_a_coordinator_restart(cluster: GroupCluster) -> None:
    """The coordinator broker restarts and loads the group from `__consumer_offsets` again (a
    coordinator move onto itself): the group record names each member's group.instance.id, so a
    static member restarted afterwards still replaces its old member id without a rebalance. Every
    Metadata answer the restarted broker gives lists it (it holds them until its image does), and
    the module's long-lived admin client still reaches it afterwards (`cluster.describe`)."""
    group, topic = "static-reload", "static-reload"
    cluster.topics(4, topic)
    first = static_member(cluster, group, "first", "reload-1")
    second = static_member(cluster, group, "second", "reload-2")
    members = [first, second]
    try:
        for member in members:
            member.subscribe([topic])
        poll_until("both static members to share the 4 partitions",
                   lambda: len(first.owned) + len(second.owned) == 4 and bool(first.owned) and bool(second.owned),
                   members)
        coordinator = coordinator_of(cluster, group)
        cluster.cluster.kill(coordinator, signal.SIGTERM)
        with metadata_answers(cluster.cluster.specs[coordinator].address) as answers:
            cluster.cluster.start_node(coordinator)
            wait_until(f"broker {coordinator} to answer Metadata after its restart", lambda: len(answers) >= 20)
        # librdkafka decommissions a broker missing from the brokers its own Metadata answer lists,
        # and its admin client then waits for it (as controller, as coordinator) for good
        assert answers and all(coordinator in brokers for brokers in answers), (
            f"the restarted broker {coordinator} left itself out of its Metadata answers: "
            f"{[sorted(b) for b in answers if coordinator not in b][:3]} of {len(answers)}")

        address = cluster.cluster.specs[next(b for b in BROKERS if b != coordinator)].address

        def reloaded() -> bool:
            try:
                leader = metadata(address)[1]["__consumer_offsets"].partitions[partition_for(group)].leader
                return leader == coordinator and cluster.describe(group).state.name == "STABLE"
            except (OSError, KafkaException):  # the broker answers again, the group loads again
                return False

        poll_until(f"broker {coordinator} to coordinate {group} again, Stable", reloaded, members, 90)
        before, first_events = set(second.owned), len(first.events)
        second.close()
        members.remove(second)
        second = static_member(cluster, group, "second again", "reload-2")
        members.append(second)
        second.subscribe([topic])
        poll_until("the restarted static member to be assigned", lambda: bool(second.owned), members, 90)
        for _ in range(20):
            first.poll(0.1)
        assert second.owned == before and first.events[first_events:] == [], (
            f"no rebalance after the reload: first saw {first.events[first_events:]}")
    finally:
        for member in members:
            member.close()


def test_a_replaced_static_member_is_fenced(cluster: GroupCluster) -> None:
    """Two live consumers with one group.instance.id: the newer replaces the older, whose next
    heartbeat answers FENCED_INSTANCE_ID (a fatal error in librdkafka), as on Kafka."""
    group, topic = "static-fenced", "static-fenced"
    cluster.topics(2, topic)
    old = static_member(cluster, group, "old", "instance")
    new = static_member(cluster, group, "new", "instance")
    try:
        old.subscribe([topic])
        poll_until("the first consumer to be assigned", lambda: len(old.owned) == 2, [old])
        new.subscribe([topic])
        errors: list[int] = []

        def fenced() -> bool:
            message = old.consumer.poll(0.1)
            if message is not None and message.error() is not None:
                errors.append(message.error().code())
            new.consumer.poll(0.05)
            return KafkaError._FATAL in errors or KafkaError.FENCED_INSTANCE_ID in errors

        deadline = time.monotonic() + 60
        while not fenced():
            assert time.monotonic() < deadline, f"the replaced consumer was not fenced; errors: {errors}"
    finally:
        old.close()
        new.close()


# ------------------------------------------------------------------------------------------------
# Commits from members that are no longer current


def test_a_commit_after_leaving_the_group_is_refused_unknown_member_id(cluster: GroupCluster) -> None:
    """A consumer unsubscribes (its partitions revoked, LeaveGroup sent) and commits: the group has
    members, so Kafka refuses it (UNKNOWN_MEMBER_ID) and the client learns the commit did not count."""
    group, topic = "commit-after-leave", "commit-after-leave"
    cluster.topics(2, topic)
    leaving = Member("leaving", Consumer(consumer_config(cluster, group)))
    staying = Member("staying", Consumer(consumer_config(cluster, group)))
    try:
        leaving.subscribe([topic])
        staying.subscribe([topic])
        poll_until("the two members to split the partitions", lambda: len(leaving.owned) == len(staying.owned) == 1,
                   [leaving, staying])
        leaving.consumer.unsubscribe()
        poll_until("the staying member to own both partitions", lambda: len(staying.owned) == 2, [leaving, staying])
        with pytest.raises(KafkaException) as refused:
            leaving.consumer.commit(offsets=[TopicPartition(topic, 0, 5)], asynchronous=False)
        assert refused.value.args[0].code() == KafkaError.UNKNOWN_MEMBER_ID
    finally:
        leaving.close()
        staying.close()


def coordinator_of(cluster: GroupCluster, group: str) -> int:
    """The broker leading the group's `__consumer_offsets` partition."""
    address = cluster.cluster.specs[BROKERS[0]].address
    return metadata(address)[1]["__consumer_offsets"].partitions[partition_for(group)].leader


@contextmanager
def coordinator_paused(cluster: GroupCluster, group: str, seconds: float = 8.0) -> Iterator[None]:
    """The group's coordinator stopped (SIGSTOP: a long GC pause) and continued `seconds` later, or at the
    latest when the block ends, whatever happened in it: the process never stays stopped."""
    coordinator = cluster.cluster.processes[coordinator_of(cluster, group)]
    resume = threading.Timer(seconds, coordinator.send_signal, (signal.SIGCONT,))
    coordinator.send_signal(signal.SIGSTOP)
    resume.start()
    try:
        yield
    finally:
        resume.cancel()
        coordinator.send_signal(signal.SIGCONT)


def test_a_commit_from_a_member_whose_session_expired_during_a_coordinator_pause_is_refused(
        cluster: GroupCluster) -> None:
    """The coordinator is paused (SIGSTOP: a long GC pause) past one member's session; that member's
    heartbeat and then its commit wait in the socket. Kafka's coordinator expires the session when
    it runs again and refuses the commit (UNKNOWN_MEMBER_ID): the group moves to a new generation
    without it. The race that accepted it in one of two runs: the heartbeat or the commit could be
    handled before the coordinator's timer tick and was judged against the group as the last tick
    left it, the expired member still in it (the heartbeat even started its session again)."""
    group, topic = "commit-after-expiry", "commit-after-expiry"
    cluster.topics(2, topic)
    short = Member("short", Consumer(consumer_config(cluster, group, **{"session.timeout.ms": 6000})))
    long = Member("long", Consumer(consumer_config(cluster, group, **{"session.timeout.ms": 60000,
                                                                      "max.poll.interval.ms": 60000})))
    try:
        short.subscribe([topic])
        long.subscribe([topic])
        poll_until("the two members to split the partitions", lambda: len(short.owned) == len(long.owned) == 1,
                   [short, long])
        [(_, partition)] = short.owned
        with coordinator_paused(cluster, group), pytest.raises(KafkaException) as refused:
            # answered once the coordinator runs again
            short.consumer.commit(offsets=[TopicPartition(topic, partition, 5)], asynchronous=False)
        assert refused.value.args[0].code() == KafkaError.UNKNOWN_MEMBER_ID
    finally:
        short.close()
        long.close()


def test_a_kafka_python_commit_after_its_session_expired_during_a_coordinator_pause_is_refused(
        cluster: GroupCluster) -> None:
    """The same with kafka-python as the member whose session ends during the pause: its commit is
    refused (kafka-python raises CommitFailedError for UNKNOWN_MEMBER_ID) instead of accepted."""
    group, topic = "kp-commit-after-expiry", "kp-commit-after-expiry"
    cluster.topics(2, topic)
    owned: list[set[tuple[str, int]]] = [set()]

    class Listener(ConsumerRebalanceListener):
        def on_partitions_revoked(self, revoked) -> None:
            owned[0] = set()

        def on_partitions_assigned(self, parts) -> None:
            owned[0] = {(p.topic, p.partition) for p in parts}

    short = KafkaConsumer(bootstrap_servers=cluster.bootstrap, group_id=group, enable_auto_commit=False,
                          session_timeout_ms=6000, heartbeat_interval_ms=500, metadata_max_age_ms=5000)
    long = Member("long", Consumer(consumer_config(cluster, group, **{"session.timeout.ms": 60000,
                                                                      "max.poll.interval.ms": 60000})))
    try:
        short.subscribe([topic], listener=Listener())
        long.subscribe([topic])
        poll_until("the two members to split the partitions", lambda: len(owned[0]) == len(long.owned) == 1,
                   [long], extra=lambda: poll_kafka_python(short))
        [(_, partition)] = owned[0]
        with coordinator_paused(cluster, group), pytest.raises(CommitFailedError):
            short.commit({KafkaTopicPartition(topic, partition): OffsetAndMetadata(5, "", -1)})
    finally:
        short.close()
        long.close()


# ------------------------------------------------------------------------------------------------
# Cooperative rebalancing (KIP-429)


def test_cooperative_members_joining_leaving_and_changing_topics_only_move_partitions_incrementally(
        cluster: GroupCluster) -> None:
    """librdkafka's 0113 in spirit: cooperative-sticky members add and drop topics, leave and come
    back (a static one within its session); every assignment change goes through
    incremental_assign/unassign (refused unless the group's protocol is a cooperative assignor), no
    partition is ever owned by two members, none is lost, every subscribed partition is owned once
    after each step, and the static member's return moves nothing."""
    group, t1, t2 = "coop-group", "coop-a", "coop-b"
    cluster.topics(4, t1, t2)
    members: dict[str, Member] = {}
    violations: list[str] = []

    def check(member: Member, kind: str, tps: set[tuple[str, int]]) -> None:
        if kind == "lost" and {t for t, _ in tps} & set(subscriptions.get(member.name, ())):
            # librdkafka drops the partitions of a topic a member unsubscribes from as lost: expected
            violations.append(f"{member.name} lost {sorted(tps)} of topics it is subscribed to")
        if kind == "assign":
            for other in members.values():
                if other is not member and other.owned & tps:
                    violations.append(f"{member.name} assigned {sorted(other.owned & tps)} still owned by {other.name}")

    def start(name: str, topics: list[str], instance: str | None = None) -> Member:
        config = consumer_config(cluster, group, **{"partition.assignment.strategy": "cooperative-sticky"})
        if instance is not None:
            config["group.instance.id"] = instance
        member = Member(name, Consumer(config), incremental=True, on_event=check)
        member.subscribe(topics)
        members[name] = member
        return member

    subscriptions: dict[str, list[str]] = {}

    def settled() -> bool:
        wanted = {(t, p) for topics in subscriptions.values() for t in topics for p in range(4)}
        owned = [m.owned for m in members.values()]
        union = set().union(*owned) if owned else set()
        inside = all({t for t, _ in m.owned} <= set(subscriptions[name]) for name, m in members.items())
        return union == wanted and sum(len(o) for o in owned) == len(union) and all(owned) and inside

    def step(what: str) -> None:
        poll_until(what, settled, list(members.values()), 90)
        assert not violations, violations

    try:
        subscriptions["a"] = [t1]
        start("a", [t1])
        step("a to own coop-a")
        subscriptions["b"] = [t1]
        start("b", [t1])
        step("a and b to share coop-a")
        subscriptions["c"] = [t1, t2]
        start("c", [t1, t2])
        step("c to join with both topics")
        subscriptions["a"] = [t1, t2]
        members["a"].subscribe([t1, t2])
        step("a to add coop-b")
        subscriptions["b"] = [t2]
        members["b"].subscribe([t2])
        step("b to move to coop-b only")
        members.pop("c").close()
        del subscriptions["c"]
        step("c's partitions to move to the others after it left")
        subscriptions["c"] = [t1]
        start("c", [t1])
        step("c to come back with coop-a")
        members.pop("b").close()
        del subscriptions["b"]
        subscriptions["b"] = [t1, t2]
        start("b", [t1, t2])
        step("b to come back with both topics")
        subscriptions["a"] = [t2]
        members["a"].subscribe([t2])
        step("a to drop coop-a")
        subscriptions["s"] = [t1, t2]
        start("s", [t1, t2], instance="coop-static")
        step("static member s to join")
        before = {name: set(m.owned) for name, m in members.items()}
        members.pop("s").close()  # a static member leaves no LeaveGroup behind: it comes back in time
        start("s", [t1, t2], instance="coop-static")
        step("static member s to come back with what it had")
        assert {name: m.owned for name, m in members.items()} == before, "nothing moved"
    finally:
        for member in members.values():
            member.close()
    assert not violations, violations
