"""The durable segmented log the Raft metadata log and the brokers' partition logs share.

A directory of Kafka-named segments (`00000000000000000000.log` + `.index`, rolled at
`segment_bytes`) and a `leader-epoch-checkpoint`. `Log` implements the read side the Raft core
consults (`quorum.raft.interface.RaftLog`) and the writes its driver performs for
AppendBatches and Truncate.

Durability (design principle 4, "acknowledged means durable"):

* `append` writes to the page cache only; `flush` fsyncs and only then advances
  `flushed_offset`, the one figure a node may acknowledge.
* A segment is fsynced (data and index) before its successor is created, so after a crash only
  the last segment can hold a torn write. Recovery CRC-scans it and truncates at the first bad
  batch, logging the file and byte; damage anywhere before that is refused, naming the file and
  byte, because it would be committed data. With `verify_all_segments` (the default) every
  segment is CRC-scanned at open; without it the earlier segments only get their framing and
  index checked, which keeps the open of a large partition log fast.
* `truncate_to` is durable when it returns: the cut is fsynced, removed segments are removed
  from the directory durably, and the epoch checkpoint is rewritten.

Threads: one writer (append, flush, truncate_to) and any number of readers. Reads of written
data never wait for an fsync: `flush` holds the state lock only to note what it is about to
make durable, not while the disk works, so the fetches of followers and consumers go on while
the leader's fsync is in flight.
"""

from __future__ import annotations

import bisect
import contextlib
import logging
import os
import threading
from collections.abc import Iterator
from pathlib import Path

from quorum.log.atomic import fsync_directory
from quorum.log.epoch_cache import (
    CHECKPOINT_NAME,
    EpochEntry,
    LeaderEpochCache,
    read_checkpoint,
    write_checkpoint,
)
from quorum.log.errors import CorruptFileError, CorruptLogError, InvalidAppendError, InvalidOffsetError, LogError
from quorum.log.index import DEFAULT_INDEX_INTERVAL_BYTES, INDEX_SUFFIX, IndexCorrupt
from quorum.log.segment import DEFAULT_SEGMENT_BYTES, LogSegment, ScanResult, parse_log_name
from quorum.log.validation import batch_fault
from quorum.raft.interface import OffsetAndEpoch
from quorum.wire.records import CorruptRecordError, RecordBatch
from quorum.wire.records import iter_batches as walk_batches

logger = logging.getLogger(__name__)

_INT32_MAX = 2**31 - 1
#: Bytes read at a time by `Log.iter_batches`.
_ITER_CHUNK = 1 << 20


class Log:
    """A segmented log of record batch v2 files; see the module docstring for the guarantees."""

    def __init__(
        self,
        directory: Path | str,
        segment_bytes: int = DEFAULT_SEGMENT_BYTES,
        index_interval_bytes: int = DEFAULT_INDEX_INTERVAL_BYTES,
        verify_all_segments: bool = True,
    ) -> None:
        """Open the log in `directory`, creating it if needed, and recover it.

        Raises CorruptLogError when a segment other than the last is damaged or the segments do
        not follow on from each other.
        """
        if not 1 <= segment_bytes <= _INT32_MAX:
            raise ValueError(f"segment_bytes must be 1..{_INT32_MAX} (positions are int32), not {segment_bytes}")
        if index_interval_bytes < 0:
            raise ValueError(f"index_interval_bytes must not be negative, not {index_interval_bytes}")
        self.directory = Path(directory)
        self.segment_bytes = segment_bytes
        self.index_interval_bytes = index_interval_bytes
        self.verify_all_segments = verify_all_segments
        self._lock = threading.Lock()  # the segment list, offsets, epochs; never held across an fsync by flush
        self._flush_lock = threading.Lock()  # one flush at a time; truncate_to and close wait for it
        self._segments: list[LogSegment] = []
        self._bases: list[int] = []
        self._cache = LeaderEpochCache()
        self._checkpointed: tuple[EpochEntry, ...] = ()
        self._last_epoch = -1  # epoch of the last batch, -1 when none
        self._flushed = 0
        self._rolls = 0  # segments created; the directory is fsynced up to `_rolls_synced`
        self._rolls_synced = 0
        self._failed: BaseException | None = None
        self._closed = False
        self._open()

    def __repr__(self) -> str:
        return (
            f"Log({str(self.directory)!r}, start_offset={self.start_offset}, end_offset={self.end_offset}, "
            f"flushed_offset={self._flushed}, segments={len(self._segments)})"
        )

    def __enter__(self) -> Log:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    # -- the RaftLog protocol ----------------------------------------------------------------

    @property
    def start_offset(self) -> int:
        return self._segments[0].base_offset

    @property
    def end_offset(self) -> int:
        """The next offset to be written."""
        return self._segments[-1].next_offset

    @property
    def flushed_offset(self) -> int:
        """Everything below this offset is on disk (fsynced)."""
        return self._flushed

    def last_fetched_epoch(self) -> int:
        """Epoch of the last batch; 0 when the log has no batch stamped with an epoch."""
        return max(self._cache.latest_epoch, 0)

    def end_offset_for_epoch(self, epoch: int) -> OffsetAndEpoch:
        """The largest epoch <= `epoch` and its end offset; (-1, -1) below every epoch."""
        with self._lock:
            return self._cache.end_offset_for(epoch, self.end_offset)

    def read(self, offset: int, max_bytes: int, upto: int | None = None) -> bytes:
        """Whole batches from the one holding `offset`, within one segment as Kafka reads.

        At most `max_bytes`, but always the first batch whole however large (as Kafka's fetch
        does, so a consumer is never stuck behind a big batch). With `upto`, only batches that
        start below it (a high watermark). b"" at the end of the log; InvalidOffsetError
        outside it.
        """
        with self._lock:
            self._check_open()
            end = self.end_offset
            if not self.start_offset <= offset <= end:
                raise InvalidOffsetError(
                    f"offset {offset} is outside the log [{self.start_offset}, {end}] in {self.directory}"
                )
            if offset == end or (upto is not None and offset >= upto):
                return b""
            segment = self._segments[bisect.bisect_right(self._bases, offset) - 1]
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

    # -- writing -----------------------------------------------------------------------------

    def append(self, batches: bytes | bytearray | memoryview) -> int:
        """Append whole v2 batches that continue the log; returns the new end offset.

        Every batch is checked first (v2, CRC, base offsets contiguous from `end_offset`, leader
        epochs not decreasing); if any fails, InvalidAppendError names the batch and the reason
        and nothing is written. The data is durable only after `flush`.
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
                    fault = batch_fault(batch, expected, epoch)
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
                segment.size + size > self.segment_bytes or last - segment.base_offset > _INT32_MAX
            ):
                try:
                    segment = self._roll(first)
                except OSError as exc:  # the old segment's fsync may have failed: see flush
                    self._failed = exc
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
                self._failed = exc
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
                self._failed = exc
                raise
            self._last_epoch = self._cache.epoch_for_offset(offset - 1)
            self._flushed = min(self._flushed, offset)
            logger.info("%s: truncated to offset %d (was %d)", self.directory, offset, end)

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

    # -- internals ---------------------------------------------------------------------------

    def _check_open(self) -> None:
        if self._closed:
            raise LogError(f"the log in {self.directory} is closed")

    def _check_writable(self) -> None:
        self._check_open()
        if self._failed is not None:
            raise LogError(
                f"the log in {self.directory} refuses writes after a failed write or fsync "
                f"({self._failed!r}); reopen it to recover from what is on disk"
            )

    def _roll(self, base_offset: int) -> LogSegment:
        """Start a new segment at `base_offset`, after making the current one durable."""
        self._segments[-1].flush_all()
        segment = LogSegment(self.directory, base_offset, self.index_interval_bytes)
        if segment.size:
            segment.close()
            raise LogError(f"{segment.path} already exists with {segment.size} bytes; not rolling onto it")
        segment.attach_index([])
        segment.next_offset = base_offset
        self._segments.append(segment)
        self._bases.append(base_offset)
        self._rolls += 1
        logger.debug("%s: rolled to a new segment at offset %d", self.directory, base_offset)
        return segment

    # -- opening and recovery ----------------------------------------------------------------

    def _open(self) -> None:
        created = not self.directory.exists()
        self.directory.mkdir(parents=True, exist_ok=True)
        if created:
            fsync_directory(self.directory.parent)
        names = os.listdir(self.directory)
        bases = sorted(base for name in names if (base := parse_log_name(name)) is not None)
        self._remove_orphan_indexes(names, set(bases))
        try:
            for base in bases or [0]:
                self._segments.append(LogSegment(self.directory, base, self.index_interval_bytes))
            self._bases = [segment.base_offset for segment in self._segments]
            self._recover()
            # What recovery kept may still be only in the page cache (the process died, the
            # machine did not): make it durable before calling it flushed.
            self._segments[-1].flush_all()
            fsync_directory(self.directory)
        except BaseException:
            for segment in self._segments:
                segment.close()
            raise
        self._flushed = self.end_offset

    def _remove_orphan_indexes(self, names: list[str], bases: set[int]) -> None:
        """Delete `.index` files without their `.log` (left by a crash during a truncation)."""
        for name in names:
            stem = name.removesuffix(INDEX_SUFFIX)
            if name.endswith(INDEX_SUFFIX) and len(stem) == 20 and stem.isdigit() and int(stem) not in bases:
                logger.warning("%s: index without a segment, deleted", self.directory / name)
                (self.directory / name).unlink()

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
                segment.attach_index(result.index_entries)
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
                    return tail.partition_leader_epoch
                if segment.size == 0:
                    return None
            except CorruptLogError as exc:
                logger.warning("%s: rebuilding the index, its last entry leads nowhere (%s)", segment.index_path, exc)
        entries, segment.next_offset, last_epoch = segment.index_entries_by_walking()
        segment.attach_index(entries)
        return last_epoch

    def _recover_epochs(self, scan_start: int, epoch_before_scan: int, scanned: list[tuple[int, int]]) -> None:
        """Make the leader-epoch cache agree with the log, and the checkpoint with the cache.

        Epochs in the scanned segments come from the scan. The checkpoint's entries before them
        are kept if they agree with the batches they name (`_epochs_agree`, a few index lookups
        per epoch); otherwise, or without a checkpoint, the unscanned segments' headers are
        walked, which reads them whole.
        """
        path = self.directory / CHECKPOINT_NAME
        try:
            stored = read_checkpoint(path)
        except CorruptFileError as exc:
            logger.warning("%s; rebuilding it from the log", exc)
            stored = None
        prefix: list[EpochEntry] | None = []
        if scan_start > self.start_offset:
            prefix = None
            if stored is not None:
                candidate = [entry for entry in stored if entry.start_offset < scan_start]
                if self._epochs_agree(candidate, epoch_before_scan):
                    prefix = candidate
            if prefix is None:
                prefix = self._walk_epochs(scan_start)
        cache = LeaderEpochCache()
        for entry in prefix:
            cache.assign(entry.epoch, entry.start_offset)
        for epoch, start in scanned:
            cache.assign(epoch, start)
        self._cache = cache
        if stored is None or tuple(stored) != cache.entries:
            if stored is not None or self.end_offset > self.start_offset:
                logger.info("%s: rewritten to agree with the log: %s", path, list(cache.entries))
            write_checkpoint(path, cache.entries)
        self._checkpointed = cache.entries

    def _epochs_agree(self, entries: list[EpochEntry], last_epoch: int) -> bool:
        """Whether `entries` are exactly the epoch starts of the log up to a batch of `last_epoch`.

        Each entry must name a batch of its epoch, and the batch before it must be of the
        previous entry's epoch (or unstamped, before the first): as epochs never decrease, every
        batch between two entries then has the first one's epoch, so none is missing.
        """
        previous = -1
        for entry in entries:
            here = self._header_holding(entry.start_offset)
            if here is None or here.base_offset != entry.start_offset or here.partition_leader_epoch != entry.epoch:
                return False
            if entry.start_offset > self.start_offset:
                before = self._header_holding(entry.start_offset - 1)
                if before is None or max(before.partition_leader_epoch, -1) != previous:
                    return False
            previous = entry.epoch
        return previous == max(last_epoch, -1)

    def _header_holding(self, offset: int) -> RecordBatch | None:
        """The header of the batch holding `offset`, None when there is none or it is unreadable."""
        if not self.start_offset <= offset < self.end_offset:
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
