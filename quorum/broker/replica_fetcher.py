"""The sans-IO replica fetcher: a follower broker replicating partitions from one leader broker.

Kafka's ReplicaFetcherThread / AbstractFetcherThread without the thread: one `ReplicaFetcher` per
(this broker, leader broker) pair takes events (partitions added or removed as the metadata image
moves, time passing, a response arriving, a request failing) and returns actions (send a request,
append the leader's batches, truncate, move the follower's high watermark and log start offset).
No socket, clock or file: the log is read through `FollowerLog`, and every change to it is an
action the driver carries out, in order, before it feeds the next event. `next_deadline_ms()`
says when `tick` has something to do.

Per partition the state is Kafka's PartitionFetchState: FETCHING, TRUNCATING (finding the
divergence point with OffsetForLeaderEpoch, for a leader without Fetch v12), RESOLVING (the leader
refused the fetch offset: an `OutOfRangeHandler` decides, step by step), FENCED (our leader epoch
is older than the leader's: wait for the image to give a newer one) and FAILED; any of the
fetching states may be delayed by `replica.fetch.backoff.ms` after an error. With a plug-in's
handler, a partition added with an empty log starts RESOLVING too (error NONE), so that KIP-1023
can skip what the remote tier holds even when the leader still has offset 0 on its disk.

Divergence follows Kafka (KIP-101/279/595): the follower fetches with LastFetchedEpoch; the
leader answers a DivergingEpoch (epoch, end offset) when that epoch ends earlier in its log, and
the follower truncates to min(its own end of that epoch, the leader's) or, when it does not have
that epoch, to its end of the largest epoch below it and asks again. After back-to-back leader
changes this walks down one epoch per round trip until the logs agree. The follower never
truncates below its high watermark except on such an answer (or the out-of-range rules of an
unclean election), and then says so in the log.

Catch-up: a partition whose last fetch came back full (half of replica.fetch.max.bytes or more)
asks for replica.fetch.response.max.bytes next, until an answer is not full; a returning follower
then copies in few large round trips, each response's batches appended at once, and so does the
follower of a partition whose producer pipelines its acks=all requests (the leader's high
watermark waits for the follower there, so it cannot tell that the leader has more; a full answer does).

One Fetch and one OffsetForLeaderEpoch are in flight at a time, as in Kafka's fetcher thread, and
each partition in at most one request. The next Fetch leaves as soon as the previous response is
handled (the leader long-polls it for replica.fetch.wait.max.ms).
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from dataclasses import dataclass, field
from enum import Enum

from quorum.broker.replica_fetcher_events import (
    NO_EPOCH,
    Action,
    AddPartition,
    AppendAsFollower,
    EpochAnswer,
    EpochQuery,
    EpochStart,
    FetchedPartition,
    FetchPartition,
    FetchRequest,
    FetchResponse,
    FollowerLog,
    IncrementLogStartOffset,
    ListedOffset,
    ListOffsetsRequest,
    ListOffsetsResponse,
    OffsetQuery,
    OffsetsForLeaderEpochRequest,
    OffsetsForLeaderEpochResponse,
    OutOfRangeWork,
    PartitionFailed,
    ReplicaFetcherConfig,
    Request,
    Send,
    TopicPartition,
    Truncate,
    TruncateFullyAndStartAt,
    UpdateHighWatermark,
)
from quorum.broker.replica_fetcher_out_of_range import (
    EARLIEST_PENDING_UPLOAD_TIMESTAMP,
    AskLeaderOffset,
    Defer,
    Fail,
    KafkaOutOfRangeHandler,
    LeaderOffset,
    OutOfRange,
    OutOfRangeHandler,
    Retry,
    StartAt,
    Step,
    TruncateTo,
)
from quorum.log.validation import batch_fault
from quorum.wire.errors import ErrorCode
from quorum.wire.records import CorruptRecordError, RecordBatch, empty_batch, iter_batches

logger = logging.getLogger(__name__)

_OUT_OF_RANGE = frozenset({ErrorCode.OFFSET_OUT_OF_RANGE, ErrorCode.OFFSET_MOVED_TO_TIERED_STORAGE})


class FetchPhase(Enum):
    FETCHING = "fetching"
    TRUNCATING = "truncating"
    RESOLVING = "resolving"
    FENCED = "fenced"
    FAILED = "failed"


@dataclass(frozen=True, slots=True)
class PartitionFetchState:
    """What the fetcher knows of one partition (for metrics, tests and the broker's logs)."""

    topic_partition: TopicPartition
    leader_epoch: int
    phase: FetchPhase
    fetch_offset: int
    last_fetched_epoch: int | None
    delayed_until_ms: int | None
    reason: str


@dataclass(slots=True)
class _Partition:
    add: AddPartition
    phase: FetchPhase
    fetch_offset: int
    last_fetched_epoch: int | None
    # The log as the actions returned so far leave it (read from `add.log` at each event).
    log_start: int
    log_end: int
    high_watermark: int
    stale: bool = False  # an action of ours changed the log: read the fetch position from it again
    delayed_until: int | None = None
    situation: OutOfRange | None = None
    query: int | None = None  # a ListOffsets timestamp the handler asked for
    query_sent: bool = False
    deferred: bool = False
    consult_again: bool = False
    """An empty replica's consultation ended undecided (Retry, an error): after the backoff the
    handler is consulted again instead of fetching offset 0 (which would copy the leader's whole
    local log, the very thing KIP-1023 avoids while the leader has not learnt its tiered offset)."""
    reason: str = ""
    diverged_at: tuple[int, int | None] | None = None  # the position of the last divergence answer
    catching_up: bool = False
    """The last fetch came back full, so the leader has more: ask for a whole response's worth."""

    @property
    def tp(self) -> TopicPartition:
        return self.add.topic_partition

    @property
    def log(self) -> FollowerLog:
        return self.add.log

    @property
    def leader_epoch(self) -> int:
        return self.add.leader_epoch


@dataclass(slots=True)
class _Parsed:
    valid_bytes: int = 0
    end_offset: int = 0
    last_epoch: int = NO_EPOCH
    restart_at: int | None = None  # the log is empty and the first batch starts below its start
    fault: str | None = None
    head: bytes | None = None  # the first batch, cut to start at the fetch offset (`_cut_to`)
    head_size: int = 0  # the size of the batch `head` stands for in the answer


class _BadRecords(Exception):
    pass


def _cuttable(batch: RecordBatch, offset: int) -> bool:
    """Whether `batch`, which begins below our log end `offset` and reaches past it, is one the
    leader's log cleaner made of emptied batches (no record, no producer, not control): our own
    copy still has the batches it replaced up to `offset`, and only its part from there is new."""
    return (batch.base_offset < offset <= batch.last_offset and batch.records_count == 0 and batch.producer_id < 0
            and not batch.is_control)


def _cut_to(batch: RecordBatch, offset: int) -> bytes:
    """The empty batch's offsets from `offset` on, in its epoch, as a batch of their own."""
    return empty_batch(offset, batch.last_offset, batch.partition_leader_epoch, batch.timestamp_type,
                       batch.max_timestamp)  # fmt: skip


@dataclass(slots=True)
class _InFlight:
    """The requests awaiting an answer, and the partitions they carry (each in one at most)."""

    fetch: FetchRequest | None = None
    epochs: OffsetsForLeaderEpochRequest | None = None
    lists: dict[int, ListOffsetsRequest] = field(default_factory=dict)  # id(request) -> request
    tps: set[TopicPartition] = field(default_factory=set)

    def holds(self, tp: TopicPartition) -> bool:
        return tp in self.tps

    def sent(self, request: Request) -> None:
        if isinstance(request, FetchRequest):
            self.fetch = request
        elif isinstance(request, OffsetsForLeaderEpochRequest):
            self.epochs = request
        else:
            self.lists[id(request)] = request
        self.tps.update(part.topic_partition for part in request.partitions)

    def answered(self, request: Request) -> bool:
        """Forget `request`; False when it is not in flight (late, duplicated or abandoned)."""
        if request is self.fetch:
            self.fetch = None
        elif request is self.epochs:
            self.epochs = None
        elif self.lists.get(id(request)) is request:
            del self.lists[id(request)]
        else:
            return False
        self.tps.difference_update(part.topic_partition for part in request.partitions)
        return True


class ReplicaFetcher:
    """See the module docstring. `handler` decides out-of-range answers (Kafka's rules by default)."""

    def __init__(self, config: ReplicaFetcherConfig, handler: OutOfRangeHandler | None = None,
                 now_ms: int = 0, consult_when_empty: bool | None = None) -> None:
        """`consult_when_empty` (by default: when a `handler` is given, i.e. a plug-in is composed)
        consults the handler once, with error NONE, when a partition with an empty log (start and
        end 0) is added, before its first fetch: KIP-1023 applies even when the leader still has
        offset 0 locally, and only the handler knows whether to skip what the remote tier holds."""
        self.config = config
        self._handler: OutOfRangeHandler = handler if handler is not None else KafkaOutOfRangeHandler()
        self._consult_when_empty = handler is not None if consult_when_empty is None else consult_when_empty
        self._partitions: dict[TopicPartition, _Partition] = {}
        self._in_flight = _InFlight()
        self._now = now_ms
        self._actions: list[Action] = []

    # -----------------------------------------------------------------------------------------
    # Reading

    @property
    def leader_id(self) -> int:
        return self.config.leader_id

    def partitions(self) -> tuple[TopicPartition, ...]:
        return tuple(self._partitions)

    def state(self, tp: TopicPartition) -> PartitionFetchState | None:
        p = self._partitions.get(tp)
        if p is None:
            return None
        return PartitionFetchState(tp, p.leader_epoch, p.phase, p.fetch_offset, p.last_fetched_epoch,
                                   p.delayed_until if self._delayed(p) else None, p.reason)  # fmt: skip

    def next_deadline_ms(self) -> int | None:
        """When `tick` has something to do: now when a partition must re-read its log (it was
        truncated) before it can fetch, else the end of the earliest backoff; None when idle."""
        deadline: int | None = None
        for p in self._partitions.values():
            if p.stale:
                return self._now
            if p.delayed_until is not None and p.delayed_until > self._now and p.phase in (
                FetchPhase.FETCHING, FetchPhase.TRUNCATING
            ):
                deadline = p.delayed_until if deadline is None else min(deadline, p.delayed_until)
        return deadline

    # -----------------------------------------------------------------------------------------
    # Events

    def add_partitions(self, partitions: Iterable[AddPartition], now_ms: int) -> list[Action]:
        """Follow these partitions (the image made this broker their follower under our leader).

        The same leader epoch again keeps a partition's state (an image that changed something
        else), unless it stopped (fenced or failed); a newer one starts over from the log, as
        Kafka's addPartitions does; an older one is a stale image and changes nothing.
        """
        self._begin(now_ms)
        for add in partitions:
            current = self._partitions.get(add.topic_partition)
            if current is not None:
                if add.leader_epoch < current.leader_epoch:
                    continue
                if add.leader_epoch == current.leader_epoch and current.phase not in (
                    FetchPhase.FENCED, FetchPhase.FAILED
                ):
                    continue
                del self._partitions[add.topic_partition]
            p = self._partitions[add.topic_partition] = self._initial_state(add)
            if self._consult_when_empty and p.phase is FetchPhase.FETCHING and p.log_start == p.log_end == 0:
                self._begin_out_of_range(p, ErrorCode.NONE)
        return self._finish()

    def remove_partitions(self, tps: Iterable[TopicPartition], now_ms: int) -> list[Action]:
        """Stop following these partitions; answers still in flight for them are dropped."""
        self._begin(now_ms)
        for tp in tps:
            self._partitions.pop(tp, None)
        return self._finish()

    def tick(self, now_ms: int) -> list[Action]:
        self._begin(now_ms)
        return self._finish()

    def on_fetch_response(self, request: FetchRequest, response: FetchResponse, now_ms: int) -> list[Action]:
        self._begin(now_ms)
        if not self._in_flight.answered(request):
            return self._finish()
        answers = {data.topic_partition: data for data in response.partitions}
        for asked in request.partitions:
            p = self._current(asked.topic_partition, asked.current_leader_epoch, FetchPhase.FETCHING)
            if p is None or p.fetch_offset != asked.fetch_offset:
                continue  # re-added, truncated or removed since: this answer is about another position
            if p.log_end != p.fetch_offset:
                p.stale = True  # the log changed under us (Kafka's "offset mismatch"): fetch from its end
                continue
            if response.error != ErrorCode.NONE:
                self._error(p, response.error, asked.current_leader_epoch, "fetch")
                continue
            data = answers.get(asked.topic_partition)
            if data is not None:
                self._on_fetched(p, asked, data)
        return self._finish()

    def on_offsets_for_leader_epoch_response(self, request: OffsetsForLeaderEpochRequest,
                                             response: OffsetsForLeaderEpochResponse,
                                             now_ms: int) -> list[Action]:  # fmt: skip
        self._begin(now_ms)
        if not self._in_flight.answered(request):
            return self._finish()
        answers = {answer.topic_partition: answer for answer in response.partitions}
        for asked in request.partitions:
            p = self._current(asked.topic_partition, asked.current_leader_epoch, FetchPhase.TRUNCATING)
            if p is None:
                continue
            answer = answers.get(asked.topic_partition)
            error = response.error if response.error != ErrorCode.NONE else (
                answer.error if answer is not None else ErrorCode.UNKNOWN_SERVER_ERROR)
            if error != ErrorCode.NONE or answer is None:
                self._error(p, error, asked.current_leader_epoch, "OffsetForLeaderEpoch")
                continue
            self._on_epoch_answer(p, answer)
        return self._finish()

    def on_list_offsets_response(self, request: ListOffsetsRequest, response: ListOffsetsResponse,
                                 now_ms: int) -> list[Action]:
        self._begin(now_ms)
        if not self._in_flight.answered(request):
            return self._finish()
        answers = {answer.topic_partition: answer for answer in response.partitions}
        for asked in request.partitions:
            p = self._current(asked.topic_partition, asked.current_leader_epoch, FetchPhase.RESOLVING)
            if p is None or p.query != asked.timestamp or not p.query_sent:
                continue
            answer = answers.get(asked.topic_partition)
            error = response.error if response.error != ErrorCode.NONE else (
                answer.error if answer is not None else ErrorCode.UNKNOWN_SERVER_ERROR)
            self._on_listed(p, asked, answer, error)
        return self._finish()

    def on_send_failed(self, request: Request, now_ms: int) -> list[Action]:
        """`request` got no answer (connection lost, timeout): its partitions back off."""
        self._begin(now_ms)
        if not self._in_flight.answered(request):
            return self._finish()
        for part in request.partitions:
            p = self._partitions.get(part.topic_partition)
            if p is None or p.leader_epoch != part.current_leader_epoch:
                continue
            if p.phase is FetchPhase.RESOLVING:
                self._end_resolution_undecided(p)
            self._delay(p, f"request to broker {self.config.leader_id} failed")
        return self._finish()

    def on_log_failed(self, tp: TopicPartition, reason: str, now_ms: int) -> list[Action]:
        """An action on the partition's log failed (a storage error): stop fetching it."""
        self._begin(now_ms)
        p = self._partitions.get(tp)
        if p is not None:
            self._fail(p, reason, report=False)
        return self._finish()

    def resolve_out_of_range(self, tp: TopicPartition, leader_epoch: int, step: Step, now_ms: int) -> list[Action]:
        """The outcome of an `OutOfRangeWork` (any step, another Defer included); ignored when the
        partition moved on to another leader epoch meanwhile."""
        self._begin(now_ms)
        p = self._current(tp, leader_epoch, FetchPhase.RESOLVING)
        if p is not None and p.deferred:
            p.deferred = False
            self._apply_step(p, step)
        return self._finish()

    # -----------------------------------------------------------------------------------------
    # Call frame

    def _begin(self, now_ms: int) -> None:
        self._now = max(self._now, now_ms)
        self._actions = []
        for p in self._partitions.values():
            self._read_log(p)

    def _finish(self) -> list[Action]:
        self._consult_again()
        self._send_epoch_queries()  # first: it may find a partition with nothing to compare, to fetch now
        self._send_fetch()
        self._send_offset_queries()
        actions, self._actions = self._actions, []
        return actions

    def _read_log(self, p: _Partition) -> None:
        """The driver has applied our actions: the log is the truth again."""
        log = p.log
        p.log_start, p.log_end, p.high_watermark = log.log_start_offset, log.log_end_offset, log.high_watermark
        moved = p.phase is FetchPhase.FETCHING and p.log_end != p.fetch_offset and not self._in_flight.holds(p.tp)
        if p.stale or moved:
            p.fetch_offset = p.log_end
            p.last_fetched_epoch = log.latest_epoch()
            p.stale = False

    def _initial_state(self, add: AddPartition) -> _Partition:
        log = add.log
        latest = log.latest_epoch()
        p = _Partition(add, FetchPhase.FETCHING, log.log_end_offset, latest,
                       log.log_start_offset, log.log_end_offset, log.high_watermark)  # fmt: skip
        if latest is None:
            # Kafka's truncateToHighWatermark: a log without epochs cannot be compared with the
            # leader's, and what lies above the high watermark may not be the leader's.
            self._truncate(p, p.high_watermark, "the log holds no leader epochs to compare")
        elif not self.config.truncate_on_fetch:
            p.phase = FetchPhase.TRUNCATING
        return p

    # -----------------------------------------------------------------------------------------
    # Building requests

    def _ready(self, p: _Partition, phase: FetchPhase) -> bool:
        return p.phase is phase and not p.stale and not self._delayed(p) and not self._in_flight.holds(p.tp)

    def _delayed(self, p: _Partition) -> bool:
        return p.delayed_until is not None and p.delayed_until > self._now

    def _send_fetch(self) -> None:
        if self._in_flight.fetch is not None:
            return
        parts = tuple(
            FetchPartition(p.tp, p.add.topic_id, p.leader_epoch, p.fetch_offset,
                           NO_EPOCH if p.last_fetched_epoch is None or not self.config.truncate_on_fetch
                           else p.last_fetched_epoch,
                           p.log_start, self._partition_max_bytes(p))  # fmt: skip
            for p in self._partitions.values()
            if self._ready(p, FetchPhase.FETCHING)
        )
        if not parts:
            return
        config = self.config
        request = FetchRequest(config.broker_id, config.broker_epoch, config.fetch_wait_max_ms, config.fetch_min_bytes,
                               config.fetch_response_max_bytes, parts)  # fmt: skip
        self._in_flight.sent(request)
        self._actions.append(Send(request))

    def _partition_max_bytes(self, p: _Partition) -> int:
        """replica.fetch.max.bytes; while the partition is behind (its last fetch came back full,
        at least half the limit), replica.fetch.response.max.bytes, so that a returning follower
        catches up in few large round trips instead of many 1 MiB ones, and a follower of a busy
        partition takes every batch the leader appended since its last fetch in one. The long poll
        answers as soon as anything is there, so asking for more never makes an answer wait."""
        config = self.config
        return max(config.fetch_max_bytes, config.fetch_response_max_bytes) if p.catching_up else config.fetch_max_bytes

    def _send_epoch_queries(self) -> None:
        if self._in_flight.epochs is not None:
            return
        queries = []
        for p in list(self._partitions.values()):
            if not self._ready(p, FetchPhase.TRUNCATING):
                continue
            latest = p.log.latest_epoch()
            if latest is None:  # truncated down to nothing with an epoch: nothing left to compare
                p.phase = FetchPhase.FETCHING
                continue
            queries.append(EpochQuery(p.tp, p.leader_epoch, latest))
        if queries:
            request = OffsetsForLeaderEpochRequest(self.config.broker_id, tuple(queries))
            self._in_flight.sent(request)
            self._actions.append(Send(request))

    def _send_offset_queries(self) -> None:
        queries = []
        for p in self._partitions.values():
            if p.phase is FetchPhase.RESOLVING and p.query is not None and not p.query_sent:
                p.query_sent = True
                queries.append(OffsetQuery(p.tp, p.leader_epoch, p.query))
        if queries:
            request = ListOffsetsRequest(self.config.broker_id, tuple(queries))
            self._in_flight.sent(request)
            self._actions.append(Send(request))

    # -----------------------------------------------------------------------------------------
    # Answers

    def _current(self, tp: TopicPartition, leader_epoch: int, phase: FetchPhase) -> _Partition | None:
        p = self._partitions.get(tp)
        if p is None or p.leader_epoch != leader_epoch or p.phase is not phase:
            return None
        return p

    def _on_fetched(self, p: _Partition, asked: FetchPartition, data: FetchedPartition) -> None:
        error = data.error
        if error == ErrorCode.NONE:
            self._on_fetched_data(p, data)
        elif error in _OUT_OF_RANGE:
            self._begin_out_of_range(p, error)
        else:
            self._error(p, error, asked.current_leader_epoch, "fetch")

    def _error(self, p: _Partition, error: int, request_epoch: int, what: str) -> None:
        """Kafka's error handling of the fetcher: a fenced epoch waits for the image; the rest
        (UNKNOWN_LEADER_EPOCH: the leader has not seen our epoch yet; NOT_LEADER_OR_FOLLOWER;
        UNKNOWN_TOPIC_OR_PARTITION, UNKNOWN_TOPIC_ID: its image is behind; storage errors) back off
        and retry, which a newer epoch from the image cuts short."""
        name = _error_name(error)
        if error == ErrorCode.FENCED_LEADER_EPOCH and request_epoch == p.leader_epoch:
            p.phase = FetchPhase.FENCED
            p.reason = f"{what}: the leader is at a newer leader epoch than {p.leader_epoch}; awaiting the image"
            logger.info("%s: %s", p.tp, p.reason)
            return
        self._delay(p, f"{what} answered {name}")

    def _delay(self, p: _Partition, reason: str) -> None:
        if not self._delayed(p):
            p.delayed_until = self._now + self.config.fetch_backoff_ms
        p.reason = reason
        logger.debug("%s: %s; retrying after %d ms", p.tp, reason, self.config.fetch_backoff_ms)

    def _on_fetched_data(self, p: _Partition, data: FetchedPartition) -> None:
        p.delayed_until = None
        p.reason = ""
        if data.diverging_epoch is not None and self.config.truncate_on_fetch:
            self._diverged(p, data.diverging_epoch.epoch, data.diverging_epoch.offset, "DivergingEpoch")
            # Not the leader's high watermark yet (Kafka takes it here): until a fetch position is
            # accepted, our log may still diverge below it, and a follower's high watermark must
            # only ever cover records that are the leader's.
            self._follow_leader(p, -1, data.log_start_offset)
            return
        parsed = self._parse(p, data.records)
        if parsed.fault is not None:
            self._delay(p, f"records from broker {self.config.leader_id} refused: {parsed.fault}")
            logger.warning("%s: %s", p.tp, p.reason)
            return
        if parsed.valid_bytes:
            if parsed.restart_at is not None:
                # The leader's log start is inside a batch (DeleteRecords): Kafka starts our empty log
                # at that batch's base offset, as Partition.appendRecordsToFollowerOrFutureReplica does.
                self._start_at(p, parsed.restart_at)
            records = data.records
            whole = isinstance(records, bytes) and len(records) == parsed.valid_bytes
            if parsed.head is not None:
                appended = parsed.head + bytes(records[parsed.head_size : parsed.valid_bytes])
            else:
                appended = records if whole else bytes(records[: parsed.valid_bytes])
            self._actions.append(AppendAsFollower(p.tp, appended, parsed.end_offset, parsed.last_epoch))
            p.fetch_offset = p.log_end = parsed.end_offset
            p.last_fetched_epoch = parsed.last_epoch
            p.diverged_at = None
            self._partitions[p.tp] = self._partitions.pop(p.tp)  # to the back of the queue, as Kafka
        # Whole batches only, so a full answer may fall short of the limit by up to a batch: half counts.
        # A full answer says the leader had more than the limit, whether or not its high watermark is
        # past us: under acks=all it never is (it waits for us), yet pipelined Produce requests leave
        # several client batches behind the one that filled the answer (issue 37).
        p.catching_up = 2 * len(data.records or b"") >= self.config.fetch_max_bytes
        self._follow_leader(p, data.high_watermark, data.log_start_offset)

    def _parse(self, p: _Partition, records: bytes) -> _Parsed:
        """The whole batches of a Fetch answer that continue our log (a cut-off last batch is
        left for the next fetch), checked as `Log.append` will check them."""
        parsed = _Parsed(end_offset=p.fetch_offset)
        walker = iter_batches(records)
        expected = p.fetch_offset
        epoch = p.last_fetched_epoch if p.last_fetched_epoch is not None else NO_EPOCH
        try:
            for batch in walker:
                if parsed.valid_bytes == 0 and batch.base_offset != expected:
                    if p.log_start == p.log_end and batch.base_offset < expected <= batch.last_offset:
                        parsed.restart_at = expected = batch.base_offset
                        epoch = NO_EPOCH
                    elif _cuttable(batch, expected):
                        parsed.head_size = batch.size_in_bytes
                        parsed.head = _cut_to(batch, expected)
                        batch = RecordBatch(parsed.head)
                    else:
                        raise _BadRecords(f"the first batch starts at {batch.base_offset}, not at the fetch offset "
                                          f"{p.fetch_offset}")
                fault = batch_fault(batch, expected, epoch)
                if fault is not None:
                    raise _BadRecords(f"batch at offset {batch.base_offset}: {fault}")
                expected, epoch = batch.next_offset, batch.partition_leader_epoch
                parsed.valid_bytes, parsed.end_offset, parsed.last_epoch = walker.position, expected, epoch
        except (CorruptRecordError, _BadRecords) as exc:
            return _Parsed(fault=str(exc))
        return parsed

    def _follow_leader(self, p: _Partition, leader_hw: int, leader_log_start: int) -> None:
        """Kafka's follower: high watermark = the leader's, within our log; the log start follows
        the leader's up, never past our high watermark."""
        if leader_hw >= 0:
            hw = max(p.log_start, min(leader_hw, p.log_end))
            if hw != p.high_watermark:
                self._actions.append(UpdateHighWatermark(p.tp, hw))
                p.high_watermark = hw
        if leader_log_start > p.log_start:
            start = min(leader_log_start, p.high_watermark)
            if start > p.log_start:
                self._actions.append(IncrementLogStartOffset(p.tp, start))
                p.log_start = start

    def _on_epoch_answer(self, p: _Partition, answer: EpochAnswer) -> None:
        p.delayed_until = None
        p.reason = ""
        self._diverged(p, answer.leader_epoch, answer.end_offset, "OffsetForLeaderEpoch")

    # -----------------------------------------------------------------------------------------
    # Truncation

    def _diverged(self, p: _Partition, leader_epoch: int, leader_end: int, source: str) -> None:
        """The leader's `leader_epoch` ends at `leader_end` in its log: truncate where ours parts
        from it (Kafka's getOffsetTruncationState), then fetch or ask again."""
        offset, complete = self._truncation_point(p, leader_epoch, leader_end)
        cause = f"{source} (epoch {leader_epoch}, end offset {leader_end})"
        position = (p.fetch_offset, p.last_fetched_epoch)
        if p.diverged_at == position:
            # The same answer for the same position: truncating did not move us (a log whose epoch
            # cache disagrees with its batches?). Do not spin: back off and let the log be re-read.
            self._delay(p, f"{cause} again at offset {position[0]} with epoch {position[1]}")
            logger.warning("%s: %s", p.tp, p.reason)
        p.diverged_at = position
        if offset >= p.log_end:
            # Nothing to cut, but as Kafka's UnifiedLog.truncateTo does, drop epoch entries that start
            # at the log end: a leader of an epoch that wrote nothing left one, and it is off.
            offset = p.log_end
            self._actions.append(Truncate(p.tp, offset))
            p.stale = True
        else:
            self._truncate(p, offset, cause)
        if complete or self.config.truncate_on_fetch:
            p.phase = FetchPhase.FETCHING
        # else: TRUNCATING still, and the next OffsetForLeaderEpoch asks about the epoch below.

    def _truncation_point(self, p: _Partition, leader_epoch: int, leader_end: int) -> tuple[int, bool]:
        if leader_end < 0:
            return p.fetch_offset, True  # the leader cannot tell: keep everything (Kafka's UNDEFINED rule)
        if leader_epoch < 0:
            return min(leader_end, p.log_end), True
        local = p.log.end_offset_for_epoch(leader_epoch)
        if local is None:
            # Every epoch we hold is newer than any the leader has up to `leader_end`: none of our
            # records can be the leader's.
            return p.log_start, True
        if local.epoch != leader_epoch:
            # We never had the leader's epoch: keep up to our end of the epoch below it and ask again.
            return min(local.offset, p.log_end), False
        return min(local.offset, leader_end, p.log_end), True

    def _truncate(self, p: _Partition, offset: int, cause: str) -> bool:
        offset = max(offset, p.log_start)
        if offset >= p.log_end:
            return False
        if offset < p.high_watermark:
            logger.warning("%s: truncating to %d, below the high watermark %d, on %s",
                           p.tp, offset, p.high_watermark, cause)  # fmt: skip
        else:
            logger.info("%s: truncating to %d (log end %d) on %s", p.tp, offset, p.log_end, cause)
        self._actions.append(Truncate(p.tp, offset))
        p.log_end = p.fetch_offset = offset
        if p.high_watermark > offset:
            self._actions.append(UpdateHighWatermark(p.tp, offset))
            p.high_watermark = offset
        p.stale = True
        return True

    def _start_at(self, p: _Partition, offset: int, epochs: tuple[EpochStart, ...] = (),
                  producer_snapshot: bytes | None = None) -> None:
        logger.info("%s: log (%d..%d) replaced by an empty one at %d", p.tp, p.log_start, p.log_end, offset)
        self._actions.append(TruncateFullyAndStartAt(p.tp, offset, epochs, producer_snapshot))
        p.log_start = p.log_end = p.fetch_offset = offset
        p.last_fetched_epoch = epochs[-1].epoch if epochs else None
        if p.high_watermark != offset:
            self._actions.append(UpdateHighWatermark(p.tp, offset))
            p.high_watermark = offset

    # -----------------------------------------------------------------------------------------
    # Out of range: the handler decides

    def _begin_out_of_range(self, p: _Partition, error: int, again: bool = False) -> None:
        """A resolution begins: the leader refused the fetch offset, or (error NONE) the replica
        is empty and has not fetched yet (`again`: after an undecided one, logged at DEBUG only)."""
        p.phase = FetchPhase.RESOLVING
        facts = p.add.facts()
        p.situation = OutOfRange(p.tp, error, p.leader_epoch, p.fetch_offset, p.log_start, p.log_end,
                                 p.high_watermark, p.last_fetched_epoch,
                                 remote_storage_enabled=facts.remote_storage_enabled, compacted=facts.compacted,
                                 fetch_from_tiered_offset=facts.fetch_from_tiered_offset)  # fmt: skip
        if error == ErrorCode.NONE:
            logger.log(logging.DEBUG if again else logging.INFO,
                       "%s: an empty replica; the out-of-range handler chooses where it starts", p.tp)
        else:
            logger.info("%s: fetch offset %d answered %s", p.tp, p.fetch_offset, _error_name(error))
        self._consult(p)

    def _consult(self, p: _Partition) -> None:
        assert p.situation is not None
        try:
            step = self._handler.next_step(p.situation)
        except Exception as exc:  # a plug-in's bug stops its partition, not the fetcher
            logger.exception("%s: the out-of-range handler failed", p.tp)
            step = Fail(f"the out-of-range handler failed: {exc!r}")
        self._apply_step(p, step)

    def _apply_step(self, p: _Partition, step: Step) -> None:
        situation = p.situation
        assert situation is not None
        if isinstance(step, AskLeaderOffset):
            if step.timestamp in situation.leader_offsets:
                self._fail(p, f"the out-of-range handler asked for ListOffsets({step.timestamp}) twice")
                return
            p.query, p.query_sent = step.timestamp, False
        elif isinstance(step, TruncateTo):
            if step.offset > p.log_end:
                self._fail(p, f"the out-of-range handler chose offset {step.offset}, past the log end {p.log_end}")
                return
            self._end_resolution(p)
            self._truncate(p, step.offset, f"{_error_name(situation.error)} at offset {situation.fetch_offset}")
        elif isinstance(step, StartAt):
            self._end_resolution(p)
            self._start_at(p, step.offset, step.leader_epochs, step.producer_snapshot)
        elif isinstance(step, Retry):
            self._end_resolution_undecided(p)
            reason = step.reason or f"{_error_name(situation.error)} at offset {situation.fetch_offset}"
            if reason != p.reason:  # why a partition waits, said once rather than at every retry
                logger.info("%s: the out-of-range handler waits: %s", p.tp, reason)
            self._delay(p, reason)
        elif isinstance(step, Fail):
            self._fail(p, step.reason)
        elif isinstance(step, Defer):
            p.deferred = True
            self._actions.append(OutOfRangeWork(p.tp, p.leader_epoch, step.work))
        else:
            self._fail(p, f"the out-of-range handler returned {step!r}")

    def _on_listed(self, p: _Partition, asked: OffsetQuery, answer: ListedOffset | None, error: int) -> None:
        assert p.situation is not None
        if error == ErrorCode.NONE and answer is not None:
            p.situation.leader_offsets[asked.timestamp] = LeaderOffset(answer.offset, answer.leader_epoch)
            p.query, p.query_sent = None, False
            self._consult(p)
            return
        if error == ErrorCode.UNSUPPORTED_VERSION and asked.timestamp == EARLIEST_PENDING_UPLOAD_TIMESTAMP:
            # A leader without ListOffsets v11 (KIP-1023): the handler takes another path.
            logger.info("%s: broker %d does not answer ListOffsets(%d): %s", p.tp, self.config.leader_id,
                        asked.timestamp, _error_name(error))  # fmt: skip
            p.situation.leader_offsets[asked.timestamp] = LeaderOffset(-1, -1, error)
            p.query, p.query_sent = None, False
            self._consult(p)
            return
        self._end_resolution_undecided(p)
        self._error(p, error, asked.current_leader_epoch, f"ListOffsets({asked.timestamp})")

    def _end_resolution(self, p: _Partition) -> None:
        p.phase = FetchPhase.FETCHING
        p.situation, p.query, p.query_sent, p.deferred, p.consult_again = None, None, False, False, False

    def _end_resolution_undecided(self, p: _Partition) -> None:
        """The resolution ends without a position; an empty replica's is begun again after the backoff."""
        empty = p.situation is not None and p.situation.error == ErrorCode.NONE
        self._end_resolution(p)
        p.consult_again = empty

    def _consult_again(self) -> None:
        for p in self._partitions.values():
            if p.consult_again and p.phase is FetchPhase.FETCHING and not self._delayed(p) and not p.stale:
                p.consult_again = False
                if p.log_start == p.log_end == 0:
                    self._begin_out_of_range(p, ErrorCode.NONE, again=True)

    def _fail(self, p: _Partition, reason: str, report: bool = True) -> None:
        self._end_resolution(p)
        p.phase = FetchPhase.FAILED
        p.reason = reason
        logger.error("%s: replication from broker %d stopped: %s", p.tp, self.config.leader_id, reason)
        if report:
            self._actions.append(PartitionFailed(p.tp, reason))


def _error_name(code: int) -> str:
    try:
        return ErrorCode(code).name
    except ValueError:
        return f"error {code}"


