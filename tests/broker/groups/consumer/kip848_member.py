"""A confluent-kafka consumer with `group.protocol=consumer`, run as its own process by the KIP-848
process test so that it can be killed -9. It prints one JSON line per event (assign, revoke, lost,
record, committed, commit_failed, error, refusals, closed) with the system-wide monotonic time, commits
each record synchronously after printing it, and closes (leaving the group) on SIGTERM.

With --wrapper the consumer is `client_epochs.confluent.Consumer` (KIP-232 commits and waits) reading a
recreated topic from its beginning (`on_topic_recreated="earliest"`, the README's documented option), its
metadata checked every 0.5 s; it prints its metadata client's count of refused stale answers as it grows.

Usage: python kip848_member.py NAME BOOTSTRAP GROUP [--wrapper] SUBSCRIPTION...
"""

from __future__ import annotations

import json
import logging
import os
import signal
import sys
import time
from typing import Any

from confluent_kafka import Consumer, KafkaException, TopicPartition

from client_epochs import TopicRecreatedError
from client_epochs.confluent import Consumer as EpochConsumer

stopping = False
REVOKE_WORK_S = float(os.environ.get("KIP848_REVOKE_WORK_S", "0"))
"""Seconds an on_revoke callback works before it gives its partitions up (an application committing or
flushing there); the revoke event is printed once it is done. librdkafka acknowledges a revocation to the
coordinator only after the callback returned, so a new owner given the partition during that work shows
a revocation acknowledged early: two owners at once."""
DEBUG = {"debug": "cgrp", "log_level": 7} if os.environ.get("KIP848_MEMBER_DEBUG") else {"log_level": 0}
"""KIP848_MEMBER_DEBUG=1: librdkafka logs its group protocol to stderr (KIP848_MEMBER_STDERR names a file for it)."""


def out(**fields: Any) -> None:
    print(json.dumps({"t": time.monotonic(), **fields}), flush=True)


def partitions(parts: list[TopicPartition]) -> list[list[Any]]:
    return [[p.topic, p.partition] for p in parts]


def main(name: str, bootstrap: str, group: str, subscription: list[str], wrapper: bool = False) -> None:
    if os.environ.get("KIP848_MEMBER_DEBUG"):  # the wrapper's log too
        logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")

    def stop(*_: object) -> None:
        global stopping
        stopping = True

    signal.signal(signal.SIGTERM, stop)
    config = {
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
    consumer = (
        EpochConsumer(config, on_topic_recreated="earliest", metadata_check_interval_s=0.5)
        if wrapper
        else Consumer(config)
    )
    consumer.subscribe(
        subscription,
        on_assign=lambda c, parts: out(event="assign", partitions=partitions(parts)),
        on_revoke=lambda c, parts: (time.sleep(REVOKE_WORK_S), out(event="revoke", partitions=partitions(parts))),
        on_lost=lambda c, parts: out(event="lost", partitions=partitions(parts)),
    )
    out(event="started")
    refusals = 0
    while not stopping:
        message = consumer.poll(0.2)
        if wrapper and consumer.metadata_client.refusals != refusals:
            refusals = consumer.metadata_client.refusals
            out(event="refusals", count=refusals)
        if message is None:
            continue
        if message.error():
            out(event="error", error=str(message.error()))
            continue
        where = {
            "topic": message.topic(),
            "partition": message.partition(),
            "offset": message.offset(),
            "value": message.value().decode(),
        }
        out(event="record", **where)
        try:
            consumer.commit(message=message, asynchronous=False)
        except (KafkaException, TopicRecreatedError) as exc:
            out(event="commit_failed", error=str(exc), **where)
        else:
            out(event="committed", **where)
    consumer.close()
    out(event="closed")


if __name__ == "__main__":
    wrapped = sys.argv[4:5] == ["--wrapper"]
    main(sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4 + wrapped :], wrapped)
