"""An in-memory Raft log for the simulator and unit tests, with a disk's flushed/unflushed split.

It implements `quorum.raft.interface.RaftLog` plus the writes a driver performs (append,
truncate, flush), what a crash does to a disk (`crash`: whatever was not flushed is gone), and
KIP-630's snapshot side with the semantics of `quorum.log.log.Log` (read its docstrings):
`advance_start_offset`, `truncate_fully_and_start_at`, `set_snapshot_boundary` and the answers
an empty log gives from its snapshot boundary. Batches are kept as the bytes the core produced and
framed with `quorum.wire.records`, so the simulator exercises the same encoding as the node, and
`iter_batches` hands them to a state machine (`quorum.image.replay`) as `Log` does.

Every batch also carries a digest chained over the whole prefix it ends, so the invariant checker
can tell in O(log n) whether two replicas hold identical logs up to an offset. When the start
offset advances, the digest of the prefix before the first batch kept is remembered, so the
chain goes on unbroken. A log replaced by a fetched snapshot (`truncate_fully_and_start_at`)
cannot compute the digest of the prefix the snapshot stands for: the driver, which in the
simulator sees every replica, passes it (`prefix_digest`, e.g. the leader's `digest_at` at the
snapshot's end offset), or the digests of that log match no other until it is replaced again.
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right
from collections.abc import Iterator
from dataclasses import dataclass

from quorum.raft.interface import OffsetAndEpoch
from quorum.wire.records import RecordBatch, iter_batches

_UNDEFINED = OffsetAndEpoch(-1, -1)


class LogError(ValueError):
    """A write the log refuses: it would break offset contiguity or epoch order."""


@dataclass(frozen=True, slots=True)
class StoredBatch:
    base_offset: int
    next_offset: int
    epoch: int
    data: bytes
    digest: int  # identifies the log prefix that ends at next_offset (chained from the prefix digest)


class MemoryLog:
    """Batches in offset order; the first `flushed_batches` of them survive a crash.

    The start offset, the snapshot boundary and the prefix digest are durable as soon as they
    change, as `Log` writes its start offset before it answers: `crash` keeps them.
    """

    def __init__(self, start_offset: int = 0) -> None:
        self._start = start_offset
        self._batches: list[StoredBatch] = []
        self._bases: list[int] = []
        self._nexts: list[int] = []
        self._epochs: list[int] = []
        self._flushed = 0  # how many batches are durable
        self._last_epoch = -1  # of the last batch appended, even one below the start offset now (as Log's)
        self._snapshot: OffsetAndEpoch | None = None
        # The digest of the prefix that ends where the first batch begins (or, with no batch,
        # at the start offset); None when a fetched snapshot replaced it without one.
        self._prefix_offset = start_offset
        self._prefix_digest: int | None = 0
        self.version = 0
        """Bumped by every change (append, truncate, flush, crash, start offset, snapshot boundary): the
        invariant checker skips re-checking a node whose log, epoch, role and high watermark are as it last
        checked them."""

    # -- RaftLog -------------------------------------------------------------------------------

    @property
    def start_offset(self) -> int:
        return self._start

    @property
    def end_offset(self) -> int:
        return self._nexts[-1] if self._nexts else self._start

    @property
    def flushed_offset(self) -> int:
        return self._nexts[self._flushed - 1] if self._flushed else self._start

    def last_fetched_epoch(self) -> int:
        """Epoch of the last batch; of the snapshot boundary when the log is empty at its end
        offset (KIP-630); otherwise 0."""
        if self._epochs:
            return self._epochs[-1]
        snapshot = self._snapshot
        if snapshot is not None and snapshot.offset == self.end_offset:
            return snapshot.epoch
        return 0

    def end_offset_for_epoch(self, epoch: int) -> OffsetAndEpoch:
        """The largest epoch <= `epoch` and its end offset, (-1, -1) below every epoch; the
        snapshot boundary counts as the log's first epoch, as in `Log.end_offset_for_epoch`."""
        snapshot = self._snapshot
        if not self._epochs:
            if snapshot is None:
                return OffsetAndEpoch(self.end_offset, 0) if epoch >= 0 else _UNDEFINED
            return OffsetAndEpoch(self.end_offset, snapshot.epoch) if epoch >= snapshot.epoch >= 0 else _UNDEFINED
        last = self._epochs[-1]
        if epoch >= last:
            return OffsetAndEpoch(self.end_offset, last)
        index = bisect_right(self._epochs, epoch)  # first batch of a larger epoch
        if index == 0:
            if snapshot is not None and 0 <= snapshot.epoch <= epoch:
                return snapshot
            return _UNDEFINED
        return OffsetAndEpoch(self._bases[index], self._epochs[index - 1])

    def read(self, offset: int, max_bytes: int, upto: int | None = None) -> bytes:
        """Whole batches from `offset`, at least one; with `upto`, only batches starting below it.

        `offset` must be a batch boundary, or the start offset (which may be inside the first
        batch after `advance_start_offset`; that batch is returned whole, as `Log` does).
        """
        end = self.end_offset
        if self._start <= offset <= end and (offset == end or (upto is not None and offset >= upto)):
            return b""
        index = self._index_for_read(offset)
        parts = [self._batches[index].data]
        size = len(parts[0])
        for batch in self._batches[index + 1:]:
            if size + len(batch.data) > max_bytes or (upto is not None and batch.base_offset >= upto):
                break
            parts.append(batch.data)
            size += len(batch.data)
        return b"".join(parts)

    def _index_for_read(self, offset: int) -> int:
        if not self._start <= offset < self.end_offset:
            raise LogError(f"offset {offset} is outside the log [{self._start}, {self.end_offset}]")
        index = bisect_right(self._bases, offset) - 1
        if self._bases[index] != offset and offset != self._start:
            raise LogError(f"offset {offset} is not a batch boundary of this log")
        return index

    def iter_batches(self, from_offset: int | None = None, upto: int | None = None) -> Iterator[RecordBatch]:
        """The batches from the one holding `from_offset` (default: the start), below `upto`, as
        `Log.iter_batches` yields them; LogError for an offset outside the log."""
        offset = self._start if from_offset is None else from_offset
        if offset == self.end_offset and offset >= self._start:
            return
        if not self._start <= offset < self.end_offset:
            raise LogError(f"offset {offset} is outside the log [{self._start}, {self.end_offset}]")
        index = bisect_right(self._bases, offset) - 1
        while index < len(self._batches):  # sees appends made while it runs, as Log's does
            stored = self._batches[index]
            if upto is not None and stored.base_offset >= upto:
                return
            yield RecordBatch(stored.data)
            index += 1

    # -- writes --------------------------------------------------------------------------------

    def append(self, data: bytes) -> int:
        """Append whole batches that continue the log; they stay unflushed until `flush`."""
        self.version += 1
        iterator = iter_batches(data)
        for batch in iterator:
            base, epoch = batch.base_offset, batch.partition_leader_epoch
            if base != self.end_offset:
                raise LogError(f"batch at {base} does not continue the log ending at {self.end_offset}")
            if epoch < self._last_epoch:
                raise LogError(f"batch of epoch {epoch} after epoch {self._last_epoch}")
            previous = self._batches[-1].digest if self._batches else self._chain_start()
            raw = bytes(batch.raw)
            stored = StoredBatch(base, batch.next_offset, epoch, raw, hash((previous, base, epoch, batch.crc)))
            self._batches.append(stored)
            self._bases.append(base)
            self._nexts.append(stored.next_offset)
            self._epochs.append(epoch)
            self._last_epoch = epoch
        if iterator.truncated is not None:
            raise LogError("a partial batch was appended")
        return self.end_offset

    def truncate(self, offset: int) -> None:
        """Remove every batch at or after `offset`, which must be a batch boundary; never below
        the snapshot boundary, whose records are committed (as `Log.truncate_to` refuses)."""
        if offset >= self.end_offset:
            return
        if self._snapshot is not None and offset < self._snapshot.offset:
            raise LogError(f"cannot truncate to {offset}: below the end offset of the latest snapshot {self._snapshot}")
        index = bisect_left(self._bases, offset)
        if offset < self._start or index == len(self._bases) or self._bases[index] != offset:
            raise LogError(f"offset {offset} is not a batch boundary of this log")
        del self._batches[index:], self._bases[index:], self._nexts[index:], self._epochs[index:]
        self._flushed = min(self._flushed, index)
        self._last_epoch = self._epochs[-1] if self._epochs else -1
        self.version += 1

    def flush(self) -> int:
        """Make everything appended so far durable; returns the flushed offset."""
        self._flushed = len(self._batches)
        self.version += 1
        return self.flushed_offset

    def crash(self) -> None:
        """What kill -9 leaves: the flushed batches only (the start offset and boundary stay)."""
        index = self._flushed
        del self._batches[index:], self._bases[index:], self._nexts[index:], self._epochs[index:]
        # As Log's recovery, which rebuilds the last epoch from the records on disk: none left, none known.
        self._last_epoch = self._epochs[-1] if self._epochs else -1
        self.version += 1

    # -- the log start offset and snapshots (KIP-630) ------------------------------------------

    @property
    def snapshot_boundary(self) -> OffsetAndEpoch | None:
        """The latest snapshot's id as last given to `set_snapshot_boundary`, None before."""
        return self._snapshot

    def set_snapshot_boundary(self, snapshot_id: OffsetAndEpoch, *, prefix_digest: int | None = None) -> bool:
        """Tell the log its latest snapshot; True when the snapshot was ahead of the log, which
        was then truncated fully to start at its end offset (`Log.set_snapshot_boundary`'s rule:
        a higher epoch than the log's last, or the same epoch past its end). `prefix_digest` is
        for that case: see `truncate_fully_and_start_at`.

        Raises LogError when the snapshot ends below the log start offset.
        """
        if snapshot_id.offset < 0 or snapshot_id.epoch < 0:
            raise ValueError(f"invalid snapshot id {snapshot_id}")
        if snapshot_id.offset < self._start:
            raise LogError(f"the latest snapshot {snapshot_id} ends below the log start offset {self._start}: "
                           "the records in between are lost")  # fmt: skip
        self._snapshot = snapshot_id
        self.version += 1
        latest = max(self._epochs[-1] if self._epochs else -1, 0)
        empty_there = self._start == self.end_offset == snapshot_id.offset
        ahead = not empty_there and (
            snapshot_id.epoch > latest or (snapshot_id.epoch == latest and snapshot_id.offset > self.end_offset))
        if not ahead:
            return False
        self.truncate_fully_and_start_at(snapshot_id.offset, snapshot_id.epoch, prefix_digest=prefix_digest)
        return True

    def advance_start_offset(self, offset: int) -> bool:
        """Make `offset` the log start offset, dropping the batches wholly below it (the one
        holding it stays, as `Log` keeps its segment); False when the log already starts at or
        above it. Everything is flushed first when `offset` is past the flushed offset, so that
        the start offset is never durable ahead of the records it follows.
        """
        if offset > self.flushed_offset:  # first, as Log does: even an advance refused below flushes
            self.flush()
        if offset <= self._start:
            return False
        if offset > self.end_offset:
            raise LogError(f"cannot start the log at {offset}: past its end offset {self.end_offset} "
                           "(truncate_fully_and_start_at replaces the log)")  # fmt: skip
        keep = bisect_right(self._nexts, offset)  # batches ending at or below `offset` go
        if keep:
            self._prefix_offset = self._nexts[keep - 1]
            self._prefix_digest = self._batches[keep - 1].digest
            del self._batches[:keep], self._bases[:keep], self._nexts[:keep], self._epochs[:keep]
            self._flushed -= keep
        self._start = offset
        self.version += 1
        return True

    def truncate_fully_and_start_at(self, offset: int, epoch: int, *, prefix_digest: int | None = None) -> None:
        """Replace the whole log by an empty one starting at `offset`, with the snapshot boundary
        `(offset, epoch)` (a fetched snapshot beyond the log, as `Log.truncate_fully_and_start_at`).

        `prefix_digest` is the digest of the log prefix [0, offset) that the snapshot stands for;
        without it this log's digests stop matching other replicas' (`digest_at(offset)` is None).
        """
        if offset < 0 or epoch < 0:
            raise ValueError(f"invalid start ({offset}, {epoch})")
        self._batches.clear()
        self._bases.clear()
        self._nexts.clear()
        self._epochs.clear()
        self._flushed = 0
        self._last_epoch = -1
        self._start = offset
        self._snapshot = OffsetAndEpoch(offset, epoch)
        self._prefix_offset = offset
        self._prefix_digest = prefix_digest
        self.version += 1

    # -- inspection (tests, invariants) --------------------------------------------------------

    @property
    def batches(self) -> list[StoredBatch]:
        return self._batches

    def digest_at(self, offset: int, flushed_only: bool = False) -> int | None:
        """Digest of the prefix ending exactly at `offset`, or None if no batch ends there (or
        the prefix is unknown: a snapshot installed without its digest)."""
        if offset == self._prefix_offset:
            return self._prefix_digest
        index = bisect_left(self._nexts, offset)
        limit = self._flushed if flushed_only else len(self._nexts)
        if index >= limit or self._nexts[index] != offset:
            return None
        return self._batches[index].digest

    def batch_index_ending_at(self, offset: int) -> int | None:
        index = bisect_left(self._nexts, offset)
        if index < len(self._nexts) and self._nexts[index] == offset:
            return index
        return None

    def _chain_start(self) -> int:
        """The digest the first batch chains from: the prefix's, or for an unknown prefix a
        stand-in that no batch's digest is made of (a batch's CRC is never negative)."""
        if self._prefix_digest is not None:
            return self._prefix_digest
        return hash((-1, self._prefix_offset, -1, -1))
