"""KIP-599's controller mutation quota, sans-IO: how many partitions one client may create or delete per second.

Kafka's ControllerMutationQuotaManager keeps a token bucket per (principal, client id): it holds up to
`rate * quota.window.num * quota.window.size.seconds` tokens, refills at `rate` tokens a second, and each
topic created (its partitions), deleted (its partitions) or grown (the new partitions) takes that many.
CreateTopics v6+, CreatePartitions v3+ and DeleteTopics v5+ get a *strict* quota: while the bucket is
below zero every further topic of the request is refused with THROTTLING_QUOTA_EXCEEDED, and a topic
that finds tokens left goes through even when it takes the bucket below zero (so one large topic is never
refused for ever). Older versions, whose clients do not know the error, get a *permissive* quota: it
counts, never refuses. Either way the response's throttle_time_ms is how long until the bucket is back
at zero, which clients wait before their next request.

The rate is the default (user, client-id) entity's `controller_mutation_rate` client quota (Kafka sets it
with `kafka-configs --alter --entity-type users --entity-default --entity-type clients --entity-default
--add-config controller_mutation_rate=N`); here it is the controller node's property of that name until
client quotas are served. Unset, there is no quota (Kafka's default). Buckets are the active controller's
soft state, as Kafka's are each node's.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass

DEFAULT_QUOTA_WINDOW_NUM = 11
"""Kafka's quota.window.num."""
DEFAULT_QUOTA_WINDOW_SIZE_S = 1
"""Kafka's quota.window.size.seconds."""
MAX_TRACKED_CLIENTS = 10_000
"""Buckets kept at most; the least recently used goes first (a client with a fresh id starts full anyway, as
a new client does in Kafka once its idle sensors expire)."""
THROTTLED_MESSAGE = "The throttling quota has been exceeded."
"""Kafka's ThrottlingQuotaExceededException message."""
STRICT_SINCE = {19: 6, 37: 3, 20: 5}
"""CreateTopics, CreatePartitions, DeleteTopics: the first version whose clients know THROTTLING_QUOTA_EXCEEDED."""


class TokenBucket:
    """Kafka's TokenBucket measure with the quota's lower bound of zero tokens."""

    def __init__(self, rate: float, burst: float, now_ms: int) -> None:
        self.rate = rate
        self.burst = burst
        self.tokens = burst
        self._last_ms = now_ms

    def _refill(self, now_ms: int) -> None:
        if now_ms > self._last_ms:
            self.tokens = min(self.burst, self.tokens + self.rate * (now_ms - self._last_ms) / 1000.0)
            self._last_ms = now_ms

    def exceeded(self, now_ms: int) -> bool:
        self._refill(now_ms)
        return self.tokens < 0

    def take(self, permits: float, now_ms: int) -> None:
        self._refill(now_ms)
        self.tokens -= permits

    def throttle_time_ms(self, now_ms: int) -> int:
        """How long until the bucket is back at zero (Kafka's -tokens / rate * 1000)."""
        self._refill(now_ms)
        return round(-self.tokens / self.rate * 1000) if self.tokens < 0 else 0


@dataclass
class MutationQuota:
    """One request's view of its client's bucket (None: no quota configured, never throttled)."""

    bucket: TokenBucket | None
    strict: bool
    now_ms: int

    def try_take(self, permits: int) -> bool:
        """Take `permits` for one topic; False (nothing taken) when a strict quota is exhausted."""
        if self.bucket is None:
            return True
        if self.strict and self.bucket.exceeded(self.now_ms):
            return False
        self.bucket.take(permits, self.now_ms)
        return True

    def throttle_time_ms(self) -> int:
        return 0 if self.bucket is None else self.bucket.throttle_time_ms(self.now_ms)


class ControllerMutationQuotas:
    """The buckets of every (principal, client id) that asked the active controller for mutations."""

    def __init__(self, rate: float | None, window_num: int = DEFAULT_QUOTA_WINDOW_NUM,
                 window_size_s: int = DEFAULT_QUOTA_WINDOW_SIZE_S) -> None:
        if rate is not None and rate <= 0:
            raise ValueError(f"controller_mutation_rate must be above 0 partitions a second, not {rate}")
        if window_num < 1 or window_size_s < 1:
            raise ValueError(f"quota.window.num ({window_num}) and quota.window.size.seconds ({window_size_s}) "
                             "must be at least 1")
        self.rate = rate
        self._burst = None if rate is None else rate * window_num * window_size_s
        self._buckets: OrderedDict[tuple[str, str], TokenBucket] = OrderedDict()

    def quota_for(self, principal: str, client_id: str | None, api_key: int, version: int,
                  now_ms: int) -> MutationQuota:
        """The quota one CreateTopics, CreatePartitions or DeleteTopics request decides with."""
        strict = version >= STRICT_SINCE.get(api_key, 0)
        if self.rate is None or self._burst is None:
            return MutationQuota(None, strict, now_ms)
        key = (principal, client_id or "")
        bucket = self._buckets.get(key)
        if bucket is None:
            bucket = self._buckets[key] = TokenBucket(self.rate, self._burst, now_ms)
            if len(self._buckets) > MAX_TRACKED_CLIENTS:
                self._buckets.popitem(last=False)
        else:
            self._buckets.move_to_end(key)
        return MutationQuota(bucket, strict, now_ms)

    def clear(self) -> None:
        self._buckets.clear()


UNBOUNDED = MutationQuota(None, strict=False, now_ms=0)
"""The quota of a request decided without one (tests, tools): never throttled."""

__all__ = ["DEFAULT_QUOTA_WINDOW_NUM", "DEFAULT_QUOTA_WINDOW_SIZE_S", "STRICT_SINCE", "THROTTLED_MESSAGE",
           "UNBOUNDED", "ControllerMutationQuotas", "MutationQuota", "TokenBucket"]
