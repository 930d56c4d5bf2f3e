"""The listener's frame reader (`quorum.net.frame_reader`) and the in-place produce path behind it.

The reader is fed the way asyncio's transport feeds it (`get_buffer`, then `buffer_updated` with how
much the kernel wrote), in every chunking that matters: one byte at a time, split in two at every
byte, all at once. A tiny staging buffer makes the small-frame, frame-straddling and own-buffer
paths all short enough to cut everywhere. Then raw Produce frames go through a real listener and a
real partition: the leader now validates and patches the batch inside the request's buffer, so what
the log holds, and what bad batches are answered, must be exactly what the copying path gave.
"""

from __future__ import annotations

import asyncio
import socket
import struct

import pytest
from crc32c import crc32c

from quorum.net.frame_reader import FrameReader
from quorum.wire.errors import ErrorCode, WireError
from quorum.wire.framing import frame
from quorum.wire.protocol import APIS, RequestHeader, decode_response, encode_request
from quorum.wire.records import Record, RecordBatch, build_batch, build_values_batch, iter_batches
from tests.broker.test_produce_clients import ProduceBroker

pytestmark = pytest.mark.timeout(120)

STAGING = 16
PAYLOADS = [b"", b"a", b"0123456789", b"x" * (STAGING - 4), b"y" * (STAGING - 3), b"z" * 40, b"q" * 7, b"w" * 100]
"""Empty, tiny, exactly filling the staging buffer with its prefix, one byte over, and several larger
than the staging buffer (each read into a buffer of its own), between small ones."""
STREAM = b"".join(frame(payload) for payload in PAYLOADS)


def feed(reader: FrameReader, data: bytes) -> None:
    """What the transport does with one `recv_into`: as much of `data` as the offered buffer takes, repeated."""
    while data:
        buffer = reader.get_buffer(-1)
        assert len(buffer) > 0, "the reader offered an empty buffer"
        n = min(len(buffer), len(data))
        buffer[:n] = data[:n]
        reader.buffer_updated(n)
        data = data[n:]


def new_reader(max_frame_bytes: int = 1000, first_frame_bytes: int = 1 << 20) -> FrameReader:
    async def unused(_reader: FrameReader, _writer: asyncio.StreamWriter) -> None:
        raise AssertionError("no connection here")

    return FrameReader(max_frame_bytes, unused, staging_bytes=STAGING, first_frame_bytes=first_frame_bytes)


async def take(reader: FrameReader, count: int) -> list[bytes]:
    frames = []
    for _ in range(count):
        payload = await asyncio.wait_for(reader.next_frame(), 60)
        assert isinstance(payload, bytearray)  # owned and writable: the handler may patch it
        frames.append(bytes(payload))
    return frames


@pytest.mark.parametrize("first_frame_bytes", [1 << 20, 8], ids=["whole-buffer", "growing-buffer"])
def test_frames_reach_the_reader_intact_whatever_the_reads(first_frame_bytes: int) -> None:
    async def run() -> None:
        chunkings = [[STREAM], [STREAM[i:i + 1] for i in range(len(STREAM))]]
        chunkings += [[STREAM[:cut], STREAM[cut:]] for cut in range(1, len(STREAM))]
        chunkings += [[STREAM[:cut], STREAM[cut:cut + 5], STREAM[cut + 5:]] for cut in range(0, len(STREAM) - 5, 3)]
        for chunks in chunkings:
            reader = new_reader(first_frame_bytes=first_frame_bytes)
            for chunk in chunks:
                feed(reader, chunk)
            assert await take(reader, len(PAYLOADS)) == PAYLOADS, [len(c) for c in chunks]
            assert not reader._frames

    asyncio.run(run())


def test_frames_taken_while_reading_go_on_arrive_in_order() -> None:
    async def run() -> None:
        reader = new_reader()
        seen: list[bytes] = []
        for i in range(0, len(STREAM), 9):
            feed(reader, STREAM[i:i + 9])
            while reader._frames:
                seen += await take(reader, 1)
        assert seen == PAYLOADS

    asyncio.run(run())


def test_a_bad_frame_size_comes_after_the_good_frames_before_it() -> None:
    async def run() -> None:
        for bad in (struct.pack(">i", 1001), struct.pack(">i", -1)):
            reader = new_reader(max_frame_bytes=1000)
            feed(reader, frame(b"first") + frame(b"z" * 40) + bad + b"more")
            assert await take(reader, 2) == [b"first", b"z" * 40]
            with pytest.raises(WireError, match="outside 0..1000"):
                await reader.next_frame()
            feed(reader, frame(b"after"))  # what still comes (TLS's buffered bytes) is dropped, nothing redelivered
            assert not reader._frames
            with pytest.raises(WireError, match="outside 0..1000"):
                await reader.next_frame()

    asyncio.run(run())


def test_a_large_declared_size_costs_only_what_the_peer_sent() -> None:
    """A 4-byte prefix declaring 100 MB must not make the node allocate 100 MB: the buffer grows
    with the bytes that arrive (the fuzzer's many connections each declared the maximum)."""
    async def run() -> None:
        declared = 100 * 1024 * 1024
        reader = new_reader(max_frame_bytes=declared, first_frame_bytes=64)
        feed(reader, struct.pack(">i", declared) + b"h" * 20)
        assert reader._frame is not None and len(reader._frame) <= 64
        sent = 20
        for _ in range(12):
            feed(reader, b"b" * 1000)
            sent += 1000
            assert len(reader._frame) <= max(64, 2 * sent), (len(reader._frame), sent)
        assert not reader._frames  # nothing delivered before the declared size has come

    asyncio.run(run())


def test_the_end_of_the_stream_inside_a_frame_is_an_incomplete_read() -> None:
    async def run() -> None:
        for cut in (2, 4 + 5, 4 + 10 + 4 + 20):  # inside a size, a small frame, a large one
            reader = new_reader()
            feed(reader, (frame(b"0123456789") + frame(b"z" * 40))[:cut])
            reader.eof_received()
            if cut > 14:
                assert await take(reader, 1) == [b"0123456789"]
            with pytest.raises(asyncio.IncompleteReadError):
                await reader.next_frame()

    asyncio.run(run())


# -- Produce through a real listener, the batch validated and patched in the request's buffer ------------

TOPIC = "confluent"  # ProduceBroker's topics: 3 partitions each
PRODUCE = APIS[0]
VERSION = 9


def produce_frame(records: bytes, partition: int, correlation_id: int) -> bytes:
    request = PRODUCE.request
    topic = request.TopicProduceData
    body = request(transactional_id=None, acks=1, timeout_ms=30_000, topic_data=[
        topic(name=TOPIC, partition_data=[topic.PartitionProduceData(index=partition, records=records)])])
    return encode_request(PRODUCE, RequestHeader(PRODUCE.key, VERSION, correlation_id, "frame-reader-test"), body)


def exchange(address: tuple[str, int], frames: list[bytes], piece: int | None = None) -> list[object]:
    """Send `frames` (in `piece`-byte sends, or all in one) and read one answer for each."""
    with socket.create_connection(address, timeout=60) as sock:
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        data = b"".join(frames)
        if piece is None:
            sock.sendall(data)
        else:
            for i in range(0, len(data), piece):
                sock.sendall(data[i:i + piece])
        answers = []
        file = sock.makefile("rb")
        for _ in frames:
            (size,) = struct.unpack(">i", file.read(4))
            _, body = decode_response(PRODUCE, VERSION, file.read(size))
            answers.append(body.responses[0].partition_responses[0])
        return answers


def with_crc(batch: bytearray) -> bytes:
    struct.pack_into(">I", batch, 17, crc32c(bytes(batch[21:])))
    return bytes(batch)


def test_produced_batches_are_stored_patched_and_bad_ones_refused_as_before(tmp_path) -> None:
    values = [bytes([i]) * 300 for i in range(200)]  # 60 KB: the frame is read into a buffer of its own
    good = build_values_batch(values, 0, -1, 1_763_700_000_000)
    bad_crc = bytearray(good)
    bad_crc[-1] ^= 0xFF
    bad_count = bytearray(good)
    struct.pack_into(">i", bad_count, 57, len(values) + 1)
    cut_record = bytearray(build_values_batch([b"v" * 10], 0, -1, 1_763_700_000_000))
    cut_record[61] = 0x7E  # the record's length varint: 63, past the end of the body
    idempotent = build_batch([Record(i, 1_763_700_000_000, None, b"idem") for i in range(3)],
                             producer_id=7, producer_epoch=0, base_sequence=0)
    with ProduceBroker(tmp_path) as broker:
        address = ("127.0.0.1", broker.port)
        answers = exchange(address, [produce_frame(good, 0, 1), produce_frame(good, 0, 2)], piece=1000)
        answers += exchange(address, [produce_frame(good, 0, 3)], piece=1)
        assert [(a.error_code, a.base_offset) for a in answers] == [(0, 0), (0, 200), (0, 400)]

        refused = exchange(address, [produce_frame(bytes(bad_crc), 1, 4), produce_frame(with_crc(bad_count), 1, 5),
                                     produce_frame(with_crc(cut_record), 1, 6)])
        assert [a.error_code for a in refused] == [ErrorCode.CORRUPT_MESSAGE, ErrorCode.INVALID_RECORD,
                                                   ErrorCode.INVALID_RECORD]
        assert "CRC mismatch" in refused[0].error_message
        assert "disagrees with the records count" in refused[1].error_message
        assert "records do not decode" in refused[2].error_message

        again = exchange(address, [produce_frame(idempotent, 2, 7), produce_frame(idempotent, 2, 8)])
        assert [(a.error_code, a.base_offset) for a in again] == [(0, 0), (0, 0)]  # the retry is not written twice

        partition = broker.replicas.get(TOPIC, 0)
        assert partition is not None and broker.replicas.get(TOPIC, 1).log.end_offset == 0
        stored = [batch for offset in (0, 200, 400)  # one batch a segment (log.segment.bytes 65536)
                  for batch in iter_batches(partition.log.read(offset, 10_000_000))]
        assert [b.base_offset for b in stored] == [0, 200, 400]
        for batch in stored:  # each patched in place (offset, epoch), its CRC still the producer's
            assert batch.crc == batch.compute_crc() == RecordBatch(good).crc
            assert batch.partition_leader_epoch == partition.leader_epoch
            assert [r.value for r in batch.records()] == values
        assert broker.replicas.get(TOPIC, 2).log.end_offset == 3
