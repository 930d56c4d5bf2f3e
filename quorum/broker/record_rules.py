"""The leader's rules for each record of a produced batch, and KIP-467's per-record errors.

Kafka's LogValidator refuses a batch whose records break a topic's rules, and since KIP-467 (Produce
v8) names each record at fault (RecordErrors: its index in the batch and why) beside the
partition's error, so that a client fails exactly those records; librdkafka fails them with the
partition's error and the rest of the batch with its own `_INVALID_DIFFERENT_RECORD`. The rules a
v2 batch can break, in Kafka's order for each record (its validateRecord; the others apply to
older formats only):

* a record without a key on a topic whose `cleanup.policy` includes `compact` (INVALID_RECORD);
* under `message.timestamp.type=CreateTime`, a timestamp other than -1 more than
  `message.timestamp.before.max.ms` before the broker's clock or more than
  `message.timestamp.after.max.ms` after it (KIP-937; INVALID_TIMESTAMP);
* a batch the producer marked LogAppendTime, unless the topic is CreateTime and the record's
  timestamp (the batch's maxTimestamp) is in range (INVALID_TIMESTAMP: only the broker stamps that).

Every record is checked, and the partition's error is INVALID_TIMESTAMP when any record broke a
timestamp rule, else INVALID_RECORD, with Kafka's messages (its RecordValidationException).

Deciding costs nothing more than the walk that validated the batch (`RecordsWalk`: the timestamp
delta range, the first record without a key): only a batch that may break a rule is decoded, to
find each record at fault. Pure: the caller passes the clock.
"""

from __future__ import annotations

from dataclasses import dataclass

from quorum.broker.log_config import LogConfig
from quorum.wire.errors import ErrorCode
from quorum.wire.records import Record, RecordBatch, RecordsWalk, TimestampType

NO_TIMESTAMP = -1
"""Kafka's RecordBatch.NO_TIMESTAMP: a record without a timestamp, which no bound refuses."""
SHOWN_ERRORS = 3
"""Kafka's INVALID_RECORD message shows at most the first three record errors."""


@dataclass(frozen=True, slots=True)
class RecordErrors:
    """A batch refused for some of its records: the partition's error and message, and each record
    at fault as (index in the batch, why), in index order (librdkafka walks them in step with the
    batch's messages)."""

    code: ErrorCode
    message: str
    records: tuple[tuple[int, str], ...]


def _window(config: LogConfig, now_ms: int) -> tuple[int | None, int | None]:
    """The lowest and highest CreateTime timestamp the topic takes now (None: no bound)."""
    before, after = config.timestamp_before_max_ms, config.timestamp_after_max_ms
    return (None if before is None else now_ms - before), (None if after is None else now_ms + after)


def _may_break(batch: RecordBatch, walk: RecordsWalk, config: LogConfig, now_ms: int) -> bool:
    """Whether any record may break a rule, from the batch header and the walk alone."""
    if config.compacted and walk.first_keyless >= 0:
        return True
    if batch.timestamp_type is TimestampType.LOG_APPEND_TIME:
        return True
    if config.log_append_time:
        return False
    low, high = _window(config, now_ms)
    base = batch.base_timestamp
    return (low is not None and base + walk.min_timestamp_delta < low) or (
        high is not None and base + walk.max_timestamp_delta > high)


def _record_fault(record: Record, index: int, batch: RecordBatch, config: LogConfig, partition: str,
                  low: int | None, high: int | None) -> tuple[ErrorCode, str] | None:
    """Kafka's validateRecord for one record of a v2 batch: the key, then the timestamp."""
    if config.compacted and record.key is None:
        return ErrorCode.INVALID_RECORD, ("Compacted topic cannot accept message without key in topic partition "
                                          f"{partition}")
    timestamp = record.timestamp
    if not config.log_append_time and timestamp != NO_TIMESTAMP:
        if (low is not None and timestamp < low) or (high is not None and timestamp > high):
            shown_low = "-inf" if low is None else str(low)
            shown_high = "+inf" if high is None else str(high)
            return ErrorCode.INVALID_TIMESTAMP, (f"Timestamp {timestamp} of message with offset {index} is out of "
                                                 f"range. The timestamp should be within [{shown_low}, {shown_high}]")
    elif batch.timestamp_type is TimestampType.LOG_APPEND_TIME:
        return ErrorCode.INVALID_TIMESTAMP, (
            f"Invalid timestamp type in message DefaultRecord(offset={index}, timestamp={timestamp}, key="
            f"{_size(record.key)}, value={_size(record.value)}). Producer should not set timestamp type to "
            "LogAppendTime.")
    return None


def _size(data: bytes | None) -> str:
    return "null" if data is None else f"{len(data)} bytes"


def record_errors(batch: RecordBatch, walk: RecordsWalk, config: LogConfig, partition: str,
                  now_ms: int) -> RecordErrors | None:
    """Why `batch` (validated, its records walked into `walk`) breaks `config`'s record rules, or
    None when every record keeps them. `partition` is named in the messages as Kafka names it
    (`<topic>-<partition>`)."""
    if not _may_break(batch, walk, config, now_ms):
        return None
    low, high = _window(config, now_ms)
    faults: list[tuple[int, str]] = []
    timestamps = False
    for index, record in enumerate(batch.records()):
        fault = _record_fault(record, index, batch, config, partition, low, high)
        if fault is not None:
            timestamps = timestamps or fault[0] == ErrorCode.INVALID_TIMESTAMP
            faults.append((index, fault[1]))
    if not faults:
        return None
    if timestamps:
        return RecordErrors(ErrorCode.INVALID_TIMESTAMP,
                            "One or more records have been rejected due to invalid timestamp", tuple(faults))
    shown = ", ".join(f"RecordError(batchIndex={index}, message='{message}')"
                      for index, message in faults[:SHOWN_ERRORS])
    return RecordErrors(ErrorCode.INVALID_RECORD,
                        f"One or more records have been rejected due to {len(faults)} record errors in total, and "
                        f"only showing the first three errors at most: [{shown}]", tuple(faults))
