"""The leader's remote log task decisions (tiered_follower.upload_plan), sans-IO."""

from __future__ import annotations

import uuid

from quorum.broker.remote_tier import RemoteLogState, RemoteSegmentMetadata, RemoteSegmentState, TopicIdPartition
from quorum.log.epoch_cache import EpochEntry
from tiered_follower.remote_log_manager import merged_history, segment_epochs
from tiered_follower.upload_plan import CleanUp, Expire, LocalSegment, PartitionNow, Upload, plan

TP = TopicIdPartition("t", uuid.UUID(int=1), 0)
ROLLED = [LocalSegment(0, 100, 1000, 10_000), LocalSegment(100, 200, 1000, 20_000),
          LocalSegment(200, 300, 1000, 30_000)]


def remote(*segments: RemoteSegmentMetadata) -> RemoteLogState:
    state = RemoteLogState(TP)
    state.load(segments)
    return state


def meta(start: int, end: int, state: RemoteSegmentState, max_ts: int = 0, broker: int = 102) -> RemoteSegmentMetadata:
    return RemoteSegmentMetadata(TP, uuid.uuid4(), start, end, (EpochEntry(0, start),), 1000, max_ts, broker, 0, state,
                                 copied=state == RemoteSegmentState.COPY_SEGMENT_FINISHED)


def now(high_watermark: int = 1000, leader: bool = True, retention_ms: int | None = None,
        retention_bytes: int | None = None, at: int = 100_000,
        copying: frozenset[object] = frozenset()) -> PartitionNow:
    return PartitionNow(101, leader, high_watermark, ROLLED, retention_ms, retention_bytes, at, copying)


def test_only_a_leader_with_loaded_metadata_acts():
    assert plan(now(leader=False), remote()) == []
    assert plan(now(), RemoteLogState(TP)) == []


def test_rolled_segments_wholly_below_the_high_watermark_go_up_in_order():
    assert plan(now(high_watermark=250), remote()) == [Upload(ROLLED[0]), Upload(ROLLED[1])]
    done = meta(0, 99, RemoteSegmentState.COPY_SEGMENT_FINISHED, 10_000)
    assert plan(now(), remote(done)) == [Upload(ROLLED[1]), Upload(ROLLED[2])]


def test_unfinished_copies_of_others_are_cleaned_up_first_but_not_our_own_in_flight():
    theirs = meta(0, 99, RemoteSegmentState.COPY_SEGMENT_STARTED)
    deleting = meta(0, 99, RemoteSegmentState.DELETE_SEGMENT_STARTED)
    steps = plan(now(high_watermark=100), remote(theirs, deleting))
    assert steps[:2] == [CleanUp(theirs), CleanUp(deleting)] and steps[2:] == [Upload(ROLLED[0])]
    assert plan(now(high_watermark=0, copying=frozenset({theirs.segment_id})), remote(theirs)) == []


def test_retention_expires_remote_segments_oldest_first():
    a = meta(0, 99, RemoteSegmentState.COPY_SEGMENT_FINISHED, 10_000)
    b = meta(100, 199, RemoteSegmentState.COPY_SEGMENT_FINISHED, 20_000)
    c = meta(200, 299, RemoteSegmentState.COPY_SEGMENT_FINISHED, 30_000)
    by_time = plan(now(retention_ms=75_000), remote(a, b, c))
    assert [s.segment for s in by_time if isinstance(s, Expire)] == [a, b]
    by_size = plan(now(retention_bytes=1000), remote(a, b, c))
    assert [s.segment for s in by_size if isinstance(s, Expire)] == [a, b]
    assert "retention.bytes=1000" in by_size[0].reason
    assert [s.segment for s in plan(now(retention_bytes=1500), remote(a, b, c)) if isinstance(s, Expire)] == [a]


def test_segment_epochs_and_the_checkpoint_up_to_a_segment():
    local = [EpochEntry(1, 50), EpochEntry(3, 150), EpochEntry(4, 260)]
    assert segment_epochs(local, 100, 200) == (EpochEntry(1, 100), EpochEntry(3, 150))
    assert segment_epochs(local, 200, 300) == (EpochEntry(3, 200), EpochEntry(4, 260))
    history = merged_history([EpochEntry(0, 0), EpochEntry(1, 40)], local, 200)
    assert history == [EpochEntry(0, 0), EpochEntry(1, 40), EpochEntry(3, 150)]


def test_size_retention_counts_a_segment_uploaded_up_to_offset_0_once():
    """A first segment of one record has highest uploaded offset 0: it is remote bytes, not local-only too."""
    first = meta(0, 0, RemoteSegmentState.COPY_SEGMENT_FINISHED, 10_000)
    rolled = [LocalSegment(0, 1, 1000, 10_000), LocalSegment(1, 100, 1000, 20_000)]
    at_limit = PartitionNow(101, True, 1000, rolled, None, 2000, 100_000)
    assert [s for s in plan(at_limit, remote(first)) if isinstance(s, Expire)] == []
    over = PartitionNow(101, True, 1000, rolled, None, 1000, 100_000)  # 1000 bytes over: the whole segment
    assert [s.segment for s in plan(over, remote(first)) if isinstance(s, Expire)] == [first]


def test_kip_950_copy_disabled_uploads_nothing_but_cleans_up_and_expires():
    old = meta(0, 99, RemoteSegmentState.COPY_SEGMENT_FINISHED, max_ts=1)
    orphan = meta(100, 199, RemoteSegmentState.COPY_SEGMENT_STARTED)
    disabled = PartitionNow(101, True, 1000, ROLLED, 50_000, None, 100_000, frozenset(), copy_disabled=True)
    steps = plan(disabled, remote(old, orphan))
    assert steps == [CleanUp(orphan), Expire(old, steps[1].reason)]  # type: ignore[union-attr]
    assert [s for s in plan(now(), remote(old)) if isinstance(s, Upload)] != []  # and uploads without it
