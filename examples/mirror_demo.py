"""Part 5 of the demo: KIP-232's epoch-aware clients, through the replicator.

`client-epochs-mirror` copies the `orders` topic of the demo's cluster (whose leaders just moved
after a kill -9) to a second local cluster, then stops when idle; the demo counts both sides and
shows what the replicator committed: the user's metadata as a wrapped consumer hands it back, and
the raw string with the KIP-232 internal metadata in it, as any other client reads it.
"""

from __future__ import annotations

import subprocess
import sys
import threading
from pathlib import Path

from examples.demo_waits import DemoFailure, scratch_directory
from quorum.launcher import LocalCluster
from quorum.readiness import ClusterNotReadyError

GROUP = "client-epochs-mirror"
TARGET_SETTINGS = {"broker.session.timeout.ms": "3000", "broker.heartbeat.interval.ms": "500"}
GIVE_UP_S = 60
"""The replicator stops with an error once it has waited this long for what it lacks (--give-up-after-s)."""
MIRROR_DEADLINE_S = 240
"""The demo stops the replicator itself past this (a replicator that neither copies nor gives up)."""


def mirror(source: str, target: str, topic: str, source_logs: list[Path]) -> None:
    """Run the replicator as a user would, until it has been idle 3 s; its output is shown as it comes.

    DemoFailure when it exits non-zero (its status lines and error, just printed, say what it waited
    for) or has not finished within MIRROR_DEADLINE_S."""
    command = [sys.executable, "-m", "client_epochs.mirror.cli", "--source-bootstrap", source,
               "--target-bootstrap", target, "--topics", topic, "--status-interval-s", "2",
               "--stop-after-idle-s", "3", "--give-up-after-s", str(GIVE_UP_S)]
    print("$ client-epochs-mirror " + " ".join(command[3:]), flush=True)
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    watchdog = threading.Timer(MIRROR_DEADLINE_S, process.kill)
    watchdog.start()
    try:
        assert process.stdout is not None
        for line in process.stdout:
            print(f"    {line}", end="", flush=True)
        code = process.wait()
    finally:
        watchdog.cancel()
    if code == -9:
        raise DemoFailure(f"client-epochs-mirror to finish copying {topic} within {MIRROR_DEADLINE_S} s (killed; "
                          f"its last status line says what it waited for)", source_logs)
    if code != 0:
        raise DemoFailure(f"client-epochs-mirror exited {code} (its error is above)", source_logs)


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


def mirror_demo(source: str, source_logs: list[Path], topic: str = "orders") -> None:
    print(f"\n== Part 5: KIP-232 epoch-aware clients: client-epochs-mirror copies {topic} to a second cluster")
    with scratch_directory("quorum-demo-target-") as directory:
        target = LocalCluster(directory, controllers=1, brokers=1, settings=TARGET_SETTINGS)
        target.format_storage()
        try:
            target.start(timeout=60)
            address = target.bootstrap_servers
            print(f"... target cluster: 1 controller, broker at {address}")
            mirror(source, address, topic, source_logs)
            copied, there = count(address, topic), count(source, topic)
            print(f"... replicator exited 0; the target holds {copied} of the source's {there} {topic} records")
            if copied != there:
                raise DemoFailure(f"all {there} {topic} records in the target, it holds {copied}",
                                  [s.log_path for s in target.specs.values()])
            show_commits(source, topic)
        except ClusterNotReadyError as exc:
            raise DemoFailure(str(exc)) from None
        finally:
            target.stop()
