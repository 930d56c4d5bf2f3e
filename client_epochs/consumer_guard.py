"""The client-independent half of the epoch-aware consumers: floors, the wait, and recreated topics.

Both wrappers (confluent-kafka, kafka-python) do the same three things around the client they
wrap, and only the calls into that client differ, so the decisions live here once:

- After an assignment or a seek with internal metadata, each partition's committed epochs are a
  floor (KIP-232, 6 and 7): the partition stays paused until the cluster's metadata, as the
  metadata client sees it, is at least that new. A broker answering from an older image
  (KAFKA-6262) would otherwise send the consumer to an old leader or an old incarnation of the topic.
- The internal metadata to commit with an offset: the topic epoch the metadata client sees, and
  the leader epoch of the last consumed message where the client reports it.
- A topic deleted and created again under its name since the offsets were committed: the old
  offsets mean nothing in the new log, so by default that is an error, not a silent skip.
- OFFSET_OUT_OF_RANGE: reset only when the current leader's log confirms the data is gone
  (`resolve_out_of_range`: bounds from `client_epochs.log_bounds`, the rule in
  `client_epochs.out_of_range`), never on the word of a broker with stale metadata.

Telling recreation from partition growth: both raise the topic epoch. The internal metadata this
SDK writes carries the topic id, so an offset committed or stored with one is checked with
certainty: a different current id is a recreation, whatever the epochs say. Without an id (older
commits, a cluster without topic ids) a higher topic epoch counts as a recreation only with
evidence: the topic id changed from one this guard saw earlier (it remembers the ids of every topic
it looked at, for its lifetime), or the partition's leader epoch went back (leader epochs only
restart in a new topic).

A topic deleted under a running consumer: the check that finds it gone holds its partitions (paused,
floored at the id they were read under) until the topic is back, so nothing of a topic created
again under the name is delivered from the old position before the ids are compared. The commits
name the id the positions were read under (the one this guard holds, not the metadata cache's), so
the coordinator refuses an old position committed onto the new topic (INVALID_INTERNAL_METADATA).
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Literal

from client_epochs.epoch_cache import epochs_of
from client_epochs.errors import TopicRecreatedError
from client_epochs.log_bounds import READ_UNCOMMITTED, BoundsSource, LogBoundsClient
from client_epochs.metadata_client import MetadataClient, MetadataUnavailableError, StaleMetadataError
from client_epochs.model import NO_EPOCH, ZERO_UUID, ClusterMetadata, Epochs, PartitionMetadata, TopicPartition
from client_epochs.offset_fetch import OffsetFetcher
from client_epochs.out_of_range import Resolution, normalize_policy, resolve
from client_epochs.waits import NoPartitionsWatch, diagnose
from quorum.wire.internal_metadata import InternalMetadata
from quorum.wire.sasl_client import ClientSecurity

log = logging.getLogger(__name__)

RecreatedPolicy = Literal["raise", "earliest", "latest"]
FreshStart = Literal["reset", "recreated"] | None
"""How a partition with nothing committed starts (EpochGuard.fresh_starts)."""
RECREATED_POLICIES = ("raise", "earliest", "latest")
WAIT_LOG_INTERVAL_S = 10.0
"""How often a consumer waiting for current metadata logs what it waits for."""


@dataclass(frozen=True, slots=True)
class Settled:
    """What one `settle()` found: partitions now safe to fetch, and recreated ones to reset first."""

    ready: tuple[TopicPartition, ...] = ()
    recreated: tuple[TopicPartition, ...] = ()
    held: tuple[TopicPartition, ...] = ()
    """Partitions whose topic is gone from the metadata: to pause until it is back (`watch`)."""


class EpochGuard:
    """Floors per paused partition, the wait for current metadata, and the recreated-topic check.

    Sans client: the wrappers pause what `expect()` returns, call `settle()` from their poll and
    resume what it reports ready. `wait_timeout_s` bounds how long a partition may wait for
    current metadata before poll raises StaleMetadataError (None: wait for as long as it takes).
    """

    def __init__(self, metadata: MetadataClient, *, on_topic_recreated: RecreatedPolicy = "raise",
                 wait_timeout_s: float | None = None, check_interval_s: float = 5.0,
                 isolation_level: int = READ_UNCOMMITTED, log_bounds: BoundsSource | None = None) -> None:
        """`isolation_level` (0 read_uncommitted, 1 read_committed: the consumer's) sets which log end
        out-of-range positions are judged against; `log_bounds` replaces the ListOffsets client (tests)."""
        if on_topic_recreated not in RECREATED_POLICIES:
            raise ValueError(f"on_topic_recreated must be one of {', '.join(RECREATED_POLICIES)}, "
                             f"not {on_topic_recreated!r}")
        self.metadata = metadata
        self.policy = on_topic_recreated
        self.wait_timeout_s = wait_timeout_s
        self.check_interval_s = check_interval_s
        self.floors: dict[TopicPartition, InternalMetadata] = {}
        """Partitions paused until the metadata is at least this new."""
        self.topic_ids: dict[str, uuid.UUID] = {}
        """The topic id each topic had when this guard last looked; how a recreation is recognised."""
        self._waiting_since: float | None = None
        self._next_wait_log = 0.0
        self._next_check = 0.0
        self.log_bounds: BoundsSource = log_bounds or LogBoundsClient(metadata, isolation_level=isolation_level)
        self.resets = 0
        """OFFSET_OUT_OF_RANGE answers that moved a position: records deleted, or the log truncated."""
        self.out_of_range_without_reset = 0
        """OFFSET_OUT_OF_RANGE answers for positions the current leader still holds (stale brokers)."""

    def close(self) -> None:
        """Close the connections of the metadata client and of the log-bounds lookups."""
        try:
            self.log_bounds.close()
        finally:
            self.metadata.close()

    @property
    def waiting(self) -> frozenset[TopicPartition]:
        """The partitions kept paused until the cluster's metadata catches up with their floors."""
        return frozenset(self.floors)

    def expect(self, floors: Mapping[TopicPartition, InternalMetadata | None]) -> list[TopicPartition]:
        """Take committed or seeked epochs as floors; returns the partitions to pause meanwhile.

        A partition without internal metadata (committed by another client, or never) waits for nothing,
        as KIP-232 keeps today's behaviour for it; but its topic id is still learned at the next settle.
        """
        paused = []
        for tp, floor in floors.items():
            if floor is not None and not floor.is_unknown:
                self.floors[tp] = floor
                paused.append(tp)
            else:
                self.floors.pop(tp, None)
        if paused and self._waiting_since is None:
            self._waiting_since = time.monotonic()
        if floors:
            self._next_check = 0.0  # look at the topics' ids soon, for recreations
        return paused

    def forget(self, partitions: Iterable[TopicPartition]) -> None:
        """Revoked or unassigned partitions wait for nothing any more."""
        for tp in partitions:
            self.floors.pop(tp, None)
        if not self.floors:
            self._waiting_since = None

    def fresh_starts(self, partitions: Iterable[TopicPartition], held_topics: Iterable[str] = (),
                     timeout: float = 1.0) -> dict[TopicPartition, FreshStart]:
        """How each of `partitions`, about to be assigned with nothing committed, starts: "reset" where
        auto.offset.reset says; "recreated" where `on_topic_recreated` says (earliest/latest), because
        this guard read the topic under another id than the one it has now, which it takes from here on;
        None to leave it as before (librdkafka stops it, and the next metadata check decides): under
        policy "raise", while the consumer holds positions read under the old id (`held_topics`), or when
        no current metadata came within `timeout`.

        Decided before the partitions are assigned, so that they are assigned once, where they start:
        a start decided later needs a seek librdkafka refuses before its fetch started, or an assignment
        made again outside the rebalance callback (see client_epochs.confluent._start_uncommitted)."""
        wanted = sorted(set(partitions))
        known = {tp.topic: self.topic_ids[tp.topic] for tp in wanted if tp.topic in self.topic_ids}
        starts: dict[TopicPartition, FreshStart] = {tp: "reset" for tp in wanted}
        if not known:
            return starts
        try:
            current = self.metadata.refresh_until_current(sorted(known), timeout=timeout)
        except (StaleMetadataError, MetadataUnavailableError) as exc:
            log.info("start of %s left to the metadata check: %s", ", ".join(map(str, wanted)), exc)
            return {tp: None if tp.topic in known else start for tp, start in starts.items()}
        held = set(held_topics)
        for topic, known_id in known.items():
            ids = {meta.topic_id for meta in current.partitions_of(topic).values()} - {None, ZERO_UUID}
            if not ids or ids == {known_id}:
                continue
            start: FreshStart = None if self.policy == "raise" or topic in held else "recreated"
            if start is not None:
                (self.topic_ids[topic],) = ids
                log.warning("%s was recreated (topic id %s, now %s): its partitions start by on_topic_recreated=%s",
                            topic, known_id, self.topic_ids[topic], self.policy)
            starts.update({tp: start for tp in wanted if tp.topic == topic})
        return starts

    def settle(self, timeout: float) -> Settled:
        """Try, for up to `timeout` seconds, to get metadata at least as new as every floor.

        Returns every waiting partition as ready once it is; nothing while the metadata is still older
        (they stay paused). TopicRecreatedError under the default policy; StaleMetadataError once the
        partitions waited longer than `wait_timeout_s`.
        """
        if not self.floors:
            return Settled()
        try:
            current = self.metadata.refresh_until_current([], floors=self.floors, timeout=timeout)
        except (StaleMetadataError, MetadataUnavailableError) as exc:
            now = time.monotonic()
            waited = now - (self._waiting_since or now)
            if now >= self._next_wait_log:  # settle() runs at every poll: say it at a pace a reader can follow
                self._next_wait_log = now + WAIT_LOG_INTERVAL_S
                log.warning("waiting %.0f s for metadata at least as new as the committed epochs of %s: %s", waited,
                            "; ".join(f"{tp} (topic_epoch {f.topic_epoch}, leader_epoch {f.leader_epoch})"
                                      for tp, f in sorted(self.floors.items())), exc)
            if self.wait_timeout_s is not None and waited > self.wait_timeout_s:
                raise
            return Settled()
        recreated = {tp: (self._named(floor, tp.topic), current.partitions[tp].epochs)
                     for tp, floor in self.floors.items()
                     if self._is_recreated(floor, current.partitions[tp], tp.topic)}
        if recreated and self.policy == "raise":
            raise TopicRecreatedError(recreated)
        self._learn_ids(current)
        ready = tuple(sorted(self.floors))
        self.floors.clear()
        self._waiting_since = None
        return Settled(ready, tuple(sorted(recreated)))

    def watch(self, partitions: Iterable[TopicPartition], force: bool = False) -> Settled:
        """Every `check_interval_s`, look at the assigned topics' metadata for a recreation.

        Returns the recreated partitions to reset (policies "earliest"/"latest"), and those of topics
        gone from the metadata, to pause: they wait here (a floor at the id they were read under) until
        the topic is back, and `settle` then tells a recreation from the same topic. Raises
        TopicRecreatedError under "raise".
        """
        now = time.monotonic()
        assigned = sorted(set(partitions) - set(self.floors))
        if not assigned or (not force and now < self._next_check):
            return Settled()
        self._next_check = now + self.check_interval_s
        before = {tp: self.metadata.cache.get(tp) for tp in assigned}
        try:
            current = self.metadata.refresh_until_current(sorted({tp.topic for tp in assigned}), timeout=1.0)
        except (StaleMetadataError, MetadataUnavailableError) as exc:
            log.info("metadata check of %s skipped: %s", ", ".join(map(str, assigned)), exc)
            return Settled()
        recreated = {}
        gone: dict[TopicPartition, InternalMetadata] = {}
        for tp in assigned:
            meta = current.partitions.get(tp)
            known_id = self.topic_ids.get(tp.topic)
            if meta is None and known_id is not None and tp.topic in current.topic_errors:
                cached = before[tp]
                gone[tp] = InternalMetadata(NO_EPOCH if cached is None else cached.topic_epoch,
                                            NO_EPOCH if cached is None else cached.leader_epoch, known_id)
            elif meta is not None and known_id is not None and meta.topic_id is not None and meta.topic_id != known_id:
                recreated[tp] = (InternalMetadata(NO_EPOCH, NO_EPOCH, known_id), meta.epochs)
        if recreated and self.policy == "raise":
            raise TopicRecreatedError(recreated)
        self._learn_ids(current)
        if gone:
            log.warning("%s: the topic is gone from the metadata; its partitions wait until it is back",
                        ", ".join(map(str, sorted(gone))))
        return Settled(recreated=tuple(sorted(recreated)), held=tuple(self.expect(gone)))

    def watch_due(self) -> bool:
        """Whether `watch` would look at the metadata now: a cheap test for a caller that pays for each call
        (the async wrappers run `watch` on a thread of their own)."""
        return time.monotonic() >= self._next_check

    def commit_metadata(self, tp: TopicPartition, leader_epoch: int | None = None) -> InternalMetadata:
        """The internal metadata to commit with an offset of `tp` (`internal_metadata`), after
        `check_commit`: TopicRecreatedError where the commit would set a recreated topic's position."""
        internal = self.internal_metadata(tp, leader_epoch)
        self.check_commit(tp, internal)
        return internal

    def internal_metadata(self, tp: TopicPartition, leader_epoch: int | None = None,
                          timeout: float = 10.0) -> InternalMetadata:
        """The epochs to store with an offset of `tp`: the topic epoch and the leader epoch the metadata
        client sees (asked for when it has none yet), as KIP-232 has the consumer commit from its
        cached metadata; `leader_epoch`, the epoch of the last message consumed, only when it is newer.

        Not the message's epoch alone: records written before a leader election carry the older
        epoch, so a consumer catching up after a resume would commit epochs that go backwards, and
        the coordinator refuses those (INVALID_INTERNAL_METADATA) for as long as it reads old records.
        The metadata cache never moves backwards and messages' epochs only grow along a log, so the
        larger of the two is monotonic for one consumer, and never newer than the cluster's metadata
        (a floor a restarted consumer can reach)."""
        known = self.metadata.cache.get(tp)
        if known is None:
            try:
                self._learn_ids(self.metadata.refresh_until_current([tp.topic], timeout=timeout))
            except (StaleMetadataError, MetadataUnavailableError) as exc:
                log.warning("no metadata for %s, its commit carries no epochs: %s", tp, exc)
            known = self.metadata.cache.get(tp)
        topic_epoch = NO_EPOCH if known is None else known.topic_epoch
        cached = NO_EPOCH if known is None else known.leader_epoch
        consumed = NO_EPOCH if leader_epoch is None else leader_epoch
        return InternalMetadata(topic_epoch, max(cached, consumed, NO_EPOCH), self.read_topic_id(tp))

    def check_commit(self, tp: TopicPartition, internal: InternalMetadata) -> None:
        """Raise TopicRecreatedError before a commit of `tp` whose internal metadata names a topic id
        other than the one the cluster's metadata now gives `tp`'s topic, on a cluster without KIP-232
        topic epochs (Apache Kafka): the position was read in a topic since deleted, and committing it
        would set the new topic's position. This project's brokers refuse such a commit themselves
        (INVALID_INTERNAL_METADATA); Kafka's store it, so there the wrapper is the only check, and it
        sees a recreation once its metadata does (every `metadata_check_interval_s` while polling)."""
        known = self.metadata.cache.get(tp)
        if known is None or internal.topic_id is None or known.topic_epoch >= 0:
            return
        now = epochs_of(known)
        if now.topic_id is not None and now.topic_id != ZERO_UUID and now.topic_id != internal.topic_id:
            raise TopicRecreatedError({tp: (internal, now)})

    def read_topic_id(self, tp: TopicPartition) -> uuid.UUID | None:
        """The id of `tp`'s topic its positions were read under: the one this guard holds, which moves
        on only once a recreation was raised or reset (the cache may already know the new topic's);
        else the cache's, then held. None where the cluster gives no topic ids."""
        topic_id = self.topic_ids.get(tp.topic)
        known = self.metadata.cache.get(tp)
        if topic_id is None and known is not None:
            topic_id = epochs_of(known).topic_id  # None for Kafka's "no topic id" too
            if topic_id is not None:
                self.topic_ids[tp.topic] = topic_id
        return topic_id

    def resolve_out_of_range(self, tp: TopicPartition, position: int | None, policy: str,
                             timeout: float = 30.0) -> Resolution:
        """Where `tp` goes on after an OFFSET_OUT_OF_RANGE answer (or with no committed offset:
        `position` None), by `policy` (auto.offset.reset, any client's spelling).

        Asks the partition's current leader for its log bounds, the metadata at least as new as
        any floor this guard holds for `tp`, then applies `client_epochs.out_of_range.resolve`:
        a position the leader still holds is resumed and counted in `out_of_range_without_reset`;
        only deleted or truncated data counts in `resets`. Raises OffsetOutOfRangeError or
        NoOffsetForPartitionError under policy error/none, LogBoundsUnavailableError when no current
        leader answered within `timeout`, LogBoundsError for a refusal that will not change.
        """
        normalize_policy(policy)  # a bad policy is refused before any lookup
        bounds = self.log_bounds.fetch(tp, self.floors.get(tp), timeout=timeout)
        resolution = resolve(tp, position, bounds.log_start, bounds.log_end, policy, leader=bounds.leader)
        if resolution.reset:
            self.resets += 1
            log.warning("offset reset: %s", resolution.reason)
        elif position is not None and position >= 0:
            self.out_of_range_without_reset += 1
            log.info("no offset reset: %s", resolution.reason)
        else:
            log.info("start position: %s", resolution.reason)
        return resolution

    def _is_recreated(self, floor: InternalMetadata, now: PartitionMetadata, topic: str) -> bool:
        return is_recreated(floor, now.epochs, self.topic_ids.get(topic))

    def _named(self, floor: InternalMetadata, topic: str) -> InternalMetadata:
        """`floor` with the topic id this guard saw where it names none (for the error's message)."""
        if floor.topic_id is not None or topic not in self.topic_ids:
            return floor
        return InternalMetadata(floor.topic_epoch, floor.leader_epoch, self.topic_ids[topic])

    def _learn_ids(self, metadata: ClusterMetadata) -> None:
        for tp, meta in metadata.partitions.items():
            if meta.topic_id is not None and meta.topic_id != ZERO_UUID:
                self.topic_ids[tp.topic] = meta.topic_id


def is_recreated(floor: InternalMetadata, now: Epochs, known_id: uuid.UUID | None = None) -> bool:
    """Whether the topic of an offset stored under `floor` was deleted and created again, now that the
    metadata says `now`. Both the wrappers and the Spark source decide it here.

    With a topic id on both sides, certainty: a different id is a recreation, whatever the epochs say.
    Without (an older commit or checkpoint, a cluster without topic ids) a higher topic epoch may just as
    well be partition growth, so it counts only with evidence: the id changed from `known_id` (one seen
    earlier in the same process), or the partition's leader epoch went back (they only restart in a new topic).
    """
    current_id = now.topic_id if now.topic_id != ZERO_UUID else None
    if floor.topic_id is not None and current_id is not None:
        return floor.topic_id != current_id  # the offset names its topic: certainty
    if floor.topic_epoch < 0 or now.topic_epoch <= floor.topic_epoch:
        return False
    if known_id is not None and current_id is not None and current_id != known_id:
        return True
    return floor.leader_epoch >= 0 and 0 <= now.leader_epoch < floor.leader_epoch


class PartitionsWatch:
    """Why a subscribed consumer has no partitions, asked with its own connections and logged slowly.

    A consumer whose group has no coordinator (its `__consumer_offsets` partition lost its only
    replica), or whose topics have no leader or only stale metadata, polls empty forever and says
    nothing: the clients retry quietly. The wrappers call `check()` from every poll; once the
    consumer has been without partitions for `after_s`, and then every `interval_s`, it asks the
    cluster why (client_epochs.waits.diagnose, as the replicator does: FindCoordinator and
    OffsetFetch, then Metadata; one look may take a few seconds, so a poll then overruns its
    timeout by that much) and logs a warning naming the group, the reason and how long.
    """

    def __init__(self, bootstrap: str, group: str, after_s: float, interval_s: float = 15.0,
                 offsets: OffsetFetcher | None = None, metadata: MetadataClient | None = None,
                 security: ClientSecurity | None = None) -> None:
        """`offsets`: the consumer's OffsetFetcher when it has one (closed by its owner), else one is made.
        The metadata client is the watch's own (`metadata` replaces it in tests): a look leaves the
        consumer's epoch cache and refusal count alone, as the replicator's probe does."""
        self.metadata = metadata if metadata is not None else MetadataClient(bootstrap, security=security)
        self.watch = NoPartitionsWatch(group, after_s, interval_s)
        self._own_offsets = offsets is None
        self._offsets = offsets if offsets is not None else OffsetFetcher(bootstrap, security=security)

    def check(self, topics: Iterable[str], assigned: bool) -> None:
        """Note whether the consumer holds partitions; look why not and log it when that is due.
        `topics`: the subscription's topic names (regular expressions are not asked about)."""
        now = time.monotonic()
        if assigned:
            said = self.watch.assigned(now)
            if said is not None:
                log.info("%s", said.text)
            return
        names = sorted(t for t in topics if not t.startswith("^"))
        if not names or not self.watch.due(assigned, now):
            return
        wait = diagnose(self.metadata, self._offsets, self.watch.group, names, (), {}, copying=False)
        said = self.watch.found(wait, time.monotonic())
        if said is not None:
            log.log(logging.WARNING if said.warning else logging.INFO, 'consumer of group "%s" has no partitions, %s',
                    self.watch.group, said.text)

    def stop(self) -> None:
        """The consumer unsubscribed: it waits for no partitions any more."""
        self.watch.reset()

    @property
    def reason(self) -> str | None:
        """The current wait (`waiting: <reason> for <n> s`), None when none is known."""
        return self.watch.line(time.monotonic())

    def close(self) -> None:
        try:
            self.metadata.close()
        finally:
            if self._own_offsets:
                self._offsets.close()


class GuardedConsumer:
    """What both wrappers show of the EpochGuard they keep as `_guard` (a mixin, first in their bases),
    and of the PartitionsWatch they keep as `_partitions_watch` (None: no group, or switched off)."""

    _guard: EpochGuard
    _partitions_watch: PartitionsWatch | None

    @property
    def waiting_reason(self) -> str | None:
        """Why the consumer has no partitions, as its log says (`waiting: group coordinator for "G"
        unavailable (COORDINATOR_NOT_AVAILABLE) for 45 s`); None while it has some, or no reason is known."""
        return None if self._partitions_watch is None else self._partitions_watch.reason

    @property
    def metadata_client(self) -> MetadataClient:
        return self._guard.metadata

    def read_topic_id(self, tp: TopicPartition) -> uuid.UUID | None:
        """The topic id `tp`'s positions were read under, as the commits name it (None: unknown)."""
        return self._guard.read_topic_id(tp)

    @property
    def resets(self) -> int:
        """Offset resets done because the current leader no longer holds the position (deleted or truncated)."""
        return self._guard.resets

    @property
    def out_of_range_without_reset(self) -> int:
        """OFFSET_OUT_OF_RANGE answers for positions the current leader holds: resumed, not reset."""
        return self._guard.out_of_range_without_reset
