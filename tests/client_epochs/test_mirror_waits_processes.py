"""`client-epochs-mirror` whose group has no coordinator: it says so, and gives up with that reason.

The source keeps `__consumer_offsets` with replication factor 1 (local-cluster's dev default), as
in the demo that once hung for eight minutes; the test kills the only replica of the partition the
replicator's group hashes to (Kafka's abs(hashCode(group)) % offsets.topic.num.partitions).
"""

from __future__ import annotations

import re
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from confluent_kafka.admin import AdminClient, NewTopic

from client_epochs.model import TopicPartition
from client_epochs.offset_fetch import OffsetFetcher
from quorum.broker.groups.config import partition_for
from quorum.launcher import LocalCluster
from tests.test_controller_processes import create, metadata, wait_until

pytestmark = pytest.mark.timeout(180)

ROOT = Path(__file__).resolve().parents[2]
GROUP = "client-epochs-mirror"
OFFSETS_PARTITIONS = 2
SOURCE_SETTINGS = {"offsets.topic.num.partitions": str(OFFSETS_PARTITIONS), "broker.session.timeout.ms": "3000",
                   "broker.heartbeat.interval.ms": "500"}
GIVE_UP_S = 6


def offsets_leader(address: str, partition: int) -> int | None:
    """The broker leading `__consumer_offsets` partition `partition`, None while it has none."""
    _, topics = metadata(address)
    offsets = topics.get("__consumer_offsets")
    leader = offsets.partitions[partition].leader if offsets is not None else -1
    return leader if leader >= 0 else None


def test_the_status_line_names_the_missing_coordinator_and_the_replicator_gives_up(tmp_path):
    source = LocalCluster(tmp_path / "source", controllers=1, brokers=2, settings=SOURCE_SETTINGS)
    target = LocalCluster(tmp_path / "target", controllers=1, brokers=1)
    try:
        for cluster in (source, target):
            cluster.format_storage()
            cluster.start()
        addresses = {b: source.specs[b].address for b in (101, 102)}
        create(AdminClient({"bootstrap.servers": ",".join(addresses.values()), "log_level": 0}),
               NewTopic("orders", 2, 2))
        fetcher = OffsetFetcher(addresses[101])  # FindCoordinator creates __consumer_offsets
        try:
            fetcher.fetch("another-group", [TopicPartition("orders", 0)], timeout=60)
        finally:
            fetcher.close()
        partition = partition_for(GROUP, OFFSETS_PARTITIONS)
        victim = wait_until(f"a leader for __consumer_offsets-{partition}",
                            lambda: offsets_leader(addresses[101], partition))
        source.kill(victim, signal.SIGKILL)
        survivor = next(a for b, a in addresses.items() if b != victim)
        wait_until(f"broker {victim} fenced", lambda: victim not in metadata(survivor)[0])

        command = [sys.executable, "-m", "client_epochs.mirror.cli", "--source-bootstrap", survivor,
                   "--target-bootstrap", target.bootstrap_servers, "--topics", "orders", "--group", GROUP,
                   "--status-interval-s", "1", "--give-up-after-s", str(GIVE_UP_S),
                   "--consumer-property", "log_level=0", "--producer-property", "log_level=0"]
        run = subprocess.run(command, capture_output=True, text=True, timeout=120, cwd=ROOT)
    finally:
        for cluster in (source, target):
            cluster.stop()
    reason = f'group coordinator for "{GROUP}" unavailable (COORDINATOR_NOT_AVAILABLE)'
    waiting = [line for line in run.stdout.splitlines() if f"waiting: {reason} for" in line]
    assert waiting, run.stdout + run.stderr
    assert re.search(r"partitions=0 waiting: .* for \d+ s$", waiting[-1]), waiting[-1]
    assert run.returncode == 1, run.stdout + run.stderr
    gave_up = re.search(r"client-epochs-mirror: error: gave up after waiting (\d+) s for (.*)$", run.stderr, re.M)
    assert gave_up is not None, run.stderr
    assert int(gave_up[1]) >= GIVE_UP_S and gave_up[2] == reason, run.stderr
