"""`quorum local-cluster`'s readiness contract, as a script uses it: the moment the `ready:` line
appears, a replication-factor-3 topic can be created; `--timeout` gives up naming what was not ready."""

from __future__ import annotations

import re
import signal
import socket
import subprocess
import sys
from pathlib import Path

import pytest
from confluent_kafka.admin import AdminClient, NewTopic

pytestmark = pytest.mark.timeout(180)

READY = re.compile(r"^ready: 3 controllers, 3 brokers; bootstrap servers: (?P<bootstrap>\S+)$")


def local_cluster(directory: Path, *extra: str) -> subprocess.Popen[str]:
    return subprocess.Popen([sys.executable, "-m", "quorum.cli", "local-cluster", "--dir", str(directory), *extra],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def stop(process: subprocess.Popen[str]) -> str:
    """SIGTERM, as Ctrl-C; the rest of its output."""
    if process.poll() is None:
        process.send_signal(signal.SIGTERM)
    rest, _ = process.communicate(timeout=60)
    return rest


@pytest.mark.parametrize("attempt", [1, 2])
def test_a_replication_factor_3_topic_is_created_the_moment_the_ready_line_appears(tmp_path, attempt):
    process = local_cluster(tmp_path, "--controllers", "3", "--brokers", "3", "--timeout", "120")
    lines: list[str] = []
    try:
        assert process.stdout is not None
        for line in process.stdout:
            lines.append(line)
            ready = READY.match(line.rstrip("\n"))
            if ready:
                break
        else:
            raise AssertionError("local-cluster ended without a ready line:\n" + "".join(lines))
        assert not any(line.startswith("bootstrap servers:") for line in lines), "".join(lines)
        admin = AdminClient({"bootstrap.servers": ready["bootstrap"], "log_level": 0})
        futures = admin.create_topics([NewTopic(f"replicated-{attempt}", 3, 3)], request_timeout=30)
        for future in futures.values():
            future.result(timeout=60)  # raises INVALID_REPLICATION_FACTOR while a broker is still fenced
    finally:
        rest = stop(process)
    assert process.returncode == 0, "".join(lines) + rest
    assert "all nodes stopped" in rest


def test_timeout_names_what_was_not_ready_and_the_log_to_read(tmp_path):
    # No controller stands for election before its 10-minute election timeout: no leader for sure.
    process = local_cluster(tmp_path, "--controllers", "3", "--brokers", "1", "--timeout", "2",
                            "--set", "quorum.election.timeout.ms=600000")
    output = stop_after_exit(process)
    assert process.returncode == 1, output
    assert re.search(r"error: the cluster in \S+ was not ready after 2 s: still waiting for a leader of the "
                     r"metadata quorum \(controllers 1, 2, 3\).*\(see \S+/node-1/node\.log\)", output), output
    assert "ready:" not in output


def test_a_node_that_exits_is_named_at_once(tmp_path):
    process = local_cluster(tmp_path, "--controllers", "1", "--brokers", "1", "--timeout", "120",
                            "--set", "broker.session.timeout.ms=not-a-number")
    output = stop_after_exit(process)
    assert process.returncode == 1, output
    assert re.search(r"error: node \d+ exited with code 1 before the cluster was ready \(see \S+/node\.log\)",
                     output), output


def stop_after_exit(process: subprocess.Popen[str]) -> str:
    output, _ = process.communicate(timeout=120)
    return output


def test_a_node_whose_port_was_taken_before_it_listened_moves_to_another(tmp_path):
    """Ports are picked free when the cluster is planned; any client's connection may take one before
    the node binds it. start() moves such a node (a controller: every node, for the voters) and goes on."""
    from quorum.launcher import LocalCluster

    cluster = LocalCluster(tmp_path, controllers=1, brokers=1)
    cluster.format_storage()
    taken = {node_id: cluster.specs[node_id].port for node_id in (1, 101)}
    squatters = []
    for port in taken.values():
        squatter = socket.socket()
        squatter.bind(("127.0.0.1", port))
        squatter.listen()
        squatters.append(squatter)
    notes: list[str] = []
    try:
        cluster.start(timeout=120, progress=notes.append)
        assert all(cluster.specs[n].port != port for n, port in taken.items())
        assert any(f"port {taken[1]} was taken" in note for note in notes), notes
        assert any(f"port {taken[101]} was taken" in note for note in notes), notes
        for node_id, port in taken.items():
            log = cluster.specs[node_id].log_path.read_text()
            assert f"cannot listen on 127.0.0.1:{port}: address already in use; not starting" in log, log
            assert "Traceback" not in log, f"node {node_id} names the taken port in one line, no traceback"
    finally:
        cluster.stop()
        for squatter in squatters:
            squatter.close()


def test_a_node_asked_for_its_stacks_prints_them_to_its_log_and_runs_on(tmp_path):
    """SIGUSR1 (`LocalCluster.dump_stacks`, which the suite sends to every running node when a test
    fails): `quorum start` writes each Python thread's stack to its log and goes on serving."""
    import time

    from quorum.launcher import LocalCluster

    cluster = LocalCluster(tmp_path, 1, 0)
    cluster.format_storage()
    cluster.start()
    try:
        cluster.wait_ready()
        assert cluster.dump_stacks() == [1]
        log = cluster.specs[1].log_path
        deadline = time.monotonic() + 30
        while "most recent call first" not in log.read_text():
            assert time.monotonic() < deadline, "no stacks in the node's log 30 s after SIGUSR1"
            time.sleep(0.1)
        time.sleep(0.5)
        assert cluster.alive() == [1]
        assert "run_node" in log.read_text()  # the main thread's stack, where the node serves
    finally:
        cluster.stop()
