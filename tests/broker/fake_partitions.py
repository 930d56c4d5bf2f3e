"""An in-memory `ServedPartition` holding real v2 batches, for read-path tests that must not depend
on the write path's partition logs. It follows the contract in quorum.broker.partition_view."""

from __future__ import annotations

import uuid

from quorum.broker.log_answers import EpochEndOffset, OffsetOutOfRange, TimestampOffset
from quorum.wire.records import Record, RecordBatch, build_batch

NOW_MS = 1_763_700_000_000


class FakePartition:
    """Batches appended at the log end; the high watermark follows the log end unless held back."""

    def __init__(self, topic: str, partition: int = 0, topic_id: uuid.UUID | None = None, leader_epoch: int = 0,
                 is_leader: bool = True) -> None:
        self.topic = topic
        self.partition = partition
        self.topic_id = topic_id or uuid.uuid4()
        self.is_leader = is_leader
        self.leader_epoch = leader_epoch
        self.log_start_offset = 0
        self.remote = None  # not tiered
        self.batches: list[bytes] = []
        self._high_watermark: int | None = None
        self._last_stable_offset: int | None = None
        self._epoch_starts: list[tuple[int, int]] = []

    # -- writing (what the test does) ------------------------------------------------------------

    def append(self, count: int = 1, value_size: int = 20, timestamps: list[int] | None = None,
               epoch: int | None = None) -> bytes:
        """One batch of `count` records at the log end, stamped with `epoch` (the leader epoch)."""
        epoch = self.leader_epoch if epoch is None else epoch
        base = self.log_end_offset
        stamps = timestamps or [NOW_MS + base + i for i in range(count)]
        records = [Record(base + i, stamps[i], b"k%d" % (base + i), b"v%d-" % (base + i) + b"x" * value_size)
                   for i in range(count)]  # fmt: skip
        batch = build_batch(records, base_offset=base, partition_leader_epoch=epoch)
        if not self._epoch_starts or self._epoch_starts[-1][0] != epoch:
            self._epoch_starts.append((epoch, base))
        self.batches.append(batch)
        return batch

    def hold_high_watermark(self, offset: int | None) -> None:
        """Pin the high watermark (None: follow the log end again)."""
        self._high_watermark = offset

    def hold_last_stable_offset(self, offset: int | None) -> None:
        self._last_stable_offset = offset

    def delete_before(self, offset: int) -> None:
        """DeleteRecords: drop whole batches below `offset` and move the log start there."""
        self.batches = [b for b in self.batches if RecordBatch(b).next_offset > offset]
        self.log_start_offset = offset

    # -- the contract -----------------------------------------------------------------------------

    @property
    def local_log_start_offset(self) -> int:
        return self.log_start_offset

    @property
    def log_end_offset(self) -> int:
        return RecordBatch(self.batches[-1]).next_offset if self.batches else self.log_start_offset

    @property
    def high_watermark(self) -> int:
        return self.log_end_offset if self._high_watermark is None else self._high_watermark

    @property
    def last_stable_offset(self) -> int:
        return self.high_watermark if self._last_stable_offset is None else self._last_stable_offset

    def read_records(self, offset: int, max_bytes: int, upto: int) -> bytes:
        return self.read(offset, max_bytes, upto)

    def read(self, offset: int, max_bytes: int, upto: int) -> bytes:
        if offset < self.log_start_offset or offset > self.log_end_offset:
            raise OffsetOutOfRange(f"{self.topic}-{self.partition}: offset {offset}")
        out: list[bytes] = []
        size = 0
        for batch in self.batches:
            header = RecordBatch(batch)
            if header.last_offset < offset:
                continue
            if header.last_offset >= upto:
                break
            if out and size + len(batch) > max_bytes:
                break
            out.append(batch)
            size += len(batch)
            if size >= max_bytes:
                break
        return b"".join(out)

    def end_offset_for_epoch(self, leader_epoch: int) -> EpochEndOffset:
        starts = self._epoch_starts
        for i in range(len(starts) - 1, -1, -1):
            epoch, _ = starts[i]
            if epoch <= leader_epoch:
                end = starts[i + 1][1] if i + 1 < len(starts) else self.log_end_offset
                return EpochEndOffset(epoch, end)
        return EpochEndOffset(-1, -1)

    def _records(self) -> list[Record]:
        return [record for batch in self.batches for record in RecordBatch(batch)]

    def offset_for_timestamp(self, timestamp: int) -> TimestampOffset | None:
        found = next((r for r in self._records() if r.timestamp >= timestamp), None)
        return None if found is None else TimestampOffset(found.timestamp, found.offset)

    def max_timestamp(self) -> TimestampOffset | None:
        records = self._records()
        if not records:
            return None
        best = max(records, key=lambda r: (r.timestamp, -r.offset))
        return TimestampOffset(best.timestamp, best.offset)


class FakeLookup:
    """Partitions by (name, index) and (topic id, index)."""

    def __init__(self, *partitions: FakePartition) -> None:
        self.partitions = list(partitions)

    def add(self, partition: FakePartition) -> FakePartition:
        self.partitions.append(partition)
        return partition

    def get(self, topic: str, partition: int) -> FakePartition | None:
        return next((p for p in self.partitions if p.topic == topic and p.partition == partition), None)

    def get_by_id(self, topic_id: uuid.UUID, partition: int) -> FakePartition | None:
        return next((p for p in self.partitions if p.topic_id == topic_id and p.partition == partition), None)
