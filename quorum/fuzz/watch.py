"""What a fuzz run watches besides the frames: the nodes' memory and descriptors, and a real client.

`NodeSample` reads /proc/PID (Linux): resident memory, open descriptors and how many are sockets,
so a leaked connection shows as sockets left open after every fuzzing connection has gone.
`ProbeClient` is a real confluent-kafka producer and consumer (extra `clients`) on connections of
their own: one record at a time is produced with acks=all and consumed back, and every error and
every wait over `STALL_S` is recorded.
"""

from __future__ import annotations

import os
import threading
import time
from dataclasses import dataclass, field
from typing import Any

STALL_S = 1.0
"""A produce acknowledgement or a consume that takes longer than this is a stall."""
PROBE_DEADLINE_S = 60.0
"""The longest the probe waits for one acknowledgement or one record before it calls it an error."""


@dataclass(frozen=True, slots=True)
class NodeSample:
    rss_kib: int
    fds: int
    sockets: int

    @classmethod
    def of(cls, pid: int) -> NodeSample:
        """The process's VmRSS, open descriptors and sockets now; OSError when it is gone."""
        with open(f"/proc/{pid}/status", encoding="ascii") as status:
            rss = next((int(line.split()[1]) for line in status if line.startswith("VmRSS:")), 0)
        fds = sockets = 0
        for name in os.listdir(f"/proc/{pid}/fd"):
            try:
                target = os.readlink(f"/proc/{pid}/fd/{name}")
            except OSError:
                continue  # closed between the listing and the read
            fds += 1
            sockets += target.startswith("socket:")
        return cls(rss, fds, sockets)


@dataclass
class ProbeStats:
    round_trips: int = 0
    errors: list[str] = field(default_factory=list)
    stalls: int = 0
    longest_s: float = 0.0

    def waited(self, seconds: float) -> None:
        self.longest_s = max(self.longest_s, seconds)
        if seconds > STALL_S:
            self.stalls += 1


class ProbeClient:
    """Produce one record (acks=all) and consume it back, over and over, on a thread of its own."""

    def __init__(self, bootstrap: str, topic: str, group: str) -> None:
        from confluent_kafka import Consumer, Producer
        from confluent_kafka.admin import AdminClient, NewTopic

        quiet = {"bootstrap.servers": bootstrap, "log_level": 0}
        admin = AdminClient(quiet)
        for future in admin.create_topics([NewTopic(topic, 1, 1)], request_timeout=PROBE_DEADLINE_S).values():
            future.result(PROBE_DEADLINE_S)
        self.topic = topic
        self.stats = ProbeStats()
        self._errors: list[str] = []
        self._producer = Producer({**quiet, "acks": "all", "linger.ms": 0,
                                   "error_cb": lambda error: self._errors.append(f"producer: {error}")})
        self._consumer = Consumer({**quiet, "group.id": group, "auto.offset.reset": "earliest",
                                   "enable.auto.commit": False, "fetch.wait.max.ms": 100,
                                   "error_cb": lambda error: self._errors.append(f"consumer: {error}")})
        self._consumer.subscribe([topic])
        self._stop = threading.Event()
        self._sent = 0
        self._thread = threading.Thread(target=self._run, name="fuzz-probe", daemon=True)

    def warm_up(self) -> None:
        """One round trip before the measurement starts (the consumer joins its group meanwhile)."""
        self._round_trip(self.stats, measured=False)
        if self.stats.errors:
            raise RuntimeError(f"the probe client could not produce and consume {self.topic} before the "
                               f"fuzzing began: {self.stats.errors[0]}")

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> ProbeStats:
        self._stop.set()
        self._thread.join(2 * PROBE_DEADLINE_S)
        self._consumer.close()
        self.stats.errors.extend(self._errors)
        return self.stats

    def _run(self) -> None:
        while not self._stop.is_set():
            self._round_trip(self.stats, measured=True)
            self._stop.wait(0.05)

    def _round_trip(self, stats: ProbeStats, measured: bool) -> None:
        value = f"probe-{self._sent}".encode()
        self._sent += 1
        delivered: list[Any] = []
        started = time.monotonic()
        self._producer.produce(self.topic, value, on_delivery=lambda error, message: delivered.append(error))
        self._producer.flush(PROBE_DEADLINE_S)
        acked = time.monotonic()
        if not delivered or delivered[0] is not None:
            stats.errors.append(f"produce {value.decode()}: {delivered[0] if delivered else 'no acknowledgement'}")
            return
        while time.monotonic() - acked < PROBE_DEADLINE_S:
            message = self._consumer.poll(0.1)
            if message is None:
                continue
            if message.error() is not None:
                stats.errors.append(f"consume: {message.error()}")
                return
            if message.value() == value:
                break
        else:
            stats.errors.append(f"consume {value.decode()}: not read back within {PROBE_DEADLINE_S:g} s")
            return
        if measured:
            stats.round_trips += 1
            stats.waited(acked - started)
            stats.waited(time.monotonic() - acked)
