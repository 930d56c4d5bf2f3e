"""The asyncio shell around the group coordinator core: futures for answers, appends, a timer, loading.

Every request becomes a future keyed by a fresh handle; the core's Output resolves futures
(now, or later when a rebalance completes or records are durable) and asks for appends, which
run one partition at a time in the order asked, so the log holds records in the order the core
decided them. One timer task sleeps until the core's next deadline (or until an event may have
moved it) and then ticks the core. The core is only ever called from the event loop's thread.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import time
import uuid
from collections.abc import Callable, Collection, Mapping
from contextlib import suppress
from typing import Any

from quorum.broker.groups.coordinator import GroupCoordinator
from quorum.broker.groups.events import Append, Output
from quorum.broker.groups.find_coordinator import CoordinatorLocator, CoordinatorNode
from quorum.broker.groups.offsets_log import OffsetsLog, OffsetsLogError
from quorum.wire.consumer_offsets import ConsumerOffsetsRecordError
from quorum.wire.errors import ErrorCode

log = logging.getLogger(__name__)

LOAD_STEP_RECORDS = 500
"""Records of `__consumer_offsets` replayed between two turns of the event loop while a partition loads."""


def wall_clock_ms() -> int:
    """Commit timestamps are wall-clock time in Kafka's records, so the deadlines use it too."""
    return time.time_ns() // 1_000_000


class GroupCoordinatorShell:
    def __init__(self, coordinator: GroupCoordinator, offsets_log: OffsetsLog,
                 locate: CoordinatorLocator = lambda partition: None,
                 clock: Callable[[], int] = wall_clock_ms,
                 partition_exists: Callable[[str, int], bool] | None = None,
                 current_topic_id: Callable[[str], uuid.UUID | None] | None = None) -> None:
        """`locate` names the broker leading a `__consumer_offsets` partition (FindCoordinator);
        `partition_exists`, when given, makes OffsetCommit refuse unknown partitions as Kafka does;
        `current_topic_id`, when given, names a topic's id in the broker's metadata (None: no such
        topic), which commits store and which a partition loaded later checks its offsets against
        (without it, as with no metadata at all, offsets are kept whatever their topic)."""
        self.core = coordinator
        self.offsets_log = offsets_log
        self.locate = locate
        self.clock = clock
        self.partition_exists = partition_exists
        self.current_topic_id = current_topic_id
        self._handles = itertools.count(1)
        self._futures: dict[int, asyncio.Future[Any]] = {}
        self._append_locks: dict[int, asyncio.Lock] = {}
        self._tasks: set[asyncio.Task[None]] = set()
        self._wake = asyncio.Event()
        self._timer: asyncio.Task[None] | None = None
        self._loads: dict[int, int] = {}
        """Partition -> the number of its latest load (or resignation): an older load stops."""

    # ----------------------------------------------------------------------------------------
    # Lifecycle

    def start(self) -> None:
        """Start the timer task (call from the event loop)."""
        if self._timer is None:
            self._timer = asyncio.get_running_loop().create_task(self._run_timer(), name="group-coordinator-timer")

    async def close(self) -> None:
        tasks = [t for t in (self._timer, *self._tasks) if t is not None]
        for task in tasks:
            task.cancel()
        for task in tasks:
            with suppress(asyncio.CancelledError, Exception):
                await task
        self._timer = None
        for future in self._futures.values():
            future.cancel()
        self._futures.clear()

    async def become_leader(self, partition: int) -> bool:
        """Load `partition` (this broker now leads it); False (and the partition unloaded) when a record is corrupt.

        The event loop gets a turn every `LOAD_STEP_RECORDS` records: a partition of a busy group's
        commits (the soak's had 71,800 records, 12 s to replay) must not stop the broker's heartbeats,
        Raft fetches and requests meanwhile, or the controller fences it and the load starts over
        elsewhere, for ever. The group's requests are answered COORDINATOR_LOAD_IN_PROGRESS until done.
        """
        load = self._loads[partition] = self._loads.get(partition, 0) + 1
        self.core.begin_loading(partition)

        def superseded() -> bool:  # resigned (or resigned and elected again) while loading
            return self._loads.get(partition) != load or self.core.partitions.get(partition) is not False

        try:
            async for chunk in self.offsets_log.replay(partition):
                for start in range(0, len(chunk), LOAD_STEP_RECORDS):
                    if superseded():
                        return False
                    self.core.replay(partition, chunk[start:start + LOAD_STEP_RECORDS])
                    await asyncio.sleep(0)
        except ConsumerOffsetsRecordError as exc:
            log.error("__consumer_offsets-%d cannot be loaded: %s", partition, exc)
            if not superseded():
                self.resign(partition)
            return False
        if superseded():
            return False
        self.core.finish_loading(partition, self.clock())
        if self.current_topic_id is not None:
            self._apply(self.core.drop_stale_offsets(partition, self.current_topic_id))
        self._wake.set()
        return True

    def elected(self, partitions: Collection[int]) -> None:
        """The broker's newest metadata names it the leader of `partitions`: their groups answer
        COORDINATOR_LOAD_IN_PROGRESS until loaded (see `GroupCoordinator.elected`)."""
        self.core.elected(partitions)

    def topics_deleted(self, deleted: Mapping[uuid.UUID, str]) -> None:
        """The broker's metadata no longer has these topics (ids mapped to names): their committed offsets go too."""
        if self.current_topic_id is not None:
            self._apply(self.core.topics_deleted(deleted, self.current_topic_id))

    def resign(self, partition: int) -> None:
        """This broker no longer leads `partition`."""
        self._loads[partition] = self._loads.get(partition, 0) + 1
        self._apply(self.core.unload(partition))

    def coordinator_node(self, group_id: str) -> CoordinatorNode | None:
        return self.locate(self.core.partition_for(group_id))

    # ----------------------------------------------------------------------------------------
    # Requests

    async def call(self, command: Callable[[Any, Any, int], Output], request: Any) -> Any:
        """Run a core command (e.g. `core.join_group`) with a fresh handle and await its answer."""
        handle = next(self._handles)
        future: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self._futures[handle] = future
        try:
            self._apply(command(handle, request, self.clock()))
            return await future
        finally:
            self._futures.pop(handle, None)

    def _apply(self, output: Output) -> None:
        for handle, answer in output.answers:
            future = self._futures.get(handle)
            if future is not None and not future.done():
                future.set_result(answer)
        for append in output.appends:
            self._spawn(self._append(append))
        self._wake.set()

    def _spawn(self, coroutine: Any) -> None:
        task = asyncio.get_running_loop().create_task(coroutine)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _append(self, append: Append) -> None:
        lock = self._append_locks.setdefault(append.partition, asyncio.Lock())
        async with lock:
            try:
                await self.offsets_log.append(append.partition, append.records)
            except OffsetsLogError as exc:
                self._apply(self.core.append_failed(append.token, exc.code, self.clock()))
                return
            except Exception:
                log.exception("append to __consumer_offsets-%d failed", append.partition)
                self._apply(self.core.append_failed(append.token, ErrorCode.UNKNOWN_SERVER_ERROR, self.clock()))
                return
        self._apply(self.core.append_done(append.token, self.clock()))

    async def _run_timer(self) -> None:
        while True:
            self._wake.clear()
            deadline = self.core.next_deadline()
            now = self.clock()
            if deadline is not None and deadline <= now:
                self._apply(self.core.tick(now))
                after = self.core.next_deadline()
                if after is not None and after <= now:  # a core bug must not spin the event loop
                    log.error("group coordinator deadline %d did not move after a tick at %d", after, now)
                    await asyncio.sleep(0.1)
                continue
            timeout = None if deadline is None else (deadline - now) / 1000
            with suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), timeout)
