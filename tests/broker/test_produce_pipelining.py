"""A connection's Produce requests are pipelined (issue 37): an acks=all request waiting for the
followers does not hold back the appends of the requests behind it on the same connection, the
appends keep the order the requests came in, the answers leave in request order, and no more
than `PIPELINE_DEPTH` of them are started and unanswered at once.

The broker here is the listener, the Produce handler and a ReplicaManager on a temporary directory;
the replication is a stand-in whose acks=all futures the test resolves, so what is asserted is the
order of events, never a time."""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import AsyncIterator
from typing import Any

from quorum.broker.partition import Partition
from quorum.broker.produce import PIPELINE_DEPTH, register_produce
from quorum.broker.replica_manager import ReplicaManager
from quorum.image.image import single_node_image
from quorum.net.dispatch import Dispatcher
from quorum.net.peer_client import PeerClient
from quorum.server.listener import KafkaListener
from quorum.wire.errors import ErrorCode
from quorum.wire.protocol import APIS
from tests.broker.test_partition import client_batch

PRODUCE = APIS[0]
VERSION = 9
WAIT_S = 30.0
"""A deadline for each wait below, never reached while the broker works."""


class HeldReplication:
    """The leader's replication as the Produce handler sees it: no min.insync.replicas refusal, and
    every acks=all wait a future that the test resolves."""

    def __init__(self) -> None:
        self.waits: list[tuple[int, asyncio.Future[int]]] = []  # (the offset the append ends at, its answer)
        self.waited = asyncio.Event()

    def check_append(self, partition: Partition, acks: int) -> int:
        return ErrorCode.NONE

    def await_replication(self, partition: Partition, required_offset: int, timeout_ms: int) -> asyncio.Future[int]:
        future: asyncio.Future[int] = asyncio.get_running_loop().create_future()
        self.waits.append((required_offset, future))
        self.waited.set()
        return future

    async def until_waits(self, count: int) -> None:
        """Until `count` acks=all appends wait for their followers; an AssertionError after WAIT_S."""
        while len(self.waits) < count:
            self.waited.clear()
            try:
                await asyncio.wait_for(self.waited.wait(), WAIT_S)
            except TimeoutError:
                raise AssertionError(f"{len(self.waits)} acks=all appends waited for their followers after "
                                     f"{WAIT_S} s, not {count}: the connection did not start them") from None


def produce_body(first: int) -> Any:
    data = PRODUCE.request.TopicProduceData
    batch = client_batch(count=2, first=first)
    return PRODUCE.request(transactional_id=None, acks=-1, timeout_ms=int(WAIT_S * 1000), topic_data=[
        data(name="orders", partition_data=[data.PartitionProduceData(index=0, records=batch)])])


@contextlib.asynccontextmanager
async def leader_of_orders(tmp_path: Any, replication: HeldReplication
                           ) -> AsyncIterator[tuple[Partition, PeerClient, KafkaListener]]:
    """A listener serving Produce for `orders-0`, led here, with `replication`; a client connected to it."""
    dispatcher = Dispatcher()
    replicas = ReplicaManager(1, [tmp_path])
    register_produce(dispatcher, replicas, replication=replication)  # type: ignore[arg-type]
    listener = KafkaListener(dispatcher)
    await listener.start()
    replicas.apply_image(single_node_image(1, "127.0.0.1", listener.port, {"orders": 1}))
    partition = replicas.get("orders", 0)
    assert partition is not None
    client = PeerClient("127.0.0.1", listener.port, "producer", int(WAIT_S * 1000))
    try:
        yield partition, client, listener
    finally:
        await client.close()
        await listener.close()
        replicas.close()


async def scenario(tmp_path: Any, requests: int) -> tuple[list[int], int, list[int]]:
    """`requests` acks=all Produce requests of two records each, sent at once on one connection.
    Returns the offset each acks=all wait was for (in the order they began), how many requests
    had begun to wait while none was answered, and the base offsets answered (in answer order)."""
    replication = HeldReplication()
    async with leader_of_orders(tmp_path, replication) as (partition, client, _):
        sent = [asyncio.ensure_future(client.request(PRODUCE, VERSION, produce_body(2 * n))) for n in range(requests)]
        started = min(requests, PIPELINE_DEPTH)
        await replication.until_waits(started)
        log_end = partition.log_end_offset
        await asyncio.sleep(0.05)  # a chance for the requests past the depth to start, which they must not take
        waiting = len(replication.waits)
        assert log_end == 2 * started and partition.log_end_offset == log_end
        assert not any(request.done() for request in sent)  # every one waits for its followers
        for n in range(requests):  # answered one at a time, the next started as one leaves
            await replication.until_waits(n + 1)
            replication.waits[n][1].set_result(ErrorCode.NONE)
        answers = await asyncio.wait_for(asyncio.gather(*sent), WAIT_S)  # PeerClient checks their order
        ends_at_waits = [offset for offset, _ in replication.waits]
        bases = [a.responses[0].partition_responses[0].base_offset for a in answers]
        assert all(a.responses[0].partition_responses[0].error_code == ErrorCode.NONE for a in answers)
        return ends_at_waits, waiting, bases


def test_acks_all_requests_behind_a_waiting_one_are_appended_in_order_and_answered_in_order(tmp_path):
    ends, waiting, bases = asyncio.run(scenario(tmp_path, 3))
    # All three appended while the first still waited for its followers, each after the one before.
    assert waiting == 3
    assert ends == [2, 4, 6]
    assert bases == [0, 2, 4]


def test_no_more_than_the_pipeline_depth_of_a_connections_produce_requests_are_started(tmp_path):
    requests = PIPELINE_DEPTH + 2
    ends, waiting, bases = asyncio.run(scenario(tmp_path, requests))
    assert waiting == PIPELINE_DEPTH  # the rest waited in the socket until an answer left
    assert ends == [2 * (n + 1) for n in range(requests)]
    assert bases == [2 * n for n in range(requests)]


class UnderMinIsrOnce(HeldReplication):
    """A leader whose ISR, once `refuse_next` is set, is under min.insync.replicas for the next
    acks=all check and back to full from the one after on (a follower rejoined meanwhile)."""

    def __init__(self) -> None:
        super().__init__()
        self.refuse_next = False
        self.refused = threading.Event()  # set on the broker's loop, waited for on any thread

    def check_append(self, partition: Partition, acks: int) -> int:
        if self.refuse_next:
            self.refuse_next = False
            self.refused.set()
            return ErrorCode.NOT_ENOUGH_REPLICAS
        return ErrorCode.NONE


def idempotent_body(first_sequence: int) -> Any:
    data = PRODUCE.request.TopicProduceData
    batch = client_batch(count=2, pid=7, epoch=0, seq=first_sequence, first=first_sequence)
    return PRODUCE.request(transactional_id=None, acks=-1, timeout_ms=int(WAIT_S * 1000), topic_data=[
        data(name="orders", partition_data=[data.PartitionProduceData(index=0, records=batch)])])


async def answer_every_wait(replication: HeldReplication, sent: list[asyncio.Future[Any]]) -> list[Any]:
    """Answer each acks=all wait as it begins, until every request in `sent` is answered."""
    gathered = asyncio.ensure_future(asyncio.gather(*sent))
    while not gathered.done():
        replication.waited.clear()
        for _, future in replication.waits:
            if not future.done():
                future.set_result(ErrorCode.NONE)
        waited = asyncio.ensure_future(replication.waited.wait())
        done, _ = await asyncio.wait((gathered, waited), timeout=WAIT_S, return_when=asyncio.FIRST_COMPLETED)
        waited.cancel()
        assert done, f"no answer and no acks=all wait for {WAIT_S} s"
    return gathered.result()


async def refused_behind_a_waiting_request(tmp_path: Any) -> list[tuple[int, int]]:
    """An idempotent producer's three acks=all requests on one connection: the first waits for its
    followers; the ISR is under min.insync.replicas when the second comes and full again for the
    third. Returns each answer's (error code, base offset)."""
    replication = UnderMinIsrOnce()
    async with leader_of_orders(tmp_path, replication) as (_, client, _):
        sent = [asyncio.ensure_future(client.request(PRODUCE, VERSION, idempotent_body(0)))]
        await replication.until_waits(1)
        replication.refuse_next = True
        sent += [asyncio.ensure_future(client.request(PRODUCE, VERSION, idempotent_body(seq))) for seq in (2, 4)]
        # the second was looked at while the first waits
        assert await asyncio.to_thread(replication.refused.wait, WAIT_S), "the second request never looked at"
        answers = await answer_every_wait(replication, sent)
        return [(a.responses[0].partition_responses[0].error_code, a.responses[0].partition_responses[0].base_offset)
                for a in answers]


def test_a_refusal_behind_a_waiting_request_is_decided_once_it_is_answered(tmp_path):
    # Kafka reads the second request only once the first is answered, when the ISR is full again:
    # all three are appended. Refused early (NOT_ENOUGH_REPLICAS), the second left a gap that the
    # third was refused for (OUT_OF_ORDER_SEQUENCE_NUMBER), and librdkafka answers that with an
    # epoch bump that writes again records already written (issue 38).
    answers = asyncio.run(refused_behind_a_waiting_request(tmp_path))
    assert answers == [(ErrorCode.NONE, 0), (ErrorCode.NONE, 2), (ErrorCode.NONE, 4)]


async def deferred_then_closed(tmp_path: Any) -> int:
    """A request refused early behind a waiting one, then the client goes away before the first is
    answered. Returns the log end offset once the first is answered."""
    replication = UnderMinIsrOnce()
    async with leader_of_orders(tmp_path, replication) as (partition, client, listener):
        first = asyncio.ensure_future(client.request(PRODUCE, VERSION, idempotent_body(0)))
        await replication.until_waits(1)
        replication.refuse_next = True
        second = asyncio.ensure_future(client.request(PRODUCE, VERSION, idempotent_body(2)))
        assert await asyncio.to_thread(replication.refused.wait, WAIT_S), "the second request never looked at"
        await client.close()
        await asyncio.gather(first, second, return_exceptions=True)
        for _ in range(int(WAIT_S / 0.01)):  # until the listener has seen the connection end
            if listener.open_connections == 0:
                break
            await asyncio.sleep(0.01)
        assert listener.open_connections == 0
        answer = replication.waits[0][1]
        if not answer.done():  # the connection's end may have cancelled the first one's wait
            answer.set_result(ErrorCode.NONE)
        await asyncio.sleep(0.1)  # a chance for the second to be decided, which it must not take
        return partition.log_end_offset


def test_a_request_waiting_to_be_decided_is_dropped_when_its_connection_ends(tmp_path):
    # Kafka never reads a request behind a muted connection that closed: only the first is written.
    assert asyncio.run(deferred_then_closed(tmp_path)) == 2
