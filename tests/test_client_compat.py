"""Compatibility suite: one real client at a time on a `quorum local-cluster` with one broker.

Each of confluent-kafka, kafka-python and kcat, on its own fresh cluster and a 3-partition topic:

1. produces 10,000 messages with keys, headers and its own compression codec (confluent-kafka
   zstd, kafka-python gzip, kcat snappy), because the broker stores client batches as they come
   and every codec must survive the round trip byte for byte;
2. consumes them all back through a consumer group subscription (JoinGroup/SyncGroup, not a
   plain assign), checking key, value and headers of every message;
3. commits with a leader epoch and a metadata string, restarts the broker (SIGKILL for
   confluent-kafka and kcat: acknowledged commits must be durable; SIGTERM, a clean shutdown, for
   kafka-python) and reads the same committed offsets, epochs and metadata back with the same client;
4. has a second member join the group: the partitions split between the two members, and every
   message produced after the first phase is consumed exactly once across both, because each
   member commits what it processed after every batch and when its partitions are revoked.

kcat can set neither a metadata string nor a leader epoch on a commit: for it, step 3 is kcat's
own auto-commit (on exit and on revocation), and the committed offsets are read back with
kafka-python, which reads OffsetFetch exactly.

The two members of one client run side by side: two confluent-kafka consumers polled in turn
from the test's thread (librdkafka joins in its own threads), two `kcat -G` processes, and two
kafka-python consumers each polling from its own thread. Not in turn from one thread: kafka-python
3.0.12 drops a JoinGroup/SyncGroup round that completed while its `poll()` was not running
(`BaseCoordinator.join_group_async` replaces a finished join task instead of reading its result)
and sends JoinGroup again; when that member is the leader, the coordinator must start a new
rebalance (Kafka's rule), whose answer then lands during the other member's `poll()`, and so on.
"""

from __future__ import annotations

import re
import signal
import subprocess
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Protocol

import pytest
from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from kafka import ConsumerRebalanceListener, KafkaConsumer, KafkaProducer, OffsetAndMetadata
from kafka import TopicPartition as KafkaTopicPartition

from quorum.launcher import LocalCluster
from tests.test_broker_processes import BROKER, QUIET, one_broker
from tests.test_controller_processes import create, metadata, wait_until

pytestmark = pytest.mark.timeout(300)

TOPIC = "compat"
PARTITIONS = 3
COUNT = 10_000
MORE = 2_000  # produced in the rebalance phase, half before and half after the second member joins
GROUP = "compat-group"
PAD = "the quick brown fox jumps over the lazy dog " * 3  # compressible, so the codecs do real work
GROUP_TIMINGS = {"session_ms": 6000, "heartbeat_ms": 500}


@dataclass(frozen=True)
class Message:
    """What one client produced, and what every consumer must see again, byte for byte."""

    key: bytes
    value: bytes
    headers: tuple[tuple[str, bytes | None], ...]


def expected(client: str, n: int) -> Message:
    """Message `n` of `client`'s run; kcat sends the same headers with every message (its `-H`)."""
    headers: tuple[tuple[str, bytes | None], ...] = (("client", client.encode()), ("suite", b"compat"))
    if client != "kcat":  # per-message headers, with an empty value
        headers = (("n", str(n).encode()), ("client", client.encode()), ("empty", b""))
    if client == "confluent":  # and a null one (length -1 on the wire), which kafka-python cannot send
        headers += (("null", None),)
    return Message(f"key-{n}".encode(), f"{client} message {n} {PAD}".encode(), headers)


def number(message: Message) -> int:
    return int(message.key.decode().removeprefix("key-"))


@dataclass(frozen=True)
class Consumed:
    member: str
    partition: int
    offset: int
    message: Message
    leader_epoch: int = -1  # of the batch, as the client reports it (kcat does not)


class Member(Protocol):
    assigned: set[int]


def last_commits(consumed: list[Consumed]) -> dict[int, tuple[int, int, str]]:
    """What the members' last commits must hold: (next offset, leader epoch, metadata) after each
    partition's last message, from whichever member processed it."""
    last: dict[int, Consumed] = {}
    for c in consumed:
        if c.partition not in last or c.offset > last[c.partition].offset:
            last[c.partition] = c
    return {p: (c.offset + 1, c.leader_epoch, f"{c.member} processed p{p}") for p, c in last.items()}


@contextmanager
def compat_cluster(tmp_path) -> Iterator[tuple[LocalCluster, str]]:
    """A fresh one-broker cluster with the 3-partition topic, created through the broker."""
    with one_broker(tmp_path) as (cluster, address):
        create(AdminClient({"bootstrap.servers": address, **QUIET}), NewTopic(TOPIC, PARTITIONS, 1))
        yield cluster, address


def restart_broker(cluster: LocalCluster, address: str, sig: int) -> None:
    """Stop the broker with `sig`, start it from its logs and wait until the controller unfences it."""
    cluster.kill(BROKER, sig)
    cluster.start_node(BROKER)
    wait_until("the restarted broker to be unfenced", lambda: metadata(address)[0] == {BROKER}, 60)


def assert_first_phase(client: str, consumed: list[Consumed]) -> dict[int, int]:
    """Every produced message came back once, intact, at contiguous offsets; returns the end offsets."""
    numbers = Counter(number(c.message) for c in consumed)
    duplicated = sorted(n for n, times in numbers.items() if times > 1)
    missing = sorted(set(range(COUNT)) - set(numbers))
    assert not duplicated and not missing, f"{client}: {len(duplicated)} duplicated, {len(missing)} missing " \
                                           f"(first: {duplicated[:5]}, {missing[:5]})"
    wrong = [c for c in consumed if c.message != expected(client, number(c.message))]
    assert not wrong, f"{client}: {len(wrong)} messages differ from what was produced, first {wrong[0]}"
    ends: dict[int, int] = {}
    for p in range(PARTITIONS):
        offsets = sorted(c.offset for c in consumed if c.partition == p)
        assert offsets == list(range(len(offsets))), f"{client}: partition {p} offsets are not 0..n-1"
        ends[p] = len(offsets)
    assert all(ends.values()), f"{client}: keyed messages should reach every partition, got {ends}"
    return ends


def assert_exactly_once(client: str, consumed: list[Consumed], starts: dict[int, int],
                        ends: dict[int, int]) -> None:
    """Across both members, each offset of the rebalance phase was processed exactly once."""
    seen = Counter((c.partition, c.offset) for c in consumed)
    twice = sorted(k for k, times in seen.items() if times > 1)
    lost = [(p, o) for p in range(PARTITIONS) for o in range(starts[p], ends[p]) if (p, o) not in seen]
    assert not twice, f"{client}: {len(twice)} messages seen twice after the last commit, first {twice[:5]}: " + \
        str([c for c in consumed if (c.partition, c.offset) in set(twice[:3])])
    assert not lost, f"{client}: {len(lost)} messages lost after the last commit, first {lost[:5]}"
    numbers = sorted(number(c.message) for c in consumed)
    assert numbers == list(range(COUNT, COUNT + MORE)), f"{client}: rebalance phase read other messages"
    wrong = [c for c in consumed if c.message != expected(client, number(c.message))]
    assert not wrong, f"{client}: {len(wrong)} messages differ from what was produced, first {wrong[0]}"


def high_watermarks(address: str) -> dict[int, int]:
    """Each partition's high watermark, from ListOffsets (the yardstick for 'every message')."""
    consumer = Consumer({"bootstrap.servers": address, "group.id": "watermarks", **QUIET})
    try:
        return {p: consumer.get_watermark_offsets(TopicPartition(TOPIC, p), timeout=30)[1]
                for p in range(PARTITIONS)}
    finally:
        consumer.close()


def wait_for_split(a: Member, b: Member, step: Callable[[], None]) -> None:
    """Until members `a` and `b` (with `.assigned` partition sets) each own some partitions, none twice."""
    def split() -> bool:
        first, second = set(a.assigned), set(b.assigned)
        return bool(first) and bool(second) and not first & second and first | second == set(range(PARTITIONS))

    settle(lambda: f"the partitions to split between A and B (now A {sorted(a.assigned)}, B {sorted(b.assigned)})",
           split, step)


def settle(what: str | Callable[[], str], condition: Callable[[], bool], step: Callable[[], None] = lambda: None,
           timeout_s: float = 60.0) -> None:
    """Run `step` until `condition` holds; the failure names what never happened."""
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what() if callable(what) else what}")
        step()
        time.sleep(0.01)


# --- confluent-kafka --------------------------------------------------------------------------


def confluent_consumer(address: str, **extra) -> Consumer:
    return Consumer({"bootstrap.servers": address, "group.id": GROUP, "enable.auto.commit": False,
                     "auto.offset.reset": "earliest", "session.timeout.ms": GROUP_TIMINGS["session_ms"],
                     "heartbeat.interval.ms": GROUP_TIMINGS["heartbeat_ms"], **QUIET, **extra})


def confluent_message(client: str, message) -> Consumed:
    assert message.error() is None, message.error()
    headers = tuple(message.headers() or [])
    epoch = message.leader_epoch()
    return Consumed(client, message.partition(), message.offset(), Message(message.key(), message.value(), headers),
                    -1 if epoch is None else epoch)


def confluent_produce(address: str, numbers: range) -> None:
    producer = Producer({"bootstrap.servers": address, "acks": "all", "enable.idempotence": True,
                         "compression.type": "zstd", "linger.ms": 20, **QUIET})
    failed: list[str] = []

    def delivered(error, _message) -> None:
        if error is not None:
            failed.append(str(error))

    for n in numbers:
        m = expected("confluent", n)
        while True:
            try:
                producer.produce(TOPIC, m.value, m.key, headers=list(m.headers), on_delivery=delivered)
                break
            except BufferError:  # the local queue is full: let deliveries drain it
                producer.poll(0.1)
        producer.poll(0)
    assert producer.flush(60) == 0, "confluent-kafka did not deliver every message"
    assert not failed, failed[:5]


class ConfluentMember:
    """A subscribed consumer that commits (offset, leader epoch, metadata) after each batch and on revoke."""

    def __init__(self, name: str, address: str, log: list[Consumed]) -> None:
        self.name = name
        self.log = log
        self.assigned: set[int] = set()
        self.processed: dict[int, tuple[int, int]] = {}  # partition -> (next offset, leader epoch)
        self.consumer = confluent_consumer(address)
        self.consumer.subscribe([TOPIC], on_assign=self._on_assign, on_revoke=self._on_revoke)

    def _on_assign(self, _consumer, partitions) -> None:
        self.assigned = {tp.partition for tp in partitions}

    def _on_revoke(self, _consumer, _partitions) -> None:
        self.commit()  # what was processed is committed before another member can take the partition
        self.assigned = set()

    def poll(self) -> None:
        for message in self.consumer.consume(500, 0.1):
            consumed = confluent_message(self.name, message)
            self.log.append(consumed)
            self.processed[consumed.partition] = (consumed.offset + 1, consumed.leader_epoch)
        self.commit()

    def commit(self) -> None:
        offsets = [TopicPartition(TOPIC, p, offset, metadata=f"{self.name} processed p{p}", leader_epoch=epoch)
                   for p, (offset, epoch) in self.processed.items()]
        self.processed.clear()
        if offsets:
            self.consumer.commit(offsets=offsets, asynchronous=False)


def confluent_committed(address: str) -> dict[int, tuple[int, int | None, str | None]]:
    """(offset, leader epoch, metadata) per partition as confluent-kafka's `committed()` reads them."""
    consumer = confluent_consumer(address)
    try:
        def fetch():
            try:
                return consumer.committed([TopicPartition(TOPIC, p) for p in range(PARTITIONS)], timeout=10)
            except KafkaException:  # the coordinator may still be loading `__consumer_offsets`
                return None
        answer = wait_until("confluent-kafka to read the committed offsets", fetch)
        return {tp.partition: (tp.offset, tp.leader_epoch, tp.metadata) for tp in answer}
    finally:
        consumer.close()


def test_confluent_kafka(tmp_path):
    with compat_cluster(tmp_path) as (cluster, address):
        confluent_produce(address, range(COUNT))

        # Phase 1: one member reads everything through its subscription, then commits by hand.
        first: list[Consumed] = []
        consumer = confluent_consumer(address)
        consumer.subscribe([TOPIC])

        def read() -> None:
            for message in consumer.consume(1000, 0.5):
                first.append(confluent_message("confluent", message))

        settle(f"confluent-kafka to consume {COUNT} messages", lambda: len(first) >= COUNT, read)
        ends = assert_first_phase("confluent", first)
        epochs = {c.partition: c.leader_epoch for c in first}  # of each partition's last message
        assert all(e >= 0 for e in epochs.values()), f"confluent-kafka should report leader epochs: {epochs}"
        commits = {p: (ends[p], epochs[p], f"confluent checkpoint p{p} ✓") for p in range(PARTITIONS)}
        consumer.commit(offsets=[TopicPartition(TOPIC, p, o, metadata=m, leader_epoch=e)
                                 for p, (o, e, m) in commits.items()], asynchronous=False)
        assert confluent_committed(address) == commits, "read back before the restart"
        consumer.close()

        restart_broker(cluster, address, signal.SIGKILL)
        assert confluent_committed(address) == commits, "the committed offsets changed across kill -9"

        # Phase 2: member A resumes from the commits (validating their epochs); B joins midway.
        second: list[Consumed] = []
        a = ConfluentMember("A", address, second)
        try:
            settle("member A to get every partition", lambda: a.assigned == set(range(PARTITIONS)), a.poll)
            confluent_produce(address, range(COUNT, COUNT + MORE // 2))
            settle("member A to process messages", lambda: len(second) >= MORE // 4, a.poll)
            b = ConfluentMember("B", address, second)
            try:
                def both() -> None:
                    a.poll()
                    b.poll()

                wait_for_split(a, b, both)
                confluent_produce(address, range(COUNT + MORE // 2, COUNT + MORE))
                settle(f"A and B to process all {MORE} messages",
                       lambda: len({(c.partition, c.offset) for c in second}) >= MORE, both)
                assert {c.member for c in second if number(c.message) >= COUNT + MORE // 2} == {"A", "B"}, \
                    "messages produced after B joined should flow to both members"
            finally:
                b.consumer.close()
        finally:
            a.consumer.close()
        final = high_watermarks(address)
        assert_exactly_once("confluent", second, ends, final)
        assert confluent_committed(address) == last_commits(second), "the members' last commits"
        assert {p: o for p, (o, _, _) in last_commits(second).items()} == final


# --- kafka-python -----------------------------------------------------------------------------


def kafka_python_consumer(address: str) -> KafkaConsumer:
    """metadata_max_age_ms 5 s: kafka-python's group leader assigns from its own cluster metadata, and a
    leader whose metadata did not hold the topic yet when it joined (a client made the moment the
    broker came back) assigns nothing ('No partition metadata for topic') and looks again only at the
    next refresh, 5 minutes by default; the Java client asks again at once for a missing topic."""
    return KafkaConsumer(bootstrap_servers=address, group_id=GROUP, enable_auto_commit=False,
                         auto_offset_reset="earliest", session_timeout_ms=GROUP_TIMINGS["session_ms"],
                         heartbeat_interval_ms=GROUP_TIMINGS["heartbeat_ms"], metadata_max_age_ms=5000)


def kafka_python_record(client: str, record) -> Consumed:
    headers = tuple(record.headers or [])
    return Consumed(client, record.partition, record.offset, Message(record.key, record.value, headers),
                    record.leader_epoch)


def kafka_python_produce(address: str, numbers: range) -> None:
    producer = KafkaProducer(bootstrap_servers=address, acks="all", compression_type="gzip", linger_ms=20)
    try:
        futures = []
        for n in numbers:
            m = expected("kafka-python", n)
            futures.append(producer.send(TOPIC, m.value, m.key, headers=list(m.headers)))
        producer.flush(60)
        failed = [f.exception for f in futures if not f.succeeded()]
        assert not failed, f"kafka-python failed to deliver {len(failed)} messages: {failed[:3]}"
    finally:
        producer.close()


def kafka_python_committed(address: str) -> dict[int, tuple[int, int, str]]:
    """(offset, leader epoch, metadata) per partition as kafka-python's `committed()` reads them."""
    consumer = kafka_python_consumer(address)
    try:
        def fetch():
            answer = {p: consumer.committed(KafkaTopicPartition(TOPIC, p), metadata=True, timeout_ms=10_000)
                      for p in range(PARTITIONS)}
            return {p: (c.offset, c.leader_epoch, c.metadata) for p, c in answer.items() if c is not None}
        return wait_until("kafka-python to read the committed offsets", fetch)
    finally:
        consumer.close()


class KafkaPythonMember(ConsumerRebalanceListener):
    """A subscribed consumer polling in its own thread, committing after each batch and on revoke.

    Its own thread, so that it is (nearly) always inside `poll()` when its join completes: see the
    module's note on kafka-python's dropped join rounds.
    """

    def __init__(self, name: str, address: str, log: list[Consumed]) -> None:
        self.name = name
        self.log = log
        self.assigned: set[int] = set()
        self.processed: dict[int, tuple[int, int]] = {}
        self.failure: BaseException | None = None
        self._stop = threading.Event()
        self.consumer = kafka_python_consumer(address)
        # kafka-python joins as soon as it subscribes, without waiting for the metadata that subscribe
        # asks for (it waits only for pattern subscriptions); a leader whose metadata does not hold the
        # topic yet assigns nothing ('No partition metadata for topic') and did not always join again
        # within 60 s. So the member first sees the topic's partitions, as a Java consumer would before
        # its first assignment; if the broker never names them, the test fails here, saying so.
        wait_until(f"kafka-python member {name}'s metadata to name {TOPIC}'s {PARTITIONS} partitions",
                   lambda: self.consumer.partitions_for_topic(TOPIC) == set(range(PARTITIONS)), 60)
        self.consumer.subscribe([TOPIC], listener=self)
        self._thread = threading.Thread(target=self._run, name=f"kafka-python member {name}", daemon=True)
        self._thread.start()

    def on_partitions_assigned(self, assigned) -> None:
        self.assigned = {tp.partition for tp in assigned}

    def on_partitions_revoked(self, revoked) -> None:
        self.commit()
        self.assigned = set()

    def _run(self) -> None:
        try:
            while not self._stop.is_set():
                for records in self.consumer.poll(timeout_ms=100, max_records=500).values():
                    for record in records:
                        self.log.append(kafka_python_record(self.name, record))
                        self.processed[record.partition] = (record.offset + 1, record.leader_epoch)
                self.commit()
        except BaseException as error:  # noqa: BLE001 - handed to the test thread, which fails with it
            self.failure = error

    def commit(self) -> None:
        offsets = {KafkaTopicPartition(TOPIC, p): OffsetAndMetadata(offset, f"{self.name} processed p{p}", epoch)
                   for p, (offset, epoch) in self.processed.items()}
        self.processed.clear()
        if offsets:
            self.consumer.commit(offsets)

    def check(self) -> None:
        """Raise what went wrong in the member's thread, in the test's thread."""
        if self.failure is not None:
            raise AssertionError(f"kafka-python member {self.name} failed") from self.failure

    def close(self) -> None:
        self._stop.set()
        self._thread.join(30)
        self.consumer.close()
        self.check()


def test_kafka_python(tmp_path):
    with compat_cluster(tmp_path) as (cluster, address):
        kafka_python_produce(address, range(COUNT))

        first: list[Consumed] = []
        consumer = kafka_python_consumer(address)
        consumer.subscribe([TOPIC])

        def read() -> None:
            for records in consumer.poll(timeout_ms=500).values():
                for record in records:
                    first.append(kafka_python_record("kafka-python", record))

        settle(f"kafka-python to consume {COUNT} messages", lambda: len(first) >= COUNT, read)
        ends = assert_first_phase("kafka-python", first)
        epochs = {c.partition: c.leader_epoch for c in first}  # of each partition's last record
        assert all(e >= 0 for e in epochs.values()), f"kafka-python should report leader epochs: {epochs}"
        commits = {p: (ends[p], epochs[p], f"kafka-python checkpoint p{p} ✓") for p in range(PARTITIONS)}
        consumer.commit({KafkaTopicPartition(TOPIC, p): OffsetAndMetadata(o, m, e) for p, (o, e, m) in commits.items()})
        assert kafka_python_committed(address) == commits, "read back before the restart"
        consumer.close()

        restart_broker(cluster, address, signal.SIGTERM)
        assert kafka_python_committed(address) == commits, "the committed offsets changed across a restart"

        second: list[Consumed] = []
        a = KafkaPythonMember("A", address, second)
        try:
            settle("member A to get every partition", lambda: a.assigned == set(range(PARTITIONS)), a.check)
            kafka_python_produce(address, range(COUNT, COUNT + MORE // 2))
            settle("member A to process messages", lambda: len(second) >= MORE // 4, a.check)
            b = KafkaPythonMember("B", address, second)
            try:
                def check() -> None:
                    a.check()
                    b.check()

                wait_for_split(a, b, check)
                kafka_python_produce(address, range(COUNT + MORE // 2, COUNT + MORE))
                settle(f"A and B to process all {MORE} messages",
                       lambda: len({(c.partition, c.offset) for c in second}) >= MORE, check)
                assert {c.member for c in second if number(c.message) >= COUNT + MORE // 2} == {"A", "B"}, \
                    "messages produced after B joined should flow to both members"
            finally:
                b.close()
        finally:
            a.close()
        final = high_watermarks(address)
        assert_exactly_once("kafka-python", second, ends, final)
        assert kafka_python_committed(address) == last_commits(second), "the members' last commits"
        assert {p: o for p, (o, _, _) in last_commits(second).items()} == final


# --- kcat -------------------------------------------------------------------------------------

KCAT_FORMAT = "%p\\t%o\\t%k\\t%s\\t%h\\n"  # kcat expands the escapes; %h is the headers as n=v CSV


def kcat_produce(kcat: str, address: str, numbers: range) -> None:
    """Messages as "key<TAB>value" lines on kcat's stdin; `-H` puts the same headers on each."""
    lines = "".join(f"{m.key.decode()}\t{m.value.decode()}\n" for m in (expected("kcat", n) for n in numbers))
    done = subprocess.run([kcat, "-P", "-b", address, "-t", TOPIC, "-K", "\\t", "-z", "snappy",
                           "-H", "client=kcat", "-H", "suite=compat", "-X", "acks=all", "-X", "linger.ms=20"],
                          input=lines, text=True, capture_output=True, timeout=120)
    assert done.returncode == 0, f"kcat -P failed ({done.returncode}): {done.stderr}"


def kcat_line(member: str, line: str) -> Consumed:
    partition, offset, key, value, headers = line.rstrip("\n").split("\t")
    pairs = tuple((name, content.encode()) for name, _, content in
                  (header.partition("=") for header in headers.split(",") if header))
    return Consumed(member, int(partition), int(offset), Message(key.encode(), value.encode(), pairs))


class KcatMember:
    """A `kcat -G` balanced consumer: its messages from stdout, its assignment from its stderr notes.

    kcat auto-commits (librdkafka's `enable.auto.commit`, offsets stored as messages are handed
    over), including when its partitions are revoked and when it exits.
    """

    ASSIGNED = re.compile(r"rebalanced.*assigned: (.*)")

    def __init__(self, kcat: str, name: str, address: str, log: list[Consumed], *extra: str) -> None:
        self.name = name
        self.log = log
        self.assigned: set[int] = set()
        self.notes: list[str] = []
        self.garbled: list[str] = []  # stdout lines that are not one formatted message
        self.process = subprocess.Popen(
            [kcat, "-b", address, "-G", GROUP, "-f", KCAT_FORMAT, "-u", "-X", "auto.offset.reset=earliest",
             "-X", f"session.timeout.ms={GROUP_TIMINGS['session_ms']}",
             "-X", f"heartbeat.interval.ms={GROUP_TIMINGS['heartbeat_ms']}", "-X", "auto.commit.interval.ms=1000",
             *extra, TOPIC],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        self._readers = [threading.Thread(target=self._read_messages, daemon=True),
                         threading.Thread(target=self._read_notes, daemon=True)]
        for reader in self._readers:
            reader.start()

    def _read_messages(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            try:
                self.log.append(kcat_line(self.name, line))
            except ValueError:
                self.garbled.append(line)

    def _read_notes(self) -> None:
        assert self.process.stderr is not None
        for line in self.process.stderr:
            self.notes.append(line)
            if match := self.ASSIGNED.search(line):
                self.assigned = {int(p) for p in re.findall(r"\[(\d+)\]", match.group(1))}
            elif "rebalanced" in line and "revoked" in line:
                self.assigned = set()

    def check(self) -> None:
        assert not self.garbled, f"kcat {self.name} printed lines that are not messages: {self.garbled[:3]}"
        assert self.process.poll() is None, f"kcat {self.name} exited {self.process.returncode}: {self.notes}"

    def wait(self, timeout: float = 60) -> None:
        """Wait for kcat to exit by itself (`-e`) or after SIGTERM, which closes it and commits."""
        try:
            code = self.process.wait(timeout)
        except subprocess.TimeoutExpired:
            self.process.kill()
            raise AssertionError(f"kcat {self.name} did not exit: {self.notes}") from None
        for reader in self._readers:
            reader.join(10)
        assert code == 0, f"kcat {self.name} exited {code}: {self.notes}"
        assert not self.garbled, f"kcat {self.name} printed lines that are not messages: {self.garbled[:3]}"

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
        self.wait()


def test_kcat(tmp_path, kcat):
    with compat_cluster(tmp_path) as (cluster, address):
        kcat_produce(kcat, address, range(COUNT))

        first: list[Consumed] = []
        reader = KcatMember(kcat, "kcat", address, first, "-e")  # exits when every partition is at its end
        reader.wait()
        ends = assert_first_phase("kcat", first)
        commits = {p: (ends[p], -1, "") for p in range(PARTITIONS)}  # kcat commits no epoch nor metadata
        assert kafka_python_committed(address) == commits, "kcat's commit read back before the restart"

        restart_broker(cluster, address, signal.SIGKILL)
        assert kafka_python_committed(address) == commits, "kcat's commit changed across kill -9"

        second: list[Consumed] = []
        a = KcatMember(kcat, "A", address, second)
        try:
            settle("member A to get every partition", lambda: a.assigned == set(range(PARTITIONS)), a.check)
            kcat_produce(kcat, address, range(COUNT, COUNT + MORE // 2))
            settle("member A to process messages", lambda: len(second) >= MORE // 4, a.check)
            b = KcatMember(kcat, "B", address, second)
            try:
                def check() -> None:
                    a.check()
                    b.check()

                wait_for_split(a, b, check)
                kcat_produce(kcat, address, range(COUNT + MORE // 2, COUNT + MORE))
                settle(f"A and B to process all {MORE} messages",
                       lambda: len({(c.partition, c.offset) for c in second}) >= MORE, check)
                assert {c.member for c in second if number(c.message) >= COUNT + MORE // 2} == {"A", "B"}, \
                    "messages produced after B joined should flow to both members"
            finally:
                b.stop()
        finally:
            a.stop()
        final = high_watermarks(address)
        assert_exactly_once("kcat", second, ends, final)
        assert {p: o for p, (o, _, _) in kafka_python_committed(address).items()} == final, \
            "kcat's last commits should be the high watermarks"
