"""KIP-630 with real processes on 127.0.0.1: a voter stopped while the others commit, snapshot
and move their log start offset past its log end rejoins by FetchSnapshot and catches up; an
observer started afterwards does the same. Afterwards every replica, loaded from its latest
snapshot plus its log, holds exactly the state of replaying every committed record in order.
The snapshots are KIP-631's: each in a turn the active controller gave, which resigned for its own.
"""

from __future__ import annotations

import re
import signal
import time

import pytest

from quorum.admin import METADATA_WRITES_FOR_TESTS
from quorum.image.image_state import ImageState
from quorum.image.replay import MetadataReplayer
from quorum.image.snapshot_policy import SnapshotPolicy
from quorum.launcher import LocalCluster
from quorum.log.log import Log
from quorum.log.snapshot import SnapshotDirectory
from quorum.log.start_offset import START_OFFSET_NAME, read_start_offset
from quorum.server.config import node_config
from quorum.wire.metadata_records import ConfigRecord, encode_metadata_record
from tests.support.prometheus import samples
from tests.test_controller_processes import metadata
from tests.test_quorum_processes import commit, wait_for_leader

pytestmark = pytest.mark.timeout(300)

SETTINGS = {
    **METADATA_WRITES_FOR_TESTS,  # the test commits raw records through the quorum (QuorumWriter)
    "metadata.log.max.record.bytes.between.snapshots": "2000",
    "metadata.snapshot.min.changed_records.ratio": "0.5",
    "metadata.log.segment.bytes": "4096",
    "quorum.metrics.port": "0",
}
BROKER = 101


def config_value(n: int) -> bytes:
    """A ConfigRecord over ten keys: later ones overwrite earlier ones, so snapshots stay small."""
    return encode_metadata_record(ConfigRecord(version=0, resource_type=2, resource_name="orders",
                                               name=f"key-{n % 10}", value=str(n)))


def metadata_dir(cluster: LocalCluster, node_id: int):
    return node_config(cluster.properties(cluster.specs[node_id])).metadata_log_dir


def commit_many(cluster: LocalCluster, values: list[bytes], chunk: int = 20) -> None:
    for start in range(0, len(values), chunk):
        commit(cluster, values[start:start + chunk])


def wait_until(what: str, condition, timeout_s: float = 60.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.2)


def wait_for_everyone(cluster: LocalCluster, replicas: int) -> None:
    def caught_up() -> bool:
        status = wait_for_leader(cluster)
        return len(status.replicas) == replicas and all(status.lag(r) == 0 for r in status.replicas)

    wait_until(f"{replicas} replicas to catch up", caught_up)


def scrape(cluster: LocalCluster, node_id: int) -> dict[str, float]:
    """The node's Prometheus metrics, from the endpoint its log names."""
    found = re.findall(r"metrics on (http://\S+)", cluster.specs[node_id].log_path.read_text())
    assert found, f"node {node_id} serves no metrics"
    return samples(found[-1])


def listed_brokers(cluster: LocalCluster) -> set[int]:
    """The brokers the broker lists in its Metadata answer (none while it does not answer)."""
    try:
        return metadata(cluster.specs[BROKER].address)[0]
    except OSError:
        return set()


def replayed_state(cluster: LocalCluster, node_id: int) -> tuple[ImageState, int]:
    """A stopped node's state as it boots: its latest snapshot, then its log; and its log start."""
    directory = metadata_dir(cluster, node_id)
    with Log(directory) as log:
        state = ImageState()
        replayer = MetadataReplayer(directory, log, state, SnapshotPolicy(), snapshots=SnapshotDirectory(directory))
        replayer.boot()
        replayer.catch_up(log.end_offset)  # everything is committed: the cluster caught up before stopping
        return state, log.start_offset


def test_stopped_voter_and_late_observer_rejoin_by_fetch_snapshot(tmp_path):
    cluster = LocalCluster(tmp_path, controllers=3, brokers=1, settings=SETTINGS)
    cluster.format_storage()
    cluster.write_configs()
    for node_id in (1, 2, 3):
        cluster.start_node(node_id)
    committed: list[bytes] = []
    try:
        leader = wait_for_leader(cluster).leader_id
        first = [config_value(n) for n in range(60)]
        commit_many(cluster, first)
        committed += first
        victim = next(v for v in (1, 2, 3) if v != leader)
        wait_for_everyone(cluster, 3)
        cluster.kill(victim, signal.SIGKILL)
        with Log(metadata_dir(cluster, victim)) as log:
            victim_end = log.end_offset

        more = [config_value(n) for n in range(60, 600)]
        commit_many(cluster, more)
        committed += more

        def leader_start() -> int:
            return read_start_offset(metadata_dir(cluster, wait_for_leader(cluster).leader_id) / START_OFFSET_NAME) or 0

        wait_until("the leader's log start offset to pass the stopped voter's log end",
                   lambda: leader_start() > victim_end)

        cluster.start_node(victim)  # behind the leader's log start: it must fetch a snapshot
        cluster.start_node(BROKER)  # a new observer, with an empty log: the same
        # KIP-631: replicas snapshot one at a time, in turns the active controller gives, and a
        # follower's log start follows the leader's: more rounds of commits until every log moved.
        rounds = iter(range(600, 2000, 40))

        def every_log_start_moved() -> bool:
            if all((read_start_offset(metadata_dir(cluster, n) / START_OFFSET_NAME) or 0) > 0
                   for n in (1, 2, 3, BROKER)):
                return True
            first = next(rounds)
            tail = [config_value(n) for n in range(first, first + 40)]
            commit_many(cluster, tail)
            committed.extend(tail)
            return False

        wait_until("every replica to move its log start offset", every_log_start_moved, timeout_s=120)
        wait_for_everyone(cluster, 4)
        # the broker registers once its replay caught up; a loaded machine may get here first
        wait_until(f"broker {BROKER}'s registration to be committed (it lists itself in Metadata)",
                   lambda: BROKER in listed_brokers(cluster))
        for node_id in (1, 2, 3, BROKER):
            metrics = scrape(cluster, node_id)
            assert metrics["kafka_controller_KafkaController_SnapshotSizeBytes"] > 0
            assert "kafka_controller_KafkaController_SnapshotLag" in metrics
        assert scrape(cluster, leader)["kafka_controller_KafkaController_GenSnapshotLatencyMs_count"] > 0
        for node_id in (victim, BROKER):
            assert scrape(cluster, node_id)["kafka_controller_KafkaController_LoadSnapshotLatencyMs_count"] >= 1
    finally:
        cluster.stop()

    expected = ImageState()
    for offset, value in enumerate(committed):
        expected.apply(offset, value)
    states = {}
    for node_id in (1, 2, 3, BROKER):
        state, start = replayed_state(cluster, node_id)
        states[node_id] = state.digest()
        # The test's config changes, and the broker's registration the controller committed besides.
        assert state.image.configs == expected.image.configs, f"node {node_id} replays to other configs"
        assert set(state.image.registrations) == {BROKER}
        assert start > 0, f"node {node_id} never moved its log start offset"
        assert SnapshotDirectory(metadata_dir(cluster, node_id)).earliest_snapshot().offset == start
    assert len(set(states.values())) == 1, f"the replicas replay to different images: {states}"
    for node_id in (victim, BROKER):
        text = cluster.specs[node_id].log_path.read_text()
        assert "snapshot fetched" in text, f"node {node_id} did not rejoin by FetchSnapshot:\n{text[-3000:]}"
    logs = "".join(cluster.specs[n].log_path.read_text() for n in (1, 2, 3))
    assert "the active controller resigns to write its snapshot" in logs, "the leader snapshotted in place"
    assert "may write a snapshot (voters' lane" in logs, "no voter was given its turn"
