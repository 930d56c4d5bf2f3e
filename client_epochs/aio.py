"""`AIOConsumer`: confluent_kafka.aio.AIOConsumer with KIP-232 internal metadata, a drop-in replacement.

Same constructor and coroutines (it is a subclass: everything not overridden is confluent-kafka's),
with the guarantees and additions of `client_epochs.confluent.Consumer`: commits carry the internal
metadata (`await consumer.commit(...)`), `await consumer.seek(partition, offset, internal_metadata)`,
`await consumer.position_with_internal_metadata(partition)`, `await consumer.committed_internal_metadata(...)`,
assigned partitions paused until the cluster's metadata is at least as new as their committed epochs,
TopicRecreatedError from poll/consume, out-of-range resets only where the data is gone (`resets`),
`waiting_for_metadata`, `waiting_for_committed`, `waiting_reason`. The extra keyword options are the
sync wrapper's (`on_topic_recreated`, `metadata_wait_timeout_s`, `metadata_check_interval_s`,
`no_partitions_warning_s`).

How the waits stay off the event loop: confluent-kafka's AIOConsumer already runs every call of the
synchronous `confluent_kafka.Consumer` it holds on a thread pool and awaits it. This one holds the
synchronous wrapper (`client_epochs.confluent.Consumer`) instead, so the wrapper's blocking work (the
wait for current metadata, its own OffsetFetch and Metadata requests, the ListOffsets lookups of an
out-of-range answer) runs on that pool inside the awaited call, and the rules are the sync wrapper's,
not a copy. The thread pool, not async twins of EpochGuard and MetadataClient: those twins would be a
second implementation of the retry, backoff and refusal rules (and of the wire I/O), for no gain here,
since librdkafka's calls need the pool anyway.

Calls are serialized per consumer (an asyncio lock; calls made from inside a rebalance callback, which
the enclosing call is waiting for, pass as confluent-kafka lets them): the wrapper's own bookkeeping
(floors, positions, stopped partitions) is then never touched by two pool threads at once. The
properties (`waiting_for_metadata`, `resets`, ...) only read it, and may be read at any time. A call
whose caller is cancelled runs to its end on its thread all the same (as confluent-kafka's own calls
do), so the wrapper's state always matches librdkafka's, and it holds the lock until then.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import uuid
from collections.abc import Callable, Iterable
from typing import Any

import confluent_kafka
from confluent_kafka.aio import AIOConsumer as _RawAIOConsumer
from confluent_kafka.aio import _common

from client_epochs.confluent import Consumer
from client_epochs.consumer_guard import EpochGuard, GuardedConsumer, PartitionsWatch, RecreatedPolicy
from client_epochs.model import TopicPartition
from quorum.wire.internal_metadata import InternalMetadata

__all__ = ["AIOConsumer"]


class AIOConsumer(GuardedConsumer, _RawAIOConsumer):
    """confluent_kafka.aio.AIOConsumer that commits, seeks and waits by KIP-232 epochs (see the module)."""

    def __init__(self, consumer_conf: dict[str, Any], max_workers: int = 100,
                 executor: concurrent.futures.Executor | None = None, *, on_topic_recreated: RecreatedPolicy = "raise",
                 metadata_wait_timeout_s: float | None = None, metadata_check_interval_s: float = 5.0,
                 no_partitions_warning_s: float | None = 5.0) -> None:
        """As confluent-kafka's (which builds its Consumer here: this builds the epoch-aware one in its place)."""
        self._closed = False
        self._owns_executor = executor is None
        if executor is None:
            if max_workers < 1:
                raise ValueError("max_workers must be at least 1")
            executor = concurrent.futures.ThreadPoolExecutor(max_workers=max_workers)
        self.executor = executor
        loop = asyncio.get_running_loop()
        consumer_conf = dict(consumer_conf)
        _common.wrap_common_callbacks(loop, consumer_conf)
        _common.wrap_conf_callback(loop, consumer_conf, "on_commit")
        self._serial = asyncio.Lock()
        self._consumer: Consumer = Consumer(
            consumer_conf, on_topic_recreated=on_topic_recreated, metadata_wait_timeout_s=metadata_wait_timeout_s,
            metadata_check_interval_s=metadata_check_interval_s, no_partitions_warning_s=no_partitions_warning_s)

    async def _call(self, blocking_task: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        if _common.ReentryContext.current_lock() is not None:  # from a rebalance callback: its caller holds the lock
            return await super()._call(blocking_task, *args, **kwargs)
        await self._serial.acquire()
        try:
            call = asyncio.ensure_future(super()._call(blocking_task, *args, **kwargs))
        except BaseException:
            self._serial.release()
            raise
        call.add_done_callback(self._end_serial_call)
        return await asyncio.shield(call)  # a cancelled caller leaves the call running, and the lock held

    def _end_serial_call(self, call: asyncio.Future[Any]) -> None:
        """The lock is released when the call ends on its thread, not when its caller stops waiting: a
        cancelled poll still runs on, and a call let in beside it would change the wrapper's bookkeeping
        under it (a stopped partition resolved twice at once raised KeyError)."""
        self._serial.release()
        if not call.cancelled():
            call.exception()  # the caller was cancelled: nobody else reads the error

    # --- what the epoch-aware consumer adds ------------------------------------------------------------

    @property
    def _guard(self) -> EpochGuard:  # type: ignore[override]
        return self._consumer._guard

    @property
    def _partitions_watch(self) -> PartitionsWatch | None:  # type: ignore[override]
        return self._consumer._partitions_watch

    @property
    def waiting_for_metadata(self) -> frozenset[TopicPartition]:
        """Partitions paused until the cluster's metadata is at least as new as their committed epochs."""
        return self._consumer.waiting_for_metadata

    @property
    def waiting_for_committed(self) -> frozenset[TopicPartition]:
        """New partitions paused until the group's coordinator says what was committed for them."""
        return self._consumer.waiting_for_committed

    def read_topic_id(self, tp: TopicPartition) -> uuid.UUID | None:
        return self._consumer.read_topic_id(tp)

    async def position_with_internal_metadata(self, partition: confluent_kafka.TopicPartition) -> tuple[int, str]:
        """(position, internal metadata JSON) of an assigned partition, to store outside Kafka (KIP-232, 7)."""
        return await self._call(self._consumer.position_with_internal_metadata, partition)

    async def committed_internal_metadata(self, partitions: Iterable[TopicPartition]
                                          ) -> dict[TopicPartition, InternalMetadata | None]:
        """What the group's commits say about each partition's epochs (None: committed without them)."""
        return await self._call(self._consumer.committed_internal_metadata, list(partitions))
