"""Real processes on 127.0.0.1: 3 voters and 1 observer elect, commit, survive kill -9 of the leader.

Afterwards every committed record is in every replica's log, in the same order, and
`quorum describe` (the command a user runs) shows the new leader.
"""

from __future__ import annotations

import signal
import subprocess
import sys
import time

import pytest

from quorum.admin import METADATA_WRITES_FOR_TESTS, QuorumStatus, commit_values
from quorum.admin import wait_for_leader as admin_wait_for_leader
from quorum.launcher import LocalCluster
from quorum.log.log import Log
from quorum.log.quorum_state import QUORUM_STATE_NAME, read_quorum_state
from quorum.server.config import node_config

pytestmark = pytest.mark.timeout(240)


def wait_for_leader(cluster, not_node: int | None = None, min_high_watermark: int = 0) -> QuorumStatus:
    def addresses() -> list[str]:
        return [cluster.specs[n].address for n in cluster.alive() if cluster.specs[n].role == "controller"]

    return admin_wait_for_leader(addresses, not_node, 60.0, min_high_watermark)


def commit(cluster: LocalCluster, values: list[bytes]) -> int:
    return commit_values(cluster.bootstrap_controllers.split(","), values)


def committed_values(cluster: LocalCluster, node_id: int, upto: int) -> list[bytes]:
    """Data record values below `upto` in a stopped node's log (control records left out)."""
    config = node_config(cluster.properties(cluster.specs[node_id]))
    with Log(config.metadata_log_dir) as log:
        return [r.value for batch in log.iter_batches(0, upto) if not batch.is_control for r in batch]


def describe_cli(cluster: LocalCluster, flag: str) -> str:
    spec = next(s for s in cluster.specs.values() if s.role == "controller" and s.node_id in cluster.alive())
    result = subprocess.run([sys.executable, "-m", "quorum.cli", "describe", "--bootstrap-controller", spec.address,
                             flag], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    return result.stdout


def test_three_voters_and_an_observer_survive_kill_of_the_leader(tmp_path):
    cluster = LocalCluster(tmp_path, controllers=3, brokers=1, settings=METADATA_WRITES_FOR_TESTS)
    cluster.format_storage()
    cluster.start()
    try:
        first = wait_for_leader(cluster)
        before = [f"before-{i}".encode() for i in range(50)]
        for chunk in range(0, len(before), 10):
            commit(cluster, before[chunk:chunk + 10])

        cluster.kill(first.leader_id, signal.SIGKILL)
        second = wait_for_leader(cluster, not_node=first.leader_id)
        assert second.leader_epoch > first.leader_epoch

        after = [f"after-{i}".encode() for i in range(30)]
        for chunk in range(0, len(after), 10):
            commit(cluster, after[chunk:chunk + 10])

        cluster.start_node(first.leader_id)  # the old leader rejoins as a follower
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            status = wait_for_leader(cluster)
            if all(status.lag(r) == 0 for r in status.replicas) and len(status.replicas) == 4:
                break
            time.sleep(0.3)
        else:
            raise AssertionError(f"replicas did not catch up: {status}")

        text = describe_cli(cluster, "--status")
        assert f"LeaderId:               {status.leader_id}" in text
        assert "CurrentVoters:          [1,2,3]" in text
        assert "CurrentObservers:       [101]" in text
        assert "ClusterId:" in text and status.cluster_id and status.cluster_id in text
        replication = describe_cli(cluster, "--replication")
        assert replication.splitlines()[0].split() == ["NodeId", "LogEndOffset", "Lag", "LastFetchTimestamp",
                                                       "LastCaughtUpTimestamp", "Status"]
        assert {line.split()[-1] for line in replication.splitlines()[1:]} == {"Leader", "Follower", "Observer"}
        high_watermark = status.high_watermark

        # SIGTERM: the leader resigns and, as Kafka's graceful shutdown, serves on until it follows
        # its successor (it grants the successor's vote), so it stops knowing the new leader.
        cluster.kill(status.leader_id, signal.SIGTERM)
        stopped = read_quorum_state(node_config(cluster.properties(cluster.specs[status.leader_id])).metadata_log_dir
                                    / QUORUM_STATE_NAME)
        assert stopped is not None and stopped.leader_epoch > status.leader_epoch
        assert stopped.leader_id not in (-1, status.leader_id)
        assert wait_for_leader(cluster, not_node=status.leader_id).leader_id == stopped.leader_id
    finally:
        cluster.stop()

    expected = before + after
    for node_id in cluster.specs:
        # The broker's registration and heartbeat-driven records are committed too: compare the test's own.
        ours = [v for v in committed_values(cluster, node_id, high_watermark) if v.startswith((b"before-", b"after-"))]
        assert ours == expected, f"node {node_id} differs"


def run_local_cluster(directory) -> tuple[subprocess.Popen[str], list[str]]:
    process = subprocess.Popen([sys.executable, "-m", "quorum.cli", "local-cluster", "--controllers", "3",
                                "--dir", str(directory), "--set", "quorum.election.timeout.ms=500"],
                               stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    lines = []
    assert process.stdout is not None
    for line in process.stdout:
        lines.append(line)
        if line.startswith("press Ctrl-C"):
            return process, lines
    raise AssertionError("local-cluster did not start:\n" + "".join(lines))


def test_local_cluster_command_starts_describes_and_stops(tmp_path):
    process, lines = run_local_cluster(tmp_path)
    try:
        nodes = [line.split() for line in lines if line.startswith("controller")]
        assert [(n[0], n[2]) for n in nodes] == [("controller", "1"), ("controller", "2"), ("controller", "3")]
        bootstrap = next(line for line in lines if line.startswith("bootstrap controllers:")).split()[-1]
        assert bootstrap == ",".join(n[3] for n in nodes)
        cluster = LocalCluster(tmp_path, controllers=3)
        first = wait_for_leader(_Alive(cluster))
        assert "election.timeout.ms=500" in (tmp_path / "node-1" / "server.properties").read_text()
    finally:
        process.send_signal(signal.SIGTERM)
        out, _ = process.communicate(timeout=60)
    assert process.returncode == 0 and "all nodes stopped" in out

    # Started again on the same directory: same ports, same cluster id, the log kept.
    process, lines = run_local_cluster(tmp_path)
    try:
        again = wait_for_leader(_Alive(LocalCluster(tmp_path, controllers=3)),
                                min_high_watermark=first.high_watermark + 1)
        assert again.cluster_id == first.cluster_id
        assert again.leader_epoch > first.leader_epoch, "a restarted quorum elects in a new epoch"
    finally:
        process.send_signal(signal.SIGTERM)
        process.communicate(timeout=60)


class _Alive:
    """A LocalCluster view for nodes started by another process: every controller counts as alive."""

    def __init__(self, cluster: LocalCluster) -> None:
        self.specs = cluster.specs

    def alive(self) -> list[int]:
        return list(self.specs)
