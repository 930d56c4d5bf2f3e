"""One confluent-kafka group member for `bench_groups`, its own process so that it can be killed -9.

Usage: python -m benchmarks.group_member BOOTSTRAP GROUP TOPIC PROTOCOL, where PROTOCOL is "eager"
(classic, range), "cooperative" (classic, cooperative-sticky) or "consumer" (KIP-848). Prints one
JSON line per rebalance event (assign, revoke, lost) with its partitions and the system-wide
monotonic time, and polls until SIGTERM (then closes, leaving the group).
"""

from __future__ import annotations

import json
import signal
import sys
import time
from typing import Any

from confluent_kafka import Consumer, TopicPartition

SESSION_MS = 10_000
HEARTBEAT_MS = 1_000
"""The classic members' session timeout and heartbeat interval; `bench_groups` gives KIP-848's group
the same through the broker's group.consumer.* settings, so both wait equally for a killed member."""
PROTOCOLS: dict[str, dict[str, Any]] = {
    "eager": {
        "partition.assignment.strategy": "range",
        "session.timeout.ms": SESSION_MS,
        "heartbeat.interval.ms": HEARTBEAT_MS,
    },
    "cooperative": {
        "partition.assignment.strategy": "cooperative-sticky",
        "session.timeout.ms": SESSION_MS,
        "heartbeat.interval.ms": HEARTBEAT_MS,
    },
    "consumer": {"group.protocol": "consumer"},
}


def main(bootstrap: str, group: str, topic: str, protocol: str) -> None:
    stopping = False

    def stop(*_: object) -> None:
        nonlocal stopping
        stopping = True

    def out(event: str, parts: list[TopicPartition]) -> None:
        print(
            json.dumps({"event": event, "t": time.monotonic(), "partitions": [p.partition for p in parts]}), flush=True
        )

    signal.signal(signal.SIGTERM, stop)
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": group,
            "enable.auto.commit": False,
            "reconnect.backoff.max.ms": 500,
            "log_level": 0,
            **PROTOCOLS[protocol],
        }
    )
    consumer.subscribe(
        [topic],
        on_assign=lambda c, p: out("assign", p),
        on_revoke=lambda c, p: out("revoke", p),
        on_lost=lambda c, p: out("lost", p),
    )
    while not stopping:
        consumer.poll(0.1)
    consumer.close()


if __name__ == "__main__":
    main(*sys.argv[1:5])
