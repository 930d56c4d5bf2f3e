"""Offsets of deleted topics on the core: tombstoned when the topic goes (Kafka's onPartitionsDeleted),
dropped by a partition loaded after the deletion, and commits naming an old topic id refused."""

from __future__ import annotations

import uuid

from hypothesis import given
from hypothesis import strategies as st

from quorum.broker.groups.config import GroupConfig
from quorum.broker.groups.coordinator import GroupCoordinator
from quorum.broker.groups.events import CommitEntry, OffsetCommit, OffsetFetch
from quorum.broker.groups.offsets import check_entry, is_stale
from quorum.wire.consumer_offsets import GroupKey, OffsetKey, OffsetValue, decode_record
from quorum.wire.errors import ErrorCode as E
from quorum.wire.internal_metadata import InternalMetadata, encode
from tests.broker.groups.harness import GROUP, Harness
from tests.broker.groups.test_offsets import commit, fetched

OLD, NEW, OTHER = uuid.UUID(int=1), uuid.UUID(int=2), uuid.UUID(int=3)
IDS = st.none() | st.sampled_from([OLD, NEW, OTHER])
EPOCHS = st.integers(-1, 5)


def internal(topic_epoch: int, leader_epoch: int, topic_id: uuid.UUID | None) -> str:
    return encode("user", InternalMetadata(topic_epoch, leader_epoch, topic_id))


def tombstones(h: Harness, since: int = 0) -> list:
    return [decode_record(k, v)[0] for k, v in h.log[h.core.partition_for(GROUP)][since:] if v is None]


def reload(h: Harness, topics: dict[str, uuid.UUID]) -> None:
    """Restart the coordinator from its log, with the broker's metadata now naming `topics`."""
    h.core = GroupCoordinator(h.core.config)
    h.load_all()
    for partition in range(h.core.config.offsets_topic_num_partitions):
        h.take(h.core.drop_stale_offsets(partition, topics.get))
    h.flush()


def test_deleting_a_topic_tombstones_its_offsets_and_keeps_the_others() -> None:
    h = Harness()
    assert commit(h, CommitEntry("gone", 0, 20, topic_id=OLD), CommitEntry("gone", 1, 7, topic_id=OLD),
                  CommitEntry("kept", 0, 5, topic_id=OTHER)) == (E.NONE,) * 3
    size = len(h.log[h.core.partition_for(GROUP)])
    h.take(h.core.topics_deleted({OLD: "gone"}, {"kept": OTHER}.get))
    h.flush()
    assert fetched(h)[1] == {("kept", 0): (5, -1, "", E.NONE)}
    assert sorted(tombstones(h, size), key=str) == [OffsetKey(GROUP, "gone", 0), OffsetKey(GROUP, "gone", 1)]
    reload(h, {"kept": OTHER})
    assert fetched(h)[1] == {("kept", 0): (5, -1, "", E.NONE)}, "the tombstones hold across a restart"


def test_an_empty_group_left_without_offsets_is_removed_too() -> None:
    h = Harness()
    assert commit(h, CommitEntry("gone", 0, 20, topic_id=OLD)) == (E.NONE,)
    h.take(h.core.topics_deleted({OLD: "gone"}, {}.get))
    h.flush()
    assert h.core.group(GROUP) is None
    assert GroupKey(GROUP) in tombstones(h)



def test_an_offset_without_a_topic_id_goes_with_its_topic_even_when_one_of_its_name_is_back() -> None:
    """Kafka's own offset value has no topic id (the Kafka-compatible mode, older commits). A broker that
    applies the deletion and the re-creation of a topic as one image (its applier skips to the newest)
    sees the old id gone and a new one under the name: the offset is the old topic's, and goes, as
    Kafka's onPartitionsDeleted deletes by name. A fresh consumer of the new topic once started at the
    old topic's committed position (a fresh-clone run, kafka-compatible mode, kafka-python)."""
    h = Harness()
    assert commit(h, CommitEntry("rc", 0, 20), CommitEntry("rc", 1, 20, topic_id=OLD),
                  CommitEntry("kept", 0, 5)) == (E.NONE,) * 3
    h.take(h.core.topics_deleted({OLD: "rc"}, {"rc": NEW, "kept": OTHER}.get))
    h.flush()
    assert fetched(h)[1] == {("kept", 0): (5, -1, "", E.NONE)}
    assert commit(h, CommitEntry("rc", 0, 3)) == (E.NONE,), "the new topic's commits are kept"
    reload(h, {"rc": NEW, "kept": OTHER})
    assert fetched(h)[1] == {("kept", 0): (5, -1, "", E.NONE), ("rc", 0): (3, -1, "", E.NONE)}


def test_a_partition_loaded_after_the_deletion_drops_the_old_topics_offsets() -> None:
    """The broker was down (or did not lead the partition) when the topic was deleted and created again."""
    h = Harness()
    assert commit(h, CommitEntry("rc", 0, 20, topic_id=OLD), CommitEntry("kept", 0, 5, topic_id=OTHER),
                  CommitEntry("legacy", 0, 3)) == (E.NONE,) * 3
    reload(h, {"rc": NEW, "kept": OTHER, "legacy": OTHER})
    assert fetched(h)[1] == {("kept", 0): (5, -1, "", E.NONE), ("legacy", 0): (3, -1, "", E.NONE)}, (
        "an offset stored without a topic id is kept while its topic exists")
    reload(h, {"kept": OTHER})
    assert fetched(h)[1] == {("kept", 0): (5, -1, "", E.NONE)}


def test_a_commit_in_flight_when_its_topic_is_deleted_is_not_kept() -> None:
    h = Harness()
    assert commit(h, CommitEntry("gone", 0, 20, topic_id=OLD), flush=False) is None
    h.take(h.core.topics_deleted({OLD: "gone"}, {}.get))
    h.flush()
    assert fetched(h)[1] == {}
    reload(h, {})
    assert fetched(h)[1] == {}


def test_internal_metadata_naming_an_old_topic_id_is_refused() -> None:
    h = Harness()
    errors = commit(h, CommitEntry("rc", 0, 20, metadata=internal(3, 0, OLD), topic_id=NEW),
                    CommitEntry("rc", 1, 20, metadata=internal(3, 0, NEW), topic_id=NEW),
                    CommitEntry("rc", 2, 20, metadata=internal(3, 0, None), topic_id=NEW))
    assert errors == (E.INVALID_INTERNAL_METADATA, E.NONE, E.NONE)


def test_epochs_of_an_old_topics_offset_do_not_block_the_new_topic() -> None:
    """An offset of the old topic still stored (not yet dropped) is not a floor for the new one's commits."""
    h = Harness()
    assert commit(h, CommitEntry("rc", 0, 20, metadata=internal(9, 4, OLD), topic_id=OLD)) == (E.NONE,)
    assert commit(h, CommitEntry("rc", 0, 3, metadata=internal(9, 0, NEW), topic_id=NEW)) == (E.NONE,)


@given(IDS, IDS, IDS, EPOCHS, EPOCHS, EPOCHS, EPOCHS)
def test_refusal_rule(named, current, stored, topic_epoch, leader_epoch, stored_topic_epoch, stored_leader_epoch):
    """A commit is refused exactly when its internal metadata names another topic id than the current
    one, or when it is older (KIP-232 order) than what is stored for the same topic."""
    entry = CommitEntry("rc", 0, 1, metadata=internal(topic_epoch, leader_epoch, named), topic_id=current)
    latest = OffsetValue(0, -1, internal(stored_topic_epoch, stored_leader_epoch, None), 0, topic_id=stored)
    error = check_entry(entry, latest, GroupConfig())
    other_topic = named is not None and current is not None and named != current
    same_incarnation = stored is None or current is None or stored == current
    older = (topic_epoch, leader_epoch) < (stored_topic_epoch, stored_leader_epoch)
    expected = other_topic or (same_incarnation and older)
    assert error == (E.INVALID_INTERNAL_METADATA if expected else E.NONE)


@given(IDS, IDS)
def test_stale_rule(stored, current):
    """An offset is dropped when its topic is gone, or when it names another id than the current one."""
    value = OffsetValue(5, -1, "", 0, topic_id=stored)
    assert is_stale(value, current) == (current is None or (stored is not None and stored != current))


def test_coordinator_without_metadata_keeps_everything() -> None:
    """A commit entry without a topic id (no metadata) is stored and accepted as before."""
    h = Harness()
    handle = h.send("offset_commit", OffsetCommit(GROUP, (CommitEntry("t", 0, 1, metadata=internal(1, 0, OLD)),)))
    h.flush()
    assert h.answer(handle).errors == (E.NONE,)


def test_a_fetch_before_the_deletion_is_applied_hides_the_offsets_of_a_topic_gone_or_created_again() -> None:
    """The broker's newest metadata may already lack the topic (or name it under a new id) while the
    image that tombstones its offsets is still being applied: OffsetFetch answers no offset for it
    then, never the old topic's position (a fresh consumer of the recreated topic got offset 20 in a
    loaded CI run)."""
    h = Harness()
    assert commit(h, CommitEntry("recreated", 0, 20, topic_id=OLD), CommitEntry("gone", 0, 7, topic_id=OLD),
                  CommitEntry("kept", 0, 5, topic_id=OTHER)) == (E.NONE,) * 3
    newest = {"recreated": NEW, "kept": OTHER}.get
    answer = h.core.offset_fetch(OffsetFetch(GROUP, None), newest)
    assert {(o.topic, o.partition): o.offset for o in answer.offsets} == \
        {("recreated", 0): -1, ("gone", 0): -1, ("kept", 0): 5}
    assert fetched(h)[1][("recreated", 0)][0] == 20, "without the metadata the stored offset is answered as before"
