"""`kafka_epochs`: a PySpark (>= 4.0) structured-streaming and batch source that refuses stale metadata.

    from client_epochs.spark import KafkaEpochsSource
    spark.dataSource.register(KafkaEpochsSource)
    stream = (spark.readStream.format("kafka_epochs")
              .option("kafka.bootstrap.servers", "127.0.0.1:9092").option("subscribe", "events").load())

It is Spark's Kafka source with KIP-232 on the driver (`client_epochs.spark.planning` decides, this
module asks): each batch's end comes from the current leaders (ListOffsets with CurrentLeaderEpoch,
`client_epochs.log_bounds`) under metadata the epoch cache accepted, never older than the epochs the
previous end was planned under; a stale broker's answer is refused, counted and asked again. An end
below one already planned is asked again `fetchOffset.numRetries` times with a doubling backoff,
then fails the query (OffsetsWentBackwardsError), and a recreated topic fails it with
TopicRecreatedError unless `onTopicRecreated=earliest`. Offsets by time are asked the same way
(ListOffsets with the timestamp). Options are checked by `client_epochs.spark.options`; how much a
trigger reads and how its ranges are cut into tasks is `client_epochs.spark.pacing`. Executors read
the ranges with `client_epochs.spark.read` and hand Spark Arrow batches.

The driver's counters (stale answers refused, backwards answers asked again, batches planned) and
Spark's lag metrics (min/max/avgOffsetsBehindLatest) are in each progress report:
`query.lastProgress["sources"][0]["latestOffset"]["counters"]` and `[...]["metrics"]`.
Spark's Python workers must run the interpreter that has this package: set PYSPARK_PYTHON (and
PYSPARK_DRIVER_PYTHON) to it before the SparkSession starts.
"""

from __future__ import annotations

import logging
import os
import sys
import time
import uuid
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import replace
from typing import Any

from pyspark.sql.datasource import DataSource, DataSourceReader, DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadLimit,
    ReadMaxRows,
    ReadMinRows,
    SupportsTriggerAvailableNow,
)

from client_epochs.log_bounds import (
    READ_COMMITTED,
    READ_UNCOMMITTED,
    LogBounds,
    LogBoundsClient,
    LogBoundsUnavailableError,
)
from client_epochs.metadata_client import MetadataClient
from client_epochs.model import TopicPartition
from client_epochs.spark.options import SourceOptions, TimeSpec, parse_options
from client_epochs.spark.pacing import TriggerPacing, available_rows, offsets_behind, split_ranges
from client_epochs.spark.planning import (
    LATEST,
    Backwards,
    Observed,
    Offsets,
    OffsetsWentBackwardsError,
    PartitionOffset,
    Range,
    SourceOptionError,
    floors,
    initial_offsets,
    next_end,
    offsets_at_times,
    offsets_from_json,
    offsets_to_json,
    partitions_of,
    ranges,
    recreated_since,
    timestamps_to_ask,
)
from client_epochs.spark.python_exec import python_executable
from quorum.wire.internal_metadata import encode
from quorum.wire.sasl_client import ClientSecurity

log = logging.getLogger(__name__)

BOUNDS_TIMEOUT_S = 30.0
"""How long the driver asks for one partition's bounds (Kafka's request.timeout.ms) before failing the batch."""
ATTEMPT_TIMEOUT_S = 2.0
"""How long one attempt (one broker first) asks before the next starts at another broker."""


class RangePartition(InputPartition):
    """One Spark task: a planned Range (picklable, sent to an executor)."""

    def __init__(self, rng: Range) -> None:
        super().__init__(rng)
        self.range = rng


class KafkaEpochsSource(DataSource):
    """The data source Spark instantiates from `.format("kafka_epochs")` and the options."""

    @classmethod
    def name(cls) -> str:
        return "kafka_epochs"

    def schema(self) -> str:
        from client_epochs.spark.read import spark_schema

        return spark_schema(_include_headers(self.options))

    def streamReader(self, schema: Any) -> DataSourceStreamReader:
        return KafkaEpochsStreamReader(parse_options(self.options, streaming=True))

    def reader(self, schema: Any) -> DataSourceReader:
        return KafkaEpochsBatchReader(parse_options(self.options, streaming=False))

    def writer(self, schema: Any, overwrite: bool) -> Any:
        """The sink (`df.write`): client_epochs.spark.sink."""
        from client_epochs.spark.sink import batch_writer

        return batch_writer(self.options, schema)

    def streamWriter(self, schema: Any, overwrite: bool) -> Any:
        """The streaming sink: client_epochs.spark.sink, exactly once without transactions."""
        from client_epochs.spark.sink import stream_writer

        return stream_writer(self.options, schema)


def _include_headers(options: Mapping[str, str]) -> bool:
    value = next((v for k, v in options.items() if k.lower() == "includeheaders"), "false")
    return value.strip().lower() == "true"


class _Prober:
    """The driver's questions to the cluster, asked through the epoch cache; created on first use so
    that a reader pickled to an executor carries no sockets."""

    def __init__(self, options: SourceOptions) -> None:
        self.options = options
        self._metadata: MetadataClient | None = None
        self._bounds: LogBoundsClient | None = None

    @property
    def metadata(self) -> MetadataClient:
        if self._metadata is None:
            # the driver's own connections, secured by the source's kafka.* options as its executors' consumers
            self._metadata = MetadataClient(
                self.options.bootstrap,
                client_id="kafka-epochs-driver",
                security=ClientSecurity.of_client_properties(self.options.client),
            )
            # ends listed at the isolation level the executors read with (kafka.isolation.level)
            self._bounds = LogBoundsClient(
                self._metadata, isolation_level=READ_COMMITTED if self.options.read_committed else READ_UNCOMMITTED
            )
        return self._metadata

    @property
    def refusals(self) -> int:
        return 0 if self._metadata is None else self._metadata.refusals

    def partitions(self, known: Sequence[TopicPartition] = ()) -> list[TopicPartition]:
        """The subscription's partitions the cluster lists now, plus `known` ones (never dropped here)."""
        self.metadata.rotate()
        if self.options.assigned:
            listed: Sequence[TopicPartition] = ()
        elif self.options.pattern is None:
            listed = list(self.metadata.refresh_until_current(self.options.topics, timeout=BOUNDS_TIMEOUT_S).partitions)
        else:
            listed = [tp for tp in self.metadata.fetch(None).partitions if not tp.topic.startswith("__")]
        return sorted(set(partitions_of(self.options, listed)) | set(known))

    def observe(
        self, partitions: Sequence[TopicPartition], planned: Mapping[TopicPartition, PartitionOffset]
    ) -> dict[TopicPartition, Observed]:
        """Each partition's log bounds from its current leader, under metadata no older than `planned`'s epochs."""
        self.metadata  # noqa: B018 (opens the clients)
        assert self._bounds is not None
        floor = floors(planned)
        out = {}
        for tp in partitions:
            bounds = self._bounds_of(tp, floor.get(tp))
            accepted = self.metadata.cache.get(tp)
            topic_epoch = accepted.topic_epoch if accepted is not None else -1
            topic_id = getattr(accepted, "topic_id", None)
            out[tp] = Observed(
                bounds.log_start,
                bounds.log_end,
                bounds.leader_epoch,
                topic_epoch,
                bounds.leader,
                topic_id,
                bounds.named_by,
            )
        return out

    def at_times(self, spec: TimeSpec, what: str, partitions: Sequence[TopicPartition], *, starting: bool) -> Offsets:
        """Offsets by time (startingTimestamp, endingOffsetsByTimestamp, ...): each partition's leader is
        asked for the first offset at or after its timestamp (ListOffsets with CurrentLeaderEpoch under
        accepted metadata), then the bounds are observed, after the answers, so that an end found is
        never past the log end observed with it."""
        self.metadata  # noqa: B018 (opens the clients)
        assert self._bounds is not None
        asked = timestamps_to_ask(spec, partitions, what)
        found = {
            tp: self._bounds.offset_for_timestamp(tp, stamp, timeout=BOUNDS_TIMEOUT_S)
            for tp, stamp in asked.items()
            if stamp >= 0
        }
        observed = self.observe(list(asked), {})
        return offsets_at_times(asked, found, observed, starting=starting, strategy=self.options.starting_time_strategy)

    def _bounds_of(self, tp: TopicPartition, floor: Any) -> LogBounds:
        """`tp`'s bounds from its current leader. Each attempt starts at the next broker, as Kafka clients
        spread their metadata requests: a broker whose answer names a leader that does not answer may be
        the stale one, and another broker's newer answer is what lets the epoch cache refuse it."""
        assert self._bounds is not None
        deadline = time.monotonic() + BOUNDS_TIMEOUT_S
        while True:
            self.metadata.rotate()
            left = deadline - time.monotonic()
            try:
                return self._bounds.fetch(tp, floor, timeout=max(min(ATTEMPT_TIMEOUT_S, left), 0.0))
            except LogBoundsUnavailableError:
                if left <= ATTEMPT_TIMEOUT_S:
                    raise

    def close(self) -> None:
        if self._bounds is not None:
            self._bounds.close()
        if self._metadata is not None:
            self._metadata.close()
        self._metadata = self._bounds = None

    def __getstate__(self) -> dict[str, Any]:
        return {"options": self.options, "_metadata": None, "_bounds": None}


def _with_executor_group(options: SourceOptions, streaming: bool) -> SourceOptions:
    """`options` whose clients carry the executors' group id as Spark names it (groupIdPrefix, kafka.group.id)."""
    group = options.executor_group_id(uuid.uuid4().hex, streaming)
    return replace(options, client={**options.client, "group.id": group})


def _split(options: SourceOptions, tasks: Sequence[Range], observed: Mapping[TopicPartition, Observed]) -> list[Range]:
    """The planned ranges cut into tasks by minPartitions / maxRecordsPerPartition, each bootstrapped from
    the broker whose current metadata planned it."""
    log_starts = {tp: seen.log_start for tp, seen in observed.items()}
    cut = split_ranges(tasks, options.min_partitions, options.max_records_per_partition, log_starts)
    return [rng.as_observed(observed) for rng in cut]


def _read(options: SourceOptions, partition: InputPartition) -> Iterator[Any]:
    # imported here, on the executor: the driver's planning process (one per query) has no use for
    # confluent-kafka or pyarrow.compute, and importing them there would add to every query's start
    from client_epochs.spark.read import read_range

    rng: Range = partition.value
    return read_range(
        rng,
        options.bootstrap,
        options.client,
        include_headers=options.include_headers,
        fail_on_data_loss=options.fail_on_data_loss,
        timeout_s=options.poll_timeout_ms / 1000,
    )


class KafkaEpochsStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """The streaming reader: planning on the driver (one long-lived instance), `read` on executors."""

    def __init__(self, options: SourceOptions) -> None:
        self.options = options = _with_executor_group(options, streaming=True)
        self._prober = _Prober(options)
        self._pacing = (
            TriggerPacing(options.min_offsets_per_trigger, options.max_trigger_delay_ms)
            if options.min_offsets_per_trigger is not None
            else None
        )
        self._lag: dict[str, str] = {}
        """Spark's min/max/avgOffsetsBehindLatest for the last plan."""
        self._available_now = False
        self._target: Offsets | None = None
        self.backwards_retries = 0
        """Answers whose end was below a planned offset, asked again."""
        self.batches_planned = 0
        self._observed: dict[TopicPartition, Observed] = {}
        """The last plan's observations: which broker's current metadata each partition's tasks start from."""

    def initialOffset(self) -> dict:
        partitions = self._prober.partitions()
        if self.options.starting_time is not None:
            return offsets_to_json(
                self._prober.at_times(
                    self.options.starting_time, "startingOffsetsByTimestamp", partitions, starting=True
                )
            )
        observed = self._prober.observe(partitions, {})
        return offsets_to_json(initial_offsets(self.options.starting, observed))

    def getDefaultReadLimit(self) -> ReadLimit:
        """Spark's: maxOffsetsPerTrigger caps a batch, minOffsetsPerTrigger alone is ReadMinRows. PySpark has
        no composite limit: with both, Spark is given the cap and the minimum is applied here from the options."""
        limit = self.options.max_offsets_per_trigger
        if limit is None and self.options.min_offsets_per_trigger is not None:
            return ReadMinRows(self.options.min_offsets_per_trigger)
        return ReadAllAvailable() if limit is None else ReadMaxRows(limit)

    def prepareForTriggerAvailableNow(self) -> None:
        """Trigger.AvailableNow: what is there at the first plan is the last end this query plans."""
        self._available_now = True

    def latestOffset(self, start: dict, limit: ReadLimit) -> dict:
        began = offsets_from_json(start, "the start offset")
        max_rows = limit.max_rows if isinstance(limit, ReadMaxRows) else None
        if self._available_now and self._target is None:
            self._target = self._plan(began, None)
        # minOffsetsPerTrigger waits for records; under Trigger.AvailableNow none may come, so it does not apply
        paced = self._pacing is not None and not self._available_now and not isinstance(limit, ReadAllAvailable)
        end = self._plan(began, max_rows, paced)
        if self._target is not None:
            end = {tp: _at_most(offset, self._target.get(tp)) for tp, offset in end.items()}
        self._lag = offsets_behind(end, self._observed)
        self.batches_planned += 1
        return offsets_to_json(end)

    def _plan(self, began: Offsets, max_rows: int | None, paced: bool = False) -> Offsets:
        """The next end from `began`; `paced`: `began` itself (no batch) while minOffsetsPerTrigger holds it back."""
        backoff = self.options.retry_interval_ms / 1000
        attempt = 0
        while True:
            attempt += 1
            observed = self._prober.observe(self._prober.partitions(list(began)), began)
            self._observed = observed
            if (
                paced
                and self._pacing is not None
                and not self._pacing.admit(available_rows(began, observed), int(time.time() * 1000))
            ):
                return began
            result = next_end(began, observed, self.options, max_rows)
            if not isinstance(result, list):
                return result
            worst: Backwards = result[0]
            if attempt > self.options.num_retries:
                raise OffsetsWentBackwardsError(worst.partition, worst.planned, worst.offered, worst.source, attempt)
            self.backwards_retries += 1
            log.warning(
                "%s: latest offset %d from %s is below the planned %d; asking again in %.2f s",
                worst.partition,
                worst.offered,
                worst.source,
                worst.planned,
                backoff,
            )
            time.sleep(backoff)
            backoff *= 2

    def reportLatestOffset(self) -> dict | None:
        """What Spark puts in each progress report's `latestOffset`: the driver's counters and, as Spark's
        Kafka source reports them in `metrics`, min/max/avgOffsetsBehindLatest of the last plan."""
        return {"counters": self.counters(), "metrics": dict(self._lag)}

    def counters(self) -> dict[str, int]:
        """stale metadata answers refused, backwards ends asked again, batches planned (driver side)."""
        return {
            "staleMetadataRefused": self._prober.refusals,
            "backwardsRetries": self.backwards_retries,
            "batchesPlanned": self.batches_planned,
        }

    def partitions(self, start: dict, end: dict) -> Sequence[InputPartition]:
        planned = ranges(offsets_from_json(start, "the start offset"), offsets_from_json(end, "the end offset"))
        return [RangePartition(rng) for rng in _split(self.options, planned, self._observed)]

    def read(self, partition: InputPartition) -> Iterator[Any]:
        return _read(self.options, partition)

    def commit(self, end: dict) -> None:
        if self.options.commit_group:
            commit_to_group(self.options, offsets_from_json(end, "the committed offset"))

    def stop(self) -> None:
        log.info("kafka_epochs source stopping: %s", self.counters())
        self._prober.close()


class KafkaEpochsBatchReader(DataSourceReader):
    """spark.read: one plan from startingOffsets (default earliest) to endingOffsets (default latest)."""

    def __init__(self, options: SourceOptions) -> None:
        self.options = _with_executor_group(options, streaming=False)
        self._prober = _Prober(self.options)

    def partitions(self) -> Sequence[InputPartition]:
        options = self.options
        try:
            partitions = self._prober.partitions()
            start = (
                None
                if options.starting_time is None
                else self._prober.at_times(
                    options.starting_time, "startingOffsetsByTimestamp", partitions, starting=True
                )
            )
            end = (
                None
                if options.ending_time is None
                else self._prober.at_times(options.ending_time, "endingOffsetsByTimestamp", partitions, starting=False)
            )
            observed = self._prober.observe(partitions, {})
            start = recreated_since(
                start or initial_offsets(options.starting, observed), observed, options.on_topic_recreated
            )
            end = end or _ending(options.ending, observed)
        finally:
            self._prober.close()
        for tp, stop in end.items():
            began = start.get(tp)
            if began is not None and stop.offset < began.offset:
                raise SourceOptionError(f"{tp}: endingOffsets {stop.offset} is below startingOffsets {began.offset}")
            if stop.offset > observed[tp].log_end:
                raise SourceOptionError(
                    f"{tp}: endingOffsets {stop.offset} is past the log end "
                    f"{observed[tp].log_end} of the leader ({observed[tp].source})"
                )
        return [RangePartition(rng) for rng in _split(options, ranges(start, end), observed)]

    def read(self, partition: InputPartition) -> Iterator[Any]:
        return _read(self.options, partition)


def _at_most(offset: PartitionOffset, target: PartitionOffset | None) -> PartitionOffset:
    """`offset`, held back to the AvailableNow target when both are in the same topic (grown partitions
    raise the topic epoch and keep the topic)."""
    if target is None or not target.same_topic(offset) or target.offset >= offset.offset:
        return offset
    return replace(offset, offset=target.offset)


def _ending(ending: str | Offsets, observed: Mapping[TopicPartition, Observed]) -> Offsets:
    out: Offsets = {}
    for tp, seen in observed.items():
        given = None if isinstance(ending, str) else ending.get(tp)
        offset = seen.log_end if given is None or given.offset == LATEST else given.offset
        out[tp] = seen.at(offset)
    return out


def commit_to_group(options: SourceOptions, offsets: Mapping[TopicPartition, PartitionOffset]) -> None:
    """commitOffsetsToGroup: the batch's end offsets, with KIP-232 internal metadata (in the metadata string
    as the wrappers write it, so `client_epochs` consumers of that group resume with the KIP-232 check),
    so that lag monitors see the job. The commit carries no generation: the group has no members."""
    from confluent_kafka import Consumer
    from confluent_kafka import TopicPartition as KafkaTopicPartition

    consumer = Consumer(
        {
            "bootstrap.servers": options.bootstrap,
            **options.client,
            "group.id": options.commit_group,
            "enable.auto.commit": False,
        }
    )
    try:
        entries = [
            KafkaTopicPartition(
                tp.topic,
                tp.partition,
                po.offset,
                metadata=encode(None, po.floor),
                leader_epoch=po.leader_epoch if po.leader_epoch >= 0 else None,
            )
            for tp, po in sorted(offsets.items())
            if po.offset >= 0
        ]
        if entries:
            consumer.commit(offsets=entries, asynchronous=False)
    finally:
        consumer.close()


SHORT_LIVED_JVM = "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC"
"""JVM options for a Spark driver that lives a minute or two and moves little data (a demo, a test): the
C1 compiler only and one GC thread. Measured on two cores, a local session's start and a few small
queries cost the JVM 14 CPU-seconds with them against 26-28 without (the C2 compiler threads); a job
that runs for hours wants the default, C2's faster code."""


def local_session(app: str = "kafka-epochs", log_level: str = "ERROR", jvm_options: str | None = None) -> Any:
    """A local[2] SparkSession on 127.0.0.1 (no UI, no console progress bar, 2 shuffle partitions)
    with this source registered: what the examples, tests and benchmarks run on one machine.

    Spark's Python workers run this interpreter (PYSPARK_PYTHON and PYSPARK_DRIVER_PYTHON are set to
    it), so they import the same client_epochs; set them yourself when building your own session
    (PYSPARK_PYTHON to `client_epochs.spark.python_executable()` spares each query's start a compile of
    pyspark: `client_epochs.spark.python_exec`).
    `log_level` FATAL hides the errors Spark logs when a query is stopped in the middle of a batch.
    `jvm_options` go to the driver's JVM when this call starts it (`spark.driver.extraJavaOptions`;
    SHORT_LIVED_JVM for a short session); a JVM already running keeps its own.
    """
    os.environ["PYSPARK_PYTHON"] = python_executable()
    os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
    from pyspark.sql import SparkSession

    builder = (
        SparkSession.builder.master("local[2]")
        .appName(app)
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.driver.host", "127.0.0.1")
        .config("spark.driver.bindAddress", "127.0.0.1")
        .config("spark.sql.shuffle.partitions", "2")
    )
    if jvm_options:
        builder = builder.config("spark.driver.extraJavaOptions", jvm_options)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel(log_level)
    spark.dataSource.register(KafkaEpochsSource)
    return spark
