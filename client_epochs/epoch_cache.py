"""KIP-232's rule: refuse a Metadata response that is older than what the client already knows.

Brokers learn metadata at different times, so the broker a client asks may answer with a view
older than the one the client holds (KAFKA-6262): a leader epoch from before the last election,
or a topic from before it was recreated. A consumer that believed it would fetch from the wrong
leader, get OFFSET_OUT_OF_RANGE and reset (a MirrorMaker with `earliest` rewinds to the start).
KIP-232 orders metadata per partition by (topic_epoch, leader_epoch) and has the client refuse a
response that is older, for a partition it is interested in, than its cache, and refresh again.

Everything here is sans-IO: plain objects fed responses, returning verdicts. The metadata client
and the consumer wrappers do the fetching and the backoff.

Rules beyond the KIP's formula, each for a reason:

- An epoch below 0 (Kafka's -1) is unknown: that component is not compared, which is today's
  behaviour for old clients, old brokers and offsets committed without internal metadata.
- Without a topic epoch on either side (Apache Kafka sends no tag, Metadata below v9 has none),
  a changed topic id means the topic was recreated, which is newer whatever its leader epochs;
  a topic id the cache has already seen replaced is older. Otherwise leader epochs decide.
- Partitions the client is not interested in never cause a refusal (the KIP's optimisation), but
  an accepted response does not move them backwards either: the cache keeps the newer entry.
- An interested partition the response lacks is reported (`Verdict.missing`) but is not
  outdated: the formula compares partitions both sides have, and a topic nobody can see yet
  might also be a deleted one. Callers with committed positions treat it as "not yet current".
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Protocol

from client_epochs.model import ZERO_UUID, Epochs, TopicPartition

log = logging.getLogger(__name__)


class EpochSource(Protocol):
    """Anything carrying KIP-232 epochs: PartitionMetadata, Epochs, quorum.wire's InternalMetadata.

    A `topic_id` attribute, when present, enables the topic-id fallback.
    """

    @property
    def topic_epoch(self) -> int: ...

    @property
    def leader_epoch(self) -> int: ...


def _known(epoch: int) -> bool:
    return epoch >= 0


def _topic_id(source: EpochSource) -> uuid.UUID | None:
    topic_id = getattr(source, "topic_id", None)
    return None if topic_id is None or topic_id == ZERO_UUID else topic_id


def epochs_of(source: EpochSource) -> Epochs:
    """The comparable part of any epoch source (for reports and for storing floors)."""
    return Epochs(source.topic_epoch, source.leader_epoch, _topic_id(source))


def is_outdated(offered: EpochSource, known: EpochSource, retired_ids: Collection[uuid.UUID] = ()) -> bool:
    """True when `offered` is older than `known` for one partition (KIP-232, with the fallbacks above).

    `retired_ids` are topic ids of this topic that the caller has seen replaced by a newer one.
    """
    if _known(offered.topic_epoch) and _known(known.topic_epoch):
        if offered.topic_epoch != known.topic_epoch:
            return offered.topic_epoch < known.topic_epoch
        return _leader_older(offered, known)
    offered_id, known_id = _topic_id(offered), _topic_id(known)
    if offered_id is not None and offered_id in retired_ids and offered_id != known_id:
        return True
    if offered_id is not None and known_id is not None and offered_id != known_id:
        return False  # a recreated topic: its leader epochs start again, and it is newer
    return _leader_older(offered, known)


def _leader_older(offered: EpochSource, known: EpochSource) -> bool:
    return _known(offered.leader_epoch) and _known(known.leader_epoch) and offered.leader_epoch < known.leader_epoch


@dataclass(frozen=True, slots=True)
class Interest:
    """The partitions whose staleness matters to a client: whole topics (a subscription), single
    partitions (an assignment or committed positions), or everything (a producer, KIP-232)."""

    topics: frozenset[str] = frozenset()
    partitions: frozenset[TopicPartition] = frozenset()
    everything: bool = False

    @classmethod
    def of(cls, items: Iterable[str | TopicPartition]) -> Interest:
        """Topics given by name, partitions as TopicPartition (or any (topic, partition) tuple)."""
        topics, partitions = set(), set()
        for item in items:
            if isinstance(item, str):
                topics.add(item)
            else:
                partitions.add(TopicPartition(*item))
        return cls(frozenset(topics), frozenset(partitions))

    def __contains__(self, tp: object) -> bool:
        if self.everything:
            return True
        return tp in self.partitions or (isinstance(tp, tuple) and len(tp) == 2 and tp[0] in self.topics)


EVERYTHING = Interest(everything=True)
"""Interest in every partition, as a producer has (KIP-232)."""


@dataclass(frozen=True, slots=True)
class Staleness:
    """One interested partition for which a response was older than what the client knew."""

    partition: TopicPartition
    offered: Epochs
    known: Epochs

    def __str__(self) -> str:
        return (f"{self.partition}: offered (topic_epoch {self.offered.topic_epoch}, leader_epoch "
                f"{self.offered.leader_epoch}) is older than (topic_epoch {self.known.topic_epoch}, "
                f"leader_epoch {self.known.leader_epoch})")


@dataclass(frozen=True, slots=True)
class Verdict:
    """What a response is worth: `accepted` unless some interested partition is outdated;
    `current` when, in addition, it has every interested partition the reference knows."""

    outdated: tuple[Staleness, ...] = ()
    missing: tuple[TopicPartition, ...] = ()

    @property
    def accepted(self) -> bool:
        return not self.outdated

    @property
    def current(self) -> bool:
        return not self.outdated and not self.missing

    def describe(self) -> str:
        """A one-line account for logs and errors."""
        parts = [str(stale) for stale in self.outdated]
        if self.missing:
            parts.append("missing " + ", ".join(str(tp) for tp in self.missing))
        return "; ".join(parts) or "current"


def judge(offered: Mapping[TopicPartition, EpochSource], reference: Mapping[TopicPartition, EpochSource],
          interest: Interest | Collection[TopicPartition] = EVERYTHING,
          retired_ids: Mapping[str, Collection[uuid.UUID]] | None = None) -> Verdict:
    """Compare a response's partitions with a reference (a cache's view, or committed floors).

    Only partitions in both `reference` and `interest` count; a reference partition without any
    known epoch is not reported missing, since it asks for no check at all. Pure: no state, no logging.
    """
    retired_ids = retired_ids or {}
    outdated, missing = [], []
    for tp in sorted(reference):
        if tp not in interest:
            continue
        known = reference[tp]
        got = offered.get(tp)
        if got is None:
            if _known(known.topic_epoch) or _known(known.leader_epoch):
                missing.append(tp)
        elif is_outdated(got, known, retired_ids.get(tp.topic, ())):
            outdated.append(Staleness(tp, epochs_of(got), epochs_of(known)))
    return Verdict(tuple(outdated), tuple(missing))


@dataclass(slots=True)
class EpochCache:
    """A client's metadata view, which only moves forward for the partitions it is interested in.

    `offer()` a response: it is refused (the cache keeps its view) when outdated for an interested
    partition, else merged in. `check_floors()` is the seek/committed variant: the reference is the
    epochs a position was committed or stored under, not the cache.

    Values are kept as given (PartitionMetadata from the metadata client, or any EpochSource), so
    the cache also answers "who leads this partition" with the view it accepted.
    """

    interest: Interest = EVERYTHING
    _view: dict[TopicPartition, EpochSource] = field(default_factory=dict, init=False)
    _retired_ids: dict[str, set[uuid.UUID]] = field(default_factory=dict, init=False)
    _warned_fallback: bool = field(default=False, init=False)

    def view(self) -> dict[TopicPartition, EpochSource]:
        """A copy of the accepted view."""
        return dict(self._view)

    def get(self, tp: TopicPartition) -> EpochSource | None:
        return self._view.get(tp)

    def retired_topic_ids(self, topic: str) -> frozenset[uuid.UUID]:
        """Ids this topic had before it was recreated, as far as this cache has seen."""
        return frozenset(self._retired_ids.get(topic, ()))

    def check(self, offered: Mapping[TopicPartition, EpochSource], source: str = "a broker",
              interest: Interest | None = None) -> Verdict:
        """The verdict on `offered` against the cache, without changing the cache.

        `interest` replaces the cache's own for this call (a refresh for some topics only).
        """
        interest = self.interest if interest is None else interest
        self._note_fallback(offered, interest, source)
        return judge(offered, self._view, interest, self._retired_ids)

    def offer(self, offered: Mapping[TopicPartition, EpochSource], source: str = "a broker",
              interest: Interest | None = None) -> Verdict:
        """Judge a response and merge it in unless it is outdated; `source` names the broker in logs."""
        interest = self.interest if interest is None else interest
        verdict = self.check(offered, source, interest)
        if verdict.accepted:
            self._merge(offered, interest)
        return verdict

    def check_floors(self, offered: Mapping[TopicPartition, EpochSource],
                     floors: Mapping[TopicPartition, EpochSource], source: str = "a broker") -> Verdict:
        """The seek/committed variant (KIP-232, 6 and 7): is `offered` at least as new as the epochs
        each position was committed under? Every floor counts; unknown (-1) epochs check nothing.

        Topic ids this cache saw retired are still refused, so a recreated topic cannot be undone
        by a broker that missed the recreation.
        """
        self._note_fallback(offered, Interest(partitions=frozenset(floors)), source)
        return judge(offered, floors, EVERYTHING, self._retired_ids)

    def forget(self, topics: Iterable[str]) -> None:
        """Drop topics from the view (deleted, or no longer of interest); their retired ids stay."""
        gone = set(topics)
        for tp in [tp for tp in self._view if tp.topic in gone]:
            del self._view[tp]

    def _merge(self, offered: Mapping[TopicPartition, EpochSource], interest: Interest) -> None:
        for tp, got in offered.items():
            known = self._view.get(tp)
            if known is None:
                self._view[tp] = got
                continue
            retired = self._retired_ids.get(tp.topic, ())
            if tp not in interest and is_outdated(got, known, retired):
                continue  # allowed to be stale without a refusal, but not to move the cache backwards
            old_id, new_id = _topic_id(known), _topic_id(got)
            if old_id is not None and new_id is not None and old_id != new_id:
                self._retired_ids.setdefault(tp.topic, set()).add(old_id)
            self._view[tp] = got

    def _note_fallback(self, offered: Mapping[TopicPartition, EpochSource], interest: Interest, source: str) -> None:
        if self._warned_fallback:
            return
        for tp, got in offered.items():
            if tp in interest and not _known(got.topic_epoch):
                self._warned_fallback = True
                log.warning("metadata from %s has no KIP-232 topic epoch for %s (an Apache Kafka cluster, or "
                            "Metadata below v9): comparing leader epochs and topic id changes only", source, tp)
                return
