"""Real processes on 127.0.0.1: 3 voters and 1 observer elect, commit, survive kill -9 of the leader.

Afterwards every committed record is in every replica's log, in the same order, and
`quorum describe` (the command a user runs) shows the new leader.
"""

from __future__ import annotations

import asyncio
import signal
import subprocess
import sys
import time

import pytest

from quorum.admin import QuorumStatus, QuorumWriter, describe_quorum
from quorum.launcher import LocalCluster
from quorum.log.log import Log
from quorum.server.config import node_config

pytestmark = pytest.mark.timeout(240)


def wait_for_leader(cluster: LocalCluster, not_node: int | None = None, timeout: float = 60.0) -> QuorumStatus:
    """The quorum's status once a leader (other than `not_node`) answers DescribeQuorum."""
    deadline = time.monotonic() + timeout
    last_error: Exception | None = None
    while time.monotonic() < deadline:
        for node_id in cluster.alive():
            spec = cluster.specs[node_id]
            if spec.role != "controller":
                continue
            try:
                status = asyncio.run(describe_quorum(spec.address, timeout_ms=2000))
            except Exception as exc:  # not up yet, no leader yet: keep asking
                last_error = exc
                continue
            if status.leader_id >= 0 and status.leader_id != not_node:
                return status
        time.sleep(0.2)
    raise AssertionError(f"no leader within {timeout}s: {last_error!r}")


def commit(cluster: LocalCluster, values: list[bytes]) -> int:
    async def go() -> int:
        writer = QuorumWriter(cluster.bootstrap_controllers.split(","))
        try:
            return await writer.commit(values)
        finally:
            await writer.close()

    return asyncio.run(go())


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
    cluster = LocalCluster(tmp_path, controllers=3, brokers=1)
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
    finally:
        cluster.stop()

    expected = before + after
    for node_id in cluster.specs:
        assert committed_values(cluster, node_id, high_watermark) == expected, f"node {node_id} differs"
