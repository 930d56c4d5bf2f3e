"""`KafkaConsumer`: kafka.KafkaConsumer with KIP-232 internal metadata, a drop-in replacement.

Same constructor and methods (it is a subclass: everything not overridden is kafka-python's, and
iteration goes through the overridden `poll`), plus what KIP-232 adds to a consumer:

- `commit()`/`commit_async()` store the user's metadata and the internal metadata (topic_epoch from
  the metadata client, leader_epoch of the last message consumed) together in the one metadata
  string of each OffsetAndMetadata; `committed()` gives back only the user's metadata. kafka-python
  reads committed metadata strings exactly, so its own OffsetFetch is used (unlike librdkafka).
- After an assignment (subscribe's rebalance or `assign`), or `seek(partition, offset,
  internal_metadata)`, the partitions stay paused until the cluster's metadata is at least as new
  as the committed epochs (KAFKA-6262), and are resumed by a later `poll()` that finds it so.
  A partition the user paused stays paused: `resume()` does not release one that is still waiting.
- `position_with_internal_metadata(partition)` gives (offset, the KIP's JSON) for offsets stored
  outside Kafka.
- A topic deleted and recreated since its offsets were committed raises TopicRecreatedError from
  poll (and iteration), unless `on_topic_recreated` is "earliest" or "latest" (then it is reset).
  The internal metadata names the topic id, so a commit or a seek's internal metadata from another
  incarnation of the topic is recognised with certainty; a running consumer holds a topic's
  partitions while the topic is gone, and never commits an old position onto a new topic (the
  coordinator refuses internal metadata naming an old id). See consumer_guard.
- OFFSET_OUT_OF_RANGE resets only when the data is really gone: kafka-python runs with
  auto_offset_reset="none" and reports what it would have reset; the wrapper asks the partition's
  current leader for its log bounds (EpochGuard.resolve_out_of_range) and applies the user's policy
  only to a position that leader no longer holds (`resets` counts those). See `_out_of_range`.

- A subscribed consumer left without partitions for `no_partitions_warning_s` asks the cluster why
  and logs it at a slow pace, naming the group, the reason and how long (`waiting: group coordinator
  for "G" unavailable (COORDINATOR_NOT_AVAILABLE) for 45 s`); `waiting_reason` gives the same line
  (consumer_guard.PartitionsWatch).
- A rebalance that kafka-python 3.0.12 started and then stopped awaiting (its SyncGroup answered
  after a poll's timeout, in a rebalance a metadata change began) is awaited again, instead of the
  member holding no partition for good (`finish_abandoned_join`, also for a plain kafka.KafkaConsumer).

Options beyond kafka-python's, as keyword arguments: `on_topic_recreated`, `metadata_wait_timeout_s`
(None: wait for current metadata as long as it takes; else StaleMetadataError after that long),
`metadata_check_interval_s` (how often poll looks for recreated topics) and `no_partitions_warning_s`
(seconds without partitions before the consumer says why; None: never).

Threading: kafka-python runs rebalance listeners on its IO thread, where nothing may block on the
network, so the listener installed by `subscribe` only pauses the assigned partitions and notes
them; the next `poll()` (the user's thread) reads their committed epochs and decides. Auto-commit
(`enable_auto_commit`, kafka-python's default, also on close and before a rebalance) is kafka-python's
own and carries no internal metadata, so it overwrites the epochs of an explicit commit: commit
explicitly. `paused()` also lists the partitions waiting for metadata (`waiting_for_metadata`).
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable, Iterable, Mapping
from typing import Any

import kafka
import kafka.errors as Errors
from kafka import OffsetAndMetadata
from kafka import TopicPartition as KafkaTopicPartition
from kafka.cluster import collect_hosts
from kafka.consumer.subscription_state import AsyncConsumerRebalanceListener, ConsumerRebalanceListener

from client_epochs.committed import encode, parse_internal, split
from client_epochs.consumer_guard import EpochGuard, GuardedConsumer, PartitionsWatch, RecreatedPolicy
from client_epochs.errors import InvalidOffsetError
from client_epochs.log_bounds import READ_COMMITTED, READ_UNCOMMITTED
from client_epochs.metadata_client import MetadataClient
from client_epochs.model import TopicPartition
from client_epochs.out_of_range import normalize_policy
from quorum.wire.internal_metadata import InternalMetadata
from quorum.wire.oauthbearer import UnsecuredConfig
from quorum.wire.sasl_client import BearerTokens, ClientSecurity

try:  # kafka-python 3 (kafka.net), 2.x (kafka.sasl), older (kafka.oauth)
    from kafka.net.sasl.oauth import AbstractTokenProvider
except ImportError:  # pragma: no cover - the pinned kafka-python has kafka.net
    try:
        from kafka.sasl.oauth import AbstractTokenProvider
    except ImportError:
        from kafka.oauth.abstract import AbstractTokenProvider

__all__ = ["KafkaConsumer", "UnsecuredTokenProvider", "finish_abandoned_join"]

_LISTENERS = (ConsumerRebalanceListener, AsyncConsumerRebalanceListener)
_WOULD_RESET = (Errors.OffsetOutOfRangeError, Errors.NoOffsetForPartitionError, Errors.LogTruncationError)
"""What kafka-python, built with auto_offset_reset="none", raises where it would have reset a position."""

log = logging.getLogger(__name__)

_STEP_MS = 200
"""How long one poll of kafka-python lasts while partitions wait, so that their metadata is re-checked."""
_UNREACHABLE_NOTE_S = 10.0
_UNREACHABLE_PAUSE_S = 0.1
"""After kafka-python raised a refused connection out of poll, the pause before it is polled again."""
_COMMITTED_TIMEOUT_MS = 1000
"""How long one poll waits for the committed epochs of newly assigned partitions; the OffsetFetch goes on,
and kafka-python hands the same request to the next poll's call (it keeps them by partition set)."""


def _key(partition: Any) -> TopicPartition:
    return TopicPartition(partition.topic, partition.partition)


class UnsecuredTokenProvider(AbstractTokenProvider):
    """kafka-python's `sasl_oauth_token_provider` for a development cluster's unsecured OAUTHBEARER tokens
    (Kafka's unsecured validator), made from the text librdkafka's `sasl.oauthbearer.config` takes:
    `UnsecuredTokenProvider("principal=alice scope=kafka")`. A new token once 80% of one's life passed."""

    def __init__(self, config: str) -> None:
        super().__init__()
        self._tokens = BearerTokens.unsecured(UnsecuredConfig.parse(config))

    def token(self) -> str:
        return self._tokens.token().value

    def extensions(self) -> dict[str, str]:
        return dict(self._tokens.token().extensions)


def _kafka(tp: TopicPartition) -> KafkaTopicPartition:
    return KafkaTopicPartition(tp.topic, tp.partition)


def _check(partitions: Iterable[Any]) -> None:
    if not all(isinstance(p, KafkaTopicPartition) for p in partitions):
        raise TypeError("partitions must be TopicPartition namedtuples")


def _user_policy(policy: object) -> str:
    """The user's auto_offset_reset, checked (kafka-python itself would fall back to NONE with a warning)."""
    text = str(policy)
    normalize_policy(text)
    return text


def _bootstrap(servers: str | Iterable[str]) -> str:
    """kafka-python's bootstrap_servers (a "host[:port],..." string or a list; port 9092 by default) as
    the "host:port,..." list the metadata client takes."""
    entries = []
    for host, port, _ in collect_hosts(servers, randomize=False):
        entries.append(f"[{host}]:{port}" if ":" in host else f"{host}:{port}")
    return ",".join(entries)


def finish_abandoned_join(consumer: kafka.KafkaConsumer) -> bool:
    """Have kafka-python finish a rebalance it started and then stopped waiting for; True if it had.

    kafka-python 3.0.12 awaits its JoinGroup-SyncGroup task only while `need_rejoin()` holds, and a
    poll whose timeout ends first leaves the task for the next poll. A rebalance the leader started
    because the topics' metadata changed (partitions added, a topic appearing, or simply a first
    join that went out before the topic's metadata came) stops needing a rejoin as soon as the
    leader has computed the assignment, before SyncGroup is answered: when that answer takes longer
    than the poll (the join waiting for another member, a coordinator writing the group's record
    while a replica of `__consumer_offsets` is down), no later poll awaits it, the member never
    takes its assignment, its heartbeats stay off, the coordinator expires it and it holds no
    partition for good (the soak's kafka-python group, seeds 53, 92, 94; the group rules tests'
    kafka-python members under a loaded suite). Java's consumer loops while a rejoin is needed *or a
    join is pending*; asking for the rejoin when a join is pending does the same here: the next poll
    awaits the task again. Called before each poll of a plain `kafka.KafkaConsumer` it mends the same."""
    coordinator = getattr(consumer, "_coordinator", None)
    if getattr(coordinator, "_join_task", None) is None or not consumer._subscription.partitions_auto_assigned() \
            or coordinator.need_rejoin():
        return False
    coordinator.request_rejoin()
    return True


class KafkaConsumer(GuardedConsumer, kafka.KafkaConsumer):
    """kafka.KafkaConsumer that commits, seeks and waits by KIP-232 epochs (see the module docstring)."""

    def __init__(self, *topics: str, on_topic_recreated: RecreatedPolicy = "raise",
                 metadata_wait_timeout_s: float | None = None, metadata_check_interval_s: float = 5.0,
                 no_partitions_warning_s: float | None = 5.0, **configs: Any) -> None:
        defaults = kafka.KafkaConsumer.DEFAULT_CONFIG
        bootstrap = _bootstrap(configs.get("bootstrap_servers", defaults["bootstrap_servers"]))
        security = ClientSecurity.of_kafka_python(configs)  # the SDK's own connections, secured as the user's
        metadata = MetadataClient(bootstrap, client_id=str(configs.get("client_id", defaults["client_id"])),
                                  security=security)
        group = configs.get("group_id")
        self._partitions_watch = None if group is None or no_partitions_warning_s is None else PartitionsWatch(
            bootstrap, str(group), no_partitions_warning_s, security=security)
        try:
            committed_only = configs.get("isolation_level", defaults["isolation_level"]) == "read_committed"
            self._guard = EpochGuard(metadata, on_topic_recreated=on_topic_recreated,
                                     wait_timeout_s=metadata_wait_timeout_s,
                                     check_interval_s=metadata_check_interval_s,
                                     isolation_level=READ_COMMITTED if committed_only else READ_UNCOMMITTED)
            self._pending: set[TopicPartition] = set()
            """Assigned partitions paused until poll has read the epochs of their committed offsets."""
            self._user_paused: set[TopicPartition] = set()
            self._leader_epochs: dict[TopicPartition, int] = {}
            self._unreachable_noted = -math.inf
            self._auto_offset_reset = _user_policy(configs.get("auto_offset_reset", defaults["auto_offset_reset"]))
            """The user's auto_offset_reset; kafka-python gets "none" and reports instead (`_out_of_range`)."""
            super().__init__(**{**configs, "auto_offset_reset": "none"})
        except BaseException:
            metadata.close()
            if self._partitions_watch is not None:
                self._partitions_watch.close()
            raise
        if topics:  # through subscribe, so that assignments made without a listener still wait
            self.subscribe(list(topics))

    @property
    def waiting_for_metadata(self) -> frozenset[TopicPartition]:
        """Partitions paused until the cluster's metadata is at least as new as their committed epochs
        (including newly assigned ones whose commits poll has not read yet)."""
        return self._guard.waiting | frozenset(self._pending)

    # --- assignment -------------------------------------------------------------------------------------

    def subscribe(self, topics: Any = (), pattern: str | None = None, listener: Any = None) -> None:
        """kafka-python's subscribe; `listener` is the user's, wrapped so that assigned partitions wait
        for current metadata and revoked ones stop waiting (also without a listener of the user's)."""
        if listener is not None and not isinstance(listener, _LISTENERS):
            raise TypeError("listener must be a ConsumerRebalanceListener or AsyncConsumerRebalanceListener")
        wrapper = _AsyncListener if isinstance(listener, AsyncConsumerRebalanceListener) else _Listener
        super().subscribe(topics=topics, pattern=pattern, listener=wrapper(self, listener))

    def assign(self, partitions: list[KafkaTopicPartition]) -> None:
        before = {_key(p) for p in self.assignment()}
        super().assign(partitions)
        if partitions:
            now = {_key(p) for p in partitions}
            self._revoked(before - now)
            self._assigned(now - before)  # partitions kept keep their positions and floors

    def unsubscribe(self) -> None:
        super().unsubscribe()
        self._revoked(set(self._guard.waiting) | self._pending)
        self._user_paused.clear()
        if self._partitions_watch is not None:
            self._partitions_watch.stop()

    def _assigned(self, partitions: Iterable[Any]) -> None:
        """Newly assigned partitions start from their committed offsets: paused until poll read their epochs.
        Runs on kafka-python's IO thread (from the rebalance listener): nothing here may block."""
        if self.config["group_id"] is None:
            return  # no group, no committed offsets: nothing to wait for
        keys = {_key(p) for p in partitions}
        self._pending |= keys
        if keys:
            super().pause(*map(_kafka, sorted(keys)))

    def _revoked(self, partitions: Iterable[Any]) -> None:
        keys = {_key(p) for p in partitions}
        self._pending -= keys
        self._guard.forget(keys)

    # --- seek and positions -----------------------------------------------------------------------------

    def seek(self, partition: KafkaTopicPartition, offset: int, internal_metadata: str | None = None) -> None:
        """kafka-python's seek, and KIP-232's: with `internal_metadata` (the JSON that
        position_with_internal_metadata gave), the partition waits for metadata at least that new.
        InvalidInternalMetadataError, naming the partition and the text, when it does not parse."""
        tp = _key(partition)
        floor = parse_internal(tp, internal_metadata) if internal_metadata is not None else None
        super().seek(partition, offset)
        self._pending.discard(tp)  # its position no longer comes from the committed offset
        if floor is not None and self._guard.expect({tp: floor}):
            super().pause(partition)
        else:
            self._release([tp])

    def seek_to_beginning(self, *partitions: KafkaTopicPartition) -> None:
        super().seek_to_beginning(*partitions)
        self._not_from_committed(partitions)

    def seek_to_end(self, *partitions: KafkaTopicPartition) -> None:
        super().seek_to_end(*partitions)
        self._not_from_committed(partitions)

    def _not_from_committed(self, partitions: Iterable[KafkaTopicPartition]) -> None:
        keys = {_key(p) for p in (partitions or self.assignment())}
        self._pending -= keys
        self._release(keys)

    def position(self, partition: KafkaTopicPartition, timeout_ms: int | None = None) -> int | None:
        """kafka-python's position; where it would have reset a position by its policy (it runs with
        "none", see the module) the wrapper decides first, as in poll."""
        while True:
            try:
                return super().position(partition, timeout_ms)
            except _WOULD_RESET as exc:
                self._out_of_range(exc)

    def position_with_internal_metadata(self, partition: KafkaTopicPartition) -> tuple[int | None, str]:
        """(position, internal metadata JSON) of an assigned partition, to store outside Kafka (KIP-232, 7)."""
        offset = self.position(partition)
        tp = _key(partition)
        return offset, self._guard.internal_metadata(tp, self._leader_epochs.get(tp)).to_json()

    # --- pause and resume -------------------------------------------------------------------------------

    def pause(self, *partitions: KafkaTopicPartition) -> None:
        super().pause(*partitions)
        self._user_paused |= {_key(p) for p in partitions}

    def resume(self, *partitions: KafkaTopicPartition) -> None:
        """kafka-python's resume, except for partitions still waiting for current metadata: those are
        resumed by poll once it is current."""
        _check(partitions)
        keys = {_key(p) for p in partitions}
        self._user_paused -= keys
        self._release(keys)

    def _release(self, partitions: Iterable[TopicPartition]) -> None:
        """Resume what neither the user nor the wait holds back."""
        assigned = {_key(p) for p in self.assignment()}
        held = self._user_paused | self._pending | self._guard.waiting
        free = sorted(tp for tp in partitions if tp in assigned and tp not in held)
        if free:
            super().resume(*map(_kafka, free))

    # --- poll -------------------------------------------------------------------------------------------

    def poll(self, timeout_ms: float = 0, max_records: int | None = None,
             update_offsets: bool = True) -> dict[KafkaTopicPartition, list[Any]]:
        if self._closed or timeout_ms < 0:
            return super().poll(timeout_ms, max_records, update_offsets)  # kafka-python's errors
        deadline = time.monotonic() + timeout_ms / 1000
        while True:
            self._keep_epochs()
            self._finish_abandoned_join()
            try:
                records = super().poll(self._step_ms(deadline), max_records, update_offsets)
            except _WOULD_RESET as exc:
                records = self._out_of_range(exc)
            except Errors.KafkaConnectionError as exc:
                records = self._unreachable(exc, deadline)
            if records:
                self._note(records)
                return records
            if time.monotonic() >= deadline:
                if self._pending:  # assigned during this poll: read their commits before returning
                    self._take_committed_floors()
                return {}

    def _finish_abandoned_join(self) -> None:
        if finish_abandoned_join(self):
            log.info("group %r: kafka-python left its rebalance unfinished; awaiting it again", self.config["group_id"])

    def _unreachable(self, exc: Errors.KafkaConnectionError, deadline: float) -> dict[KafkaTopicPartition, list[Any]]:
        """kafka-python 3.0 raises a broker's refused connection out of poll (its coordinator lookup
        asking a broker that was just killed: the soak's kafka-python member died of it at start);
        Java's consumer and librdkafka ask another broker. The wrapper goes on polling until the
        poll's timeout, saying so at most every `_UNREACHABLE_NOTE_S`."""
        now = time.monotonic()
        if now - self._unreachable_noted >= _UNREACHABLE_NOTE_S:
            self._unreachable_noted = now
            log.warning("kafka-python could not reach a broker inside poll (%s); polling on", exc)
        time.sleep(max(0.0, min(_UNREACHABLE_PAUSE_S, deadline - now)))
        return {}

    def _keep_epochs(self) -> None:
        """Take the committed epochs of new partitions as floors; resume the partitions whose metadata
        caught up; reset or refuse recreated topics."""
        if self._pending:
            self._take_committed_floors()
        if self._guard.waiting:
            settled = self._guard.settle(timeout=_STEP_MS / 1000)
            self._reset(settled.recreated)
            self._release(settled.ready)
        assigned = {_key(p) for p in self.assignment()}
        topics = self.subscription() if self._partitions_watch is not None else None
        if self._partitions_watch is not None and topics:
            self._partitions_watch.check(topics, bool(assigned))
        watched = self._guard.watch(assigned)
        if watched.held:
            super().pause(*map(_kafka, watched.held))
        self._reset(watched.recreated)

    def _take_committed_floors(self) -> None:
        assigned = {_key(p) for p in self.assignment()}
        self._pending &= assigned
        if not self._pending:
            return
        wanted = sorted(self._pending)
        try:
            committed = self._committed_entries(wanted, _COMMITTED_TIMEOUT_MS)
        except Errors.KafkaTimeoutError as exc:
            log.info("committed offsets of %s not read yet, they stay paused: %s", ", ".join(map(str, wanted)), exc)
            return
        floors = {tp: split(tp, committed[tp].metadata)[1] if tp in committed else None for tp in wanted}
        self._guard.expect(floors)  # those with epochs wait in the guard; they are paused already
        self._pending.clear()
        self._release(wanted)

    def _committed_entries(self, partitions: list[TopicPartition], timeout_ms: int | None
                           ) -> dict[TopicPartition, OffsetAndMetadata]:
        """The group's commits of `partitions` as kafka-python's OffsetFetch reads them (several in one
        request: what KafkaConsumer.committed() calls for one); partitions never committed are missing."""
        got = self._coordinator.fetch_committed_offsets(list(map(_kafka, partitions)), timeout_ms=timeout_ms)
        return {_key(tp): entry for tp, entry in got.items()}

    def _reset(self, partitions: Iterable[TopicPartition]) -> None:
        partitions = list(map(_kafka, partitions))
        if partitions:
            seek = super().seek_to_beginning if self._guard.policy == "earliest" else super().seek_to_end
            seek(*partitions)

    def _step_ms(self, deadline: float) -> float:
        left = max(0.0, (deadline - time.monotonic()) * 1000) if math.isfinite(deadline) else math.inf
        return min(left, _STEP_MS if self.waiting_for_metadata else self._guard.check_interval_s * 1000)

    def _note(self, records: Mapping[KafkaTopicPartition, list[Any]]) -> None:
        for partition, batch in records.items():
            epoch = batch[-1].leader_epoch if batch else None
            if epoch is not None and epoch >= 0:
                self._leader_epochs[_key(partition)] = epoch

    # --- OFFSET_OUT_OF_RANGE: the one place it is resolved --------------------------------------------------

    def _out_of_range(self, exc: Errors.KafkaError) -> dict[KafkaTopicPartition, list[Any]]:
        """Where kafka-python, built with auto_offset_reset="none", would have reset by itself.

        OffsetOutOfRangeError({partition: fetch offset}) and NoOffsetForPartitionError({partition}) go
        to `EpochGuard.resolve_out_of_range`, which asks the partition's current leader whether the
        position is really gone, so a stale or lagging broker's answer never resets anything.
        LogTruncationError (KIP-320 found the log shorter than our position under our epoch) seeks to
        the first diverging offset the leader named, as Kafka's consumer does; where it named none,
        the guard decides too (a log shorter than the position restarts at its end, never at the
        beginning). Under the user's policy none, what would be a reset raises kafka-python's own
        error, as kafka.KafkaConsumer does. Nothing is delivered by this poll: {}."""
        if isinstance(exc, Errors.LogTruncationError):
            diverging = {p: entry for p, entry in exc.divergent_offsets.items() if entry is not None}
            for partition, entry in diverging.items():
                log.warning("%s: log truncated below our position, continuing from its first diverging offset %d",
                            _key(partition), entry.offset)
                super().seek(partition, entry.offset)
            positions = {p: self._position_of(p) for p, entry in exc.divergent_offsets.items() if entry is None}
        elif isinstance(exc, Errors.NoOffsetForPartitionError):
            positions = dict.fromkeys(exc.args[0] if exc.args else (), None)
        else:
            positions = dict(exc.args[0]) if exc.args else {}
        for partition, position in positions.items():
            if not self._subscription.is_assigned(partition):
                continue
            try:
                resolution = self._guard.resolve_out_of_range(_key(partition), position, self._auto_offset_reset)
            except InvalidOffsetError as refused:
                raise exc from refused
            super().seek(partition, resolution.offset)
        return {}

    def _position_of(self, partition: KafkaTopicPartition) -> int | None:
        if not self._subscription.is_assigned(partition):
            return None
        position = self._subscription.position(partition)
        return position.offset if position is not None else None

    # --- commits ----------------------------------------------------------------------------------------

    def commit(self, offsets: dict[KafkaTopicPartition, OffsetAndMetadata] | None = None,
               timeout_ms: int | None = None) -> None:
        """kafka-python's commit, each offset's metadata string carrying the internal metadata too.

        Without `offsets`, commits the consumed positions of the assignment (as kafka-python does)."""
        if self.config["group_id"] is None:
            return super().commit(offsets, timeout_ms)  # kafka-python's IllegalStateError
        return super().commit(self._with_internal(self._consumed(offsets)), timeout_ms)

    def commit_async(self, offsets: dict[KafkaTopicPartition, OffsetAndMetadata] | None = None,
                     callback: Callable[[Any, Any], Any] | None = None) -> Any:
        """kafka-python's commit_async, carrying the internal metadata; `callback` sees the offsets as given."""
        if self.config["group_id"] is None:
            return super().commit_async(offsets, callback)
        given = self._consumed(offsets)
        hidden = None if callback is None else (lambda _, response: callback(given, response))
        return super().commit_async(self._with_internal(given), hidden)

    def _consumed(self, offsets: dict[KafkaTopicPartition, OffsetAndMetadata] | None
                  ) -> dict[KafkaTopicPartition, OffsetAndMetadata]:
        return self._subscription.all_consumed_offsets() if offsets is None else offsets

    def _with_internal(self, offsets: Mapping[Any, Any]) -> dict[Any, Any]:
        encoded = {}
        for partition, entry in offsets.items():
            if not isinstance(partition, KafkaTopicPartition) or not isinstance(entry, OffsetAndMetadata):
                encoded[partition] = entry  # kafka-python refuses it with its own TypeError
                continue
            tp = _key(partition)
            given = entry.leader_epoch if entry.leader_epoch is not None and entry.leader_epoch >= 0 else None
            consumed = given if given is not None else self._leader_epochs.get(tp)
            internal = self._guard.commit_metadata(tp, consumed)
            # KIP-320's committed leader epoch stays the consumed record's; the internal metadata's never goes back.
            if consumed is not None:
                epoch = consumed
            else:
                epoch = internal.leader_epoch if internal.leader_epoch >= 0 else entry.leader_epoch
            encoded[partition] = OffsetAndMetadata(entry.offset, encode(entry.metadata, internal), epoch)
        return encoded

    def committed(self, partition: KafkaTopicPartition, metadata: bool = False,
                  timeout_ms: int | None = None) -> int | OffsetAndMetadata | None:
        """The committed offset (or OffsetAndMetadata with the user's metadata only); None if none."""
        entry = super().committed(partition, metadata=True, timeout_ms=timeout_ms)
        if entry is None:
            return None
        user, _ = split(_key(partition), entry.metadata)
        entry = OffsetAndMetadata(entry.offset, user, entry.leader_epoch)
        return entry if metadata else entry.offset

    def committed_internal_metadata(self, partitions: Iterable[Any], timeout_ms: int | None = None
                                    ) -> dict[TopicPartition, InternalMetadata | None]:
        """What the group's commits say about each partition's epochs (None: committed without them, or never)."""
        keys = sorted({_key(p) for p in partitions})
        entries = self._committed_entries(keys, timeout_ms)
        return {tp: split(tp, entries[tp].metadata)[1] if tp in entries else None for tp in keys}

    def close(self, autocommit: bool = True, timeout_ms: int | None = None) -> None:
        try:
            super().close(autocommit=autocommit, timeout_ms=timeout_ms)
        finally:
            self._guard.close()
            if self._partitions_watch is not None:
                self._partitions_watch.close()


class _Listener(ConsumerRebalanceListener):
    """The rebalance listener `subscribe` installs: the wrapper's bookkeeping around the user's listener."""

    def __init__(self, consumer: KafkaConsumer, user: ConsumerRebalanceListener | None) -> None:
        self.consumer = consumer
        self.user = user

    def on_partitions_revoked(self, revoked: Any) -> None:
        self.consumer._revoked(revoked)
        if self.user is not None:
            self.user.on_partitions_revoked(revoked)

    def on_partitions_assigned(self, assigned: Any) -> None:
        self.consumer._assigned(assigned)  # first, so that a seek in the user's callback is taken as such
        if self.user is not None:
            self.user.on_partitions_assigned(assigned)

    def on_partitions_lost(self, lost: Any) -> None:
        self.consumer._revoked(lost)
        if self.user is not None:
            self.user.on_partitions_lost(lost)


class _AsyncListener(AsyncConsumerRebalanceListener):
    """`_Listener` for a user's AsyncConsumerRebalanceListener, which kafka-python awaits."""

    def __init__(self, consumer: KafkaConsumer, user: AsyncConsumerRebalanceListener) -> None:
        self.consumer = consumer
        self.user = user

    async def on_partitions_revoked(self, revoked: Any) -> None:
        self.consumer._revoked(revoked)
        await self.user.on_partitions_revoked(revoked)

    async def on_partitions_assigned(self, assigned: Any) -> None:
        self.consumer._assigned(assigned)
        await self.user.on_partitions_assigned(assigned)

    async def on_partitions_lost(self, lost: Any) -> None:
        self.consumer._revoked(lost)
        await self.user.on_partitions_lost(lost)
