"""Issue 38's record written twice, with a real librdkafka producer: a Produce answer that Kafka never
gives must not make librdkafka bump its idempotent epoch.

librdkafka answers an OUT_OF_ORDER_SEQUENCE_NUMBER for a request that is not the first one in flight
by bumping the producer's epoch on its own ("skipped sequence numbers", rdkafka_request.c;
confluentinc/librdkafka#4953), and after the bump it numbers every queued message from sequence 0
of the new epoch, retries that were already written included; no broker can take those for
duplicates, since sequences count per epoch. Our pipelined Produce gave such an answer where Kafka's
muted connection does not: a request refused (NOT_ENOUGH_REPLICAS) while an earlier one of its
connection waited for its followers, and the next one, decided after the ISR grew back, refused for
the gap. Here the producer's record A, written and then answered NOT_LEADER_OR_FOLLOWER (its leader
lost the partition while it waited for the followers), waits for a leader while that happens on the
other partition: A is written again under the new epoch unless the broker answers as Kafka does.

Two in-process brokers, one leader each, with a stand-in for replication (acks=all waits the test
answers, the ISR under min.insync.replicas for one check); every step waits for the brokers or the
client to get there, never for a time.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Producer

from quorum.broker.metadata import encoded_metadata_response
from quorum.broker.produce import PIPELINE_DEPTH, register_produce
from quorum.broker.replica_manager import ReplicaManager
from quorum.image.image import BrokerInfo, MetadataImage, PartitionInfo, single_node_image
from quorum.log.log import Log
from quorum.net.dispatch import Reply
from quorum.server.listener import KafkaListener
from quorum.server.standalone import metadata_dispatcher
from quorum.wire.errors import ErrorCode
from quorum.wire.protocol import Request
from tests.broker.test_produce_pipelining import UnderMinIsrOnce
from tests.support.background_loop import BackgroundServer

pytestmark = pytest.mark.timeout(120)

TOPIC = "orders"
PRODUCE_KEY, FETCH_KEY, METADATA_KEY, FIND_COORDINATOR_KEY = 0, 1, 3, 10
WAIT_S = 30.0
"""A deadline for each wait below, never reached while the broker and the client work."""


class Brokers(BackgroundServer):
    """Two brokers on one loop: broker 1 leads partition 0, broker 2 partition 1 (connections of
    their own, as two leaders are); Metadata from either names both, Produce over a ReplicaManager
    and a HeldReplication each."""

    def __init__(self, log_dir: Path) -> None:
        super().__init__()
        self.log_dir = log_dir
        self.replication = {1: UnderMinIsrOnce(), 2: UnderMinIsrOnce()}
        self.replicas: dict[int, ReplicaManager] = {}
        self.produce_requests = {1: 0, 2: 0}

    async def _serve(self) -> None:
        listeners = {}
        for broker in (1, 2):
            dispatcher, holder = metadata_dispatcher()
            self.replicas[broker] = ReplicaManager(broker, [self.log_dir / str(broker)])
            handlers = register_produce(dispatcher, self.replicas[broker],
                                        replication=self.replication[broker])  # type: ignore[arg-type]

            async def produce(request: Request, broker: int = broker, handlers: Any = handlers) -> Reply | None:
                self.produce_requests[broker] += 1
                return await handlers.produce(request)

            async def unserved(request: Request) -> Reply:
                raise AssertionError(f"{request.api.name} is only advertised here")

            async def metadata(request: Request, holder: list[MetadataImage] = holder) -> Reply:
                return Reply(encoded_metadata_response(holder[0], request.body, request.version), request.version)

            # librdkafka asks for Metadata on any connection after a refusal: answered beside the
            # Produce requests that wait there, not behind them, so the Produce requests behind it come.
            dispatcher.register(METADATA_KEY, metadata, pipelined=True)
            dispatcher.register(PRODUCE_KEY, produce, pipelined=True, depth=PIPELINE_DEPTH)
            dispatcher.register(FETCH_KEY, unserved)  # librdkafka writes v2 batches only to brokers with Fetch v4+
            dispatcher.register(FIND_COORDINATOR_KEY, unserved)
            listeners[broker] = (KafkaListener(dispatcher, "127.0.0.1", 0), holder)
            await listeners[broker][0].start()
        ports = {broker: listener.port for broker, (listener, _) in listeners.items()}
        image = single_node_image(1, "127.0.0.1", ports[1], {TOPIC: 2})
        topic = image.topics[TOPIC]
        image = replace(image, brokers={b: BrokerInfo(b, "127.0.0.1", port) for b, port in ports.items()},
                        topics={TOPIC: replace(topic, partitions=(PartitionInfo(0, 1, 0, (1,), (1,)),
                                                                  PartitionInfo(1, 2, 0, (2,), (2,))))})
        for broker, (_, holder) in listeners.items():
            holder.append(image)
            self.replicas[broker].apply_image(image)
        self._started(ports[1])
        await self._stop.wait()
        for broker, (listener, _) in listeners.items():
            await listener.close()
            self.replicas[broker].close()

    def call(self, action: Callable[[], None]) -> None:
        self._loop.call_soon_threadsafe(action)

    def answer(self, broker: int, code: int) -> None:
        """Answer every acks=all wait begun so far on `broker` with `code`."""
        def answer() -> None:
            for _, future in self.replication[broker].waits:
                if not future.done():
                    future.set_result(code)

        self.call(answer)

    def waiting(self, broker: int) -> int:
        return sum(1 for _, future in self.replication[broker].waits if not future.done())

    def lead(self, broker: int, partition: int, leading: bool) -> None:
        """Whether `broker`'s replica of `partition` takes Produce requests (Metadata still names it)."""
        replica = self.replicas[broker].get(TOPIC, partition)
        assert replica is not None
        self.call(lambda: replica.update_state(broker if leading else -1, 0, (broker,)))


def until(what: str, check: Callable[[], bool], producer: Producer, then: Callable[[], None] = lambda: None) -> None:
    """Poll the producer (delivery reports) and run `then` until `check` holds; fail naming `what`."""
    deadline = time.monotonic() + WAIT_S
    while not check():
        assert time.monotonic() < deadline, f"no {what} within {WAIT_S} s"
        then()
        producer.poll(0.01)


def stored(log_dir: Path, partition: int) -> list[tuple[bytes, int, int]]:
    """(value, producer epoch, sequence) of each record in the partition's log."""
    with Log(log_dir / f"{TOPIC}-{partition}") as log:
        return [(record.value, batch.producer_epoch, batch.base_sequence + index)
                for batch in log.iter_batches() for index, record in enumerate(batch)]


def test_a_record_written_and_retried_is_not_written_again_under_a_new_epoch(tmp_path):
    delivered: dict[bytes, Any] = {}
    with Brokers(tmp_path) as brokers:
        producer = Producer({"bootstrap.servers": brokers.address, "acks": "all", "enable.idempotence": True,
                             "linger.ms": 0, "retry.backoff.ms": 20, "log_level": 0})

        def report(error: Any, message: Any) -> None:
            delivered[message.value()] = error

        def send(value: bytes, partition: int) -> None:
            producer.produce(TOPIC, value, partition=partition, on_delivery=report)
            producer.poll(0)

        send(b"A", 1)
        until("acks=all wait for A", lambda: brokers.waiting(2) == 1, producer)
        brokers.lead(2, 1, False)  # broker 2 lost the partition while A waited for the followers:
        brokers.answer(2, ErrorCode.NOT_LEADER_OR_FOLLOWER)  # A is written, and tried again until it leads again
        until("A refused again", lambda: brokers.produce_requests[2] >= 2, producer)
        send(b"B0", 0)
        until("acks=all wait for B0", lambda: brokers.waiting(1) == 1, producer)
        brokers.replication[1].refuse_next = True  # the ISR is under min.insync.replicas when B1 comes
        send(b"B1", 0)
        until("look at B1", brokers.replication[1].refused.is_set, producer)
        send(b"B2", 0)  # and full again when B2 comes
        until("B2 at broker 1", lambda: brokers.produce_requests[1] >= 3, producer)
        until("B0, B1 and B2 delivered", lambda: {b"B0", b"B1", b"B2"} <= delivered.keys(), producer,
              lambda: brokers.answer(1, ErrorCode.NONE))
        brokers.lead(2, 1, True)
        until("A delivered", lambda: b"A" in delivered, producer, lambda: brokers.answer(2, ErrorCode.NONE))
        assert producer.flush(WAIT_S) == 0
    assert delivered == {b"A": None, b"B0": None, b"B1": None, b"B2": None}
    assert [value for value, _, _ in stored(tmp_path / "1", 0)] == [b"B0", b"B1", b"B2"]
    assert stored(tmp_path / "2", 1) == [(b"A", 0, 0)], "A written again (a new producer epoch: librdkafka bumped it)"
