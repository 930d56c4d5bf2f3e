"""Which replicas have a short local log, as their brokers last said: the active controller's soft
state, like heartbeat sessions.

A broker lists in every BrokerHeartbeat (its ShortLocalLogs tag, the whole set each time) the
partitions whose local log holds less than local retention keeps (`quorum.broker.local_log_length`:
a follower bootstrapped from the tiered offset, KIP-1023). Elections prefer the other in-sync
replicas while one of those exists (`quorum.controller.election`); with only short ones left,
availability wins and a short one leads.

Nothing of this is written to the metadata log: it changes with every byte a follower fetches and
is true only of the broker that said it. A controller that becomes active starts with none (every
replica counts as long) and has the full picture one `broker.heartbeat.interval.ms` later, when
every live broker has heartbeated; a broker that registers again or is unregistered is forgotten
until its next heartbeat. A broker that does not send the tag (Apache Kafka's) has none.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Iterable

log = logging.getLogger(__name__)

_NONE: frozenset[int] = frozenset()


class ShortLocalLogs:
    """(topic id, partition) -> the brokers whose replica of it is short, per the last heartbeats."""

    def __init__(self) -> None:
        self._by_broker: dict[int, frozenset[tuple[uuid.UUID, int]]] = {}
        self._by_partition: dict[tuple[uuid.UUID, int], frozenset[int]] = {}

    def report(self, broker: int, partitions: Iterable[tuple[uuid.UUID, int]]) -> None:
        """`broker`'s heartbeat listed `partitions` (all of its short replicas) as short."""
        now = frozenset(partitions)
        before = self._by_broker.get(broker, frozenset())
        if now == before:
            return
        log.info("broker %d: %d replica(s) with a short local log%s", broker, len(now),
                 "" if not now else ": " + ", ".join(f"{t}-{p}" for t, p in sorted(now)[:5])
                 + (", ..." if len(now) > 5 else ""))
        for key in before - now:
            left = self._by_partition[key] - {broker}
            if left:
                self._by_partition[key] = left
            else:
                del self._by_partition[key]
        for key in now - before:
            self._by_partition[key] = self._by_partition.get(key, _NONE) | {broker}
        if now:
            self._by_broker[broker] = now
        else:
            self._by_broker.pop(broker, None)

    def forget(self, broker: int) -> None:
        """A broker registered again or went away: nothing known of it until its next heartbeat."""
        self.report(broker, ())

    def clear(self) -> None:
        self._by_broker.clear()
        self._by_partition.clear()

    def replicas(self, topic_id: uuid.UUID, partition: int) -> frozenset[int]:
        """The brokers whose replica of the partition is short."""
        return self._by_partition.get((topic_id, partition), _NONE)

    def __bool__(self) -> bool:
        return bool(self._by_broker)


__all__ = ["ShortLocalLogs"]
