"""MetadataRecordsState: event-sourced compaction by entity, snapshots that replay to the same state, change counts."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from quorum.image.records_state import EntityKind, MetadataRecordsState
from tests.image.records import (
    NO_OP,
    TOPIC_IDS,
    change,
    config,
    feature,
    fence,
    partition,
    records,
    register,
    remove_topic,
    topic,
    unfence,
    unregister,
)

T1, T2, T3 = TOPIC_IDS


def state_of(values: list[bytes], start: int = 0) -> MetadataRecordsState:
    state = MetadataRecordsState()
    for offset, value in enumerate(values, start):
        state.apply(offset, value)
    return state


def test_entities_keep_their_records_in_order() -> None:
    state = state_of([register(1), fence(1), topic(T1), partition(T1, 0), change(T1, 0, 2), unfence(1),
                      change(T1, 0, 3), config("t", "x", "1"), feature("metadata.version", 21), NO_OP, b"raw"])
    assert state.records_of(EntityKind.BROKER, 1) == (register(1), fence(1), unfence(1))
    assert state.records_of(EntityKind.PARTITION, (T1, 0)) == (partition(T1, 0), change(T1, 0, 2), change(T1, 0, 3))
    assert state.records_of(EntityKind.TOPIC, T1) == (topic(T1),)
    assert state.records_of(EntityKind.CONFIG, (2, "t", "x")) == (config("t", "x", "1"),)
    assert state.records_of(EntityKind.FEATURE, "metadata.version") == (feature("metadata.version", 21),)
    assert state.opaque_values == (b"raw",)
    assert len(state) == 10  # the NoOp is not kept
    assert state.snapshot_values() == [
        feature("metadata.version", 21),
        register(1), fence(1), unfence(1),
        topic(T1),
        partition(T1, 0), change(T1, 0, 2), change(T1, 0, 3),
        config("t", "x", "1"),
        b"raw",
    ]


def test_a_new_creating_record_replaces_the_entity() -> None:
    state = state_of([register(1, epoch=1), fence(1), register(1, epoch=2), partition(T1, 0), change(T1, 0, 2),
                      partition(T1, 0, leader=5), topic(T1, "a"), topic(T1, "b"), config("t", "x", "1"),
                      config("t", "x", "2"), feature("f", 1), feature("f", 2)])
    assert state.records_of(EntityKind.BROKER, 1) == (register(1, epoch=2),)
    assert state.records_of(EntityKind.PARTITION, (T1, 0)) == (partition(T1, 0, leader=5),)
    assert state.records_of(EntityKind.TOPIC, T1) == (topic(T1, "b"),)
    assert state.records_of(EntityKind.CONFIG, (2, "t", "x")) == (config("t", "x", "2"),)
    assert state.records_of(EntityKind.FEATURE, "f") == (feature("f", 2),)
    assert len(state) == 5


def test_deletions() -> None:
    state = state_of([register(1), fence(1), register(2), unregister(1), topic(T1), partition(T1, 0),
                      partition(T1, 1), change(T1, 1, 3), topic(T2), partition(T2, 0), remove_topic(T1),
                      config("t", "x", "1"), config("t", "y", "1"), config("t", "x", None), config("t", "z", None)])
    assert state.keys(EntityKind.BROKER) == [2]
    assert state.keys(EntityKind.TOPIC) == [T2]
    assert state.keys(EntityKind.PARTITION) == [(T2, 0)], "RemoveTopic takes the topic's partitions with it"
    assert state.keys(EntityKind.CONFIG) == [(2, "t", "y")]
    assert len(state) == 4


def test_partition_changes_without_a_partition_record_are_removed_with_the_topic() -> None:
    state = state_of([change(T1, 0, 1), remove_topic(T1)])
    assert state.keys(EntityKind.PARTITION) == [] and len(state) == 0


def test_offsets_must_increase() -> None:
    state = state_of([register(1)], start=5)
    assert state.last_offset == 5
    with pytest.raises(ValueError, match="applied once"):
        state.apply(5, fence(1))
    state.load(state.snapshot_values())
    assert state.last_offset == -1
    state.apply(6, fence(1))


def test_snapshot_values_is_a_copy() -> None:
    state = state_of([register(1)])
    values = state.snapshot_values()
    state.apply(1, fence(1))
    assert values == [register(1)]


@settings(max_examples=300, deadline=None)
@given(st.lists(records, max_size=40), st.data())
def test_a_snapshot_plus_the_rest_of_the_log_is_the_whole_log(values: list[bytes], data: st.DataObject) -> None:
    cut = data.draw(st.integers(0, len(values)))
    everything = state_of(values)
    prefix = state_of(values[:cut])
    snapshot = prefix.snapshot_values()
    loaded = MetadataRecordsState()
    loaded.apply(0, b"something to replace")
    loaded.load(snapshot)
    assert loaded == prefix and loaded.digest() == prefix.digest() and loaded.snapshot_values() == snapshot
    assert loaded.records_in_snapshot == len(snapshot) and loaded.changed_records == 0
    for offset, value in enumerate(values[cut:], cut):
        loaded.apply(offset, value)
    assert loaded == everything
    assert loaded.snapshot_values() == everything.snapshot_values(), "replicas write identical snapshots"
    assert loaded.digest() == everything.digest()
    assert len(loaded) == len(everything.snapshot_values())


def test_equality_and_digest_tell_states_apart() -> None:
    a, b = state_of([register(1), topic(T1)]), state_of([register(1), topic(T1)])
    assert a == b and a.digest() == b.digest()
    b.apply(2, fence(1))
    assert a != b and a.digest() != b.digest()
    assert state_of([topic(T1), topic(T2)]) == state_of([topic(T2), topic(T1)]), "the same entities"
    assert state_of([topic(T1), topic(T2)]).digest() != state_of([topic(T2), topic(T1)]).digest(), "not the same file"


# -- change accounting (KIP-630, "When to Snapshot") ---------------------------------------------

def loaded(values: list[bytes]) -> MetadataRecordsState:
    state = MetadataRecordsState()
    state.load(values)
    return state


def test_new_records_do_not_count() -> None:
    state = loaded([register(1), topic(T1)])
    assert (state.records_in_snapshot, state.changed_records) == (2, 0)
    for offset, value in enumerate([register(2), topic(T2), partition(T2, 0), config("t", "x", "1"), b"raw", NO_OP]):
        state.apply(offset, value)
    assert (state.records_in_snapshot, state.changed_records) == (2, 0)


def test_modified_and_deleted_snapshot_records_count_once_each() -> None:
    state = loaded([register(1), register(2), topic(T1), partition(T1, 0), change(T1, 0, 2), config("t", "x", "1")])
    state.apply(0, fence(1))                  # broker 1 modified: its RegisterBroker counts
    assert state.changed_records == 1
    state.apply(1, unregister(2))             # broker 2 deleted
    assert state.changed_records == 2
    state.apply(2, partition(T1, 0, leader=3))  # replaced: both of its records count
    assert state.changed_records == 4
    state.apply(3, config("t", "x", None))    # deleted
    assert state.changed_records == 5
    state.apply(4, config("t", "x", None))    # nothing left to delete
    state.apply(5, unregister(7))
    assert state.changed_records == 5
    assert state.records_in_snapshot == 6


def test_records_added_since_the_snapshot_count_once_changed_as_the_kip_says() -> None:
    state = loaded([register(1), topic(T1)])
    state.apply(0, fence(1))           # RegisterBroker(1) changes
    state.apply(1, unfence(1))         # the FenceBroker added at offset 0 changes in turn
    assert state.changed_records == 2
    state.apply(2, topic(T2))          # added: does not count ...
    state.apply(3, partition(T2, 0))
    assert state.changed_records == 2
    state.apply(4, remove_topic(T2))   # ... until deleted: the topic and its partition
    assert state.changed_records == 4
    state.apply(5, topic(T1, "renamed"))  # a snapshot record modified
    assert (state.records_in_snapshot, state.changed_records) == (2, 5)


def test_mark_snapshot_restarts_the_counts() -> None:
    state = state_of([register(1), topic(T1)])
    assert (state.records_in_snapshot, state.changed_records) == (0, 0)
    state.apply(2, fence(1))
    assert state.changed_records == 1, "counted against the empty snapshot before the first one"
    state.mark_snapshot()
    assert (state.records_in_snapshot, state.changed_records) == (3, 0)
    state.apply(3, unfence(1))
    assert state.changed_records == 2, "RegisterBroker, FenceBroker: both were in the snapshot"
    state.load(state.snapshot_values())
    assert (state.records_in_snapshot, state.changed_records) == (4, 0)
