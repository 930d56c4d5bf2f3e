"""Idempotent producers on one partition: Kafka's ProducerStateManager, sans-IO.

For each producer id the partition remembers the producer's epoch and its last five batches
(first and last sequence, first and last offset). A batch from an idempotent producer is then:

* a duplicate when it has the epoch and exactly the sequence range of one of those five: the
  producer retried a batch that was written, and gets the original offsets back, nothing
  written twice (the client keeps at most five requests in flight, hence five);
* refused with INVALID_PRODUCER_EPOCH when its epoch is older than the producer's;
* refused with OUT_OF_ORDER_SEQUENCE_NUMBER when its first sequence does not follow the last
  one (a gap: something in between was lost), or when a new epoch does not start at 0;
* accepted with any sequence when the partition knows nothing of the producer (Kafka's rule
  since retention or DeleteRecords may have removed every batch of it);
* refused with KAFKA_STORAGE_ERROR (retriable, nothing written) when this replica failed to write
  an earlier batch of the producer's epoch (`note_failed_append`) and this one is not that batch
  again. Kafka never answers such a batch: its failed log dir is offline. Answering it
  OUT_OF_ORDER_SEQUENCE_NUMBER instead makes librdkafka bump the producer's epoch for every
  partition and renumber the retries queued there, and a retry that its old leader had written
  was then written again under the new epoch (issue 19's soak: one record twice after a full disk).

Sequences wrap from 2^31-1 to 0, as Kafka's do. The state is rebuilt at open by `replay`ing the
log's batch headers (no checks: the log holds only what was accepted). Only a log that does not
hold the records its producers wrote needs Kafka's `<offset>.snapshot` file: a follower that
started from a remote tier (`Partition.start_at`, which writes the leader's snapshot there) loads
it (`load_snapshot`) and replays its own batches on top; a snapshot keeps each producer's last
batch only, as Kafka's does.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass, field

from quorum.wire.errors import ErrorCode
from quorum.wire.producer_snapshot import ProducerSnapshotEntry

#: Batches remembered per producer, Kafka's ProducerStateEntry.NUM_BATCHES_TO_RETAIN.
BATCHES_TO_RETAIN = 5
NO_EPOCH = -1
_INT32_MAX = 2**31 - 1


def last_sequence(base_sequence: int, last_offset_delta: int) -> int:
    """The batch's last sequence, wrapping past 2^31-1 as Kafka's incrementSequence does."""
    if base_sequence > _INT32_MAX - last_offset_delta:
        return last_offset_delta - (_INT32_MAX - base_sequence) - 1
    return base_sequence + last_offset_delta


def in_sequence(last: int, next_first: int) -> bool:
    return next_first == last + 1 or (next_first == 0 and last == _INT32_MAX)


@dataclass(frozen=True, slots=True)
class BatchMetadata:
    """One appended batch of a producer: its sequences, offsets and largest timestamp."""

    first_sequence: int
    last_sequence: int
    first_offset: int
    last_offset: int
    timestamp: int


@dataclass(slots=True)
class ProducerEntry:
    producer_id: int
    epoch: int = NO_EPOCH
    batches: deque[BatchMetadata] = field(default_factory=lambda: deque(maxlen=BATCHES_TO_RETAIN))
    last_timestamp: int = -1

    @property
    def last_seq(self) -> int | None:
        return self.batches[-1].last_sequence if self.batches else None


class ProducerStateError(Exception):
    """A batch the producer state refuses; `code` is the Kafka error to answer with."""

    def __init__(self, code: ErrorCode, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


class ProducerStateManager:
    """Producer id -> ProducerEntry for one partition; see the module docstring for the rules."""

    def __init__(self, partition: str = "") -> None:
        self.partition = partition  # for messages only
        self._producers: dict[int, ProducerEntry] = {}
        self._failed: dict[int, tuple[int, int]] = {}
        """producer id -> (epoch, first sequence) of its batch this replica failed to write."""

    def __len__(self) -> int:
        return len(self._producers)

    def entry(self, producer_id: int) -> ProducerEntry | None:
        return self._producers.get(producer_id)

    def check(self, producer_id: int, epoch: int, first_seq: int, last_seq: int) -> BatchMetadata | None:
        """Before a leader appends a batch of `producer_id`: the original batch when this one is a
        duplicate, None when it may be appended; raises ProducerStateError when it is refused."""
        entry = self._producers.get(producer_id)
        if entry is not None and epoch == entry.epoch:
            for batch in entry.batches:
                if batch.first_sequence == first_seq and batch.last_sequence == last_seq:
                    return batch
        failed = self._failed.get(producer_id)
        if failed is not None and failed[0] == epoch and failed[1] != first_seq:
            raise ProducerStateError(
                ErrorCode.KAFKA_STORAGE_ERROR,
                f"producer {producer_id} epoch {epoch}: sequence {first_seq} comes after sequence {failed[1]}, "
                f"which {self.partition} failed to write; the producer sends that again first",
            )
        if entry is None or entry.epoch == NO_EPOCH:
            return None
        if epoch < entry.epoch:
            raise ProducerStateError(
                ErrorCode.INVALID_PRODUCER_EPOCH,
                f"producer {producer_id} epoch {epoch} is older than its epoch {entry.epoch} on {self.partition}",
            )
        if epoch > entry.epoch:
            if first_seq != 0:
                raise ProducerStateError(
                    ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER,
                    f"producer {producer_id} starts epoch {epoch} at sequence {first_seq}, not 0, on {self.partition}",
                )
            return None
        last = entry.last_seq
        if last is not None and not in_sequence(last, first_seq):
            raise ProducerStateError(
                ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER,
                f"producer {producer_id} epoch {epoch}: sequence {first_seq} does not follow {last} "
                f"on {self.partition}",
            )
        return None

    def note_failed_append(self, producer_id: int, epoch: int, first_seq: int) -> None:
        """A batch that passed `check` could not be written (the disk failed under it): until the
        producer sends it again, or a later epoch, its batches behind it are refused as retriable."""
        self._failed[producer_id] = (epoch, first_seq)

    def update(self, producer_id: int, epoch: int, first_seq: int, last_seq: int, first_offset: int,
               last_offset: int, timestamp: int) -> None:
        """Record an appended batch (after `check`, or unchecked when replaying the log)."""
        self._failed.pop(producer_id, None)
        entry = self._producers.get(producer_id)
        if entry is None:
            entry = self._producers[producer_id] = ProducerEntry(producer_id)
        if epoch != entry.epoch:
            entry.batches.clear()
            entry.epoch = epoch
        entry.batches.append(BatchMetadata(first_seq, last_seq, first_offset, last_offset, timestamp))
        entry.last_timestamp = max(entry.last_timestamp, timestamp)

    def replay(self, producer_id: int, epoch: int, base_sequence: int, last_offset_delta: int, base_offset: int,
               max_timestamp: int) -> None:
        """Rebuild from a batch header read back from the log."""
        if producer_id < 0:
            return
        self.update(producer_id, epoch, base_sequence, last_sequence(base_sequence, last_offset_delta), base_offset,
                    base_offset + last_offset_delta, max_timestamp)

    def expire(self, now_ms: int, expiration_ms: int) -> int:
        """Forget producers idle (by their batches' timestamps) for more than `expiration_ms`
        (Kafka's `producer.id.expiration.ms`); returns how many."""
        stale = [pid for pid, entry in self._producers.items() if now_ms - entry.last_timestamp > expiration_ms]
        for pid in stale:
            del self._producers[pid]
            self._failed.pop(pid, None)
        return len(stale)

    def clear(self) -> None:
        self._producers.clear()
        self._failed.clear()

    def snapshot(self) -> list[ProducerSnapshotEntry]:
        """Each producer's last batch, as Kafka's producer snapshot keeps it."""
        entries = []
        for producer_id, entry in sorted(self._producers.items()):
            if not entry.batches:
                continue
            last = entry.batches[-1]
            entries.append(ProducerSnapshotEntry(producer_id, entry.epoch, last.last_sequence, last.last_offset,
                                                 last.last_offset - last.first_offset, last.timestamp))
        return entries

    def load_snapshot(self, entries: Iterable[ProducerSnapshotEntry]) -> None:
        """Replace the state by a snapshot's (a replica starting above offset 0, tiered storage)."""
        self.clear()
        for e in entries:
            first_seq = e.last_sequence - e.offset_delta
            if first_seq < 0:
                first_seq += _INT32_MAX + 1
            self.update(e.producer_id, e.producer_epoch, first_seq, e.last_sequence, e.last_offset - e.offset_delta,
                        e.last_offset, e.timestamp)
