"""The broker's remote tier: KIP-405's RemoteLogManager over S3 (`quorum.broker.remote_tier_plugin.RemoteTier`).

The node's entry point composes it into the broker role when `remote.log.storage.system.enable`
is true (`from_properties`). It:

* attaches a `RemoteLogState` to every hosted partition of a topic with `remote.storage.enable`
  when the partition opens, so local retention never deletes a segment before it is uploaded;
* runs the task every `remote.log.manager.task.interval.ms` (Kafka's default 30000): per
  partition, the remote metadata is (re)loaded — by a leader once when it becomes one, before it
  answers ListOffsets -6 with anything but -1 (KIP-1023), by a follower every run — and the
  leader carries out `upload_plan.plan`'s steps: clean up unfinished copies, upload ready
  segments (COPY_SEGMENT_STARTED, objects with the manifest last, then COPY_SEGMENT_FINISHED),
  expire remote segments past `retention.*`; then local retention runs, so uploaded segments
  past `local.retention.*` leave the disk promptly;
* serves consumers' reads and timestamp lookups below the local log start from S3;
* deletes a deleted topic's objects.

All S3 and file work runs on thread pools, never on the event loop, one pool per kind of work as
in Kafka 4.x (`rlm_config`): uploads on the copier pool, remote deletions on the expiration pool,
followers' metadata and the KIP-1023 bootstrap's reads on the follower pool, consumers' reads on
the reader pool (`remote_reader`: chunk cache, fetch-ahead, `remote.fetch.max.wait.ms`). The task
itself is one asyncio task, so a partition's steps never run concurrently with each other, and
the partitions are stepped one after the other (a slow deletion delays the next partition's
uploads; it no longer delays reads or a bootstrap).

KIP-956's copy quota (`remote.log.manager.copy.max.bytes.per.second`): before each upload the
task waits, in steps of at most a second as Kafka's copier does, while the quota's throttle time
is positive, then records the segment's size and uploads it.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import os
import signal
import time
import uuid
from collections.abc import Awaitable, Callable, Iterable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from pathlib import Path
from typing import TypeVar

from prometheus_client.registry import Collector

from quorum.broker.log_answers import TimestampOffset
from quorum.broker.partition import Partition
from quorum.broker.partition_view import ServedPartition
from quorum.broker.producer_state import ProducerStateManager
from quorum.broker.remote_tier import (
    IndexType,
    RemoteLogMetadataStore,
    RemoteLogState,
    RemoteSegmentMetadata,
    RemoteSegmentState,
    RemoteStorage,
    RemoteStorageError,
    SegmentUpload,
    TopicIdPartition,
)
from quorum.broker.remote_tier_plugin import RemoteReadError
from quorum.log.epoch_cache import EpochEntry, encode_checkpoint
from quorum.log.log import SegmentFiles
from quorum.wire.producer_snapshot import decode_producer_snapshot, encode_producer_snapshot
from quorum.wire.spliced import BufferRecords
from tiered_follower import remote_reads
from tiered_follower.chunk_cache import ChunkCacheConfig
from tiered_follower.remote_metrics import RemoteStorageMetrics
from tiered_follower.remote_reader import ReaderQueueFull, RemoteReader
from tiered_follower.rlm_config import RemoteLogManagerConfig
from tiered_follower.rlm_quota import ByteRateQuota
from tiered_follower.upload_plan import CleanUp, Expire, LocalSegment, PartitionNow, Upload, plan

logger = logging.getLogger(__name__)

T = TypeVar("T")

CRASH_KNOB = "quorum.test.remote.crash.enable"
CRASH_FILE = "CRASH_REMOTE_UPLOAD"
"""Test only: with CRASH_KNOB true, a file of this name in the broker's first log dir naming a step
("log", "indexes", "manifest", "finished") makes the broker kill itself (SIGKILL, as `kill -9`)
just before that step of its next upload; the file is removed first, so a restart runs normally.
The follower bootstrap's steps are named there too (`tiered_follower.bootstrap_plugin.CRASH_STEPS`)."""


class CrashPoint:
    """The CRASH_KNOB test knob (see CRASH_FILE)."""

    def __init__(self, properties: Mapping[str, str]) -> None:
        enabled = properties.get(CRASH_KNOB, "false").strip().lower() == "true"
        log_dirs = [d for d in properties.get("log.dirs", "").split(",") if d.strip()]
        self.path = Path(log_dirs[0].strip()) / CRASH_FILE if enabled and log_dirs else None
        if self.path is not None:
            logger.warning("test setting %s: the broker kills itself at the upload step named in %s",
                           CRASH_KNOB, self.path)

    def __call__(self, step: str) -> None:
        if self.path is None:
            return
        try:
            wanted = self.path.read_text().strip()
        except FileNotFoundError:
            return
        if wanted == step:
            self.path.unlink()
            logger.warning("%s: killing this broker (SIGKILL) before the upload step %r", self.path, step)
            os.kill(os.getpid(), signal.SIGKILL)


def wall_clock_ms() -> int:
    return int(time.time() * 1000)


def topic_id_partition(partition: Partition) -> TopicIdPartition:
    return TopicIdPartition(partition.topic, partition.topic_id, partition.partition)


def segment_epochs(entries: Iterable[EpochEntry], base: int, next_offset: int) -> tuple[EpochEntry, ...]:
    """The leader epochs of the batches in [base, next_offset), the first moved to start at `base`."""
    inside: list[EpochEntry] = []
    for entry in entries:
        if entry.start_offset >= next_offset:
            break
        if entry.start_offset <= base:
            inside = [EpochEntry(entry.epoch, base)]
        else:
            inside.append(entry)
    return tuple(inside)


def merged_history(remote: Iterable[EpochEntry], local: Iterable[EpochEntry], next_offset: int) -> list[EpochEntry]:
    """The leader-epoch checkpoint up to `next_offset`: the remote history, then the local one."""
    merged: list[EpochEntry] = []
    for entry in (*remote, *local):
        if entry.start_offset >= next_offset:
            continue
        if merged and entry.epoch <= merged[-1].epoch:
            continue
        if merged and entry.start_offset <= merged[-1].start_offset:
            merged[-1] = entry
            continue
        merged.append(entry)
    return merged


class RemoteLogManager:
    """See the module docstring."""

    def __init__(self, broker_id: int, storage: RemoteStorage, metadata: RemoteLogMetadataStore,
                 properties: Mapping[str, str] | None = None, clock_ms: Callable[[], int] = wall_clock_ms,
                 crash: Callable[[str], None] | None = None,
                 s3_stats: Callable[[], Mapping[str, int]] | None = None,
                 sleep: Callable[[float], Awaitable[None]] = asyncio.sleep) -> None:
        """`s3_stats`: the S3 client's counters, exported beside Kafka's remote storage metrics;
        `clock_ms` and `sleep` drive the quotas (a test's virtual time); ValueError (naming the key)
        for a malformed setting."""
        properties = properties or {}
        self.metrics = RemoteStorageMetrics(s3_stats)
        self._crash = crash or (lambda _step: None)
        self.broker_id = broker_id
        self.storage = storage
        self.metadata = metadata
        self.config = config = RemoteLogManagerConfig.from_properties(properties)
        self.interval_ms = config.task_interval_ms
        self._follower_pool = ThreadPoolExecutor(max_workers=config.follower_threads,
                                                 thread_name_prefix=f"rlm-follower-{broker_id}")
        self._copier_pool = ThreadPoolExecutor(max_workers=config.copier_threads,
                                               thread_name_prefix=f"rlm-copy-{broker_id}")
        self._expiration_pool = ThreadPoolExecutor(max_workers=config.expiration_threads,
                                                   thread_name_prefix=f"rlm-expiration-{broker_id}")
        self._clock_ms = clock_ms
        self._sleep = sleep
        self.reader = RemoteReader(storage, config, ChunkCacheConfig.from_properties(properties),
                                   f"rlm-reader-{broker_id}", clock_ms, sleep)
        self._indexes = self.reader.indexes
        self.copy_quota = ByteRateQuota(config.copy_quota)
        self.copy_stats = {"throttled_ms": 0, "bytes": 0}
        """Time the task waited for the copy quota, and the bytes it recorded against it."""
        self._snapshots: dict[TopicIdPartition, tuple[int, bytes]] = {}
        self._copying: set[uuid.UUID] = set()
        self._background: set[asyncio.Future[object]] = set()
        self._on_close: list[Callable[[], None]] = []  # the S3 client's `close` (`from_properties`)
        self._deleted: set[TopicIdPartition] = set()
        self._locks: dict[TopicIdPartition, asyncio.Lock] = {}
        self._hosted: Callable[[], Iterable[Partition]] = tuple
        self.wake = asyncio.Event()
        """Set to run the task now instead of at the next interval (tests, tools)."""

    @classmethod
    def from_properties(cls, broker_id: int, properties: Mapping[str, str]) -> RemoteLogManager:
        """S3 storage and metadata from the `rsm.config.` settings (`tiered_follower.rsm_config`:
        S3ConfigError naming a key that is unknown or bad, so the broker does not start)."""
        from tiered_follower.rsm_config import RsmConfig
        from tiered_follower.s3_client import S3Client
        from tiered_follower.s3_metadata import S3RemoteLogMetadataStore
        from tiered_follower.s3_storage import S3RemoteStorage

        config = RsmConfig.from_properties(properties)
        client = S3Client(config.s3)
        crash = CrashPoint(properties)
        manager = cls(broker_id, S3RemoteStorage(client, crash, config.transform), S3RemoteLogMetadataStore(client),
                      properties, crash=crash, s3_stats=client.snapshot)
        manager._on_close.append(client.close)
        return manager

    @property
    def collectors(self) -> tuple[Collector, ...]:
        """Kafka's remote storage metrics and the S3 client's, for the node's metrics endpoint."""
        return (self.metrics,)

    async def _run(self, fn: Callable[..., T], *args: object, pool: ThreadPoolExecutor | None = None) -> T:
        """`fn(*args)` on `pool` (the follower pool by default)."""
        return await asyncio.get_running_loop().run_in_executor(pool or self._follower_pool,
                                                                functools.partial(fn, *args))

    async def run_blocking(self, fn: Callable[..., T], *args: object) -> T:
        """`fn(*args)` on the follower pool (the follower bootstrap's S3 reads)."""
        return await self._run(fn, *args)

    def crash_point(self, step: str) -> None:
        """The CRASH_KNOB test knob at `step` (the follower bootstrap names its steps too)."""
        self._crash(step)

    def hosted(self, topic: str, partition: int) -> Partition | None:
        """The partition as this broker hosts it now (the task's partitions), None when it does not."""
        for hosted in self._hosted():
            if hosted.topic == topic and hosted.partition == partition:
                return hosted
        return None

    # -- RemoteTier: partitions ---------------------------------------------------------------------

    def partition_opened(self, partition: Partition) -> None:
        if partition.remote is None and partition.config.remote_storage_enable:
            partition.remote = RemoteLogState(topic_id_partition(partition))
            self.wake.set()  # read its metadata now: until then reads below the local log start wait

    def partition_deleted(self, partition: TopicIdPartition) -> None:
        """Its remote work stops; its objects are deleted once a step in flight is done (so no
        upload finishing late leaves objects behind)."""
        self._deleted.add(partition)
        self._snapshots.pop(partition, None)
        self.metrics.forget(partition.topic, partition.partition)
        task = asyncio.ensure_future(self._delete_partition(partition))
        self._background.add(task)
        task.add_done_callback(self._background.discard)

    async def _delete_partition(self, partition: TopicIdPartition) -> None:
        async with self._lock(partition):
            try:
                removed = await self._run(self.storage.delete_partition, partition, pool=self._expiration_pool)
                logger.info("%s: deleted its %d remote objects", partition, removed)
            except RemoteStorageError as exc:
                logger.error("%s: deleting its remote objects failed: %s", partition, exc)

    def _lock(self, partition: TopicIdPartition) -> asyncio.Lock:
        """Held by a partition's remote work and by its deletion, so the two never interleave."""
        return self._locks.setdefault(partition, asyncio.Lock())

    # -- RemoteTier: reads --------------------------------------------------------------------------

    async def read(self, partition: ServedPartition, offset: int, max_bytes: int) -> BufferRecords:
        """See RemoteTier.read; b"" when the fetch quota, the reader pool or `remote.fetch.max.wait.ms`
        answers the partition without records (`remote_reader`): an empty BufferRecords."""
        remote = partition.remote
        segment = None if remote is None else remote.segment_for(offset) or remote.segment_after(offset)
        if segment is None or remote is None:
            raise RemoteReadError(f"{partition.topic}-{partition.partition}: no remote segment holds offset {offset}")
        self.metrics.mark("RemoteFetchRequestsPerSec", partition.topic)
        following: list[RemoteSegmentMetadata] = []  # those the fetch-ahead may reach into
        reach, after = self.reader.chunks.config.prefetch_max_size, segment
        while reach > 0 and (after := remote.segment_after(after.end_offset)) is not None:
            following.append(after)
            reach -= after.size_in_bytes
        try:
            data = await self.reader.read(segment, following, offset, max(max_bytes, 1))
        except RemoteStorageError as exc:
            self.metrics.mark("RemoteFetchErrorsPerSec", partition.topic)
            raise RemoteReadError(str(exc)) from exc
        self.metrics.mark("RemoteFetchBytesPerSec", partition.topic, len(data))
        return data

    async def offset_for_timestamp(self, partition: ServedPartition, timestamp: int) -> TimestampOffset | None:
        remote = partition.remote
        if remote is None:
            return None
        try:
            for segment in remote.finished:
                if segment.max_timestamp_ms >= timestamp and segment.start_offset < partition.local_log_start_offset:
                    found = await self.reader.run(remote_reads.offset_for_timestamp, self.storage, self._indexes,
                                                  segment, timestamp)
                    if found is not None:
                        return found
        except (RemoteStorageError, ReaderQueueFull) as exc:
            raise RemoteReadError(str(exc)) from exc
        return None

    # -- RemoteTier: the task -----------------------------------------------------------------------

    async def run(self, partitions: Callable[[], Iterable[Partition]], stop: asyncio.Event) -> None:
        self._hosted = partitions
        while not stop.is_set():
            await self.run_once(partitions())
            self.wake.clear()
            waiters = {asyncio.ensure_future(stop.wait()), asyncio.ensure_future(self.wake.wait())}
            await asyncio.wait(waiters, timeout=self.interval_ms / 1000, return_when=asyncio.FIRST_COMPLETED)
            for waiter in waiters:
                waiter.cancel()

    async def run_once(self, partitions: Iterable[Partition]) -> None:
        """One pass of the task over `partitions`; a failing partition is logged and retried next pass."""
        for partition in list(partitions):
            try:
                await self._run_partition(partition)
            except (RemoteStorageError, OSError, ValueError) as exc:
                logger.warning("%s: remote log task: %s (retried in %d ms)", partition.name, exc, self.interval_ms)
            except Exception:  # a bug met by one partition must not stop the task for the others
                logger.exception("%s: remote log task failed (retried in %d ms)", partition.name, self.interval_ms)

    async def _run_partition(self, partition: Partition) -> None:
        if partition.remote is not None and not partition.config.remote_storage_enable:
            await self._remote_storage_disabled(partition, partition.remote)
            return
        self.partition_opened(partition)
        state = partition.remote
        if state is None or state.partition in self._deleted:
            return
        async with self._lock(state.partition):
            if state.partition not in self._deleted:
                try:
                    await self._run_steps(partition, state)
                finally:  # a failed copy leaves its lag to see
                    if state.partition not in self._deleted and state.loaded:
                        self._record_gauges(partition, state)

    async def _remote_storage_disabled(self, partition: Partition, state: RemoteLogState) -> None:
        """KIP-950: the topic's `remote.storage.enable` went false. With `remote.log.delete.on.disable`
        the leader deletes the partition's remote data, as Kafka's `deleteRemoteLogPartition`: its
        segments go DELETE_SEGMENT_STARTED (no replica reads them any more), then every object under
        the partition's prefix, the metadata included (had the offsets stayed "uploaded", turning
        remote storage on again would let local retention delete segments that are not in S3).
        Every replica then stops tiering it; the log starts at the local log start."""
        async with self._lock(state.partition):
            if partition.remote is not state or partition.config.remote_storage_enable:
                return
            if not partition.config.remote_log_delete_on_disable:
                logger.warning("%s: remote.storage.enable is off without remote.log.delete.on.disable (the "
                               "controller refuses that change; a static default?): its remote data stays in S3, "
                               "unread", partition.name)  # fmt: skip
            elif partition.is_leader:
                state.load(await self._run(self.metadata.list_segments, state.partition))
                for segment in state.segments(RemoteSegmentState.COPY_SEGMENT_STARTED,
                                              RemoteSegmentState.COPY_SEGMENT_FINISHED):  # fmt: skip
                    self.metrics.mark("RemoteDeleteRequestsPerSec", partition.topic)
                    await self._publish(state, segment.moved_to(RemoteSegmentState.DELETE_SEGMENT_STARTED,
                                                                self.broker_id, self._clock_ms()))  # fmt: skip
                removed = await self._run(self.storage.delete_partition, state.partition)
                logger.info("%s: remote.storage.enable turned off with remote.log.delete.on.disable: deleted its %d "
                            "remote objects; the log starts at the local log start %d", partition.name, removed,
                            partition.local_log_start_offset)  # fmt: skip
            partition.remote = None
            self._snapshots.pop(state.partition, None)
            self.metrics.forget(partition.topic, partition.partition)

    async def refresh(self, partition: Partition) -> None:
        """Read a follower's remote metadata now, outside the task's round over every partition
        (a bootstrapping follower needs its own at once); a leader's stays the task's to read.
        RemoteStorageError when the store cannot be read."""
        self.partition_opened(partition)
        state = partition.remote
        if state is None or state.partition in self._deleted or partition.is_leader:
            return
        async with self._lock(state.partition):
            if state.partition not in self._deleted and not partition.is_leader:
                state.load(await self._run(self.metadata.list_segments, state.partition))

    async def _run_steps(self, partition: Partition, state: RemoteLogState) -> None:
        key = state.partition
        epoch = partition.leader_epoch
        leader = partition.is_leader
        # A follower reloads every run; a leader when it becomes one (Partition.update_state calls
        # RemoteLogState.invalidate unless it merely stayed leader through an ISR change).
        if not leader or not state.loaded:
            segments = await self._run(self.metadata.list_segments, key)
            state.load(segments)
            if leader:
                logger.info("%s: leader in epoch %d; remote segments loaded, highest uploaded offset %s",
                            partition.name, epoch, state.highest_uploaded_offset)  # fmt: skip
        rolled = {s.base_offset: s for s in partition.log.rolled_segments()}
        local = [LocalSegment(s.base_offset, s.next_offset, s.size, s.max_timestamp) for s in rolled.values()]
        config = partition.config
        now = PartitionNow(self.broker_id, leader, partition.high_watermark, local, config.retention_ms,
                           config.retention_bytes, self._clock_ms(), frozenset(self._copying),
                           config.remote_log_copy_disable)
        for step in plan(now, state):
            if key in self._deleted:
                return
            if not (partition.is_leader and partition.leader_epoch == epoch):
                logger.info("%s: no longer leader in epoch %d: remote work stops", partition.name, epoch)
                return
            if isinstance(step, Upload):
                await self._wait_for_copy_quota(step.segment.size)
                if not (partition.is_leader and partition.leader_epoch == epoch) or key in self._deleted:
                    return
                await self._upload(partition, state, rolled[step.segment.base_offset])
            elif isinstance(step, CleanUp):
                await self._delete(state, step.segment, f"left unfinished by broker {step.segment.broker_id}")
            elif isinstance(step, Expire):
                await self._delete(state, step.segment, step.reason)
        if key in self._deleted:
            return
        deleted = partition.delete_old_segments(self._clock_ms())
        if deleted:
            logger.info("%s: local retention deleted %d uploaded segment(s); local log start %d, log start %d",
                        partition.name, deleted, partition.local_log_start_offset, partition.log_start_offset)

    def _record_gauges(self, partition: Partition, state: RemoteLogState) -> None:
        """A leader's RemoteCopyLag*, RemoteLogSizeBytes and RemoteLogMetadataCount (`remote_metrics`)."""
        if not partition.is_leader:
            self.metrics.forget(partition.topic, partition.partition)
            return
        uploaded = state.highest_uploaded_offset
        uploaded = -1 if uploaded is None else uploaded
        # KIP-950: with copies disabled Kafka resets the copy lag to 0 (stopLeaderCopyRLMTasks)
        copying = not partition.config.remote_log_copy_disable
        pending = [s for s in partition.log.rolled_segments() if s.base_offset > uploaded and copying]
        live = [s for s in state.segments() if s.state != RemoteSegmentState.DELETE_SEGMENT_FINISHED]
        self.metrics.record(partition.topic, partition.partition, copy_lag_bytes=sum(s.size for s in pending),
                            copy_lag_segments=len(pending), log_size_bytes=state.size_in_bytes,
                            metadata_count=len(live))  # fmt: skip

    async def _wait_for_copy_quota(self, size: int) -> None:
        """KIP-956: wait while the copy quota is exceeded (a second at most between looks, as
        Kafka's copier), then record the segment's `size` against it before copying."""
        while (throttle_ms := self.copy_quota.throttle_ms(self._clock_ms())) > 0:
            wait_ms = min(throttle_ms, 1000)
            self.copy_stats["throttled_ms"] += wait_ms
            await self._sleep(wait_ms / 1000)
        self.copy_quota.record(size, self._clock_ms())
        self.copy_stats["bytes"] += size

    async def _publish(self, state: RemoteLogState, segment: RemoteSegmentMetadata,
                       pool: ThreadPoolExecutor | None = None) -> None:
        await self._run(self.metadata.publish, segment, pool=pool)
        state.apply(segment)

    async def _upload(self, partition: Partition, state: RemoteLogState, files: SegmentFiles) -> None:
        epochs = segment_epochs(partition.log.epoch_entries, files.base_offset, files.next_offset)
        if not epochs:
            raise ValueError(f"segment {files.base_offset} has no leader epoch in the epoch cache")
        started = RemoteSegmentMetadata(state.partition, uuid.uuid4(), files.base_offset, files.next_offset - 1,
                                        epochs, files.size, files.max_timestamp, self.broker_id, self._clock_ms())
        self._copying.add(started.segment_id)
        self.metrics.mark("RemoteCopyRequestsPerSec", partition.topic)
        copier = self._copier_pool
        try:
            await self._publish(state, started, copier)
            history = merged_history(state.epoch_entries_upto(files.base_offset), partition.log.epoch_entries,
                                     files.next_offset)
            indexes = await self._run(self._segment_indexes, partition, state, files, history, pool=copier)
            custom = await self._run(self.storage.copy_segment, started,
                                     SegmentUpload(str(files.log_path), files.size, indexes), pool=copier)
            await self._check_custom_metadata(started, custom, copier)
            finished = replace(started.moved_to(RemoteSegmentState.COPY_SEGMENT_FINISHED, self.broker_id,
                                                self._clock_ms()), custom_metadata=custom)
            await self._run(self._crash, "finished", pool=copier)
            await self._publish(state, finished, copier)
        except BaseException:
            self.metrics.mark("RemoteCopyErrorsPerSec", partition.topic)
            raise
        finally:
            self._copying.discard(started.segment_id)
        self.metrics.mark("RemoteCopyBytesPerSec", partition.topic, started.size_in_bytes)
        logger.info("%s: uploaded segment %s (offsets %d..%d, %d bytes, epochs %s)", partition.name,
                    started.object_name, started.start_offset, started.end_offset, started.size_in_bytes,
                    [(e.epoch, e.start_offset) for e in epochs])  # fmt: skip

    async def _check_custom_metadata(self, segment: RemoteSegmentMetadata, custom: bytes | None,
                                     pool: ThreadPoolExecutor) -> None:
        """Kafka's rule for custom metadata over `remote.log.metadata.custom.metadata.max.bytes`:
        the copied objects are deleted and the copy fails, naming the setting (the segment stays
        COPY_SEGMENT_STARTED, cleaned up as any unfinished copy)."""
        limit = self.config.custom_metadata_max_bytes
        if custom is None or len(custom) <= limit:
            return
        await self._run(self.storage.delete_segment, segment, pool=pool)
        raise RemoteStorageError(f"segment {segment.object_name} of {segment.partition}: the remote storage's "
                                 f"custom metadata holds {len(custom)} bytes, more than "
                                 f"remote.log.metadata.custom.metadata.max.bytes={limit}")

    def _segment_indexes(self, partition: Partition, state: RemoteLogState, files: SegmentFiles,
                         history: list[EpochEntry]) -> dict[IndexType, bytes]:
        """The `.indexes` parts of a segment (blocking: files and maybe one S3 read)."""
        return {
            IndexType.OFFSET: files.index_path.read_bytes(),
            IndexType.TIMESTAMP: files.time_index_path.read_bytes() if files.time_index_path else b"",
            IndexType.LEADER_EPOCH: encode_checkpoint(history),
            IndexType.PRODUCER_SNAPSHOT: self._producer_snapshot(partition, state, files),
        }

    def _producer_snapshot(self, partition: Partition, state: RemoteLogState, files: SegmentFiles) -> bytes:
        """The producer state at the segment's next offset: the previous segment's snapshot (kept
        from its upload, or read back from S3) with this segment's batches replayed on it."""
        key = state.partition
        producers = ProducerStateManager(partition.name)
        kept = self._snapshots.get(key)
        if kept is not None and kept[0] == files.base_offset:
            producers.load_snapshot(decode_producer_snapshot(kept[1]))
        else:
            previous = state.segment_for(files.base_offset - 1) if files.base_offset > 0 else None
            if previous is not None and previous.next_offset == files.base_offset:
                data = self.storage.fetch_index(previous, IndexType.PRODUCER_SNAPSHOT)
                if data:
                    producers.load_snapshot(decode_producer_snapshot(data))
        for batch in partition.log.iter_batches(files.base_offset, files.next_offset):
            producers.replay(batch.producer_id, batch.producer_epoch, batch.base_sequence, batch.last_offset_delta,
                             batch.base_offset, batch.max_timestamp)
        data = encode_producer_snapshot(producers.snapshot())
        self._snapshots[key] = (files.next_offset, data)
        return data

    async def _delete(self, state: RemoteLogState, segment: RemoteSegmentMetadata, reason: str) -> None:
        """DELETE_SEGMENT_STARTED (the segment stops being readable), its objects, DELETE_SEGMENT_FINISHED."""
        self.metrics.mark("RemoteDeleteRequestsPerSec", state.partition.topic)
        expiration = self._expiration_pool
        try:
            if segment.state != RemoteSegmentState.DELETE_SEGMENT_STARTED:
                segment = segment.moved_to(RemoteSegmentState.DELETE_SEGMENT_STARTED, self.broker_id, self._clock_ms())
                await self._publish(state, segment, expiration)
            await self._run(self.storage.delete_segment, segment, pool=expiration)
            await self._publish(state, segment.moved_to(RemoteSegmentState.DELETE_SEGMENT_FINISHED, self.broker_id,
                                                        self._clock_ms()), expiration)
        except BaseException:
            self.metrics.mark("RemoteDeleteErrorsPerSec", state.partition.topic)
            raise
        logger.info("%s: remote segment %s (offsets %d..%d) deleted: %s", state.partition, segment.object_name,
                    segment.start_offset, segment.end_offset, reason)  # fmt: skip

    async def close(self) -> None:
        if self._background:
            await asyncio.wait(set(self._background), timeout=10)
        for pool in (self._follower_pool, self._copier_pool, self._expiration_pool):
            pool.shutdown(wait=False, cancel_futures=True)
        self.reader.close()
        for close in self._on_close:  # the S3 calls under way do not retry: the process can exit
            close()
