"""An in-memory Raft log for the simulator and unit tests, with a disk's flushed/unflushed split.

It implements `quorum.raft.interface.RaftLog` plus the writes a driver performs (append,
truncate, flush) and what a crash does to a disk (`crash`: whatever was not flushed is gone).
Batches are kept as the bytes the core produced and framed with `quorum.wire.records`, so the
simulator exercises the same encoding as the node.

Every batch also carries a digest chained over the whole prefix it ends, so the invariant checker
can tell in O(log n) whether two replicas hold identical logs up to an offset.
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right
from dataclasses import dataclass

from quorum.raft.interface import OffsetAndEpoch
from quorum.wire.records import iter_batches


class LogError(ValueError):
    """A write the log refuses: it would break offset contiguity or epoch order."""


@dataclass(frozen=True, slots=True)
class StoredBatch:
    base_offset: int
    next_offset: int
    epoch: int
    data: bytes
    digest: int  # identifies the log prefix [start, next_offset)


class MemoryLog:
    """Batches in offset order; the first `flushed_batches` of them survive a crash."""

    def __init__(self, start_offset: int = 0) -> None:
        self._start = start_offset
        self._batches: list[StoredBatch] = []
        self._bases: list[int] = []
        self._nexts: list[int] = []
        self._epochs: list[int] = []
        self._flushed = 0  # how many batches are durable

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
        return self._epochs[-1] if self._epochs else 0

    def end_offset_for_epoch(self, epoch: int) -> OffsetAndEpoch:
        last = self.last_fetched_epoch()
        if epoch >= last:
            return OffsetAndEpoch(self.end_offset, last)
        index = bisect_right(self._epochs, epoch)  # first batch of a larger epoch
        if index == 0:
            return OffsetAndEpoch(-1, -1)
        return OffsetAndEpoch(self._bases[index], self._epochs[index - 1])

    def read(self, offset: int, max_bytes: int) -> bytes:
        index = bisect_left(self._bases, offset)
        if index == len(self._bases) or self._bases[index] != offset:
            if offset == self.end_offset:
                return b""
            raise LogError(f"offset {offset} is not a batch boundary of this log")
        parts = [self._batches[index].data]
        size = len(parts[0])
        for batch in self._batches[index + 1:]:
            if size + len(batch.data) > max_bytes:
                break
            parts.append(batch.data)
            size += len(batch.data)
        return b"".join(parts)

    # -- writes --------------------------------------------------------------------------------

    def append(self, data: bytes) -> int:
        """Append whole batches that continue the log; they stay unflushed until `flush`."""
        iterator = iter_batches(data)
        for batch in iterator:
            base, epoch = batch.base_offset, batch.partition_leader_epoch
            if base != self.end_offset:
                raise LogError(f"batch at {base} does not continue the log ending at {self.end_offset}")
            if epoch < self.last_fetched_epoch():
                raise LogError(f"batch of epoch {epoch} after epoch {self.last_fetched_epoch()}")
            previous = self._batches[-1].digest if self._batches else 0
            raw = bytes(batch.raw)
            stored = StoredBatch(base, batch.next_offset, epoch, raw, hash((previous, base, epoch, batch.crc)))
            self._batches.append(stored)
            self._bases.append(base)
            self._nexts.append(stored.next_offset)
            self._epochs.append(epoch)
        if iterator.truncated is not None:
            raise LogError("a partial batch was appended")
        return self.end_offset

    def truncate(self, offset: int) -> None:
        """Remove every batch at or after `offset`, which must be a batch boundary."""
        if offset >= self.end_offset:
            return
        index = bisect_left(self._bases, offset)
        if offset < self._start or index == len(self._bases) or self._bases[index] != offset:
            raise LogError(f"offset {offset} is not a batch boundary of this log")
        del self._batches[index:], self._bases[index:], self._nexts[index:], self._epochs[index:]
        self._flushed = min(self._flushed, index)

    def flush(self) -> int:
        """Make everything appended so far durable; returns the flushed offset."""
        self._flushed = len(self._batches)
        return self.flushed_offset

    def crash(self) -> None:
        """What kill -9 leaves: the flushed batches only."""
        index = self._flushed
        del self._batches[index:], self._bases[index:], self._nexts[index:], self._epochs[index:]

    # -- inspection (tests, invariants) --------------------------------------------------------

    @property
    def batches(self) -> list[StoredBatch]:
        return self._batches

    def digest_at(self, offset: int, flushed_only: bool = False) -> int | None:
        """Digest of the prefix ending exactly at `offset`, or None if no batch ends there."""
        if offset == self._start:
            return 0
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
