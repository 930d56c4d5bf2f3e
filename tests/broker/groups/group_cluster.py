"""What the group process tests share: a 1-controller, 3-broker local cluster (the shape the client
libraries' integration tests ran against) and confluent-kafka consumers that record every rebalance
event, so a test can say which member saw a revoke and which never did.

One cluster per test module: each test uses its own group and topics, so they do not meet."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from confluent_kafka import Consumer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from quorum.launcher import LocalCluster
from tests.test_broker_processes import QUIET
from tests.test_controller_processes import create, metadata, wait_until

BROKERS = (101, 102, 103)
SETTINGS = {"group.initial.rebalance.delay.ms": "0", "offsets.topic.replication.factor": "1"}
"""Kafka's development defaults (`quorum local-cluster`'s): 50 `__consumer_offsets` partitions."""

GROUP_TIMINGS = {"session.timeout.ms": 10000, "heartbeat.interval.ms": 500, "max.poll.interval.ms": 30000}


class GroupCluster:
    """A started cluster, its bootstrap list and an admin client."""

    def __init__(self, cluster: LocalCluster) -> None:
        self.cluster = cluster
        self.bootstrap = ",".join(cluster.specs[b].address for b in BROKERS)
        self.admin = AdminClient({"bootstrap.servers": self.bootstrap, **QUIET})

    def topics(self, partitions: int, *names: str) -> None:
        create(self.admin, *(NewTopic(name, partitions, 1) for name in names))
        for name in names:
            wait_until(f"every broker to list {name}",
                       lambda name=name: all(name in metadata(self.cluster.specs[b].address)[1] for b in BROKERS))

    def describe(self, group: str) -> Any:
        """The group as DescribeGroups answers it (confluent-kafka's admin client)."""
        return self.admin.describe_consumer_groups([group], request_timeout=15)[group].result(timeout=20)


@contextmanager
def group_cluster(directory: Path, settings: dict[str, str] | None = None) -> Iterator[GroupCluster]:
    cluster = LocalCluster(directory, controllers=1, brokers=len(BROKERS), settings={**SETTINGS, **(settings or {})})
    cluster.format_storage()
    cluster.start()
    try:
        first = cluster.specs[BROKERS[0]].address
        wait_until("all three brokers to be unfenced", lambda: metadata(first)[0] == set(BROKERS))
        yield GroupCluster(cluster)
    finally:
        cluster.stop()


@dataclass
class Member:
    """A confluent-kafka consumer whose rebalance callbacks log (event, partitions) and track what it owns.

    With `incremental` the callbacks themselves call incremental_assign/incremental_unassign, as
    librdkafka's cooperative tests do: librdkafka refuses them (a KafkaException in poll) unless the
    rebalance protocol it derived from the group's chosen assignor is COOPERATIVE."""

    name: str
    consumer: Consumer
    incremental: bool = False
    owned: set[tuple[str, int]] = field(default_factory=set)
    events: list[tuple[str, tuple[tuple[str, int], ...]]] = field(default_factory=list)
    on_event: Callable[[Member, str, set[tuple[str, int]]], None] | None = None

    def subscribe(self, topics: list[str]) -> None:
        self.consumer.subscribe(topics, on_assign=self._assigned, on_revoke=self._revoked, on_lost=self._lost)

    def _record(self, kind: str, parts: list[TopicPartition]) -> set[tuple[str, int]]:
        tps = {(p.topic, p.partition) for p in parts}
        self.events.append((kind, tuple(sorted(tps))))
        if self.on_event is not None:
            self.on_event(self, kind, tps)
        return tps

    def _assigned(self, consumer: Consumer, parts: list[TopicPartition]) -> None:
        tps = self._record("assign", parts)
        if self.incremental:
            consumer.incremental_assign(parts)
            self.owned |= tps
        else:
            self.owned = tps

    def _revoked(self, consumer: Consumer, parts: list[TopicPartition]) -> None:
        tps = self._record("revoke", parts)
        if self.incremental:
            consumer.incremental_unassign(parts)
            self.owned -= tps
        else:
            self.owned = set()

    def _lost(self, consumer: Consumer, parts: list[TopicPartition]) -> None:
        tps = self._record("lost", parts)
        if self.incremental:
            consumer.incremental_unassign(parts)
        self.owned -= tps

    def poll(self, timeout: float = 0.1) -> None:
        message = self.consumer.poll(timeout)
        if message is not None and message.error() is not None and not message.error().retriable():
            code = message.error().code()
            if code not in (-191,):  # _PARTITION_EOF
                raise AssertionError(f"{self.name}: {message.error()}")

    def close(self) -> None:
        self.consumer.close()


def consumer_config(cluster: GroupCluster, group: str, **extra: Any) -> dict[str, Any]:
    return {"bootstrap.servers": cluster.bootstrap, "group.id": group, "enable.auto.commit": False,
            "auto.offset.reset": "earliest", **GROUP_TIMINGS, **QUIET, **extra}


def poll_until(what: str, condition: Callable[[], bool], members: list[Member], timeout_s: float = 60.0,
               extra: Callable[[], object] | None = None) -> None:
    """Poll every member in turn (and call `extra`, another client's poll) until `condition()`;
    AssertionError naming `what` after `timeout_s`."""
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            owned = {m.name: sorted(m.owned) for m in members}
            raise AssertionError(f"timed out after {timeout_s:.0f} s waiting for {what}; owned: {owned}")
        for member in members:
            member.poll(0.05)
        if extra is not None:
            extra()
