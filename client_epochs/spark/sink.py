"""`kafka_epochs` as a sink: `df.writeStream.format("kafka_epochs")` and `df.write.format("kafka_epochs")`.

    (frame.writeStream.format("kafka_epochs").option("kafka.bootstrap.servers", "127.0.0.1:9092")
     .option("topic", "copy").option("checkpointLocation", "/tmp/ck").start())

Spark's Kafka sink options and columns (`client_epochs.spark.sink_options`), exactly once without
transactions where Spark's own sink is at least once:

- each task writes with its own idempotent acks=all confluent-kafka producer, every record stamped
  with its origin (query id, batch id, Spark partition, sequence: `client_epochs.spark.stamps`);
- before its first record to a topic, a streaming task reads the tail of that topic's partitions for
  its own stamps and does not write again what an earlier attempt of it wrote (a task retry, an
  executor lost, the query restarted from its checkpoint); the rule, and the window it leaves, are in
  `client_epochs.spark.stamps`. A batch write (`df.write`) is one job: only a task attempt after the
  first can find its own records, so only such a one reads the tail (PySpark's TaskContext has no
  stage attempt number: a write task re-run by a new attempt of its stage, after a shuffle fetch
  failure, counts as a first attempt and does not read the tail);
- a task returns only once every record it sent is acknowledged (it fails, after flushing, when one
  is refused or not acknowledged within `deliveryTimeoutMs`), so Spark commits a micro-batch only
  after every task's records are on the target.

The executors need this package, confluent-kafka and pyarrow (a Python Data Source is not a jar):
see the README's "A pipeline on a Spark cluster".
"""

from __future__ import annotations

import logging
import time
import uuid
from collections import deque
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from itertools import repeat
from operator import length_hint
from typing import Any

import pyarrow as pa
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer
from confluent_kafka import TopicPartition as KafkaTopicPartition
from pyspark.sql.datasource import DataSourceArrowWriter, DataSourceStreamArrowWriter, WriterCommitMessage

from client_epochs.metadata_client import MetadataClient, MetadataUnavailableError
from client_epochs.spark.sink_options import Columns, SinkOptionError, SinkOptions, check_columns, parse_sink_options
from client_epochs.spark.stamps import (
    ORIGIN_HEADER,
    Header,
    ScannedRecord,
    TailScan,
    TaskOrigin,
    Written,
    stamped,
)
from quorum.wire.errors import ErrorCode
from quorum.wire.sasl_client import ClientSecurity

log = logging.getLogger(__name__)

QUERY_ID_PROPERTY = "sql.streaming.queryId"
"""The local property Spark sets on a streaming query's jobs: the query's id, kept in its checkpoint."""
BATCH_ID_PROPERTY = "streaming.sql.batchId"
"""The local property Spark sets on a micro-batch's jobs: its batch id."""
POLL_EVERY = 1000
"""Records produced between two serves of the delivery callbacks."""
FIRST_SCAN_STEP = 64
"""The first tail read of a partition, in records: the query's previous batch is usually right there."""


class SinkWriteError(RuntimeError):
    """A task could not get every record it sent acknowledged (or could not read the target's tail): the
    task fails and Spark runs it again; the message names the topic, partition and reason."""


@dataclass
class SinkCommit(WriterCommitMessage):
    """What one task did: records written (acknowledged), skipped (an earlier attempt wrote them), and
    target records its tail scan read."""

    task: int
    attempt: int
    written: int
    skipped: int
    scanned: int


def producer_config(options: SinkOptions) -> dict[str, Any]:
    """A task's producer: the user's kafka.* settings, then what the exactly-once rule rests on. Keyed
    records go where the Java client (and so Spark's Kafka sink) puts them: murmur2 of the key."""
    return {
        "bootstrap.servers": options.bootstrap,
        "client.id": "kafka-epochs-sink",
        "linger.ms": 5,
        "partitioner": "murmur2_random",
        "delivery.timeout.ms": options.delivery_timeout_ms,
        **options.producer,
        "acks": "all",
        "enable.idempotence": True,
        # a report (a callback and a Message object) only for a record that failed: a task counts the
        # rest as acknowledged once flush() leaves nothing in flight, at a fraction of the CPU per record
        "delivery.report.only.error": True,
    }


def _fields(schema: Any) -> list[tuple[str, str]]:
    return [(f.name, f.dataType.simpleString()) for f in schema.fields]


def _checked(options: Mapping[str, str], schema: Any) -> tuple[SinkOptions, Columns]:
    """Options and columns checked on the driver; the producer settings tried once, so that a name
    librdkafka does not know fails the query at its start, named, instead of every task."""
    parsed = parse_sink_options(options)
    columns = check_columns(_fields(schema), parsed)
    # no bootstrap.servers: the settings are checked and nothing is connected to; log_level 4 keeps
    # librdkafka's notice about that ("No `bootstrap.servers` configured") out of the user's output
    checked = {k: v for k, v in producer_config(parsed).items() if k != "bootstrap.servers"}
    try:
        Producer({**checked, "log_level": 4}).flush(0)
    except KafkaException as exc:
        raise SinkOptionError(f"a kafka.* option of the sink: {exc.args[0].str()}") from None
    return parsed, columns


def batch_writer(options: Mapping[str, str], schema: Any) -> KafkaEpochsBatchWriter:
    parsed, columns = _checked(options, schema)
    return KafkaEpochsBatchWriter(parsed, columns, f"write-{uuid.uuid4().hex}")


def stream_writer(options: Mapping[str, str], schema: Any) -> KafkaEpochsStreamWriter:
    parsed, columns = _checked(options, schema)
    return KafkaEpochsStreamWriter(parsed, columns)


class KafkaEpochsStreamWriter(DataSourceStreamArrowWriter):
    """The streaming sink: tasks write (and read the tail first), the driver commits once all did."""

    def __init__(self, options: SinkOptions, columns: Columns) -> None:
        self.options = options
        self.columns = columns

    def write(self, iterator: Iterator[pa.RecordBatch]) -> SinkCommit:
        from pyspark import TaskContext

        context = TaskContext.get()
        query, batch = context.getLocalProperty(QUERY_ID_PROPERTY), context.getLocalProperty(BATCH_ID_PROPERTY)
        if not query or batch is None:
            raise SinkWriteError(
                "the task has no streaming query id or batch id (Spark's local properties "
                f"{QUERY_ID_PROPERTY}, {BATCH_ID_PROPERTY}): is this a streaming write?"
            )
        origin = TaskOrigin(query, int(batch), context.partitionId())
        return write_task(self.options, self.columns, origin, iterator, scan=True, attempt=context.attemptNumber())

    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        _check_all_acknowledged(messages, f"batch {batchId}")
        log.info("kafka_epochs sink: batch %d committed: %s", batchId, _summary(messages))

    def abort(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        """The batch failed or its query was stopped. Its tasks that Spark cancelled may still be writing:
        a cancelled task's Python worker goes on until PySpark kills it (`spark.python.task.killTimeout`,
        2 s). Spark calls this on the query's thread, which `StreamingQuery.stop()` waits for, so holding
        it `abortWaitMs` keeps a query restarted at once from running the same tasks beside them: its
        tail scan would miss what they write after it looked, and write those records again (a
        fresh-clone run restarted the test's query while the stopped one's task went on for 2 s: 250
        records twice)."""
        log.warning(
            "kafka_epochs sink: batch %d aborted (a re-run skips what its tasks wrote): %s; waiting %d ms for "
            "its cancelled tasks to stop writing before the query goes on (abortWaitMs)",
            batchId,
            _summary(messages),
            self.options.abort_wait_ms,
        )
        time.sleep(self.options.abort_wait_ms / 1000)


class KafkaEpochsBatchWriter(DataSourceArrowWriter):
    """The batch sink (`df.write`): one id for the whole write; a retried task reads the tail first."""

    def __init__(self, options: SinkOptions, columns: Columns, write_id: str) -> None:
        self.options = options
        self.columns = columns
        self.write_id = write_id

    def write(self, iterator: Iterator[pa.RecordBatch]) -> SinkCommit:
        from pyspark import TaskContext

        context = TaskContext.get()
        retried = context.attemptNumber() > 0
        origin = TaskOrigin(self.write_id, 0, context.partitionId())
        return write_task(self.options, self.columns, origin, iterator, scan=retried, attempt=context.attemptNumber())

    def commit(self, messages: list[WriterCommitMessage | None]) -> None:
        _check_all_acknowledged(messages, f"write {self.write_id}")
        log.info("kafka_epochs sink: write %s committed: %s", self.write_id, _summary(messages))


def _check_all_acknowledged(messages: list[WriterCommitMessage | None], what: str) -> None:
    """Spark commits only when every task returned; a task returns its SinkCommit only once all its
    records are acknowledged. Anything else in the list is refused rather than committed."""
    missing = [n for n, message in enumerate(messages) if not isinstance(message, SinkCommit)]
    if missing:
        raise SinkWriteError(f"{what}: task(s) {missing} returned no acknowledgement of their records; not committed")


def _summary(messages: list[WriterCommitMessage | None]) -> str:
    done = [m for m in messages if isinstance(m, SinkCommit)]
    return (
        f"{len(done)} of {len(messages)} tasks, {sum(m.written for m in done)} records written, "
        f"{sum(m.skipped for m in done)} skipped (already on the target), "
        f"{sum(m.scanned for m in done)} target records scanned"
    )


def _headers(stamps: list[bytes], user: list[Any] | None) -> Iterator[list[Header]]:
    """Each record's headers as `produce` takes them: `[(ORIGIN_HEADER, stamp)]` made one at a time by
    `map`/`zip` in C (none live at once for the cyclic collector to walk), or the user's headers column
    (Arrow's list of {"key", "value"}) with the stamp put in (`stamped`)."""
    if user is None:
        return map(list, zip(zip(repeat(ORIGIN_HEADER), stamps)))
    return map(_with_user_headers, user, stamps)


def _with_user_headers(user: list[dict[str, Any]] | None, stamp: bytes) -> list[Header]:
    return stamped([(h["key"], h["value"]) for h in user], stamp) if user else [(ORIGIN_HEADER, stamp)]


def write_task(
    options: SinkOptions,
    columns: Columns,
    origin: TaskOrigin,
    batches: Iterator[pa.RecordBatch],
    *,
    scan: bool,
    attempt: int = 0,
) -> SinkCommit:
    """Write one task's input (Arrow batches) with the exactly-once rule; returns once all is acknowledged."""
    writer = TaskWriter(options, columns, origin, scan=scan)
    try:
        for batch in batches:
            writer.write(batch)
        return writer.finish(attempt)
    except BaseException:
        writer.abandon()
        raise


class TaskWriter:
    """One task's producer, its sequence counter, and what its tail scans found on the target."""

    def __init__(self, options: SinkOptions, columns: Columns, origin: TaskOrigin, *, scan: bool) -> None:
        self.options = options
        self.columns = columns
        self.origin = origin
        self.producer = Producer(
            {**producer_config(options), "error_cb": self._client_error, "on_delivery": self._failed}
        )
        self.sequence = 0
        self.skipped = 0
        self.sent = 0
        self.scanned = 0
        self.failure: str | None = None
        self._scan = scan
        self._scanned_topics: set[str] = set()
        self._written = Written(origin)

    def write(self, batch: pa.RecordBatch) -> None:
        """Produce one input batch, each record stamped with its origin; records an earlier attempt of this
        task already wrote (found by the tail scan) are skipped. The columns become Python lists and the
        stamps are made once per batch, so that the only step per record is the produce call itself,
        made from C (`_produce`)."""
        c = self.columns
        columns = batch.columns
        count = batch.num_rows
        first = self.sequence
        topics = None if self.options.topic else columns[c.topic].to_pylist()
        if topics is not None and None in topics:
            raise SinkWriteError(
                f"record {first + topics.index(None)} of task {self.origin.task} has a null topic "
                "and no topic option is set"
            )
        for topic in dict.fromkeys(topics) if topics is not None else (self.options.topic,):
            if topic not in self._scanned_topics:  # each new topic's tail is read before its first record
                self._scanned_topics.add(topic)
                if self._scan:
                    self._read_tail(topic)
        values = columns[c.value].to_pylist()
        keys = columns[c.key].to_pylist() if c.key is not None else None
        partitions = columns[c.partition].fill_null(-1).to_pylist() if c.partition is not None else None
        user = columns[c.headers].to_pylist() if c.headers is not None else None
        stamps = self.origin.stamps(first, count)
        if self._written.digests:
            check = self._written.check
            keep = [n for n in range(count) if not check(first + n, None if keys is None else keys[n], values[n])]
            if len(keep) < count:
                self.skipped += count - len(keep)
                values, stamps = [values[n] for n in keep], [stamps[n] for n in keep]
                topics, keys, partitions, user = (
                    None if column is None else [column[n] for n in keep] for column in (topics, keys, partitions, user)
                )
        self._produce(topics, values, keys, partitions, user, stamps)
        self.sequence += count

    def _produce(
        self,
        topics: list[str] | None,
        values: list[Any],
        keys: list[Any] | None,
        partitions: list[int] | None,
        user: list[Any] | None,
        stamps: list[bytes],
    ) -> None:
        """Every record through one `map` of `produce` a chunk at a time: no Python step per record, and
        positional arguments (a keyword call builds a dict per record). A column that is None is the same
        for every record (the topic option, no key: the partitioner's choice). When the producer's queue
        is full, the record whose produce raised BufferError was not queued: the chunk goes on from it
        after the target has taken some, and every iterator of the map has passed it, so its place is
        read off the values' iterator."""
        produce, count, n = self.producer.produce, len(values), 0
        while n < count:
            end = min(n + POLL_EVERY, count)
            left = iter(values[n:end])
            records = map(
                produce,
                repeat(self.options.topic) if topics is None else topics[n:end],
                left,
                repeat(None) if keys is None else keys[n:end],
                repeat(-1) if partitions is None else partitions[n:end],
                repeat(None),  # callback: the producer's on_delivery
                repeat(None),  # on_delivery
                repeat(0),  # timestamp: now
                _headers(stamps[n:end], None if user is None else user[n:end]),
            )
            try:
                deque(records, maxlen=0)
            except BufferError:
                queued = end - length_hint(left) - 1
                self.sent += queued - n
                n = queued
                self.producer.poll(0.1)
                continue
            self.sent += end - n
            n = end
            self.producer.poll(0)
            if self.failure is not None:
                raise SinkWriteError(self.failure)

    def _failed(self, error: KafkaError, message: Any) -> None:
        """A record not acknowledged (delivery reports come only for those: `producer_config`)."""
        if self.failure is None:
            self.failure = (
                f"{message.topic()}-{message.partition()}: the target did not acknowledge a record of "
                f"task {self.origin.task} ({error.str()})"
            )

    def _client_error(self, error: KafkaError) -> None:
        if error.fatal() and self.failure is None:
            self.failure = f"the task's producer failed: {error.str()}"

    def finish(self, attempt: int) -> SinkCommit:
        """Wait for every acknowledgement (deliveryTimeoutMs and a margin), then the commit message."""
        left = self.producer.flush(self.options.delivery_timeout_ms / 1000 + 10)
        if self.failure is not None or left:
            raise SinkWriteError(
                self.failure
                or f"{left} of {self.sent} records of task {self.origin.task} unacknowledged after deliveryTimeoutMs"
            )
        # the queue is empty and no report came: every record sent was acknowledged
        return SinkCommit(self.origin.task, attempt, self.sent, self.skipped, self.scanned)

    def abandon(self) -> None:
        """A failing task: let what is in flight land (bounded) before the failure reaches Spark, so that
        the retry's tail scan sees it (the rule's window is only for an attempt that died)."""
        self.producer.flush(min(self.options.delivery_timeout_ms / 1000, 30.0))

    def _read_tail(self, topic: str) -> None:
        scan = read_tail(self.options, self.origin, topic)
        self.scanned += scan.scanned()
        self._written.digests.update(scan.written.digests)
        if scan.written:
            log.warning(
                "task %s of query %s batch %d: %d records of an earlier attempt are on %s already; not "
                "writing them again (scan stopped at %s)",
                self.origin.task,
                self.origin.query,
                self.origin.batch,
                len(scan.written),
                topic,
                scan.stopped_at(),
            )


def read_tail(options: SinkOptions, origin: TaskOrigin, topic: str) -> TailScan:
    """Read `topic`'s partition tails for `origin`'s stamps (`TailScan`), up to each high watermark: only
    what the target made visible (acknowledged to acks=all producers) counts as written."""
    timeout_s = options.delivery_timeout_ms / 1000
    deadline = time.monotonic() + timeout_s
    config = {
        "bootstrap.servers": options.bootstrap,
        **options.producer,
        "group.id": "kafka-epochs-sink-tail",
        "client.id": "kafka-epochs-sink-tail",
        "enable.auto.commit": False,
        "enable.partition.eof": False,
    }
    for producer_only in (
        "linger.ms",
        "partitioner",
        "delivery.timeout.ms",
        "batch.num.messages",
        "compression.type",
        "queue.buffering.max.messages",
        "queue.buffering.max.kbytes",
        "batch.size",
    ):
        config.pop(producer_only, None)
    consumer = Consumer(config)
    try:
        partitions = _partitions(options, topic, deadline)
        bounds = {p: _watermarks(consumer, topic, p, deadline) for p in partitions}
        scan = TailScan(origin, bounds, chunk=options.tail_chunk, limit=options.tail_limit, first=FIRST_SCAN_STEP)
        while not scan.done:
            ranges = scan.reads()
            consumer.assign([KafkaTopicPartition(topic, p, start) for p, (start, _) in ranges.items()])
            _read_ranges(consumer, topic, ranges, scan, deadline)
        return scan
    finally:
        consumer.close()


def _partitions(options: SinkOptions, topic: str, deadline: float) -> list[int]:
    """`topic`'s partitions in the newest view any broker has. One broker's answer is not enough: a broker
    behind the metadata log does not know a topic created a moment ago, or partitions just added, and an
    empty scan makes the task write again what an earlier attempt wrote. Partitions are never removed, so
    the view with the highest topic epoch (then the most partitions) is the newest; the topic counts as
    empty only when every broker that answers says it does not exist (the brokers that lead its
    partitions know it). Asked again while answers carry only other errors (a leader being elected)."""
    security = ClientSecurity.of_client_properties(options.producer)
    with MetadataClient(options.bootstrap, client_id="kafka-epochs-sink-tail", security=security) as client:
        while True:
            try:
                answers = client.fetch_from_each([topic], timeout=max(deadline - time.monotonic(), 0.1))
            except MetadataUnavailableError as exc:
                answers, why = [], str(exc)
            views = [view for view in (answer.partitions_of(topic) for answer in answers) if view]
            if views:
                newest = max(views, key=lambda view: (max(m.topic_epoch for m in view.values()), len(view)))
                return sorted(tp.partition for tp in newest)
            errors = {answer.answered_by: answer.topic_errors.get(topic) for answer in answers}
            if answers and set(errors.values()) == {ErrorCode.UNKNOWN_TOPIC_OR_PARTITION}:
                return []
            if answers:
                why = f"brokers answered error codes {errors}"
            if time.monotonic() >= deadline:
                raise SinkWriteError(f"{topic}: no partition list for the tail scan: {why}")
            time.sleep(0.2)


def _watermarks(consumer: Consumer, topic: str, partition: int, deadline: float) -> tuple[int, int]:
    """(log start, high watermark) from the partition's leader, asked again while the leader moves."""
    while True:
        try:
            return consumer.get_watermark_offsets(
                KafkaTopicPartition(topic, partition), timeout=max(min(5.0, deadline - time.monotonic()), 0.1)
            )
        except KafkaException as exc:
            if time.monotonic() >= deadline:
                raise SinkWriteError(
                    f"{topic}-{partition}: no log bounds from its leader for the tail scan: {exc.args[0].str()}"
                ) from None
            time.sleep(0.2)


def _read_ranges(
    consumer: Consumer, topic: str, ranges: dict[int, tuple[int, int]], scan: TailScan, deadline: float
) -> None:
    """Feed `scan` every record of `ranges` (assigned at their starts), calling range_read as each ends.

    A range also ends when the consumer's position reaches its end without a record (control records),
    but only once that position is this assignment's: right after a re-assign, librdkafka may still
    report the end of the previous (later) range until its fetcher has stopped, which would end the new
    range unread. A record delivered, or a position of "none yet", says the old one is gone."""
    left = dict(ranges)
    current: set[int] = set()
    while left:
        if time.monotonic() >= deadline:
            raise SinkWriteError(
                f"the tail scan of {topic} could not read partition(s) {sorted(left)} to their "
                "high watermark before deliveryTimeoutMs"
            )
        for message in consumer.consume(1000, 0.5):
            if message.error() is not None:
                log.info("sink tail scan of %s: %s", topic, message.error())
                continue
            p = message.partition()
            current.add(p)
            scan.record(ScannedRecord(p, message.offset(), message.headers(), message.key(), message.value()))
            if p in left and message.offset() + 1 >= left[p][1]:
                del left[p]
                scan.range_read(p)
        for position in consumer.position([KafkaTopicPartition(topic, p) for p in list(left)]):
            p = position.partition
            if position.offset < 0:
                current.add(p)
            elif p in current and position.offset >= left[p][1]:  # control records end a range without a record
                del left[p]
                scan.range_read(p)
