"""The executor's consumer cache: a task reading a partition takes the consumer the last task of that
partition left behind, as Spark's Kafka source does (`spark.kafka.consumer.cache.*`).

Why: a streaming query with a 1-second trigger runs a task per partition per batch; opening a
librdkafka consumer for each costs a connection, a metadata round trip and an empty prefetch, which
is most of a small batch's time. Spark's Python workers are reused between tasks
(`spark.python.worker.reuse`, on by default), so a consumer kept in the worker's memory serves the
next task of the same partition there. When that task starts where the last one ended (the next
batch of a stream), the consumer goes on without a new assignment and its prefetched records are
used, including those the last task fetched past its end (`leftover`); otherwise it is assigned the
new range.

Spark's rules, with its defaults: at most `CAPACITY` idle consumers per worker (the least recently
used closed first), one idle longer than `IDLE_TIMEOUT_S` is closed, a consumer is used by one task
at a time (taken out while in use), and a task that fails closes its consumer instead of returning
it. Entries are keyed by the source's bootstrap, its client settings (the executor group id among
them, so two queries never share one), the partition and its topic epoch. The clock is the caller's.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Hashable, Mapping
from dataclasses import dataclass, field
from typing import Any

from client_epochs.model import TopicPartition

CAPACITY = 64  # spark.kafka.consumer.cache.capacity
IDLE_TIMEOUT_S = 300.0  # spark.kafka.consumer.cache.timeout (5m)


def cache_key(bootstrap: str, client: Mapping[str, str], partition: TopicPartition, topic_epoch: int) -> Hashable:
    """The consumers that may serve a task: same cluster, same settings (and group id), same partition, and
    the same topic epoch (a topic created again under its name is read by a consumer that never saw the old one)."""
    return bootstrap, tuple(sorted(client.items())), partition, topic_epoch


@dataclass(slots=True)
class Idle:
    """A consumer between tasks: where its partition's last task ended and what it fetched past there."""

    consumer: Any
    next_offset: int
    leftover: list[Any] = field(default_factory=list)
    """Messages fetched at or past `next_offset`, in order: the next task's first records, if it starts there."""
    since: float = 0.0


class ConsumerCache:
    """Idle consumers by key, least recently used first; `close` is how a consumer is closed (its own close)."""

    def __init__(
        self,
        capacity: int = CAPACITY,
        idle_timeout_s: float = IDLE_TIMEOUT_S,
        close: Callable[[Any], None] = lambda consumer: consumer.close(),
    ) -> None:
        self.capacity = capacity
        self.idle_timeout_s = idle_timeout_s
        self._close = close
        self._idle: OrderedDict[Hashable, Idle] = OrderedDict()
        self.hits = 0
        """Tasks that took a cached consumer (for logs and tests)."""

    def __len__(self) -> int:
        return len(self._idle)

    def take(self, key: Hashable, now: float) -> Idle | None:
        """The idle consumer for `key`, now the caller's alone, or None (open one)."""
        self._expire(now)
        idle = self._idle.pop(key, None)
        if idle is not None:
            self.hits += 1
        return idle

    def give_back(self, key: Hashable, idle: Idle, now: float) -> None:
        """Keep `idle` for the next task of its key (a task that read its whole range), closing what goes over."""
        idle.since = now
        replaced = self._idle.pop(key, None)
        if replaced is not None and replaced.consumer is not idle.consumer:
            self._close(replaced.consumer)
        self._idle[key] = idle
        self._expire(now)
        while len(self._idle) > self.capacity:
            _, oldest = self._idle.popitem(last=False)
            self._close(oldest.consumer)

    def clear(self) -> None:
        while self._idle:
            _, idle = self._idle.popitem(last=False)
            self._close(idle.consumer)

    def _expire(self, now: float) -> None:
        for key in [key for key, idle in self._idle.items() if now - idle.since > self.idle_timeout_s]:
            self._close(self._idle.pop(key).consumer)


CONSUMERS = ConsumerCache()
"""This Python worker's idle consumers (one worker runs one task at a time)."""
