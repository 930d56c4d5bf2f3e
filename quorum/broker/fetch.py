"""Fetch (API key 1) for consumers: record batches from the partitions this broker leads.

What a consumer sees is what Kafka's ReplicaManager.fetchMessages gives it:

* Long poll: the answer leaves at once when it holds MinBytes of records, when a partition has an
  error or a diverging epoch, or when MaxWaitMs is 0; otherwise the request waits on the `AppendNotifier` and looks
  again whenever a partition it reads moved, until MaxWaitMs is over.
* Per partition, in Kafka's order: UNKNOWN_TOPIC_OR_PARTITION (by name) or UNKNOWN_TOPIC_ID (v13+
  name topics by id), NOT_LEADER_OR_FOLLOWER, FENCED_LEADER_EPOCH / UNKNOWN_LEADER_EPOCH against
  CurrentLeaderEpoch (-1 skips the check), OFFSET_OUT_OF_RANGE below the log start or past the log
  end. A fetch offset between the high watermark and the log end is valid and returns nothing yet.
* KIP-320 truncation detection (v12+): when the request's LastFetchedEpoch ended, in this log,
  before the fetch offset (or the log knows a smaller epoch only), the answer carries no records
  and a DivergingEpoch (that epoch and its end offset), so the consumer can go back to where the
  logs agree instead of reading past a truncation; an epoch the log does not know at all is
  OFFSET_OUT_OF_RANGE. Checked before the offset range, as Kafka's Partition.readRecords does.
* Consumers read up to the high watermark (READ_UNCOMMITTED) or the last stable offset
  (READ_COMMITTED); every answer carries both and the log start offset. An error answer carries
  -1 for all three and no records, as Kafka's FetchResponse.partitionResponse does.
* Size: PartitionMaxBytes per partition and MaxBytes for the response, partitions read in request
  (or session) order; KIP-74: the first batch of the first partition with records is returned
  whole even when larger than either limit, so a consumer always progresses; later partitions get
  only whole batches that fit what is left.
* KIP-227 sessions (`quorum.broker.fetch_sessions`): which partitions are read and answered.
* Zero copy, as Kafka's FileRecords: a partition's batches are a span of its segment file
  (`ServedPartition.read_records`), found from the indexes and a few batch headers, never read;
  the answer is a `quorum.wire.spliced.SplicedBody` whose spans the listener sends with
  sendfile (`quorum.server.reply_writer`). Followers' fetches take the same path. Batches read
  from the remote tier are views of its cached chunks (`BufferRecords`), written to the socket
  as they are, never copied into the encoded answer.
* KIP-951 (v16+): a NOT_LEADER_OR_FOLLOWER or FENCED_LEADER_EPOCH answer names the current leader
  and its endpoint from the metadata image, so the client can move without a Metadata round trip.

Fetches from follower replicas (ReplicaId >= 0, KIP-903's ReplicaState from v15) are full and
sessionless, as this cluster's fetchers send them. They read up to the log end offset rather than
the high watermark, and every read served without an error or a DivergingEpoch is reported to the
leader's ISR tracker (`FollowerFetchReporter`, with the log end offset as it was at the read),
which moves the high watermark and the ISR; a broker without replication wired in answers them
NOT_LEADER_OR_FOLLOWER.
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from quorum.broker.fetch_resolve import ImageProvider, leader_partition
from quorum.broker.fetch_sessions import (
    FetchPosition,
    FetchSessionCache,
    PartitionKey,
    PartitionOutcome,
)
from quorum.broker.list_offsets import ListOffsetsHandler
from quorum.broker.log_answers import EpochEndOffset, OffsetOutOfRange
from quorum.broker.partition_view import AppendNotifier, PartitionLookup, ServedPartition
from quorum.broker.remote_tier_plugin import RemoteReadError, RemoteTier
from quorum.image.image import MetadataImage
from quorum.net.dispatch import Dispatcher, Reply
from quorum.net.request_times import mark_local_complete
from quorum.security.acl import AclOperation
from quorum.security.authorization import refused
from quorum.wire.errors import ErrorCode
from quorum.wire.protocol import APIS, Request
from quorum.wire.spliced import BufferRecords, FileRecords, encode_spliced

log = logging.getLogger(__name__)

FETCH = APIS[1]
_Response = FETCH.response
_Topic = _Response.FetchableTopicResponse
_Partition = _Topic.PartitionData
_Endpoint = _Response.NodeEndpoint

TOPIC_ID_VERSION = 13
"""Fetch v13+ (KIP-516) names topics by id."""
REPLICA_STATE_VERSION = 15
"""Fetch v15+ (KIP-903) moves ReplicaId into the tagged ReplicaState."""
LEADER_DISCOVERY_VERSION = 16
"""Fetch v16+ (KIP-951) answers leadership errors with the current leader and its endpoint."""
READ_COMMITTED = 1
CONSUMER_REPLICA_ID = -1
_ZERO_UUID = uuid.UUID(int=0)
_LEADERSHIP_ERRORS = (ErrorCode.NOT_LEADER_OR_FOLLOWER, ErrorCode.FENCED_LEADER_EPOCH)


def wall_clock_ms() -> int:
    return int(time.time() * 1000)


class FollowerFetchReporter(Protocol):
    """The leader side of replication, told of every follower read the Fetch handler serves."""

    def follower_fetched(self, partition: Any, replica_id: int, fetch_offset: int, log_start_offset: int,
                         broker_epoch: int, leader_log_end: int) -> int:
        """NONE, or the error to answer the partition with instead (NOT_LEADER_OR_FOLLOWER)."""
        ...

    def follower_answered(self, partition: Any, replica_id: int) -> None:
        """Records were read for the follower's fetch: its answer carries them (timings only)."""
        ...


@dataclass(frozen=True, slots=True)
class ReplicaFetch:
    """Who is fetching: a follower broker and its registration epoch (-1 before Fetch v15)."""

    replica_id: int
    broker_epoch: int


@dataclass(frozen=True, slots=True)
class PartitionRead:
    """One partition's answer: an error, or its offsets and the batches read."""

    error_code: int
    high_watermark: int = -1
    last_stable_offset: int = -1
    log_start_offset: int = -1
    records: bytes | FileRecords | BufferRecords = b""
    """The batches read: bytes, a span of a segment file the answer sends without reading it, or
    buffers (a remote read's views of its cached chunks) the answer sends without copying them."""
    diverging: EpochEndOffset | None = None
    remote: ServedPartition | None = None
    """Set when the records are only in the remote tier: the partition to read them from there."""
    fetch_offset: int = -1

    def outcome(self) -> PartitionOutcome:
        return PartitionOutcome(self.error_code, self.high_watermark, self.last_stable_offset,
                                self.log_start_offset, len(self.records), self.diverging is not None)


def read_partition(partition: ServedPartition, position: FetchPosition, read_committed: bool,
                   max_bytes: int, first: bool, to_log_end: bool = False) -> PartitionRead:
    """Batches from `position.fetch_offset` up to the high watermark (or last stable offset; the
    log end offset for a follower, `to_log_end`), at most `max_bytes` unless `first` (KIP-74: the
    first batch of a response is returned whole). The partition is one this broker may answer for."""
    offset = position.fetch_offset
    log_start = partition.log_start_offset
    high_watermark = partition.high_watermark
    last_stable = partition.last_stable_offset
    if position.last_fetched_epoch >= 0:
        end = partition.end_offset_for_epoch(position.last_fetched_epoch)
        if end.leader_epoch < 0 or end.end_offset < 0:
            return PartitionRead(ErrorCode.OFFSET_OUT_OF_RANGE)
        if end.leader_epoch < position.last_fetched_epoch or end.end_offset < offset:
            return PartitionRead(ErrorCode.NONE, high_watermark, last_stable, log_start, diverging=end)
    remote = partition.remote
    if remote is not None and not remote.ever_loaded and offset < partition.local_log_start_offset:
        # Where the log starts is not known until the remote metadata is read (just after a
        # start-up): never answer OFFSET_OUT_OF_RANGE, which would send a consumer to the wrong end.
        if to_log_end:
            return PartitionRead(ErrorCode.OFFSET_MOVED_TO_TIERED_STORAGE, high_watermark, last_stable, log_start)
        return PartitionRead(ErrorCode.KAFKA_STORAGE_ERROR)
    if offset < log_start or offset > partition.log_end_offset:
        return PartitionRead(ErrorCode.OFFSET_OUT_OF_RANGE)
    if offset < partition.local_log_start_offset:
        # KIP-405: only in the remote tier. A follower is told so (it rebuilds its log from the
        # remote tier); a consumer gets the records, read from the remote segment.
        if to_log_end:
            return PartitionRead(ErrorCode.OFFSET_MOVED_TO_TIERED_STORAGE, high_watermark, last_stable, log_start)
        return PartitionRead(ErrorCode.NONE, high_watermark, last_stable, log_start, remote=partition,
                             fetch_offset=offset)
    upto = partition.log_end_offset if to_log_end else last_stable if read_committed else high_watermark
    records: bytes | FileRecords = b""
    if offset < upto and (first or max_bytes > 0):
        try:
            records = partition.read_records(offset, max_bytes, upto)
        except OffsetOutOfRange:
            return PartitionRead(ErrorCode.OFFSET_OUT_OF_RANGE)
        if not first and len(records) > max_bytes:
            if isinstance(records, FileRecords):
                records.close()
            records = b""  # only the response's first batch may exceed the limit
    return PartitionRead(ErrorCode.NONE, high_watermark, last_stable, log_start, records)


def requested_positions(body: Any, version: int) -> tuple[dict[PartitionKey, FetchPosition], list[PartitionKey]]:
    """The partitions a request names (in order, a repeated one keeping its last position) and the
    ones it forgets, keyed by topic name before v13 and by topic id from v13 on."""
    by_id = version >= TOPIC_ID_VERSION
    fetch: dict[PartitionKey, FetchPosition] = {}
    for topic in body.topics:
        name = topic.topic_id if by_id else topic.topic
        for p in topic.partitions:
            fetch[(name, p.partition)] = FetchPosition(p.fetch_offset, max(p.partition_max_bytes, 0),
                                                       p.current_leader_epoch, p.last_fetched_epoch,
                                                       p.log_start_offset)
    forgotten = [(topic.topic_id if by_id else topic.topic, index)
                 for topic in body.forgotten_topics_data or () for index in topic.partitions]
    return fetch, forgotten


def replica_id(body: Any, version: int) -> int:
    if version >= REPLICA_STATE_VERSION:
        state = body.replica_state
        return CONSUMER_REPLICA_ID if state is None else state.replica_id
    return body.replica_id


def replica_epoch(body: Any, version: int) -> int:
    """KIP-903's ReplicaEpoch (the follower's broker epoch); -1 before v15 or when not sent."""
    if version >= REPLICA_STATE_VERSION and body.replica_state is not None:
        return body.replica_state.replica_epoch
    return -1


class FetchHandler:
    """Answers Fetch requests from the partitions `lookup` finds, waiting on `notifier`.

    `image` gives the broker's current metadata image (to tell an unknown partition from one led
    elsewhere, and to name the leader in KIP-951 answers); `clock_ms` is the wall clock the
    session cache is driven with.
    """

    def __init__(self, lookup: PartitionLookup, notifier: AppendNotifier, image: ImageProvider,
                 sessions: FetchSessionCache | None = None, clock_ms: Callable[[], int] = wall_clock_ms,
                 replication: FollowerFetchReporter | None = None, remote: RemoteTier | None = None) -> None:
        self._lookup = lookup
        self._notifier = notifier
        self._image = image
        self.sessions = sessions if sessions is not None else FetchSessionCache()
        self._clock_ms = clock_ms
        self._replication = replication
        self._remote = remote

    async def handle(self, request: Request) -> Reply:
        body, version = request.body, request.version
        fetch, forgotten = requested_positions(body, version)
        follower = replica_id(body, version)
        if follower >= 0:
            if self._replication is None:
                reads = {key: PartitionRead(ErrorCode.NOT_LEADER_OR_FOLLOWER) for key in fetch}
            else:
                reads = await self._long_poll(list(fetch.items()), body,
                                              ReplicaFetch(follower, replica_epoch(body, version)))
            return Reply(self._response(version, 0, list(fetch), reads, body.isolation_level), version)
        context = self.sessions.new_context(body.session_id, body.session_epoch, fetch, forgotten,
                                            uses_topic_ids=version >= TOPIC_ID_VERSION, now_ms=self._clock_ms())
        if context.error_code != ErrorCode.NONE:
            return Reply(_Response(throttle_time_ms=0, error_code=context.error_code, session_id=0, responses=[]),
                         version)
        denied = refused(AclOperation.READ, (key[0] for key, _ in context.partitions))  # issue 18: READ topic
        reads = await self._long_poll([item for item in context.partitions if item[0][0] not in denied]
                                      if denied else context.partitions, body)
        if denied:
            reads.update({key: PartitionRead(ErrorCode.TOPIC_AUTHORIZATION_FAILED) for key, _ in context.partitions
                          if key[0] in denied})
        session_id, named = context.complete({key: read.outcome() for key, read in reads.items()}, self._clock_ms())
        return Reply(self._response(version, session_id, named, reads, body.isolation_level), version)

    async def _long_poll(self, partitions: list[tuple[PartitionKey, FetchPosition]], body: Any,
                         replica: ReplicaFetch | None = None) -> dict[PartitionKey, PartitionRead]:
        if not partitions:
            # Kafka's ReplicaManager.fetchMessages answers at once when nothing is left to read: a fetch
            # whose partitions were all refused (ACLs) must not wait out MaxWaitMs for data it cannot get.
            return {}
        loop = asyncio.get_running_loop()
        deadline = loop.time() + max(body.max_wait_ms, 0) / 1000
        marks = self._marks(partitions)
        reads = self._read_all(partitions, body, replica)
        while not _enough(reads.values(), body.min_bytes):
            remaining = deadline - loop.time()
            if remaining <= 0:
                break
            mark_local_complete()  # the long poll: Kafka's RemoteTimeMs (a fetch in its purgatory)
            await self._notifier.wait(remaining)
            # Reads are synchronous, so nothing appends between a look and the next wait: no
            # wake-up is lost. Read again only when something this request reads has moved.
            now_marks = self._marks(partitions)
            if now_marks != marks:
                marks = now_marks
                reads = self._read_all(partitions, body, replica)
        if any(read.remote is not None for read in reads.values()):
            reads = await self._read_remote(partitions, reads, body)
        return reads

    async def _read_remote(self, partitions: list[tuple[PartitionKey, FetchPosition]],
                           reads: dict[PartitionKey, PartitionRead], body: Any) -> dict[PartitionKey, PartitionRead]:
        """Fill the reads that wait for the remote tier (Kafka's DelayedRemoteFetch), within what
        is left of the response's MaxBytes; a failed remote read is KAFKA_STORAGE_ERROR, which
        consumers retry, never wrong or partial data."""
        remaining = max(body.max_bytes, 0) - sum(len(read.records) for read in reads.values())
        first = not any(read.records for read in reads.values())
        done = dict(reads)
        for key, position in partitions:
            read = reads[key]
            if read.remote is None:
                continue
            partition = read.remote
            max_bytes = min(position.partition_max_bytes, max(remaining, 0))
            records: BufferRecords | bytes = b""
            error = ErrorCode.NONE
            if self._remote is None:
                error = ErrorCode.KAFKA_STORAGE_ERROR
            elif first or max_bytes > 0:
                try:
                    records = await self._remote.read(partition, read.fetch_offset, max_bytes)
                except RemoteReadError as exc:
                    log.warning("%s-%d: remote read at offset %d failed: %s", partition.topic, partition.partition,
                                read.fetch_offset, exc)  # fmt: skip
                    error = ErrorCode.KAFKA_STORAGE_ERROR
                if not first and len(records) > max_bytes:
                    records = b""
            done[key] = (PartitionRead(error) if error != ErrorCode.NONE else
                         PartitionRead(ErrorCode.NONE, read.high_watermark, read.last_stable_offset,
                                       read.log_start_offset, records))  # fmt: skip
            if records:
                first = False
                remaining -= len(records)
        return done

    def _marks(self, partitions: list[tuple[PartitionKey, FetchPosition]]) -> list[tuple[Any, ...]]:
        """What would change a read: leadership, epoch and offsets of each partition."""
        marks: list[tuple[Any, ...]] = []
        for (topic, index), _ in partitions:
            p = (self._lookup.get_by_id(topic, index) if isinstance(topic, uuid.UUID)
                 else self._lookup.get(topic, index))  # fmt: skip
            marks.append(() if p is None else (id(p), p.is_leader, p.leader_epoch, p.log_start_offset,
                                               p.log_end_offset, p.high_watermark, p.last_stable_offset))
        return marks

    def _read_all(self, partitions: list[tuple[PartitionKey, FetchPosition]], body: Any,
                  replica: ReplicaFetch | None = None) -> dict[PartitionKey, PartitionRead]:
        image = self._image()
        read_committed = body.isolation_level == READ_COMMITTED
        remaining = max(body.max_bytes, 0)
        first = True
        reads: dict[PartitionKey, PartitionRead] = {}
        for key, position in partitions:
            topic, index = key
            partition, error = leader_partition(self._lookup, image, topic, index, position.current_leader_epoch)
            if partition is None:
                reads[key] = PartitionRead(error)
                continue
            log_end = partition.log_end_offset
            try:
                read = read_partition(partition, position, read_committed,
                                      min(position.partition_max_bytes, remaining), first, replica is not None)
            except OSError:
                log.exception("reading %s-%d at offset %d", partition.topic, index, position.fetch_offset)
                read = PartitionRead(ErrorCode.KAFKA_STORAGE_ERROR)
            if replica is not None and read.error_code == ErrorCode.NONE and read.diverging is None:
                assert self._replication is not None
                error = self._replication.follower_fetched(partition, replica.replica_id, position.fetch_offset,
                                                           position.log_start_offset, replica.broker_epoch, log_end)
                if error != ErrorCode.NONE:
                    read = PartitionRead(error)
                elif read.records:
                    self._replication.follower_answered(partition, replica.replica_id)
            reads[key] = read
            if read.records:
                first = False
                remaining = max(0, remaining - len(read.records))
        return reads

    def _response(self, version: int, session_id: int, named: list[PartitionKey],
                  reads: Mapping[PartitionKey, PartitionRead], isolation_level: int) -> Any:
        by_id = version >= TOPIC_ID_VERSION
        discover = version >= LEADER_DISCOVERY_VERSION
        image = self._image() if discover else None
        endpoints: dict[int, Any] = {}
        topics: list[Any] = []
        spliced: list[Any] = []  # the entries whose records are file spans or buffers, in encoding order
        previous: str | uuid.UUID | None = None
        for key in named:
            topic, index = key
            read = reads[key]
            if not topics or topic != previous:
                topics.append(_Topic(topic="" if by_id else topic, topic_id=topic if by_id else _ZERO_UUID,
                                     partitions=[]))
                previous = topic
            entry = _Partition(partition_index=index, error_code=read.error_code, high_watermark=read.high_watermark,
                               last_stable_offset=read.last_stable_offset, log_start_offset=read.log_start_offset,
                               aborted_transactions=[] if isolation_level == READ_COMMITTED else None,
                               preferred_read_replica=-1, records=read.records)
            if isinstance(read.records, (FileRecords, BufferRecords)):
                spliced.append(entry)
            if read.diverging is not None:
                entry.diverging_epoch = _Partition.EpochEndOffset(epoch=read.diverging.leader_epoch,
                                                                  end_offset=read.diverging.end_offset)
            if image is not None and read.error_code in _LEADERSHIP_ERRORS:
                entry.current_leader = _current_leader(image, topic, index, endpoints)
            topics[-1].partitions.append(entry)
        response = _Response(throttle_time_ms=0, error_code=ErrorCode.NONE, session_id=session_id, responses=topics,
                             node_endpoints=list(endpoints.values()))
        if not spliced:
            return response
        return encode_spliced(response, version, FETCH.is_flexible(version), spliced)


def _enough(reads: Iterable[PartitionRead], min_bytes: int) -> bool:
    total = 0
    for read in reads:
        if read.error_code != ErrorCode.NONE or read.diverging is not None or read.remote is not None:
            return True
        total += len(read.records)
    return total >= min_bytes


def _current_leader(image: MetadataImage, topic: str | uuid.UUID, index: int, endpoints: dict[int, Any]) -> Any:
    """KIP-951: the partition's leader and epoch as the image knows them (-1, -1 when it does not),
    adding the leader's endpoint to `endpoints`."""
    info = image.topic_by_id(topic) if isinstance(topic, uuid.UUID) else image.topics.get(topic)
    found = None if info is None else next((p for p in info.partitions if p.partition == index), None)
    if found is None:
        return _Partition.LeaderIdAndEpoch(leader_id=-1, leader_epoch=-1)
    broker = image.brokers.get(found.leader)
    if broker is None:
        return _Partition.LeaderIdAndEpoch(leader_id=-1, leader_epoch=found.leader_epoch)
    endpoints[broker.node_id] = _Endpoint(node_id=broker.node_id, host=broker.host, port=broker.port, rack=broker.rack)
    return _Partition.LeaderIdAndEpoch(leader_id=broker.node_id, leader_epoch=found.leader_epoch)


FETCH_KEY = 1
LIST_OFFSETS_KEY = 2
OFFSET_FOR_LEADER_EPOCH_KEY = 23


@dataclass(frozen=True, slots=True)
class ReadPath:
    """The read path's handlers, kept by the node (the session cache lives in `fetch.sessions`)."""

    fetch: FetchHandler
    offsets: ListOffsetsHandler


def register_read_path(dispatcher: Dispatcher, lookup: PartitionLookup, notifier: AppendNotifier,
                       image_provider: ImageProvider, sessions: FetchSessionCache | None = None,
                       clock_ms: Callable[[], int] = wall_clock_ms,
                       replication: FollowerFetchReporter | None = None, remote: RemoteTier | None = None) -> ReadPath:
    """Serve Fetch, ListOffsets and OffsetForLeaderEpoch on `dispatcher` from the partitions
    `lookup` finds; `notifier` wakes waiting fetches, `image_provider` gives the current metadata
    image. `sessions` defaults to a cache of Kafka's default size (see
    `FetchSessionCache.from_properties` for `max.incremental.fetch.session.cache.slots`);
    `replication` serves follower fetches (without it they are refused); `remote` reads what only
    the remote tier holds (KIP-405)."""
    fetch = FetchHandler(lookup, notifier, image_provider, sessions, clock_ms, replication, remote)
    offsets = ListOffsetsHandler(lookup, image_provider, remote)
    dispatcher.register(FETCH_KEY, fetch.handle)
    dispatcher.register(LIST_OFFSETS_KEY, offsets.list_offsets)
    dispatcher.register(OFFSET_FOR_LEADER_EPOCH_KEY, offsets.offset_for_leader_epoch)
    return ReadPath(fetch, offsets)
