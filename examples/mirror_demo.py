"""Part 5 of the demo: KIP-232's epoch-aware clients, through the replicator.

`client-epochs-mirror` copies the `orders` topic of the demo's cluster (whose leaders just moved
after a kill -9) to a second local cluster, then stops when idle; the demo counts both sides and
shows what the replicator committed: the user's metadata as a wrapped consumer hands it back, and
the raw string with the KIP-232 internal metadata in it, as any other client reads it.
"""

from __future__ import annotations

import subprocess
import sys
import tempfile
import time

from quorum.launcher import LocalCluster

GROUP = "client-epochs-mirror"
TARGET_SETTINGS = {"broker.session.timeout.ms": "3000", "broker.heartbeat.interval.ms": "500"}


def wait_for_broker(address: str, timeout_s: float = 30.0) -> None:
    """Until the broker lists itself in its Metadata answer (registered and unfenced)."""
    from confluent_kafka.admin import AdminClient

    admin = AdminClient({"bootstrap.servers": address, "log_level": 0})
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            if admin.list_topics(timeout=2).brokers:
                return
        except Exception:  # not listening yet
            pass
        time.sleep(0.2)
    raise TimeoutError(f"the target broker at {address} did not come up in {timeout_s:.0f} s")


def mirror(source: str, target: str, topic: str) -> int:
    """Run the replicator as a user would, until it has been idle 3 s; its output is shown as it comes."""
    command = [sys.executable, "-m", "client_epochs.mirror_cli", "--source-bootstrap", source,
               "--target-bootstrap", target, "--topics", topic, "--status-interval-s", "2",
               "--stop-after-idle-s", "3"]
    print("$ client-epochs-mirror " + " ".join(command[3:]), flush=True)
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    assert process.stdout is not None
    for line in process.stdout:
        print(f"    {line}", end="", flush=True)
    return process.wait(timeout=120)


def count(address: str, topic: str) -> int:
    """Records below each partition's high watermark."""
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer({"bootstrap.servers": address, "group.id": "demo-count", "log_level": 0})
    try:
        partitions = consumer.list_topics(topic, timeout=10).topics[topic].partitions
        return sum(consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1] -
                   consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[0] for p in partitions)
    finally:
        consumer.close()


def show_commits(source: str, topic: str) -> None:
    """The replicator's commits as the wrapped consumer reads them, and as stored."""
    from confluent_kafka import TopicPartition
    from kafka import KafkaConsumer
    from kafka import TopicPartition as KafkaTopicPartition

    from client_epochs.confluent import Consumer

    wrapped = Consumer({"bootstrap.servers": source, "group.id": GROUP, "log_level": 0})
    try:
        (first,) = wrapped.committed([TopicPartition(topic, 0)], timeout=10)
    finally:
        wrapped.close()
    raw = KafkaConsumer(bootstrap_servers=source, group_id=GROUP, enable_auto_commit=False)
    try:
        stored = raw.committed(KafkaTopicPartition(topic, 0), metadata=True)
    finally:
        raw.close()
    print(f"... {GROUP} committed {topic}-0 at offset {first.offset}; the wrapped consumer's committed() gives "
          f"the user's metadata ({first.metadata!r}) and leader epoch {first.leader_epoch}")
    print(f"... stored metadata string, as any other client reads it: {stored.metadata!r}")


def mirror_demo(source: str, topic: str = "orders") -> None:
    print(f"\n== Part 5: KIP-232 epoch-aware clients: client-epochs-mirror copies {topic} to a second cluster")
    with tempfile.TemporaryDirectory(prefix="quorum-demo-target-") as directory:
        target = LocalCluster(directory, controllers=1, brokers=1, settings=TARGET_SETTINGS)
        target.format_storage()
        target.start()
        try:
            address = next(s.address for s in target.specs.values() if s.role == "broker")
            wait_for_broker(address)
            print(f"... target cluster: 1 controller, broker at {address}")
            code = mirror(source, address, topic)
            copied, there = count(address, topic), count(source, topic)
            print(f"... replicator exited {code}; the target holds {copied} of the source's {there} {topic} records")
            show_commits(source, topic)
        finally:
            target.stop()
