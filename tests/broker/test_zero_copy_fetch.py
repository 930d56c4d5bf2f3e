"""Zero-copy Fetch (issue 20): answers whose records go from the segment files to the socket with
sendfile. What a client reads must be byte for byte what the segments hold: across segment
boundaries, at the size limit (whole batches, the first one whole however large), with fetch
sessions, over TLS (where the spans are read, not sent with sendfile), and when a client goes away
in the middle of an answer (the broker serves on and keeps no descriptor). kafka-python (fetch
sessions), confluent-kafka and kcat read a partition of mixed batches (plain and lz4, small and
10 KiB records) through it.

One in-process broker for the module: a real `Partition` (small segments, so reads cross
segment files) behind the real listener and read path.
"""

from __future__ import annotations

import asyncio
import os
import random
import socket
import ssl
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import OFFSET_BEGINNING, Consumer
from confluent_kafka import TopicPartition as ConfluentPartition
from kafka import KafkaConsumer
from kafka.structs import TopicPartition

from quorum.broker.fetch import register_read_path
from quorum.broker.log_config import LogConfig
from quorum.broker.partition import Partition
from quorum.broker.partition_view import AppendNotifier
from quorum.image.image import single_node_image
from quorum.log.log import Log
from quorum.net.dispatch import Reply
from quorum.net.secure_connection import ListenerSecurity
from quorum.security.certificates import CertificateAuthority
from quorum.server.listener import KafkaListener
from quorum.server.reply_writer import SENDFILE_MIN_BYTES, write_reply
from quorum.server.standalone import metadata_dispatcher
from quorum.wire.framing import RequestHeader
from quorum.wire.protocol import APIS, decode_request, decode_response, encode_request
from quorum.wire.records import Compression, Record, build_batch, iter_batches
from quorum.wire.spliced import FileRecords, ShortSpanError, SplicedBody
from tests.broker.fake_partitions import FakeLookup
from tests.support.background_loop import BackgroundServer

pytestmark = pytest.mark.timeout(180)

TOPIC = "spans"
SEGMENT_BYTES = 256 << 10
FETCH = APIS[1]
T0 = 1_763_700_000_000


def produced_batches(seed: int = 20) -> list[bytes]:
    """Batches as producers send them: 1..40 records of 10 B..10 KiB values, a third lz4."""
    rng = random.Random(seed)
    batches = []
    first = 0
    for _ in range(120):
        count = rng.randint(1, 40)
        size = rng.choice((10, 300, 1024, 10240))
        records = [Record(i, T0 + i, b"k%d" % (first + i), rng.randbytes(size)) for i in range(count)]
        compression = Compression.LZ4 if rng.random() < 0.33 else Compression.NONE
        batches.append(build_batch(records, compression=compression))
        first += count
    return batches


class SpanBroker(BackgroundServer):
    """Node 1 leading `spans`-0, a real partition log of several segments."""

    def __init__(self, directory: Path) -> None:
        super().__init__()
        self.directory = directory
        self.ca = CertificateAuthority(directory / "ca")
        self.values: list[tuple[bytes, bytes]] = []

    async def _serve(self) -> None:
        dispatcher, holder = metadata_dispatcher()
        dispatcher.register(0, self._no_produce)  # librdkafka fetches only from a broker with Produce v3+
        lookup = FakeLookup()
        path = register_read_path(dispatcher, lookup, AppendNotifier(), lambda: holder[0])
        self.fetch = path.fetch
        listener = KafkaListener(dispatcher, "127.0.0.1", 0)
        await listener.start()
        node = self.ca.issue("node-1")
        tls = {"ssl.keystore.location": str(node.pem), "ssl.truststore.location": str(self.ca.cert_path)}
        tls_listener = KafkaListener(dispatcher, "127.0.0.1", 0, security=ListenerSecurity.of(tls, "SSL", "SSL"))
        await tls_listener.start()
        self.tls_port = tls_listener.port
        image = single_node_image(1, "127.0.0.1", listener.port, {TOPIC: 1})
        holder.append(image)
        config = LogConfig(segment_bytes=SEGMENT_BYTES, index_interval_bytes=1024)
        self.partition = Partition(TOPIC, 0, image.topics[TOPIC].topic_id, self.directory / f"{TOPIC}-0", config,
                                   broker_id=1)
        self.partition.update_state(1, 0, (1,))  # the image's leader epoch
        for data in produced_batches():
            self.partition.append_as_leader(data, T0)
        lookup.add(self.partition)  # type: ignore[arg-type]
        self._started(listener.port)
        await self._stop.wait()
        await listener.close()
        await tls_listener.close()
        self.partition.close()

    @staticmethod
    async def _no_produce(request):
        raise AssertionError("a consumer test got a Produce request")

    def segment_bytes(self) -> bytes:
        """Every segment file's bytes, in offset order: what a full read of the log must return."""
        return b"".join(path.read_bytes() for path in sorted(self.partition.log.directory.glob("*.log")))

    def open_fds(self) -> int:
        return len(os.listdir("/proc/self/fd"))


@pytest.fixture(scope="module")
def broker(tmp_path_factory) -> Iterator[SpanBroker]:
    with SpanBroker(tmp_path_factory.mktemp("zero-copy")) as server:
        assert len(list(server.partition.log.directory.glob("*.log"))) >= 5, "the log should span several segments"
        yield server


# -- a raw client: one request, the answer's frame ----------------------------------------------

def fetch_request(version: int, offset: int, partition_max_bytes: int, max_bytes: int = 50 << 20,
                  session_id: int = 0, session_epoch: int = -1, topic_id=None) -> object:
    body = FETCH.request(replica_id=-1, max_wait_ms=0, min_bytes=1, max_bytes=max_bytes, isolation_level=0,
                         session_id=session_id, session_epoch=session_epoch, rack_id="",
                         topics=[FETCH.request.FetchTopic(
                             topic=TOPIC, topic_id=topic_id,
                             partitions=[FETCH.request.FetchTopic.FetchPartition(
                                 partition=0, current_leader_epoch=-1, fetch_offset=offset, last_fetched_epoch=-1,
                                 log_start_offset=-1, partition_max_bytes=partition_max_bytes)])],
                         forgotten_topics_data=[])
    return body


def exchange(sock: socket.socket, version: int, body: object, correlation_id: int = 7) -> object:
    sock.sendall(encode_request(FETCH, RequestHeader(1, version, correlation_id, "zero-copy-test"), body))
    size = int.from_bytes(read_exactly(sock, 4), "big")
    got_id, response = decode_response(FETCH, version, read_exactly(sock, size))
    assert got_id == correlation_id
    return response


def read_exactly(sock: socket.socket, size: int) -> bytes:
    chunks = []
    while size:
        chunk = sock.recv(min(size, 1 << 20))
        assert chunk, "the broker closed the connection"
        chunks.append(chunk)
        size -= len(chunk)
    return b"".join(chunks)


def connect(broker: SpanBroker, tls: bool = False) -> socket.socket:
    if not tls:
        return socket.create_connection(("127.0.0.1", broker.port), timeout=60)
    context = ssl.create_default_context(cafile=str(broker.ca.cert_path))
    return context.wrap_socket(socket.create_connection(("127.0.0.1", broker.tls_port), timeout=60),
                               server_hostname="127.0.0.1")


def read_all(broker: SpanBroker, version: int, partition_max_bytes: int, session: bool = False,
             tls: bool = False) -> list[bytes]:
    """Fetch from offset 0 to the high watermark; each answer's records."""
    answers = []
    offset, session_id, epoch = 0, 0, (0 if session else -1)
    end = broker.partition.high_watermark
    topic_id = broker.partition.topic_id
    with connect(broker, tls) as sock:
        while offset < end:
            body = fetch_request(version, offset, partition_max_bytes, session_id=session_id, session_epoch=epoch,
                                 topic_id=topic_id)
            response = exchange(sock, version, body)
            assert response.error_code == 0
            if session:
                session_id, epoch = response.session_id, epoch + 1
                assert session_id != 0, "the broker made no fetch session"
            (topic,) = response.responses
            (part,) = topic.partitions
            assert part.error_code == 0 and part.high_watermark == end
            records = part.records or b""
            assert records, f"no progress at offset {offset}"
            answers.append(records)
            offset = list(iter_batches(records))[-1].next_offset
    return answers


# -- the log's span is what its read returns ------------------------------------------------------

def test_read_records_spans_what_read_returns(broker):
    log: Log = broker.partition.log
    rng = random.Random(4)
    end = log.end_offset
    for _ in range(400):
        offset = rng.randrange(0, end + 1)
        max_bytes = rng.choice((0, 1, 100, 5000, 40000, 1 << 20))
        upto = rng.choice((None, end, rng.randrange(0, end + 1)))
        span = log.read_records(offset, max_bytes, upto)
        data = span.read() if isinstance(span, FileRecords) else span
        if isinstance(span, FileRecords):
            span.close()
        assert data == log.read(offset, max_bytes, upto), (offset, max_bytes, upto)


# -- what clients read is what the segments hold --------------------------------------------------

@pytest.mark.parametrize(("version", "partition_max_bytes"),
                         [(4, 1 << 20), (11, 3000), (12, 64 << 10), (13, 50_000), (16, 1)])
def test_a_full_read_is_the_segments_byte_for_byte(broker, version, partition_max_bytes):
    answers = read_all(broker, version, partition_max_bytes)
    assert b"".join(answers) == broker.segment_bytes()
    for records in answers:
        batches = list(iter_batches(records))
        assert sum(batch.size_in_bytes for batch in batches) == len(records), "whole batches only"
        assert len(records) <= partition_max_bytes or len(batches) == 1, "past the limit: the first batch alone"


def test_fetch_sessions_read_the_segments_byte_for_byte(broker):
    assert b"".join(read_all(broker, 12, 20_000, session=True)) == broker.segment_bytes()


def test_over_tls_the_spans_are_read_and_clients_get_the_segments_byte_for_byte(broker):
    assert b"".join(read_all(broker, 12, 100_000, tls=True)) == broker.segment_bytes()


def test_a_client_gone_mid_answer_leaves_no_descriptor_and_the_broker_serves_on(broker):
    before = broker.open_fds()
    for _ in range(5):
        sock = socket.socket()
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)  # so the answer cannot all be in flight
        sock.settimeout(60)
        sock.connect(("127.0.0.1", broker.port))
        body = fetch_request(12, 0, 1 << 30, max_bytes=1 << 30)
        sock.sendall(encode_request(FETCH, RequestHeader(1, 12, 1, "gone"), body))
        assert len(sock.recv(1000)) > 0
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00")
        sock.close()  # reset mid-transfer
    deadline = time.monotonic() + 60
    while broker.open_fds() > before and time.monotonic() < deadline:
        time.sleep(0.1)
    assert broker.open_fds() <= before, "waiting for the broker to close the aborted answers' span descriptors"
    assert b"".join(read_all(broker, 12, 1 << 20)) == broker.segment_bytes()


# -- the writer: TLS reads the spans, a span cut short closes the connection ----------------------

class _Sink:
    """A StreamWriter stand-in: what was written, and whether the connection encrypts."""

    def __init__(self, tls: bool) -> None:
        self.tls = tls
        self.written = bytearray()

    def get_extra_info(self, name: str) -> object:
        return object() if name == "ssl_object" and self.tls else None

    def write(self, data: bytes) -> None:
        self.written += data

    async def drain(self) -> None:
        pass


SPAN_SIZES = [pytest.param(8, id="read-and-written"), pytest.param(SENDFILE_MIN_BYTES, id="sendfile")]
"""A span below SENDFILE_MIN_BYTES is read and written with the answer, one at or above it goes through
sendfile(2): each test of the writer runs both ways."""


def _spliced(tmp_path: Path, span_bytes: int = 8) -> tuple[object, SplicedBody, bytes]:
    path = tmp_path / "segment"
    records = (b"records!" * (span_bytes // 8 + 1))[:span_bytes]
    path.write_bytes(b"x" * 100 + records + b"y" * 100)
    fd = os.open(path, os.O_RDONLY)
    request = decode_request(encode_request(FETCH, RequestHeader(1, 12, 9, "t"), fetch_request(12, 0, 1))[4:])
    return request, SplicedBody([b"head", FileRecords(fd, 100, span_bytes), b"tail"]), b"head" + records + b"tail"


def test_a_tls_connection_gets_the_spans_read_and_written(tmp_path):
    request, body, expected = _spliced(tmp_path)
    sink = _Sink(tls=True)
    asyncio.run(write_reply(sink, request, Reply(body, 12)))  # type: ignore[arg-type]
    assert bytes(sink.written).endswith(expected) and len(sink.written) == 4 + 5 + len(expected)
    assert all(span.fd == -1 for span in body.spans())


@pytest.mark.parametrize("span_bytes", SPAN_SIZES)
def test_a_span_cut_short_ends_the_connection(tmp_path, span_bytes):
    request, body, _ = _spliced(tmp_path, span_bytes)
    os.truncate(tmp_path / "segment", 104)

    async def send() -> None:
        server_sock, client_sock = socket.socketpair()
        reader, writer = await asyncio.open_connection(sock=server_sock)
        try:
            await write_reply(writer, request, Reply(body, 12))
        finally:
            writer.close()
            client_sock.close()

    with pytest.raises(ShortSpanError, match="cut while the answer was written"):
        asyncio.run(send())
    assert all(span.fd == -1 for span in body.spans())


# -- real clients ----------------------------------------------------------------------------------

def expected_keys(broker: SpanBroker) -> list[bytes]:
    return [record.key for batch in iter_batches(broker.segment_bytes()) for record in batch]


def test_kafka_python_reads_through_it_with_a_fetch_session(broker):
    want = expected_keys(broker)
    consumer = KafkaConsumer(bootstrap_servers=broker.address, enable_auto_commit=False, fetch_max_wait_ms=200,
                             max_partition_fetch_bytes=100_000, consumer_timeout_ms=30_000)
    got = []
    try:
        partition = TopicPartition(TOPIC, 0)
        consumer.assign([partition])
        consumer.seek(partition, 0)
        deadline = time.monotonic() + 60
        while len(got) < len(want) and time.monotonic() < deadline:
            for records in consumer.poll(timeout_ms=500).values():
                got.extend(r.key for r in records)
    finally:
        consumer.close()
    assert got == want, f"kafka-python read {len(got)} of {len(want)} records within 60 s"


def test_confluent_kafka_reads_through_it(broker):
    want = expected_keys(broker)
    consumer = Consumer({"bootstrap.servers": broker.address, "group.id": "zero-copy", "enable.auto.commit": False,
                         "fetch.wait.max.ms": 200, "max.partition.fetch.bytes": 100_000})
    got = []
    try:
        consumer.assign([ConfluentPartition(TOPIC, 0, OFFSET_BEGINNING)])
        deadline = time.monotonic() + 60
        while len(got) < len(want) and time.monotonic() < deadline:
            message = consumer.poll(0.5)
            if message is not None and not message.error():
                got.append(message.key())
    finally:
        consumer.close()
    assert got == want, f"confluent-kafka read {len(got)} of {len(want)} records within 60 s"


def test_kcat_reads_through_it(broker):
    want = expected_keys(broker)
    out = subprocess.run(["kcat", "-C", "-b", broker.address, "-t", TOPIC, "-p", "0", "-o", "beginning", "-e",
                          "-f", "%k\\n", "-X", "fetch.message.max.bytes=100000"],
                         capture_output=True, timeout=120, check=True).stdout
    assert out.split(b"\n")[:-1] == want
