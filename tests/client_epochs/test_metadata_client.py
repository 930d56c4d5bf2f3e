"""The metadata client against real listeners (KafkaListener + Dispatcher answering Metadata from an
image the test controls): epochs and topic ids read at every negotiated version, brokers rotated
on failure, and KAFKA-6262 played out: a broker answering with an older image is refused by
`refresh_until_current()` until the newer one is served."""

from __future__ import annotations

import logging
import socket
import threading
import uuid
from collections.abc import Iterator, Sequence

import pytest

from client_epochs import (
    BrokerError,
    Epochs,
    MetadataClient,
    MetadataUnavailableError,
    StaleMetadataError,
    TopicPartition,
    parse_bootstrap,
)
from quorum.broker.metadata import encoded_metadata_response
from quorum.image.image import BrokerInfo, MetadataImage, PartitionInfo, TopicInfo
from quorum.net.dispatch import Dispatcher, Reply
from quorum.server.listener import KafkaListener
from quorum.wire.errors import ErrorCode
from quorum.wire.internal_metadata import InternalMetadata
from quorum.wire.protocol import Request
from tests.support.background_loop import BackgroundServer

pytestmark = pytest.mark.timeout(60)

TOPIC = "events"
FIRST_ID, RECREATED_ID = uuid.UUID(int=0xA1), uuid.UUID(int=0xB2)
P0 = TopicPartition(TOPIC, 0)
FAST = {"backoff_s": 0.01, "backoff_max_s": 0.05}  # the tests count refusals, never time them


class Brokers(BackgroundServer):
    """`count` listeners on one loop, broker i answering Metadata as node i+1 from its own script of
    images: each request takes the next image, and the last one stays (deterministic staleness)."""

    def __init__(self, count: int = 1, max_metadata_version: int | None = None) -> None:
        super().__init__()
        self.count = count
        self.max_metadata_version = max_metadata_version
        self.ports: list[int] = []
        self.scripts: list[list[MetadataImage]] = [[] for _ in range(count)]
        self.served: list[int] = [0] * count
        self._lock = threading.Lock()

    async def _serve(self) -> None:
        listeners = []
        for index in range(self.count):
            dispatcher = Dispatcher()
            dispatcher.register(3, self._handler(index), self.max_metadata_version)
            listener = KafkaListener(dispatcher, "127.0.0.1", 0)
            await listener.start()
            listeners.append(listener)
            self.ports.append(listener.port)
        self._started(self.ports[0])
        await self._stop.wait()
        for listener in listeners:
            await listener.close()

    def _handler(self, index: int):
        async def handle(request: Request) -> Reply:
            with self._lock:
                script = self.scripts[index]
                image = script.pop(0) if len(script) > 1 else script[0]
                self.served[index] += 1
            return Reply(encoded_metadata_response(image, request.body, request.version), request.version)
        return handle

    def address_of(self, index: int) -> str:
        return f"127.0.0.1:{self.ports[index]}"

    def serve(self, index: int, *images: MetadataImage) -> None:
        """Broker `index` answers with these images in turn, then keeps the last."""
        with self._lock:
            self.scripts[index] = list(images)

    def image(self, topic_epoch: int, leader_epoch: int, topic_id: uuid.UUID = FIRST_ID, partitions: int = 2,
              leader: int = 1) -> MetadataImage:
        """An image of every broker and one topic whose partitions `leader` leads at these epochs."""
        brokers = {i + 1: BrokerInfo(i + 1, "127.0.0.1", port) for i, port in enumerate(self.ports)}
        replicas = tuple(brokers)
        topic = TopicInfo(TOPIC, topic_id, tuple(PartitionInfo(p, leader, leader_epoch, replicas, replicas)
                                                 for p in range(partitions)), topic_epoch=topic_epoch)
        return MetadataImage(cluster_id="kip-232", controller_id=1, brokers=brokers, topics={TOPIC: topic},
                             topic_epoch=max(topic_epoch, -1))


@pytest.fixture
def broker() -> Iterator[Brokers]:
    with Brokers() as server:
        yield server


@pytest.fixture
def two_brokers() -> Iterator[Brokers]:
    with Brokers(count=2) as server:
        yield server


def client(*addresses: str, **options) -> MetadataClient:
    return MetadataClient(",".join(addresses), **{**FAST, **options})


def test_fetch_reads_leaders_epochs_topic_ids_and_topic_epochs(broker):
    broker.serve(0, broker.image(topic_epoch=7, leader_epoch=4, partitions=3))
    with client(broker.address) as metadata_client:
        got = metadata_client.fetch([TOPIC, "missing"])
    assert got.version == 13 and got.answered_by == broker.address and got.cluster_id == "kip-232"
    assert sorted(got.partitions) == [TopicPartition(TOPIC, p) for p in range(3)]
    meta = got.partitions[TopicPartition(TOPIC, 2)]
    assert (meta.leader_id, meta.leader_epoch, meta.topic_id, meta.topic_epoch) == (1, 4, FIRST_ID, 7)
    assert got.leader(P0).port == broker.ports[0]
    assert got.topic_errors == {"missing": ErrorCode.UNKNOWN_TOPIC_OR_PARTITION}
    assert broker.served[0] == 1


@pytest.mark.parametrize(("cap", "topic_epoch", "topic_id", "leader_epoch"), [
    (13, 7, FIRST_ID, 4),
    (10, 7, FIRST_ID, 4),   # topic ids from v10
    (9, 7, None, 4),        # the topic epoch tag from v9
    (8, -1, None, 4),       # what an old broker gives: leader epochs only (v7+)
    (5, -1, None, -1),      # nothing KIP-232 can use: today's behaviour
])
def test_the_negotiated_version_decides_which_epochs_arrive(cap, topic_epoch, topic_id, leader_epoch):
    with Brokers(max_metadata_version=cap) as broker:
        broker.serve(0, broker.image(topic_epoch=7, leader_epoch=4))
        with client(broker.address) as metadata_client:
            got = metadata_client.fetch([TOPIC])
            again = metadata_client.fetch([TOPIC])  # the same connection: no second ApiVersions
    assert got.version == cap == again.version
    assert got.partitions[P0].epochs == Epochs(topic_epoch, leader_epoch, topic_id)


def test_a_broker_with_stale_metadata_is_refused_until_it_catches_up(broker):
    """KAFKA-6262 on one broker: after the client saw leader epoch 5, the broker answers from an image
    with leader epoch 3 (it missed the election); the client must not take it."""
    broker.serve(0, broker.image(topic_epoch=2, leader_epoch=5))
    metadata_client = client(broker.address)
    assert metadata_client.refresh_until_current([TOPIC]).partitions[P0].leader_epoch == 5
    assert metadata_client.refusals == 0

    stale = broker.image(topic_epoch=2, leader_epoch=3)
    broker.serve(0, stale)
    with pytest.raises(StaleMetadataError) as caught:
        metadata_client.refresh_until_current([TOPIC], timeout=0.3)
    assert caught.value.broker == broker.address
    assert P0 in {s.partition for s in caught.value.verdict.outdated}
    assert f"broker {broker.address}" in str(caught.value) and "leader_epoch 3" in str(caught.value)
    assert metadata_client.refusals == caught.value.refusals >= 1
    assert metadata_client.cache.get(P0).leader_epoch == 5, "the cache kept its view"

    refused_before, served_before = metadata_client.refusals, broker.served[0]
    broker.serve(0, stale, stale, broker.image(topic_epoch=2, leader_epoch=6))
    got = metadata_client.refresh_until_current([TOPIC], timeout=30)
    assert got.partitions[P0].leader_epoch == 6 and metadata_client.cache.get(P0).leader_epoch == 6
    # Every stale answer this refresh received was refused. On a loaded machine the request the 0.3 s
    # refresh gave up on may reach the broker only now and take one of the stale answers: not this refresh's.
    refused = metadata_client.refusals - refused_before
    late = broker.served[0] - served_before - refused - 1
    assert refused + late == 2 and late in (0, 1), (refused, late)
    metadata_client.close()


def test_a_higher_topic_epoch_wins_over_a_higher_leader_epoch(broker):
    """A recreated topic starts its leader epochs again: topic epoch first, as KIP-232 orders them."""
    broker.serve(0, broker.image(topic_epoch=2, leader_epoch=9),
                 broker.image(topic_epoch=3, leader_epoch=0, topic_id=RECREATED_ID),
                 broker.image(topic_epoch=2, leader_epoch=9),  # a broker that missed the recreation
                 broker.image(topic_epoch=3, leader_epoch=1, topic_id=RECREATED_ID))
    with client(broker.address) as metadata_client:
        metadata_client.refresh_until_current([TOPIC])
        assert metadata_client.refresh_until_current([TOPIC]).partitions[P0].topic_id == RECREATED_ID
        got = metadata_client.refresh_until_current([TOPIC])
    assert got.partitions[P0].epochs == Epochs(3, 1, RECREATED_ID)
    assert metadata_client.refusals == 1


def test_committed_epochs_are_floors(broker):
    """KIP-232's seek variant: a fresh client whose offsets were committed under leader epoch 5
    refuses a broker still at 3, with nothing in its cache yet."""
    broker.serve(0, broker.image(topic_epoch=2, leader_epoch=3), broker.image(topic_epoch=2, leader_epoch=3),
                 broker.image(topic_epoch=2, leader_epoch=5))
    floors = {P0: InternalMetadata(topic_epoch=2, leader_epoch=5), TopicPartition(TOPIC, 1): Epochs(-1, -1)}
    with client(broker.address) as metadata_client:
        got = metadata_client.refresh_until_current([], floors=floors)
    assert got.partitions[P0].leader_epoch == 5
    assert metadata_client.refusals == 2
    assert str(metadata_client.last_refusal[1].outdated[0]).startswith(f"{P0}: offered (topic_epoch 2, leader_epoch 3)")


def test_a_committed_partition_the_broker_does_not_know_is_not_current(broker):
    broker.serve(0, broker.image(topic_epoch=2, leader_epoch=5, partitions=2))
    beyond = TopicPartition(TOPIC, 5)
    with client(broker.address) as metadata_client, pytest.raises(StaleMetadataError) as caught:
        metadata_client.refresh_until_current([TOPIC], floors={beyond: Epochs(4, 0)}, timeout=0.3)
    assert caught.value.verdict.missing == (beyond,) and not caught.value.verdict.outdated


def test_apache_kafka_fallback_topic_ids_and_leader_epochs(broker, caplog):
    """No topic epoch (an Apache Kafka cluster reads as -1): a new topic id is a recreated topic, so
    its low leader epoch is taken, and the retired id is refused when a lagging broker serves it."""
    broker.serve(0, broker.image(topic_epoch=-1, leader_epoch=7),
                 broker.image(topic_epoch=-1, leader_epoch=0, topic_id=RECREATED_ID),
                 broker.image(topic_epoch=-1, leader_epoch=7),
                 broker.image(topic_epoch=-1, leader_epoch=1, topic_id=RECREATED_ID))
    with caplog.at_level(logging.WARNING, logger="client_epochs"), client(broker.address) as metadata_client:
        assert metadata_client.refresh_until_current([TOPIC]).partitions[P0].topic_epoch == -1
        assert metadata_client.refresh_until_current([TOPIC]).partitions[P0].topic_id == RECREATED_ID
        got = metadata_client.refresh_until_current([TOPIC])
    assert got.partitions[P0].epochs == Epochs(-1, 1, RECREATED_ID)
    assert metadata_client.refusals == 1
    fallback = [r for r in caplog.records if "no KIP-232 topic epoch" in r.getMessage()]
    assert len(fallback) == 1 and broker.address in fallback[0].getMessage()


def test_a_stale_broker_is_left_for_the_next_one(two_brokers):
    """KAFKA-6262 with two brokers: broker 1 lags, broker 2 is current; the client is refused by the
    first and takes the second's answer."""
    two_brokers.serve(0, two_brokers.image(topic_epoch=4, leader_epoch=2))
    two_brokers.serve(1, two_brokers.image(topic_epoch=4, leader_epoch=3, leader=2))
    with client(two_brokers.address_of(0), two_brokers.address_of(1)) as metadata_client:
        got = metadata_client.refresh_until_current([TOPIC], floors={P0: InternalMetadata(4, 3)})
    assert got.answered_by == two_brokers.address_of(1) and got.partitions[P0].leader_id == 2
    assert metadata_client.refusals == 1 and metadata_client.last_refusal[0] == two_brokers.address_of(0)


def test_brokers_named_in_responses_join_the_rotation(two_brokers):
    for index in (0, 1):
        two_brokers.serve(index, two_brokers.image(topic_epoch=1, leader_epoch=0))
    with client(two_brokers.address_of(0)) as metadata_client:
        metadata_client.fetch([TOPIC])
        assert metadata_client.brokers == [two_brokers.address_of(0), two_brokers.address_of(1)]


def test_fetch_from_each_asks_every_broker_once_the_named_ones_too_and_skips_a_dead_one(two_brokers):
    """For a caller that compares views (the Spark sink's tail scan): the bootstrap broker's answer names
    the second broker, which is asked too; a dead bootstrap address only adds a failure."""
    two_brokers.serve(0, two_brokers.image(topic_epoch=1, leader_epoch=0))
    two_brokers.serve(1, two_brokers.image(topic_epoch=2, leader_epoch=3, partitions=3))
    with client(f"127.0.0.1:{closed_port()}", two_brokers.address_of(0)) as metadata_client:
        answers = metadata_client.fetch_from_each([TOPIC], timeout=10)
    assert [a.answered_by for a in answers] == [two_brokers.address_of(0), two_brokers.address_of(1)]
    assert [len(a.partitions_of(TOPIC)) for a in answers] == [2, 3]
    assert two_brokers.served == [1, 1]
    with client(f"127.0.0.1:{closed_port()}") as nobody, pytest.raises(MetadataUnavailableError):
        nobody.fetch_from_each([TOPIC], timeout=5)


def closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def test_a_dead_broker_is_skipped(broker):
    broker.serve(0, broker.image(topic_epoch=1, leader_epoch=0))
    dead = f"127.0.0.1:{closed_port()}"
    with client(dead, broker.address) as metadata_client:
        assert metadata_client.fetch([TOPIC]).answered_by == broker.address


def test_no_broker_answering_names_every_broker():
    dead = [f"127.0.0.1:{closed_port()}", f"127.0.0.1:{closed_port()}"]
    with client(*dead) as metadata_client, pytest.raises(MetadataUnavailableError) as caught:
        metadata_client.fetch([TOPIC])
    assert [failure.address for failure in caught.value.failures] == dead
    assert all(address in str(caught.value) for address in dead)
    with pytest.raises(MetadataUnavailableError):
        metadata_client.refresh_until_current([TOPIC], timeout=0.2)


class RawBroker:
    """A socket that accepts and then says nothing, or answers every request with `reply`."""

    def __init__(self, reply: bytes | None) -> None:
        self._sock = socket.create_server(("127.0.0.1", 0))
        self.address = f"127.0.0.1:{self._sock.getsockname()[1]}"
        self._reply = reply
        self._peers: list[socket.socket] = []
        threading.Thread(target=self._run, daemon=True).start()

    def _run(self) -> None:
        while True:
            try:
                peer, _ = self._sock.accept()
            except OSError:
                return
            self._peers.append(peer)
            if self._reply is not None:
                threading.Thread(target=self._answer, args=(peer,), daemon=True).start()

    def _answer(self, peer: socket.socket) -> None:
        try:
            while peer.recv(65536):
                peer.sendall(self._reply)
        except OSError:
            pass

    def close(self) -> None:
        self._sock.close()
        for peer in self._peers:
            peer.close()


@pytest.mark.parametrize(("reply", "reason"), [
    (None, "got no answer in time"),
    (b"\x00\x00\x00\x02xx", "unreadable"),
])
def test_a_silent_or_garbled_broker_is_a_clear_error(reply, reason):
    raw = RawBroker(reply)
    try:
        with client(raw.address, request_timeout_s=0.3) as metadata_client, \
                pytest.raises(MetadataUnavailableError) as caught:
            metadata_client.fetch([TOPIC])
    finally:
        raw.close()
    (failure,) = caught.value.failures
    assert isinstance(failure, BrokerError) and failure.address == raw.address
    assert reason in str(caught.value) and "ApiVersions" in str(caught.value)


@pytest.mark.parametrize(("bootstrap", "expected"), [
    ("a:9092", [("a", 9092)]),
    (" a:1, b:2 ,", [("a", 1), ("b", 2)]),
    ("[::1]:9092", [("::1", 9092)]),
])
def test_bootstrap_lists(bootstrap: str, expected: Sequence[tuple[str, int]]):
    assert parse_bootstrap(bootstrap) == expected


@pytest.mark.parametrize("bootstrap", ["", " , ", "a", "a:", ":9092", "a:b", "a:0", "a:70000"])
def test_bad_bootstrap_lists_are_refused(bootstrap: str):
    with pytest.raises(ValueError, match="bootstrap"):
        MetadataClient(bootstrap)
