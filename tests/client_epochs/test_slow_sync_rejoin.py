"""A wrapped kafka-python consumer takes the partitions of a rebalance whose SyncGroup outlasts its poll.

kafka-python 3.0.12 awaits its join task only while it needs a rejoin, and a rebalance that a
metadata change started (partitions added) stops needing one once the leader has computed the
assignment, before SyncGroup is answered. A coordinator that answers SyncGroup only after the
group's record is replicated takes seconds while a replica of `__consumer_offsets` is down, and
the member then never took its assignment: no partition for good (the soak's kafka-python group).
A proxy in front of a real broker holds the SyncGroup of the rebalance after the growth for 4 s,
twenty times the consumer's poll."""

from __future__ import annotations

import threading
import time

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewPartitions, NewTopic

from client_epochs.kafka_python import KafkaConsumer
from quorum.wire.protocol import peek_api
from tests.support.proxied_cluster import behind_proxy
from tests.support.proxy import FrameProxy
from tests.test_broker_processes import QUIET
from tests.test_controller_processes import create, metadata, wait_until

pytestmark = pytest.mark.timeout(120)

TOPIC = "growing"
SYNC_GROUP = 14
SYNC_DELAY_S = 4.0
POLL_MS = 200


class SlowSyncGroupProxy(FrameProxy):
    """Holds every SyncGroup request once `slow` is set, for `SYNC_DELAY_S`, as a slow coordinator."""

    def __init__(self, target_host: str, target_port: int) -> None:
        super().__init__(target_host, target_port)
        self.slow = threading.Event()
        self.held = 0

    def _delay_s(self, payload: bytes) -> float:
        if peek_api(payload)[0] != SYNC_GROUP or not self.slow.is_set():
            return 0.0
        self.held += 1
        return SYNC_DELAY_S


def test_a_rebalance_after_partitions_were_added_completes_though_syncgroup_outlasts_the_poll(tmp_path):
    with behind_proxy(tmp_path, SlowSyncGroupProxy) as proxy:
        consumer = None
        try:
            admin = AdminClient({"bootstrap.servers": proxy.address, **QUIET})
            create(admin, NewTopic(TOPIC, 1, 1))
            consumer = KafkaConsumer(bootstrap_servers=proxy.address, group_id="growing-group",
                                     enable_auto_commit=False, auto_offset_reset="earliest",
                                     metadata_max_age_ms=1000)
            consumer.subscribe([TOPIC])
            deadline = time.monotonic() + 30
            while not consumer.assignment() and time.monotonic() < deadline:
                consumer.poll(timeout_ms=POLL_MS)
            assert {p.partition for p in consumer.assignment()} == {0}

            proxy.slow.set()
            for future in admin.create_partitions([NewPartitions(TOPIC, 2)]).values():
                future.result(30)
            wait_until("the broker to serve partition 1", lambda: 1 in metadata(proxy.address)[1][TOPIC].partitions)
            producer = Producer({"bootstrap.servers": proxy.address, **QUIET})
            failed: list[object] = []
            for n in range(5):
                producer.produce(TOPIC, f"r{n}".encode(), partition=1,
                                 on_delivery=lambda error, _: error is not None and failed.append(error))
            assert producer.flush(30) == 0 and not failed, failed

            read: list[int] = []
            deadline = time.monotonic() + 30
            while len(read) < 5 and time.monotonic() < deadline:
                for partition, batch in consumer.poll(timeout_ms=POLL_MS).items():
                    read += [m.offset for m in batch if partition.partition == 1]
            assert proxy.held >= 1, "the rebalance after the growth sent its SyncGroup through the slow proxy"
            assert read == list(range(5)), (
                f"partition 1 added, its SyncGroup held {SYNC_DELAY_S} s: {len(read)} of 5 records read in 30 s, "
                f"assignment {sorted(p.partition for p in consumer.assignment())}")
        finally:
            if consumer is not None:
                consumer.close()
