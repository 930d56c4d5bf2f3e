"""KIP-630 snapshot files: writing one, fetching one from the leader, and reading one back.

A snapshot is the state machine's state up to a SnapshotId (end offset, epoch) of the log, in
`<20-digit end offset>-<10-digit epoch>.checkpoint` in the partition directory
(`quorum.log.snapshot_files`), as record batches v2 between a header and a footer control batch
(`quorum.log.snapshot_format`).

The three ways a snapshot comes to be and is used:

* `SnapshotWriter`: the local state machine writes its state (`append(values)`) into
  `<id>.checkpoint.part`; `freeze()` adds the footer, fsyncs, validates, renames to
  `<id>.checkpoint` and fsyncs the directory. Batches are numbered from offset 0 within the
  snapshot (header at 0, data from 1, footer last) and stamped with the snapshot's epoch, and a
  batch is cut at `max_batch_bytes`, as Kafka's RecordsSnapshotWriter and BatchAccumulator do
  (with a smaller default, see DEFAULT_MAX_BATCH_BYTES).
* `SnapshotFetchWriter`: a follower copies the leader's bytes, chunk by chunk from the
  FetchSnapshot responses, into the same `.part` name; each chunk must start where the last one
  ended. When the last byte arrives the file is validated, and only a valid one is renamed; a
  corrupt one is deleted and refused, so a bad transfer never becomes a snapshot.
* `SnapshotReader`: validates the whole file before it returns anything, then iterates the data
  records and serves raw chunks. `read_snapshot_chunk` serves FetchSnapshot without validating,
  because a leader answers many requests per snapshot and its own snapshots were validated when
  they were frozen or fetched.
* `SnapshotDirectory`: the complete snapshots of a directory as the Raft core reads them
  (`quorum.raft.interface.SnapshotStore`), listed once and kept in memory until `refresh()`.

Durability is the log's (design principle 4): nothing is called a snapshot until its bytes are
fsynced and its name is renamed durably, so after `kill -9` a snapshot is either complete or
absent, and a `.part` file left behind is removed by `clean_partial_snapshots` at start-up.
Complete snapshots are made read-only, as Kafka makes them.
"""

from __future__ import annotations

import contextlib
import logging
import os
import time
from collections.abc import Iterable, Iterator
from pathlib import Path

from quorum.log.atomic import fsync_directory, write_all
from quorum.log.errors import (
    CorruptSnapshotError,
    PositionOutOfRangeError,
    SnapshotChunkError,
    SnapshotError,
    SnapshotExistsError,
    SnapshotNotFoundError,
)
from quorum.log.snapshot_files import (
    DELETED_SUFFIX,
    PARTIAL_SUFFIX,
    SNAPSHOT_SUFFIX,
    SnapshotFile,
    SnapshotState,
    check_snapshot_id,
    clean_partial_snapshots,
    delete_snapshots_below,
    latest_snapshot,
    list_snapshots,
    parse_snapshot_name,
    partial_snapshot_path,
    snapshot_files,
    snapshot_path,
)
from quorum.log.snapshot_format import (
    SnapshotSummary,
    check_batch,
    footer_batch,
    header_batch,
    validate_snapshot,
    walk_file,
)
from quorum.raft.interface import OffsetAndEpoch
from quorum.wire.records import Compression, CorruptRecordError, Record, RecordBatch, build_values_batch

logger = logging.getLogger(__name__)

#: Where a batch is cut. Kafka's writers use 8 MiB (KafkaRaftClient.MAX_BATCH_SIZE_BYTES); a
#: Python reader decodes a whole batch into objects at once (about 4x its size in memory), and
#: the record encoder leaves its fast path past 8,192 records in a batch, so 1 MiB here: a
#: quarter of the write time and an eighth of the load's working set for metadata records, and
#: still well inside what Kafka's readers accept.
DEFAULT_MAX_BATCH_BYTES = 1 << 20
#: An upper bound on a small record's framing (length, attributes, deltas, null key, value
#: length, header count), used to keep a batch within `max_batch_bytes`.
_RECORD_OVERHEAD = 16
_READ_ONLY = 0o444


def _now_ms() -> int:
    return time.time_ns() // 1_000_000


def _create_partial(directory: Path, snapshot_id: OffsetAndEpoch) -> tuple[Path, Path, int]:
    """Open a new `.part` file for `snapshot_id`; refuses when the snapshot or a part file exists."""
    check_snapshot_id(snapshot_id)
    final = snapshot_path(directory, snapshot_id)
    partial = partial_snapshot_path(directory, snapshot_id)
    if final.exists():
        raise SnapshotExistsError(f"{final}: snapshot {snapshot_id} already exists")
    directory.mkdir(parents=True, exist_ok=True)
    try:
        fd = os.open(partial, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o644)
    except FileExistsError:
        raise SnapshotExistsError(
            f"{partial}: snapshot {snapshot_id} is already being written or fetched (or the file was left by a "
            "crash: clean_partial_snapshots removes it at start-up)"
        ) from None
    return final, partial, fd


def _publish(fd: int, size: int, partial: Path, final: Path) -> SnapshotSummary:
    """fsync, validate, make read-only, rename to the complete name, fsync the directory.

    The caller owns `fd` until this returns; on any failure the part file is removed. Closes `fd`.
    """
    try:
        os.fsync(fd)
        summary = validate_snapshot(fd, size, partial)
        os.fchmod(fd, _READ_ONLY)
        if final.exists():
            raise SnapshotExistsError(f"{final}: snapshot appeared while {partial.name} was being written")
        os.rename(partial, final)
    except BaseException:
        os.close(fd)
        with contextlib.suppress(FileNotFoundError):
            partial.unlink()
        raise
    os.close(fd)
    fsync_directory(final.parent)
    return summary


class _PartialFile:
    """The `.checkpoint.part` a snapshot is written or fetched into, and the two ways it ends short
    of a complete snapshot: given up (removed), or left by a crash (removed at the next start-up)."""

    partial_path: Path
    _fd: int
    _state: str  # "open", "failed", "closing", then "frozen" (written) or "complete" (fetched), or "aborted"

    def close_without_cleanup(self) -> None:
        """What `kill -9` leaves: the part file stays as it is, to be removed at the next start-up
        (`clean_partial_snapshots`) and never loaded. For crash tests and the simulator."""
        if self._state == "open":
            self._state = "aborted"
            with contextlib.suppress(OSError):
                os.close(self._fd)

    def abort(self) -> None:
        """Give up: close and remove the part file. Harmless once finished or aborted."""
        if self._state in ("frozen", "complete", "aborted"):
            return
        self._state = "aborted"
        with contextlib.suppress(OSError):
            os.close(self._fd)
        with contextlib.suppress(FileNotFoundError):
            self.partial_path.unlink()


class SnapshotWriter(_PartialFile):
    """Writes the local state machine's snapshot `snapshot_id`; see the module docstring.

    Use as a context manager: leaving the block without `freeze()` (or with an exception)
    aborts, removing the part file, as Kafka's writer does on close.
    """

    def __init__(
        self,
        directory: Path | str,
        snapshot_id: OffsetAndEpoch,
        last_contained_log_timestamp: int,
        *,
        compression: Compression | int = Compression.NONE,
        max_batch_bytes: int = DEFAULT_MAX_BATCH_BYTES,
        timestamp_ms: int | None = None,
        cluster_id: str | None = None,
    ) -> None:
        """Create `<id>.checkpoint.part` and write the header batch.

        `timestamp_ms` stamps every record (default: now), as Kafka stamps them with its clock.
        `cluster_id` goes into the header's ClusterId tag, for replicas that rejoin by FetchSnapshot.
        Raises SnapshotExistsError when the snapshot, or a part file for it, exists.
        """
        if max_batch_bytes < 1:
            raise ValueError(f"max_batch_bytes must be positive, not {max_batch_bytes}")
        self.directory = Path(directory)
        self.snapshot_id = snapshot_id
        self.compression = Compression(compression)
        self.max_batch_bytes = max_batch_bytes
        self._timestamp = _now_ms() if timestamp_ms is None else timestamp_ms
        self.path, self.partial_path, self._fd = _create_partial(self.directory, snapshot_id)
        self._size = 0
        self._next_offset = 1  # the header record is offset 0
        self._pending: list[bytes] = []
        self._pending_bytes = 0
        self._state = "open"
        try:
            self._write(header_batch(snapshot_id.epoch, last_contained_log_timestamp, self._timestamp, cluster_id))
        except BaseException:
            self.abort()
            raise

    def __repr__(self) -> str:
        return f"SnapshotWriter({str(self.partial_path)!r}, size={self._size}, state={self._state})"

    def __enter__(self) -> SnapshotWriter:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.abort()

    @property
    def size(self) -> int:
        """Bytes in the file so far (values still gathering into a batch are not counted)."""
        return self._size

    @property
    def frozen(self) -> bool:
        return self._state == "frozen"

    def append(self, values: Iterable[bytes]) -> None:
        """Add data records (already-encoded values, e.g. metadata record frames).

        Values gather into a batch that is written once it reaches `max_batch_bytes`, so one
        call may write several batches or none; a batch never splits a value.
        """
        self._check_open("append to")
        pending = self._pending
        limit = self.max_batch_bytes
        try:
            for value in values:
                cost = len(value) + _RECORD_OVERHEAD
                if pending and self._pending_bytes + cost > limit:
                    self._drain()
                pending.append(value)
                self._pending_bytes += cost
        except BaseException:
            self._state = "failed"
            raise

    def freeze(self) -> int:
        """Write the footer, make the snapshot durable and complete; returns its size in bytes.

        After a failure (a disk error, or validation finding the file corrupt) the part file is
        gone and the writer is closed.
        """
        self._check_open("freeze")
        try:
            self._drain()
            self._write(footer_batch(self._next_offset, self.snapshot_id.epoch, self._timestamp))
        except BaseException:
            self.abort()
            raise
        self._state = "closing"
        try:
            _publish(self._fd, self._size, self.partial_path, self.path)
        except BaseException:
            self._state = "aborted"
            raise
        self._state = "frozen"
        logger.info("%s: snapshot frozen, %d bytes", self.path, self._size)
        return self._size

    def _drain(self) -> None:
        """Write the gathered values as one batch."""
        if not self._pending:
            return
        base = self._next_offset
        self._write(build_values_batch(self._pending, base, self.snapshot_id.epoch, self._timestamp,
                                       self.compression))  # fmt: skip
        self._next_offset = base + len(self._pending)
        self._pending.clear()  # in place: `append` holds a reference to the list
        self._pending_bytes = 0

    def _write(self, data: bytes) -> None:
        try:
            write_all(self._fd, data)
        except BaseException:
            self._state = "failed"
            raise
        self._size += len(data)

    def _check_open(self, action: str) -> None:
        if self._state != "open":
            raise SnapshotError(f"cannot {action} {self.partial_path.name}: the writer is {self._state}")


class SnapshotFetchWriter(_PartialFile):
    """A follower's copy of the leader's snapshot `snapshot_id`, built from FetchSnapshot chunks.

    `position` is where the next request's Position must point. `append_chunk` takes each
    response's Position, UnalignedRecords and Size; the chunk that reaches Size completes the
    snapshot (validate, rename) or, when the bytes do not validate, deletes it and raises
    CorruptSnapshotError. Abort on a leader change or any error; a context manager aborts unless
    the snapshot completed.
    """

    def __init__(self, directory: Path | str, snapshot_id: OffsetAndEpoch) -> None:
        """Create `<id>.checkpoint.part`; SnapshotExistsError when the snapshot or a part file exists."""
        self.directory = Path(directory)
        self.snapshot_id = snapshot_id
        self.path, self.partial_path, self._fd = _create_partial(self.directory, snapshot_id)
        self._received = 0
        self._total: int | None = None
        self._state = "open"

    def __repr__(self) -> str:
        return (f"SnapshotFetchWriter({str(self.partial_path)!r}, position={self._received}, "
                f"size={self._total}, state={self._state})")  # fmt: skip

    def __enter__(self) -> SnapshotFetchWriter:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.abort()

    @property
    def position(self) -> int:
        """Bytes received so far: the Position of the next FetchSnapshot request."""
        return self._received

    @property
    def size(self) -> int | None:
        """The snapshot's size as the leader reported it; None before the first chunk."""
        return self._total

    @property
    def complete(self) -> bool:
        return self._state == "complete"

    def append_chunk(self, position: int, data: bytes | bytearray | memoryview, size: int) -> bool:
        """Write one response's bytes; returns True when the snapshot is complete and renamed.

        Raises SnapshotChunkError for a chunk that does not continue the file (nothing of it is
        written; the caller may abort or ask again from `position`), CorruptSnapshotError when
        the completed file fails validation (the part file is deleted).
        """
        if self._state != "open":
            raise SnapshotError(f"cannot append to {self.partial_path.name}: the fetch is {self._state}")
        length = len(memoryview(data).cast("B"))
        if size <= 0:
            raise SnapshotChunkError(f"{self.partial_path}: the leader reports a snapshot of {size} bytes")
        if self._total is not None and size != self._total:
            raise SnapshotChunkError(
                f"{self.partial_path}: the leader now reports {size} bytes, earlier {self._total}: not one snapshot"
            )
        if position != self._received:
            raise SnapshotChunkError(
                f"{self.partial_path}: chunk at position {position}, but {self._received} bytes were received; "
                f"the next chunk must start at {self._received}"
            )
        if position + length > size:
            raise SnapshotChunkError(
                f"{self.partial_path}: chunk of {length} bytes at position {position} runs past the size {size}"
            )
        self._total = size
        try:
            write_all(self._fd, data, position)
        except BaseException:
            self.abort()
            raise
        self._received += length
        if self._received < size:
            return False
        self._state = "closing"
        try:
            _publish(self._fd, size, self.partial_path, self.path)
        except CorruptSnapshotError as exc:
            self._state = "aborted"
            logger.error("%s; the fetched snapshot %s was deleted", exc, self.snapshot_id)
            raise
        except BaseException:
            self._state = "aborted"
            raise
        self._state = "complete"
        logger.info("%s: snapshot fetched, %d bytes", self.path, size)
        return True



def _read_chunk(fd: int, path: Path, size: int, position: int, max_bytes: int) -> bytes:
    """FetchSnapshot's Position/MaxBytes on an open snapshot.

    A position outside the file (Kafka: `position < 0 || position >= size`; KIP-630 words it
    "greater than the size", but a snapshot is never empty and Kafka refuses the end too) raises
    PositionOutOfRangeError. Up to `max_bytes` from there, cut anywhere: the follower
    reassembles the file, so chunks need not end on a batch.
    """
    if max_bytes < 0:
        raise ValueError(f"max_bytes must not be negative, not {max_bytes}")
    if not 0 <= position < size:
        raise PositionOutOfRangeError(path, position, size)
    wanted = min(max_bytes, size - position)
    data = os.pread(fd, wanted, position)
    if len(data) != wanted:
        raise CorruptSnapshotError(path, position + len(data), f"the file ends before its size {size}")
    return data


def _existing_snapshot_path(directory: Path | str, snapshot_id: OffsetAndEpoch) -> Path:
    """The path of `snapshot_id`; SnapshotNotFoundError for an id no snapshot can have."""
    try:
        return snapshot_path(directory, snapshot_id)
    except ValueError:
        raise SnapshotNotFoundError(f"{directory}: no snapshot {snapshot_id} (not a valid snapshot id)") from None


def read_snapshot_chunk(
    directory: Path | str, snapshot_id: OffsetAndEpoch, position: int, max_bytes: int
) -> tuple[bytes, int]:
    """The leader's answer to FetchSnapshot: (bytes from `position`, the snapshot's size).

    Raises SnapshotNotFoundError (SNAPSHOT_NOT_FOUND) when there is no complete snapshot with
    that id (a negative id from a request included), PositionOutOfRangeError
    (POSITION_OUT_OF_RANGE) for a position outside it.
    """
    path = _existing_snapshot_path(directory, snapshot_id)
    try:
        fd = os.open(path, os.O_RDONLY)
    except FileNotFoundError:
        raise SnapshotNotFoundError(f"{path}: no snapshot {snapshot_id}") from None
    try:
        size = os.fstat(fd).st_size
        return _read_chunk(fd, path, size, position, max_bytes), size
    finally:
        os.close(fd)


class SnapshotReader:
    """A complete snapshot, validated whole when opened (CorruptSnapshotError otherwise).

    Iterating yields the values of the data records, in order; `records()` yields them as
    `Record`s. Control records (header, footer, KRaft's) are not part of the state and are
    skipped, as Kafka's RecordsSnapshotReader skips them.
    """

    def __init__(self, path: Path | str) -> None:
        self.path = Path(path)
        found = parse_snapshot_name(self.path)
        if found is None or found.state is not SnapshotState.COMPLETE:
            raise ValueError(f"{self.path} is not a complete snapshot's name (<20 digits>-<10 digits>.checkpoint)")
        self.snapshot_id = found.snapshot_id
        try:
            self._fd = os.open(self.path, os.O_RDONLY)
        except FileNotFoundError:
            raise SnapshotNotFoundError(f"{self.path}: no snapshot {self.snapshot_id}") from None
        try:
            self._summary = validate_snapshot(self._fd, os.fstat(self._fd).st_size, self.path)
        except BaseException:
            os.close(self._fd)
            raise

    @classmethod
    def open(cls, directory: Path | str, snapshot_id: OffsetAndEpoch) -> SnapshotReader:
        """The snapshot `snapshot_id` in `directory`; SnapshotNotFoundError when there is none."""
        return cls(_existing_snapshot_path(directory, snapshot_id))

    def __repr__(self) -> str:
        return f"SnapshotReader({str(self.path)!r}, size={self.size})"

    def __enter__(self) -> SnapshotReader:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1

    @property
    def size(self) -> int:
        """The file's size in bytes: FetchSnapshot's Size."""
        return self._summary.size

    @property
    def last_contained_log_timestamp(self) -> int:
        """From the SnapshotHeaderRecord: the append time of the last log record in the snapshot."""
        return self._summary.last_contained_log_timestamp

    @property
    def header_version(self) -> int:
        return self._summary.header_version

    @property
    def cluster_id(self) -> str | None:
        """The committed cluster id the header carries (this project's tag 10595), None if absent."""
        return self._summary.cluster_id

    @property
    def batch_count(self) -> int:
        """Batches in the file, header and footer included."""
        return self._summary.batches

    @property
    def record_count(self) -> int:
        """Data records in the snapshot (from the batch headers)."""
        return self._summary.data_records

    def records(self) -> Iterator[Record]:
        """The data records, decoded a batch at a time (each batch's CRC checked again as it is
        read, so what is returned is what was written even if the file changed since opening)."""
        for batch in self._data_batches():
            try:
                records = batch.records()
            except CorruptRecordError as exc:
                raise CorruptSnapshotError(self.path, exc.position, exc.reason) from None
            yield from records

    def __iter__(self) -> Iterator[bytes]:
        """The data records' values (`RecordBatch.values`: no Record objects, a load reads a
        million), each batch's CRC checked again as it is read, as `records()` does."""
        for batch in self._data_batches():
            yield from self._batch_values(batch)

    def values(self) -> list[bytes]:
        """All the data records' values, as iterating gives them, in one list: what a load reads
        before it changes anything, without a generator step per value."""
        values: list[bytes] = []
        for batch in self._data_batches():
            values += self._batch_values(batch)
        return values

    def _batch_values(self, batch: RecordBatch) -> list[bytes]:
        try:
            values = batch.values()
        except CorruptRecordError as exc:
            raise CorruptSnapshotError(self.path, exc.position, exc.reason) from None
        if None in values:
            offset = batch.records()[values.index(None)].offset
            raise CorruptSnapshotError(self.path, None, f"the record at offset {offset} has no value")
        return values  # type: ignore[return-value]  # no None in it

    def read_chunk(self, position: int, max_bytes: int) -> bytes:
        """Raw bytes for FetchSnapshot; see `read_snapshot_chunk`."""
        self._check_open()
        return _read_chunk(self._fd, self.path, self.size, position, max_bytes)

    def _data_batches(self) -> Iterator[RecordBatch]:
        self._check_open()
        for batch in walk_file(self._fd, self.size, self.path):
            check_batch(batch, self.path)
            if not batch.is_control:
                yield batch

    def _check_open(self) -> None:
        if self._fd < 0:
            raise SnapshotError(f"{self.path}: the reader is closed")


class SnapshotDirectory:
    """The complete snapshots of one partition directory: `quorum.raft.interface.SnapshotStore`.

    The Raft core asks for `latest_snapshot` on every Fetch it answers, so the listing is read
    from the directory once and kept in memory; the driver calls `refresh()` after it creates,
    fetches or deletes a snapshot (`delete_below` and `clean_partial` refresh by themselves).
    Only `.checkpoint` files count: a `.part` being written or fetched is never listed. Sizes are
    cached too, which is safe because a complete snapshot never changes (it is made read-only).
    """

    def __init__(self, directory: Path | str) -> None:
        self.directory = Path(directory)
        self._ids: tuple[OffsetAndEpoch, ...] = ()
        self._sizes: dict[OffsetAndEpoch, int] = {}
        self.refresh()

    def __repr__(self) -> str:
        return f"SnapshotDirectory({str(self.directory)!r}, snapshots={list(self._ids)})"

    def __contains__(self, snapshot_id: object) -> bool:
        return snapshot_id in self._sizes

    def __len__(self) -> int:
        return len(self._ids)

    def refresh(self) -> None:
        """Read the listing again from the directory (after a snapshot was frozen, fetched or deleted)."""
        sizes: dict[OffsetAndEpoch, int] = {}
        for snapshot_id in list_snapshots(self.directory):  # oldest first
            with contextlib.suppress(FileNotFoundError):  # deleted while we listed: not a snapshot any more
                sizes[snapshot_id] = snapshot_path(self.directory, snapshot_id).stat().st_size
        self._ids = tuple(sizes)
        self._sizes = sizes

    @property
    def snapshots(self) -> tuple[OffsetAndEpoch, ...]:
        """The complete snapshots' ids, oldest first (Kafka's order: epoch, then end offset)."""
        return self._ids

    def snapshot_ids(self) -> tuple[OffsetAndEpoch, ...]:
        """SnapshotStore's view of `snapshots`."""
        return self._ids

    def path(self, snapshot_id: OffsetAndEpoch) -> Path:
        """Where the complete snapshot `snapshot_id` lives (whether or not it exists)."""
        return snapshot_path(self.directory, snapshot_id)

    # -- SnapshotStore ---------------------------------------------------------------------------

    def earliest_snapshot(self) -> OffsetAndEpoch | None:
        """The oldest complete snapshot, None when there is none."""
        return self._ids[0] if self._ids else None

    def latest_snapshot(self) -> OffsetAndEpoch | None:
        """The newest complete snapshot, None when there is none."""
        return self._ids[-1] if self._ids else None

    def snapshot_size(self, snapshot_id: OffsetAndEpoch) -> int | None:
        """The size in bytes of a listed snapshot, None for any other id."""
        return self._sizes.get(snapshot_id)

    def read_snapshot(self, snapshot_id: OffsetAndEpoch, position: int, max_bytes: int) -> bytes:
        """Up to `max_bytes` of a listed snapshot from `position`: FetchSnapshot's answer.

        Raises SnapshotNotFoundError (SNAPSHOT_NOT_FOUND) for an id that is not listed, or whose
        file has gone since the last refresh, and PositionOutOfRangeError (POSITION_OUT_OF_RANGE)
        for a position outside the snapshot.
        """
        if snapshot_id not in self._sizes:
            raise SnapshotNotFoundError(f"{self.directory}: no complete snapshot {snapshot_id}")
        return read_snapshot_chunk(self.directory, snapshot_id, position, max_bytes)[0]

    # -- what the drivers do to the directory ----------------------------------------------------

    def delete_below(self, offset: int) -> list[OffsetAndEpoch]:
        """Delete the snapshots whose end offset is below `offset` (the new log start offset,
        KIP-630 "When to Delete Snapshots"), durably, and refresh; returns the deleted ids."""
        try:
            return delete_snapshots_below(self.directory, offset)
        finally:
            self.refresh()

    def clean_partial(self) -> list[Path]:
        """Delete the `.part` (and `.deleted`) files a crash left; returns their paths. Call at
        start-up, before any snapshot is written or fetched."""
        try:
            return clean_partial_snapshots(self.directory)
        finally:
            self.refresh()


__all__ = [
    "DEFAULT_MAX_BATCH_BYTES",
    "DELETED_SUFFIX",
    "PARTIAL_SUFFIX",
    "SNAPSHOT_SUFFIX",
    "CorruptSnapshotError",
    "PositionOutOfRangeError",
    "SnapshotChunkError",
    "SnapshotDirectory",
    "SnapshotError",
    "SnapshotExistsError",
    "SnapshotFetchWriter",
    "SnapshotFile",
    "SnapshotNotFoundError",
    "SnapshotReader",
    "SnapshotState",
    "SnapshotWriter",
    "clean_partial_snapshots",
    "delete_snapshots_below",
    "latest_snapshot",
    "list_snapshots",
    "parse_snapshot_name",
    "partial_snapshot_path",
    "read_snapshot_chunk",
    "snapshot_files",
    "snapshot_path",
]
