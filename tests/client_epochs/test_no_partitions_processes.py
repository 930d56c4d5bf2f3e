"""A wrapped consumer whose group has no coordinator says so, and stops saying it once partitions come.

The cluster keeps `__consumer_offsets` with replication factor 1 (local-cluster's dev default), as
in the demo that once hung for eight minutes; each test kills the only replica of the partition its
group hashes to (Kafka's abs(hashCode(group)) % offsets.topic.num.partitions), checks the wrapper's
log names the missing coordinator, then starts the broker again and checks the consumer gets its
partition, reads the records and says no more. One cluster for the module: each test leaves every
broker running.
"""

from __future__ import annotations

import logging
import signal
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

from client_epochs.confluent import Consumer
from client_epochs.kafka_python import KafkaConsumer
from client_epochs.model import TopicPartition
from client_epochs.offset_fetch import OffsetFetcher
from quorum.broker.groups.config import partition_for
from quorum.launcher import LocalCluster
from tests.client_epochs.test_mirror_waits_processes import offsets_leader
from tests.test_controller_processes import create, metadata, wait_until

pytestmark = pytest.mark.timeout(240)

OFFSETS_PARTITIONS = 2
SETTINGS = {"offsets.topic.num.partitions": str(OFFSETS_PARTITIONS), "broker.session.timeout.ms": "3000",
            "broker.heartbeat.interval.ms": "500"}
TOPIC, RECORDS = "orders", 5
BROKERS = (101, 102)
LOGGER = "client_epochs.consumer_guard"


@dataclass
class Source:
    cluster: LocalCluster
    addresses: dict[int, str]


@pytest.fixture(scope="module")
def source(tmp_path_factory) -> Iterator[Source]:
    cluster = LocalCluster(tmp_path_factory.mktemp("no-partitions"), controllers=1, brokers=2, settings=SETTINGS)
    try:
        cluster.format_storage()
        cluster.start()
        addresses = {b: cluster.specs[b].address for b in BROKERS}
        create(AdminClient({"bootstrap.servers": ",".join(addresses.values()), "log_level": 0}),
               NewTopic(TOPIC, 1, 2))  # on both brokers: the topic keeps a leader, only the group loses its own
        producer = Producer({"bootstrap.servers": ",".join(addresses.values()), "log_level": 0})
        for n in range(RECORDS):
            producer.produce(TOPIC, f"{TOPIC}-{n}".encode())
        assert producer.flush(30) == 0
        fetcher = OffsetFetcher(addresses[101])  # FindCoordinator creates __consumer_offsets
        try:
            fetcher.fetch("another-group", [TopicPartition(TOPIC, 0)], timeout=60)
        finally:
            fetcher.close()
        yield Source(cluster, addresses)
    finally:
        cluster.stop()


@dataclass
class Wrapper:
    """One wrapper as a user runs it: made subscribed, polled once for records (as values)."""

    make: Callable[[str, str], Any]
    poll: Callable[[Any], list[bytes]]


def _confluent(bootstrap: str, group: str) -> Consumer:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "auto.offset.reset": "earliest",
                         "enable.auto.commit": False, "log_level": 0}, no_partitions_warning_s=2.0)
    consumer.subscribe([TOPIC])
    return consumer


def _confluent_poll(consumer: Consumer) -> list[bytes]:
    return [m.value() for m in consumer.consume(10, 0.5) if m.error() is None]


def _kafka_python(bootstrap: str, group: str) -> KafkaConsumer:
    return KafkaConsumer(TOPIC, bootstrap_servers=bootstrap, group_id=group, auto_offset_reset="earliest",
                         enable_auto_commit=False, no_partitions_warning_s=2.0)


def _kafka_python_poll(consumer: KafkaConsumer) -> list[bytes]:
    return [r.value for batch in consumer.poll(500).values() for r in batch]


WRAPPERS = {"confluent": Wrapper(_confluent, _confluent_poll),
            "kafka-python": Wrapper(_kafka_python, _kafka_python_poll)}


def _until(what: str, consumer: Any, wrapper: Wrapper, condition: Callable[[list[bytes]], bool],
           timeout_s: float = 90.0) -> list[bytes]:
    """Poll `consumer` until `condition(records delivered meanwhile)`; those records. Fails naming `what`."""
    got: list[bytes] = []
    deadline = time.monotonic() + timeout_s
    while not condition(got):
        assert time.monotonic() < deadline, f"no {what} within {timeout_s:g} s (got {got})"
        got += wrapper.poll(consumer)
    return got


@pytest.mark.parametrize("name", list(WRAPPERS))
def test_a_wrapped_consumer_names_its_missing_coordinator_until_the_broker_is_back(source, name, caplog):
    wrapper, group = WRAPPERS[name], f"readers-{name}"
    partition = partition_for(group, OFFSETS_PARTITIONS)
    offsets_of = source.addresses[101]
    victim = wait_until(f"a leader for __consumer_offsets-{partition}", lambda: offsets_leader(offsets_of, partition))
    survivor = next(a for b, a in source.addresses.items() if b != victim)
    source.cluster.kill(victim, signal.SIGKILL)
    wait_until(f"broker {victim} fenced", lambda: victim not in metadata(survivor)[0])

    reason = f'group coordinator for "{group}" unavailable (COORDINATOR_NOT_AVAILABLE)'
    consumer = wrapper.make(",".join(source.addresses.values()), group)
    try:
        with caplog.at_level(logging.INFO, logger=LOGGER):
            def warned(_: list[bytes]) -> bool:
                return any(r.levelno == logging.WARNING and reason in r.getMessage() for r in caplog.records)

            before = _until(f"warning naming {reason}", consumer, wrapper, warned)
            assert before == []
            warning = next(r.getMessage() for r in caplog.records if reason in r.getMessage())
            assert warning.startswith(f'consumer of group "{group}" has no partitions, waiting: {reason} for '), warning
            assert consumer.waiting_reason is not None and reason in consumer.waiting_reason

            source.cluster.start_node(victim)
            got = _until("its partition assigned and its records", consumer, wrapper,
                         lambda records: bool(consumer.assignment()) and len(records) >= RECORDS)
            assert sorted(got) == [f"{TOPIC}-{n}".encode() for n in range(RECORDS)]
            assert consumer.waiting_reason is None
        messages = [(r.levelno, r.getMessage()) for r in caplog.records if r.name == LOGGER]
        ended = next(i for i, (_, text) in enumerate(messages)
                     if text.startswith(f'group "{group}" assigned partitions after'))
        assert not [text for level, text in messages[ended:] if level >= logging.WARNING], messages
    finally:
        consumer.close()
        source.cluster.start_node(victim)  # a failed test leaves the broker running for the next
    wait_until(f"broker {victim} back", lambda: victim in metadata(survivor)[0])
