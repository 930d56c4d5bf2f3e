"""KIP-227 incremental fetch sessions: which partitions a Fetch reads, and which its response names.

A consumer fetching hundreds of partitions would otherwise send and receive all of them on every
Fetch, even when nothing changed. With a session, the broker remembers the partitions (and what it
last told the client about each); the client then sends only what it added, changed or forgot, and
the broker answers only partitions with something new. kafka-python uses sessions; librdkafka
sends sessionless fetches (session id 0, epoch -1).

The rules are Kafka's FetchSession / FetchManager:

* epoch -1 (FINAL): a sessionless full fetch; a session id other than 0 closes that session.
* epoch 0 (INITIAL): a full fetch that asks for a new session (closing the named one, if any).
  The session is created when the response is made, if the cache has a slot or can evict one;
  otherwise the response carries session id 0 and the client goes on without one.
* any other epoch: an incremental fetch of session `session_id`, whose epoch must be the one the
  broker expects next (FETCH_SESSION_ID_NOT_FOUND, INVALID_FETCH_SESSION_EPOCH otherwise, and
  FETCH_SESSION_TOPIC_ID_ERROR when the request's version disagrees with the session's about
  topic ids). Its partitions are added or updated, its ForgottenTopicsData removed, the epoch moves
  on, and the response names only partitions with records, an error, a diverging epoch, or a
  changed high watermark, last stable offset or log start offset. Partitions that returned
  records move to the end of the session, so that a response size limit does not starve the others.
* a session emptied by an incremental fetch is closed (the response's session id is 0).

The cache (`max.incremental.fetch.session.cache.slots`, default 1000) evicts, when full, a session
unused for `min.incremental.fetch.session.eviction.ms` (120000), or else the least valuable session
(non-follower before follower, then fewer partitions) old enough to be evicted, if the new one is
worth more. Sans-IO: no clock or randomness of its own; callers pass `now_ms` and a `random.Random`.
"""

from __future__ import annotations

import random
import uuid
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from enum import Enum

from quorum.wire.errors import ErrorCode

INVALID_SESSION_ID = 0
"""The session id of a fetch without a session, in requests and responses."""
INITIAL_EPOCH = 0
"""The epoch of a full fetch that asks for a new session."""
FINAL_EPOCH = -1
"""The epoch of a sessionless full fetch (or one that closes its session)."""
MAX_EPOCH = 2**31 - 1

DEFAULT_CACHE_SLOTS = 1000
"""Kafka's `max.incremental.fetch.session.cache.slots`."""
DEFAULT_EVICTION_MS = 120_000
"""Kafka's `min.incremental.fetch.session.eviction.ms`."""

PartitionKey = tuple[str | uuid.UUID, int]
"""(topic, partition): the topic by name before Fetch v13, by topic id from v13 on."""


def next_epoch(epoch: int) -> int:
    """The epoch after `epoch`: it wraps from the largest int32 to 1 (0 means "new session")."""
    if epoch < 0:
        return FINAL_EPOCH
    return 1 if epoch == MAX_EPOCH else epoch + 1


@dataclass(frozen=True, slots=True)
class FetchPosition:
    """What a Fetch request says about one partition."""

    fetch_offset: int
    partition_max_bytes: int
    current_leader_epoch: int = -1
    last_fetched_epoch: int = -1
    log_start_offset: int = -1


@dataclass(frozen=True, slots=True)
class PartitionOutcome:
    """What a fetch found for one partition, as far as a session needs to know to decide whether
    an incremental response must name it."""

    error_code: int
    high_watermark: int
    last_stable_offset: int
    log_start_offset: int
    records_size: int
    diverging: bool = False


@dataclass(slots=True)
class _Cached:
    """A session's partition: where the client reads, and what the broker last answered."""

    position: FetchPosition
    high_watermark: int = -1
    last_stable_offset: int = -1
    log_start_offset: int = -1

    def must_answer(self, outcome: PartitionOutcome) -> bool:
        return (outcome.records_size > 0 or outcome.error_code != ErrorCode.NONE or outcome.diverging
                or outcome.high_watermark != self.high_watermark
                or outcome.last_stable_offset != self.last_stable_offset
                or outcome.log_start_offset != self.log_start_offset)  # fmt: skip

    def remember(self, outcome: PartitionOutcome) -> None:
        # After an error the high watermark is forgotten (-1), so the partition is answered again
        # once the error is gone, as Kafka does.
        self.high_watermark = -1 if outcome.error_code != ErrorCode.NONE else outcome.high_watermark
        self.last_stable_offset = outcome.last_stable_offset
        self.log_start_offset = outcome.log_start_offset


@dataclass(slots=True)
class FetchSession:
    """One incremental fetch session: its partitions in fetch order, and the epoch expected next."""

    session_id: int
    epoch: int
    uses_topic_ids: bool
    privileged: bool
    created_ms: int
    last_used_ms: int
    partitions: dict[PartitionKey, _Cached] = field(default_factory=dict)
    evictable_by_all: bool = False
    evictable_by_privileged: bool = False

    @property
    def size(self) -> int:
        return len(self.partitions)

    def update(self, fetch: Mapping[PartitionKey, FetchPosition], forgotten: Iterable[PartitionKey]) -> None:
        for key, position in fetch.items():
            cached = self.partitions.get(key)
            if cached is None:
                self.partitions[key] = _Cached(position)
            else:
                cached.position = position
        for key in forgotten:
            self.partitions.pop(key, None)


class ContextKind(Enum):
    SESSIONLESS = "sessionless"
    FULL = "full"
    INCREMENTAL = "incremental"
    ERROR = "error"


class FetchContext:
    """One Fetch's view of its session: the partitions to read (`partitions`, in order), and after
    reading, via `complete`, the response's session id and the partitions it names."""

    def __init__(self, cache: FetchSessionCache, kind: ContextKind,
                 partitions: list[tuple[PartitionKey, FetchPosition]],
                 error_code: int = ErrorCode.NONE, session: FetchSession | None = None,
                 uses_topic_ids: bool = False, privileged: bool = False) -> None:
        self._cache = cache
        self.kind = kind
        self.partitions = partitions
        self.error_code = error_code
        self._session = session
        self._uses_topic_ids = uses_topic_ids
        self._privileged = privileged

    def complete(self, outcomes: Mapping[PartitionKey, PartitionOutcome],
                 now_ms: int) -> tuple[int, list[PartitionKey]]:
        """The response's session id and the partitions it names, in order; remembers what the
        response tells the client (and creates the session a full fetch asked for)."""
        if self.kind is ContextKind.ERROR:
            return INVALID_SESSION_ID, []
        if self.kind is ContextKind.SESSIONLESS:
            return INVALID_SESSION_ID, [key for key, _ in self.partitions]
        if self.kind is ContextKind.FULL:
            cached = {}
            for key, position in self.partitions:
                entry = _Cached(position)
                if key in outcomes:
                    entry.remember(outcomes[key])
                cached[key] = entry
            session_id = self._cache.maybe_create(now_ms, self._privileged, self._uses_topic_ids, cached)
            return session_id, [key for key, _ in self.partitions]
        session = self._session
        assert session is not None
        named: list[PartitionKey] = []
        for key, _ in self.partitions:
            cached_partition = session.partitions.get(key)
            outcome = outcomes.get(key)
            if cached_partition is None or outcome is None or not cached_partition.must_answer(outcome):
                continue
            named.append(key)
            cached_partition.remember(outcome)
            if outcome.records_size > 0:
                # Round robin: the partitions that got data go last next time.
                del session.partitions[key]
                session.partitions[key] = cached_partition
        return session.session_id, named


class FetchSessionCache:
    """The broker's fetch sessions, by id: creates, finds, touches and evicts them."""

    def __init__(self, max_slots: int = DEFAULT_CACHE_SLOTS, eviction_ms: int = DEFAULT_EVICTION_MS,
                 rng: random.Random | None = None) -> None:
        if max_slots < 0:
            raise ValueError(f"max.incremental.fetch.session.cache.slots must be >= 0, not {max_slots}")
        self.max_slots = max_slots
        self.eviction_ms = eviction_ms
        self._rng = rng if rng is not None else random.Random()
        self._sessions: dict[int, FetchSession] = {}
        self.evictions = 0

    @classmethod
    def from_properties(cls, properties: Mapping[str, str], rng: random.Random | None = None) -> FetchSessionCache:
        """A cache sized by Kafka's `max.incremental.fetch.session.cache.slots` (and the eviction
        age by `min.incremental.fetch.session.eviction.ms`), defaults when unset."""
        slots = properties.get("max.incremental.fetch.session.cache.slots", str(DEFAULT_CACHE_SLOTS))
        eviction = properties.get("min.incremental.fetch.session.eviction.ms", str(DEFAULT_EVICTION_MS))
        try:
            return cls(int(slots), int(eviction), rng)
        except ValueError as exc:
            raise ValueError(f"fetch session cache settings: {exc}") from None

    def __len__(self) -> int:
        return len(self._sessions)

    def get(self, session_id: int) -> FetchSession | None:
        return self._sessions.get(session_id)

    def remove(self, session_id: int) -> FetchSession | None:
        return self._sessions.pop(session_id, None)

    @property
    def partitions(self) -> int:
        """Partitions held by all sessions (Kafka's NumIncrementalFetchPartitionsCached)."""
        return sum(session.size for session in self._sessions.values())

    def new_context(self, session_id: int, epoch: int, fetch: Mapping[PartitionKey, FetchPosition],
                    forgotten: Iterable[PartitionKey], uses_topic_ids: bool, now_ms: int,
                    privileged: bool = False) -> FetchContext:
        """The context of one Fetch request: its session id and epoch, the partitions it names (in
        order), the ones it forgets, and whether its version names topics by id (v13+)."""
        if epoch in (INITIAL_EPOCH, FINAL_EPOCH):
            if session_id != INVALID_SESSION_ID:
                self.remove(session_id)
            partitions = list(fetch.items())
            if epoch == FINAL_EPOCH:
                return FetchContext(self, ContextKind.SESSIONLESS, partitions)
            return FetchContext(self, ContextKind.FULL, partitions, uses_topic_ids=uses_topic_ids,
                                privileged=privileged)
        session = self._sessions.get(session_id)
        if session is None:
            return FetchContext(self, ContextKind.ERROR, [], ErrorCode.FETCH_SESSION_ID_NOT_FOUND)
        if session.epoch != epoch:
            return FetchContext(self, ContextKind.ERROR, [], ErrorCode.INVALID_FETCH_SESSION_EPOCH)
        if session.uses_topic_ids != uses_topic_ids:
            return FetchContext(self, ContextKind.ERROR, [], ErrorCode.FETCH_SESSION_TOPIC_ID_ERROR)
        session.update(fetch, forgotten)
        if not session.partitions:
            self.remove(session.session_id)
            return FetchContext(self, ContextKind.SESSIONLESS, [])
        self._touch(session, now_ms)
        session.epoch = next_epoch(session.epoch)
        partitions = [(key, cached.position) for key, cached in session.partitions.items()]
        return FetchContext(self, ContextKind.INCREMENTAL, partitions, session=session)

    def maybe_create(self, now_ms: int, privileged: bool, uses_topic_ids: bool,
                     partitions: dict[PartitionKey, _Cached]) -> int:
        """A new session's id, or INVALID_SESSION_ID when there is no slot and none can be evicted."""
        if len(self._sessions) >= self.max_slots and not self._try_evict(privileged, len(partitions), now_ms):
            return INVALID_SESSION_ID
        session = FetchSession(self._new_session_id(), next_epoch(INITIAL_EPOCH), uses_topic_ids, privileged,
                               created_ms=now_ms, last_used_ms=now_ms, partitions=partitions)
        self._sessions[session.session_id] = session
        self._touch(session, now_ms)
        return session.session_id

    def _new_session_id(self) -> int:
        while True:
            session_id = self._rng.randint(1, MAX_EPOCH)
            if session_id not in self._sessions:
                return session_id

    def _touch(self, session: FetchSession, now_ms: int) -> None:
        # As Kafka's FetchSessionCache.touch: eviction eligibility is decided when a session is used.
        session.last_used_ms = now_ms
        old_enough = now_ms - session.created_ms > self.eviction_ms
        session.evictable_by_privileged = not session.privileged or old_enough
        session.evictable_by_all = old_enough

    def _try_evict(self, privileged: bool, size: int, now_ms: int) -> bool:
        if not self._sessions:
            return False
        stalest = min(self._sessions.values(), key=lambda s: (s.last_used_ms, s.session_id))
        if now_ms - stalest.last_used_ms > self.eviction_ms:
            self._evict(stalest)
            return True
        candidates = [s for s in self._sessions.values()
                      if (s.evictable_by_privileged if privileged else s.evictable_by_all)]
        if not candidates:
            return False
        cheapest = min(candidates, key=lambda s: (s.privileged, s.size, s.session_id))
        # A new session's key is (privileged, size, 0): on equal size it is worth less than any real session.
        if (privileged, size, 0) < (cheapest.privileged, cheapest.size, cheapest.session_id):
            return False
        self._evict(cheapest)
        return True

    def _evict(self, session: FetchSession) -> None:
        self.remove(session.session_id)
        self.evictions += 1
