"""`AIOKafkaConsumer`: aiokafka.AIOKafkaConsumer with KIP-232 internal metadata, a drop-in replacement.

Same constructor, coroutines and async iteration (it is a subclass: everything not overridden is
aiokafka's, and `getone`/iteration go through the overridden `getmany`), with the guarantees and
additions of the sync wrappers (`client_epochs.kafka_python.KafkaConsumer`):

- `await commit(offsets)` stores the user's metadata and the internal metadata together in each
  offset's metadata string (aiokafka's `committed()` gives back offsets only, so there is nothing to
  hide); `await committed_internal_metadata(partitions)` reads what the commits say.
- After an assignment (subscribe's rebalance or `assign`), or `seek(partition, offset,
  internal_metadata)`, the partitions stay paused until the cluster's metadata is at least as new as
  the committed epochs (KAFKA-6262), and a later `getmany()` resumes them once it is. A partition
  the user paused stays paused. `waiting_for_metadata` lists those waiting.
- `await position_with_internal_metadata(partition)`: (offset, the KIP's JSON).
- A topic deleted and recreated raises TopicRecreatedError from getmany/getone/iteration (or is
  reset, `on_topic_recreated`); a running consumer holds a deleted topic's partitions until it is
  back, and never commits an old position onto a new topic.
- OFFSET_OUT_OF_RANGE resets only when the data is really gone: aiokafka runs with
  auto_offset_reset="none" and raises where it would have reset; the wrapper asks the current
  leader for its log bounds (EpochGuard.resolve_out_of_range) and seeks where the rule says
  (`resets` counts real resets). Under the user's policy "none", aiokafka's own error is raised.
- `waiting_reason` as the sync wrappers (consumer_guard.PartitionsWatch).

aiokafka has no leader epoch in its records (no KIP-320), so the internal metadata's leader epoch
is the metadata cache's, never a record's. Options beyond aiokafka's, as keyword arguments, are the
sync wrappers': `on_topic_recreated`, `metadata_wait_timeout_s`, `metadata_check_interval_s`,
`no_partitions_warning_s`. Auto-commit (aiokafka's default) carries no internal metadata: turn it off.

How the waits stay off the event loop: the EpochGuard, its MetadataClient and the OffsetFetcher
are the sync wrappers' own (blocking sockets, bounded by their timeouts). Every call into them runs
on one thread of this consumer's own (`_GuardThread`, a one-worker executor) and is awaited, so the
loop goes on serving the fetcher, heartbeats and the user's other tasks while the wrapper waits for
current metadata; one worker also means the guard's state is only ever touched by one call at a
time, in the order the calls were made (a revocation's `forget` is queued there, not done on the
loop). The thread, not async twins of EpochGuard and MetadataClient: twins would be a second
implementation of the refusal, retry and backoff rules and of their wire I/O, which must stay one.
A `getmany` that finds nothing to wait for and no metadata check due does not leave the loop. A
`getmany` cancelled by its caller (`asyncio.wait_for`) does not cancel the check it started: the check
runs to its end on a task of its own and applies what the guard found (partitions resumed, recreated
ones reset), since the guard's state already moved on.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import functools
import logging
import time
from collections.abc import Iterable, Mapping
from typing import Any

import aiokafka
import aiokafka.errors as Errors
from aiokafka import ConsumerRebalanceListener
from aiokafka import TopicPartition as AioTopicPartition
from aiokafka.structs import OffsetAndMetadata
from aiokafka.util import commit_structure_validate

from client_epochs.committed import encode, parse_internal, split
from client_epochs.connection import BrokerError
from client_epochs.consumer_guard import EpochGuard, GuardedConsumer, PartitionsWatch, RecreatedPolicy, Settled
from client_epochs.errors import InvalidOffsetError
from client_epochs.kafka_python import _bootstrap, _user_policy
from client_epochs.log_bounds import READ_COMMITTED, READ_UNCOMMITTED
from client_epochs.metadata_client import MetadataClient
from client_epochs.model import TopicPartition
from client_epochs.offset_fetch import OffsetFetcher, is_retriable
from quorum.wire.internal_metadata import InternalMetadata
from quorum.wire.sasl_client import ClientSecurity

__all__ = ["AIOKafkaConsumer"]

log = logging.getLogger(__name__)

_WOULD_RESET = (Errors.OffsetOutOfRangeError, Errors.NoOffsetForPartitionError)
"""What aiokafka, built with auto_offset_reset="none", raises where it would have reset a position."""
_STEP_S = 0.2
"""How long one fetch wait lasts while partitions wait, so that their metadata is re-checked."""
_COMMITTED_TRY_S = 1.0
"""How long one getmany waits for the committed epochs of new partitions; they stay paused otherwise."""
_COMMITTED_NOTE_S = 10.0


def _key(partition: Any) -> TopicPartition:
    return TopicPartition(partition.topic, partition.partition)


def _aio(tp: TopicPartition) -> AioTopicPartition:
    return AioTopicPartition(tp.topic, tp.partition)


class _GuardThread:
    """The blocking SDK calls of one consumer, one at a time and in order, on a thread of their own."""

    def __init__(self) -> None:
        self._executor = concurrent.futures.ThreadPoolExecutor(max_workers=1, thread_name_prefix="client-epochs")

    async def call(self, function: Any, *args: Any, **kwargs: Any) -> Any:
        """Run `function` on the thread and await its result (the loop goes on meanwhile)."""
        return await asyncio.get_running_loop().run_in_executor(
            self._executor, functools.partial(function, *args, **kwargs))

    def post(self, function: Any, *args: Any) -> None:
        """Queue `function` on the thread without waiting: it runs before any call made after this one."""
        self._executor.submit(function, *args)

    def shutdown(self) -> None:
        self._executor.shutdown(wait=False)


class AIOKafkaConsumer(GuardedConsumer, aiokafka.AIOKafkaConsumer):
    """aiokafka.AIOKafkaConsumer that commits, seeks and waits by KIP-232 epochs (see the module docstring)."""

    def __init__(self, *topics: str, on_topic_recreated: RecreatedPolicy = "raise",
                 metadata_wait_timeout_s: float | None = None, metadata_check_interval_s: float = 5.0,
                 no_partitions_warning_s: float | None = 5.0, **configs: Any) -> None:
        bootstrap = _bootstrap(configs.get("bootstrap_servers", "localhost"))
        security = ClientSecurity.of_kafka_python(configs)  # the SDK's own connections, secured as the user's
        self._user_reset = _user_policy(configs.get("auto_offset_reset", "latest"))
        """The user's auto_offset_reset; aiokafka gets "none" and raises instead (`_out_of_range`)."""
        group = configs.get("group_id")
        committed_only = configs.get("isolation_level", "read_uncommitted") == "read_committed"
        self._thread = _GuardThread()
        self._guard = EpochGuard(
            MetadataClient(bootstrap, client_id=str(configs.get("client_id", "aiokafka-" + aiokafka.__version__)),
                           security=security),
            on_topic_recreated=on_topic_recreated, wait_timeout_s=metadata_wait_timeout_s,
            check_interval_s=metadata_check_interval_s,
            isolation_level=READ_COMMITTED if committed_only else READ_UNCOMMITTED)
        self._offsets = OffsetFetcher(bootstrap, security=security)
        self._partitions_watch = None if group is None or no_partitions_warning_s is None else PartitionsWatch(
            bootstrap, str(group), no_partitions_warning_s, offsets=self._offsets, security=security)
        self._pending: set[TopicPartition] = set()
        """Assigned partitions paused until getmany has read the epochs of their committed offsets."""
        self._pending_since = self._pending_noted = 0.0
        self._seek_floors: dict[TopicPartition, InternalMetadata] = {}
        """Floors given to seek, paused, handed to the guard by the next getmany (on the guard's thread)."""
        self._user_paused: set[TopicPartition] = set()
        self._keeping: asyncio.Future[None] | None = None
        try:
            super().__init__(**{**configs, "auto_offset_reset": "none"})
        except BaseException:
            self._close_sdk()
            self._thread.shutdown()
            raise
        if topics:  # through subscribe, so that assignments made without a listener still wait
            self.subscribe(list(topics))

    @property
    def waiting_for_metadata(self) -> frozenset[TopicPartition]:
        """Partitions paused until the cluster's metadata is at least as new as their committed epochs
        (including new ones whose commits getmany has not read yet)."""
        return self._guard.waiting | frozenset(self._pending) | frozenset(self._seek_floors)

    # --- assignment -------------------------------------------------------------------------------------

    def subscribe(self, topics: Any = (), pattern: str | None = None,
                  listener: ConsumerRebalanceListener | None = None) -> None:
        """aiokafka's subscribe; `listener` is the user's, wrapped so that assigned partitions wait for
        current metadata and revoked ones stop waiting (also without a listener of the user's)."""
        if listener is not None and not isinstance(listener, ConsumerRebalanceListener):
            raise TypeError("listener should be an instance of ConsumerRebalanceListener")
        super().subscribe(topics=topics, pattern=pattern, listener=_Listener(self, listener))

    def assign(self, partitions: Iterable[AioTopicPartition]) -> None:
        """aiokafka's assign (which starts every partition afresh, unpaused): each waits again."""
        partitions = list(partitions)
        before = {_key(p) for p in self.assignment()}
        super().assign(partitions)
        self._revoked(before)
        self._assigned(partitions)

    def unsubscribe(self) -> None:
        self._revoked({_key(p) for p in self.assignment()})
        super().unsubscribe()
        if self._partitions_watch is not None:
            self._partitions_watch.stop()

    def _assigned(self, partitions: Iterable[Any]) -> None:
        """New partitions start from their committed offsets: paused until getmany has read their epochs."""
        if self._group_id is None:
            return  # no group, no committed offsets: nothing to wait for
        keys = {_key(p) for p in partitions}
        if keys and not self._pending:
            self._pending_since = time.monotonic()
        self._pending |= keys
        if keys:
            super().pause(*map(_aio, sorted(keys)))

    def _revoked(self, partitions: Iterable[Any]) -> None:
        keys = {_key(p) for p in partitions}
        if not keys:
            return
        self._pending -= keys
        self._user_paused -= keys
        for tp in keys:
            self._seek_floors.pop(tp, None)
        if self._thread is not None:  # not stopped
            self._thread.post(self._guard.forget, keys)

    # --- seek, positions, pause -------------------------------------------------------------------------

    def seek(self, partition: AioTopicPartition, offset: int, internal_metadata: str | None = None) -> None:
        """aiokafka's seek, and KIP-232's: with `internal_metadata` (the JSON that
        position_with_internal_metadata gave), the partition waits for metadata at least that new.
        InvalidInternalMetadataError, naming the partition and the text, when it does not parse."""
        tp = _key(partition)
        floor = parse_internal(tp, internal_metadata) if internal_metadata is not None else None
        super().seek(partition, offset)
        self._pending.discard(tp)  # its position no longer comes from the committed offset
        if floor is not None:
            self._seek_floors[tp] = floor
            super().pause(partition)
        else:
            self._seek_floors.pop(tp, None)
            self._release([tp])

    async def seek_to_beginning(self, *partitions: AioTopicPartition) -> Any:
        result = await super().seek_to_beginning(*partitions)
        self._not_from_committed(partitions)
        return result

    async def seek_to_end(self, *partitions: AioTopicPartition) -> Any:
        result = await super().seek_to_end(*partitions)
        self._not_from_committed(partitions)
        return result

    def _not_from_committed(self, partitions: Iterable[AioTopicPartition]) -> None:
        keys = {_key(p) for p in (partitions or self.assignment())}
        self._pending -= keys
        self._release(keys)

    async def position_with_internal_metadata(self, partition: AioTopicPartition) -> tuple[int, str]:
        """(position, internal metadata JSON) of an assigned partition, to store outside Kafka (KIP-232, 7)."""
        offset = await self.position(partition)
        internal = await self._thread.call(self._guard.internal_metadata, _key(partition))
        return offset, internal.to_json()

    def pause(self, *partitions: AioTopicPartition) -> None:
        super().pause(*partitions)
        self._user_paused |= {_key(p) for p in partitions}

    def resume(self, *partitions: AioTopicPartition) -> None:
        """aiokafka's resume, except for partitions still waiting for current metadata: getmany
        resumes those once it is current."""
        if not all(isinstance(p, AioTopicPartition) for p in partitions):
            raise TypeError("partitions must be TopicPartition namedtuples")
        keys = {_key(p) for p in partitions}
        self._user_paused -= keys
        self._release(keys)

    def _release(self, partitions: Iterable[TopicPartition]) -> None:
        """Resume what neither the user nor a wait holds back."""
        assigned = {_key(p) for p in self.assignment()}
        held = self._user_paused | self._pending | self._guard.waiting | set(self._seek_floors)
        free = sorted(tp for tp in partitions if tp in assigned and tp not in held)
        if free:
            super().resume(*map(_aio, free))

    # --- getmany ----------------------------------------------------------------------------------------

    async def getmany(self, *partitions: AioTopicPartition, timeout_ms: float = 0,
                      max_records: int | None = None) -> dict[AioTopicPartition, list[Any]]:
        if self._closed or timeout_ms < 0:
            return await super().getmany(*partitions, timeout_ms=timeout_ms, max_records=max_records)
        deadline = time.monotonic() + timeout_ms / 1000
        while True:
            await self._keep()
            try:
                records = await super().getmany(*partitions, timeout_ms=self._step_ms(deadline),
                                                max_records=max_records)
            except _WOULD_RESET as exc:
                records = await self._out_of_range(exc)
            if records or time.monotonic() >= deadline:
                return records

    async def getone(self, *partitions: AioTopicPartition) -> Any:
        """aiokafka's getone (and async iteration): the next record, through getmany's checks."""
        while True:
            records = await self.getmany(*partitions, timeout_ms=1000 * self._guard.check_interval_s, max_records=1)
            for batch in records.values():
                if batch:
                    return batch[0]

    def _step_ms(self, deadline: float) -> float:
        left = max(0.0, deadline - time.monotonic())
        waiting = self._pending or self._seek_floors or self._guard.waiting
        return 1000 * min(left, _STEP_S if waiting else self._guard.check_interval_s)

    async def _keep(self) -> None:
        """`_keep_epochs`, run as a task of its own that a cancelled getmany (the caller's timeout) does not
        cancel: the guard's calls have effects (floors settled, ids learned) that the loop must then apply
        (partitions resumed, recreated ones reset), whoever still awaits them. A check still running from a
        cancelled call is awaited instead of starting another; its error, if any, is raised here."""
        if self._keeping is None or self._keeping.done():
            if not self._checks_due():
                return  # the common getmany: no task, no thread
            self._keeping = asyncio.ensure_future(self._keep_epochs())
            self._keeping.add_done_callback(_retrieved)
        await asyncio.shield(self._keeping)

    def _checks_due(self) -> bool:
        """Whether `_keep_epochs` has anything to do now; an assignment is noted here (that asks nothing)."""
        if self._pending or self._seek_floors or self._guard.waiting or self._guard.watch_due():
            return True
        topics = self._watched_topics()
        if self._partitions_watch is None or not topics:
            return False
        if self.assignment():
            self._partitions_watch.check(topics, True)
            return False
        return True

    def _watched_topics(self) -> frozenset[str] | None:
        """The subscription's topics, None for a manual assignment (its partitions are the user's)."""
        return self.subscription() if self._subscription.partitions_auto_assigned() else None

    async def _keep_epochs(self) -> None:
        """Read the commits of new partitions; hand seeks' floors to the guard; resume the partitions whose
        metadata caught up; reset or refuse recreated topics. Leaves the loop only when one of those is due."""
        if self._pending:
            await self._take_committed_floors()
        if self._seek_floors:
            floors, self._seek_floors = self._seek_floors, {}
            await self._thread.call(self._guard.expect, floors)
            self._release(floors)
        if self._guard.waiting:
            settled = await self._thread.call(self._guard.settle, _STEP_S)
            await self._reset(settled.recreated)
            self._release(settled.ready)
        assigned = {_key(p) for p in self.assignment()}
        topics = self._watched_topics()
        if self._partitions_watch is not None and topics:
            if assigned:  # noting it asks nothing
                self._partitions_watch.check(topics, True)
            else:
                await self._thread.call(self._partitions_watch.check, topics, False)
        if assigned and self._guard.watch_due():
            watched: Settled = await self._thread.call(self._guard.watch, assigned)
            if watched.held:
                super().pause(*map(_aio, watched.held))
            await self._reset(watched.recreated)

    async def _take_committed_floors(self) -> None:
        assigned = {_key(p) for p in self.assignment()}
        self._pending &= assigned
        if not self._pending:
            return
        wanted = sorted(self._pending)
        try:
            committed = await self._thread.call(self._offsets.fetch, self._group_id, wanted, timeout=_COMMITTED_TRY_S)
        except BrokerError as exc:
            if not is_retriable(exc):
                raise
            now = time.monotonic()
            if now - self._pending_noted >= _COMMITTED_NOTE_S:
                self._pending_noted = now
                log.warning("group %r: committed offsets of %s not read for %.0f s (%s); those partitions stay "
                            "paused and each getmany asks the coordinator again", self._group_id,
                            ", ".join(map(str, wanted)), now - self._pending_since, exc)
            return
        read = [tp for tp in wanted if tp in self._pending]  # not revoked or seeked meanwhile
        self._pending -= set(read)
        floors = {tp: split(tp, committed[tp].metadata)[1] if tp in committed else None for tp in read}
        await self._thread.call(self._guard.expect, floors)  # those with epochs wait in the guard, paused
        self._release(read)

    async def _reset(self, partitions: Iterable[TopicPartition]) -> None:
        partitions = list(map(_aio, partitions))
        if partitions:
            seek = super().seek_to_beginning if self._guard.policy == "earliest" else super().seek_to_end
            await seek(*partitions)

    async def _out_of_range(self, exc: Errors.KafkaError) -> dict[AioTopicPartition, list[Any]]:
        """Where aiokafka, built with auto_offset_reset="none", would have reset by itself: the guard
        asks the partition's current leader whether the position is really gone (a stale broker's
        answer never resets anything) and the partition goes on where the rule says. Under the
        user's policy none, what would be a reset raises aiokafka's own error. Delivers nothing: {}."""
        if isinstance(exc, Errors.NoOffsetForPartitionError):
            positions: Mapping[Any, int | None] = {exc.args[0]: None} if exc.args else {}
        else:
            positions = dict(exc.args[0]) if exc.args else {}
        for partition, position in positions.items():
            if not self._subscription.is_assigned(partition):
                continue
            try:
                resolution = await self._thread.call(self._guard.resolve_out_of_range, _key(partition), position,
                                                     self._user_reset)
            except InvalidOffsetError as refused:
                raise exc from refused
            super().seek(partition, resolution.offset)
        return {}

    # --- commits ----------------------------------------------------------------------------------------

    async def commit(self, offsets: Mapping[AioTopicPartition, Any] | None = None) -> None:
        """aiokafka's commit, each offset's metadata string carrying the internal metadata too.

        Without `offsets`, commits the consumed positions of the assignment (as aiokafka does)."""
        assignment = None if self._subscription.subscription is None else self._subscription.subscription.assignment
        if self._group_id is None or (offsets is None and assignment is None):
            return await super().commit(offsets)  # aiokafka's own errors
        given = assignment.all_consumed_offsets() if offsets is None else commit_structure_validate(dict(offsets))
        internal = await self._thread.call(_commit_metadata, self._guard, [_key(p) for p in given])
        await super().commit({p: OffsetAndMetadata(entry.offset, encode(entry.metadata, internal[_key(p)]))
                              for p, entry in given.items()})

    async def committed_internal_metadata(self, partitions: Iterable[Any]) -> dict[TopicPartition,
                                                                                   InternalMetadata | None]:
        """What the group's commits say about each partition's epochs (None: committed without them, or never)."""
        keys = sorted({_key(p) for p in partitions})
        entries = await self._thread.call(self._offsets.fetch, self._group_id, keys)
        return {tp: split(tp, entries[tp].metadata)[1] if tp in entries else None for tp in keys}

    async def stop(self) -> None:
        try:
            await super().stop()
        finally:
            if self._thread is not None:
                await self._thread.call(self._close_sdk)
                self._thread.shutdown()
                self._thread = None  # type: ignore[assignment]

    def _close_sdk(self) -> None:
        try:
            self._guard.close()
        finally:
            try:
                if self._partitions_watch is not None:
                    self._partitions_watch.close()
            finally:
                self._offsets.close()


def _commit_metadata(guard: EpochGuard, partitions: list[TopicPartition]) -> dict[TopicPartition, InternalMetadata]:
    """Each partition's internal metadata to commit (EpochGuard.commit_metadata: TopicRecreatedError for a
    position read in a topic since recreated); aiokafka's records carry no leader epoch."""
    return {tp: guard.commit_metadata(tp) for tp in partitions}


class _Listener(ConsumerRebalanceListener):
    """The rebalance listener `subscribe` installs: the wrapper's bookkeeping around the user's listener."""

    def __init__(self, consumer: AIOKafkaConsumer, user: ConsumerRebalanceListener | None) -> None:
        self.consumer = consumer
        self.user = user

    async def on_partitions_revoked(self, revoked: Any) -> None:
        self.consumer._revoked(revoked)
        if self.user is not None:
            await _awaited(self.user.on_partitions_revoked(revoked))

    async def on_partitions_assigned(self, assigned: Any) -> None:
        self.consumer._assigned(assigned)  # first, so that a seek in the user's callback is taken as such
        if self.user is not None:
            await _awaited(self.user.on_partitions_assigned(assigned))


def _retrieved(task: asyncio.Future[None]) -> None:
    """A check's error is raised to the getmany awaiting it; one whose caller was cancelled meanwhile is
    not an unretrieved-exception warning (the condition is found again by the next check)."""
    if not task.cancelled():
        task.exception()


async def _awaited(result: Any) -> Any:
    """A listener method's result, awaited when it is a coroutine (aiokafka takes both kinds)."""
    return await result if asyncio.iscoroutine(result) else result
