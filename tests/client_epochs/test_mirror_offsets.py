"""Offset translation, sans IO (client_epochs.mirror.offsets, quorum.wire.mm2_records): MM2's record
bytes, the sync rule and MM2's translation rule, checked by hypothesis against a simulated replicator
over random source gaps, restarts that duplicate copies and syncs lost to kill -9; which groups are
checkpointed, which checkpoints are written, what is committed on the target."""

from __future__ import annotations

import contextlib

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from client_epochs.mirror.offsets import (
    Committed,
    GroupFilter,
    OffsetTranslationOptions,
    SyncHistory,
    SyncRule,
    apply_syncs,
    checkpoints_for_group,
    checkpoints_topic,
    latest_checkpoints,
    offset_syncs_topic,
    offsets_to_sync,
    refine,
    target_commit_metadata,
    user_metadata,
)
from client_epochs.mirror.progress import PROVENANCE_HEADER, Provenance, copy_headers
from client_epochs.model import TopicPartition
from quorum.wire.internal_metadata import InternalMetadata, decode, encode
from quorum.wire.mm2_records import Checkpoint, MM2RecordError, OffsetSync

TP = TopicPartition("orders", 0)

# --- MM2's records --------------------------------------------------------------------------------------


def test_offset_sync_bytes_are_mm2s():
    sync = OffsetSync("orders", 3, 41, 40)
    assert sync.key() == b"\x00\x06orders" + b"\x00\x00\x00\x03"
    assert sync.value() == (41).to_bytes(8, "big") + (40).to_bytes(8, "big")
    assert OffsetSync.decode(sync.key(), sync.value()) == sync


def test_checkpoint_bytes_are_mm2s():
    checkpoint = Checkpoint("g1", "source.orders", 2, 100, 97, "meta")
    assert checkpoint.key() == b"\x00\x02g1" + b"\x00\x0dsource.orders" + b"\x00\x00\x00\x02"
    assert checkpoint.value() == (b"\x00\x00" + (100).to_bytes(8, "big") + (97).to_bytes(8, "big")
                                  + b"\x00\x04meta")
    assert Checkpoint.decode(checkpoint.key(), checkpoint.value()) == checkpoint


@given(group=st.text(max_size=50), topic=st.from_regex(r"[a-zA-Z0-9._-]{1,249}", fullmatch=True),
       partition=st.integers(0, 2**31 - 1), upstream=st.integers(-1, 2**63 - 1),
       downstream=st.integers(-1, 2**63 - 1), metadata=st.text(max_size=100))
def test_records_round_trip(group, topic, partition, upstream, downstream, metadata):
    sync = OffsetSync(topic, partition, upstream, downstream)
    assert OffsetSync.decode(sync.key(), sync.value()) == sync
    checkpoint = Checkpoint(group, topic, partition, upstream, downstream, metadata)
    assert Checkpoint.decode(checkpoint.key(), checkpoint.value()) == checkpoint


@given(data=st.binary(max_size=40))
def test_garbage_is_a_clean_error(data):
    for decode_record in (OffsetSync.decode, Checkpoint.decode):
        for key, value in ((data, data), (OffsetSync("t", 0, 1, 2).key(), data), (data, None), (None, data)):
            with contextlib.suppress(MM2RecordError):  # anything else fails the test
                decode_record(key, value)


@pytest.mark.parametrize("key, value, words", [
    (b"\x00\x05ab", b"", "ends at byte 4 inside topic"),
    (b"\xff\xffxx\x00\x00\x00\x00", bytes(16), "null"),
    (b"\x00\x01t\x00\x00\x00\x00\x00", bytes(16), "after its last field"),
    (None, bytes(16), "is null"),
])
def test_a_bad_offset_sync_says_what_is_wrong(key, value, words):
    with pytest.raises(MM2RecordError, match=words):
        OffsetSync.decode(key, value)


def test_an_unknown_checkpoint_version_is_refused():
    value = b"\x00\x01" + Checkpoint("g", "t", 0, 1, 1).value()[2:]
    with pytest.raises(MM2RecordError, match="version 1"):
        Checkpoint.decode(Checkpoint("g", "t", 0, 1, 1).key(), value)


def test_topic_names_are_mm2s():
    assert offset_syncs_topic("backup") == "mm2-offset-syncs.backup.internal"
    assert checkpoints_topic("primary") == "primary.checkpoints.internal"


# --- the sync rule --------------------------------------------------------------------------------------


def test_syncs_at_the_first_copy_at_each_gap_and_every_lag_max():
    rule = SyncRule(lag_max=3)
    made = [(u, d) for u, d in [(10, 0), (11, 1), (12, 2), (14, 3), (15, 4), (16, 5), (17, 6), (18, 7)]
            if rule.copied(u, d)]
    assert made == [(10, 0), (14, 3), (17, 6)]  # first; a source gap (13); 3 target offsets past (14, 3)
    assert rule.high_mark() == (18, 7)
    assert rule.high_mark() is None  # nothing new acknowledged


def test_a_duplicate_after_a_restart_is_synced():
    rule = SyncRule()
    assert rule.copied(5, 5) and not rule.copied(6, 6)
    assert rule.copied(6, 7)  # the same source offset again (a copy the restart could not see)


# --- translation ----------------------------------------------------------------------------------------


def test_translation_is_mm2s():
    history = SyncHistory()
    for u, d in [(10, 0), (14, 3), (17, 6)]:
        history.add(u, d)
    assert [history.translate(g) for g in (-1, 9, 10, 11, 13, 14, 15, 17, 30)] == [None, None, 0, 1, 1, 3, 4, 6, 7]


def test_a_rewound_sync_replaces_those_at_or_above_it():
    history = SyncHistory()
    for u, d in [(0, 0), (50, 50), (60, 60), (40, 70)]:
        history.add(u, d)
    assert history.upstream == [0, 40] and history.translate(55) == 71


def test_a_truncated_target_drops_the_syncs_it_may_no_longer_hold():
    history = SyncHistory()
    for u, d in [(0, 0), (50, 50), (99, 99), (100, 0)]:  # the target recreated, copying from 100 again
        history.add(u, d)
    assert history.upstream == [100] and history.translate(50) is None and history.translate(100) == 0
    for u, d in [(0, 0), (50, 50), (99, 99), (100, 60)]:  # lost 60..99 (an unclean election)
        history.add(u, d)
    assert history.upstream == [0, 50, 100] and history.translate(70) == 51


def test_refine_finds_the_first_copy_at_or_after_the_commit():
    other = TopicPartition("other", 0)
    records = [(5, copy_headers(None, Provenance("orders", 0, 8), None)),
               (6, [("k", b"v")]),  # another writer's
               (7, copy_headers(None, Provenance(other.topic, 0, 99), None)),
               (8, [(PROVENANCE_HEADER, b"garbage")]),
               (9, copy_headers(None, Provenance("orders", 0, 12), None))]
    assert refine(records, TP, 9, 5, None) == 9
    assert refine(records, TP, 8, 5, None) == 5
    assert refine(records, TP, 13, 5, 10) == 10  # read to the end: the next copy comes after it
    assert refine(records, TP, 13, 5, 11) == 5  # not to the end: the conservative offset stands
    assert refine([], TP, 13, 7, 7) == 7


def test_thinning_keeps_the_newest_half_and_stays_safe():
    history = SyncHistory(limit=8)
    for u in range(0, 90, 10):
        history.add(u, u)
    assert len(history) == 7 and history.upstream[-4:] == [50, 60, 70, 80]
    assert all(history.translate(g) <= g for g in range(0, 100))


def simulate(n, gaps, kills, lag_max, ticks):
    """A replicator copying source offsets 0..n-1 (`gaps` never delivered) into one target partition.

    `kills`: (after how many copies of this run, copies written but not acknowledged, how many of those
    the restart's tail read sees, syncs of acknowledged copies not yet written) per kill -9. `ticks`:
    after which copies the high-mark interval passes. Returns (target log of source offsets, syncs
    written in order, the last sync-less run's end)."""
    delivered = [u for u in range(n) if u not in gaps]
    target: list[int] = []
    syncs: list[tuple[int, int]] = []
    committed = 0
    visible_last = -1
    kills = list(kills)
    while True:
        start = max(committed, visible_last + 1)
        todo = [u for u in delivered if u >= start]
        rule = SyncRule(lag_max=lag_max)
        pending: list[tuple[int, int]] = []
        kill = kills.pop(0) if kills else None
        limit = len(todo) if kill is None else min(kill[0], len(todo))
        for i, u in enumerate(todo[:limit]):
            target.append(u)
            d = len(target) - 1
            if kill is not None and i >= limit - kill[1]:
                continue  # written, never acknowledged
            if rule.copied(u, d):
                pending.append((u, d))
            if (len(target) - 1) in ticks and (mark := rule.high_mark()) is not None:
                pending.append(mark)
            committed = u + 1
            visible_last = u
        if kill is None:
            if (mark := rule.high_mark()) is not None:
                pending.append(mark)
            syncs.extend(pending)
            return target, syncs
        syncs.extend(pending[:max(0, len(pending) - kill[3])])  # lost with the process
        unacked = todo[max(0, limit - kill[1]):limit]
        seen = unacked[:kill[2]]
        if seen:
            visible_last = seen[-1]


def headers_of(target: list[int]) -> list[tuple[int, list]]:
    """The simulated target log as (offset, headers) with the replicator's provenance."""
    return [(d, copy_headers(None, Provenance(TP.topic, TP.partition, u), None)) for d, u in enumerate(target)]


runs = st.tuples(st.integers(0, 60), st.integers(0, 5), st.integers(0, 5), st.integers(0, 3))


@settings(max_examples=200, deadline=None)
@given(n=st.integers(1, 200), gaps=st.sets(st.integers(0, 199), max_size=60), kills=st.lists(runs, max_size=4),
       lag_max=st.integers(1, 20), ticks=st.sets(st.integers(0, 300), max_size=20), data=st.data())
def test_translation_never_skips_a_record(n, gaps, kills, lag_max, ticks, data):
    """For every committed source offset g: a consumer starting at the translated target offset reads a
    copy of every source record at or after g (it may read some before g again: the window)."""
    target, syncs = simulate(n, gaps, kills, lag_max, ticks)
    # any subset of the syncs, in order, as retention, compaction or a lost write may leave
    kept = data.draw(st.lists(st.booleans(), min_size=len(syncs), max_size=len(syncs)))
    log = headers_of(target)
    for subset in (syncs, [s for s, keep in zip(syncs, kept, strict=True) if keep]):
        history = SyncHistory()
        for u, d in subset:
            history.add(u, d)
        for g in range(n + 2):
            t = history.translate(g)
            if t is None:
                continue
            after = set(target[t:])
            missed = {u for u in target if u >= g} - after
            assert not missed, f"g={g} -> t={t} skips {sorted(missed)}; target {target}; syncs {subset}"
            exact = refine(log[t:t + lag_max], TP, g, t, len(target))
            assert exact >= t and not {u for u in target if u >= g} - set(target[exact:]), (g, t, exact)
            if exact != t or t + lag_max >= len(target):  # found, or read to the end: nothing re-read
                assert all(u >= g for u in target[exact:exact + 1]), (g, t, exact, target)


@settings(max_examples=200, deadline=None)
@given(n=st.integers(1, 300), gaps=st.sets(st.integers(0, 299), max_size=80), lag_max=st.integers(1, 30))
def test_the_window_is_under_offset_lag_max_without_restarts(n, gaps, lag_max):
    """Without kill -9, every sync is written: a consumer re-reads fewer than offset.lag.max records, and
    none at all when its group had read everything copied (the final high mark)."""
    target, syncs = simulate(n, gaps, [], lag_max, set())
    history = SyncHistory()
    for u, d in syncs:
        history.add(u, d)
    for g in range(n + 2):
        t = history.translate(g)
        if not target:
            assert t is None
            continue
        if g <= target[0]:
            continue  # before the first copy: nothing to re-read, t may be None
        assert t is not None
        reread = [u for u in target[t:] if u < g]
        assert len(reread) < lag_max, (g, t, reread)
        if g > target[-1]:
            assert t == len(target)


# --- groups, checkpoints, target commits ----------------------------------------------------------------


def test_group_filter_is_mm2s_default():
    accept = GroupFilter(own=["client-epochs-mirror"])
    assert accept("orders-app") and accept("x")
    for group in ("console-consumer-123", "connect-mirror", "__internal", "client-epochs-mirror"):
        assert not accept(group)
    only = GroupFilter(["orders-.*", "billing"], [])
    assert only("orders-1") and only("billing") and not only("billing-2") and not only("x-orders-1")
    assert not GroupFilter([], [])("anything")
    assert GroupFilter("a.*, b", "ab")("b") and not GroupFilter("a.*, b", "ab")("ab")


def test_a_bad_regex_names_the_setting():
    with pytest.raises(ValueError, match="groups.exclude"):
        OffsetTranslationOptions(groups_exclude=["("]).check()


def test_checkpoints_translate_rename_and_never_go_backwards():
    histories: dict = {}
    apply_syncs(histories, [OffsetSync("orders", 0, 10, 0), OffsetSync("orders", 0, 14, 3),
                            OffsetSync("orders", 1, 0, 0)])
    internal = InternalMetadata(3, 1)
    committed = {TP: Committed(15, encode("mine", internal)), TopicPartition("orders", 1): Committed(-1),
                 TopicPartition("orders", 2): Committed(5), TopicPartition("other", 0): Committed(3)}
    out = checkpoints_for_group("g", committed, histories, lambda t: f"src.{t}", {})
    assert out == {TopicPartition("src.orders", 0): Checkpoint("g", "src.orders", 0, 15, 4, "mine")}
    last = dict(out)
    assert checkpoints_for_group("g", committed, histories, lambda t: f"src.{t}", last) == {}  # unchanged
    behind = {TP: Committed(12)}  # the group rewound on the source: written, though it goes back
    assert checkpoints_for_group("g", behind, histories, lambda t: f"src.{t}", last)[
        TopicPartition("src.orders", 0)].downstream == 1


def test_latest_checkpoints_of_a_group():
    records = [Checkpoint("g", "t", 0, 5, 5), Checkpoint("h", "t", 0, 9, 9), Checkpoint("g", "t", 0, 7, 6)]
    assert latest_checkpoints(records, "g") == {TopicPartition("t", 0): Checkpoint("g", "t", 0, 7, 6)}


def test_target_commits_never_go_backwards():
    checkpoints = {TopicPartition("t", p): Checkpoint("g", "t", p, 10, 10) for p in range(4)}
    assert offsets_to_sync(checkpoints, {TopicPartition("t", 0): 12, TopicPartition("t", 1): 10,
                                         TopicPartition("t", 2): -1}) == {TopicPartition("t", 2): 10,
                                                                          TopicPartition("t", 3): 10}


def test_metadata_user_part_and_target_epochs():
    assert user_metadata(encode("app", InternalMetadata(1, 2)) + "\x00") == "app"
    assert user_metadata("kip232:{broken\nx") == "kip232:{broken\nx"
    assert user_metadata(None) == ""
    target = InternalMetadata(7, 2)
    committed = target_commit_metadata(Checkpoint("g", "t", 0, 1, 1, "app"), target)
    assert decode(committed) == ("app", target)
    assert target_commit_metadata(Checkpoint("g", "t", 0, 1, 1, "app"), None) == "app"


# --- options from MM2 properties, and the writer's ownership --------------------------------------------


def test_options_from_mm2_properties():
    options = OffsetTranslationOptions.from_mm2({
        "offset.lag.max": "50", "emit.checkpoints.interval.seconds": "5", "groups": "orders-.*, billing",
        "groups.exclude": "", "sync.group.offsets.enabled": "TRUE", "sync.group.offsets.interval.seconds": "10",
        "checkpoints.topic.replication.factor": "1", "offset-syncs.topic.replication.factor": "-1",
        "replication.policy.class": "not.mine"}, "primary", "backup")
    assert (options.offset_lag_max, options.emit_checkpoints_interval_s, options.groups, options.groups_exclude,
            options.sync_group_offsets_enabled, options.sync_group_offsets_interval_s) == (
        50, 5.0, ["orders-.*", "billing"], [], True, 10.0)
    assert options.checkpoints_topic_replication_factor == 1 and options.offset_syncs_topic_replication_factor is None
    assert (options.source_alias, options.target_alias) == ("primary", "backup")
    defaults = OffsetTranslationOptions.from_mm2({})
    assert (defaults.emit_checkpoints_enabled, defaults.emit_checkpoints_interval_s,
            defaults.sync_group_offsets_enabled, defaults.offset_lag_max, tuple(defaults.groups_exclude)) == (
        True, 60.0, False, 100, ("console-consumer-.*", "connect-.*", "__.*"))


@pytest.mark.parametrize("key, value", [("offset.lag.max", "many"), ("emit.checkpoints.enabled", "yes"),
                                        ("offset-syncs.topic.location", "target"), ("groups", "(")])
def test_bad_mm2_properties_name_the_key(key, value):
    with pytest.raises(ValueError, match=key.replace(".", r"\.") if key != "groups" else "groups"):
        OffsetTranslationOptions.from_mm2({key: value})


def test_no_sync_for_a_partition_no_longer_owned():
    pytest.importorskip("confluent_kafka")
    from client_epochs.mirror.checkpoints import OffsetTranslation

    translation = OffsetTranslation("localhost:1", "localhost:2", OffsetTranslationOptions(), "mirror", {"t": 2})
    sent: list = []
    translation._send_sync = sent.append  # no producer: what would be written
    translation.assigned([TopicPartition("t", 0)])
    translation.copied(TopicPartition("t", 0), 5, 0)
    translation.copied(TopicPartition("t", 1), 5, 0)  # never assigned here
    translation.dropped([TopicPartition("t", 0)])  # lost: another member may copy it now
    translation.copied(TopicPartition("t", 0), 6, 1)
    translation.tick(translation._next_high_marks)
    assert sent == [OffsetSync("t", 0, 5, 0)]


def test_mm2_heartbeats_are_laid_out_as_mm2s_and_garbage_is_refused() -> None:
    """MM2's Heartbeat: key = two STRINGs (aliases), value = version INT16 0 and timestamp INT64."""
    from quorum.wire.mm2_records import Heartbeat, MM2RecordError

    beat = Heartbeat("A", "B", 123)
    assert beat.key() == b"\x00\x01A\x00\x01B" and beat.value() == b"\x00\x00" + (123).to_bytes(8, "big")
    assert Heartbeat.decode(beat.key(), beat.value()) == beat
    for key, value in ((b"\x00", beat.value()), (beat.key(), b"\x00\x01" + bytes(8)), (beat.key() + b"x", beat.value()),
                       (beat.key(), None)):
        with pytest.raises(MM2RecordError):
            Heartbeat.decode(key, value)
