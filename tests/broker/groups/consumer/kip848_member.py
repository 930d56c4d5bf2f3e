"""A confluent-kafka consumer with `group.protocol=consumer`, run as its own process by the KIP-848
process test so that it can be killed -9. It prints one JSON line per event (assign, revoke, lost,
record, committed, commit_failed, error, closed) with the system-wide monotonic time, commits each
record synchronously after printing it, and closes (leaving the group) on SIGTERM.

Usage: python kip848_member.py NAME BOOTSTRAP GROUP SUBSCRIPTION...
"""

from __future__ import annotations

import json
import os
import signal
import sys
import time
from typing import Any

from confluent_kafka import Consumer, KafkaException, TopicPartition

stopping = False
DEBUG = {"debug": "cgrp", "log_level": 7} if os.environ.get("KIP848_MEMBER_DEBUG") else {"log_level": 0}
"""KIP848_MEMBER_DEBUG=1: librdkafka logs its group protocol to stderr (KIP848_MEMBER_STDERR names a file for it)."""


def out(**fields: Any) -> None:
    print(json.dumps({"t": time.monotonic(), **fields}), flush=True)


def partitions(parts: list[TopicPartition]) -> list[list[Any]]:
    return [[p.topic, p.partition] for p in parts]


def main(name: str, bootstrap: str, group: str, subscription: list[str]) -> None:
    def stop(*_: object) -> None:
        global stopping
        stopping = True

    signal.signal(signal.SIGTERM, stop)
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": group,
            "group.protocol": "consumer",
            "client.id": name,
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
            "topic.metadata.refresh.interval.ms": 1000,
            "reconnect.backoff.max.ms": 500,  # back within the test cluster's 6 s session after a broker restart
            **DEBUG,
        }
    )
    consumer.subscribe(
        subscription,
        on_assign=lambda c, parts: out(event="assign", partitions=partitions(parts)),
        on_revoke=lambda c, parts: out(event="revoke", partitions=partitions(parts)),
        on_lost=lambda c, parts: out(event="lost", partitions=partitions(parts)),
    )
    out(event="started")
    while not stopping:
        message = consumer.poll(0.2)
        if message is None:
            continue
        if message.error():
            out(event="error", error=str(message.error()))
            continue
        where = {"topic": message.topic(), "partition": message.partition(), "offset": message.offset()}
        out(event="record", **where)
        try:
            consumer.commit(message=message, asynchronous=False)
        except KafkaException as exc:
            out(event="commit_failed", error=str(exc), **where)
        else:
            out(event="committed", **where)
    consumer.close()
    out(event="closed")


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4:])
