"""How long a group is without a killed member's partitions: classic eager, classic cooperative and
KIP-848's consumer protocol, in one run (issue 34).

Run: `.venv/bin/python -m benchmarks.bench_groups` (BENCH_GROUPS_ROUNDS rounds per protocol, default 3).

One cluster (1 controller, 1 broker, `quorum.launcher.LocalCluster`) on this machine; a topic of 12
partitions; per protocol, a fresh group of three `benchmarks.group_member` processes. Once the three
share the partitions, one member holding partitions is killed -9; the figure is the time from the
kill to the moment the two others hold every partition again (their last assign callback, on the
system-wide monotonic clock). The dead member is noticed only when its session lapses, 10 s for all
three (client session.timeout.ms for the classic protocol, the broker's group.consumer.session.timeout.ms
for KIP-848), so the figures differ by what comes after: a classic eager group revokes everything
and reassigns, a cooperative one rebalances twice, a KIP-848 group hands the freed partitions to the
members on their next heartbeats. A new member is started after each round to restore three.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from confluent_kafka.admin import AdminClient, NewTopic

from benchmarks.group_member import SESSION_MS
from benchmarks.table import ROOT, print_table, progress
from quorum.launcher import LocalCluster

ROUNDS = int(os.environ.get("BENCH_GROUPS_ROUNDS", "3"))
PARTITIONS = 12
TOPIC = "bench-groups"
WAIT_S = 120.0
SETTINGS = {
    "group.initial.rebalance.delay.ms": "0",
    "offsets.topic.replication.factor": "1",
    "group.consumer.session.timeout.ms": str(SESSION_MS),
    "group.consumer.min.session.timeout.ms": "6000",
    "group.consumer.heartbeat.interval.ms": "1000",
    "group.consumer.min.heartbeat.interval.ms": "500",
}


class Member:
    """A `group_member` process and the partitions its events say it holds."""

    def __init__(self, bootstrap: str, group: str, protocol: str) -> None:
        self.events: list[dict[str, Any]] = []
        self._lock = threading.Lock()
        self.process = subprocess.Popen(
            [sys.executable, "-m", "benchmarks.group_member", bootstrap, group, TOPIC, protocol],
            cwd=ROOT,
            stdout=subprocess.PIPE,
            text=True,
        )
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            with self._lock:
                self.events.append(json.loads(line))

    def owned(self) -> tuple[set[int], float]:
        """The partitions held now, and the time of the last assign event."""
        owned: set[int] = set()
        last = 0.0
        with self._lock:
            for event in self.events:
                if event["event"] == "assign":
                    owned |= set(event["partitions"])
                    last = event["t"]
                else:
                    owned -= set(event["partitions"])
        return owned, last

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(30)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(10)


def wait_for(what: str, condition: Any, timeout_s: float = WAIT_S) -> Any:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        result = condition()
        if result:
            return result
        time.sleep(0.05)
    raise TimeoutError(f"timed out after {timeout_s:.0f} s waiting for {what}")


def shared(members: list[Member]) -> float | None:
    """When every partition is held by exactly one of `members`, each holding some: the last assign time."""
    held = [m.owned() for m in members]
    parts = [p for owned, _ in held for p in owned]
    if sorted(parts) != list(range(PARTITIONS)) or not all(owned for owned, _ in held):
        return None
    return max(last for _, last in held)


def measure(bootstrap: str, protocol: str) -> list[float]:
    """ROUNDS kills of one member of a three-member group: seconds until the others hold everything."""
    group = f"bench-{protocol}"
    members = [Member(bootstrap, group, protocol) for _ in range(3)]
    figures = []
    try:
        for round_number in range(ROUNDS):
            wait_for(f"three {protocol} members to share the partitions", lambda: shared(members))
            victim = next(m for m in members if m.owned()[0])
            killed_at = time.monotonic()
            victim.process.kill()
            victim.process.wait(10)
            members.remove(victim)
            done = wait_for(
                f"{protocol}: the two others to hold every partition",
                lambda since=killed_at: (s := shared(members)) is not None and s > since and s,
            )
            figures.append(done - killed_at)
            progress(f"{protocol} round {round_number + 1}: {figures[-1]:.2f} s")
            members.append(Member(bootstrap, group, protocol))
    finally:
        for member in members:
            member.stop()
    return figures


def main() -> None:
    with tempfile.TemporaryDirectory(prefix="bench-groups-") as directory:
        cluster = LocalCluster(Path(directory), controllers=1, brokers=1, settings=SETTINGS)
        cluster.format_storage()
        cluster.start()
        try:
            bootstrap = next(spec.address for spec in cluster.specs.values() if spec.role == "broker")
            admin = AdminClient({"bootstrap.servers": bootstrap, "log_level": 0})
            wait_for("the broker", lambda: admin.list_topics(timeout=5).brokers)
            admin.create_topics([NewTopic(TOPIC, PARTITIONS, 1)])[TOPIC].result(timeout=60)
            results = {protocol: measure(bootstrap, protocol) for protocol in ("eager", "cooperative", "consumer")}
        finally:
            cluster.stop()
    rows = [(protocol, statistics.median(f), min(f), max(f), len(f)) for protocol, f in results.items()]
    print_table(
        f"Kill -9 of one of three members to every partition owned again ({PARTITIONS} partitions, "
        f"{SESSION_MS / 1000:.0f} s session), seconds",
        ("protocol", "median", "min", "max", "rounds"),
        rows,
    )


if __name__ == "__main__":
    main()
