"""How much each trigger reads and how it is cut into Spark tasks, sans-IO, by Spark's Kafka source's rules.

- `split_ranges`: `maxRecordsPerPartition` and `minPartitions` cut a Kafka partition's range into
  several tasks (Spark's KafkaOffsetRangeCalculator): first every range longer than
  maxRecordsPerPartition into ceil(size / max) pieces, then, while there are fewer tasks than
  minPartitions, the large ranges in proportion to their share of the batch. The pieces tile the
  range exactly, and each is read in full or its task fails (`client_epochs.spark.read`), so a split
  changes how many tasks read, never what is read.
- `TriggerPacing`: `minOffsetsPerTrigger` with `maxTriggerDelay` (PySpark's ReadMinRows): a trigger
  with fewer new records than the minimum plans no batch, unless the delay has passed since the last
  batch (Spark's KafkaMicroBatchStream.delayBatch).
- `offsets_behind`: the lag metrics Spark's Kafka source reports with each progress
  (min/max/avgOffsetsBehindLatest): how far each partition's latest offset is past the batch's end.

The clock is the caller's: `TriggerPacing.admit` takes the time as an argument.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace

from client_epochs.model import TopicPartition
from client_epochs.spark.planning import EARLIEST, Observed, PartitionOffset, Range


def split_ranges(
    tasks: Sequence[Range],
    min_partitions: int | None,
    max_records: int | None,
    log_starts: Mapping[TopicPartition, int] | None = None,
) -> list[Range]:
    """`tasks` cut by Spark's rules (module docstring); unchanged when neither option asks for a cut.

    A range starting at EARLIEST (a new partition) is cut from its log start in `log_starts` when it is
    there; otherwise its size is unknown and it stays one task, as does any range of one record.
    """
    known = log_starts or {}
    resolved = [
        replace(rng, start=known[rng.partition]) if rng.start == EARLIEST and rng.partition in known else rng
        for rng in tasks
    ]
    sizes = [_size(rng) for rng in resolved]
    too_big = max_records is not None and any(size > max_records for size in sizes)
    too_few = min_partitions is not None and len(tasks) < min_partitions
    if not too_big and not too_few:
        return list(tasks)
    out = resolved
    if max_records is not None:
        out = [piece for rng in out for piece in _divided(rng, -(-_size(rng) // max_records) if _size(rng) else 1)]
    if min_partitions is not None and len(out) < min_partitions:
        out = _spread(out, min_partitions)
    return out


def _size(rng: Range) -> int:
    return 0 if rng.start == EARLIEST else max(rng.end - rng.start, 0)


def _spread(tasks: list[Range], min_partitions: int) -> list[Range]:
    """Spark's minPartitions rule: ranges whose share of the batch rounds to one task stay whole; the
    others share the remaining tasks in proportion to their size."""
    total = sum(_size(rng) for rng in tasks)
    if total == 0:
        return tasks
    whole = [i for i, rng in enumerate(tasks) if _part_count(_size(rng), total, min_partitions) == 1]
    split_total = total - sum(_size(tasks[i]) for i in whole)
    split_min = max(min_partitions - len(whole), 1)
    out: list[Range] = []
    for i, rng in enumerate(tasks):
        parts = 1 if i in whole else _part_count(_size(rng), split_total, split_min)
        out += _divided(rng, parts)
    return out


def _part_count(size: int, total: int, parts: int) -> int:
    """Scala's max(round(size / total * parts), 1): halves round up."""
    return max(int(size / total * parts + 0.5), 1)


def _divided(rng: Range, parts: int) -> list[Range]:
    """`rng` in `parts` consecutive pieces, the remainder going to the later ones (Spark's getDividedPartition);
    empty pieces dropped."""
    if parts <= 1 or _size(rng) <= 1:
        return [rng]
    out, remaining, start = [], _size(rng), rng.start
    for part in range(parts):
        this = remaining // (parts - part)
        remaining -= this
        end = min(start + this, rng.end)
        if end > start:
            out.append(replace(rng, start=start, end=end))
        start = end
    return out


@dataclass(slots=True)
class TriggerPacing:
    """minOffsetsPerTrigger / maxTriggerDelay: whether a trigger plans a batch or waits for more records."""

    min_rows: int
    max_delay_ms: int
    last_batch_ms: int = 0
    """When the last batch was admitted; 0 at the start, as in Spark: the query's first trigger reads at once."""

    def admit(self, available: int, now_ms: int) -> bool:
        """True to plan a batch of the `available` new records now; False to plan none (the end stays the
        start) and ask again at the next trigger."""
        if now_ms - self.last_batch_ms < self.max_delay_ms and available < self.min_rows:
            return False
        self.last_batch_ms = now_ms
        return True


def available_rows(start: Mapping[TopicPartition, PartitionOffset], observed: Mapping[TopicPartition, Observed]) -> int:
    """New records past `start` in every observed partition (a partition new to `start`: all it holds)."""
    total = 0
    for tp, seen in observed.items():
        began = start.get(tp)
        first = seen.log_start if began is None or began.offset < 0 else max(began.offset, seen.log_start)
        total += max(seen.log_end - first, 0)
    return total


def offsets_behind(
    end: Mapping[TopicPartition, PartitionOffset], observed: Mapping[TopicPartition, Observed]
) -> dict[str, str]:
    """Spark's Kafka source metrics for a planned batch: min/max/avgOffsetsBehindLatest, the latest offset
    of each partition less the batch's end there, as Spark writes them (strings); empty before a first plan."""
    behind = [
        seen.log_end - end[tp].offset
        for tp, seen in sorted(observed.items())
        if tp in end and end[tp].offset >= 0 and end[tp].same_topic(seen.at(seen.log_end))
    ]
    if not behind:
        return {}
    return {
        "minOffsetsBehindLatest": str(min(behind)),
        "maxOffsetsBehindLatest": str(max(behind)),
        "avgOffsetsBehindLatest": str(sum(behind) / len(behind)),
    }
