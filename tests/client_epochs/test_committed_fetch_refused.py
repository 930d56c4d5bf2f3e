"""A wrapped confluent-kafka consumer whose committed-offset lookup a moved coordinator refused still
fetches its partitions.

librdkafka answers an OffsetFetch refused as a whole (NOT_COORDINATOR for the group, no partitions)
with a consumer error event, and then neither asks again nor starts the partitions it was for: they
stay assigned and are never fetched until assigned again (librdkafka issue 5586, open in 2.16). In
the soak the replicator's group coordinator was killed while it asked, and the replicator copied
nothing for five minutes. A proxy in front of a real broker refuses the first OffsetFetch the way a
broker that just lost the group does. The group has a commit (offset 0), so the wrapper leaves the
partition to librdkafka's lookup; the proxy refuses librdkafka's and spares the wrapper's own."""

from __future__ import annotations

import time

import pytest
from confluent_kafka import Consumer as RawConsumer
from confluent_kafka import Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from client_epochs.confluent import Consumer
from tests.support.proxied_cluster import behind_proxy
from tests.support.refusing_proxy import OffsetFetchRefusingProxy
from tests.test_broker_processes import QUIET
from tests.test_controller_processes import create

pytestmark = pytest.mark.timeout(120)

TOPIC = "refused"


def test_partitions_whose_committed_offsets_a_moved_coordinator_refused_are_fetched(tmp_path):
    def refusing(host: str, port: int) -> OffsetFetchRefusingProxy:
        return OffsetFetchRefusingProxy(host, port, refusals=1, spare_client_id="client-epochs")

    with behind_proxy(tmp_path, refusing) as proxy:
        consumer = None
        try:
            create(AdminClient({"bootstrap.servers": proxy.address, **QUIET}), NewTopic(TOPIC, 1, 1))
            producer = Producer({"bootstrap.servers": proxy.address, **QUIET})
            for n in range(10):
                producer.produce(TOPIC, f"r{n}".encode(), partition=0)
            assert producer.flush(30) == 0
            committer = RawConsumer({"bootstrap.servers": proxy.address, "group.id": "refused-group", **QUIET})
            committer.commit(offsets=[TopicPartition(TOPIC, 0, 0)], asynchronous=False)
            committer.close()
            consumer = Consumer({"bootstrap.servers": proxy.address, "group.id": "refused-group",
                                 "enable.auto.commit": False, "auto.offset.reset": "earliest", **QUIET})
            consumer.subscribe([TOPIC])
            records, errors = [], []
            deadline = time.monotonic() + 30
            while len(records) < 10 and time.monotonic() < deadline:
                for message in consumer.consume(10, 0.5):
                    (errors if message.error() is not None else records).append(message)
            assert proxy.refused == 1
            assert [e.error().str() for e in errors if "committed offset" in e.error().str()], \
                "the refusal reaches the user as librdkafka reports it"
            assert [m.offset() for m in records] == list(range(10)), \
                f"{len(records)} record(s) read in 30 s after the refused OffsetFetch"
        finally:
            if consumer is not None:
                consumer.close()
