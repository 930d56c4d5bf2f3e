"""The specialised codecs of the two records snapshots are made of (PartitionRecord and
TopicRecord v0, `quorum.wire.metadata_records`) against the schema engine, and the plain-record
path of `RecordBatch.values` against `records()`: the same bytes, fields, values and faults."""

from __future__ import annotations

import contextlib
import uuid

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from quorum.wire import metadata_records as mr
from quorum.wire.metadata_records import (
    MetadataRecordError,
    decode_metadata_record,
    decode_plain_partition_v0,
    decode_plain_topic_v0,
    encode_metadata_record,
    encode_partition_v0,
    encode_payload,
    plain_partition_v0,
    uuid_from_bytes,
)
from quorum.wire.records import CorruptRecordError, Record, RecordBatch, build_batch, build_values_batch
from tests.wire.schema_strategies import message_values

SLOW = [HealthCheck.too_slow]
PARTITION_HEAD, TOPIC_HEAD = b"\x01\x03\x00", b"\x01\x02\x00"
U1 = uuid.UUID("00112233-4455-6677-8899-aabbccddeeff")


def engine_frame(record: object, head: bytes) -> bytes:
    return head + encode_payload(record, 0)  # type: ignore[arg-type]


def mutated(data: st.DataObject, frame: bytes) -> bytes:
    """`frame` with a few bytes changed, cut short or lengthened."""
    out = bytearray(frame)
    for _ in range(data.draw(st.integers(0, 3))):
        out[data.draw(st.integers(0, len(out) - 1))] = data.draw(st.integers(0, 255))
    cut = data.draw(st.sampled_from([0, 0, 1, 4]))
    return bytes(out[: len(out) - cut]) + data.draw(st.sampled_from([b"", b"", b"\x00"]))


def engine(frame: bytes) -> object | None:
    with contextlib.suppress(MetadataRecordError):
        return decode_metadata_record(frame)
    return None


def check_partition(frame: bytes) -> None:
    """A plain frame is one the engine reads as a v0 PartitionRecord with the same fields, and
    that `encode_partition_v0` writes back byte for byte."""
    if not plain_partition_v0(frame):
        return
    record = engine(frame)
    assert isinstance(record, mr.PartitionRecord) and record.version == 0, frame.hex()
    index, (replicas, isr, removing, adding), leader, leader_epoch, partition_epoch = decode_plain_partition_v0(frame)
    assert (index, list(replicas), list(isr), list(removing), list(adding), leader, leader_epoch, partition_epoch) == (
        record.partition_id, record.replicas, record.isr, record.removing_replicas, record.adding_replicas,
        record.leader, record.leader_epoch, record.partition_epoch)  # fmt: skip
    assert record.leader_recovery_state == 0
    assert frame[7:23] == (record.topic_id or uuid.UUID(int=0)).bytes
    assert encode_partition_v0(index, uuid_from_bytes(frame[7:23]), replicas, isr, removing, adding, leader, 0,
                               leader_epoch, partition_epoch) == frame  # fmt: skip


def check_topic(frame: bytes) -> None:
    """A frame `decode_plain_topic_v0` reads is one the engine reads as the same TopicRecord."""
    fields = decode_plain_topic_v0(frame)
    if fields is None:
        return
    record = engine(frame)
    assert isinstance(record, mr.TopicRecord), frame.hex()
    assert fields == (record.name, record.topic_id or mr.ZERO_UUID, record.topic_epoch)


@settings(max_examples=100, deadline=None, suppress_health_check=SLOW)
@given(data=st.data())
def test_specialised_encoders_write_what_the_engine_writes(data: st.DataObject) -> None:
    partition = data.draw(message_values(mr.PartitionRecord, 0))
    frame = encode_metadata_record(partition)
    assert frame == engine_frame(partition, PARTITION_HEAD)
    check_partition(frame)
    topic = data.draw(message_values(mr.TopicRecord, 0))
    frame = encode_metadata_record(topic)
    assert frame == engine_frame(topic, TOPIC_HEAD)
    check_topic(frame)


def test_plain_forms() -> None:
    frame = encode_metadata_record(mr.PartitionRecord(
        version=0, partition_id=7, topic_id=U1, replicas=[1, 2, 3], isr=[1, 2], removing_replicas=[],
        adding_replicas=[4], leader=1, leader_epoch=5, partition_epoch=6))  # fmt: skip
    assert plain_partition_v0(frame)
    assert decode_plain_partition_v0(frame) == (7, ((1, 2, 3), (1, 2), (), (4,)), 1, 5, 6)
    recovering = encode_metadata_record(mr.PartitionRecord(
        version=0, partition_id=7, topic_id=U1, replicas=[1], isr=[1], removing_replicas=[], adding_replicas=[],
        leader=1, leader_epoch=5, partition_epoch=6, leader_recovery_state=1))  # fmt: skip
    assert not plain_partition_v0(recovering), "a tagged field is not plain: the engine reads it"
    assert not plain_partition_v0(frame[:-1]) and not plain_partition_v0(frame + b"\x00")
    long = [*range(200)]
    many = mr.PartitionRecord(version=0, partition_id=0, topic_id=U1, replicas=long, isr=long, removing_replicas=[],
                              adding_replicas=[], leader=0, leader_epoch=0, partition_epoch=0)  # fmt: skip
    assert encode_metadata_record(many) == engine_frame(many, PARTITION_HEAD), "long lists: the engine writes them"
    assert not plain_partition_v0(encode_metadata_record(many))
    topic = encode_metadata_record(mr.TopicRecord(version=0, name="foo", topic_id=U1, topic_epoch=9))
    assert decode_plain_topic_v0(topic) == ("foo", U1, 9)
    assert decode_plain_topic_v0(encode_metadata_record(mr.TopicRecord(version=0, name="foo", topic_id=U1))) == (
        "foo",
        U1,
        -1,
    )
    assert decode_plain_topic_v0(topic[:-1]) is None
    assert decode_plain_topic_v0(TOPIC_HEAD + b"\x02\xff" + U1.bytes + b"\x00") is None, "not UTF-8: the engine says"
    assert uuid_from_bytes(U1.bytes) == U1 and hash(uuid_from_bytes(U1.bytes)) == hash(U1)


@settings(max_examples=125, deadline=None, suppress_health_check=SLOW)
@given(data=st.data())
def test_damaged_frames_are_read_as_the_engine_reads_them(data: st.DataObject) -> None:
    """Whatever the specialised decoders accept, the engine accepts with the same fields; the rest
    they leave to the engine."""
    partition = encode_metadata_record(data.draw(message_values(mr.PartitionRecord, 0)))
    check_partition(mutated(data, partition))
    topic = encode_metadata_record(data.draw(message_values(mr.TopicRecord, 0)))
    check_topic(mutated(data, topic))


@settings(max_examples=75, deadline=None)
@given(payload=st.binary(max_size=80))
def test_garbage_behind_a_header(payload: bytes) -> None:
    check_partition(PARTITION_HEAD + payload)
    check_topic(TOPIC_HEAD + payload)


# -- RecordBatch.values ---------------------------------------------------------------------------

RECORDS = st.lists(st.builds(
    lambda key, value, headers, delta: (key, value, headers, delta),
    st.none() | st.binary(max_size=3), st.none() | st.binary(max_size=300),
    st.sampled_from([[], [], [("h", b"v")]]), st.sampled_from([0, 0, 0, 1, 100_000])), max_size=200)  # fmt: skip


def batch_of(records: list[tuple[bytes | None, bytes | None, list[tuple[str, bytes | None]], int]]) -> bytes:
    return build_batch([Record(offset=index, timestamp=1_000 + delta, key=key, value=value, headers=headers)
                        for index, (key, value, headers, delta) in enumerate(records)])  # fmt: skip


def outcome(read: object) -> object:
    try:
        return read()  # type: ignore[operator]
    except CorruptRecordError as exc:
        return (exc.reason, exc.position)


@settings(max_examples=75, deadline=None, suppress_health_check=SLOW)
@given(records=RECORDS)
def test_values_are_the_records_values(records: list) -> None:  # type: ignore[type-arg]
    batch = RecordBatch(batch_of(records), 40)
    assert batch.values() == [record.value for record in RecordBatch(batch_of(records), 40).records()]
    assert batch.values() == [value for _, value, _, _ in records]


@settings(max_examples=125, deadline=None, suppress_health_check=SLOW)
@given(records=RECORDS.filter(bool), data=st.data())
def test_damaged_batches_give_records_faults(records: list, data: st.DataObject) -> None:  # type: ignore[type-arg]
    """Bytes changed in the records (the CRC is not what is tested here): values() returns what
    records() returns, or raises the same fault at the same byte."""
    raw = bytearray(batch_of(records))
    for _ in range(data.draw(st.integers(1, 3))):
        raw[data.draw(st.integers(61, len(raw) - 1))] = data.draw(st.integers(0, 255))

    def values() -> object:
        return RecordBatch(bytes(raw), 7).values()

    def from_records() -> object:
        return [record.value for record in RecordBatch(bytes(raw), 7).records()]

    assert outcome(values) == outcome(from_records)


# Values of about 8 KB on purpose (they cross the batch builder's buffer sizes): too large for the
# health check's entropy budget often enough to fail it, which says nothing of the code under test.
@settings(max_examples=50, deadline=None, suppress_health_check=[*SLOW, HealthCheck.data_too_large])
@given(
    values=st.lists(st.binary(max_size=70) | st.binary(min_size=8190, max_size=8200), max_size=40),
    count=st.sampled_from([0, 1, 9_000]),
    base=st.integers(0, 2**40),
    compression=st.sampled_from([0, 1]),
)
def test_values_batches_are_build_batchs(values: list[bytes], count: int, base: int, compression: int) -> None:
    """A snapshot writer's batch (values only) is byte for byte `build_batch`'s, past the varint
    tables too (lengths of 8,192 and more, offset deltas of 9,000 and more)."""
    values = values + [b"v"] * count
    records = [Record(base + index, 1_700, None, value, []) for index, value in enumerate(values)]
    assert build_values_batch(values, base, 3, 1_700, compression) == build_batch(records, base, 3, compression)
