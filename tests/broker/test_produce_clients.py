"""Real clients produce through the listener; every message is then read back from the log files.

An in-process broker (ApiVersions, Metadata from a fixed image, Produce and InitProducerId over a
ReplicaManager) on its own thread; confluent-kafka and kafka-python produce 1,000 keyed messages
with headers each, idempotent, acks=all, LZ4-compressed. Then the partition logs are reopened
from disk as a fresh Log and every record is checked against what was sent.
"""

from __future__ import annotations

import pytest
from confluent_kafka import Producer
from kafka import KafkaProducer

from quorum.broker.produce import register_produce
from quorum.broker.replica_manager import ReplicaManager
from quorum.image.image import single_node_image
from quorum.log.log import Log
from quorum.net.dispatch import Reply
from quorum.server.listener import KafkaListener
from quorum.server.standalone import metadata_dispatcher
from quorum.wire.protocol import Request
from quorum.wire.records import Compression
from tests.support.background_loop import BackgroundServer

pytestmark = pytest.mark.timeout(120)

COUNT = 1000
FETCH_KEY = 1
FIND_COORDINATOR_KEY = 10
PARTITIONS = 3


class ProduceBroker(BackgroundServer):
    def __init__(self, log_dir) -> None:
        super().__init__()
        self.log_dir = log_dir

    async def _serve(self) -> None:
        dispatcher, holder = metadata_dispatcher()
        self.replicas = ReplicaManager(1, [self.log_dir], {"log.segment.bytes": "65536"})
        register_produce(dispatcher, self.replicas)

        async def unserved(request: Request) -> Reply:
            raise AssertionError(f"{request.api.name} is only advertised here")

        # librdkafka writes v2 batches only to brokers that serve Fetch v4+, and LZ4 only to those that
        # serve FindCoordinator: advertise both, as the node does.
        dispatcher.register(FETCH_KEY, unserved)
        dispatcher.register(FIND_COORDINATOR_KEY, unserved)
        listener = KafkaListener(dispatcher, "127.0.0.1", 0)
        await listener.start()
        image = single_node_image(1, "127.0.0.1", listener.port, {"confluent": PARTITIONS, "kafka-python": PARTITIONS})
        holder.append(image)
        self.replicas.apply_image(image)
        self._started(listener.port)
        await self._stop.wait()
        await listener.close()
        self.replicas.close()


def message(client: str, n: int) -> tuple[bytes, bytes, list[tuple[str, bytes]]]:
    return (b"key-%d" % n, (b"%s message %d " % (client.encode(), n)) * 5,
            [("n", str(n).encode()), ("client", client.encode())])


def stored_records(log_dir, topic: str) -> dict[bytes, tuple]:
    found = {}
    for partition in range(PARTITIONS):
        with Log(log_dir / f"{topic}-{partition}", time_index=True, verify_all_segments=True) as log:
            offsets = []
            for batch in log.iter_batches():
                batch.validate()
                assert batch.partition_leader_epoch == 0
                assert batch.producer_id >= 0, "idempotent: the client got a producer id from InitProducerId"
                assert batch.compression is Compression.LZ4
                for record in batch:
                    offsets.append(record.offset)
                    found[record.key] = (record.value, record.headers, partition)
            assert offsets == list(range(len(offsets))), "offsets are dense from 0"
    return found


def check(log_dir, topic: str, client: str) -> None:
    found = stored_records(log_dir, topic)
    assert len(found) == COUNT
    for n in range(COUNT):
        key, value, headers = message(client, n)
        assert found[key][:2] == (value, headers)


def test_real_clients_produce_and_every_message_is_in_the_log(tmp_path):
    with ProduceBroker(tmp_path) as broker:
        producer = Producer({"bootstrap.servers": broker.address, "acks": "all", "enable.idempotence": True,
                             "compression.type": "lz4", "linger.ms": 5})  # fmt: skip
        failures = []

        def delivered(err, _msg) -> None:
            if err is not None:
                failures.append(err)

        for n in range(COUNT):
            key, value, headers = message("confluent", n)
            producer.produce("confluent", value, key, headers=headers, on_delivery=delivered)
            producer.poll(0)
        assert producer.flush(30) == 0
        assert failures == []

        kp = KafkaProducer(bootstrap_servers=broker.address, acks="all", enable_idempotence=True,
                           compression_type="lz4", linger_ms=5)  # fmt: skip
        futures = []
        for n in range(COUNT):
            key, value, headers = message("kafka-python", n)
            futures.append(kp.send("kafka-python", value=value, key=key, headers=headers))
        kp.flush(30)
        metadata = [future.get(10) for future in futures]
        kp.close()
        assert len({(m.partition, m.offset) for m in metadata}) == COUNT
    check(tmp_path, "confluent", "confluent")
    check(tmp_path, "kafka-python", "kafka-python")


def test_refusal_lines_remember_a_bounded_number_of_partitions() -> None:
    """Produce to made-up topic names (a fuzzer, a misconfigured client) must not grow the broker's memory:
    the rate-limited refusal log forgets partitions quiet for a second once it holds REFUSAL_LOG_KEYS."""
    from quorum.broker import produce as produce_module
    from quorum.wire.errors import ErrorCode

    handlers = produce_module.ProduceHandlers.__new__(produce_module.ProduceHandlers)
    handlers._refusals = {}
    for n in range(3 * produce_module.REFUSAL_LOG_KEYS):
        handlers._log_refusal(f"made-up-{n}-0", ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, None, now_ms=n * 10)
    assert len(handlers._refusals) <= produce_module.REFUSAL_LOG_KEYS
