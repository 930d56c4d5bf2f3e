"""A Kafka endpoint that stores nothing: the ceiling a client sets on this machine.

A producer can only write to something that speaks Kafka, and a consumer only read from it, so
the "plain local TCP sink/source" the broker's throughput is set beside is this: a listener on
127.0.0.1 that answers ApiVersions, Metadata (one broker, one topic of `partitions` partitions), and
InitProducerId like a broker, takes every Produce as written at once and drops the bytes (the
sink), and answers every Fetch from a ready-made encoded answer (the source): the answer to a
request naming the same partitions at the same version is encoded once, and each request only
puts in the batches' base offsets (8 bytes a batch, outside the CRC) for the offset it asks; the
batches themselves are never copied or encoded again (`quorum.wire.spliced`), no file, no index,
no validation. The listener writes the answer with one copy into the socket's buffer.
What a client does against it is what it does against any broker minus the broker's work, so
the gap between the two figures is the broker's cost.

It shares the project's asyncio listener and wire codec with the broker, so the figures also
hold what those cost; a broker cannot be faster than this endpoint, only as fast.
"""

from __future__ import annotations

import asyncio
import threading
import time
from typing import Any

from quorum.broker.metadata import encoded_metadata_response
from quorum.image.image import single_node_image
from quorum.net.dispatch import Dispatcher, Reply
from quorum.server.listener import KafkaListener
from quorum.wire.errors import ErrorCode
from quorum.wire.protocol import APIS, Request
from quorum.wire.records import Compression, Record, build_batch, iter_batches
from quorum.wire.spliced import RebasedBatches, SplicedBody, encode_spliced

PRODUCE, FETCH, LIST_OFFSETS, METADATA, INIT_PRODUCER_ID = 0, 1, 2, 3, 22
EARLIEST, LATEST = -2, -1


def source_batches(message_bytes: int, batch_records: int, batches: int,
                   compression: str = "none") -> tuple[bytearray, list[int]]:
    """`batches` v2 batches of `batch_records` records of `message_bytes` each, from offset 0,
    compressed with `compression` (a librdkafka compression.type), and the position of each batch
    (to rebase them per Fetch)."""
    codec = Compression[compression.upper()]
    value = bytes(message_bytes)
    now = int(time.time() * 1000)
    data = bytearray()
    positions = []
    for number in range(batches):
        base = number * batch_records
        positions.append(len(data))
        data += build_batch([Record(base + i, now, None, value) for i in range(batch_records)], base_offset=base,
                            compression=codec)
    assert len(list(iter_batches(data))) == batches
    return data, positions


class MemoryEndpoint:
    """The sink/source endpoint, served from a thread of its own; `start()` returns its address."""

    def __init__(self, topic: str, message_bytes: int = 1024, batch_records: int = 64, batches: int = 16,
                 end_offset: int = 10**12, partitions: int = 1, compression: str = "none") -> None:
        self.topic = topic
        self.partitions = partitions
        self.end_offset = end_offset
        self.batch_records = batch_records
        template, positions = source_batches(message_bytes, batch_records, batches, compression)
        self._batches = RebasedBatches(bytes(template), positions, batch_records)
        self._answers: dict[tuple[Any, ...], _ReadyAnswer] = {}
        self._image: Any = None
        self._loop = asyncio.new_event_loop()
        self._listener: KafkaListener | None = None
        self._thread = threading.Thread(target=self._loop.run_forever, name="memory-endpoint", daemon=True)
        self.produced_bytes = 0
        self._next_offset = 0

    def start(self) -> str:
        self._thread.start()
        return asyncio.run_coroutine_threadsafe(self._start(), self._loop).result(10)

    def stop(self) -> None:
        if self._listener is not None:
            asyncio.run_coroutine_threadsafe(self._listener.close(), self._loop).result(10)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)

    async def _start(self) -> str:
        dispatcher = Dispatcher()
        for key, handler in ((METADATA, self._metadata), (PRODUCE, self._produce), (FETCH, self._fetch),
                             (LIST_OFFSETS, self._list_offsets), (INIT_PRODUCER_ID, self._init_producer_id)):
            dispatcher.register(key, handler)
        self._listener = KafkaListener(dispatcher, "127.0.0.1", 0)
        await self._listener.start()
        port = self._listener.port
        self._image = single_node_image(1, "127.0.0.1", port, {self.topic: self.partitions})
        return f"127.0.0.1:{port}"

    async def _metadata(self, request: Request) -> Reply:
        return Reply(encoded_metadata_response(self._image, request.body, request.version), request.version)

    async def _init_producer_id(self, request: Request) -> Reply:
        schema = APIS[INIT_PRODUCER_ID].response
        return Reply(schema(throttle_time_ms=0, error_code=ErrorCode.NONE, producer_id=1, producer_epoch=0),
                     request.version)

    async def _produce(self, request: Request) -> Reply | None:
        schema = APIS[PRODUCE].response
        topics = []
        for topic in request.body.topic_data:
            parts = []
            for part in topic.partition_data:
                size = len(part.records or b"")
                self.produced_bytes += size
                count = sum(batch.records_count for batch in iter_batches(part.records or b""))
                parts.append(schema.TopicProduceResponse.PartitionProduceResponse(
                    index=part.index, error_code=ErrorCode.NONE, base_offset=self._next_offset,
                    log_append_time_ms=-1, log_start_offset=0, record_errors=[], error_message=None))
                self._next_offset += count
            topics.append(schema.TopicProduceResponse(name=topic.name, topic_id=getattr(topic, "topic_id", None),
                                                      partition_responses=parts))
        if request.body.acks == 0:
            return None
        return Reply(schema(responses=topics, throttle_time_ms=0), request.version)

    async def _fetch(self, request: Request) -> Reply:
        topics = request.body.topics
        key = (request.version, *((getattr(t, "topic", None), getattr(t, "topic_id", None),
                                   *(p.partition for p in t.partitions)) for t in topics))
        ready = self._answers.get(key)
        if ready is None:
            ready = self._answers[key] = self._ready_answer(request)
        pieces = list(ready.pieces)
        firsts = [p.fetch_offset - p.fetch_offset % self.batch_records for t in topics for p in t.partitions]
        for slot, partition, batch in ready.base_offsets:
            pieces[slot] = RebasedBatches.base_offset(firsts[partition] + batch * self.batch_records)
        return Reply(SplicedBody(pieces), request.version)

    def _ready_answer(self, request: Request) -> _ReadyAnswer:
        """The answer to this request's partitions at its version, encoded once."""
        schema = APIS[FETCH].response
        data = schema.FetchableTopicResponse.PartitionData
        topics = []
        entries = []
        for topic in request.body.topics:
            parts = [data(partition_index=p.partition, error_code=ErrorCode.NONE, high_watermark=self.end_offset,
                          last_stable_offset=self.end_offset, log_start_offset=0, aborted_transactions=None,
                          preferred_read_replica=-1, records=self._batches.records(0))
                     for p in topic.partitions]
            entries.extend(parts)
            topics.append(schema.FetchableTopicResponse(topic=getattr(topic, "topic", None),
                                                        topic_id=getattr(topic, "topic_id", None), partitions=parts))
        where = {id(entry.records.parts[2 * batch]): (number, batch)
                 for number, entry in enumerate(entries) for batch in range(len(self._batches))}
        message = schema(throttle_time_ms=0, error_code=ErrorCode.NONE, session_id=0, responses=topics)
        body = encode_spliced(message, request.version, APIS[FETCH].is_flexible(request.version), entries)
        slots = [(slot, *where[id(piece)]) for slot, piece in enumerate(body.pieces) if id(piece) in where]
        assert len(slots) == len(where), "every batch's base offset is a piece of the encoded answer"
        return _ReadyAnswer(body.pieces, slots)

    async def _list_offsets(self, request: Request) -> Reply:
        schema = APIS[LIST_OFFSETS].response
        part_schema = schema.ListOffsetsTopicResponse.ListOffsetsPartitionResponse
        topics = []
        for topic in request.body.topics:
            parts = [part_schema(partition_index=p.partition_index, error_code=ErrorCode.NONE, timestamp=-1,
                                 offset=0 if p.timestamp == EARLIEST else self.end_offset, leader_epoch=0)
                     for p in topic.partitions]
            topics.append(schema.ListOffsetsTopicResponse(name=topic.name, partitions=parts))
        return Reply(schema(throttle_time_ms=0, topics=topics), request.version)


class _ReadyAnswer:
    """An encoded Fetch answer and where its batches' base offsets are among its pieces:
    (piece index, partition number in the request, batch number)."""

    __slots__ = ("pieces", "base_offsets")

    def __init__(self, pieces: list[Any], base_offsets: list[tuple[int, int, int]]) -> None:
        self.pieces = pieces
        self.base_offsets = base_offsets
