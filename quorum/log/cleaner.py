"""Log compaction, as Kafka's log cleaner: a compacted partition keeps the latest record of each key.

One pass over a partition log (`clean`), as Kafka's Cleaner.clean does it:

1. The cleanable segments: rolled ones only, each ending at or below `upto` (the high watermark:
   a record above it may still be truncated away, so no older record may be dropped for it), and
   none holding a record younger than `min.compaction.lag.ms`.
2. The dirty ones among them: from `first_dirty` (where the last pass stopped). Nothing is done
   unless they hold `min.cleanable.dirty.ratio` of the cleanable bytes, or the oldest of them is
   older than `max.compaction.lag.ms`.
3. An offset map, key -> offset of its last record, from the dirty segments' records (at most
   `max_keys` keys: the pass then stops at the segment that filled it, and the next goes on).
4. Every cleanable segment up to the last mapped one is written again without the records the
   map holds a later offset for, and without tombstones (null values) older than
   `delete.retention.ms`, then swapped in by `Log.replace_rolled_segment`; a segment losing
   nothing is left as it is.

Where this differs from Kafka, and why:

* No offset is left outside a batch (Kafka drops emptied batches and leaves gaps): a run of
  emptied batches without a producer, in one leader epoch, becomes one empty batch over all their
  offsets (`empty_batch`), and an emptied batch of an idempotent producer stays as its bare header
  (`rebuild_batch`, as Kafka keeps it for the producer's sequence). Recovery and a follower's append
  check that batches follow on; a follower whose copy ends inside such a run takes the part from
  its end (`replica_fetcher._cut_to`).
* Transactional and control batches are kept whole, and their records supersede nothing (Kafka
  also drops aborted records and, later, the markers of finished transactions). Keeping more than
  Kafka never loses a key's latest committed value: a record goes only when a later
  non-transactional record of its key is below the high watermark.
* A tombstone's age is its batch's largest timestamp (Kafka counts from the pass that first
  cleaned it, KIP-534), so a consumer that reads from the start within `delete.retention.ms` of
  the delete still sees it.
* Cleaned segments are not merged into fewer files.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

from quorum.log.errors import CorruptFileError, LogError
from quorum.log.log import Log, SegmentFiles
from quorum.log.recovery import CLEANED_SUFFIX
from quorum.log.start_offset import read_start_offset, write_start_offset
from quorum.wire.records import RecordBatch, empty_batch, rebuild_batch
from quorum.wire.records import iter_batches as walk_batches

logger = logging.getLogger(__name__)

MAX_MAP_KEYS = 1_000_000
"""Keys one pass maps (Kafka bounds its map by `log.cleaner.dedupe.buffer.size`): about 100 MB of
Python dict for short keys."""
_READ_CHUNK = 1 << 20
_INT32_MAX = 2**31 - 1


CLEANER_OFFSET_NAME = "cleaner-offset"
"""Where the last pass over a log stopped, its first dirty offset: Kafka keeps these for a log dir
in `cleaner-offset-checkpoint`; here each log owns one file, in `log-start-offset`'s layout, so a
restart does not take the whole log for dirty and read it all again."""


def read_first_dirty(directory: Path) -> int | None:
    """The recorded first dirty offset, None when none is (or the file is damaged: the next pass then
    reads the whole log, which costs time, never records)."""
    try:
        return read_start_offset(directory / CLEANER_OFFSET_NAME)
    except CorruptFileError as exc:
        logger.warning("%s; the next cleaning reads the whole log", exc)
        return None


def write_first_dirty(directory: Path, offset: int) -> None:
    write_start_offset(directory / CLEANER_OFFSET_NAME, offset)


@dataclass(frozen=True, slots=True)
class CleanerPolicy:
    """The topic's compaction settings (`LogConfig`'s), in milliseconds; None for "no limit"."""

    min_cleanable_dirty_ratio: float = 0.5
    delete_retention_ms: int = 86_400_000
    min_compaction_lag_ms: int = 0
    max_compaction_lag_ms: int | None = None
    max_keys: int = MAX_MAP_KEYS


@dataclass(frozen=True, slots=True)
class CleanResult:
    """What one pass did. `first_dirty` is where the next pass starts counting dirty bytes."""

    first_dirty: int
    segments_read: int = 0
    segments_rewritten: int = 0
    bytes_before: int = 0
    bytes_after: int = 0
    records_removed: int = 0
    tombstones_removed: int = 0
    seconds: float = 0.0
    skipped: str | None = None
    """Why nothing was cleaned (None when the pass ran)."""

    def describe(self, name: str) -> str:
        """One log line, as Kafka's cleaner logs each log it cleaned."""
        return (f"{name}: compacted {self.segments_rewritten} of {self.segments_read} segment(s) up to offset "
                f"{self.first_dirty}: {self.bytes_before:,} -> {self.bytes_after:,} bytes, {self.records_removed:,} "
                f"record(s) and {self.tombstones_removed:,} tombstone(s) removed in {self.seconds:.2f} s")  # fmt: skip


def clean(log: Log, upto: int, first_dirty: int, policy: CleanerPolicy, now_ms: int) -> CleanResult:
    """One compaction pass over `log`; see the module docstring. Raises LogError or OSError when the
    log fails under it (a swap that did not happen leaves the old segment whole)."""
    started = time.monotonic()
    cleanable = _cleanable_segments(log, upto, now_ms, policy.min_compaction_lag_ms)
    dirty = [segment for segment in cleanable if segment.next_offset > first_dirty]
    if not dirty:
        return CleanResult(first_dirty, skipped="no dirty segment below the high watermark")
    total = sum(segment.size for segment in cleanable)
    dirty_bytes = sum(segment.size for segment in dirty)
    overdue = (policy.max_compaction_lag_ms is not None and 0 <= dirty[0].max_timestamp
               < now_ms - policy.max_compaction_lag_ms)  # fmt: skip
    if total == 0 or (dirty_bytes / total < policy.min_cleanable_dirty_ratio and not overdue):
        return CleanResult(first_dirty, skipped=f"dirty ratio {dirty_bytes / max(total, 1):.2f} below "
                                                f"{policy.min_cleanable_dirty_ratio}")  # fmt: skip
    latest, mapped_end = _offset_map(dirty, policy.max_keys)
    horizon = now_ms - policy.delete_retention_ms
    result = _Tally()
    for segment in cleanable:
        if segment.base_offset >= mapped_end:
            break
        _clean_segment(log, segment, latest, horizon, result)
    return CleanResult(mapped_end, result.read, result.rewritten, result.before, result.after, result.records,
                       result.tombstones, time.monotonic() - started)  # fmt: skip


def _cleanable_segments(log: Log, upto: int, now_ms: int, min_lag_ms: int) -> list[SegmentFiles]:
    """Rolled segments below `upto`, oldest first, stopping at the first with a record younger
    than the minimum compaction lag (a segment without timestamps counts as old)."""
    cleanable = []
    for segment in log.rolled_segments():
        if segment.next_offset > upto or (min_lag_ms > 0 and segment.max_timestamp > now_ms - min_lag_ms):
            break
        cleanable.append(segment)
    return cleanable


def _segment_batches(segment: SegmentFiles) -> Iterator[tuple[int, RecordBatch]]:
    """(position, batch) for every batch of the segment's file, read a chunk at a time (the
    file itself, so batches below the log start offset are rewritten too, not lost). Raises
    LogError when the file is shorter than the segment was (truncated meanwhile)."""
    with open(segment.log_path, "rb") as file:
        descriptor = file.fileno()
        position = 0
        wanted = _READ_CHUNK
        while position < segment.size:
            length = min(wanted, segment.size - position)
            chunk = os.pread(descriptor, length, position)
            if len(chunk) < length:
                raise LogError(f"{segment.log_path} shrank to {position + len(chunk)} bytes while it was cleaned")
            walker = walk_batches(chunk)
            for batch in walker:
                yield position + batch.position, batch
            tail = walker.truncated
            if tail is None:
                position += walker.position
                wanted = _READ_CHUNK
            else:
                position += tail.position
                wanted = max(_READ_CHUNK, tail.needed or 0) if tail.position else max(wanted * 2, tail.needed or 0)


def _supersedes(batch: RecordBatch) -> bool:
    """Whether the batch's records count as a key's latest (see the module docstring)."""
    return not batch.is_transactional and not batch.is_control


def _offset_map(dirty: list[SegmentFiles], max_keys: int) -> tuple[dict[bytes, int], int]:
    """key -> offset of its last record in the dirty segments, and the offset the map covers up
    to (the end of the last segment mapped whole; at least the first, as Kafka's)."""
    latest: dict[bytes, int] = {}
    mapped_end = dirty[0].base_offset
    for segment in dirty:
        if latest and len(latest) >= max_keys:
            break
        for _, batch in _segment_batches(segment):
            if _supersedes(batch):
                for record in batch.records():
                    if record.key is not None:
                        latest[record.key] = record.offset
        mapped_end = segment.next_offset
    return latest, mapped_end


@dataclass(slots=True)
class _Tally:
    read: int = 0
    rewritten: int = 0
    before: int = 0
    after: int = 0
    records: int = 0
    tombstones: int = 0


def _clean_segment(log: Log, segment: SegmentFiles, latest: dict[bytes, int], horizon_ms: int,
                   tally: _Tally) -> None:
    """Write the segment again without what the map and the tombstone horizon drop, a run of
    emptied batches as one, and swap it in; a segment that would not change is only read."""
    tally.read += 1
    copy = _Rewrite(segment.log_path, Path(f"{segment.log_path}{CLEANED_SUFFIX}"))
    run: _EmptyRun | None = None
    removed = tombstones = 0
    try:
        for position, batch in _segment_batches(segment):
            if _supersedes(batch):
                records = batch.records()
                expired = batch.max_timestamp < horizon_ms
                kept = []
                for record in records:
                    if record.key is not None and latest.get(record.key, -1) > record.offset:
                        removed += 1
                    elif record.key is not None and record.value is None and expired:
                        tombstones += 1
                    else:
                        kept.append(record)
                if not kept and batch.producer_id < 0:
                    if run is None or not run.extend(batch):
                        _flush(run, copy)
                        run = _EmptyRun(position, batch)
                    continue
                run = _flush(run, copy)
                if len(kept) == len(records):
                    copy.keep(batch.raw)
                else:
                    copy.change(position, rebuild_batch(batch, kept))
                continue
            run = _flush(run, copy)
            copy.keep(batch.raw)
        _flush(run, copy)
        size = copy.finish()
    except BaseException:
        copy.abandon()
        raise
    if size is None:
        return
    if not log.replace_rolled_segment(segment, copy.target):
        logger.info("%s: segment %d changed while it was cleaned; left for the next pass", log.directory,
                    segment.base_offset)  # fmt: skip
        return
    tally.rewritten += 1
    tally.before += segment.size
    tally.after += size
    tally.records += removed
    tally.tombstones += tombstones


class _EmptyRun:
    """Consecutive batches without a producer left with no record, in one leader epoch: written as
    one empty batch over all their offsets, so a key rewritten a million times leaves a header or
    so, not a million (Kafka drops such batches; here every offset stays inside a batch)."""

    def __init__(self, position: int, first: RecordBatch) -> None:
        self.position = position
        self.first = first
        self.last_offset = first.last_offset
        self.max_timestamp = first.max_timestamp
        self.changed = first.records_count > 0

    def extend(self, batch: RecordBatch) -> bool:
        """Take `batch` in, if it continues the run in the same epoch and the offsets fit."""
        first = self.first
        if (batch.partition_leader_epoch != first.partition_leader_epoch
                or batch.timestamp_type != first.timestamp_type
                or batch.last_offset - first.base_offset > _INT32_MAX):
            return False
        self.last_offset = batch.last_offset
        self.max_timestamp = max(self.max_timestamp, batch.max_timestamp)
        self.changed = True
        return True

    def write(self, copy: _Rewrite) -> None:
        """Into `copy`: the one batch as it was, or the run's empty batch."""
        if not self.changed:
            copy.keep(self.first.raw)
            return
        first = self.first
        copy.change(self.position, empty_batch(first.base_offset, self.last_offset, first.partition_leader_epoch,
                                               first.timestamp_type, self.max_timestamp))  # fmt: skip


def _flush(run: _EmptyRun | None, copy: _Rewrite) -> None:
    """Write the run, if one is open; the run is then over (None)."""
    if run is not None:
        run.write(copy)


class _Rewrite:
    """The cleaned copy of a segment, opened at the first change with the bytes before it copied."""

    def __init__(self, source: Path, target: Path) -> None:
        self.source = source
        self.target = target
        self._out: BinaryIO | None = None

    def keep(self, data: bytes | memoryview) -> None:
        if self._out is not None:
            self._out.write(data)

    def change(self, position: int, data: bytes) -> None:
        """`data` in place of the segment's bytes from `position` on (up to what comes next)."""
        if self._out is None:
            self._out = open(self.target, "wb")  # noqa: SIM115 - closed by finish or abandon
            _copy_prefix(self.source, self._out, position)
        self._out.write(data)

    def finish(self) -> int | None:
        """fsync and close the copy; its size, or None when nothing changed (no copy)."""
        if self._out is None:
            return None
        self._out.flush()
        os.fsync(self._out.fileno())
        size = self._out.tell()
        self._out.close()
        return size

    def abandon(self) -> None:
        if self._out is not None:
            self._out.close()
            self.target.unlink(missing_ok=True)


def _copy_prefix(source: Path, out: BinaryIO, length: int) -> None:
    """The first `length` bytes of `source` into `out`, a chunk at a time."""
    with open(source, "rb") as file:
        while length > 0:
            chunk = file.read(min(_READ_CHUNK, length))
            if not chunk:
                raise LogError(f"{source} ended {length} bytes early while it was cleaned")
            out.write(chunk)
            length -= len(chunk)


__all__ = ["CLEANER_OFFSET_NAME", "MAX_MAP_KEYS", "CleanResult", "CleanerPolicy", "clean", "read_first_dirty",
           "write_first_dirty"]
