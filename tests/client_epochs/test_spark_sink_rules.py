"""The Spark sink's exactly-once rule and its options without Spark or a broker: origin stamps, the tail
scan's stopping rule, the re-run check, the options and the input columns."""

from __future__ import annotations

import time

import pytest
from hypothesis import given
from hypothesis import strategies as st

from client_epochs.model import ClusterMetadata, PartitionMetadata, TopicPartition
from client_epochs.spark.sink_options import SinkOptionError, check_columns, parse_sink_options
from client_epochs.spark.stamps import (
    ORIGIN_HEADER,
    NonDeterministicInputError,
    Origin,
    OriginError,
    ScannedRecord,
    TailScan,
    TaskOrigin,
    digest,
    origin_of,
    stamped,
)

TASK = TaskOrigin("q1", 5, 2)
BASE = {"kafka.bootstrap.servers": "127.0.0.1:9092", "topic": "out"}


def record(partition: int, offset: int, stamp: str | None, value: bytes = b"v") -> ScannedRecord:
    headers = [("user", b"x")] + ([(ORIGIN_HEADER, stamp.encode())] if stamp is not None else [])
    return ScannedRecord(partition, offset, headers, None, value)


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


@given(
    st.text(alphabet=st.characters(blacklist_characters="/", blacklist_categories=("Cs",)), min_size=1),
    st.integers(0, 2**40),
    st.integers(0, 2**31),
    st.integers(0, 2**40),
)
def test_origin_round_trip(query: str, batch: int, task: int, sequence: int) -> None:
    origin = Origin(query, batch, task, sequence)
    assert Origin.parse(origin.encode()) == origin
    assert TaskOrigin(query, batch, task).prefix + str(sequence).encode() == origin.encode()


@pytest.mark.parametrize("value", [b"q/1/2", b"q/1/2/x", b"/1/2/3", b"q/-1/2/3", None, b"\xff/1/2/3"])
def test_a_malformed_stamp_is_refused_quoting_it(value) -> None:
    with pytest.raises(OriginError, match="is not <query>/<batch>/<task>/<sequence>"):
        origin_of([(ORIGIN_HEADER, value)])


def test_a_query_id_with_a_slash_is_refused() -> None:
    with pytest.raises(OriginError, match="query id"):
        TaskOrigin("a/b", 0, 0)


def test_stamped_replaces_a_stamp_the_input_carries_and_keeps_the_users_headers() -> None:
    copied = [("a", b"1"), (ORIGIN_HEADER, b"old/0/0/0"), ("b", None)]
    assert stamped(copied, b"q/1/0/7") == [("a", b"1"), ("b", None), (ORIGIN_HEADER, b"q/1/0/7")]
    assert stamped(None, b"q/1/0/7") == [(ORIGIN_HEADER, b"q/1/0/7")]


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


def test_sink_options_and_their_defaults() -> None:
    options = parse_sink_options(
        {**BASE, "kafka.linger.ms": "20", "IncludeHeaders": "false", "tailLimit": "50", "checkpointLocation": "/tmp/x"}
    )
    assert options.bootstrap == "127.0.0.1:9092" and options.producer == {"linger.ms": "20"}
    assert options.topic == "out" and not options.include_headers and options.tail_limit == 50
    assert parse_sink_options({"kafka.bootstrap.servers": "b:1"}).topic is None


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
    headers = stamped(None, origin.prefix + b"3")
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
