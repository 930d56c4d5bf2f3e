"""An in-memory model of partition replicas to drive the replica fetcher and ISR cores against each other.

`MemoryLog` is a partition log of real v2 batches (one record each, the value naming who wrote it)
with Kafka's leader-epoch cache; it is the `FollowerLog` the fetcher reads. `serve_fetch` and
`serve_epoch` / `serve_list_offsets` answer as Kafka's leader does (Partition.fetchRecords with
its DivergingEpoch check, OffsetForLeaderEpoch, ListOffsets for a replica). `Cluster` adds a
controller (clean elections from the ISR, AlterPartition), brokers that crash and restart, and
a seeded network with delays, all on a discrete clock, so scenario tests and the property test
run the same code.
"""

from __future__ import annotations

import heapq
import itertools
import random
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field

from quorum.broker import replica_fetcher_events as ev
from quorum.broker.isr import (
    AlterPartitionRequest,
    AlterPartitionResponse,
    HighWatermarkAdvanced,
    IsrConfig,
    IsrTracker,
    LeaderAndIsr,
    ProduceCompleted,
    ReplicaRefused,
    SendAlterPartition,
)
from quorum.broker.replica_fetcher import ReplicaFetcher
from quorum.broker.replica_fetcher_out_of_range import EARLIEST_TIMESTAMP, LATEST_TIMESTAMP, OutOfRangeHandler
from quorum.log.epoch_cache import UNDEFINED, LeaderEpochCache
from quorum.raft.interface import OffsetAndEpoch
from quorum.wire.errors import ErrorCode
from quorum.wire.records import Record, build_batch, iter_batches

TOPIC_ID = uuid.UUID(int=7)
TP = ("t", 0)


@dataclass(frozen=True, slots=True)
class Batch:
    base_offset: int
    epoch: int
    data: bytes
    value: bytes

    @property
    def next_offset(self) -> int:
        return self.base_offset + 1


def make_batch(offset: int, epoch: int, value: bytes) -> Batch:
    data = build_batch([Record(offset, 0, b"k", value)], base_offset=offset, partition_leader_epoch=epoch)
    return Batch(offset, epoch, data, value)


class MemoryLog:
    """A partition log in memory: whole batches, a log start offset, a high watermark, epochs."""

    def __init__(self, name: str = "") -> None:
        self.name = name
        self.batches: list[Batch] = []
        self.start = 0
        self.hw = 0
        self.cache = LeaderEpochCache()

    # -- FollowerLog ----------------------------------------------------------------------------

    @property
    def log_start_offset(self) -> int:
        return self.start

    @property
    def log_end_offset(self) -> int:
        return self.batches[-1].next_offset if self.batches else self.start

    @property
    def high_watermark(self) -> int:
        return self.hw

    def latest_epoch(self) -> int | None:
        return self.cache.latest_epoch if len(self.cache) else None

    def end_offset_for_epoch(self, epoch: int) -> OffsetAndEpoch | None:
        if not len(self.cache):
            return None
        found = self.cache.end_offset_for(epoch, self.log_end_offset)
        return None if found == UNDEFINED else found

    # -- leader-side answers (Kafka's LeaderEpochFileCache.endOffsetFor) -------------------------

    def leader_end_offset_for(self, epoch: int) -> OffsetAndEpoch:
        entries = self.cache.entries
        if epoch < 0 or not entries or epoch > entries[-1].epoch:
            return UNDEFINED
        if epoch == entries[-1].epoch:
            return OffsetAndEpoch(self.log_end_offset, epoch)
        if epoch < entries[0].epoch:  # below every epoch: the first one's start (Kafka)
            return OffsetAndEpoch(entries[0].start_offset, epoch)
        return self.cache.end_offset_for(epoch, self.log_end_offset)

    # -- writing --------------------------------------------------------------------------------

    def append_leader(self, epoch: int, value: bytes) -> Batch:
        batch = make_batch(self.log_end_offset, epoch, value)
        self._push(batch)
        return batch

    def _push(self, batch: Batch) -> None:
        assert batch.base_offset == self.log_end_offset, (self.name, batch, self.log_end_offset)
        self.batches.append(batch)
        self.cache.assign(batch.epoch, batch.base_offset)

    def append_bytes(self, data: bytes) -> None:
        for b in iter_batches(data, strict=True):
            b.validate()
            value = b.records()[0].value
            self._push(Batch(b.base_offset, b.partition_leader_epoch, bytes(b.raw), value))

    def truncate_to(self, offset: int) -> None:
        keep = [b for b in self.batches if b.next_offset <= offset]  # a batch holding `offset` goes whole
        self.batches = keep
        self.cache.truncate_from_end(self.log_end_offset)
        self.hw = min(self.hw, self.log_end_offset)

    def truncate_fully(self, offset: int, epochs: tuple[ev.EpochStart, ...] = ()) -> None:
        self.batches = []
        self.start = offset
        self.hw = offset
        self.cache = LeaderEpochCache()
        for entry in epochs:
            self.cache.assign(entry.epoch, entry.start_offset)

    def advance_start(self, offset: int) -> None:
        assert offset <= self.hw, (offset, self.hw)
        self.start = max(self.start, offset)
        self.batches = [b for b in self.batches if b.next_offset > self.start]
        self.cache.truncate_from_start(self.start)

    def read(self, offset: int, max_bytes: int) -> bytes:
        out = b""
        for b in self.batches:
            if b.next_offset > offset and (not out or len(out) + len(b.data) <= max_bytes):
                out += b.data
        return out

    def record_at(self, offset: int) -> tuple[int, bytes] | None:
        for b in self.batches:
            if b.base_offset == offset:
                return b.epoch, b.value
        return None

    def history(self) -> list[tuple[int, int, bytes]]:
        return [(b.base_offset, b.epoch, b.value) for b in self.batches]

    def __repr__(self) -> str:
        batches = [(b.base_offset, b.epoch) for b in self.batches]
        return f"MemoryLog({self.name}, start={self.start}, hw={self.hw}, {batches})"


def log_with(name: str, *runs: tuple[int, int], start: int = 0, hw: int = 0) -> MemoryLog:
    """A log holding `count` batches of `epoch` for each (epoch, count) in `runs`."""
    log = MemoryLog(name)
    log.start = start
    for epoch, count in runs:
        for _ in range(count):
            log.append_leader(epoch, f"{name}:{epoch}:{log.log_end_offset}".encode())
    log.hw = hw
    return log


# ---------------------------------------------------------------------------------------------
# The leader's answers


@dataclass(slots=True)
class LeaderSide:
    """One partition leader as Kafka's Partition answers followers (without a cluster around it)."""

    log: MemoryLog
    epoch: int
    isr: IsrTracker | None = None
    served: list[tuple[int, int]] = field(default_factory=list)  # (replica, fetch offset) counted as progress

    def become_leader(self) -> None:
        self.log.cache.assign(self.epoch, self.log.log_end_offset)  # Kafka's maybeAssignEpochStartOffset


def serve_fetch(leader: LeaderSide, request: ev.FetchRequest, now_ms: int = 0) -> tuple[ev.FetchResponse, list]:
    """Kafka's Partition.fetchRecords for a follower, and the ISR update it makes."""
    answers = []
    actions: list = []
    log = leader.log
    for part in request.partitions:
        def error(code: int, part: ev.FetchPartition = part) -> ev.FetchedPartition:
            return ev.FetchedPartition(part.topic_partition, code)

        if part.current_leader_epoch < leader.epoch:
            answers.append(error(ErrorCode.FENCED_LEADER_EPOCH))
            continue
        if part.current_leader_epoch > leader.epoch:
            answers.append(error(ErrorCode.UNKNOWN_LEADER_EPOCH))
            continue
        hw, start = log.hw, log.start
        if part.last_fetched_epoch >= 0:
            found = log.leader_end_offset_for(part.last_fetched_epoch)
            if found.offset < 0:
                answers.append(error(ErrorCode.OFFSET_OUT_OF_RANGE))
                continue
            if part.fetch_offset < start:
                answers.append(error(ErrorCode.OFFSET_OUT_OF_RANGE))
                continue
            if found.epoch < part.last_fetched_epoch or found.offset < part.fetch_offset:
                answers.append(ev.FetchedPartition(part.topic_partition, ErrorCode.NONE, hw, start,
                                                   diverging_epoch=found))
                continue
        if not start <= part.fetch_offset <= log.log_end_offset:
            answers.append(error(ErrorCode.OFFSET_OUT_OF_RANGE))
            continue
        records = log.read(part.fetch_offset, part.partition_max_bytes)
        if leader.isr is not None:
            try:
                actions += leader.isr.on_follower_fetch(request.replica_id, part.fetch_offset, part.log_start_offset,
                                                        request.replica_epoch, log.log_end_offset, now_ms)
            except ReplicaRefused as exc:
                answers.append(error(exc.code))
                continue
        leader.served.append((request.replica_id, part.fetch_offset))
        answers.append(ev.FetchedPartition(part.topic_partition, ErrorCode.NONE, hw, start, records))
    return ev.FetchResponse(ErrorCode.NONE, tuple(answers)), actions


def serve_epochs(leader: LeaderSide, request: ev.OffsetsForLeaderEpochRequest) -> ev.OffsetsForLeaderEpochResponse:
    answers = []
    for q in request.partitions:
        if q.current_leader_epoch != leader.epoch:
            fenced = q.current_leader_epoch < leader.epoch
            code = ErrorCode.FENCED_LEADER_EPOCH if fenced else ErrorCode.UNKNOWN_LEADER_EPOCH
            answers.append(ev.EpochAnswer(q.topic_partition, code))
            continue
        found = leader.log.leader_end_offset_for(q.leader_epoch)
        answers.append(ev.EpochAnswer(q.topic_partition, ErrorCode.NONE, found.epoch, found.offset))
    return ev.OffsetsForLeaderEpochResponse(ErrorCode.NONE, tuple(answers))


def serve_list_offsets(leader: LeaderSide, request: ev.ListOffsetsRequest,
                       extra: dict[int, int] | None = None) -> ev.ListOffsetsResponse:
    answers = []
    for q in request.partitions:
        log = leader.log
        offsets = {LATEST_TIMESTAMP: log.log_end_offset, EARLIEST_TIMESTAMP: log.start, **(extra or {})}
        if q.timestamp not in offsets:
            answers.append(ev.ListedOffset(q.topic_partition, ErrorCode.INVALID_REQUEST))
            continue
        offset = offsets[q.timestamp]
        epoch = log.cache.epoch_for_offset(offset - 1) if offset > 0 else -1
        answers.append(ev.ListedOffset(q.topic_partition, ErrorCode.NONE, offset, epoch, q.timestamp))
    return ev.ListOffsetsResponse(ErrorCode.NONE, tuple(answers))


def apply_follower_actions(log: MemoryLog, actions: list, failures: list | None = None,
                           truncate_below_hw: bool = True) -> list[ev.Send]:
    """Carry out a fetcher's log actions on `log`, in order; returns its Sends. With
    `truncate_below_hw` False, a truncation below the high watermark fails the test."""
    sends = []
    for action in actions:
        if not truncate_below_hw and isinstance(action, ev.Truncate | ev.TruncateFullyAndStartAt):
            assert action.offset >= log.hw, f"{action} below the high watermark of {log}"
        match action:
            case ev.AppendAsFollower(records=records, end_offset=end, last_epoch=epoch):
                log.append_bytes(records)
                assert log.log_end_offset == end and log.latest_epoch() == epoch, (log, action)
            case ev.Truncate(offset=offset):
                log.truncate_to(offset)
            case ev.TruncateFullyAndStartAt(offset=offset, leader_epochs=epochs):
                log.truncate_fully(offset, epochs)
            case ev.UpdateHighWatermark(high_watermark=hw):
                assert log.start <= hw <= log.log_end_offset, (log, action)
                log.hw = hw
            case ev.IncrementLogStartOffset(offset=offset):
                log.advance_start(offset)
            case ev.Send():
                sends.append(action)
            case ev.PartitionFailed() | ev.OutOfRangeWork():
                if failures is not None:
                    failures.append(action)
            case _:
                raise AssertionError(f"unexpected action {action}")
    return sends


def replicate(fetcher: ReplicaFetcher, follower: MemoryLog, leader: LeaderSide, actions: list, now_ms: int = 0,
              max_rounds: int = 50, failures: list | None = None) -> int:
    """Run fetcher <-> leader round trips until the fetcher sends nothing; returns the rounds."""
    rounds = 0
    pending = apply_follower_actions(follower, actions, failures)
    while pending and rounds < max_rounds:
        rounds += 1
        send = pending.pop(0)
        request = send.request
        if isinstance(request, ev.FetchRequest):
            response, _ = serve_fetch(leader, request, now_ms)
            if all(not p.records and p.diverging_epoch is None and p.error == ErrorCode.NONE
                   for p in response.partitions) and follower.log_end_offset == leader.log.log_end_offset \
                    and follower.hw == min(leader.log.hw, follower.log_end_offset):
                return rounds  # caught up: the leader would hold this fetch
            out = fetcher.on_fetch_response(request, response, now_ms)
        elif isinstance(request, ev.OffsetsForLeaderEpochRequest):
            out = fetcher.on_offsets_for_leader_epoch_response(request, serve_epochs(leader, request), now_ms)
        else:
            out = fetcher.on_list_offsets_response(request, serve_list_offsets(leader, request), now_ms)
        pending += apply_follower_actions(follower, out, failures)
        if not pending and fetcher.next_deadline_ms() == now_ms:
            pending += apply_follower_actions(follower, fetcher.tick(now_ms), failures)
    return rounds


def new_fetcher(broker_id: int, leader_id: int, handler: OutOfRangeHandler | None = None,
                **config: object) -> ReplicaFetcher:
    return ReplicaFetcher(ev.ReplicaFetcherConfig(broker_id, leader_id, **config), handler)  # type: ignore[arg-type]


# ---------------------------------------------------------------------------------------------
# A cluster: controller, brokers, network, clock


@dataclass(slots=True)
class Broker:
    id: int
    log: MemoryLog
    alive: bool = True
    isr: IsrTracker | None = None
    fetcher: ReplicaFetcher | None = None
    checkpointed_hw: int = 0
    incarnation: int = 0
    partition_epoch: int = -1  # of the last image applied
    failures: list = field(default_factory=list)


class Cluster:
    """One partition over `n` brokers: a controller with clean elections, seeded network delays."""

    def __init__(self, n: int = 3, seed: int = 0, min_isr: int = 1, lag_ms: int = 30_000,
                 drop_rate: float = 0.0) -> None:
        self.rng = random.Random(seed)
        self.now = 0
        self.ids = tuple(range(1, n + 1))
        self.brokers = {i: Broker(i, MemoryLog(f"b{i}")) for i in self.ids}
        self.min_isr = min_isr
        self.lag_ms = lag_ms
        self.drop_rate = drop_rate
        self.leader = self.ids[0]
        self.epoch = 0
        self.partition_epoch = 0
        self.isr: tuple[int, ...] = self.ids
        self.committed: dict[int, tuple[int, bytes]] = {}
        self.acked: dict[int, tuple[int, bytes]] = {}
        self.produce_results: dict[int, int] = {}
        self._produced: dict[int, tuple[int, int, bytes]] = {}
        self._queue: list[tuple[int, int, Callable[[], None]]] = []
        self._seq = itertools.count()
        self._values = itertools.count()
        self._publish()

    # -- time and messages ------------------------------------------------------------------------

    def at(self, delay: int, fn: Callable[[], None]) -> None:
        heapq.heappush(self._queue, (self.now + delay, next(self._seq), fn))

    def _delay(self) -> int:
        return self.rng.randint(1, 20)

    def run_until(self, end: int) -> None:
        while True:
            deadlines = [self._queue[0][0]] if self._queue else []
            for b in self.brokers.values():
                if b.alive:
                    for core in (b.fetcher, b.isr):
                        if core is not None and (d := core.next_deadline_ms()) is not None:
                            deadlines.append(max(d, self.now))
            if not deadlines or min(deadlines) > end:
                self.now = end
                return
            self.now = min(deadlines)
            if self._queue and self._queue[0][0] <= self.now:
                _, _, fn = heapq.heappop(self._queue)
                fn()
            else:
                for b in list(self.brokers.values()):
                    if b.alive and b.fetcher is not None and (d := b.fetcher.next_deadline_ms()) is not None \
                            and d <= self.now:
                        self._follower_actions(b, b.fetcher.tick(self.now))
                    if b.alive and b.isr is not None and (d := b.isr.next_deadline_ms()) is not None \
                            and d <= self.now:
                        self._leader_actions(b, b.isr.tick(self.now))
            self.check()

    # -- the controller ---------------------------------------------------------------------------

    def _state(self) -> LeaderAndIsr:
        return LeaderAndIsr(self.epoch, self.partition_epoch, self.ids, self.isr)

    def _publish(self) -> None:
        """A new partition state: the image reaches every live broker (after a delay)."""
        state = self._state()
        leader = self.leader
        for b in self.brokers.values():
            incarnation = b.incarnation
            self.at(self._delay(), lambda b=b, i=incarnation: self._apply_image(b, state, leader, i))

    def elect(self, leader: int | None = None) -> None:
        """A new leader epoch, leader chosen from the live ISR (clean elections only)."""
        candidates = [i for i in self.isr if self.brokers[i].alive and i != self.leader]
        if leader is None:
            if not candidates:
                return
            leader = self.rng.choice(candidates)
        assert leader in self.isr
        self.leader = leader
        self.epoch += 1
        self.partition_epoch += 1
        self._publish()

    def fence(self, broker_id: int) -> None:
        """The controller fences a broker: out of the ISR (unless last) and, if leader, re-elect."""
        if broker_id in self.isr and len(self.isr) > 1:
            self.isr = tuple(i for i in self.isr if i != broker_id)
            self.partition_epoch += 1
            if broker_id == self.leader:
                live = [i for i in self.isr if self.brokers[i].alive]
                if live:
                    self.leader = self.rng.choice(live)
                    self.epoch += 1
            self._publish()

    def _alter_partition(self, request: AlterPartitionRequest) -> AlterPartitionResponse:
        if request.leader_epoch != self.epoch or request.leader_id != self.leader:
            return AlterPartitionResponse(ErrorCode.FENCED_LEADER_EPOCH)
        if request.partition_epoch != self.partition_epoch:
            return AlterPartitionResponse(95)  # INVALID_UPDATE_VERSION
        new_isr = tuple(sorted(r for r, _ in request.new_isr))
        if any(not self.brokers[r].alive for r in new_isr):
            return AlterPartitionResponse(ErrorCode.INELIGIBLE_REPLICA)
        if new_isr != self.isr:
            self.isr = new_isr
            self.partition_epoch += 1
            self._publish()
        return AlterPartitionResponse(ErrorCode.NONE, self.leader, self.epoch, self.partition_epoch, self.isr)

    # -- brokers ----------------------------------------------------------------------------------

    def _apply_image(self, b: Broker, state: LeaderAndIsr, leader: int, incarnation: int) -> None:
        if not b.alive or b.incarnation != incarnation or state.partition_epoch < b.partition_epoch:
            return  # a stale image (images may arrive out of order here)
        b.partition_epoch = state.partition_epoch
        if leader == b.id:
            b.fetcher = None
            if b.isr is None or not b.isr.is_leader or b.isr.leader_epoch < state.leader_epoch:
                b.log.cache.assign(state.leader_epoch, b.log.log_end_offset)  # Kafka's makeLeader
            if b.isr is None:
                b.isr = IsrTracker(IsrConfig(b.id, replica_lag_time_max_ms=self.lag_ms,
                                             min_insync_replicas=self.min_isr), TOPIC_ID, 0)
            self._leader_actions(b, b.isr.become_leader(state, b.log.log_end_offset, b.log.hw, self.now))
            return
        if b.isr is not None and b.isr.is_leader:
            self._leader_actions(b, b.isr.resign(self.now))
        if b.isr is not None and b.isr.leader_epoch > state.leader_epoch:
            return
        if b.fetcher is None or b.fetcher.leader_id != leader:
            b.fetcher = new_fetcher(b.id, leader)
        add = ev.AddPartition(TP, TOPIC_ID, state.leader_epoch, b.log)
        self._follower_actions(b, b.fetcher.add_partitions([add], self.now))

    def crash(self, broker_id: int) -> None:
        b = self.brokers[broker_id]
        b.alive = False
        b.fetcher = None
        b.isr = None
        b.incarnation += 1
        b.partition_epoch = -1
        self.fence(broker_id)

    def restart(self, broker_id: int) -> None:
        """Back with its log (page cache survives a process crash) and an older high watermark checkpoint."""
        b = self.brokers[broker_id]
        b.alive = True
        b.log.hw = max(b.log.start, min(b.checkpointed_hw, b.log.log_end_offset))
        if broker_id == self.leader:  # the last ISR member is back: the controller elects it again
            self.epoch += 1
            self.partition_epoch += 1
            self._publish()
            return
        state, leader = self._state(), self.leader
        incarnation = b.incarnation
        self.at(self._delay(), lambda: self._apply_image(b, state, leader, incarnation))

    def checkpoint_hw(self) -> None:
        for b in self.brokers.values():
            b.checkpointed_hw = b.log.hw

    def produce(self, acks_all: bool = True) -> int | None:
        """A Produce to the current leader if it is up; returns a handle for the result."""
        b = self.brokers[self.leader]
        if not b.alive or b.isr is None or not b.isr.is_leader or b.isr.leader_epoch != self.epoch:
            return None
        handle = next(self._values)
        error = b.isr.check_append(-1 if acks_all else 1)
        if error != ErrorCode.NONE:
            self.produce_results[handle] = error
            return handle
        batch = b.log.append_leader(self.epoch, f"v{handle}".encode())
        self._produced[handle] = (batch.base_offset, batch.epoch, batch.value)
        self._leader_actions(b, b.isr.on_leader_append(b.log.log_end_offset, self.now))
        if acks_all:
            self._leader_actions(b, b.isr.await_replication(handle, batch.next_offset, self.now + 30_000, self.now))
        return handle

    def _leader_actions(self, b: Broker, actions: list) -> None:
        for action in actions:
            match action:
                case HighWatermarkAdvanced(high_watermark=hw):
                    old = b.log.hw
                    assert hw <= b.log.log_end_offset
                    b.log.hw = max(b.log.hw, hw)
                    for offset in range(old, b.log.hw):
                        rec = b.log.record_at(offset)
                        assert rec is not None
                        prior = self.committed.setdefault(offset, rec)
                        assert prior == rec, f"offset {offset} committed as {prior} then {rec}"
                case SendAlterPartition(request=request):
                    incarnation = b.incarnation

                    def deliver(request: AlterPartitionRequest = request, incarnation: int = incarnation) -> None:
                        response = self._alter_partition(request)

                        def answer() -> None:
                            if b.alive and b.isr is not None and b.incarnation == incarnation:
                                self._leader_actions(b, b.isr.on_alter_partition_response(request, response, self.now))
                        self.at(self._delay(), answer)
                    self.at(self._delay(), deliver)
                case ProduceCompleted(handle=handle, error=error):
                    self.produce_results[handle] = error
                    if error == ErrorCode.NONE:
                        offset, epoch, value = self._produced[handle]
                        self.acked[offset] = (epoch, value)
                case _:
                    raise AssertionError(action)

    def _follower_actions(self, b: Broker, actions: list) -> None:
        fetcher = b.fetcher
        for send in apply_follower_actions(b.log, actions, b.failures, truncate_below_hw=False):
            self._send(b, fetcher, send.request)

    def _send(self, b: Broker, fetcher: ReplicaFetcher | None, request: ev.Request) -> None:
        assert fetcher is not None
        leader = self.brokers[fetcher.leader_id]
        incarnation, leader_incarnation = b.incarnation, leader.incarnation
        sent_at = self.now

        def back(fn: Callable[[], list]) -> None:
            if b.alive and b.fetcher is fetcher and b.incarnation == incarnation:
                self._follower_actions(b, fn())

        def deliver() -> None:
            if not leader.alive or leader.incarnation != leader_incarnation or leader.isr is None \
                    or not leader.isr.is_leader or self.rng.random() < self.drop_rate:
                timeout = max(1, 1000 - (self.now - sent_at))
                self.at(timeout, lambda: back(lambda: fetcher.on_send_failed(request, self.now)))
                return
            side = LeaderSide(leader.log, leader.isr.leader_epoch, leader.isr)
            if isinstance(request, ev.FetchRequest):
                response, actions = serve_fetch(side, request, self.now)
                self._leader_actions(leader, actions)
                empty = all(not p.records and p.diverging_epoch is None and p.error == ErrorCode.NONE
                            for p in response.partitions)
                delay = request.max_wait_ms if empty else self._delay()
                self.at(delay, lambda: back(lambda: fetcher.on_fetch_response(request, response, self.now)))
            elif isinstance(request, ev.OffsetsForLeaderEpochRequest):
                response2 = serve_epochs(side, request)
                self.at(self._delay(), lambda: back(
                    lambda: fetcher.on_offsets_for_leader_epoch_response(request, response2, self.now)))
            else:
                response3 = serve_list_offsets(side, request)
                self.at(self._delay(), lambda: back(
                    lambda: fetcher.on_list_offsets_response(request, response3, self.now)))
        self.at(self._delay(), deliver)

    # -- invariants -------------------------------------------------------------------------------

    def check(self) -> None:
        """Kafka's replica consistency: below its high watermark every replica holds exactly the
        committed records; the committed and the acknowledged records are on the leader."""
        for b in self.brokers.values():
            log = b.log
            assert log.start <= log.hw <= log.log_end_offset, (self.now, log)
            for offset in range(log.start, log.hw):
                rec = log.record_at(offset)
                expected = self.committed.get(offset)
                assert expected is not None and rec == expected, (
                    f"t={self.now} broker {b.id}: offset {offset} below its HW {log.hw} is {rec}, committed {expected}")
        leader = self.brokers[self.leader]
        if leader.alive:
            for offset, rec in {**self.committed, **self.acked}.items():
                if offset >= leader.log.start:
                    assert leader.log.record_at(offset) == rec, (
                        f"t={self.now} leader {leader.id} lost offset {offset} ({rec}): {leader.log}")
        for offset, rec in self.acked.items():
            assert self.committed.get(offset) == rec, f"acked offset {offset} {rec} not committed"
