"""Election timing: randomized election timeouts and the two backoffs Kafka's KafkaRaftClient uses.

Randomness comes from the `random.Random` the driver injects, never from the global generator,
so a simulator run is a pure function of its seed.
"""

from __future__ import annotations

import random

from quorum.raft.interface import QuorumConfig

RETRY_BACKOFF_BASE_MS = 100
"""Kafka's RETRY_BACKOFF_BASE_MS: the unit of the exponential election backoff."""


def randomized_election_timeout(config: QuorumConfig, rng: random.Random) -> int:
    """quorum.election.timeout.ms plus up to as much again, as Kafka draws it.

    The spread is what keeps voters whose timers started together from campaigning together
    round after round.
    """
    base = config.election_timeout_ms
    return base + (rng.randrange(base) if base > 0 else 0)


def binary_exponential_backoff(config: QuorumConfig, rng: random.Random, retries: int) -> int:
    """Pause before campaigning again after `retries` failed attempts (1 for the first retry).

    A uniform draw from a window that doubles with every failure, capped at
    quorum.election.backoff.max.ms: split votes become rarer the longer they go on. The window is
    Kafka's (0 to RETRY_BACKOFF_BASE_MS * (2^retries - 1)), but the draw is any millisecond in it,
    where Kafka's binaryExponentialElectionBackoffMs draws whole multiples of 100 ms: two survivors
    that split the vote after a kill -9 drew the same one of Kafka's two first choices (0 or
    100 ms) half the time, campaigned together again and split again (issue 37: a 0.675 s SIGKILL
    failover was three splits in a row). Drawn apart by more than a round trip, they do not tie.
    """
    window = (2 << (min(max(retries, 1), 16) - 1)) - 1
    return min(rng.randint(0, RETRY_BACKOFF_BASE_MS * window), config.election_backoff_max_ms)


def strict_exponential_backoff(config: QuorumConfig, position: int, successors: int) -> int:
    """Delay before a preferred successor at `position` (0 = first) campaigns after EndQuorumEpoch.

    The first one campaigns at once; each later one waits twice as long as the one before it, so
    the leader's choice (ordered by log end offset) is tried first without stalling on it.
    """
    if position <= 0:
        return 0
    base = config.election_backoff_max_ms >> max(successors - 1, 0)
    return min(config.election_backoff_max_ms, max(base, 1) << (position - 1))
