"""The soak's faults: what each does to a LocalCluster, and how it is undone.

One fault at a time, each followed by a wait until the cluster has healed (every partition of the
soak topic led, with its full ISR, in the view of a broker that is not stale), so that faults
compose over time without ever taking away the majority that acks=all with min.insync.replicas=2
needs for more than a fault's own duration.

Kinds (`KINDS`), taken in turn:
- `kill-broker` / `kill-controller`: kill -9 of a random one; started again after `hold_s`.
- `pause-broker` / `pause-controller`: SIGSTOP (a long GC pause), SIGCONT after `hold_s`.
- `stale-broker`: one broker answers Metadata from a frozen image (the `PAUSE_METADATA` file of
  `quorum.broker.served_image`) while the leader of a partition is killed -9 and replaced: clients
  that ask it see the dead leader with its old epoch (KAFKA-6262). Counted as one stale broker and
  one kill.
- `full-disk`: the data directory of the disk broker (a small tmpfs mounted by the soak) is filled
  to the last byte for `hold_s`, then freed; a broker that exited on it is started again (and counted).
"""

from __future__ import annotations

import contextlib
import os
import random
import signal
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

from quorum.server.config import PAUSE_METADATA

KINDS = ("kill-broker", "pause-broker", "stale-broker", "kill-controller", "full-disk", "pause-controller")
HEAL_TIMEOUT_S = 180.0
FILLER = "soak-filler"


class Faults:
    """Injects the faults on `cluster` and counts them by kind (see the module docstring)."""

    def __init__(self, cluster: Any, rng: random.Random, healed: Callable[[set[int]], None],
                 leader_of: Callable[[int, set[int]], int], disk_broker: int | None, hold_s: float,
                 log: Callable[[str], None]) -> None:
        self.cluster = cluster
        self.rng = rng
        self.healed = healed
        """Waits (with its own deadline, naming what it waits for) until the cluster has healed;
        given the brokers that are stale right now, whose views it must not trust."""
        self.leader_of = leader_of
        """The leader of a partition of the soak topic, asked of a broker not in the given set."""
        self.disk_broker = disk_broker
        self.hold_s = hold_s
        self.log = log
        self.counts: Counter[str] = Counter()
        self.findings: list[str] = []
        self.current = ""
        self._turn = 0

    def brokers(self) -> list[int]:
        return sorted(n for n, s in self.cluster.specs.items() if s.role == "broker")

    def controllers(self) -> list[int]:
        return sorted(n for n, s in self.cluster.specs.items() if s.role == "controller")

    def kinds(self) -> tuple[str, ...]:
        return KINDS if self.disk_broker is not None else tuple(k for k in KINDS if k != "full-disk")

    @property
    def rounds(self) -> int:
        """Whole rounds of every kind injected so far."""
        return self._turn // len(self.kinds())

    def next(self) -> None:
        """The next fault in turn: injected, held, undone, and the cluster healed."""
        kinds = self.kinds()
        kind = kinds[self._turn % len(kinds)]
        self._turn += 1
        self.current = kind
        try:
            getattr(self, "_" + kind.replace("-", "_"))()
        finally:
            self.current = ""

    def _kill(self, node: int, what: str) -> None:
        self.log(f"fault: kill -9 of {what} {node}")
        self.cluster.kill(node, signal.SIGKILL)
        self.counts[f"kill -9 {what}"] += 1
        time.sleep(self.hold_s)
        self.cluster.start_node(node)
        self.counts["restart"] += 1

    def _kill_broker(self) -> None:
        self._kill(self.rng.choice(self.brokers()), "broker")
        self.healed(set())

    def _kill_controller(self) -> None:
        self._kill(self.rng.choice(self.controllers()), "controller")
        self.healed(set())

    def _pause(self, node: int, what: str) -> None:
        self.log(f"fault: SIGSTOP of {what} {node} for {self.hold_s:.0f} s")
        process = self.cluster.processes[node]
        process.send_signal(signal.SIGSTOP)
        self.counts[f"SIGSTOP/SIGCONT {what}"] += 1
        try:
            time.sleep(self.hold_s)
        finally:
            process.send_signal(signal.SIGCONT)
        self.healed(set())

    def _pause_broker(self) -> None:
        self._pause(self.rng.choice(self.brokers()), "broker")

    def _pause_controller(self) -> None:
        self._pause(self.rng.choice(self.controllers()), "controller")

    def _stale_broker(self) -> None:
        brokers = self.brokers()
        stale = self.rng.choice(brokers)
        pause = self.cluster.specs[stale].directory / "data" / "__cluster_metadata-0" / PAUSE_METADATA
        partition = self.rng.randrange(3)
        leader = self.leader_of(partition, {stale})
        victim = leader if leader not in (stale, -1) else self.rng.choice([b for b in brokers if b != stale])
        self.log(f"fault: broker {stale} answers Metadata from a frozen image while broker {victim} "
                 f"(leader of partition {partition}: {leader}) is killed -9")
        pause.write_text("soak\n")
        self.counts["stale broker"] += 1
        try:
            time.sleep(1.0)  # the frozen image is the one from before the kill
            self._kill(victim, "broker")
            self.healed({stale})
        finally:
            pause.unlink(missing_ok=True)
        self.healed(set())

    def _full_disk(self) -> None:
        assert self.disk_broker is not None
        data = self.cluster.specs[self.disk_broker].directory / "data"
        filler = data / FILLER
        free = fill(filler)
        self.log(f"fault: the disk of broker {self.disk_broker} is full ({free / 2**20:.1f} MiB filled) "
                 f"for {self.hold_s:.0f} s")
        self.counts["full disk"] += 1
        try:
            time.sleep(self.hold_s)
        finally:
            filler.unlink(missing_ok=True)
        self.healed(set())  # a broker stopped by a log that failed on the full disk is started again there

    def restart_exited(self) -> None:
        """Start again, as a finding, the nodes that exited on their own: a node stops (exit 1) when a
        log it writes fails, as Kafka halts on a failed log dir (killed ones are started by their fault)."""
        for node, process in sorted(self.cluster.processes.items()):
            if process.poll() is None or process.returncode < 0:
                continue
            during = f" during the {self.current} fault" if self.current else ""
            role = self.cluster.specs[node].role
            finding = f"{role} {node} exited (status {process.returncode}){during}; started again"
            self.log(finding)
            self.findings.append(finding)
            self.cluster.start_node(node)
            self.counts["restart"] += 1


def fill(path: Path) -> int:
    """Fill the filesystem of `path` to its last byte with one file; the bytes written."""
    written = 0
    block = b"\0" * (1 << 20)
    with open(path, "wb", buffering=0) as file:
        while True:
            try:
                written += file.write(block)
            except OSError:
                break
        for size in (65536, 4096, 512, 1):  # the last blocks
            while True:
                try:
                    written += file.write(block[:size])
                except OSError:
                    break
        with contextlib.suppress(OSError):
            os.fsync(file.fileno())
    return written
