"""Replica placement for new partitions: Kafka's StripedReplicaPlacer, for a cluster without racks.

Kafka's placer shuffles the brokers with the controller's Random, then stripes: partition k of a
round starts at the k-th broker of the shuffled list and takes the next brokers after it, so the
replicas of a partition are distinct, leaders (the first replica) go round-robin over the brokers,
and each broker leads one partition per round of as many partitions as there are brokers. After a
full round the list is shuffled again, so that the next round does not repeat the same sets.

Only usable brokers (registered, unfenced, not in controlled shutdown) are placed on; the result
depends only on the set of brokers and the state of `rng`, so a seeded rng gives the same
placement every time.
"""

from __future__ import annotations

import random
from collections.abc import Iterable

from quorum.controller.validation import check_replication_factor


def place_replicas(brokers: Iterable[int], num_partitions: int, replication_factor: int,
                   rng: random.Random) -> list[tuple[int, ...]]:
    """The replicas of `num_partitions` new partitions, leader first; ApiError INVALID_REPLICATION_FACTOR
    when `replication_factor` is not positive or exceeds the number of brokers."""
    usable = sorted(set(brokers))
    check_replication_factor(replication_factor, len(usable))
    count = len(usable)
    rng.shuffle(usable)
    placed = []
    start = 0
    for _ in range(num_partitions):
        if start == count:
            if count > 1:
                rng.shuffle(usable)
            start = 0
        placed.append(tuple(usable[(start + i) % count] for i in range(replication_factor)))
        start += 1
    return placed


__all__ = ["place_replicas"]
