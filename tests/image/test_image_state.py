"""ImageState: a snapshot plus the rest of the log is the whole log; snapshots in the fewest records; change counts."""

from __future__ import annotations

import logging
import uuid
from collections import Counter
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from quorum.image.image_state import ImageState, partition_record, topic_record
from quorum.image.replay import MetadataReplayer
from quorum.image.snapshot_policy import SnapshotPolicy
from quorum.log import Log
from quorum.wire import metadata_records as mr
from quorum.wire.metadata_records import (
    ZERO_UUID,
    MetadataRecordType,
    decode_metadata_record,
    encode_metadata_record,
    metadata_record_key,
)
from quorum.wire.records import Record, build_batch
from tests.image.test_delta import (
    BROKERS_UP,
    T1,
    T2,
    change,
    config,
    feature,
    fence,
    partition,
    register,
    remove_topic,
    topic,
    unfence,
    unregister,
)

BROKERS = [1, 2, 3, 4]
TOPIC_IDS = [uuid.UUID(int=n) for n in range(0x41, 0x46)]
NAMES = ["a", "b", "c"]


def state_of(values: list[bytes], start: int = 0, step: bool = False) -> ImageState:
    """`step`: build the image after every record (as a broker serving between records does)."""
    state = ImageState()
    for offset, value in enumerate(values, start):
        state.apply(offset, value)
        if step:
            assert state.image.offset == offset
    return state


def types_of(values) -> Counter:
    return Counter(metadata_record_key(value).record_type for value in values)


# -- random operation sequences ------------------------------------------------------------------


@st.composite
def operations(draw: st.DrawFn) -> list[bytes]:
    """Records as a controller writes them, mostly (new topics get the next topic epoch; an
    expansion is a TopicRecord with the next epoch and PartitionRecords), with stale epochs,
    missing entities, name clashes and values that are not metadata records mixed in."""
    values: list[bytes] = []
    counter = 0
    for _ in range(draw(st.integers(0, 30))):
        kind = draw(
            st.sampled_from(
                [
                    "register",
                    "fence",
                    "unfence",
                    "unregister",
                    "create",
                    "expand",
                    "change",
                    "partition",
                    "remove",
                    "config",
                    "feature",
                    "noop",
                    "junk",
                ]
            )
        )
        broker = draw(st.sampled_from(BROKERS))
        epoch = draw(st.integers(1, 3))
        topic_id = draw(st.sampled_from(TOPIC_IDS))
        replicas = draw(st.lists(st.sampled_from(BROKERS), min_size=1, max_size=3, unique=True))
        if kind == "register":
            values.append(
                register(
                    broker,
                    epoch,
                    fenced=draw(st.booleans()),
                    listeners=draw(st.sampled_from([("PLAINTEXT",), ("PLAINTEXT", "INTERNAL"), ()])),
                )
            )
        elif kind == "fence":
            values.append(fence(broker, epoch))
        elif kind == "unfence":
            values.append(unfence(broker, epoch))
        elif kind == "unregister":
            values.append(unregister(broker, epoch))
        elif kind in ("create", "expand"):
            counter += 1
            stale = draw(st.sampled_from([None, None, None, -1, 0]))
            values.append(topic(topic_id, draw(st.sampled_from(NAMES)), counter if stale is None else stale))
            first = 0 if kind == "create" else draw(st.integers(1, 3))
            for index in range(first, first + draw(st.integers(1, 3))):
                values.append(partition(topic_id, index, replicas, leader_epoch=draw(st.integers(0, 3))))
        elif kind == "change":
            fields = {}
            if draw(st.booleans()):
                fields["leader"] = draw(st.sampled_from([-1, *BROKERS]))
            if draw(st.booleans()):
                fields["isr"] = draw(st.lists(st.sampled_from(BROKERS), max_size=3, unique=True))
            if draw(st.booleans()):
                fields["replicas"] = replicas
            if draw(st.booleans()):
                fields["leader_recovery_state"] = draw(st.sampled_from([0, 1]))
            values.append(change(topic_id, draw(st.integers(0, 3)), **fields))
        elif kind == "partition":
            values.append(partition(topic_id, draw(st.integers(0, 3)), replicas, partition_epoch=epoch))
        elif kind == "remove":
            counter += 1
            values.append(
                remove_topic(
                    draw(st.sampled_from([*TOPIC_IDS, ZERO_UUID])), draw(st.sampled_from([counter, counter, -1]))
                )
            )
        elif kind == "config":
            values.append(
                config(
                    draw(st.sampled_from([2, 4])),
                    draw(st.sampled_from([*NAMES, "1"])),
                    draw(st.sampled_from(["x", "y"])),
                    draw(st.sampled_from([None, "1", "2"])),
                )
            )
        elif kind == "feature":
            name = draw(st.sampled_from(["metadata.version", "kraft.version"]))
            values.append(feature(name, draw(st.integers(0, 2))))
        elif kind == "noop":
            values.append(encode_metadata_record(mr.NoOpRecord(version=0)))
        else:
            values.append(draw(st.binary(max_size=8)))
    return values


@settings(max_examples=75, deadline=None)
@given(operations(), st.data())
def test_a_snapshot_plus_the_rest_of_the_log_is_the_whole_log(values: list[bytes], data: st.DataObject) -> None:
    cut = data.draw(st.integers(0, len(values)))
    everything = state_of(values)
    stepwise = state_of(values, step=True)
    assert stepwise.image == everything.image, "one image per record or one for all: the same image"
    assert stepwise.digest() == everything.digest(), "... and the same snapshot bytes"

    prefix = state_of(values[:cut])
    snapshot = list(prefix.snapshot_values())
    loaded = ImageState()
    loaded.apply(0, register(9))
    loaded.load(snapshot, offset=cut - 1)
    assert loaded.image == prefix.image and loaded.last_offset == cut - 1
    assert list(loaded.snapshot_values()) == snapshot, "a loaded snapshot writes itself back byte for byte"
    assert loaded.records_in_snapshot == len(snapshot) == len(prefix) and loaded.changed_records == 0
    for offset, value in enumerate(values[cut:], cut):
        loaded.apply(offset, value)
    assert loaded.image == everything.image
    assert loaded.digest() == everything.digest(), "replicas at the same offset write identical snapshots"
    assert len(loaded) == len(list(everything.snapshot_values()))


@settings(max_examples=50, deadline=None)
@given(operations())
def test_the_topic_epoch_counter_never_goes_back(values: list[bytes]) -> None:
    state = ImageState()
    seen = -1
    for offset, value in enumerate(values):
        state.apply(offset, value)
        image = state.image
        assert image.topic_epoch >= seen
        seen = image.topic_epoch
        assert all(topic.topic_epoch <= seen for topic in image.topics.values())
        reloaded = ImageState()
        reloaded.load(state.snapshot_values(), offset)
        assert reloaded.image.topic_epoch == seen, "a snapshot carries the counter"


# -- snapshots -----------------------------------------------------------------------------------


def test_a_snapshot_describes_each_entity_in_one_record() -> None:
    values = [
        feature("metadata.version", 21),
        *BROKERS_UP,
        fence(2),
        unfence(2),
        topic(T1, "a", 1),
        partition(T1, 0, [1, 2]),
        partition(T1, 1, [2, 3]),
        change(T1, 0, leader=2),
        change(T1, 0, isr=[2]),
        topic(T1, "a", 2),
        partition(T1, 2, [3, 1]),
        config(2, "a", "retention.ms", "1"),
        config(2, "a", "retention.ms", "2"),
        config(4, "1", "x", "y"),
    ]
    state = state_of(values)
    snapshot = list(state.snapshot_values())
    assert types_of(snapshot) == {
        MetadataRecordType.FEATURE_LEVEL: 1,
        MetadataRecordType.REGISTER_BROKER: 3,
        MetadataRecordType.TOPIC: 1,
        MetadataRecordType.PARTITION: 3,
        MetadataRecordType.CONFIG: 2,
    }
    assert len(state) == len(snapshot) == 10
    assert metadata_record_key(snapshot[0]).record_type is MetadataRecordType.FEATURE_LEVEL, "features first"
    assert decode_metadata_record(snapshot[4]).topic_epoch == 2, "the topic's current epoch"
    first = decode_metadata_record(snapshot[5])
    assert (first.leader, first.isr, first.leader_epoch, first.partition_epoch) == (2, [2], 2, 2)
    assert all(decode_metadata_record(value).fenced is False for value in snapshot[1:4]), "the current fencing"


def test_a_counter_above_every_live_topic_is_carried_by_a_removal_of_the_zero_id() -> None:
    state = state_of([topic(T1, "a", 1), topic(T2, "b", 2), remove_topic(T2, 3)])
    snapshot = list(state.snapshot_values())
    carrier = decode_metadata_record(snapshot[-1])
    assert type(carrier) is mr.RemoveTopicRecord and carrier.topic_id is None and carrier.topic_epoch == 3
    assert len(state) == 2
    state.apply(3, topic(T2, "b", 4))
    assert types_of(state.snapshot_values())[MetadataRecordType.REMOVE_TOPIC] == 0, "a live topic holds it again"


def test_snapshot_values_hold_the_image_of_their_time() -> None:
    state = state_of(BROKERS_UP)
    values = state.snapshot_values()
    state.apply(len(BROKERS_UP), fence(1))
    assert len(values) == 3 and all(not decode_metadata_record(value).fenced for value in values)
    assert values[0] == list(values)[0] and values == list(values)


def test_the_compiled_encoder_writes_what_encode_metadata_record_writes() -> None:
    state = state_of(
        [
            *BROKERS_UP,
            topic(T1, "ä-topic", 7),
            partition(T1, 0, [1, 2, 3], isr=[1], leader_epoch=3),
            change(T1, 0, leader_recovery_state=1, removing_replicas=[3], adding_replicas=[4]),
            topic(T2, "b"),
            partition(T2, 5, [2], leader=-1),
        ]
    )
    for item in state.image.topics.values():
        assert topic_record(item) == encode_metadata_record(
            mr.TopicRecord(version=0, name=item.name, topic_id=item.topic_id, topic_epoch=item.topic_epoch)
        )
        for p in item.partitions:
            assert partition_record(item, p) == encode_metadata_record(
                mr.PartitionRecord(
                    version=0,
                    partition_id=p.partition,
                    topic_id=item.topic_id,
                    replicas=list(p.replicas),
                    isr=list(p.isr),
                    removing_replicas=list(p.removing_replicas),
                    adding_replicas=list(p.adding_replicas),
                    leader=p.leader,
                    leader_recovery_state=p.leader_recovery_state,
                    leader_epoch=p.leader_epoch,
                    partition_epoch=p.partition_epoch,
                )
            )


def test_values_that_are_not_metadata_records_are_skipped_and_logged_once(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG, logger="quorum.image.image_state")
    state = state_of([b"raw", register(1), b"\x01\x03\x00", b"more"])
    assert state.skipped_records == 3 and list(state.image.registrations) == [1] and len(state) == 1
    warnings = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1 and "offset 0" in warnings[0].getMessage()
    loaded = ImageState()
    loaded.load([register(1), b"junk"])
    assert loaded.skipped_records == 1 and loaded.image == state_of([register(1)]).image.__class__(
        **{**vars_of(state.image), "offset": -1}
    )


def vars_of(image) -> dict:
    return {name: getattr(image, name) for name in image.__dataclass_fields__ if not name.startswith("_")}


def test_offsets_must_increase_and_load_sets_the_offset() -> None:
    state = state_of([register(1)], start=5)
    assert state.last_offset == 5 and state.image.offset == 5
    with pytest.raises(ValueError, match="applied once"):
        state.apply(5, fence(1))
    state.load(state.snapshot_values())
    assert state.last_offset == -1
    state.load(state.snapshot_values(), offset=9)
    assert state.last_offset == 9 and state.image.offset == 9
    with pytest.raises(ValueError):
        state.apply(9, fence(1))


def test_identity_is_set_apart_from_the_log_and_keeps_the_memo() -> None:
    state = ImageState(listener="INTERNAL", cluster_id="c1", controller_id=1)
    state.apply(0, register(1, fenced=False))
    state.image.encoded[("t", 12)] = b"x"
    state.set_identity(controller_id=3)
    image = state.image
    assert (image.cluster_id, image.controller_id, image.listener) == ("c1", 3, "INTERNAL")
    assert image.brokers[1].host == "internal-1" and image.encoded == {("t", 12): b"x"}
    state.load(state.snapshot_values())
    assert (state.image.cluster_id, state.image.controller_id, state.image.listener) == ("c1", 3, "INTERNAL")


# -- change accounting (KIP-630, "When to Snapshot") ---------------------------------------------


def loaded(values: list[bytes]) -> ImageState:
    state = ImageState()
    state.load(values)
    return state


def test_new_records_do_not_count() -> None:
    state = loaded([register(1), topic(T1, "a", 1)])
    assert (state.records_in_snapshot, state.changed_records) == (2, 0)
    for offset, value in enumerate(
        [
            register(2),
            topic(T2, "b", 2),
            partition(T2, 0, [1]),
            config(2, "b", "x", "1"),
            b"raw",
            encode_metadata_record(mr.NoOpRecord(version=0)),
        ]
    ):
        state.apply(offset, value)
    assert (state.records_in_snapshot, state.changed_records) == (2, 0)


def test_modified_and_deleted_snapshot_records_count_once_each() -> None:
    state = loaded(
        [register(1), register(2), topic(T1, "a", 1), partition(T1, 0, [1]), config(2, "a", "x", "1"), feature("f", 1)]
    )
    state.apply(0, unfence(1))
    state.apply(1, fence(1))  # the same record again: counted once
    assert state.changed_records == 1
    state.apply(2, unregister(2))
    assert state.changed_records == 2
    state.apply(3, change(T1, 0, leader=1))
    state.apply(4, change(T1, 0, isr=[]))
    assert state.changed_records == 3
    state.apply(5, config(2, "a", "x", "2"))  # replaced
    state.apply(6, feature("f", 1))  # changes nothing
    assert state.changed_records == 4
    state.apply(7, unregister(7))
    state.apply(8, fence(1, epoch=9))
    assert state.changed_records == 4, "records about nothing change nothing"
    state.apply(9, remove_topic(T1, 2))
    assert state.changed_records == 6, "the topic, and the config record added at offset 5; the partition was counted"
    assert state.records_in_snapshot == 6


def test_records_added_since_the_snapshot_count_once_changed_as_the_kip_says() -> None:
    state = loaded([register(1)])
    state.apply(0, topic(T2, "b", 1))
    state.apply(1, partition(T2, 0, [1]))
    assert state.changed_records == 0
    state.apply(2, remove_topic(T2, 2))  # the topic and its partition
    assert state.changed_records == 2
    state.apply(3, partition(T2, 0, [1]))  # no such topic any more: ignored
    state.apply(4, config(2, "b", "x", "1"))
    state.apply(5, config(2, "b", "x", "2"))  # the config added at offset 4 is replaced
    assert (state.records_in_snapshot, state.changed_records) == (1, 3)


def test_mark_snapshot_restarts_the_counts() -> None:
    state = state_of([register(1), topic(T1, "a", 1)])
    assert (state.records_in_snapshot, state.changed_records) == (0, 0)
    state.apply(2, unfence(1))
    assert state.changed_records == 1
    state.mark_snapshot()
    assert (state.records_in_snapshot, state.changed_records) == (2, 0)
    state.apply(3, fence(1))
    assert state.changed_records == 1


# -- under the replayer --------------------------------------------------------------------------


def test_the_replayer_drives_an_image_state_through_a_snapshot(tmp_path: Path) -> None:
    values = [
        *BROKERS_UP,
        topic(T1, "a", 1),
        partition(T1, 0, [1, 2]),
        b"not a record",
        change(T1, 0, leader=2),
        fence(1),
        topic(T2, "b", 2),
        partition(T2, 0, [3]),
        remove_topic(T1, 3),
        config(4, "1", "x", "y"),
    ]
    log = Log(tmp_path)
    for offset, value in enumerate(values):
        log.append(
            build_batch(
                [Record(offset, 1_763_700_000_000, None, value, [])], base_offset=offset, partition_leader_epoch=1
            )
        )
    log.flush()
    policy = SnapshotPolicy(1.0, 1 << 62)
    with log:
        first = MetadataReplayer(tmp_path, log, ImageState(), policy)
        first.boot()
        first.catch_up(9)
        snapshot_id = first.snapshot_now()
        assert snapshot_id is not None and snapshot_id.offset == 9
        first.catch_up(len(values))
        second = MetadataReplayer(tmp_path, log, ImageState(), policy)
        assert second.boot() == snapshot_id
        second.catch_up(len(values))
    assert second.state == first.state == state_of(values)
    assert second.state.digest() == first.state.digest()
    assert list(second.state.image.topics) == ["b"] and second.state.image.topic_epoch == 3
