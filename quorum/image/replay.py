"""The glue between the Raft log, the snapshot files and the metadata state machine (KIP-630).

KIP-630 leaves snapshots to "the Kafka Controller and Metadata Cache": they load the latest
snapshot when booting and each snapshot fetched from the leader ("Loading Snapshots"), apply the
committed records after it, decide when to write a new one ("When to Snapshot") and tell the Raft
layer when one is finished ("Interaction with the Kafka Controller and Metadata Cache").
`MetadataReplayer` does that for both drivers, the asyncio node and the simulator, so it is
synchronous and deterministic: nothing in it depends on time except the latency metrics (the
snapshot records are stamped with the last contained log timestamp, not the clock, so replicas
at the same offset write byte-identical snapshots).

What the driver does with it:

* at start-up, `boot()` before the Raft core is built (it cleans `.part` files, loads the
  latest snapshot and tells the log its snapshot boundary);
* on HighWatermarkAdvanced, `catch_up(high_watermark)` and then `maybe_snapshot()`; a snapshot
  id returned goes to `RaftCore.on_snapshot_created` (the log already knows its boundary);
* on InstallSnapshot, `install(snapshot_id)` (which also sets the log's boundary, truncating a
  log that is behind it, as the action asks);
* on AdvanceLogStartOffset, `log.advance_start_offset(offset)` and `snapshots.delete_below(offset)`.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Protocol

from quorum.image.metrics import NodeMetrics
from quorum.image.snapshot_policy import SnapshotPolicy
from quorum.image.state_machine import ReplayedState
from quorum.log.snapshot import SnapshotDirectory, SnapshotReader, SnapshotWriter
from quorum.raft.interface import OffsetAndEpoch
from quorum.wire.records import RecordBatch

logger = logging.getLogger(__name__)

_NO_TIMESTAMP = -1  # Kafka's RecordBatch.NO_TIMESTAMP


class ReplayError(Exception):
    """The log cannot continue the state: the records after what was applied are gone."""


class ReplayLog(Protocol):
    """What the replayer needs of a log: `quorum.log.Log` and `quorum.sim.memory_log.MemoryLog`."""

    @property
    def start_offset(self) -> int: ...

    @property
    def end_offset(self) -> int: ...

    def iter_batches(self, from_offset: int | None = None, upto: int | None = None) -> Iterator[RecordBatch]: ...

    def set_snapshot_boundary(self, snapshot_id: OffsetAndEpoch) -> bool: ...


class SnapshotJob:
    """One snapshot being written: the state captured at `snapshot_id`, written by `write()`,
    which touches only its own `.part` file and may run on another thread."""

    def __init__(self, directory: Path, snapshot_id: OffsetAndEpoch, last_contained_log_timestamp: int,
                 cluster_id: str | None, values: list[bytes], clock: Callable[[], float]) -> None:
        self.directory = directory
        self.snapshot_id = snapshot_id
        self.last_contained_log_timestamp = last_contained_log_timestamp
        self.cluster_id = cluster_id
        self.values = values
        self.size = 0
        self.elapsed_ms = 0.0
        self._clock = clock

    def __repr__(self) -> str:
        return f"SnapshotJob({self.snapshot_id}, {len(self.values)} records)"

    def write(self) -> int:
        """Write, validate and rename the file (SnapshotWriter); returns its size. On failure the
        part file is removed and the error raised."""
        started = self._clock()
        timestamp = self.last_contained_log_timestamp
        with SnapshotWriter(self.directory, self.snapshot_id, timestamp, timestamp_ms=max(timestamp, 0),
                            cluster_id=self.cluster_id) as writer:  # fmt: skip
            writer.append(self.values)
            self.size = writer.freeze()
        self.elapsed_ms = (self._clock() - started) * 1000.0
        return self.size


class MetadataReplayer:
    """Replays the committed metadata log into `state`, loading and writing KIP-630 snapshots.

    `applied_offset` is the next offset to apply: everything below it is in the state.
    """

    def __init__(
        self,
        directory: Path | str,
        log: ReplayLog,
        state: ReplayedState,
        policy: SnapshotPolicy,
        metrics: NodeMetrics | None = None,
        snapshots: SnapshotDirectory | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        """`directory` holds the snapshot files (the log's directory, as in Kafka); `snapshots`
        is the listing the Raft core reads too (one is made over `directory` when omitted);
        `clock` (seconds) times the latency metrics only."""
        self.directory = Path(directory)
        self.log = log
        self.state = state
        self.policy = policy
        self.metrics = metrics
        self.snapshots = snapshots if snapshots is not None else SnapshotDirectory(self.directory)
        self._clock = clock
        self._job: SnapshotJob | None = None
        self.cluster_id: str | None = None
        """Written into each snapshot's header (the driver sets it once the cluster id is committed);
        `boot` and `install` set it from the snapshot they load when the header has one."""
        self._applied = log.start_offset
        self._epoch: int | None = None  # of the last batch applied (or the snapshot loaded); None: nothing yet
        self._timestamp = _NO_TIMESTAMP  # max timestamp of that batch (or the snapshot's LastContainedLogTimestamp)
        self._bytes_since_snapshot = 0
        self._high_watermark: int | None = None

    def __repr__(self) -> str:
        return (f"MetadataReplayer({str(self.directory)!r}, applied_offset={self._applied}, "
                f"latest_snapshot={self.snapshots.latest_snapshot()}, "
                f"bytes_since_snapshot={self._bytes_since_snapshot})")  # fmt: skip

    @property
    def applied_offset(self) -> int:
        """The next offset to apply: the state holds every committed record below it."""
        return self._applied

    @property
    def applied_epoch(self) -> int | None:
        """The epoch of the last batch applied, or of the snapshot loaded; None before either."""
        return self._epoch

    @property
    def last_contained_timestamp(self) -> int:
        """The max timestamp of the last batch applied (or the loaded snapshot's), -1 when none."""
        return self._timestamp

    @property
    def bytes_since_snapshot(self) -> int:
        """Size of the log batches applied since the latest snapshot was written or loaded."""
        return self._bytes_since_snapshot

    # -- loading ---------------------------------------------------------------------------------

    def boot(self) -> OffsetAndEpoch | None:
        """Start-up: remove the `.part` files a crash left, load the latest snapshot into the state
        and tell the log its snapshot boundary; returns that snapshot's id, None without one.

        The snapshot is read and validated whole before the state changes, so a corrupt one raises
        CorruptSnapshotError (naming the file and byte) and is never half-loaded; nothing falls
        back to an older snapshot, whose log records may be gone. Without a snapshot, replay
        starts at the log start offset.
        """
        self.snapshots.clean_partial()
        latest = self.snapshots.latest_snapshot()
        if latest is None:
            start = self.log.start_offset
            if start > 0:
                logger.warning("%s: no snapshot, but the log starts at %d: the records below it are missing "
                               "from the state", self.directory, start)  # fmt: skip
            self._applied = start
            self._epoch = None
            self._timestamp = _NO_TIMESTAMP
            self._bytes_since_snapshot = 0
            return None
        self._load(latest)
        logger.info("%s: booted from snapshot %s (%d records)", self.directory, latest, len(self.state))
        return latest

    def install(self, snapshot_id: OffsetAndEpoch) -> None:
        """Load a snapshot fetched from the leader (InstallSnapshot), replacing the state: the log
        is told its new boundary (a log behind the snapshot restarts at its end offset) and
        replay goes on from the snapshot's end offset."""
        self.snapshots.refresh()
        if snapshot_id.offset < self._applied:
            logger.info("%s: installing snapshot %s below the applied offset %d: the state goes back to it",
                        self.directory, snapshot_id, self._applied)  # fmt: skip
        self._load(snapshot_id)
        logger.info("%s: installed snapshot %s (%d records)", self.directory, snapshot_id, len(self.state))

    def _load(self, snapshot_id: OffsetAndEpoch) -> None:
        started = self._clock()
        with SnapshotReader.open(self.directory, snapshot_id) as reader:
            values = reader.values()  # all of it, checked, before anything changes
            timestamp = reader.last_contained_log_timestamp
            size = reader.size
            if reader.cluster_id is not None:
                self.cluster_id = reader.cluster_id
        self.log.set_snapshot_boundary(snapshot_id)
        # KIP-630 "When to Delete Snapshots": a log that restarted at this snapshot leaves the older
        # ones below its start; kept, they would make the oldest snapshot disagree with the log start.
        self.snapshots.delete_below(self.log.start_offset)
        self.state.load(values)
        self._applied = snapshot_id.offset
        self._epoch = snapshot_id.epoch
        self._timestamp = timestamp
        self._bytes_since_snapshot = 0
        if self.metrics is not None:
            self.metrics.observe_load_latency((self._clock() - started) * 1000.0)
            self.metrics.set_snapshot_size(self._latest_size(default=size))
        self._update_lag()

    # -- replaying -------------------------------------------------------------------------------

    def catch_up(self, high_watermark: int) -> int:
        """Apply the data records of every whole batch below `high_watermark` from `applied_offset`;
        returns how many records were applied, and updates SnapshotLag.

        Control batches (LeaderChange, ...) hold no state but advance the offset like any batch,
        and their epoch and timestamp count as the last applied batch's: a snapshot's id must
        carry the epoch of the log at its end offset. A record without a value holds no state
        either and is skipped. Raises ReplayError when the log starts above `applied_offset`
        (a snapshot must be installed first).
        """
        applied = self._applied
        count = 0
        if high_watermark > applied:
            if applied < self.log.start_offset:
                raise ReplayError(f"{self.directory}: the state is applied up to offset {applied}, but the log starts "
                                  f"at {self.log.start_offset}: the records in between are gone")  # fmt: skip
            state = self.state
            try:
                with state.replaying():  # readers on other threads see whole catch-ups only (issue 21)
                    for batch in self.log.iter_batches(applied, high_watermark):
                        next_offset = batch.next_offset
                        if next_offset > high_watermark:  # a batch is applied whole or not at all
                            break
                        if not batch.is_control:
                            for record in batch.records():
                                value = record.value
                                if value is not None and record.offset >= applied:
                                    state.apply(record.offset, value)
                                    count += 1
                        applied = next_offset
                        self._epoch = batch.partition_leader_epoch
                        self._timestamp = batch.max_timestamp
                        self._bytes_since_snapshot += batch.size_in_bytes
            finally:
                # Moved once readers can see the image that holds it: a broker's heartbeat reports it,
                # and the controller unfences the broker on it (so its first image is not a stale one).
                self._applied = applied
        self.update_lag(high_watermark)
        return count

    # -- writing snapshots -----------------------------------------------------------------------

    def maybe_snapshot(self) -> OffsetAndEpoch | None:
        """Write a snapshot at `applied_offset` when the policy says so (KIP-630 "When to Snapshot")
        and it would be newer than the latest one; returns its id for `RaftCore.on_snapshot_created`."""
        if not self._can_snapshot():
            return None
        if not self.policy.should_snapshot(self.state.changed_records, self.state.records_in_snapshot,
                                           self._bytes_since_snapshot):  # fmt: skip
            return None
        return self._write_snapshot()

    def snapshot_now(self) -> OffsetAndEpoch | None:
        """Write a snapshot at `applied_offset` whatever the policy says (tools, tests); None when
        it would not be newer than the latest snapshot (or nothing was applied yet)."""
        return self._write_snapshot() if self._can_snapshot() else None

    @property
    def snapshot_due(self) -> bool:
        """The policy says a snapshot should be taken now, and one could be (newer than the latest,
        none being written): what a replica reports to the active controller (KIP-631)."""
        return self._can_snapshot() and self.policy.should_snapshot(
            self.state.changed_records, self.state.records_in_snapshot, self._bytes_since_snapshot)

    @property
    def snapshot_in_progress(self) -> bool:
        """A snapshot job was begun and is not finished or abandoned yet."""
        return self._job is not None

    def begin_snapshot(self) -> SnapshotJob | None:
        """`maybe_snapshot` in two steps, for a driver that must not stop while the file is written
        (a node's core answers heartbeats meanwhile): when the policy says so, capture the state
        now and return the job; `job.write()` may then run on another thread while replay goes on,
        and `finish_snapshot(job)` records it. One job at a time."""
        return self._capture() if self.snapshot_due else None

    def finish_snapshot(self, job: SnapshotJob) -> OffsetAndEpoch:
        """The job's file is complete: it is the latest snapshot now (listing, log boundary, metrics)."""
        self._job = None
        self.snapshots.refresh()
        if self.snapshots.latest_snapshot() == job.snapshot_id:  # not overtaken by a fetched one meanwhile
            self.log.set_snapshot_boundary(job.snapshot_id)
        if self.metrics is not None:
            self.metrics.observe_gen_latency(job.elapsed_ms)
            self.metrics.set_snapshot_size(job.size)
        self._update_lag()
        logger.info("%s: snapshot %s written, %d records, %d bytes in %.0f ms", self.directory, job.snapshot_id,
                    len(job.values), job.size, job.elapsed_ms)  # fmt: skip
        return job.snapshot_id

    def abandon_snapshot(self, job: SnapshotJob) -> None:
        """The job failed (its writer removed the part file): a later one may try again."""
        self._job = None

    def _can_snapshot(self) -> bool:
        if self._epoch is None or self._job is not None:
            return False
        latest = self.snapshots.latest_snapshot()
        return self._applied > (latest.offset if latest is not None else 0)

    def _capture(self) -> SnapshotJob:
        assert self._epoch is not None
        job = SnapshotJob(self.directory, OffsetAndEpoch(self._applied, self._epoch), self._timestamp,
                          self.cluster_id, self.state.snapshot_values(), self._clock)
        self.state.mark_snapshot()  # what changes from here on counts against the new snapshot
        self._bytes_since_snapshot = 0
        self._job = job
        return job

    def _write_snapshot(self) -> OffsetAndEpoch:
        job = self._capture()
        try:
            job.write()
        except BaseException:
            self.abandon_snapshot(job)
            raise
        return self.finish_snapshot(job)

    # -- metrics ---------------------------------------------------------------------------------

    def update_lag(self, high_watermark: int) -> None:
        """SnapshotLag: the offsets between the latest snapshot (or, without one, the log start)
        and `high_watermark`, which is remembered for the updates after a snapshot or a load."""
        self._high_watermark = high_watermark
        self._update_lag()

    def _update_lag(self) -> None:
        if self.metrics is None or self._high_watermark is None:
            return
        latest = self.snapshots.latest_snapshot()
        base = latest.offset if latest is not None else self.log.start_offset
        self.metrics.set_snapshot_lag(max(self._high_watermark - base, 0))

    def _latest_size(self, default: int) -> int:
        latest = self.snapshots.latest_snapshot()
        size = None if latest is None else self.snapshots.snapshot_size(latest)
        return default if size is None else size
