"""Why the replicator is not copying, in words: what its status line says it waits for, and when it gives up.

A replicator with no partitions, or with partitions that give nothing, looks the same from its
counts whatever the cause (`partitions=0 lag=?`), and waiting silently is what made a demo hang
for eight minutes: its group's `__consumer_offsets` partition had lost its only replica, so the
group had no coordinator. `diagnose()` asks the source cluster what is missing (the group's
coordinator, metadata as new as the committed epochs, a partition's leader) and returns it as a
`Wait`; `WaitTimer` (sans IO) keeps how long the replicator has been waiting for it, for the status
line (`waiting: group coordinator for "client-epochs-mirror" unavailable (COORDINATOR_NOT_AVAILABLE)
for 45 s`) and for giving up after the configured time.
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
