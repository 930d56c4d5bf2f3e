"""What a waiting replicator or wrapped consumer waits for, in words; and when to say it or give up.

A replicator or consumer with no partitions, or with partitions that give nothing, looks the same
from its counts whatever the cause (`partitions=0 lag=?`), and waiting silently is what made a demo
hang for eight minutes: its group's `__consumer_offsets` partition had lost its only replica, so the
group had no coordinator. `diagnose()` asks the cluster what is missing (the group's coordinator,
metadata as new as the committed epochs, a partition's leader) and returns it as a `Wait`.
Two sans-IO keepers of time use it (the caller passes the time):

- `WaitTimer`: how long the replicator has been waiting, for its status line (`waiting: group
  coordinator for "client-epochs-mirror" unavailable (COORDINATOR_NOT_AVAILABLE) for 45 s`) and
  for giving up after the configured time (client_epochs.mirror).
- `NoPartitionsWatch`: when a subscribed wrapped consumer has had no partitions for a while, when to
  look why and what to log, at a pace a reader can follow, until partitions come
  (client_epochs.consumer_guard.PartitionsWatch drives it for both wrappers).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from client_epochs.connection import BrokerError
from client_epochs.metadata_client import MetadataClient, MetadataUnavailableError, StaleMetadataError
from client_epochs.model import NO_LEADER, TopicPartition
from client_epochs.offset_fetch import OffsetFetcher, OffsetFetchError
from quorum.wire.errors import error_name
from quorum.wire.internal_metadata import InternalMetadata

PROBE_TIMEOUT_S = 2.0
"""How long one look at the source may take: the replicator's loop is held meanwhile."""


@dataclass(frozen=True, slots=True)
class Wait:
    """What the replicator waits for. `fault`: the cluster lacks something (the replicator gives up when
    it lasts); not a fault: a group still assigning, which a member with no partition to take does forever."""

    reason: str
    fault: bool = True


def _partitions(tps: Iterable[TopicPartition]) -> str:
    return ", ".join(map(str, sorted(tps)))


def diagnose(metadata: MetadataClient, offsets: OffsetFetcher, group: str, topics: Sequence[str],
             assigned: Iterable[TopicPartition], floors: Mapping[TopicPartition, InternalMetadata],
             copying: bool) -> Wait | None:
    """What keeps the replicator from copying, None when nothing does.

    `assigned`: the group's partitions it holds; `floors`: those held until the source's metadata is
    as new as these epochs (KIP-232); `copying`: whether records came since the last look.
    """
    assigned = set(assigned)
    if floors:
        try:
            metadata.refresh_until_current(topics, floors=floors, timeout=PROBE_TIMEOUT_S)
        except StaleMetadataError as exc:
            epochs = "; ".join(f"{tp}: topic_epoch {floors[tp].topic_epoch}, leader_epoch {floors[tp].leader_epoch}"
                               for tp in sorted(floors))
            return Wait(f"metadata as new as the committed epochs ({epochs}): refused as stale {exc.refusals} "
                        f"time(s), last from broker {exc.broker}: {exc.verdict.describe()}")
        except MetadataUnavailableError as exc:
            return Wait(f"the source cluster's metadata: {exc}")
    if not assigned:
        coordinator = _coordinator_wait(offsets, group, topics)
        if coordinator is not None:
            return coordinator
    if assigned and copying:
        return None
    try:
        current = metadata.refresh_until_current(topics, timeout=PROBE_TIMEOUT_S)
    except StaleMetadataError as exc:
        return Wait(f"metadata for {', '.join(topics)}: refused as stale {exc.refusals} time(s), last from "
                    f"broker {exc.broker}: {exc.verdict.describe()}")
    except MetadataUnavailableError as exc:
        return Wait(f"the source cluster's metadata: {exc}")
    leaderless = sorted(tp for tp, p in current.partitions.items()
                        if p.leader_id == NO_LEADER and (tp in assigned or not assigned) and tp.topic in topics)
    if leaderless:
        return Wait(f"a leader for partition(s) {_partitions(leaderless)} (LEADER_NOT_AVAILABLE)")
    if not assigned:
        return Wait(f'group "{group}" to assign partitions', fault=False)
    return None


def _coordinator_wait(offsets: OffsetFetcher, group: str, topics: Sequence[str]) -> Wait | None:
    """The group's coordinator, asked as the consumer asks it (FindCoordinator, then OffsetFetch)."""
    try:
        offsets.fetch(group, [TopicPartition(topics[0], 0)], timeout=PROBE_TIMEOUT_S)
    except OffsetFetchError as exc:
        return Wait(f'group coordinator for "{group}" unavailable ({error_name(exc.code)})')
    except BrokerError as exc:
        return Wait(f'group coordinator for "{group}" unreachable: {exc}')
    return None


class WaitTimer:
    """Since when the replicator has been waiting (sans IO: the caller passes the time).

    A wait lasts while one look after another finds something missing, whatever it is: a coordinator
    back but a partition still leaderless is one outage, not two. Only faults count towards giving up.
    """

    def __init__(self) -> None:
        self.current: Wait | None = None
        self.since: float | None = None

    def observe(self, wait: Wait | None, now: float) -> None:
        if wait is None or (self.current is not None and self.current.fault != wait.fault):
            self.since = None
        if wait is not None and self.since is None:
            self.since = now
        self.current = wait

    def line(self, now: float) -> str | None:
        """`waiting: <reason> for <n> s`, None when nothing is missing."""
        if self.current is None or self.since is None:
            return None
        return f"waiting: {self.current.reason} for {now - self.since:.0f} s"

    def expired(self, now: float, limit_s: float) -> str | None:
        """Why to give up: a fault has lasted longer than `limit_s`; None otherwise."""
        if self.current is None or not self.current.fault or self.since is None or now - self.since < limit_s:
            return None
        return f"gave up after waiting {now - self.since:.0f} s for {self.current.reason}"


@dataclass(frozen=True, slots=True)
class Said:
    """A line `NoPartitionsWatch` has to say: a warning for a fault, else a note (logging's INFO)."""

    text: str
    warning: bool


class NoPartitionsWatch:
    """How long a subscribed consumer has been without partitions, and when to look why (sans IO).

    The first look comes `after_s` after the partitions went (a rebalance normally ends well before),
    then one every `interval_s`, each said as `waiting: <reason> for <n> s` where n counts from the
    moment the consumer had no partitions; once partitions come back, one line says how long it was.
    """

    def __init__(self, group: str, after_s: float = 5.0, interval_s: float = 15.0) -> None:
        if not after_s > 0 or not interval_s > 0:
            raise ValueError(f"after_s and interval_s must be positive, not {after_s!r} and {interval_s!r}")
        self.group = group
        self.after_s = after_s
        self.interval_s = interval_s
        self.wait: Wait | None = None
        """What the last look found, None when it found nothing missing or partitions came."""
        self._empty_since: float | None = None
        self._next_look = 0.0
        self._said = False

    def due(self, assigned: bool, now: float) -> bool:
        """Note whether the consumer holds partitions now; True when it is time to `diagnose()` why not."""
        if assigned:
            return False
        if self._empty_since is None:
            self._empty_since = now
            self._next_look = now + self.after_s
        return now >= self._next_look

    def found(self, wait: Wait | None, now: float) -> Said | None:
        """What the look found; the line to log, if any. The next look is `interval_s` away."""
        self._next_look = now + self.interval_s
        self.wait = wait
        if wait is None:
            return None
        self._said = True
        return Said(f"waiting: {wait.reason} for {self.waited(now):.0f} s", wait.fault)

    def assigned(self, now: float) -> Said | None:
        """Partitions came: the wait is over; a line that says so when a wait was said before."""
        waited = self.waited(now)
        said, self._said = self._said, False
        self._empty_since, self.wait = None, None
        if not said:
            return None
        return Said(f'group "{self.group}" assigned partitions after {waited:.0f} s without', False)

    def reset(self) -> None:
        """The consumer stopped asking for partitions (unsubscribed): nothing to wait for, nothing to say."""
        self._empty_since, self.wait, self._said = None, None, False

    def waited(self, now: float) -> float:
        """Seconds without partitions (0 while the consumer has some)."""
        return 0.0 if self._empty_since is None else now - self._empty_since

    def line(self, now: float) -> str | None:
        """`waiting: <reason> for <n> s` while a wait is known, else None."""
        return None if self.wait is None else f"waiting: {self.wait.reason} for {self.waited(now):.0f} s"
