"""The follower bootstrap as the broker's out-of-range plug-in: the handler and its I/O.

`FollowerBootstrapPlugin` is what the node's entry point composes into a broker with
`remote.log.storage.system.enable=true` (beside the `RemoteLogManager` it reads through). Its
`handler` is the sans-IO `TieredOutOfRangeHandler`; `perform` carries out its `AuxStateWork`:

1. the partition's `RemoteLogState` must be loaded and hold a finished segment with `target - 1`
   (the remote log task reads a follower's metadata at every run; `perform` reads it at once
   while it does not, for up to `METADATA_WAIT_S`, then answers Retry with the reason);
2. the segment holding `target - 1` in the current lineage (`current_lineage_segment`);
3. its leader-epoch checkpoint and producer snapshot with ONE range GET of its `.indexes`
   object (plus its manifest's GET unless cached): at most 2 S3 GETs per partition;
4. `StartAt(segment's next offset, the epochs below it, the producer snapshot)`, which the
   fetcher manager carries out durably.

A transient S3 fault that outlasted the client's retries is Retry (the fetcher backs off and
the bootstrap starts over); a permanent one (no bucket, access denied) or a damaged object is
Fail naming the bucket and key. Each bootstrap is reported (`bootstrap_report`) until the
follower sees itself in the partition's ISR; a watcher task polls the bootstrapping partitions
every `POLL_S` while there are any.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass

from prometheus_client.registry import Collector

from quorum.broker.partition import Partition
from quorum.broker.remote_tier import IndexType, RemoteSegmentMetadata, RemoteStorage, RemoteStorageError
from quorum.broker.replica_fetcher_events import EpochStart, TopicPartition
from quorum.broker.replica_fetcher_out_of_range import Fail, Retry, StartAt, Step
from quorum.log.epoch_cache import decode_checkpoint
from quorum.log.errors import CorruptFileError
from quorum.wire.producer_snapshot import CorruptProducerSnapshotError, decode_producer_snapshot
from tiered_follower.bootstrap_report import BootstrapReports
from tiered_follower.follower_bootstrap import (
    AuxStateError,
    AuxStateWork,
    TieredOutOfRangeHandler,
    bytes_in_remote_below,
    current_lineage_segment,
    epochs_below,
)
from tiered_follower.remote_log_manager import RemoteLogManager

logger = logging.getLogger(__name__)

POLL_S = 0.1
"""How often a bootstrapping partition's log and ISR are looked at for the report."""

METADATA_WAIT_S = 5.0
"""How long `perform` keeps reading a partition's remote metadata (a broker just started, or the
leader uploaded the segment since the last read) before answering Retry."""

CRASH_STEPS = ("bootstrap-aux-state", "bootstrap-start-at", "bootstrap-fetching")
"""The test knob's steps (`remote_log_manager.CRASH_FILE`): before the S3 reads, after them before
the follower starts at the new offset, and once it has fetched from there, before the ISR."""

_AUX_KINDS = (IndexType.LEADER_EPOCH, IndexType.PRODUCER_SNAPSHOT)


def monotonic_ms() -> float:
    return time.monotonic() * 1000


@dataclass(frozen=True, slots=True)
class AuxState:
    """What the follower restores below its start offset, and the S3 GETs it took."""

    leader_epochs: tuple[EpochStart, ...]
    producer_snapshot: bytes
    s3_requests: int


def read_aux_state(storage: RemoteStorage, segment: RemoteSegmentMetadata) -> AuxState:
    """The auxiliary state at `segment`'s next offset (blocking). RemoteStorageError from S3;
    AuxStateError naming the segment when what it holds does not parse or fit."""
    fetch_indexes = getattr(storage, "fetch_indexes", None)
    if fetch_indexes is not None:
        parts, requests = fetch_indexes(segment, _AUX_KINDS)
    else:
        parts, requests = {kind: storage.fetch_index(segment, kind) for kind in _AUX_KINDS}, len(_AUX_KINDS)
    where = f"the .indexes object of remote segment {segment.object_name} of {segment.partition}"
    try:
        epochs = epochs_below(decode_checkpoint(parts[IndexType.LEADER_EPOCH], where), segment)
        snapshot = parts[IndexType.PRODUCER_SNAPSHOT]
        if snapshot:
            decode_producer_snapshot(snapshot)
    except CorruptFileError as exc:
        raise AuxStateError(str(exc)) from None
    except CorruptProducerSnapshotError as exc:
        raise AuxStateError(f"{where}: producer snapshot: {exc}") from None
    return AuxState(epochs, snapshot, requests)


def _missing(exc: RemoteStorageError) -> bool:
    """S3 said the object does not exist (NoSuchKey, 404): the segment went away since the metadata
    was read (remote retention), not a permanent fault of the store."""
    text = str(exc)
    return ": NoSuchKey:" in text or ": 404:" in text


class FollowerBootstrapPlugin:
    """`quorum.broker.replica_fetcher_out_of_range.OutOfRangePlugin` over a `RemoteLogManager`."""

    def __init__(self, broker_id: int, manager: RemoteLogManager, reports: BootstrapReports | None = None,
                 clock_ms: Callable[[], float] = monotonic_ms, metadata_wait_s: float = METADATA_WAIT_S) -> None:
        self.broker_id = broker_id
        self.handler = TieredOutOfRangeHandler()
        self.manager = manager
        self.reports = reports or BootstrapReports(broker_id)
        self._clock_ms = clock_ms
        self._metadata_wait_s = metadata_wait_s
        self._watcher: asyncio.Task[None] | None = None

    @property
    def collectors(self) -> tuple[Collector, ...]:
        """The bootstrap metrics, for the registry the node's metrics endpoint serves."""
        return self.reports.metrics.collectors

    async def perform(self, topic_partition: TopicPartition, work: object) -> Step:
        if not isinstance(work, AuxStateWork):
            return Fail(f"the follower bootstrap cannot carry out {work!r}")
        self.reports.asked(topic_partition, work.describe(), self._clock_ms())
        self.manager.metrics.mark("BuildRemoteLogAuxStateRequestsPerSec", topic_partition[0])
        step = await self._aux_state(topic_partition, work)
        if isinstance(step, Retry):
            self.reports.waits(topic_partition, step.reason)
        elif isinstance(step, Fail):
            self.manager.metrics.mark("BuildRemoteLogAuxStateErrorsPerSec", topic_partition[0])
            logger.error("follower bootstrap failed: %s", step.reason)
        return step

    async def _aux_state(self, topic_partition: TopicPartition, work: AuxStateWork) -> Step:
        topic, number = topic_partition
        partition = self.manager.hosted(topic, number)
        if partition is None:
            return Retry(f"{work.describe()}: the partition is not open on this broker yet")
        began = self._clock_ms()
        segment = await self._segment_below(partition, work)
        found = self._clock_ms()
        if isinstance(segment, str):
            return Retry(f"{work.describe()}: {segment} (waited {self._metadata_wait_s:g} s)")
        remote = partition.remote
        assert remote is not None
        self.manager.crash_point("bootstrap-aux-state")
        try:
            aux = await self.manager.run_blocking(read_aux_state, self.manager.storage, segment)
        except RemoteStorageError as exc:
            if exc.retriable or _missing(exc):
                # transient, or the segment was deleted since our metadata was read: read it again
                self.manager.wake.set()
                self.reports.retried(topic_partition, 0)
                return Retry(f"{work.describe()}: reading the auxiliary state of remote segment "
                             f"{segment.object_name}: {exc}")
            return Fail(f"{work.describe()}: reading the auxiliary state of remote segment {segment.object_name}: "
                        f"{exc}")
        except AuxStateError as exc:
            return Fail(f"{work.describe()}: {exc}")
        self.manager.crash_point("bootstrap-start-at")
        start = segment.next_offset
        self.reports.began(topic_partition, work.path, start, self._clock_ms(),
                           bytes_in_remote_below(remote.finished, start), aux.s3_requests, work.leader_log_end)
        self._watch()
        logger.info("%s: auxiliary state from remote segment %s (offsets %d..%d): leader epochs %s, producer "
                    "snapshot of %d bytes; remote metadata read in %.0f ms, auxiliary state in %.0f ms",
                    work.describe(), segment.object_name, segment.start_offset, segment.end_offset,
                    [(e.epoch, e.start_offset) for e in aux.leader_epochs], len(aux.producer_snapshot),
                    found - began, self._clock_ms() - found)  # fmt: skip
        return StartAt(start, aux.leader_epochs, aux.producer_snapshot or None)

    async def _segment_below(self, partition: Partition, work: AuxStateWork) -> RemoteSegmentMetadata | str:
        """The remote segment holding `work.target - 1`, reading the partition's remote metadata
        again (`RemoteLogManager.refresh`) up to `metadata_wait_s` while it is not loaded or lacks
        it (the leader may have uploaded it since), rather than backing off a whole
        replica.fetch.backoff.ms; the reason it is missing otherwise."""
        previous = work.target - 1
        deadline = self._clock_ms() + self._metadata_wait_s * 1000
        read_error = ""
        for attempt in itertools.count():
            remote = partition.remote
            if remote is None or not remote.loaded:
                reason = "this broker has not read the partition's remote log metadata yet"
            else:
                segment = current_lineage_segment(remote.finished, previous, work.target_epoch, work.epoch_below)
                if segment is not None:
                    return segment
                which = f"of epoch {work.epoch_below}" if work.epoch_below >= 0 else f"of epoch <= {work.target_epoch}"
                reason = (f"no finished remote segment {which} holds offset {previous} in this broker's remote "
                          f"log metadata yet")  # the leader may have uploaded it since
            if attempt > 0 and self._clock_ms() >= deadline:
                return reason + read_error
            if attempt > 0:
                await asyncio.sleep(POLL_S)
            try:
                await self.manager.refresh(partition)
                read_error = ""
            except RemoteStorageError as exc:
                read_error = f"; reading it failed: {exc}"
        raise AssertionError("unreachable")

    # -- the report's watcher -------------------------------------------------------------------

    def _watch(self) -> None:
        if self._watcher is None or self._watcher.done():
            self._watcher = asyncio.get_running_loop().create_task(self._watch_bootstraps())

    async def _watch_bootstraps(self) -> None:
        while self.reports.active:
            await asyncio.sleep(POLL_S)
            for bootstrap in self.reports.active:
                tp = bootstrap.topic_partition
                partition = self.manager.hosted(*tp)
                if partition is None:
                    self.reports.forget(tp)
                    continue
                if partition.local_log_start_offset < bootstrap.start_offset:
                    continue  # the follower has not started there (yet, or it was abandoned)
                if partition.log_end_offset > bootstrap.start_offset:
                    self.manager.crash_point("bootstrap-fetching")
                self.reports.progress(tp, partition.log.size_in_bytes, partition.log_end_offset,
                                      self.broker_id in partition.isr, self._clock_ms())
