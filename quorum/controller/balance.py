"""Automatic preferred leader election (`auto.leader.rebalance.enable`): leadership goes back to
each partition's preferred replica, the first of its replica list, once that broker is back.

Why: after a broker is fenced and unfenced, the partitions it led stay with the replicas that
took over, so a few brokers end up leading most partitions. The check follows Kafka's: every
`leader.imbalance.check.interval.seconds`, for each broker, the partitions whose preferred
replica it is are counted; when the share of them it does not lead is above
`leader.imbalance.per.broker.percentage`, each of them whose preferred replica is acceptable
and in the ISR is moved to it (a PartitionChangeRecord setting Leader, which bumps the leader
epoch). This is the ratio of Kafka's ZooKeeper controller; Kafka's KRaft controller moves every
imbalanced partition at the check, which a percentage of 0 gives.

The controller decides *when* (`LeaderBalancer.due`, driven by tick's clock); `plan` decides
*what*, sans-IO, from the partitions it is given.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Iterable

from quorum.controller.election import PartitionChange, PartitionState, elect_preferred

DEFAULT_CHECK_INTERVAL_MS = 300 * 1000
"""Kafka's default of `leader.imbalance.check.interval.seconds` (300)."""
DEFAULT_IMBALANCE_PERCENTAGE = 10
"""Kafka's default of `leader.imbalance.per.broker.percentage`."""
MAX_ELECTIONS_PER_CHECK = 1000
"""Kafka's maxElectionsPerImbalance: more wait for the next tick, so that one batch stays bounded."""


def plan(partitions: Iterable[PartitionState], *, percentage: int, is_acceptable_leader: Callable[[int], bool],
         limit: int = MAX_ELECTIONS_PER_CHECK) -> tuple[list[PartitionChange], bool]:
    """The preferred-leader changes for the brokers whose imbalance ratio is above `percentage`,
    at most `limit` of them, and whether more were left for later."""
    by_preferred: dict[int, list[PartitionState]] = defaultdict(list)
    for state in partitions:
        if state.replicas:
            by_preferred[state.replicas[0]].append(state)
    changes: list[PartitionChange] = []
    for broker, states in by_preferred.items():
        imbalanced = [state for state in states if state.leader != broker]
        if not imbalanced or len(imbalanced) * 100 <= percentage * len(states):
            continue
        for state in imbalanced:
            change = elect_preferred(state, is_acceptable_leader=is_acceptable_leader)
            if change is None:
                continue
            if len(changes) >= limit:
                return changes, True
            changes.append(change)
    return changes, False


class LeaderBalancer:
    """When the next imbalance check is due: soft state of the active controller, like sessions.

    The first check comes one interval after the controller first ticks as the active one
    (Kafka schedules it on activation), then one interval after each check; a check that hit
    the election limit asks for another at the next tick.
    """

    def __init__(self, enabled: bool, interval_ms: int) -> None:
        if interval_ms <= 0:
            raise ValueError("leader.imbalance.check.interval.seconds must be positive")
        self.enabled = enabled
        self.interval_ms = interval_ms
        self._next_ms: int | None = None

    def due(self, now_ms: int) -> bool:
        """Whether to check now; schedules the first check on the first call."""
        if not self.enabled:
            return False
        if self._next_ms is None:
            self._next_ms = now_ms + self.interval_ms
        return now_ms >= self._next_ms

    def checked(self, now_ms: int, more: bool) -> None:
        self._next_ms = now_ms if more else now_ms + self.interval_ms

    @property
    def next_check_ms(self) -> int | None:
        return self._next_ms if self.enabled else None

    def clear(self) -> None:
        self._next_ms = None


__all__ = [
    "DEFAULT_CHECK_INTERVAL_MS", "DEFAULT_IMBALANCE_PERCENTAGE", "MAX_ELECTIONS_PER_CHECK", "LeaderBalancer", "plan",
]
