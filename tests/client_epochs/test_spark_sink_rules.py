"""The Spark sink's exactly-once rule and its options without Spark or a broker: origin stamps (binary, and
the text form of records written before it), the tail scan's stopping rule, the re-run check, the task
writer's produce calls, the options and the input columns."""

from __future__ import annotations

import time

import pyarrow as pa
import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from client_epochs.model import ClusterMetadata, PartitionMetadata, TopicPartition
from client_epochs.spark.sink_options import SinkOptionError, check_columns, parse_sink_options
from client_epochs.spark.stamps import (
    ORIGIN_HEADER,
    TEXT_ORIGIN_HEADER,
    NonDeterministicInputError,
    Origin,
    OriginError,
    ScannedRecord,
    TailScan,
    TaskOrigin,
    digest,
    origin_of,
    query_digest,
    stamped,
)

TASK = TaskOrigin("q1", 5, 2)
BASE = {"kafka.bootstrap.servers": "127.0.0.1:9092", "topic": "out"}


def record(partition: int, offset: int, stamp: str | None, value: bytes = b"v", text: bool = False) -> ScannedRecord:
    """A target record; `stamp` "<query>/<batch>/<task>/<sequence>" as the sink writes it (binary), or as
    it wrote it before the binary stamp (`text`)."""
    if stamp is None:
        origin = []
    elif text:
        origin = [(TEXT_ORIGIN_HEADER, stamp.encode())]
    else:
        query, batch, task, sequence = stamp.split("/")
        origin = [(ORIGIN_HEADER, TaskOrigin(query, int(batch), int(task)).stamp(int(sequence)))]
    return ScannedRecord(partition, offset, [("user", b"x"), *origin], None, value)


def run(scan: TailScan, logs: dict[int, list[ScannedRecord]]) -> list[dict[int, tuple[int, int]]]:
    """Drive the scan over in-memory partition logs (record i at offset i); the ranges it asked for."""
    asked = []
    while not scan.done:
        reads = scan.reads()
        asked.append(reads)
        for p, (start, end) in reads.items():
            for rec in logs[p][start:end]:
                scan.record(rec)
            scan.range_read(p)
    return asked


QUERIES = st.text(alphabet=st.characters(blacklist_characters="/", blacklist_categories=("Cs",)), min_size=1)


@given(QUERIES, st.integers(0, 2**40), st.integers(0, 2**31), st.integers(0, 2**40))
def test_origin_round_trip_in_both_forms(query: str, batch: int, task: int, sequence: int) -> None:
    task_origin = TaskOrigin(query, batch, task)
    origin = Origin(query_digest(query), batch, task, sequence)
    assert task_origin.stamp(sequence) == origin.encode()
    assert origin_of([(ORIGIN_HEADER, task_origin.stamp(sequence))]) == origin
    # a record written before the binary stamp: the same origin, read from its text
    assert origin_of([(TEXT_ORIGIN_HEADER, task_origin.text(sequence).encode())]) == origin


@given(st.integers(0, 2**33), st.integers(0, 300))
@example(2**32 - 2, 5)  # across the step from 4 to 8 bytes
def test_a_batch_of_stamps_is_each_records_own_and_short(first: int, count: int) -> None:
    task = TaskOrigin("9f0c3e1a-77d2-4b8e-a1a5-3c1d2e4f5a6b", 1234, 7)
    stamps = task.stamps(first, count)
    assert [origin_of([(ORIGIN_HEADER, s)]).sequence for s in stamps] == list(range(first, first + count))
    assert all(s == task.stamp(first + n) for n, s in enumerate(stamps))
    # 1 + 8 (query) + 2 (batch) + 1 (task) + 4 (sequence; 8 from 2**32): a text stamp here is 50 or more
    assert {len(s) for s in stamps} <= {16, 20}
    assert all(len(s) == 16 for n, s in enumerate(stamps) if first + n < 2**32)


@pytest.mark.parametrize(
    "value",
    [
        b"",
        b"\x02" + bytes(11),  # another format
        b"\x01" + bytes(10),  # no sequence
        b"\x01" + bytes(8) + b"\x80\x80\x80",  # the batch's varint never ends
        b"\x01" + bytes(8) + b"\x80" * 11 + b"\x00\x01",  # nor within 10 bytes
        b"\x01" + bytes(10) + bytes(9),  # a 9-byte sequence
        None,
        "text",
    ],
)
def test_a_malformed_binary_stamp_is_refused_quoting_it(value) -> None:
    with pytest.raises(
        OriginError, match=f"{ORIGIN_HEADER} header .* (is not a format-1|batch or task|sequence is not)"
    ):
        origin_of([(ORIGIN_HEADER, value)])


@pytest.mark.parametrize("value", [b"q/1/2", b"q/1/2/x", b"/1/2/3", b"q/-1/2/3", None, b"\xff/1/2/3"])
def test_a_malformed_text_stamp_is_refused_quoting_it(value) -> None:
    with pytest.raises(OriginError, match="is not <query>/<batch>/<task>/<sequence>"):
        origin_of([(TEXT_ORIGIN_HEADER, value)])


def test_a_query_id_with_a_slash_is_refused() -> None:
    with pytest.raises(OriginError, match="query id"):
        TaskOrigin("a/b", 0, 0)


def test_stamped_replaces_a_stamp_the_input_carries_in_either_form_and_keeps_the_users_headers() -> None:
    stamp = TASK.stamp(7)
    copied = [("a", b"1"), (TEXT_ORIGIN_HEADER, b"old/0/0/0"), ("b", None), (ORIGIN_HEADER, TASK.stamp(1))]
    assert stamped(copied, stamp) == [("a", b"1"), ("b", None), (ORIGIN_HEADER, stamp)]
    assert stamped(None, stamp) == [(ORIGIN_HEADER, stamp)]


def test_the_scan_finds_an_earlier_attempts_records_in_both_forms() -> None:
    """A query restarted from its checkpoint after an upgrade: its batch 5 had written sequences 0..2 in the
    text form, the new attempt wrote 3..4 in the binary one before it died too; batch 4 is text."""
    log = [record(0, n, f"q1/4/2/{n}", text=True) for n in range(5)]
    log += [record(0, 5 + n, f"q1/5/2/{n}", text=True) for n in range(3)]
    log += [record(0, 5 + n, f"q1/5/2/{n}") for n in range(3, 5)]
    log += [record(0, 10, "q1/5/1/9"), record(0, 11, "q2/5/2/8", text=True), record(0, 12, "q2/5/2/9")]
    scan = TailScan(TASK, {0: (0, len(log))}, first=4, chunk=4)
    run(scan, {0: log})
    assert sorted(scan.written.digests) == [0, 1, 2, 3, 4]  # not task 1's, not query q2's in either form
    assert scan.stopped_at() == {0: "an earlier batch of the query"}


def test_the_scan_stops_at_a_record_of_an_earlier_batch_of_the_query() -> None:
    # partition 0: foreign records, then batch 4 of q1, then task 2's batch 5 records 0..2 and other tasks'
    log = [record(0, n, None) for n in range(100)] + [record(0, 100 + n, f"q1/4/{n % 3}/{n}") for n in range(10)]
    for n in range(3):
        log.append(record(0, len(log), f"q1/5/2/{n}"))
        log.append(record(0, len(log), f"q1/5/1/{n}"))
    log.append(record(0, len(log), "other/9/2/5"))  # another query's stamp: not ours
    scan = TailScan(TASK, {0: (0, len(log))}, first=4, chunk=8)
    asked = run(scan, {0: log})
    assert sorted(scan.written.digests) == [0, 1, 2]
    assert scan.stopped_at() == {0: "an earlier batch of the query"}
    assert [r[0] for r in asked] == [(113, 117), (105, 113)]  # 4 back, then 8: it never reached the foreign records
    assert scan.scanned() == 12


def test_the_scan_stops_at_the_log_start_or_the_limit_and_skips_empty_partitions() -> None:
    ours = [record(1, n, f"q1/5/2/{n}") for n in range(5)]
    foreign = [record(2, n, None) for n in range(50)]
    scan = TailScan(TASK, {0: (7, 7), 1: (0, 5), 2: (0, 50)}, first=2, chunk=4, limit=10)
    asked = run(scan, {1: ours, 2: foreign})
    assert all(0 not in reads for reads in asked)  # empty: never read
    assert sorted(scan.written.digests) == [0, 1, 2, 3, 4]
    assert scan.stopped_at() == {0: "empty", 1: "the log start", 2: "the scan limit (10 records)"}
    assert [r[2] for r in asked] == [(48, 50), (44, 48), (40, 44)]  # 2 + 4 + 4 = the limit
    assert scan.scanned() == 15


def test_the_scan_reads_from_the_log_start_not_below_it() -> None:
    scan = TailScan(TASK, {0: (10, 13)}, first=64)
    assert scan.reads() == {0: (10, 13)}
    assert scan.reads() == {0: (10, 13)}  # asked again before it was read: the same range, not a second one


def test_records_outside_the_asked_range_count_for_nothing() -> None:
    scan = TailScan(TASK, {0: (0, 100)}, first=10)
    scan.reads()
    scan.record(record(0, 50, "q1/5/2/9"))  # before the range: a consumer may hand it when re-assigned
    scan.record(record(0, 95, "q1/5/2/1"))
    assert sorted(scan.written.digests) == [1]


def test_a_rerun_skips_what_is_written_and_refuses_other_bytes_under_the_same_stamp() -> None:
    scan = TailScan(TASK, {0: (0, 2)})
    run(scan, {0: [record(0, 0, "q1/5/2/0", b"a"), record(0, 1, "q1/5/2/1", b"b")]})
    written = scan.written
    assert written.check(0, None, b"a") and written.check(1, None, "b")  # a str value is its UTF-8 bytes
    assert not written.check(2, None, b"c")
    with pytest.raises(NonDeterministicInputError, match="q1/5/2/1 is on the target"):
        written.check(1, None, b"B")
    assert digest(None, b"") != digest(b"", None) != digest(None, None)


class QueueFullProducer:
    """A producer whose queue is full on the given produce calls (1-based): what it queued, as produce got it."""

    def __init__(self, full_on: set[int]) -> None:
        self.calls = 0
        self.full_on = full_on
        self.queued: list[tuple] = []

    def produce(
        self, topic, value=None, key=None, partition=-1, callback=None, on_delivery=None, timestamp=0, headers=None
    ) -> None:
        self.calls += 1
        if self.calls in self.full_on:
            raise BufferError("Local: Queue full")
        self.queued.append((topic, key, value, partition, headers))

    def poll(self, timeout: float) -> int:
        return 0


HEADERS = pa.list_(pa.struct([("key", pa.string()), ("value", pa.binary())]))


def _writer(full_on: set[int]):
    from client_epochs.spark.sink import TaskWriter

    options = parse_sink_options({"kafka.bootstrap.servers": "127.0.0.1:1", "topic": "out", "kafka.log_level": "0"})
    fields = [
        ("key", "string"),
        ("value", "binary"),
        ("partition", "int"),
        ("headers", "array<struct<key:string,value:binary>>"),
    ]
    writer = TaskWriter(options, check_columns(fields, options), TASK, scan=False)
    writer.producer = QueueFullProducer(full_on)
    return writer


def _rows(count: int) -> pa.RecordBatch:
    user = [
        [{"key": "u", "value": b"%d" % n}, {"key": TEXT_ORIGIN_HEADER, "value": b"src/0/0/%d" % n}]
        if n % 3 == 0
        else None
        for n in range(count)
    ]
    return pa.record_batch(
        [
            pa.array([f"k{n}" for n in range(count)]),
            pa.array([b"v%d" % n for n in range(count)], pa.binary()),
            pa.array([n % 2 if n % 5 else None for n in range(count)], pa.int32()),
            pa.array(user, HEADERS),
        ],
        names=["key", "value", "partition", "headers"],
    )


def test_the_task_writer_queues_each_record_once_in_order_with_its_stamp_when_the_queue_fills() -> None:
    """BufferError on the first record, in the middle of a chunk and at a chunk's start: the record that
    raised is queued again once, nothing before it twice, and each record keeps its own sequence."""
    writer = _writer({1, 2, 700, 1001, 1500, 2702})
    rows = _rows(2500)
    writer.write(rows.slice(0, 1200))
    writer.write(rows.slice(1200))
    queued = writer.producer.queued
    assert [value for _, _, value, _, _ in queued] == [b"v%d" % n for n in range(2500)]
    assert [key for _, key, _, _, _ in queued] == [f"k{n}" for n in range(2500)]
    assert {topic for topic, *_ in queued} == {"out"}
    assert [p for *_, p, _ in queued] == [n % 2 if n % 5 else -1 for n in range(2500)]  # null: the partitioner's
    assert [origin_of(h) for *_, h in queued] == [Origin(TASK.digest, 5, 2, n) for n in range(2500)]
    # the stamp is the only origin header, binary and last; the user's own headers kept, a copied stamp dropped
    assert [h[:-1] for *_, h in queued[:4]] == [[("u", b"0")], [], [], [("u", b"3")]]
    assert all(h[-1] == (ORIGIN_HEADER, TASK.stamp(n)) and len(h[-1][1]) == 15 for n, (*_, h) in enumerate(queued))
    assert (writer.sent, writer.skipped, writer.sequence) == (2500, 0, 2500)


def test_the_task_writer_skips_what_an_earlier_attempt_wrote_and_stamps_the_rest_as_their_own() -> None:
    writer = _writer({3})
    rows = _rows(50)
    for n in (0, 1, 7, 49):
        writer._written.add(n, digest(f"k{n}", b"v%d" % n))
    writer.write(rows)
    queued = writer.producer.queued
    sequences = [origin_of(h).sequence for *_, h in queued]
    assert sequences == [n for n in range(50) if n not in (0, 1, 7, 49)]
    assert [value for _, _, value, _, _ in queued] == [b"v%d" % n for n in sequences]
    assert (writer.sent, writer.skipped, writer.sequence) == (46, 4, 50)


def test_sink_options_and_their_defaults() -> None:
    options = parse_sink_options(
        {**BASE, "kafka.linger.ms": "20", "IncludeHeaders": "false", "tailLimit": "50", "checkpointLocation": "/tmp/x"}
    )
    assert options.bootstrap == "127.0.0.1:9092" and options.producer == {"linger.ms": "20"}
    assert options.topic == "out" and not options.include_headers and options.tail_limit == 50
    assert parse_sink_options({"kafka.bootstrap.servers": "b:1"}).topic is None


def test_an_aborted_batch_holds_its_query_abort_wait_ms_so_its_cancelled_tasks_stop_first(monkeypatch) -> None:
    """A stopped query's cancelled task went on writing for PySpark's 2 s kill timeout while the query,
    restarted at once, ran the same task: the re-run's tail scan missed what the old one wrote after it
    looked (250 records twice). `stop()` waits for the query's thread, where abort runs: abort holds it."""
    from client_epochs.spark.sink import KafkaEpochsStreamWriter
    from client_epochs.spark.sink_options import Columns

    slept: list[float] = []
    monkeypatch.setattr("client_epochs.spark.sink.time.sleep", slept.append)
    default = parse_sink_options(BASE)
    assert default.abort_wait_ms == 3000
    KafkaEpochsStreamWriter(default, Columns(value=0)).abort([None], 1)
    KafkaEpochsStreamWriter(parse_sink_options({**BASE, "abortWaitMs": "0"}), Columns(value=0)).abort([None], 2)
    assert slept == [3.0, 0.0]
    with pytest.raises(SinkOptionError, match="abortWaitMs must be at least 0"):
        parse_sink_options({**BASE, "abortWaitMs": "-1"})


@pytest.mark.parametrize(
    ("given_options", "named"),
    [
        ({"kafka.bootstrap.servers": None}, "kafka.bootstrap.servers is required"),
        ({"kafka.acks": "1"}, "kafka.acks is not supported"),
        ({"kafka.enable.idempotence": "false"}, "kafka.enable.idempotence"),
        ({"kafka.transactional.id": "t"}, "without transactions"),
        ({"kafka.key.serializer": "x"}, "kafka.key.serializer"),
        ({"subscribe": "t"}, r"unknown sink option\(s\) \['subscribe'\]"),
        ({"topic": " "}, "option topic is empty"),
        ({"includeHeaders": "yes"}, "includeHeaders must be true or false"),
        ({"tailChunk": "0"}, "tailChunk must be positive"),
        ({"deliveryTimeoutMs": "soon"}, "deliveryTimeoutMs must be an integer"),
    ],
)
def test_bad_sink_options_are_refused_by_name(given_options: dict, named: str) -> None:
    options = {k: v for k, v in {**BASE, **given_options}.items() if v is not None}
    with pytest.raises(SinkOptionError, match=named):
        parse_sink_options(options)


def test_columns_are_found_without_case_and_the_topic_option_overrides_the_column() -> None:
    fields = [
        ("Key", "binary"),
        ("value", "string"),
        ("topic", "string"),
        ("partition", "int"),
        ("offset", "bigint"),
        ("headers", "array<struct<key:string,value:binary>>"),
    ]
    columns = check_columns(fields, parse_sink_options(BASE))
    assert (columns.key, columns.value, columns.topic, columns.partition, columns.headers) == (0, 1, None, 3, 5)
    by_column = check_columns(fields, parse_sink_options({"kafka.bootstrap.servers": "b:1", "includeHeaders": "false"}))
    assert by_column.topic == 2 and by_column.headers is None


@pytest.mark.parametrize(
    ("fields", "named"),
    [
        ([("key", "string")], "no value column"),
        ([("value", "bigint")], "column value is bigint; the sink writes it when it is string or binary"),
        ([("value", "string"), ("partition", "bigint")], "column partition is bigint"),
        ([("value", "string"), ("headers", "array<string>")], "column headers"),
    ],
)
def test_bad_columns_are_refused_by_name(fields, named: str) -> None:
    with pytest.raises(SinkOptionError, match=named):
        check_columns(fields, parse_sink_options(BASE))


def test_no_topic_option_and_no_topic_column_is_refused() -> None:
    with pytest.raises(SinkOptionError, match="no topic"):
        check_columns([("value", "string")], parse_sink_options({"kafka.bootstrap.servers": "b:1"}))


def test_the_driver_refuses_a_producer_setting_librdkafka_does_not_know_and_an_unacknowledged_task() -> None:
    from pyspark.sql.types import StringType, StructField, StructType

    from client_epochs.spark.sink import SinkCommit, SinkWriteError, batch_writer, stream_writer

    schema = StructType([StructField("value", StringType())])
    with pytest.raises(SinkOptionError, match="kafka.no.such.setting|No such configuration property"):
        batch_writer({**BASE, "kafka.no.such.setting": "1"}, schema)
    writer = stream_writer(BASE, schema)
    writer.commit([SinkCommit(0, 0, 5, 0, 0)], 3)
    with pytest.raises(SinkWriteError, match=r"batch 3: task\(s\) \[1\] returned no acknowledgement"):
        writer.commit([SinkCommit(0, 0, 5, 0, 0), None], 3)


def _answer(broker: str, partitions: int, topic_epoch: int = -1, error: int = 0) -> ClusterMetadata:
    """A Metadata answer for topic "t" from `broker`: `partitions` partitions, or the topic's error."""
    parts = {
        TopicPartition("t", p): PartitionMetadata(101, 0, None, topic_epoch, (101,), (101,)) for p in range(partitions)
    }
    return ClusterMetadata(broker, 12, "c", 1, {}, parts, {"t": error} if error else {})


@pytest.mark.parametrize(
    ("rounds", "expected"),
    [
        ([[_answer("stale", 0, error=3), _answer("fresh", 3)]], [0, 1, 2]),  # a topic one broker has not learnt
        ([[_answer("stale", 4, 1), _answer("fresh", 6, 1)]], [0, 1, 2, 3, 4, 5]),  # partitions just added
        ([[_answer("old", 4, 1), _answer("new", 2, 2)]], [0, 1]),  # recreated: the newer topic epoch wins
        ([[_answer("a", 0, error=3), _answer("b", 0, error=3)]], []),  # nobody knows it: nothing was written
        ([[_answer("a", 0, error=5), _answer("b", 0, error=3)], [_answer("a", 2)]], [0, 1]),  # asked again
    ],
)
def test_the_tail_scan_takes_the_newest_view_of_the_topic_any_broker_has(monkeypatch, rounds, expected) -> None:
    """One broker's outdated answer must not shrink the scan: an empty or partial scan writes again what
    an earlier attempt wrote (a fresh clone's run wrote 300 of 300 when the lagging broker answered)."""
    from client_epochs.spark import sink

    class FakeMetadataClient:
        def __init__(self, bootstrap: str, **_: object) -> None:
            pass

        def __enter__(self) -> FakeMetadataClient:
            return self

        def __exit__(self, *exc: object) -> None:
            pass

        def fetch_from_each(self, topics: list[str], timeout: float) -> list[ClusterMetadata]:
            return rounds.pop(0)

    monkeypatch.setattr(sink, "MetadataClient", FakeMetadataClient)
    monkeypatch.setattr(sink.time, "sleep", lambda s: None)
    options = parse_sink_options({"kafka.bootstrap.servers": "127.0.0.1:1", "topic": "t"})
    assert sink._partitions(options, "t", time.monotonic() + 30) == expected
    assert rounds == []


def test_a_position_left_from_the_previous_range_does_not_end_the_next_one_unread() -> None:
    """After a re-assign librdkafka may report the previous range's end until its fetcher stops: the
    scan must wait for this assignment's records rather than take the range for read."""
    from types import SimpleNamespace

    from client_epochs.spark import sink
    from client_epochs.spark.stamps import stamped

    origin = sink.TaskOrigin("q", 1, 0)
    scan = sink.TailScan(origin, {0: (0, 20)}, first=10)
    scan.reads()  # [10, 20): read, then [0, 10) is next
    scan.range_read(0)
    ranges = scan.reads()
    assert ranges == {0: (0, 10)}
    headers = stamped(None, origin.stamp(3))
    polls = [
        [],
        [
            SimpleNamespace(
                partition=lambda: 0,
                offset=lambda: 9,
                error=lambda: None,
                headers=lambda: headers,
                key=lambda: None,
                value=lambda: b"v",
            )
        ],
    ]

    class StaleConsumer:
        def consume(self, n: int, timeout: float) -> list:
            return polls.pop(0) if polls else []

        def position(self, tps: list) -> list:
            return [SimpleNamespace(partition=tp.partition, offset=20) for tp in tps]  # the old range's end

    sink._read_ranges(StaleConsumer(), "t", ranges, scan, time.monotonic() + 30)
    assert polls == [] and len(scan.written) == 1
