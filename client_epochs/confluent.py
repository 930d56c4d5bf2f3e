"""`Consumer`: confluent_kafka.Consumer with KIP-232 internal metadata, a drop-in replacement.

Same constructor and methods (it is a subclass: everything not overridden is confluent-kafka's),
plus what KIP-232 adds to a consumer:

- `commit()` stores the user's metadata and the internal metadata (topic_epoch from the metadata
  client, leader_epoch of the last message consumed) together in the one metadata string;
  `committed()` gives back only the user's metadata. It reads with its own OffsetFetch, because
  librdkafka misreads metadata strings other clients wrote (librdkafka#4649).
- After an assignment, or `seek(partition, offset, internal_metadata)`, the partitions stay paused
  until the cluster's metadata is at least as new as the committed epochs (KAFKA-6262), and are
  resumed by the next `poll()`/`consume()` that finds it so. While the group's coordinator cannot
  say what was committed (COORDINATOR_NOT_AVAILABLE while its partition has no leader, a broker
  down), the new partitions stay paused and each poll asks again, as Kafka's consumer does; the log
  says which group, which partitions and for how long. Only an error asking again cannot cure
  (GROUP_AUTHORIZATION_FAILED, ...) is raised from poll.
- `position_with_internal_metadata(partition)` gives (offset, the KIP's JSON) for offsets stored
  outside Kafka.
- A topic deleted and recreated since its offsets were committed raises TopicRecreatedError from
  poll/consume, unless `on_topic_recreated` is "earliest" or "latest" (then the partition is reset).
  The internal metadata names the topic id, so a commit or a seek's internal metadata from another
  incarnation of the topic is recognised with certainty; a running consumer holds a topic's
  partitions while the topic is gone, and never commits an old position onto a new topic (the
  coordinator refuses internal metadata naming an old id). See consumer_guard.
- OFFSET_OUT_OF_RANGE resets only when the data is really gone. librdkafka is given
  `auto.offset.reset=error`, so it stops the partition and delivers a _AUTO_OFFSET_RESET event
  instead of resetting on a stale broker's word; the wrapper keeps the user's policy, asks the
  current leader for its log bounds (EpochGuard.resolve_out_of_range), restarts the partition where
  the rule says and never hands the event to the user. `resets` counts the real resets. Under
  policy error/none, poll/consume raise OffsetOutOfRangeError (or NoOffsetForPartitionError) until
  the partition is seeked. A partition without a committed offset starts by the policy as before.
  While no current leader answers, the partition stays stopped (nothing skipped, nothing repeated)
  and is asked about again at the next poll.

- A subscribed consumer left without partitions for `no_partitions_warning_s` asks the cluster why
  and logs it at a slow pace, naming the group, the reason and how long (`waiting: group coordinator
  for "G" unavailable (COORDINATOR_NOT_AVAILABLE) for 45 s`); `waiting_reason` gives the same line
  (consumer_guard.PartitionsWatch).

Options beyond confluent-kafka's, as keyword arguments: `on_topic_recreated`, `metadata_wait_timeout_s`
(None: wait for current metadata as long as it takes; else StaleMetadataError after that long),
`metadata_check_interval_s` (how often poll looks for recreated topics) and `no_partitions_warning_s`
(seconds without partitions before the consumer says why; None: never). Auto-commit
(`enable.auto.commit`) is librdkafka's own and carries no internal metadata: commit explicitly.
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Callable, Iterable, Sequence
from typing import Any

import confluent_kafka
from confluent_kafka import OFFSET_BEGINNING, OFFSET_END, OFFSET_INVALID, KafkaError, KafkaException

from client_epochs.committed import encode, parse_internal, split
from client_epochs.connection import BrokerError
from client_epochs.consumer_guard import EpochGuard, GuardedConsumer, PartitionsWatch, RecreatedPolicy
from client_epochs.errors import InvalidOffsetError
from client_epochs.log_bounds import READ_COMMITTED, READ_UNCOMMITTED, LogBoundsError, LogBoundsUnavailableError
from client_epochs.metadata_client import MetadataClient
from client_epochs.model import TopicPartition
from client_epochs.offset_fetch import CommittedOffset, OffsetFetcher, is_retriable
from client_epochs.out_of_range import normalize_policy
from quorum.wire.internal_metadata import InternalMetadata
from quorum.wire.sasl_client import ClientSecurity

log = logging.getLogger(__name__)

_STEP_S = 0.2
"""How long one poll of librdkafka lasts while partitions wait, so that their metadata is re-checked."""
_COMMITTED_FETCH_FAILED = "Failed to fetch committed offset"
"""How librdkafka's consumer error events begin when an OffsetFetch for its assignment failed."""
_OFFSET_STORED = -1000
_RESOLVE_MIN_S, _RESOLVE_MAX_S = 5.0, 30.0
"""Bounds on one out-of-range lookup: a short poll may overrun by up to the minimum, a long one waits
at most the maximum before the partition is retried at the next poll."""
_RESET = "auto.offset.reset"
_COMMITTED_TRY_S = 1.0
"""How long one poll (or the assignment) waits for the committed epochs of new partitions; if the
coordinator cannot answer yet, they stay paused and the next poll asks again."""
_COMMITTED_NOTE_S = 10.0
"""How often a consumer still waiting for its group's committed offsets says so."""
_POLICY_STARTS: dict[str, int | None] = {"earliest": OFFSET_BEGINNING, "latest": OFFSET_END, "error": None}
"""Where a partition the group never committed starts, by `auto.offset.reset` (error: librdkafka stops it)."""
_Commits = dict[TopicPartition, CommittedOffset]


def _key(partition: confluent_kafka.TopicPartition) -> TopicPartition:
    return TopicPartition(partition.topic, partition.partition)



def incremental_assignment(config: dict[str, Any]) -> bool:
    """Whether librdkafka hands this consumer's partitions over one at a time (incremental_assign), not as
    a whole (assign): always under KIP-848's `group.protocol=consumer`, where the broker assigns and
    `partition.assignment.strategy` is not used; under the classic protocol, with a cooperative assignor."""
    if str(config.get("group.protocol", "classic")).strip().lower() == "consumer":
        return True
    return "cooperative" in str(config.get("partition.assignment.strategy", ""))

class Consumer(GuardedConsumer, confluent_kafka.Consumer):
    """confluent_kafka.Consumer that commits, seeks and waits by KIP-232 epochs (see the module docstring)."""

    def __init__(self, config: dict[str, Any], *args: Any, on_topic_recreated: RecreatedPolicy = "raise",
                 metadata_wait_timeout_s: float | None = None, metadata_check_interval_s: float = 5.0,
                 no_partitions_warning_s: float | None = 5.0, **kwargs: Any) -> None:
        merged = {**config, **{k: v for k, v in kwargs.items()
                               if isinstance(v, str | int | float | bool) or k == "oauth_cb"}}
        # the SDK's own connections, secured as the user's; a setting they cannot use is refused here, first
        security = ClientSecurity.of_client_properties(merged)
        nested = merged.get("default.topic.config")
        policy = merged.get(_RESET, nested.get(_RESET) if isinstance(nested, dict) else None)
        self._policy = str(policy) if policy is not None else "largest"  # librdkafka's default
        normalize_policy(self._policy)
        config = {**config, _RESET: "error"}
        if isinstance(config.get("default.topic.config"), dict):
            config["default.topic.config"] = {**config["default.topic.config"], _RESET: "error"}
        kwargs.pop(_RESET, None)
        super().__init__(config, *args, **kwargs)
        bootstrap = str(merged.get("bootstrap.servers") or merged.get("metadata.broker.list"))
        self._group = merged.get("group.id")
        self._incremental = incremental_assignment(merged)
        isolation = str(merged.get("isolation.level", "read_committed"))  # librdkafka's default
        self._guard = EpochGuard(MetadataClient(bootstrap, security=security), on_topic_recreated=on_topic_recreated,
                                 wait_timeout_s=metadata_wait_timeout_s, check_interval_s=metadata_check_interval_s,
                                 isolation_level=READ_COMMITTED if isolation == "read_committed" else READ_UNCOMMITTED)
        self._offsets = OffsetFetcher(bootstrap, security=security)
        self._partitions_watch = None if not self._group or no_partitions_warning_s is None else PartitionsWatch(
            bootstrap, str(self._group), no_partitions_warning_s, offsets=self._offsets, security=security)
        self._subscribed: list[str] = []
        """The topics of the current subscription (none: not subscribed)."""
        self._leader_epochs: dict[TopicPartition, int] = {}
        self._positions: dict[TopicPartition, int] = {}
        """Each partition's position as far as the wrapper knows it: after the last message handed to
        the user, else the offset it was assigned or seeked to, or its committed offset."""
        self._stopped: dict[TopicPartition, int | None] = {}
        """Partitions librdkafka stopped on out-of-range (or no committed offset), with the position the
        event named (none: see `_stopped_position`)."""
        self._user_paused: set[TopicPartition] = set()
        self._pending: set[TopicPartition] = set()
        """Assigned partitions starting from their committed offset whose commits were not read yet (paused)."""
        self._pending_since = 0.0
        self._pending_noted = 0.0
        self._assigned_in_callback = False
        self._delivered = False
        """Whether a record was delivered since the last poll's checks: the consumer holds partitions."""
        self._read: set[TopicPartition] = set()
        """Assigned partitions a record was delivered from since their assignment (they were fetched)."""

    @property
    def waiting_for_metadata(self) -> frozenset[TopicPartition]:
        """Partitions paused until the cluster's metadata is at least as new as their committed epochs."""
        return self._guard.waiting

    @property
    def waiting_for_committed(self) -> frozenset[TopicPartition]:
        """New partitions paused until the group's coordinator says what was committed for them."""
        return frozenset(self._pending)

    # --- assignment -------------------------------------------------------------------------------------

    def subscribe(self, topics: list[str], on_assign: Callable[..., Any] | None = None,
                  on_revoke: Callable[..., Any] | None = None, on_lost: Callable[..., Any] | None = None) -> None:
        """confluent-kafka's subscribe; the callbacks are the user's, wrapped so that assigned
        partitions wait for current metadata and revoked ones stop waiting."""

        def assigned(_: Any, partitions: list[confluent_kafka.TopicPartition]) -> None:
            self._assigned_in_callback = False
            if on_assign is not None:
                on_assign(self, partitions)
            if not self._assigned_in_callback:  # as confluent-kafka does when the callback did not assign
                (self.incremental_assign if self._incremental else self.assign)(partitions)

        def revoked(callback: Callable[..., Any] | None) -> Callable[..., None]:
            def handle(_: Any, partitions: list[confluent_kafka.TopicPartition]) -> None:
                self._forget([_key(p) for p in partitions])
                if callback is not None:
                    callback(self, partitions)
            return handle

        options: dict[str, Any] = {"on_assign": assigned, "on_revoke": revoked(on_revoke)}
        if on_lost is not None:
            options["on_lost"] = revoked(on_lost)
        super().subscribe(topics, **options)
        self._subscribed = list(topics)

    def unsubscribe(self) -> None:
        super().unsubscribe()
        self._subscribed = []
        if self._partitions_watch is not None:
            self._partitions_watch.stop()

    def assign(self, partitions: list[confluent_kafka.TopicPartition]) -> None:
        self._forget([*self._guard.waiting, *self._positions, *self._stopped, *self._user_paused])
        partitions, committed = self._start_uncommitted(partitions)
        self._unpause_carried_over(partitions)
        super().assign(partitions)
        self._assigned_in_callback = True
        self._note_starts(partitions)
        self._wait_for_committed_epochs(partitions, committed)

    def incremental_assign(self, partitions: list[confluent_kafka.TopicPartition]) -> None:
        self._forget([_key(p) for p in partitions])
        partitions, committed = self._start_uncommitted(partitions)
        self._unpause_carried_over(partitions)
        super().incremental_assign(partitions)
        self._assigned_in_callback = True
        self._note_starts(partitions)
        self._wait_for_committed_epochs(partitions, committed)

    def unassign(self) -> None:
        self._forget([*self._guard.waiting, *self._positions, *self._stopped, *self._user_paused])
        super().unassign()

    def incremental_unassign(self, partitions: list[confluent_kafka.TopicPartition]) -> None:
        self._forget([_key(p) for p in partitions])
        super().incremental_unassign(partitions)

    def _unpause_carried_over(self, partitions: Sequence[confluent_kafka.TopicPartition]) -> None:
        """Clear librdkafka's pause of partitions about to be assigned: it keeps a partition's pause through
        an unassignment and a later assignment (Java's consumer forgets it with the partition), and the
        wrapper, which forgets its pauses with the partition too, would never resume it. A partition the
        wrapper held while its topic was gone, then revoked (KIP-848 revokes a deleted topic's partitions)
        and assigned again in the topic created again, was never fetched (a member silent for 90 s).
        Before the assignment, so that the fetch starts unpaused; the wrapper pauses what must wait after."""
        if partitions:
            super().resume([confluent_kafka.TopicPartition(p.topic, p.partition) for p in partitions])

    def _note_starts(self, partitions: Sequence[confluent_kafka.TopicPartition]) -> None:
        """Positions given with an assignment are known positions (see `_stopped_by`)."""
        self._positions.update({_key(p): p.offset for p in partitions if p.offset >= 0})

    def _forget(self, partitions: Sequence[TopicPartition]) -> None:
        """What the wrapper knew of partitions leaving (or entering afresh) the assignment."""
        self._guard.forget(partitions)
        for tp in partitions:
            self._positions.pop(tp, None)
            self._stopped.pop(tp, None)
            self._user_paused.discard(tp)
            self._pending.discard(tp)
            self._read.discard(tp)

    def pause(self, partitions: list[confluent_kafka.TopicPartition]) -> None:
        super().pause(partitions)
        self._user_paused.update(_key(p) for p in partitions)

    def resume(self, partitions: list[confluent_kafka.TopicPartition]) -> None:
        """confluent-kafka's resume, except for partitions whose committed offsets are not read yet, or
        that wait for current metadata: poll resumes those once it has their epochs and they are current."""
        self._user_paused.difference_update(_key(p) for p in partitions)
        free = [p for p in partitions if _key(p) not in self._pending and _key(p) not in self._guard.waiting]
        if free:
            super().resume(free)

    def _start_uncommitted(self, partitions: Sequence[confluent_kafka.TopicPartition]
                           ) -> tuple[list[confluent_kafka.TopicPartition], _Commits | None]:
        """`partitions` to assign, those the group never committed set to start where `auto.offset.reset`
        says (the log's beginning or end), and the commits read to decide it (None: not read).

        The start is the offset the current leader's log bounds give (`_policy_starts`), as the restart
        of a stopped partition used; a recreated topic's is the logical beginning or end.

        Why before assigning: librdkafka is given `auto.offset.reset=error`, so a partition assigned at
        its committed offset without one would be stopped (_AUTO_OFFSET_RESET), and a stopped partition
        can only be started by assigning it again (and one of a recreated topic needs a seek that
        librdkafka refuses before its fetch started). Done from poll, outside the rebalance callback, that
        assignment is taken by librdkafka's group state machine for the application's answer to a
        rebalance it has just handed over and the application has not served yet (it looks only at its
        join state): under KIP-848 it then acknowledged a revocation it never carried out, and the
        coordinator gave a partition still fetched here to another member, or left a partition of a
        recreated topic unstarted. Every new partition of a KIP-848 group, of a recreated topic above
        all, starts without a commit; a recreated topic's starts where `on_topic_recreated` says
        (EpochGuard.fresh_starts). Policy error/none keeps librdkafka's stop: poll raises there.
        The commits read are the ones `_wait_for_committed_epochs` takes floors from; when the
        coordinator cannot answer in `_COMMITTED_TRY_S`, nothing changes and poll asks again."""
        partitions = list(partitions)
        from_committed = sorted({_key(p) for p in partitions if p.offset in (OFFSET_INVALID, _OFFSET_STORED)})
        if not from_committed or not self._group:
            return partitions, None
        try:
            committed = self._offsets.fetch(self._group, from_committed, timeout=_COMMITTED_TRY_S)
        except BrokerError as exc:
            if not is_retriable(exc):
                raise
            return partitions, None
        fresh = [tp for tp in from_committed if tp in committed and committed[tp].offset < 0]
        held = {tp.topic for tp in (*self._positions, *self._guard.waiting) if tp not in fresh}
        how = self._guard.fresh_starts(fresh, held)
        recreated = OFFSET_BEGINNING if self._guard.policy == "earliest" else OFFSET_END
        starts = {tp: recreated for tp, start in how.items() if start == "recreated"}
        starts.update(self._policy_starts(sorted(tp for tp, start in how.items() if start == "reset")))
        return [p if (start := starts.get(_key(p))) is None else confluent_kafka.TopicPartition(
            p.topic, p.partition, start) for p in partitions], committed

    def _policy_starts(self, fresh: Sequence[TopicPartition]) -> dict[TopicPartition, int]:
        """Where `auto.offset.reset` starts each partition of `fresh` (nothing committed), as its current
        leader's log bounds say (EpochGuard.resolve_out_of_range, the lookup a stopped partition's restart
        made), within `_RESOLVE_MIN_S` for all of them. A partition not resolved in time, or under policy
        error/none, is left out: it is assigned as before, and librdkafka's stop decides it from poll."""
        if _POLICY_STARTS[normalize_policy(self._policy)] is None:
            return {}
        deadline = time.monotonic() + _RESOLVE_MIN_S
        starts: dict[TopicPartition, int] = {}
        for tp in fresh:
            left = deadline - time.monotonic()
            if left <= 0:
                break
            try:
                starts[tp] = self._guard.resolve_out_of_range(tp, None, self._policy, timeout=left).offset
            except (LogBoundsUnavailableError, LogBoundsError, InvalidOffsetError) as exc:
                log.info("%s: its start is left to librdkafka's stop: %s", tp, exc)
        return starts

    def _wait_for_committed_epochs(self, partitions: Sequence[confluent_kafka.TopicPartition],
                                   committed: _Commits | None = None) -> None:
        """Partitions starting from their committed offset pause until its epochs are read and taken as
        floors: here with `committed` (read before assigning) or if the coordinator answers within
        `_COMMITTED_TRY_S`, else at a later poll."""
        from_committed = [_key(p) for p in partitions if p.offset in (OFFSET_INVALID, _OFFSET_STORED)]
        if not from_committed or not self._group:
            return
        self._pause_keys(from_committed)
        if not self._pending:
            self._pending_since = time.monotonic()
        self._pending.update(from_committed)
        self._take_committed_floors(committed)

    def _take_committed_floors(self, committed: _Commits | None = None) -> None:
        """Read the pending partitions' commits (unless `committed` has them all); their epochs become
        floors (those with epochs stay paused in the guard), the others resume. A coordinator that cannot
        answer yet leaves them pending, said at a slow pace; an error that asking again cannot cure is raised."""
        assigned = {_key(p) for p in self.assignment()}
        self._pending &= assigned
        if not self._pending:
            return
        wanted = sorted(self._pending)
        if committed is None or not self._pending <= committed.keys():
            try:
                committed = self._offsets.fetch(self._group, wanted, timeout=_COMMITTED_TRY_S)
            except BrokerError as exc:
                if not is_retriable(exc):
                    raise
                self._note_pending(wanted, exc)
                return
        committed = {tp: committed[tp] for tp in wanted if tp in committed}
        self._pending.clear()
        self._positions.update({tp: entry.offset for tp, entry in committed.items() if entry.offset >= 0})
        floors = {tp: split(tp, entry.metadata)[1] for tp, entry in committed.items()}
        held = set(self._guard.expect(floors))
        free = [tp for tp in wanted if tp not in held and tp not in self._user_paused]
        if free:
            super().resume([confluent_kafka.TopicPartition(tp.topic, tp.partition) for tp in free])

    def _note_pending(self, wanted: Sequence[TopicPartition], exc: BaseException) -> None:
        now = time.monotonic()
        if now - self._pending_noted >= _COMMITTED_NOTE_S:
            self._pending_noted = now
            log.warning("group %r: committed offsets of %s not read for %.0f s (%s); those partitions stay "
                        "paused and each poll asks the coordinator again", self._group,
                        ", ".join(map(str, wanted)), now - self._pending_since, exc)

    # --- seek and positions -----------------------------------------------------------------------------

    def seek(self, partition: confluent_kafka.TopicPartition, offset: int | None = None,
             internal_metadata: str | None = None) -> None:
        """confluent-kafka's seek, and KIP-232's: with `internal_metadata` (the JSON that
        position_with_internal_metadata gave), the partition waits for metadata at least that new.
        InvalidInternalMetadataError, naming the partition and the text, when it does not parse."""
        tp = _key(partition)
        floor = parse_internal(tp, internal_metadata) if internal_metadata is not None else None
        if offset is not None:
            partition = confluent_kafka.TopicPartition(partition.topic, partition.partition, offset)
        if tp in self._stopped:  # librdkafka refuses to seek a partition it stopped (_STATE)
            del self._stopped[tp]
            self._restart({tp: partition.offset})
        else:
            super().seek(partition)
        if partition.offset >= 0:
            self._positions[tp] = partition.offset
        else:
            self._positions.pop(tp, None)
        if floor is not None:
            self._pause_keys(self._guard.expect({tp: floor}))

    def position_with_internal_metadata(self, partition: confluent_kafka.TopicPartition) -> tuple[int, str]:
        """(position, internal metadata JSON) of an assigned partition, to store outside Kafka (KIP-232, 7)."""
        tp = _key(partition)
        (position,) = self.position([confluent_kafka.TopicPartition(tp.topic, tp.partition)])
        internal = self._guard.internal_metadata(tp, self._leader_epochs.get(tp))
        return position.offset, internal.to_json()

    # --- poll -------------------------------------------------------------------------------------------

    def poll(self, timeout: float | None = None) -> confluent_kafka.Message | None:
        deadline = _deadline(timeout)
        while True:
            self._keep_epochs(deadline)
            message = super().poll(self._step(deadline))
            if message is not None and self._handed(message):
                return message
            if _passed(deadline):
                return None

    def consume(self, num_messages: int = 1, timeout: float | None = -1) -> list[confluent_kafka.Message]:
        deadline = _deadline(timeout)
        while True:
            self._keep_epochs(deadline)
            messages = self._handed_batch(super().consume(num_messages, self._step(deadline)))
            if messages or _passed(deadline):
                return messages

    def _keep_epochs(self, deadline: float | None) -> None:
        """Read the commits of new partitions if not done yet; resume the partitions whose metadata
        caught up; reset or refuse recreated topics; restart the partitions librdkafka stopped on
        out-of-range where their current leader says."""
        if self._pending:
            self._take_committed_floors()
        if self._guard.waiting:
            settled = self._guard.settle(timeout=_STEP_S)
            self._reset(settled.recreated)
            ready = [tp for tp in settled.ready if tp not in self._user_paused]
            if ready:
                super().resume([confluent_kafka.TopicPartition(tp.topic, tp.partition) for tp in ready])
        assigned: list[TopicPartition] | None = None  # asked of librdkafka only when needed: a round trip

        def assignment() -> list[TopicPartition]:
            nonlocal assigned
            if assigned is None:
                assigned = [_key(p) for p in self.assignment()]
            return assigned

        if self._partitions_watch is not None and self._subscribed:
            self._partitions_watch.check(self._subscribed, self._delivered or bool(assignment()))
        if self._guard.watch_due():  # not partitions whose commits are unread: their floors will decide
            watched = self._guard.watch([tp for tp in assignment() if tp not in self._pending])
            self._pause_keys(watched.held)
            self._reset(watched.recreated)
        if self._stopped:
            self._resolve_stopped(set(assignment()), deadline)
        self._delivered = False

    # --- out of range -----------------------------------------------------------------------------------

    def _handed_batch(self, messages: list[confluent_kafka.Message]) -> list[confluent_kafka.Message]:
        """The messages of one consume() that go to the user (`_handed`). The common batch, records only
        and no partition stopped, has only each partition's last record noted: the same positions and
        leader epochs, without a call per record (the wrapper's cost in consume throughput)."""
        if self._stopped:
            return [m for m in messages if self._handed(m)]
        last: dict[tuple[str, int], confluent_kafka.Message] = {}
        for message in messages:
            if message.error() is not None:
                return [m for m in messages if self._handed(m)]  # nothing noted yet: all of them, in order
            last[message.topic(), message.partition()] = message
        for message in last.values():
            self._note(message)
        return messages

    def _handed(self, message: confluent_kafka.Message) -> bool:
        """Whether `message` goes to the user, in the order librdkafka gave it: its out-of-range stops
        are the wrapper's; a record is noted (its position and leader epoch) first."""
        if self._stopped_by(message):
            return False
        self._restart_unfetched(message)
        self._note(message)
        return True

    def _restart_unfetched(self, message: confluent_kafka.Message) -> None:
        """When `message` is librdkafka's report that its assignment's committed offsets could not be
        fetched, the partitions it left unstarted are assigned again; the report goes to the user as before.

        librdkafka does not retry such an OffsetFetch nor start those partitions afterwards: a
        coordinator that just moved answers NOT_COORDINATOR for the whole request, and the partitions
        stay assigned, never fetched, until assigned again (librdkafka issue 5586, open; the soak's
        replicator copied nothing for minutes, seed 61). Java's consumer asks the new coordinator.
        Assigned again at the committed offset the wrapper read itself, or without an offset (librdkafka
        asks again once it knows the coordinator). A partition counts as unstarted while librdkafka has no
        position for it and nothing was delivered from it, whether or not the wrapper read its commit
        (it used to count only partitions whose commit it had not read, and missed the others)."""
        error = message.error()
        if error is None or not error.str().startswith(_COMMITTED_FETCH_FAILED):
            return
        named = None if message.topic() is None else TopicPartition(message.topic(), message.partition())
        # at the position the wrapper knows (its own read of the commit), else without one
        unstarted = {tp: self._positions.get(tp, OFFSET_INVALID) for p in self.position(self.assignment())
                     if (tp := _key(p)) not in self._read and p.offset < 0 and named in (None, tp)}
        if unstarted:
            log.warning("%s; assigning %s again, so that librdkafka asks the group's coordinator again",
                        error.str(), ", ".join(str(tp) for tp in sorted(unstarted)))
            self._restart(unstarted)

    def _stopped_by(self, message: confluent_kafka.Message) -> bool:
        """Whether `message` is librdkafka's _AUTO_OFFSET_RESET event (kept from the user, see the module).

        Its offset is the position that got OFFSET_OUT_OF_RANGE; none when nothing was committed, and
        none when librdkafka found the log truncated (KIP-320 validation). There the position the
        wrapper knows when it resolves the stop stands (see `_stopped_position`)."""
        error = message.error()
        if error is None or error.code() != KafkaError._AUTO_OFFSET_RESET or message.topic() is None:
            return False
        tp = TopicPartition(message.topic(), message.partition())
        offset = message.offset()
        self._stopped[tp] = offset if offset is not None and offset >= 0 else None
        log.info("%s stopped by librdkafka at position %s: %s", tp, self._stopped_position(tp), error.str())
        return True

    def _stopped_position(self, tp: TopicPartition) -> int | None:
        """A stopped partition's position: the one its event named, else the one the wrapper knows now:
        after the last message delivered, else the one assigned, restarted at or committed."""
        offset = self._stopped[tp]
        return offset if offset is not None else self._positions.get(tp)

    def _resolve_stopped(self, assigned: set[TopicPartition], deadline: float | None) -> None:
        """Resolve every stopped partition, restart those resolved together, then raise the first
        refusal (policy error/none, or a leader's final error), which stays stopped until seeked."""
        left = _RESOLVE_MAX_S if deadline is None else deadline - time.monotonic()
        timeout = min(max(left, _RESOLVE_MIN_S), _RESOLVE_MAX_S)
        targets: dict[TopicPartition, int] = {}
        refusal: Exception | None = None
        for tp in sorted(self._stopped):
            if tp not in assigned:
                del self._stopped[tp]
                continue
            try:
                targets[tp] = self._guard.resolve_out_of_range(tp, self._stopped_position(tp), self._policy,
                                                               timeout=timeout).offset
            except LogBoundsUnavailableError as exc:
                log.warning("%s stays stopped until its current leader gives its log bounds: %s", tp, exc)
            except (InvalidOffsetError, LogBoundsError) as exc:
                refusal = refusal or exc
        for tp in targets:
            del self._stopped[tp]
        if targets:
            self._restart(targets)
        if refusal is not None:
            raise refusal

    def _restart(self, targets: dict[TopicPartition, int]) -> None:
        """Fetch each partition of `targets` again from its offset. librdkafka cannot seek a partition
        it stopped, but it starts one assigned again. An eager group allows only assign(), so there
        the whole assignment is assigned again, each other partition at its position. Afterwards the
        partitions paused by the user, waiting for metadata, or still stopped are paused, the rest not."""
        wanted = [confluent_kafka.TopicPartition(tp.topic, tp.partition, offset) for tp, offset in targets.items()]
        if self._subscribed and not self._incremental:  # an eager group: librdkafka would refuse, and log it
            restarted = self._assign_all_again(targets)
        else:
            try:
                super().incremental_unassign(wanted)
                super().incremental_assign(wanted)
                restarted = set(targets)
            except KafkaException as exc:
                if exc.args[0].code() != KafkaError._STATE:
                    raise
                restarted = self._assign_all_again(targets)
        for tp, offset in targets.items():
            if offset >= 0:
                self._positions[tp] = offset
            else:
                self._positions.pop(tp, None)
        held = {tp for tp in restarted if tp in self._user_paused or tp in self._guard.waiting or tp in self._stopped}
        self._pause_keys(held)
        if restarted - held:
            super().resume([confluent_kafka.TopicPartition(tp.topic, tp.partition) for tp in restarted - held])

    def _assign_all_again(self, targets: dict[TopicPartition, int]) -> set[TopicPartition]:
        """An eager restart: the whole assignment assigned again, `targets` at their offsets."""
        current = self.position(self.assignment())
        super().assign([confluent_kafka.TopicPartition(p.topic, p.partition, self._restart_offset(p, targets))
                        for p in current])
        return {_key(p) for p in current}

    def _restart_offset(self, partition: confluent_kafka.TopicPartition, targets: dict[TopicPartition, int]) -> int:
        """Where a partition starts again in an eager restart: its target, else librdkafka's position,
        else the one the wrapper knows (assigned or restarted, nothing delivered yet), else committed."""
        tp = _key(partition)
        if tp in targets:
            return targets[tp]
        return partition.offset if partition.offset >= 0 else self._positions.get(tp, OFFSET_INVALID)

    def _reset(self, partitions: Iterable[TopicPartition]) -> None:
        """Move recreated topics' partitions to the new topic's beginning or end (`on_topic_recreated`).
        librdkafka refuses to seek a partition whose fetch has not started yet (just assigned, its
        committed offset still being asked for) or that it stopped (_STATE): those are started again
        there instead. Under KIP-848 that is the common case: the broker revokes a deleted topic's
        partitions and assigns the new topic's, which the next metadata check finds recreated."""
        offset = OFFSET_BEGINNING if self._guard.policy == "earliest" else OFFSET_END
        refused: dict[TopicPartition, int] = {}
        for tp in partitions:
            self._positions.pop(tp, None)
            if tp in self._stopped:  # librdkafka stopped it: seeking would be refused
                del self._stopped[tp]
                refused[tp] = offset
                continue
            try:
                super().seek(confluent_kafka.TopicPartition(tp.topic, tp.partition, offset))
            except KafkaException as exc:
                if exc.args[0].code() != KafkaError._STATE:
                    raise
                refused[tp] = offset
        if refused:
            self._restart(refused)

    def _step(self, deadline: float | None) -> float:
        left = 3600.0 if deadline is None else max(0.0, deadline - time.monotonic())
        waiting = self._guard.waiting or self._pending
        return min(left, _STEP_S) if waiting else min(left, self._guard.check_interval_s)

    def _note(self, message: confluent_kafka.Message) -> None:
        """A record's position and leader epoch. A record of a partition the wrapper holds stopped shows
        the stop outdated: librdkafka fetches it. Its event was queued before a restart (an eager one
        assigns every partition again, and one without a position looks up its commit again, which
        queues another event); resolved later, it would restart the partition behind what was read."""
        if message.error() is None and message.topic() is not None:
            tp = TopicPartition(message.topic(), message.partition())
            if tp in self._stopped:
                del self._stopped[tp]
                log.info("%s delivers again from %d: its stop predates its last restart", tp, message.offset())
            self._positions[tp] = message.offset() + 1
            self._read.add(tp)
            if not self._delivered and self._partitions_watch is not None and self._subscribed:
                # a partition assigned within this very poll delivers at once (started where it starts, not
                # stopped first): the wait ends now, not at the next poll's check
                self._partitions_watch.check(self._subscribed, True)
            self._delivered = True
            epoch = message.leader_epoch()
            if epoch is not None:
                self._leader_epochs[tp] = epoch

    def _pause_keys(self, partitions: Iterable[TopicPartition]) -> None:
        partitions = [confluent_kafka.TopicPartition(tp.topic, tp.partition) for tp in partitions]
        if partitions:
            super().pause(partitions)

    # --- commits ----------------------------------------------------------------------------------------

    def commit(self, message: confluent_kafka.Message | None = None,
               offsets: list[confluent_kafka.TopicPartition] | None = None, asynchronous: bool = True) -> Any:
        """confluent-kafka's commit, each offset's metadata string carrying the internal metadata too.

        With neither `message` nor `offsets`, commits the consumed positions of the assignment.
        """
        if message is not None:
            offsets = [confluent_kafka.TopicPartition(message.topic(), message.partition(), message.offset() + 1,
                                                      leader_epoch=message.leader_epoch())]
        elif offsets is None:
            offsets = [p for p in self.position(self.assignment()) if p.offset >= 0]
        encoded = [self._with_internal(p) for p in offsets]
        return super().commit(offsets=encoded, asynchronous=asynchronous)

    def _with_internal(self, partition: confluent_kafka.TopicPartition) -> confluent_kafka.TopicPartition:
        tp = _key(partition)
        epoch = partition.leader_epoch if partition.leader_epoch is not None else self._leader_epochs.get(tp)
        internal = self._guard.commit_metadata(tp, epoch)
        # KIP-320's committed leader epoch stays the consumed record's (truncation detection compares it
        # with the leader's log); the internal metadata carries the metadata's, which never goes back.
        committed_epoch = epoch if epoch is not None and epoch >= 0 else internal.leader_epoch
        extra = {"leader_epoch": committed_epoch} if committed_epoch >= 0 else {}
        return confluent_kafka.TopicPartition(tp.topic, tp.partition, partition.offset,
                                              metadata=encode(partition.metadata, internal), **extra)

    def committed(self, partitions: list[confluent_kafka.TopicPartition], timeout: float | None = None
                  ) -> list[confluent_kafka.TopicPartition]:
        """The committed offsets, with the user's metadata only (read by OffsetFetch, see the module)."""
        keys = [_key(p) for p in partitions]
        got = self._offsets.fetch(self._group, keys, timeout=30.0 if timeout is None or timeout < 0 else timeout)
        result = []
        for tp in keys:
            entry = got[tp]
            user, _ = split(tp, entry.metadata)
            extra: dict[str, Any] = {"metadata": user} if user else {}
            if entry.leader_epoch >= 0:
                extra["leader_epoch"] = entry.leader_epoch
            result.append(confluent_kafka.TopicPartition(
                tp.topic, tp.partition, entry.offset if entry.offset >= 0 else OFFSET_INVALID, **extra))
        return result

    def committed_internal_metadata(self, partitions: Iterable[TopicPartition]) -> dict[TopicPartition,
                                                                                        InternalMetadata | None]:
        """What the group's commits say about each partition's epochs (None: committed without them)."""
        keys = [TopicPartition(*p) if isinstance(p, tuple) else _key(p) for p in partitions]
        return {tp: split(tp, entry.metadata)[1] for tp, entry in self._offsets.fetch(self._group, keys).items()}

    def close(self, *args: Any, **kwargs: Any) -> None:
        try:
            super().close(*args, **kwargs)
        finally:
            self._guard.close()
            if self._partitions_watch is not None:
                self._partitions_watch.close()
            self._offsets.close()


def _deadline(timeout: float | None) -> float | None:
    return None if timeout is None or timeout < 0 else time.monotonic() + timeout


def _passed(deadline: float | None) -> bool:
    return deadline is not None and time.monotonic() >= deadline


class DeserializingConsumer(Consumer):
    """confluent-kafka's `DeserializingConsumer` on the epoch-aware Consumer: the same configuration
    (`key.deserializer` / `value.deserializer` callables taking (bytes, SerializationContext), or
    their `.builder` forms, e.g. Schema Registry's AvroDeserializer or JSONDeserializer), `poll()`
    returning messages whose key and value are deserialized, `ConsumeError` for an error event,
    `KeyDeserializationError` / `ValueDeserializationError` naming the message, and `consume()` not
    implemented, as there; plus everything the Consumer adds (KIP-232 commits and waits, recreated
    topics, out-of-range only when the data is gone).

    Deserialization happens after the wrapper decided to hand a message over, so a record of a
    partition still waiting for current metadata is never deserialized (a Schema Registry lookup is
    not made for a record that will be fetched again). The serde properties are read with
    confluent-kafka's own helpers (`confluent_kafka._serde_builder`, pinned with the package), so
    builders and the cluster-id resolver they may need behave exactly as in confluent-kafka's class.
    """

    def __init__(self, config: dict[str, Any], *args: Any, **kwargs: Any) -> None:
        from confluent_kafka import _serde_builder as serde

        specs, config = serde.pop_serde_props(config, "key.deserializer", "value.deserializer")
        serdes, self._owned_serdes, config = serde.build_serdes(specs, config)
        self._key_deserializer, self._value_deserializer = serdes
        try:
            super().__init__(config, *args, **kwargs)
            serde.propagate_cluster_id_resolver(serde.SharedClusterIdResolver(self.cluster_id), serdes)
        except BaseException:
            owned, self._owned_serdes = self._owned_serdes, []
            with contextlib.suppress(Exception):
                serde.close_serdes(owned)
            raise

    def poll(self, timeout: float | None = None) -> confluent_kafka.Message | None:
        """The next message, deserialized; None at the timeout. Raises ConsumeError for an error event."""
        from confluent_kafka.error import ConsumeError

        message = super().poll(timeout)
        if message is None:
            return None
        if message.error() is not None:
            raise ConsumeError(message.error(), kafka_message=message)
        return self._deserialized(message)

    def consume(self, num_messages: int = 1, timeout: float | None = -1) -> list[confluent_kafka.Message]:
        """Not implemented, as in confluent-kafka's DeserializingConsumer: use poll()."""
        raise NotImplementedError("DeserializingConsumer.consume is not implemented, as in confluent-kafka: use poll()")

    def _deserialized(self, message: confluent_kafka.Message) -> confluent_kafka.Message:
        """The key first, then the value, as confluent-kafka does (a key deserializer may leave state
        for the value's), each failure naming the message."""
        from confluent_kafka.error import KeyDeserializationError, ValueDeserializationError
        from confluent_kafka.serialization import MessageField, SerializationContext

        context = SerializationContext(message.topic(), MessageField.KEY, message.headers())
        key, value = message.key(), message.value()
        if self._key_deserializer is not None:
            try:
                key = self._key_deserializer(key, context)
            except Exception as exc:
                raise KeyDeserializationError(exception=exc, kafka_message=message) from exc
        if self._value_deserializer is not None:
            context.field = MessageField.VALUE
            try:
                value = self._value_deserializer(value, context)
            except Exception as exc:
                raise ValueDeserializationError(exception=exc, kafka_message=message) from exc
        message.set_key(key)
        message.set_value(value)
        return message

    def close(self, *args: Any, **kwargs: Any) -> None:
        """Close the consumer, then the deserializers built from `.builder` properties (a ready-made
        deserializer stays the application's), as confluent-kafka does."""
        from confluent_kafka import _serde_builder as serde

        super().close(*args, **kwargs)
        owned, self._owned_serdes = self._owned_serdes, []
        serde.close_serdes(owned)
