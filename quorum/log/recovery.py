"""Opening a log directory: what a crash left is checked, finished or cut off before `Log` serves it.

Kept apart from `quorum.log.log` because it runs once, at open, and answers different questions
than the writes and reads: which segments are the log (`log-start-offset` says where it starts;
segments wholly below it, orphaned indexes and unfinished cleanings are what interrupted work
left), where it ends (only the last segment can hold a torn write, because a segment is fsynced
before its successor is created, so damage anywhere else is refused), and which leader epochs it
holds (the checkpoint is trusted only where a few index lookups confirm it). `Log` then finishes
a `start_empty_at` that a crash interrupted, which is a write and stays there.
"""

from __future__ import annotations

import bisect
import contextlib
import logging
import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

from quorum.log.atomic import fsync_directory
from quorum.log.epoch_cache import CHECKPOINT_NAME, EpochEntry, LeaderEpochCache, read_checkpoint, write_checkpoint
from quorum.log.errors import CorruptFileError, CorruptLogError, InvalidOffsetError
from quorum.log.index import INDEX_SUFFIX, IndexCorrupt
from quorum.log.segment import LogSegment, ScanResult, parse_log_name
from quorum.log.start_offset import START_OFFSET_NAME, read_start_offset
from quorum.log.time_index import TIME_INDEX_SUFFIX
from quorum.wire.records import RecordBatch

logger = logging.getLogger(__name__)

T = TypeVar("T")

CLEANED_SUFFIX = ".cleaned"
"""A cleaned segment being written (`<base>.log.cleaned`), as Kafka's `.cleaned` files."""


@dataclass(frozen=True, slots=True)
class RecoveredLog:
    """What `recover_log` found: the segments (opened, indexes attached, the last one durable),
    the log start offset, the last batch's epoch (-1 when none) and the leader-epoch cache, with
    the checkpoint file already agreeing with it."""

    segments: list[LogSegment]
    start_offset: int
    last_epoch: int
    epochs: LeaderEpochCache


def recover_log(
    directory: Path,
    index_interval_bytes: int,
    verify_all_segments: bool,
    time_index: bool,
    keep_epochs_below_start: bool,
) -> RecoveredLog:
    """Open the log in `directory` (creating it if needed) and recover it; see `Log.__init__`
    for the options. Raises CorruptLogError when a segment other than the last is damaged or the
    segments do not follow on from each other; no file is left open then."""
    return _Recovery(directory, index_interval_bytes, verify_all_segments, time_index,
                     keep_epochs_below_start).run()  # fmt: skip


def _read_unless_damaged(read: Callable[[Path], T | None], path: Path, instead: str) -> T | None:
    """`read(path)`, or None (as for a missing file) when the file is damaged, logging what is done `instead`."""
    try:
        return read(path)
    except CorruptFileError as exc:
        logger.warning("%s; %s", exc, instead)
        return None


class _Recovery:
    """One open's recovery; its state is the log's until `run` hands it over."""

    def __init__(self, directory: Path, index_interval_bytes: int, verify_all_segments: bool, time_index: bool,
                 keep_epochs_below_start: bool) -> None:  # fmt: skip
        self.directory = directory
        self.index_interval_bytes = index_interval_bytes
        self.verify_all_segments = verify_all_segments
        self.time_index = time_index
        self.keep_epochs_below_start = keep_epochs_below_start
        self._segments: list[LogSegment] = []
        self._bases: list[int] = []
        self._start = 0
        self._last_epoch = -1
        self._cache = LeaderEpochCache()

    @property
    def _end_offset(self) -> int:
        return self._segments[-1].next_offset

    def run(self) -> RecoveredLog:
        created = not self.directory.exists()
        self.directory.mkdir(parents=True, exist_ok=True)
        if created:
            fsync_directory(self.directory.parent)
        names = os.listdir(self.directory)
        bases = sorted(base for name in names if (base := parse_log_name(name)) is not None)
        kept = self._load_start_offset(bases)
        if kept != bases:
            names, bases = os.listdir(self.directory), kept
        self._remove_orphan_indexes(names, set(bases))
        self._remove_unfinished_cleanings(names)
        try:
            for base in bases or [self._start]:
                self._segments.append(LogSegment(self.directory, base, self.index_interval_bytes, self.time_index))
            self._bases = [segment.base_offset for segment in self._segments]
            self._recover()
            if self._end_offset < self._start:
                self._empty_at_start()
            # What recovery kept may still be only in the page cache (the process died, the
            # machine did not): make it durable before calling it flushed. A log just created
            # holds empty files only, which the directory's fsync makes durable.
            if not created:
                self._segments[-1].flush_all()
            fsync_directory(self.directory)
        except BaseException:
            for segment in self._segments:
                segment.close()
            raise
        return RecoveredLog(self._segments, self._start, self._last_epoch, self._cache)

    def _load_start_offset(self, bases: list[int]) -> list[int]:
        """Set the log start offset from `log-start-offset` (or the first segment), delete the
        segments wholly below it (an `advance_start_offset` or `truncate_fully_and_start_at` that
        a crash interrupted), and return the bases of the segments left."""
        # Written atomically, so only damage makes it unreadable. The segments' own start is the safe
        # guess then: it may serve records below the lost start again, never lose any.
        recorded = _read_unless_damaged(read_start_offset, self.directory / START_OFFSET_NAME,
                                        "the log starts at its first segment")  # fmt: skip
        if recorded is None:
            self._start = bases[0] if bases else 0
            return bases
        self._start = recorded
        keep = max(bisect.bisect_right(bases, recorded) - 1, 0)
        for base in bases[:keep]:
            for suffix in (".log", INDEX_SUFFIX, TIME_INDEX_SUFFIX):
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(self.directory / f"{base:020d}{suffix}")
            logger.warning("%s: segment %020d.log is below the log start offset %d, deleted",
                           self.directory, base, recorded)  # fmt: skip
        if bases and bases[keep] > recorded:
            raise CorruptLogError(
                self.directory / f"{bases[keep]:020d}.log", None,
                f"the log starts at offset {recorded} ({START_OFFSET_NAME}) but its first segment at "
                f"{bases[keep]}: the records in between are missing",
            )  # fmt: skip
        return bases[keep:]

    def _empty_at_start(self) -> None:
        """Recovery found the log ending below its recorded start offset (a crash inside
        `truncate_fully_and_start_at`): what is left is below the start, so the log is empty."""
        logger.warning("%s: the log ends at %d, below its start offset %d: emptied to start there",
                       self.directory, self._segments[-1].next_offset, self._start)  # fmt: skip
        for segment in reversed(self._segments):
            segment.delete()
        self._segments.clear()
        fsync_directory(self.directory)
        self._segments.append(LogSegment.empty(self.directory, self._start, self.index_interval_bytes,
                                               self.time_index))  # fmt: skip
        fsync_directory(self.directory)
        self._cache = LeaderEpochCache()
        self._last_epoch = -1
        write_checkpoint(self.directory / CHECKPOINT_NAME, ())

    def _remove_orphan_indexes(self, names: list[str], bases: set[int]) -> None:
        """Delete `.index` and `.timeindex` files without their `.log` (left by a crash during a
        truncation or a deletion)."""
        for name in names:
            for suffix in (INDEX_SUFFIX, TIME_INDEX_SUFFIX):
                stem = name.removesuffix(suffix)
                if name.endswith(suffix) and len(stem) == 20 and stem.isdigit() and int(stem) not in bases:
                    logger.warning("%s: index without a segment, deleted", self.directory / name)
                    (self.directory / name).unlink()

    def _remove_unfinished_cleanings(self, names: list[str]) -> None:
        """Delete cleaned segments a crash left before `replace_rolled_segment` swapped them in:
        the segment they were made from is still whole, and the next cleaning makes them again."""
        for name in names:
            if name.endswith(CLEANED_SUFFIX):
                logger.warning("%s: unfinished cleaning, deleted", self.directory / name)
                (self.directory / name).unlink(missing_ok=True)

    def _recover(self) -> None:
        """Check the segments, truncate a torn tail, and make the indexes and epochs agree."""
        previous_epoch = -1
        scan_start: int | None = None
        epoch_before_scan = -1
        scanned_epochs: list[tuple[int, int]] = []
        last = len(self._segments) - 1
        for number, segment in enumerate(self._segments):
            if number > 0:
                before = self._segments[number - 1]
                if segment.base_offset != before.next_offset:
                    raise CorruptLogError(
                        segment.path, None,
                        f"segment starts at offset {segment.base_offset} but {before.path.name} ends at offset "
                        f"{before.next_offset}: the log is not contiguous",
                    )  # fmt: skip
            if number == last or self.verify_all_segments:
                result = segment.scan(previous_epoch)
                if result.fault is not None:
                    if number != last:
                        raise CorruptLogError(
                            segment.path, result.valid_size,
                            f"{result.fault}; refusing to load: this segment was fsynced before the next one "
                            "was created, so this is damage to committed data, not a torn write",
                        )  # fmt: skip
                    self._truncate_torn_tail(segment, result)
                segment.next_offset = result.next_offset
                segment.attach_index(result.index_entries, result.time_entries, result.max_timestamp)
                if number != last:
                    segment.seal_time_index()
                if scan_start is None:
                    scan_start, epoch_before_scan = segment.base_offset, previous_epoch
                scanned_epochs += result.epoch_starts
                previous_epoch = result.last_epoch
            else:
                last_epoch = self._load_unscanned(segment)
                if last_epoch is not None:
                    previous_epoch = last_epoch
        self._last_epoch = previous_epoch
        assert scan_start is not None
        self._recover_epochs(scan_start, epoch_before_scan, scanned_epochs)

    def _truncate_torn_tail(self, segment: LogSegment, result: ScanResult) -> None:
        dropped = segment.size - result.valid_size
        logger.warning(
            "%s: torn or corrupt tail at byte %d (%s): truncating %d bytes, the log now ends at offset %d",
            segment.path, result.valid_size, result.fault, dropped, result.next_offset,
        )  # fmt: skip
        segment.truncate_to(result.valid_size, result.next_offset)

    def _load_unscanned(self, segment: LogSegment) -> int | None:
        """A segment recovery does not CRC-scan: load its index (or rebuild it) and find its end
        by walking the batch headers after the last index entry. Returns the last batch's epoch."""
        try:
            entries: list[tuple[int, int]] | None = segment.read_index()
        except (FileNotFoundError, IndexCorrupt) as exc:
            logger.warning("%s: rebuilding the index (%s)", segment.index_path, exc)
            entries = None
        if entries is not None:
            segment.attach_index(entries)
            assert segment.index is not None
            try:
                tail = None
                for _, header in segment.iter_headers(segment.index.last_position):
                    tail = header
                if tail is not None:
                    segment.next_offset = tail.next_offset
                elif segment.size == 0:
                    segment.attach_time_index([], (-1, -1))
                    return None
                if tail is not None and self._load_time_index(segment, tail):
                    return tail.partition_leader_epoch
            except CorruptLogError as exc:
                logger.warning("%s: rebuilding the index, its last entry leads nowhere (%s)", segment.index_path, exc)
        entries, time_entries, largest, segment.next_offset, last_epoch = segment.indexes_by_walking()
        segment.attach_index(entries, time_entries, largest)
        return last_epoch

    def _load_time_index(self, segment: LogSegment, last_batch: RecordBatch) -> bool:
        """Attach the `.timeindex` of a segment that is not the active one, if it passes the
        checks; False when it must be rebuilt from the batch headers. Its last entry is the
        segment's largest timestamp (`_roll` sealed it so), so the last batch's cannot be above it."""
        if not self.time_index:
            return True
        try:
            entries = segment.read_time_index()
            largest = entries[-1] if entries else (-1, -1)
            if last_batch.max_timestamp > largest[0]:
                raise IndexCorrupt(f"the last batch's timestamp {last_batch.max_timestamp} is above every entry's")
        except (FileNotFoundError, IndexCorrupt) as exc:
            logger.warning("%s: rebuilding the time index (%s)", segment.time_index_path, exc)
            return False
        segment.attach_time_index(entries, largest)
        return True

    def _recover_epochs(self, scan_start: int, epoch_before_scan: int, scanned: list[tuple[int, int]]) -> None:
        """Make the leader-epoch cache agree with the log, and the checkpoint with the cache.

        Epochs in the scanned segments come from the scan. The checkpoint's entries before them
        are kept if they agree with the batches they name (`_epochs_agree`, a few index lookups
        per epoch); otherwise, or without a checkpoint, the unscanned segments' headers are
        walked, which reads them whole.
        """
        path = self.directory / CHECKPOINT_NAME
        stored = _read_unless_damaged(read_checkpoint, path, "rebuilding it from the log")
        below: list[EpochEntry] = []
        if self.keep_epochs_below_start and stored is not None:
            # The history below the start (`start_empty_at`): no record of it is here to check it by.
            below = [entry for entry in stored if entry.start_offset < self._start]
        prefix: list[EpochEntry] | None = []
        if scan_start > self._segments[0].base_offset:
            prefix = None
            if stored is not None:
                candidate = [entry for entry in stored if self._start <= entry.start_offset < scan_start]
                if self._epochs_agree(candidate, epoch_before_scan, below[-1].epoch if below else -1):
                    prefix = candidate
            if prefix is None:
                prefix = self._walk_epochs(scan_start)
        cache = LeaderEpochCache()
        for entry in below + prefix:
            cache.assign(entry.epoch, entry.start_offset)
        for epoch, start in scanned:
            cache.assign(epoch, start)
        if not below:
            cache.truncate_from_start(self._start)
        cache.truncate_from_end(self._end_offset)  # see advance_start_offset
        self._cache = cache
        if stored is None or tuple(stored) != cache.entries:
            if stored is not None or self._end_offset > self._start:
                logger.info("%s: rewritten to agree with the log: %s", path, list(cache.entries))
            write_checkpoint(path, cache.entries)

    def _epochs_agree(self, entries: list[EpochEntry], last_epoch: int, epoch_below: int = -1) -> bool:
        """Whether `entries` are exactly the epoch starts of the log up to a batch of `last_epoch`
        (`epoch_below`: the epoch the history below the log start ends in, kept apart).

        Each entry must name a batch of its epoch, and the batch before it must be of the
        previous entry's epoch (or unstamped, before the first): as epochs never decrease, every
        batch between two entries then has the first one's epoch, so none is missing.
        """
        previous = epoch_below
        for entry in entries:
            here = self._header_holding(entry.start_offset)
            if here is None or here.partition_leader_epoch != entry.epoch:
                return False
            # The first entry of a log whose start advanced starts at the start offset, which
            # may be inside a batch (EpochCache.truncate_from_start moved it up there).
            if here.base_offset != entry.start_offset and entry.start_offset != self._start:
                return False
            if entry.start_offset > self._start:
                before = self._header_holding(entry.start_offset - 1)
                if before is None or max(before.partition_leader_epoch, -1) != previous:
                    return False
            previous = entry.epoch
        return previous == max(last_epoch, -1)

    def _header_holding(self, offset: int) -> RecordBatch | None:
        """The header of the batch holding `offset`, None when there is none or it is unreadable."""
        if not self._start <= offset < self._end_offset:
            return None
        segment = self._segments[bisect.bisect_right(self._bases, offset) - 1]
        with contextlib.suppress(InvalidOffsetError, CorruptLogError):
            return segment.find(offset)[1]
        return None

    def _walk_epochs(self, scan_start: int) -> list[EpochEntry]:
        """Epoch starts in the segments below `scan_start`, from their batch headers."""
        entries: list[EpochEntry] = []
        highest = -1
        for segment in self._segments:
            if segment.base_offset >= scan_start:
                break
            for _, header in segment.iter_headers(0):
                epoch = header.partition_leader_epoch
                if epoch > highest:
                    entries.append(EpochEntry(epoch, header.base_offset))
                    highest = epoch
        logger.info("%s: leader epochs rebuilt from the segments' batch headers", self.directory)
        return entries
