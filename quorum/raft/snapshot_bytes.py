"""How a leader shares one FetchSnapshot response's byte budget among the partitions it names.

KIP-630, "Fetching Snapshots", Request Handling: the leader sends no more than ResponseMaxBytes
(the smaller of the request's MaxBytes and replica.fetch.response.max.bytes), and when several
partitions are named it "will evenly distribute the number of bytes sent across all of the
partitions":

1. "Each topic partition is guaranteed to receive at least the average of ResponseMaxBytes if
   that snapshot has enough bytes remaining."
2. "If there are topic partitions with snapshots that have remaining bytes less than the average
   ResponseMaxBytes, then those bytes may be used to send snapshot bytes for other topic
   partitions."

The KRaft quorum only ever fetches `__cluster_metadata-0`, so in practice the list has one entry
and it gets min(remaining, budget); the rule is kept whole so that a request naming several
partitions is answered as the spec says. Pure arithmetic, no I/O.
"""

from __future__ import annotations

from collections.abc import Sequence


def spread_response_bytes(remaining: Sequence[int], response_max_bytes: int) -> list[int]:
    """How many bytes to send for each partition, in the order of `remaining`.

    `remaining[i]` is how many bytes partition i's snapshot has left from the requested position
    (size - position). The answer is max-min fair ("water filling"): partitions are served from
    the fewest bytes remaining up, each getting at most an even share of what is left of the
    budget, so what a small partition does not need raises the share of the larger ones (rule 2)
    and no share ever drops below `response_max_bytes // len(remaining)` (rule 1). Shares of
    partitions that are cut short differ by at most one byte (integer division).

    Guarantees: `0 <= result[i] <= remaining[i]`; `result[i] >= min(remaining[i], response_max_bytes
    // len(remaining))`; `sum(result) == min(response_max_bytes, sum(remaining))`, so the budget is
    never exceeded and never left unused while some partition still has bytes to send.
    """
    if response_max_bytes < 0:
        raise ValueError(f"response_max_bytes must not be negative, got {response_max_bytes}")
    if any(r < 0 for r in remaining):
        raise ValueError(f"remaining bytes must not be negative, got {list(remaining)}")
    result = [0] * len(remaining)
    budget = response_max_bytes
    # Smallest first: by the time a partition is served, every smaller one has returned what it
    # did not need, so the even share of the rest (budget // partitions left) only grows.
    order = sorted(range(len(remaining)), key=lambda i: remaining[i])
    for served, index in enumerate(order):
        share = budget // (len(order) - served)
        result[index] = min(remaining[index], share)
        budget -= result[index]
    return result


__all__ = ["spread_response_bytes"]
