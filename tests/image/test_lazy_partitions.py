"""Lazy partitions and the specialised decoders give the image the schema engine's eager decoding
gives (issue 17): random record sequences, built to hit every edge of a run of undecoded
PartitionRecords (out of order, repeated, not plain, interleaved with other topics, after a
removal, before their topic, garbage), are loaded and applied in random batches both ways."""

from __future__ import annotations

import dataclasses
import uuid

from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from quorum.image.compare import image_difference
from quorum.image.delta import MetadataDelta
from quorum.image.image import MetadataImage, TopicInfo, empty_image
from quorum.image.image_state import ImageState
from quorum.image.partition_records import PartitionRecords
from quorum.wire import metadata_records as mr
from quorum.wire.metadata_records import MetadataRecordError, encode_metadata_record
from tests.image.records import TOPIC_IDS, change, fence, partition, register, remove_topic, topic, unfence, unregister

BROKERS = st.integers(1, 4)
IDS = st.sampled_from(TOPIC_IDS)
REPLICAS = st.lists(BROKERS, min_size=1, max_size=3, unique=True)


@st.composite
def partition_records(draw: st.DrawFn) -> bytes:
    replicas = draw(REPLICAS)
    version = draw(st.sampled_from([0, 0, 0, 1]))
    extra = {"directories": [uuid.UUID(int=7)] * len(replicas)} if version == 1 else {}
    return encode_metadata_record(mr.PartitionRecord(
        version=version, partition_id=draw(st.integers(-1, 3)), topic_id=draw(IDS), replicas=replicas,
        isr=draw(st.sampled_from([replicas, replicas[:1]])), removing_replicas=draw(st.sampled_from([[], [4]])),
        adding_replicas=[], leader=draw(st.sampled_from([replicas[0], -1])), leader_epoch=draw(st.integers(0, 2)),
        partition_epoch=draw(st.integers(0, 2)), leader_recovery_state=draw(st.sampled_from([0, 0, 0, 1])),
        **extra))  # fmt: skip


@st.composite
def topic_runs(draw: st.DrawFn) -> list[bytes]:
    """What a snapshot or a CreateTopics writes: a TopicRecord, then its partitions in order."""
    topic_id = draw(IDS)
    name = draw(st.sampled_from(["a", "b", "c"]))
    values = [encode_metadata_record(mr.TopicRecord(version=0, name=name, topic_id=topic_id,
                                                    topic_epoch=draw(st.integers(-1, 5))))]  # fmt: skip
    for index in range(draw(st.integers(0, 4))):
        replicas = draw(REPLICAS)
        values.append(encode_metadata_record(mr.PartitionRecord(
            version=0, partition_id=index, topic_id=topic_id, replicas=replicas, isr=replicas, removing_replicas=[],
            adding_replicas=[], leader=replicas[0], leader_epoch=0, partition_epoch=0)))  # fmt: skip
    return values


SINGLE = st.one_of(
    partition_records(),
    st.builds(
        lambda topic_id, index, leader: change(topic_id, index, leader), IDS, st.integers(0, 3), st.integers(-2, 4)
    ),
    st.builds(remove_topic, IDS),
    st.builds(register, BROKERS),
    st.builds(fence, BROKERS),
    st.builds(unfence, BROKERS),
    st.builds(unregister, BROKERS),
    st.binary(max_size=8),  # not a metadata record: skipped alike
    partition_records().map(lambda value: value[:-1]),  # cut short: refused by the engine too
)
SEQUENCES = st.lists(st.one_of(topic_runs(), SINGLE.map(lambda value: [value])), max_size=25).map(
    lambda chunks: [value for chunk in chunks for value in chunk]
)


def detached(image: MetadataImage) -> MetadataImage:
    """The image with a fresh copy of every undecoded PartitionRecords, so that comparing it
    decodes the copies and the state under test stays undecoded for what comes next."""

    def copy(topic: TopicInfo) -> TopicInfo:
        partitions = topic.partitions
        if type(partitions) is PartitionRecords and not partitions.is_decoded:
            return dataclasses.replace(topic, partitions=partitions.settled(partitions.available))
        return topic

    by_id = {topic_id: copy(topic) for topic_id, topic in image.topics_by_id.items()}
    return dataclasses.replace(image, topics={topic.name: by_id[topic.topic_id] for topic in image.topics.values()},
                               topics_by_id=by_id)  # fmt: skip


def replayed(delta: MetadataDelta, value: bytes) -> bool | str:
    try:
        return delta.replay(value)
    except MetadataRecordError:
        return "refused"


def assert_same(lazy: ImageState, eager: ImageState, what: str) -> None:
    difference = image_difference(detached(lazy.image), eager.image)
    assert difference is None, f"{what}: {difference}"
    assert list(lazy.snapshot_values()) == list(eager.snapshot_values()), f"{what}: different snapshots"
    assert (len(lazy), lazy.skipped_records) == (len(eager), eager.skipped_records), what


T1 = TOPIC_IDS[0]


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(values=SEQUENCES, cuts=st.sets(st.integers(0, 60), max_size=4))
@example(values=[topic(T1, "a"), partition(T1, 0), remove_topic(T1), partition(T1, 1)], cuts=set())  # a closed run
@example(values=[topic(T1, "a"), partition(T1, 1), partition(T1, 0), partition(T1, 1, leader=2)], cuts={1})
@example(values=[topic(T1, "a"), partition(T1, 0), register(3), unfence(3), partition(T1, 1)], cuts={1, 3})
def test_lazy_decoding_gives_the_eager_image(values: list[bytes], cuts: set[int]) -> None:
    eager_load, lazy_load = ImageState(lazy=False), ImageState()
    eager_load.load(values, len(values) - 1)
    lazy_load.load(values, len(values) - 1)
    assert_same(lazy_load, eager_load, "loaded")
    assert lazy_load.records_in_snapshot == eager_load.records_in_snapshot

    eager, lazy = ImageState(lazy=False), ImageState()  # a node replaying the log, batch by batch
    for offset, value in enumerate(values):
        eager.apply(offset, value)
        lazy.apply(offset, value)
        if offset in cuts:  # a catch-up ends: the image is built, brokers settled over undecoded topics
            assert_same(lazy, eager, f"applied up to offset {offset}")
    assert_same(lazy, eager, "applied")
    assert lazy.changed_records == eager.changed_records, "KIP-630's changed-records count"
    assert image_difference(lazy.image, eager.image) is None, "decoded in place"

    deltas = (MetadataDelta(empty_image(), lazy=False), MetadataDelta(empty_image()))
    for value in values:  # each record applied or ignored alike
        eager_outcome, lazy_outcome = (replayed(delta, value) for delta in deltas)
        assert lazy_outcome == eager_outcome, value.hex()

    restarted = ImageState()  # the lazy image's snapshot (its plain records as they came) loaded again
    restarted.load(list(lazy_load.snapshot_values()))
    assert image_difference(detached(restarted.image), eager_load.image, ignore=frozenset({"offset"})) is None
