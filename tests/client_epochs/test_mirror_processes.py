"""The replicator (`client-epochs-mirror`, a real subprocess) between two real clusters, under fire.

Source: 1 controller and 3 brokers, one of them answering Metadata 2 s old (KAFKA-6262), a topic
with replication factor 3 and min.insync.replicas 2. Target: 1 controller and 1 broker. While a
producer writes numbered records to the source, the leaders of the source's partitions are killed
with `kill -9` and restarted, and the replicator itself is killed with SIGKILL mid-stream and
started again. Afterwards the target holds every source record exactly once, in source order per
partition, with its key, timestamp and headers; the provenance offsets in each target partition
only ever increase (the replicator never rewound); and its output reports its figures.
"""

from __future__ import annotations

import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path

import pytest
from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from client_epochs.mirror.progress import PROVENANCE_HEADER, Provenance
from quorum.launcher import KAFKA_COMPATIBLE, LocalCluster
from tests.test_broker_processes import QUIET
from tests.test_broker_processes import SETTINGS as ONE_BROKER_SETTINGS
from tests.test_controller_processes import create, metadata, wait_until

pytestmark = pytest.mark.timeout(240)

ROOT = Path(__file__).resolve().parents[2]
BROKERS = (101, 102, 103)
STALE = 103
TOPIC = "mirrored"
PARTITIONS = 3
SOURCE_SETTINGS = {"replica.lag.time.max.ms": "3000", "broker.session.timeout.ms": "3000",
                   "broker.heartbeat.interval.ms": "500", "offsets.topic.replication.factor": "3",
                   "offsets.topic.num.partitions": "4", "group.initial.rebalance.delay.ms": "0"}
STATUS = re.compile(r"client-epochs-mirror status: replicated=(\d+) skipped_already_copied=(\d+) "
                    r"stale_metadata_refused=(\d+) resets=(\d+) rewind_refused=(\d+) lag=(\d+|\?)")


@contextmanager
def cluster(directory: Path, brokers: int, settings: dict[str, str],
            stale: dict[int, int] | None = None) -> Iterator[LocalCluster]:
    running = LocalCluster(directory, controllers=1, brokers=brokers, settings=settings, stale_brokers=stale)
    running.format_storage()
    running.write_configs()
    running.start()
    try:
        yield running
    finally:
        running.stop()


class NumberedProducer:
    """Numbered records round-robin over the source's partitions, with keys, timestamps and headers,
    acks=all, until stopped; remembers what was acknowledged."""

    def __init__(self, bootstrap: str) -> None:
        self.acked: list[bytes] = []
        self.failed: list[str] = []
        self._stop = threading.Event()
        self._producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "enable.idempotence": True,
                                   "linger.ms": 5, "message.timeout.ms": 120_000, **QUIET})
        self._thread = threading.Thread(target=self._run, name="numbered-producer", daemon=True)

    def _delivered(self, error, message) -> None:
        if error is None:
            self.acked.append(message.value())
        else:
            self.failed.append(str(error))

    def _run(self) -> None:
        n = 0
        while not self._stop.is_set():
            try:
                self._producer.produce(TOPIC, f"r-{n}".encode(), key=str(n % 7).encode(), partition=n % PARTITIONS,
                                       timestamp=1_700_000_000_000 + n, headers=[("seq", str(n).encode())],
                                       on_delivery=self._delivered)
                n += 1
            except BufferError:
                pass
            self._producer.poll(0.003)  # a few hundred records a second: the machine is shared

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> int:
        self._stop.set()
        self._thread.join(30)
        return self._producer.flush(120)


class Mirror:
    """`python -m client_epochs.mirror.cli` runs, one after the other, into one output file."""

    def __init__(self, directory: Path, source: str, target: str) -> None:
        self.stdout = directory / "mirror.out"
        self.stderr = directory / "mirror.err"
        self.args = [sys.executable, "-m", "client_epochs.mirror.cli", "--source-bootstrap", source,
                     "--target-bootstrap", target, "--topics", TOPIC, "--status-interval-s", "1",
                     "--commit-interval-s", "1", "--instance-id", "mirror-test", "-v",
                     "--consumer-property", "log_level=3", "--producer-property", "log_level=3"]
        self.process: subprocess.Popen[bytes] | None = None
        self.runs = 0

    def start(self) -> None:
        self.runs += 1
        with open(self.stdout, "ab") as out, open(self.stderr, "ab") as err:
            out.write(f"--- run {self.runs}\n".encode())
            self.process = subprocess.Popen(self.args, stdout=out, stderr=err, cwd=ROOT)

    def kill(self, sig: int) -> int:
        assert self.process is not None
        self.process.send_signal(sig)
        return self.process.wait(60)

    def wait_copying(self, replicated: int) -> None:
        """Until the current run's status line reports `replicated` copies: it resumed and is copying."""

        def copying() -> bool:
            found = STATUS.findall(self.runs_output()[-1])
            return bool(found) and int(found[-1][0]) >= replicated

        wait_until(f"replicator run {self.runs} copying {replicated} records", copying, timeout_s=60)

    def output(self) -> str:
        return self.stdout.read_text()

    def runs_output(self) -> list[str]:
        return re.split(r"^--- run \d+\n", self.output(), flags=re.M)[1:]


def ends(consumer: Consumer, partitions: int) -> list[int] | None:
    """Each partition's high watermark; None while a leader is not reachable (a broker restarting)."""
    try:
        return [consumer.get_watermark_offsets(TopicPartition(TOPIC, p), timeout=10)[1] for p in range(partitions)]
    except KafkaException:
        return None


def read_records(bootstrap: str) -> dict[int, list[tuple]]:
    """(offset, key, value, timestamp, headers) of every record of each partition, up to its high watermark."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "mirror-check", "enable.auto.commit": False,
                         **QUIET})
    try:
        high = wait_until("the high watermarks", lambda: ends(consumer, PARTITIONS))
        consumer.assign([TopicPartition(TOPIC, p, 0) for p in range(PARTITIONS)])
        records: dict[int, list[tuple]] = {p: [] for p in range(PARTITIONS)}

        def done() -> bool:
            for m in consumer.consume(1000, 1.0):
                assert m.error() is None, m.error()
                records[m.partition()].append((m.offset(), m.key(), m.value(), m.timestamp()[1], m.headers() or []))
            return all((records[p][-1][0] + 1 if records[p] else 0) >= high[p] for p in range(PARTITIONS))

        wait_until(f"{TOPIC} read to its high watermarks {high}", done)
        return records
    finally:
        consumer.close()


def leader_of(cluster: LocalCluster, partition: int) -> int:
    """The partition's leader as a current (not the stale) live broker sees it."""
    for broker in (101, 102):
        if broker in cluster.alive():
            return metadata(cluster.specs[broker].address)[1][TOPIC].partitions[partition].leader
    raise AssertionError("no current broker alive")


def full_isrs(address: str) -> bool:
    topic = metadata(address)[1].get(TOPIC)
    return topic is not None and all(len(p.isr) == 3 for p in topic.partitions.values())


@pytest.mark.parametrize("mode", ["kip232", "kafka-compatible"])
def test_the_replicator_copies_everything_exactly_once_through_leader_moves_and_its_own_kill_9(tmp_path, mode):
    """In both modes of the source's brokers (issue 33): in the Apache-Kafka-compatible one no topic
    epoch comes, and the stale broker's answers are refused by their older leader epochs alone."""
    source_settings = {**SOURCE_SETTINGS, **(KAFKA_COMPATIBLE if mode == "kafka-compatible" else {})}
    with ExitStack() as stack:
        source = stack.enter_context(cluster(tmp_path / "source", 3, source_settings, {STALE: 2000}))
        target = stack.enter_context(cluster(tmp_path / "target", 1, ONE_BROKER_SETTINGS))
        addresses = {b: source.specs[b].address for b in BROKERS}
        source_bootstrap = ",".join(addresses.values())
        target_address = target.specs[101].address
        wait_until("three unfenced source brokers", lambda: metadata(addresses[101])[0] == set(BROKERS))
        wait_until("the target broker unfenced", lambda: metadata(target_address)[0] == {101})
        # Topics through 101: the stale broker's first answers list no broker (see test_replication_chaos).
        create(AdminClient({"bootstrap.servers": addresses[101], **QUIET}),
               NewTopic(TOPIC, PARTITIONS, 3, config={"min.insync.replicas": "2"}), NewTopic("narrow", 2, 1))
        create(AdminClient({"bootstrap.servers": target_address, **QUIET}), NewTopic("narrow", 1, 1))
        wait_until("full ISRs", lambda: full_isrs(addresses[101]))
        # librdkafka leaves a subscription empty for 5 minutes when its broker does not know the topic yet.
        wait_until("the stale broker knows the topic", lambda: full_isrs(addresses[STALE]))

        # A target topic with fewer partitions than its source is refused with a clear error.
        refused = subprocess.run([sys.executable, "-m", "client_epochs.mirror.cli", "--source-bootstrap",
                                  addresses[101], "--target-bootstrap", target_address, "--topics", "narrow"],
                                 capture_output=True, text=True, cwd=ROOT, timeout=60)
        assert refused.returncode == 1, refused.stderr
        assert "target topic narrow has 1 partitions but the source has 2" in refused.stderr

        producer = NumberedProducer(source_bootstrap)
        producer.start()
        # The stale broker first: the replicator's metadata client starts with it, as a client may.
        stale_first = ",".join(addresses[b] for b in (STALE, 101, 102))
        mirror = Mirror(tmp_path, stale_first, target_address)
        mirror.start()
        try:
            checker = stack.enter_context(_closing(Consumer({"bootstrap.servers": target_address,
                                                             "group.id": "mirror-progress", **QUIET})))

            mirror.wait_copying(300)
            # Round 1: a leader killed; while it is down (the stale broker still names it), the
            # replicator is killed too and restarts against moved leaders.
            moved = next((p for p in range(PARTITIONS) if leader_of(source, p) != STALE), 0)
            victim = leader_of(source, moved)  # not the stale broker: it is to answer with the old leader
            source.kill(victim, signal.SIGKILL)
            wait_until(f"a new leader of partition {moved}", lambda: leader_of(source, moved) not in (victim, -1))
            time.sleep(1.2)  # a commit under the new leader epoch, which the stale broker does not know yet
            assert mirror.kill(signal.SIGKILL) == -signal.SIGKILL
            mirror.start()
            time.sleep(1.0)
            source.start_node(victim)
            survivor = addresses[next(b for b in (101, 102) if b != victim)]
            wait_until(f"broker {victim} back in every ISR", lambda: full_isrs(survivor), 90)
            mirror.wait_copying(200)
            # Round 2: the replicator killed mid-stream alone, then another leader moved under it.
            assert mirror.kill(signal.SIGKILL) == -signal.SIGKILL
            mirror.start()
            victim = leader_of(source, (moved + 1) % PARTITIONS)
            source.kill(victim, signal.SIGKILL)
            time.sleep(1.5)
            source.start_node(victim)
            survivor = addresses[next(b for b in (101, 102) if b != victim)]
            wait_until(f"broker {victim} back in every ISR", lambda: full_isrs(survivor), 90)
            mirror.wait_copying(200)

            assert producer.stop() == 0, "the source producer could not deliver everything"
            assert not producer.failed, producer.failed[:5]
            with _closing(Consumer({"bootstrap.servers": source_bootstrap, "group.id": "mirror-ends", **QUIET})) as c:
                source_ends = wait_until("the source's high watermarks", lambda: ends(c, PARTITIONS))
            wait_until(f"the target caught up with the source's {source_ends}",
                       lambda: all(t >= s for t, s in zip(ends(checker, PARTITIONS) or [-1] * PARTITIONS,
                                                          source_ends, strict=True)),
                       timeout_s=90)
            assert mirror.kill(signal.SIGTERM) == 0, mirror.stderr.read_text()[-3000:]
        finally:
            if mirror.process is not None and mirror.process.poll() is None:
                mirror.process.kill()
                mirror.process.wait()
        source_records = read_records(source_bootstrap)
        target_records = read_records(target_address)

    runs = mirror.runs_output()
    last_status = [STATUS.findall(run)[-1] if STATUS.findall(run) else None for run in runs]
    print(f"\nreplicator runs: {len(runs)}; last status line of each run "
          f"(replicated, skipped_already_copied, stale_metadata_refused, resets, rewind_refused, lag): {last_status}")
    print(runs[-1][runs[-1].index("client-epochs-mirror summary"):])
    print(f"source records: {sum(len(r) for r in source_records.values())}; acknowledged: {len(producer.acked)}")

    assert set(producer.acked) <= {r[2] for records in source_records.values() for r in records}
    for partition in range(PARTITIONS):
        source_side, target_side = source_records[partition], target_records[partition]
        assert [r[2] for r in target_side] == [r[2] for r in source_side], \
            f"partition {partition}: the target's values differ from the source's (duplicates or gaps)"
        origins = [Provenance.parse(dict(r[4])[PROVENANCE_HEADER]) for r in target_side]
        offsets = [origin.offset for origin in origins]
        assert all(a < b for a, b in zip(offsets, offsets[1:], strict=False)), \
            f"partition {partition}: the replicator rewound (provenance offsets go back)"
        assert offsets == [r[0] for r in source_side] and {o.tp for o in origins} <= {(TOPIC, partition)}
        for copy, original in zip(target_side, source_side, strict=True):
            kept = [(k, v) for k, v in copy[4] if not k.startswith("client_epochs.")]
            assert (copy[1], copy[3], kept) == (original[1], original[3], original[4]), \
                f"partition {partition} offset {original[0]}: key, timestamp or headers not preserved"
    # Every run printed status lines with its figures; the last one, stopped by SIGTERM, its summary.
    assert all(status is not None for status in last_status), mirror.output()[-3000:]
    summary = runs[-1][runs[-1].index("client-epochs-mirror summary (SIGTERM)"):]
    for name in ("replicated", "skipped_already_copied", "rewind_refused", "stale_metadata_refused", "resets", "lag"):
        assert name in summary, summary


@contextmanager
def _closing(consumer: Consumer) -> Iterator[Consumer]:
    try:
        yield consumer
    finally:
        consumer.close()
