"""The durable segmented log the Raft metadata log and the brokers' partition logs share.

A directory of Kafka-named segments (`00000000000000000000.log` + `.index`, rolled at
`segment_bytes`) and a `leader-epoch-checkpoint`. `Log` implements the read side the Raft core
consults (`quorum.raft.interface.RaftLog`) and the writes its driver performs for
AppendBatches and Truncate.

Partition logs (`quorum.broker.partition`) open it with `time_index=True`: each segment then
keeps a Kafka `.timeindex` too (`quorum.log.time_index`), which answers `offset_for_timestamp`
and gives each segment's largest timestamp for time-based retention (`delete_old_segments`,
which deletes whole segments from the oldest and advances the log start offset, never touching
the active segment); `roll_ms` rolls a segment once its first batch is that old (`log.roll.ms`).

Snapshots (KIP-630) let a log start above offset 0. `advance_start_offset` moves the start up to
a snapshot's end offset (whole segments below it are deleted; the start offset itself is
written to `log-start-offset`, see `quorum.log.start_offset`), and `truncate_fully_and_start_at`
replaces the whole log by an empty one starting at a fetched snapshot's end offset. The log is
told its latest snapshot (`set_snapshot_boundary`, as Kafka's KafkaMetadataLog knows its
snapshot ids), so that an empty log answers `last_fetched_epoch` and `end_offset_for_epoch`
with the snapshot's epoch. The snapshot files themselves are `quorum.log.snapshot`'s.

A partition follower that starts from a remote tier (KIP-405, KIP-1023) replaces its log by an
empty one at offset O with the leader's history below O instead (`start_empty_at`): its
leader-epoch cache keeps entries below its start offset (logs opened with
`keep_epochs_below_start`), and the producer snapshot at O is written beside the segments. A
`log-start-intent` file is its commit point (`quorum.log.start_intent`).

Durability (design principle 4, "acknowledged means durable"):

* `append` writes to the page cache only; `flush` fsyncs and only then advances
  `flushed_offset`, the one figure a node may acknowledge.
* A segment is fsynced (data and index) before its successor is created, so after a crash only
  the last segment can hold a torn write. (With `roll_sync_in_background` a full segment takes
  appends past `segment_bytes` while a background thread fsyncs it, and rolls after.) Recovery
  (`quorum.log.recovery`) CRC-scans the last segment and truncates at the first bad batch,
  logging the file and byte; damage anywhere before that is refused, naming the file and byte,
  because it would be committed data. With `verify_all_segments` (the default) every segment is
  CRC-scanned at open; without it the earlier segments only get their framing and
  index checked, which keeps the open of a large partition log fast.
* `truncate_to` is durable when it returns: the cut is fsynced, removed segments are removed
  from the directory durably, and the epoch checkpoint is rewritten. So are
  `advance_start_offset` and `truncate_fully_and_start_at`, which record the new start offset
  before deleting anything, so that recovery can finish what a crash interrupted.

Threads: one writer (append, flush, truncate_to) and any number of readers. Reads of written
data never wait for an fsync: `flush` holds the state lock only to note what it is about to
make durable, not while the disk works, so the fetches of followers and consumers go on while
the leader's fsync is in flight.
"""

from __future__ import annotations

import bisect
import logging
import os
import threading
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from quorum.log.atomic import fsync_directory
from quorum.log.epoch_cache import (
    CHECKPOINT_NAME,
    EpochEntry,
    LeaderEpochCache,
    write_checkpoint,
)
from quorum.log.errors import (
    CorruptLogError,
    InvalidAppendError,
    InvalidOffsetError,
    LogError,
    OffsetOutOfRangeError,
)
from quorum.log.index import DEFAULT_INDEX_INTERVAL_BYTES
from quorum.log.records_span import open_span
from quorum.log.recovery import recover_log
from quorum.log.segment import DEFAULT_SEGMENT_BYTES, LogSegment
from quorum.log.start_intent import (
    StartIntent,
    delete_producer_snapshots,
    read_start_intent,
    remove_start_intent,
    write_producer_snapshot,
    write_start_intent,
)
from quorum.log.start_offset import START_OFFSET_NAME, write_start_offset
from quorum.log.validation import batch_fault
from quorum.raft.interface import OffsetAndEpoch
from quorum.wire.records import CorruptRecordError, RecordBatch
from quorum.wire.records import iter_batches as walk_batches
from quorum.wire.spliced import FileRecords

logger = logging.getLogger(__name__)

_ROLL_SYNC = ThreadPoolExecutor(max_workers=1, thread_name_prefix="segment-roll-fsync")
"""The background fsyncs of full segments (`roll_sync_in_background`), one at a time per process."""

_INT32_MAX = 2**31 - 1
BACKGROUND_SYNC_MIN_BYTES = 1 << 20
"""A due segment smaller than this is fsynced and rolled at once, on the caller's thread: it costs
milliseconds, and a time-based roll (`segment.ms`) of a small segment then happens when it is due,
as in Kafka, instead of waiting for a background fsync under load."""
ROLL_UNSYNCED_BYTES = 4 << 20
"""A segment synced in the background rolls once what was appended during its last background fsync is
below this: the roll fsyncs that on the caller's thread (the event loop), a few milliseconds. More
came meanwhile (a fast producer: ~400 MB during a GiB segment's 0.84 s fsync here, whose fsync at the
roll then stopped the loop for 0.18 s), and another background fsync takes it first."""
MAX_BACKGROUND_SYNCS = 4
"""Background fsyncs of one segment at most before it rolls anyway: appends that outrun the disk
would otherwise grow it without end (each fsync takes what came during the one before)."""
#: Bytes read at a time by `Log.iter_batches`.
_ITER_CHUNK = 1 << 20
_UNDEFINED = OffsetAndEpoch(-1, -1)


@dataclass(frozen=True, slots=True)
class SegmentFiles:
    """A rolled segment's offsets, size, largest timestamp (-1 when none) and files."""

    base_offset: int
    next_offset: int
    size: int
    max_timestamp: int
    log_path: Path
    index_path: Path
    time_index_path: Path | None


class Log:
    """A segmented log of record batch v2 files; see the module docstring for the guarantees."""

    def __init__(
        self,
        directory: Path | str,
        segment_bytes: int = DEFAULT_SEGMENT_BYTES,
        index_interval_bytes: int = DEFAULT_INDEX_INTERVAL_BYTES,
        verify_all_segments: bool = True,
        time_index: bool = False,
        roll_ms: int | None = None,
        keep_epochs_below_start: bool = False,
        roll_sync_in_background: bool = False,
    ) -> None:
        """Open the log in `directory`, creating it if needed, and recover it.

        `time_index` keeps a `.timeindex` per segment (partition logs); `roll_ms` rolls the active
        segment when an append's largest timestamp is that far past the segment's first batch's.
        `keep_epochs_below_start` (partition logs) keeps leader-epoch entries below the log start
        offset at recovery, as `start_empty_at` leaves them (Kafka keeps its cache down to the
        whole log's start, remote tier included); the Raft log keeps only epochs it holds records of.
        `roll_sync_in_background` (partition logs of large segments): a full segment is fsynced
        by a background thread while appends go on into it, and the log rolls at the first append
        after that fsync (see `append`), instead of the append that fills it waiting for the fsync.

        Raises CorruptLogError when a segment other than the last is damaged or the segments do
        not follow on from each other.
        """
        if not 1 <= segment_bytes <= _INT32_MAX:
            raise ValueError(f"segment_bytes must be 1..{_INT32_MAX} (positions are int32), not {segment_bytes}")
        if index_interval_bytes < 0:
            raise ValueError(f"index_interval_bytes must not be negative, not {index_interval_bytes}")
        if roll_ms is not None and roll_ms < 1:
            raise ValueError(f"roll_ms must be positive, not {roll_ms}")
        self.directory = Path(directory)
        self.segment_bytes = segment_bytes
        self.index_interval_bytes = index_interval_bytes
        self.verify_all_segments = verify_all_segments
        self.time_index = time_index
        self.roll_ms = roll_ms
        self.keep_epochs_below_start = keep_epochs_below_start
        self.roll_sync_in_background = roll_sync_in_background
        self._lock = threading.Lock()  # the segment list, offsets, epochs; never held across an fsync by flush
        self._flush_lock = threading.Lock()  # one flush at a time; truncate_to and close wait for it
        self._segments: list[LogSegment] = []
        self._bases: list[int] = []
        self._start = 0  # the log start offset: at or above the first segment's base offset
        self._snapshot: OffsetAndEpoch | None = None  # the latest snapshot, as the owner told us
        self._cache = LeaderEpochCache()
        self._checkpointed: tuple[EpochEntry, ...] = ()
        self._last_epoch = -1  # epoch of the last batch, -1 when none
        self._flushed = 0
        self._rolls = 0  # segments created; the directory is fsynced up to `_rolls_synced`
        self._rolls_synced = 0
        self._failed: BaseException | None = None
        self.on_failure: Callable[[Path, BaseException], None] | None = None
        """Told once, from the thread that failed, when the log starts refusing writes (a broker stops
        on it: its log dir failed)."""
        self._closed = False
        self._open()

    def _open(self) -> None:
        """Recover the directory (`quorum.log.recovery`), then finish a `start_empty_at` that a
        crash interrupted: its intent file is still there."""
        recovered = recover_log(self.directory, self.index_interval_bytes, self.verify_all_segments,
                                self.time_index, self.keep_epochs_below_start)  # fmt: skip
        self._segments = recovered.segments
        self._bases = [segment.base_offset for segment in self._segments]
        self._start = recovered.start_offset
        self._last_epoch = recovered.last_epoch
        self._cache = recovered.epochs
        self._checkpointed = recovered.epochs.entries
        try:
            intent = read_start_intent(self.directory)
            if intent is not None:
                logger.warning("%s: finishing the start at offset %d that a crash interrupted", self.directory,
                               intent.offset)  # fmt: skip
                self._carry_out_start(intent)
        except BaseException:
            for segment in self._segments:
                segment.close()
            raise
        self._flushed = self.end_offset

    def __repr__(self) -> str:
        return (
            f"Log({str(self.directory)!r}, start_offset={self.start_offset}, end_offset={self.end_offset}, "
            f"flushed_offset={self._flushed}, segments={len(self._segments)})"
        )

    @property
    def closed(self) -> bool:
        """Closed (`close`): the log refuses everything, as a partition that was removed."""
        return self._closed

    def __enter__(self) -> Log:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    # -- the RaftLog protocol ----------------------------------------------------------------

    @property
    def start_offset(self) -> int:
        """The first offset the log serves: the first segment's base offset, or higher after
        `advance_start_offset` (the segment holding it may still hold records below it)."""
        return self._start

    @property
    def end_offset(self) -> int:
        """The next offset to be written."""
        return self._segments[-1].next_offset

    @property
    def flushed_offset(self) -> int:
        """Everything below this offset is on disk (fsynced)."""
        return self._flushed

    def last_fetched_epoch(self) -> int:
        """Epoch of the last batch; when the log is empty above the latest snapshot, the
        snapshot's epoch (KIP-630); otherwise 0 when no batch is stamped with an epoch."""
        with self._lock:
            latest = self._cache.latest_epoch
            if latest >= 0:
                return latest
            snapshot = self._snapshot
            if snapshot is not None and snapshot.offset == self.end_offset:
                return snapshot.epoch
            return 0

    def end_offset_for_epoch(self, epoch: int) -> OffsetAndEpoch:
        """The largest epoch <= `epoch` and its end offset; (-1, -1) below every epoch.

        The latest snapshot counts as the log's first epoch when the log holds no earlier one:
        its epoch ends at its end offset (Kafka's KafkaMetadataLog answers the same), and an
        empty log above it ends there in the snapshot's epoch.
        """
        with self._lock:
            end = self.end_offset
            snapshot = self._snapshot
            if not len(self._cache):
                if snapshot is None:
                    return self._cache.end_offset_for(epoch, end)
                return OffsetAndEpoch(end, snapshot.epoch) if epoch >= snapshot.epoch >= 0 else _UNDEFINED
            found = self._cache.end_offset_for(epoch, end)
            if found == _UNDEFINED and snapshot is not None and 0 <= snapshot.epoch <= epoch:
                return snapshot
            return found

    def read(self, offset: int, max_bytes: int, upto: int | None = None) -> bytes:
        """Whole batches from the one holding `offset`, within one segment as Kafka reads.

        At most `max_bytes`, but always the first batch whole however large (as Kafka's fetch
        does, so a consumer is never stuck behind a big batch). With `upto`, only batches that
        start below it (a high watermark). b"" at the end of the log; OffsetOutOfRangeError
        (an InvalidOffsetError) outside it, naming the start offset for a read below it.
        """
        with self._lock:
            segment = self._segment_to_read(offset, upto)
            if segment is None:
                return b""
            position, first = segment.find(offset)
            length = min(max(max_bytes, first.size_in_bytes), segment.size - position)
            data = segment.read(position, length)
        walker = walk_batches(data)
        keep = 0
        for batch in walker:
            if upto is not None and batch.base_offset >= upto:
                break
            keep = walker.position
        return data if keep == len(data) else data[:keep]

    def read_records(self, offset: int, max_bytes: int, upto: int | None = None) -> bytes | FileRecords:
        """What `read` returns, as a span of the segment file that is not read (`FileRecords`,
        which the caller closes, or b"" when empty): for answers written with sendfile."""
        with self._lock:
            segment = self._segment_to_read(offset, upto)
            span = None if segment is None else open_span(segment, offset, max_bytes, upto)
        return b"" if span is None else span

    def _segment_to_read(self, offset: int, upto: int | None) -> LogSegment | None:
        """The segment holding `offset`, None when nothing is to be read there (the log end, or
        at or past `upto`); OffsetOutOfRangeError outside the log. Called with the lock held."""
        self._check_open()
        end = self.end_offset
        if not self._start <= offset <= end:
            raise OffsetOutOfRangeError(offset, self._start, end, self.directory)
        if offset == end or (upto is not None and offset >= upto):
            return None
        return self._segments[bisect.bisect_right(self._bases, offset) - 1]

    # -- writing -----------------------------------------------------------------------------

    def append(self, batches: bytes | bytearray | memoryview, crc_checked: bool = False) -> int:
        """Append whole v2 batches that continue the log; returns the new end offset.

        Every batch is checked first (v2, CRC, base offsets contiguous from `end_offset`, leader
        epochs not decreasing); if any fails, InvalidAppendError names the batch and the reason
        and nothing is written. The data is durable only after `flush`. `crc_checked`: the caller
        has verified every batch's CRC (the leader's produce path), so it is not computed again.
        """
        view = memoryview(batches).cast("B")
        size = len(view)
        with self._lock:
            self._check_writable()
            if size == 0:
                return self.end_offset
            expected = self.end_offset
            epoch = self._last_epoch
            parsed: list[RecordBatch] = []
            try:
                for number, batch in enumerate(walk_batches(view, strict=True)):
                    fault = batch_fault(batch, expected, epoch, check_crc=not crc_checked)
                    if fault is not None:
                        raise InvalidAppendError(
                            f"batch {number} (byte {batch.position} of the append, base offset "
                            f"{batch.base_offset}): {fault}; nothing was appended to {self.directory}"
                        )
                    parsed.append(batch)
                    expected = batch.next_offset
                    epoch = batch.partition_leader_epoch
            except CorruptRecordError as exc:
                raise InvalidAppendError(f"not a sequence of whole v2 batches: {exc}; nothing was appended") from None
            first, last = parsed[0].base_offset, expected - 1
            if size > _INT32_MAX or last - first > _INT32_MAX:
                raise InvalidAppendError(
                    f"an append of {size} bytes and {last - first + 1} offsets does not fit one segment; "
                    "nothing was appended"
                )
            segment = self._segments[-1]
            if segment.size > 0 and (
                segment.size + size > self.segment_bytes
                or last - segment.base_offset > _INT32_MAX
                or self._roll_time_reached(segment, parsed)
            ) and not self._synced_in_background(segment, size, last):
                try:
                    segment = self._roll(first)
                except OSError as exc:  # the old segment's fsync may have failed: see flush
                    self._fail(exc)
                    raise
            segment.append(view, parsed)
            for batch in parsed:
                self._cache.assign(batch.partition_leader_epoch, batch.base_offset)
            self._last_epoch = epoch
            return expected

    def flush(self) -> int:
        """fsync what was appended (and the directory after a roll); returns `flushed_offset`.

        Appends and reads go on while the disk works. A failed fsync is final: the kernel may
        have dropped the pages it could not write, so the log refuses writes from then on and
        must be reopened (which recovers it from what is really on disk).
        """
        with self._flush_lock:
            with self._lock:
                self._check_writable()
                target = self.end_offset
                segment = self._segments[-1]
                rolls = self._rolls
                entries = self._cache.entries
                if target == self._flushed and rolls == self._rolls_synced and entries == self._checkpointed:
                    return target
            try:
                segment.flush()
                if rolls != self._rolls_synced:
                    fsync_directory(self.directory)
                if entries != self._checkpointed:
                    write_checkpoint(self.directory / CHECKPOINT_NAME, entries)
            except BaseException as exc:
                self._fail(exc)
                raise
            with self._lock:
                self._rolls_synced = rolls
                self._checkpointed = entries
                self._flushed = max(self._flushed, target)
                return self._flushed

    def truncate_to(self, offset: int) -> None:
        """Remove every batch at and after `offset`, which must start a batch; durable on return."""
        with self._flush_lock, self._lock:
            self._check_writable()
            end = self.end_offset
            if offset == end:
                return
            if not self.start_offset <= offset < end:
                raise InvalidOffsetError(
                    f"cannot truncate to {offset}: outside the log [{self.start_offset}, {end}] in {self.directory}"
                )
            if self._snapshot is not None and offset < self._snapshot.offset:
                raise InvalidOffsetError(
                    f"cannot truncate to {offset}: below the end offset of the latest snapshot "
                    f"{self._snapshot}, which holds committed records, in {self.directory}"
                )
            number = bisect.bisect_right(self._bases, offset) - 1
            segment = self._segments[number]
            position = 0
            if offset != segment.base_offset:
                position, header = segment.find(offset)
                if header.base_offset != offset:
                    raise InvalidOffsetError(
                        f"cannot truncate to {offset}: it is inside the batch of offsets "
                        f"{header.base_offset}..{header.last_offset} (truncation needs a batch boundary)"
                    )
            try:
                later = self._segments[number + 1 :]
                for removed in reversed(later):  # last first: a crash half-way leaves a prefix of the log
                    removed.delete()
                del self._segments[number + 1 :]
                del self._bases[number + 1 :]
                segment.truncate_to(position, offset)
                if later or self._rolls != self._rolls_synced:
                    fsync_directory(self.directory)
                    self._rolls_synced = self._rolls
                self._cache.truncate_from_end(offset)
                write_checkpoint(self.directory / CHECKPOINT_NAME, self._cache.entries)
                self._checkpointed = self._cache.entries
            except BaseException as exc:
                self._fail(exc)
                raise
            self._last_epoch = self._cache.epoch_for_offset(offset - 1)
            self._flushed = min(self._flushed, offset)
            logger.info("%s: truncated to offset %d (was %d)", self.directory, offset, end)

    # -- the log start offset and snapshots (KIP-630) ------------------------------------------

    @property
    def snapshot_boundary(self) -> OffsetAndEpoch | None:
        """The latest snapshot's id as last given to `set_snapshot_boundary`, None before."""
        return self._snapshot

    def set_snapshot_boundary(self, snapshot_id: OffsetAndEpoch) -> bool:
        """Tell the log its latest snapshot (at start-up, and after each snapshot is frozen or
        fetched). Returns True when that snapshot is ahead of the log, in which case the log was
        truncated fully to start at the snapshot's end offset, durably.

        "Ahead" is Kafka's rule (KafkaMetadataLog.truncateToLatestSnapshot): the snapshot's epoch
        is above the log's last epoch, or the same epoch with an end offset past the log's end.
        A log that still holds older epochs than the snapshot beyond its end offset has diverged
        from the leader that made the snapshot, so it goes too; a log that is already empty at
        the snapshot's end offset stays. This is also how start-up finishes for a follower that
        crashed between fetching a snapshot and truncating its log.

        Raises InvalidOffsetError when the snapshot ends below the log start offset: the records
        between them are in neither, so the log cannot be made whole from it.
        """
        if snapshot_id.offset < 0 or snapshot_id.epoch < 0:
            raise ValueError(f"invalid snapshot id {snapshot_id}")
        with self._lock:
            self._check_open()
            if snapshot_id.offset < self._start:
                raise InvalidOffsetError(
                    f"the latest snapshot {snapshot_id} ends below the log start offset {self._start} in "
                    f"{self.directory}: the records in between are lost"
                )
            self._snapshot = snapshot_id
            latest = max(self._cache.latest_epoch, 0)
            empty_there = self._start == self.end_offset == snapshot_id.offset  # e.g. truncated fully before
            ahead = not empty_there and (
                snapshot_id.epoch > latest or (snapshot_id.epoch == latest and snapshot_id.offset > self.end_offset)
            )
            log_end = OffsetAndEpoch(self.end_offset, latest)
        if not ahead:
            return False
        self.truncate_fully_and_start_at(snapshot_id.offset, snapshot_id.epoch)
        logger.info("%s: the log (end %s) was behind snapshot %s: it now starts at %d",
                    self.directory, log_end, snapshot_id, snapshot_id.offset)  # fmt: skip
        return True

    def advance_start_offset(self, offset: int) -> bool:
        """Make `offset` the log start offset, deleting the segments wholly below it; durable on
        return. Returns False when the log already starts at or above `offset`.

        For the Raft log `offset` is a snapshot's end offset (KIP-630 never lets the start pass
        the latest snapshot); the log does not check that, so that partition logs can use it
        for retention too. Unflushed records below `offset` are flushed first: a start offset
        must never be durable ahead of the records it follows. The segment holding `offset`
        stays, so reads from the start offset return that segment's batch holding it whole,
        as Kafka's do.

        The leader-epoch cache forgets epochs that end below `offset` and moves the start of the
        one spanning it up to `offset`, as Kafka's does; unlike Kafka's, it keeps no entry when
        no record is left at or above `offset` (start == end), because such an entry would
        describe records the log no longer serves, and recovery, which rebuilds the cache from
        the records, could not agree with it. An empty log above a snapshot gets its epoch from
        the snapshot boundary instead (`last_fetched_epoch`), as KIP-630 specifies.
        """
        if offset > self.flushed_offset:
            self.flush()
        with self._flush_lock, self._lock:
            self._check_writable()
            if offset <= self._start:
                return False
            end = self.end_offset
            if offset > end:
                raise InvalidOffsetError(
                    f"cannot start the log at {offset}: past its end offset {end} in {self.directory} "
                    "(truncate_fully_and_start_at replaces the log)"
                )
            if offset > self._flushed:
                raise LogError(f"records below {offset} were appended during the flush that preceded advancing to it")
            keep = bisect.bisect_right(self._bases, offset) - 1
            try:
                write_start_offset(self.directory / START_OFFSET_NAME, offset)
                self._start = offset
                removed = self._segments[:keep]
                for segment in removed:
                    segment.delete()
                del self._segments[:keep]
                del self._bases[:keep]
                if removed:
                    fsync_directory(self.directory)
                if all(segment.size == 0 for segment in self._segments):
                    self._last_epoch = -1  # no batch is left: as a reopen would find it
                moved = self._cache.truncate_from_start(offset)
                if self._cache.truncate_from_end(end) or moved:
                    write_checkpoint(self.directory / CHECKPOINT_NAME, self._cache.entries)
                    self._checkpointed = self._cache.entries
            except BaseException as exc:
                self._fail(exc)
                raise
            logger.info("%s: log start offset advanced to %d, %d segment(s) deleted", self.directory, offset, keep)
            return True

    def truncate_fully_and_start_at(self, offset: int, epoch: int) -> None:
        """Replace the whole log by an empty one starting at `offset`; durable on return.

        For a follower that fetched a snapshot `(offset, epoch)` beyond its log (KIP-630: "the
        replica must set the LogStartOffset and LEO to O1"): every segment is deleted, the epoch
        cache is emptied, and the snapshot becomes the boundary, so that `last_fetched_epoch`
        answers `epoch` until records arrive. The start offset is recorded first, so a crash
        part-way leaves a log that recovery opens at `offset`, and the snapshot (renamed before
        this is called) makes `set_snapshot_boundary` at start-up finish the job.
        """
        if offset < 0 or epoch < 0:
            raise ValueError(f"invalid start ({offset}, {epoch})")
        with self._flush_lock, self._lock:
            self._check_writable()
            old_end = self.end_offset
            try:
                write_start_offset(self.directory / START_OFFSET_NAME, offset)
                for segment in reversed(self._segments):  # last first: a crash leaves a prefix
                    segment.delete()
                self._segments.clear()
                self._bases.clear()
                fsync_directory(self.directory)
                self._start_empty_segment(offset)
                self._cache = LeaderEpochCache()
                write_checkpoint(self.directory / CHECKPOINT_NAME, ())
                self._checkpointed = ()
            except BaseException as exc:
                self._fail(exc)
                raise
            self._start = offset
            self._last_epoch = -1
            self._flushed = offset
            self._snapshot = OffsetAndEpoch(offset, epoch)
            logger.info("%s: truncated fully (the log ended at %d); it now starts at %d in epoch %d",
                        self.directory, old_end, offset, epoch)  # fmt: skip

    def start_empty_at(self, offset: int, epochs: tuple[EpochEntry, ...] = (),
                       producer_snapshot: bytes | None = None) -> None:
        """Replace the whole log by an empty one at `offset` with a history below it; durable on return.

        For a partition follower that starts from a remote tier (KIP-405, KIP-1023), or at the
        leader's log start (Kafka's truncateFullyAndStartAt): every segment and producer snapshot
        is deleted, the leader-epoch cache holds `epochs` (entries below `offset`, the leader's
        history, so divergence checks and OffsetForLeaderEpoch answers go on working), and
        `producer_snapshot` (the producer state at `offset`) is written as `<offset>.snapshot`.
        Crash-safe: `log-start-intent` (`quorum.log.start_intent`) is written first and removed
        last, and an open that finds it does the work again, so a crash leaves the old log or the
        new one. Raises ValueError for entries that are not strictly increasing below `offset`.
        Unlike `truncate_fully_and_start_at` (the Raft log) no snapshot boundary is set.
        """
        intent = StartIntent(offset, tuple(epochs), producer_snapshot)
        with self._flush_lock, self._lock:
            self._check_writable()
            old = (self._start, self.end_offset)
            try:
                write_start_intent(self.directory, intent)
                self._carry_out_start(intent)
            except BaseException as exc:
                self._fail(exc)
                raise
        logger.info("%s: replaced the log [%d, %d) by an empty one at %d with leader epochs %s",
                    self.directory, *old, offset, [(e.epoch, e.start_offset) for e in intent.epochs])  # fmt: skip

    def _carry_out_start(self, intent: StartIntent) -> None:
        """The work of `start_empty_at`, from any point a crash interrupted it at (idempotent)."""
        for segment in reversed(self._segments):
            segment.delete()
        self._segments.clear()
        self._bases.clear()
        fsync_directory(self.directory)
        write_start_offset(self.directory / START_OFFSET_NAME, intent.offset)
        self._start = intent.offset
        self._start_empty_segment(intent.offset)
        self._cache = LeaderEpochCache(intent.epochs)
        write_checkpoint(self.directory / CHECKPOINT_NAME, intent.epochs)
        self._checkpointed = intent.epochs
        delete_producer_snapshots(self.directory, intent.offset if intent.producer_snapshot is not None else None)
        if intent.producer_snapshot is not None:
            write_producer_snapshot(self.directory, intent.offset, intent.producer_snapshot)
        remove_start_intent(self.directory)
        self._last_epoch = -1
        self._flushed = intent.offset
        self._snapshot = None

    def close(self) -> None:
        """Flush and close; a closed log refuses everything."""
        with self._flush_lock, self._lock:
            if self._closed:
                return
            try:
                if self._failed is None:
                    self._segments[-1].flush_all()
                    if self._rolls != self._rolls_synced:
                        fsync_directory(self.directory)
                    if self._cache.entries != self._checkpointed:
                        write_checkpoint(self.directory / CHECKPOINT_NAME, self._cache.entries)
                    self._flushed = self.end_offset
            finally:
                self._closed = True
                for segment in self._segments:
                    segment.close()

    # -- partition logs: timestamps and retention ---------------------------------------------

    @property
    def size_in_bytes(self) -> int:
        """Bytes in all segments (what `retention.bytes` limits)."""
        with self._lock:
            return sum(segment.size for segment in self._segments)

    def offset_for_timestamp(self, timestamp: int) -> tuple[int, int] | None:
        """(timestamp, offset) of the first record at or above the log start offset whose timestamp
        is >= `timestamp`; None when every record is older. Needs `time_index`.

        As Kafka's: the first segment whose largest timestamp reaches `timestamp`, its time index
        for where to start, the batch headers from there, and the records of the first batch whose
        maxTimestamp reaches it (decoded: the record is inside the batch).
        """
        with self._lock:
            self._check_open()
            start = self._start
            for segment in self._segments:
                if segment.max_timestamp[0] < timestamp or segment.next_offset <= start:
                    continue
                assert segment.time_index is not None and segment.index is not None
                entry_offset = segment.time_index.lookup(timestamp)
                position = segment.index.lookup(max(entry_offset if entry_offset is not None else start, start))
                for batch_position, header in segment.iter_headers(position):
                    if header.max_timestamp < timestamp or header.last_offset < start:
                        continue
                    batch = RecordBatch(segment.read(batch_position, header.size_in_bytes), batch_position)
                    for record in batch.records():
                        if record.timestamp >= timestamp and record.offset >= start:
                            return record.timestamp, record.offset
            return None

    def max_timestamp(self) -> tuple[int, int] | None:
        """(timestamp, offset) of the first record with the largest timestamp (KIP-734); None when
        no record has one. Needs `time_index`."""
        with self._lock:
            self._check_open()
            best: LogSegment | None = None
            for segment in self._segments:
                if segment.max_timestamp[0] >= 0 and (best is None or segment.max_timestamp[0] > best.max_timestamp[0]):
                    best = segment
            if best is None:
                return None
            timestamp, batch_last_offset = best.max_timestamp
            position, header = best.find(batch_last_offset)
            batch = RecordBatch(best.read(position, header.size_in_bytes), position)
            for record in batch.records():
                if record.timestamp == timestamp:
                    return timestamp, record.offset
            return timestamp, batch_last_offset

    def delete_old_segments(
        self, now_ms: int, retention_ms: int | None, retention_bytes: int | None, upto: int | None = None
    ) -> int:
        """Kafka's retention: delete the oldest whole segments while their largest timestamp is more
        than `retention_ms` before `now_ms`, or while the log without them still holds at least
        `retention_bytes`; returns how many were deleted. None (or negative, Kafka's -1) disables
        a limit. The active segment always stays, and so does every segment holding offsets at or
        above `upto` (the high watermark: nothing uncommitted is deleted). The log start offset
        advances to the first segment kept, durably (`advance_start_offset`).
        """
        with self._lock:
            self._check_writable()
            candidates = self._segments[:-1]
            if upto is not None:
                candidates = [segment for segment in candidates if segment.next_offset <= upto]
            by_time = 0
            if retention_ms is not None and retention_ms >= 0:
                for segment in candidates:
                    largest = segment.max_timestamp[0]
                    if largest < 0:
                        largest = segment.modified_ms()
                    if now_ms - largest <= retention_ms:
                        break
                    by_time += 1
            by_size = 0
            if retention_bytes is not None and retention_bytes >= 0:
                excess = sum(segment.size for segment in self._segments) - retention_bytes
                for segment in candidates:
                    if excess - segment.size < 0:
                        break
                    excess -= segment.size
                    by_size += 1
            count = max(by_time, by_size)
            if count == 0:
                return 0
            new_start = self._segments[count].base_offset
        if new_start <= self.start_offset:
            return 0
        self.advance_start_offset(new_start)
        logger.info("%s: retention deleted %d segment(s); the log now starts at %d", self.directory, count, new_start)
        return count

    # -- compaction (`quorum.log.cleaner` writes the segments, the log swaps them in) ---------

    def replace_rolled_segment(self, segment: SegmentFiles, cleaned: Path) -> bool:
        """Put the file `cleaned` in place of the rolled segment `segment`; durable on return.

        `cleaned` holds batches with the same offsets as the segment's (some records removed,
        written and fsynced by the cleaner). Returns False, deleting `cleaned`, when the segment
        changed meanwhile (truncated, deleted, or no longer rolled): the cleaner's work is
        dropped rather than put over other data. The old indexes go first, so a crash before
        the new ones are written leaves a segment without indexes, which recovery rebuilds from
        its batches; the data is swapped by one rename, so a crash leaves one file or the other
        whole. Readers never see the swap: they hold the lock, and spans are duplicate descriptors.
        """
        with self._lock:
            self._check_writable()
            number = bisect.bisect_left(self._bases, segment.base_offset)
            current = self._segments[number] if number < len(self._segments) - 1 else None
            if (current is None or current.base_offset != segment.base_offset or current.size != segment.size
                    or current.next_offset != segment.next_offset):
                cleaned.unlink(missing_ok=True)
                return False
            try:
                current.close()
                for path in (current.index_path, current.time_index_path):
                    path.unlink(missing_ok=True)
                fsync_directory(self.directory)
                os.replace(cleaned, current.path)
                fsync_directory(self.directory)
                replacement = self._new_segment(segment.base_offset)
                entries, time_entries, largest, next_offset, _ = replacement.indexes_by_walking()
                if next_offset != segment.next_offset:
                    raise CorruptLogError(replacement.path, None, f"the cleaned segment ends at offset {next_offset}, "
                                          f"not {segment.next_offset} as the one it replaced")  # fmt: skip
                replacement.next_offset = next_offset
                replacement.attach_index(entries, time_entries, largest)
                replacement.flush_all()
                self._segments[number] = replacement
            except BaseException as exc:
                self._fail(exc)
                raise
        return True

    # -- reading for the state machine -------------------------------------------------------

    def iter_batches(self, from_offset: int | None = None, upto: int | None = None) -> Iterator[RecordBatch]:
        """The batches from the one holding `from_offset` (default: the start), below `upto`.

        Reads a chunk at a time, so it can walk a log much larger than memory; it sees appends
        made while it runs. The batches were CRC-checked when written and when recovered.
        """
        offset = self.start_offset if from_offset is None else from_offset
        while True:
            data = self.read(offset, _ITER_CHUNK, upto)
            if not data:
                return
            for batch in walk_batches(data):
                yield batch
                offset = batch.next_offset

    # -- introspection -----------------------------------------------------------------------

    @property
    def epoch_entries(self) -> tuple[EpochEntry, ...]:
        """The leader-epoch cache: (epoch, start offset) in increasing order."""
        with self._lock:
            return self._cache.entries

    @property
    def segment_base_offsets(self) -> list[int]:
        with self._lock:
            return list(self._bases)

    def rolled_segments(self) -> list[SegmentFiles]:
        """The segments before the active one (no longer written: their files and indexes are
        final and durable, so they may be copied elsewhere, KIP-405), oldest first."""
        with self._lock:
            self._check_open()
            return [SegmentFiles(s.base_offset, s.next_offset, s.size, s.max_timestamp[0], s.path, s.index_path,
                                 s.time_index_path if s.has_time_index else None)
                    for s in self._segments[:-1]]  # fmt: skip

    # -- internals ---------------------------------------------------------------------------

    def _check_open(self) -> None:
        if self._closed:
            raise LogError(f"the log in {self.directory} is closed")

    def _fail(self, exc: BaseException) -> None:
        """From now on the log refuses writes (see `flush`); the owner hears of it once."""
        first = self._failed is None
        self._failed = exc
        if first and self.on_failure is not None:
            self.on_failure(self.directory, exc)

    def _check_writable(self) -> None:
        self._check_open()
        if self._failed is not None:
            raise LogError(
                f"the log in {self.directory} refuses writes after a failed write or fsync "
                f"({self._failed!r}); reopen it to recover from what is on disk"
            )

    def _roll_time_reached(self, segment: LogSegment, batches: list[RecordBatch]) -> bool:
        """`log.roll.ms`, as Kafka counts it: from the segment's first batch's timestamp to the
        largest timestamp being appended (not the clock: a log's time is its records' time)."""
        if self.roll_ms is None:
            return False
        first = segment.rolling_timestamp()
        if first is None:
            return False
        return max(batch.max_timestamp for batch in batches) - first > self.roll_ms

    def _new_segment(self, base_offset: int) -> LogSegment:
        return LogSegment(self.directory, base_offset, self.index_interval_bytes, self.time_index)

    def _start_empty_segment(self, base_offset: int) -> None:
        """The only segment of a log emptied at `base_offset`, durably created."""
        segment = LogSegment.empty(self.directory, base_offset, self.index_interval_bytes, self.time_index)
        self._segments.append(segment)
        self._bases.append(base_offset)
        fsync_directory(self.directory)
        self._rolls_synced = self._rolls

    def _synced_in_background(self, segment: LogSegment, size: int, last: int) -> bool:
        """Whether a segment due to roll takes this append too, while a background thread fsyncs
        it (Kafka flushes rolled segments off its request threads as well). The first append
        past the limit starts that fsync; appends go on into the segment until it is done, and
        the first one after rolls, fsyncing only what came meanwhile (unless that is more than
        ROLL_UNSYNCED_BYTES: then another background fsync first). So a segment is still
        durable before its successor exists (recovery's rule: only the last segment can be torn),
        and the event loop never waits for a whole segment's fsync. The indexes' entries made so
        far are written and fsynced there too (`flush_all`): a GiB segment of 10 KiB batches holds
        ~100,000 entries per index, which the roll encoded, wrote and fsynced on the event loop.
        With both, the longest append of a log rolling GiB segments of 10 KiB batches as fast as
        one thread appends went from ~200 ms (the roll: 175 ms of it the fsync of what came during
        the background one) to 23-43 ms. Never past the int32 limits of a segment's positions and
        relative offsets."""
        if not self.roll_sync_in_background or segment.size < BACKGROUND_SYNC_MIN_BYTES:
            return False
        if segment.size + size > _INT32_MAX or last - segment.base_offset > _INT32_MAX:
            return False
        pending = segment.pending_sync
        if pending is not None and not pending.done():
            return True
        if pending is None or (
            pending.exception() is None
            and segment.size - segment.synced_in_background > ROLL_UNSYNCED_BYTES
            and segment.background_syncs < MAX_BACKGROUND_SYNCS
        ):
            segment.synced_in_background = segment.size
            segment.background_syncs += 1
            segment.pending_sync = _ROLL_SYNC.submit(segment.flush_all)
            return True
        return False

    def _roll(self, base_offset: int) -> LogSegment:
        """Start a new segment at `base_offset`, after making the current one durable."""
        pending = self._segments[-1].pending_sync
        if pending is not None:
            pending.result()  # raises the background fsync's error: the log then refuses writes
        self._segments[-1].seal_time_index()
        self._segments[-1].flush_all()
        segment = self._new_segment(base_offset)
        if segment.size:
            segment.close()
            raise LogError(f"{segment.path} already exists with {segment.size} bytes; not rolling onto it")
        segment.attach_index([], [])
        segment.next_offset = base_offset
        self._segments.append(segment)
        self._bases.append(base_offset)
        self._rolls += 1
        logger.debug("%s: rolled to a new segment at offset %d", self.directory, base_offset)
        return segment
