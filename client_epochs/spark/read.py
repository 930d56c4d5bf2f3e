"""The executor's half of the `kafka_epochs` Spark source: read one planned range, hand Spark Arrow batches.

A task reads [start, end) of one partition with confluent-kafka (librdkafka decodes the record
batches in C, which keeps the source close to the raw client's speed) and builds pyarrow
RecordBatches with Spark's Kafka schema plus `leaderEpoch` and `topicEpoch`: no Python Row objects.

The range is assigned with the plan's leader epoch (KIP-320), so librdkafka validates the position
with the current leader (OffsetForLeaderEpoch) and fetches with CurrentLeaderEpoch: a fenced or
stale leader makes it refresh metadata and fetch again from the current one, never hand back a
shorter log. librdkafka asks for metadata again from the broker it first reached, so the consumer is
bootstrapped from a broker whose metadata the driver accepted as current when it planned: a stale
broker (KAFKA-6262) naming a dead or former leader would hold the task there. A task that still gets
nothing for a while finds such a broker itself, refusing metadata older than the plan, and reopens
its consumer there.
`auto.offset.reset=error` keeps it from jumping anywhere on its own. A task that read its whole range
leaves its consumer to the next task of the partition on the same Python worker
(`client_epochs.spark.consumer_cache`, Spark's consumer cache), which reads on from its prefetch
when it starts where the last one ended. The task ends
only at `end`: when the range cannot be finished before the deadline it fails, naming the
partition and how far it got, and Spark runs it again; a task never returns a silent short read.
"""

from __future__ import annotations

import gc
import logging
import time
from array import array
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, Message
from confluent_kafka import TopicPartition as KafkaTopicPartition

from client_epochs.metadata_client import MetadataClient, MetadataUnavailableError, StaleMetadataError
from client_epochs.spark.consumer_cache import CONSUMERS, Idle, cache_key
from client_epochs.spark.planning import EARLIEST, Range
from quorum.wire.internal_metadata import InternalMetadata
from quorum.wire.sasl_client import ClientSecurity

log = logging.getLogger(__name__)

STALL_S = 10.0
"""Time without a record after which a task stops trusting its consumer's view of the leader."""

BATCH_ROWS = 20_000
"""Rows per Arrow batch handed to Spark: big enough to amortise the hand-over, small enough for memory."""

_HEADER = pa.struct([("key", pa.string()), ("value", pa.binary())])
_HEADERS = pa.list_(_HEADER)


def arrow_schema(include_headers: bool) -> pa.Schema:
    """Spark's Kafka source schema (headers only with includeHeaders), then leaderEpoch and topicEpoch."""
    fields = [
        ("key", pa.binary()),
        ("value", pa.binary()),
        ("topic", pa.string()),
        ("partition", pa.int32()),
        ("offset", pa.int64()),
        ("timestamp", pa.timestamp("us", tz="UTC")),
        ("timestampType", pa.int32()),
    ]
    if include_headers:
        fields.append(("headers", _HEADERS))
    fields += [("leaderEpoch", pa.int32()), ("topicEpoch", pa.int32())]
    return pa.schema(fields)


def spark_schema(include_headers: bool) -> str:
    """The same schema as Spark DDL."""
    headers = "headers array<struct<key: string, value: binary>>, " if include_headers else ""
    return (
        "key binary, value binary, topic string, partition int, offset long, timestamp timestamp, "
        f"timestampType int, {headers}leaderEpoch int, topicEpoch int"
    )


class RangeReadError(RuntimeError):
    """A task could not read its whole range: the partition, the offset reached and the end are named."""

    def __init__(self, rng: Range, position: int, reason: str) -> None:
        super().__init__(
            f"{rng.partition}: read offsets up to {position} of [{rng.start}, {rng.end}) "
            f"(leader epoch {rng.leader_epoch}): {reason}"
        )
        self.range = rng
        self.position = position


def consumer_config(bootstrap: str, client: Mapping[str, str]) -> dict[str, Any]:
    """A reader's confluent-kafka settings: the user's kafka.* options, then what the reader needs."""
    config: dict[str, Any] = {
        "bootstrap.servers": bootstrap,
        "group.id": "kafka-epochs-reader",
        "client.id": "kafka-epochs-reader",
        **client,
    }
    config.update(
        {
            "enable.auto.commit": False,
            "enable.auto.offset.store": False,
            "auto.offset.reset": "error",
            "enable.partition.eof": False,
        }
    )
    return config


def read_range(
    rng: Range,
    bootstrap: str,
    client: Mapping[str, str],
    *,
    include_headers: bool = False,
    fail_on_data_loss: bool = True,
    timeout_s: float = 120.0,
    stall_s: float = STALL_S,
) -> Iterator[pa.RecordBatch]:
    """Arrow batches of every record in `rng`, in offset order.

    The consumer is bootstrapped from the broker whose current metadata the driver planned with
    (`rng.bootstrap_from`), else from `bootstrap`. After `stall_s` without a record it is reopened where
    it got to, bootstrapped from a broker the task finds answering current metadata itself
    (`current_broker`: answers older than the range's epochs refused). `timeout_s` bounds the time
    without progress (Spark's kafkaConsumer.pollTimeoutMs): a leader killed mid-read is waited for that
    long, then RangeReadError. A start below the log start
    (retention) is RangeReadError too, unless `fail_on_data_loss` is false: then the read goes on from
    the log start.
    """
    schema = arrow_schema(include_headers)
    if rng.start != EARLIEST and rng.end <= rng.start:
        return
    entry = rng.bootstrap_from or bootstrap
    position = rng.start
    key = cache_key(bootstrap, client, rng.partition, rng.topic_epoch)
    consumer, messages, reassigned = _reused(CONSUMERS.take(key, time.monotonic()), rng)
    if consumer is None:
        consumer = _open(entry, client, rng, position)
    # Right after a re-assign librdkafka may still report where the previous assignment got to, until its
    # fetcher has stopped: that position ends the range (past control records) only once it is this
    # assignment's, said by a record delivered for it or a position of "none yet".
    own_position = not reassigned
    done = False
    leftover: list[Any] = []
    try:
        pending: list[Any] = []
        last_progress = time.monotonic()
        next_reopen = last_progress + stall_s
        while position < rng.end or position == EARLIEST:
            if not messages:
                with _collector_paused():
                    messages = consumer.consume(min(BATCH_ROWS, max(rng.end - max(position, 0), 1)), 1.0)
            got, messages = messages, []
            if got and _all_in_range(got, position, rng.end):
                # the common case, checked for the whole list at C speed: no error, all inside the range
                pending.extend(got)
                position = got[-1].offset() + 1
                own_position = True
                last_progress = time.monotonic()
                next_reopen = last_progress + stall_s
                got = []
            for i, message in enumerate(got):
                error = message.error()
                if error is not None:
                    position = _on_error(consumer, rng, position, error, fail_on_data_loss)
                    continue
                offset = message.offset()
                if offset < position:  # fetched for an earlier assignment of a reused consumer
                    continue
                if offset >= rng.end:
                    position = rng.end
                    leftover = got[i:]  # the next task of this partition may start here
                    break
                pending.append(message)
                position = offset + 1
                own_position = True
                last_progress = time.monotonic()
                next_reopen = last_progress + stall_s
            if len(pending) >= BATCH_ROWS:
                with _collector_paused():
                    batch = _batch(pending, schema, rng.topic_epoch, include_headers)
                yield batch
                pending = []
            if not got:
                fetched = _fetch_position(consumer, rng)
                if fetched < 0:
                    own_position = True
                elif own_position:
                    position = max(position, fetched)  # past control records
            now = time.monotonic()
            if position < rng.end and now - last_progress > timeout_s:
                raise RangeReadError(
                    rng,
                    position,
                    f"no record for {timeout_s:.0f} s from the partition's leader (consumer bootstrapped from {entry})",
                )
            if position < rng.end and now > next_reopen:
                found = current_broker(rng, bootstrap, client, timeout_s=min(stall_s, timeout_s))
                log.warning(
                    "%s: no record for %.0f s at offset %d from the consumer bootstrapped from %s "
                    "(leader epoch %d or later wanted); reopening it from %s",
                    rng.partition,
                    now - last_progress,
                    position,
                    entry,
                    rng.leader_epoch,
                    found or bootstrap,
                )
                consumer.close()
                entry = found or bootstrap
                consumer = _open(entry, client, rng, position)
                own_position = True
                next_reopen = time.monotonic() + stall_s
        if pending:
            with _collector_paused():
                batch = _batch(pending, schema, rng.topic_epoch, include_headers)
            yield batch
        done = True
    finally:
        if done:  # a consumer that read its whole range serves the partition's next task on this worker
            # paused while idle: no fetching into memory for a task that may never come (Spark's cached
            # consumers fetch only when polled); what it holds is kept and read on from where it stopped
            consumer.pause([_assignment(rng, rng.end)])
            CONSUMERS.give_back(key, Idle(consumer, rng.end, leftover), time.monotonic())
        else:
            consumer.close()


def _reused(idle: Idle | None, rng: Range) -> tuple[Consumer | None, list[Any], bool]:
    """A cached consumer for `rng`, the records it already holds for it, and whether it was re-assigned: when
    `rng` starts where its last range ended, it reads on as it was (its prefetch and leftover records are
    `rng`'s first); otherwise it is assigned `rng` afresh, at the plan's leader epoch."""
    if idle is None:
        return None, [], False
    if rng.start != EARLIEST and idle.next_offset == rng.start:
        idle.consumer.resume([_assignment(rng, rng.start)])
        return idle.consumer, list(idle.leftover), False
    idle.consumer.assign([_assignment(rng, rng.start)])
    idle.consumer.resume([_assignment(rng, rng.start)])
    return idle.consumer, [], True


def _open(entry: str, client: Mapping[str, str], rng: Range, position: int) -> Consumer:
    """A consumer bootstrapped from `entry`, assigned `rng`'s partition at `position` under the plan's
    leader epoch (KIP-320)."""
    consumer = Consumer(consumer_config(entry, client))
    consumer.assign([_assignment(rng, position)])
    return consumer


def _assignment(rng: Range, position: int) -> KafkaTopicPartition:
    """`rng`'s partition at `position` (EARLIEST: the log start), under the plan's leader epoch (KIP-320)
    when it has one (confluent-kafka takes no None for it)."""
    epoch = {"leader_epoch": rng.leader_epoch} if rng.leader_epoch >= 0 else {}
    return KafkaTopicPartition(
        rng.partition.topic, rng.partition.partition, OFFSET_BEGINNING if position == EARLIEST else position, **epoch
    )


def current_broker(rng: Range, bootstrap: str, client: Mapping[str, str], timeout_s: float) -> str:
    """A broker ("host:port") answering metadata no older than `rng`'s epochs, with a leader for its
    partition (KIP-232: an answer naming an older leader epoch is refused and the next broker asked),
    or "" when none did before `timeout_s`. Not the leader's address: a leader may itself answer old
    metadata, and librdkafka would believe it."""
    floor = {rng.partition: InternalMetadata(rng.topic_epoch, rng.leader_epoch, None)}
    try:
        with MetadataClient(
            bootstrap, client_id="kafka-epochs-reader", security=ClientSecurity.of_client_properties(client)
        ) as metadata:
            current = metadata.refresh_until_current([rng.partition.topic], floors=floor, timeout=timeout_s)
    except (OSError, StaleMetadataError, MetadataUnavailableError) as exc:
        log.warning("%s: no current leader known after %.0f s: %s", rng.partition, timeout_s, exc)
        return ""
    meta = current.partitions.get(rng.partition)
    return current.answered_by if meta is not None and meta.leader_id >= 0 else ""


def _on_error(consumer: Consumer, rng: Range, position: int, error: KafkaError, fail_on_data_loss: bool) -> int:
    """Out of range: data loss (or skip to the log start); fatal: fail the task; anything else: librdkafka retries."""
    if error.code() == KafkaError._AUTO_OFFSET_RESET or error.code() == KafkaError.OFFSET_OUT_OF_RANGE:
        if fail_on_data_loss:
            raise RangeReadError(
                rng,
                position,
                f"the leader no longer has the offset ({error.str()}); "
                "set failOnDataLoss=false to skip deleted records",
            )
        log.warning("%s: offset %d is gone (%s); reading on from the log start", rng.partition, position, error.str())
        consumer.assign([KafkaTopicPartition(rng.partition.topic, rng.partition.partition, OFFSET_BEGINNING)])
        return position
    if error.fatal() or error.code() == KafkaError._LOG_TRUNCATION:
        raise RangeReadError(rng, position, error.str())
    log.info("%s: %s (librdkafka retries)", rng.partition, error.str())
    return position


def _fetch_position(consumer: Consumer, rng: Range) -> int:
    [got] = consumer.position([KafkaTopicPartition(rng.partition.topic, rng.partition.partition)])
    return got.offset if got.offset >= 0 else -1


@contextmanager
def _collector_paused() -> Iterator[None]:
    """Python's cyclic garbage collector off while a consume or a batch allocates its tens of thousands of
    objects (messages, timestamp tuples, lists; none of them in a cycle): each allocation burst would
    otherwise set off collections that walk every object of the Python worker, which measured as a
    large share of the task's time. Never held across a yield, so Spark's own code runs with it on."""
    if not gc.isenabled():
        yield
        return
    gc.disable()
    try:
        yield
    finally:
        gc.enable()


def _all_in_range(got: list[Message], position: int, end: int) -> bool:
    """Whether every message of one consume is a record in [position, end) (a partition's offsets rise, so
    the first and the last decide), none an error: such a list is taken whole, without a Python step per
    record, which is most of what the read costs beside librdkafka."""
    return got[0].offset() >= position and got[-1].offset() < end and not any(map(Message.error, got))


def _batch(messages: list[Message], schema: pa.Schema, topic_epoch: int, include_headers: bool) -> pa.RecordBatch:
    """One Arrow batch from the consumed messages of one partition, column by column: each column is one
    pass of a Message method at C speed (`map`) and one Arrow conversion; the topic, partition and topic
    epoch are the same for every row and are repeated by Arrow, not per record in Python."""
    count = len(messages)
    timestamps = list(map(Message.timestamp, messages))  # (type, milliseconds) each
    stamps = [stamp for _, stamp in timestamps]
    kinds = [kind for kind, _ in timestamps]
    micros = pc.multiply(pa.array(stamps, pa.int64()), 1000)
    if min(stamps) < 0:  # librdkafka's -1: the record has no timestamp
        micros = pc.if_else(pc.less(micros, 0), pa.scalar(None, pa.int64()), micros)
    epochs = pa.array(list(map(Message.leader_epoch, messages)), pa.int32())
    first = messages[0]
    columns: dict[str, pa.Array] = {
        "key": pa.array(list(map(Message.key, messages)), pa.binary()),
        "value": pa.array(list(map(Message.value, messages)), pa.binary()),
        "topic": _repeated_string(first.topic(), count),
        "partition": pa.repeat(pa.scalar(first.partition(), pa.int32()), count),
        "offset": pa.array(list(map(Message.offset, messages)), pa.int64()),
        "timestamp": micros.cast(pa.timestamp("us", tz="UTC")),
        # librdkafka: 1 create time, 2 log append time; Spark's Kafka source: 0 and 1 (-1: none)
        "timestampType": pc.subtract(pa.array(kinds, pa.int32()), pa.scalar(1, pa.int32())),
        "leaderEpoch": epochs.fill_null(-1) if epochs.null_count else epochs,
        "topicEpoch": pa.repeat(pa.scalar(topic_epoch, pa.int32()), count),
    }
    if include_headers:
        columns["headers"] = pa.array(
            [[{"key": k, "value": v} for k, v in (m.headers() or [])] for m in messages], _HEADERS
        )
    return pa.RecordBatch.from_arrays([columns[f.name] for f in schema], schema=schema)


def _repeated_string(value: str, count: int) -> pa.Array:
    """`value` `count` times as an Arrow string column, built from its buffers (`pa.repeat` copies per row)."""
    raw = value.encode()  # a topic name: never empty
    offsets = array("i", range(0, (count + 1) * len(raw), len(raw)))
    return pa.Array.from_buffers(pa.string(), count, [None, pa.py_buffer(offsets), pa.py_buffer(raw * count)])
