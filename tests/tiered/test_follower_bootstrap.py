"""The follower bootstrap (KIP-405's local-log-start path, KIP-1023's tiered offset), sans-IO:
the handler fed situations by hand, and the plug-in's `perform` over an in-memory remote tier
(and once over moto, to count the S3 GETs)."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Iterable
from dataclasses import dataclass, field, replace
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry, generate_latest

from quorum.broker.remote_tier import (
    IndexType,
    RemoteLogState,
    RemoteSegmentMetadata,
    RemoteSegmentState,
    RemoteStorageError,
    SegmentUpload,
    TopicIdPartition,
)
from quorum.broker.replica_fetcher_events import EpochStart
from quorum.broker.replica_fetcher_out_of_range import (
    EARLIEST_LOCAL_TIMESTAMP,
    EARLIEST_PENDING_UPLOAD_TIMESTAMP,
    EARLIEST_TIMESTAMP,
    LATEST_TIERED_TIMESTAMP,
    LATEST_TIMESTAMP,
    AskLeaderOffset,
    Defer,
    Fail,
    LeaderOffset,
    OutOfRange,
    Retry,
    StartAt,
    Step,
    TruncateTo,
)
from quorum.log.epoch_cache import EpochEntry, encode_checkpoint
from quorum.wire.errors import ErrorCode
from quorum.wire.producer_snapshot import ProducerSnapshotEntry, decode_producer_snapshot, encode_producer_snapshot
from tiered_follower.bootstrap_plugin import FollowerBootstrapPlugin, read_aux_state
from tiered_follower.bootstrap_report import BootstrapReports
from tiered_follower.follower_bootstrap import (
    LOCAL_LOG_START,
    TIERED_OFFSET,
    AuxStateWork,
    TieredOutOfRangeHandler,
    bytes_in_remote_below,
    current_lineage_segment,
)
from tiered_follower.remote_metrics import RemoteStorageMetrics

TP = ("orders", 0)
TIP = TopicIdPartition("orders", uuid.UUID("00000000-0000-0000-0000-0000000000bb"), 0)
OMTS = ErrorCode.OFFSET_MOVED_TO_TIERED_STORAGE
OOR = ErrorCode.OFFSET_OUT_OF_RANGE
NONE = ErrorCode.NONE


def situation(error: int = NONE, log_end: int = 0, log_start: int = 0, flag: bool = True, remote: bool = True,
              compacted: bool = False) -> OutOfRange:
    return OutOfRange(TP, error, 5, log_end, log_start, log_end, log_start, None, remote_storage_enabled=remote,
                      compacted=compacted, fetch_from_tiered_offset=flag)


def resolve(s: OutOfRange, answers: dict[int, LeaderOffset], handler: TieredOutOfRangeHandler | None = None,
            ) -> tuple[Step, list[int]]:  # fmt: skip
    """Drive the handler as the fetcher does: answer each ListOffsets it asks from `answers`."""
    handler = handler or TieredOutOfRangeHandler()
    asked: list[int] = []
    while True:
        step = handler.next_step(s)
        if not isinstance(step, AskLeaderOffset):
            return step, asked
        asked.append(step.timestamp)
        s.leader_offsets[step.timestamp] = answers[step.timestamp]


def leader(end: int = 1000, start: int = 0, local: int = 0, pending: int = 800, pending_epoch: int = 3,
           local_epoch: int = 2, pending_error: int = NONE, tiered_epoch: int = 3) -> dict[int, LeaderOffset]:
    return {LATEST_TIMESTAMP: LeaderOffset(end, 4), EARLIEST_TIMESTAMP: LeaderOffset(start, 0),
            EARLIEST_LOCAL_TIMESTAMP: LeaderOffset(local, local_epoch),
            EARLIEST_PENDING_UPLOAD_TIMESTAMP: LeaderOffset(pending, pending_epoch, pending_error),
            LATEST_TIERED_TIMESTAMP: LeaderOffset(pending - 1 if pending > 0 else -1, tiered_epoch)}


# -- the normal path ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("flag,remote,compacted", [(False, True, False), (True, False, False), (True, True, True)],
                         ids=["flag off", "remote storage off", "compacted topic"])
def test_an_empty_replica_takes_the_normal_path_without_the_flag_remote_storage_or_with_compaction(
        flag: bool, remote: bool, compacted: bool) -> None:  # fmt: skip
    step, asked = resolve(situation(NONE, flag=flag, remote=remote, compacted=compacted), leader())
    assert step == TruncateTo(0) and asked == []  # fetch from 0 as always
    step, asked = resolve(situation(OOR, flag=flag, remote=remote, compacted=compacted), leader(start=300, local=300))
    assert step == StartAt(300) and EARLIEST_PENDING_UPLOAD_TIMESTAMP not in asked  # Kafka's rules


def test_flag_off_on_a_tiered_topic_takes_kip_405s_local_log_start_path() -> None:
    step, asked = resolve(situation(OMTS, flag=False), leader(start=0, local=500, local_epoch=2))
    assert asked == [EARLIEST_TIMESTAMP, EARLIEST_LOCAL_TIMESTAMP]
    assert step == Defer(AuxStateWork(TP, LOCAL_LOG_START, 500, 2, 0, None))


def test_remote_storage_off_and_omts_fails_as_kafka_does() -> None:
    step, _ = resolve(situation(OMTS, remote=False), leader())
    assert isinstance(step, Fail)


# -- KIP-405's path for any follower --------------------------------------------------------------------------------


def test_a_non_empty_follower_told_omts_builds_the_aux_state_up_to_the_leaders_local_log_start() -> None:
    # issue 14's gap: a follower that was away while the leader uploaded and deleted locally
    step, asked = resolve(situation(OMTS, log_end=120, log_start=0), leader(start=0, local=600, local_epoch=3))
    assert asked == [EARLIEST_TIMESTAMP, EARLIEST_LOCAL_TIMESTAMP]
    assert step == Defer(AuxStateWork(TP, LOCAL_LOG_START, 600, 3, 0, None))


def test_omts_with_nothing_tiered_below_the_local_start_any_more_takes_kafkas_rules() -> None:
    step, _ = resolve(situation(OMTS, log_end=120), leader(end=900, start=600, local=600))
    assert step == StartAt(600)


# -- KIP-1023 ---------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("error", [NONE, OOR, OMTS])
@pytest.mark.parametrize("log_start,local", [(0, 0), (0, 400), (10, 10), (10, 400)])
def test_an_empty_replica_starts_at_the_earliest_pending_upload_offset(error: int, log_start: int, local: int) -> None:
    step, asked = resolve(situation(error), leader(start=log_start, local=local, pending=800, pending_epoch=3))
    assert asked == [LATEST_TIMESTAMP, EARLIEST_TIMESTAMP, EARLIEST_PENDING_UPLOAD_TIMESTAMP, LATEST_TIERED_TIMESTAMP]
    assert step == Defer(AuxStateWork(TP, TIERED_OFFSET, 800, 3, log_start, 1000, 3))


def test_everything_uploaded_and_deleted_locally_starts_at_the_log_end() -> None:
    step, _ = resolve(situation(OMTS), leader(end=1000, start=0, local=1000, pending=1000, pending_epoch=4))
    assert step == Defer(AuxStateWork(TP, TIERED_OFFSET, 1000, 4, 0, 1000, 3))


def test_an_empty_leader_leaves_nothing_to_skip() -> None:
    step, asked = resolve(situation(NONE), leader(end=0, pending=-1))
    assert step == TruncateTo(0) and asked == [LATEST_TIMESTAMP]


@pytest.mark.parametrize("log_start", [0, 10])
def test_minus_one_with_nothing_tiered_starts_at_the_log_start(log_start: int) -> None:
    step, asked = resolve(situation(NONE), leader(start=log_start, local=log_start, pending=-1))
    assert asked[-1] == EARLIEST_LOCAL_TIMESTAMP
    assert step == (TruncateTo(0) if log_start == 0 else StartAt(log_start))


def test_minus_one_while_the_leader_has_not_learnt_its_highest_uploaded_offset_retries_and_never_guesses() -> None:
    step, _ = resolve(situation(OMTS), leader(start=0, local=500, pending=-1))
    assert isinstance(step, Retry) and "not learnt" in step.reason


def test_a_pending_upload_offset_below_the_log_start_replicates_everything_local() -> None:
    step, _ = resolve(situation(OOR), leader(start=700, local=700, pending=300))
    assert step == StartAt(700)
    # local data above the log start that is tiered after all: KIP-405's path to it
    step, _ = resolve(situation(OOR), leader(start=700, local=750, pending=300, local_epoch=2))
    assert step == Defer(AuxStateWork(TP, LOCAL_LOG_START, 750, 2, 700, 1000))


def test_a_pending_upload_offset_at_the_log_start_needs_no_aux_state() -> None:
    step, _ = resolve(situation(NONE), leader(start=700, local=700, pending=700))
    assert step == StartAt(700)


def test_a_leader_without_minus_6_sends_the_follower_down_kip_405s_path() -> None:
    unsupported = leader(start=0, local=500, local_epoch=2, pending=-1, pending_error=ErrorCode.UNSUPPORTED_VERSION)
    step, _ = resolve(situation(NONE), unsupported)
    assert step == TruncateTo(0)  # fetch from 0; OMTS will come if 0 is only in S3
    step, _ = resolve(situation(OMTS), unsupported)
    assert step == Defer(AuxStateWork(TP, LOCAL_LOG_START, 500, 2, 0, None))


# -- choosing the remote segment ------------------------------------------------------------------------------------


def segment(start: int, end: int, epochs: Iterable[tuple[int, int]], size: int = 1000, at: int = 0,
            state: RemoteSegmentState = RemoteSegmentState.COPY_SEGMENT_FINISHED) -> RemoteSegmentMetadata:
    return RemoteSegmentMetadata(TIP, uuid.uuid4(), start, end, tuple(EpochEntry(e, o) for e, o in epochs), size,
                                 1_700_000_000_000, 101, at, state, state >= RemoteSegmentState.COPY_SEGMENT_FINISHED)


def test_leader_epochs_with_gaps_pick_the_segment_of_the_epoch_holding_the_offset() -> None:
    # epochs 0@0, 1@85, (2 wrote nothing), 3@90, 4@98: offset 89 is epoch 1's, 97 epoch 3's
    first = segment(0, 89, [(0, 0), (1, 85)])
    second = segment(90, 119, [(3, 90), (4, 98)])
    assert current_lineage_segment([first, second], 89, 3) is first
    assert current_lineage_segment([first, second], 119, 4) is second
    assert current_lineage_segment([first, second], 119, 3) is None  # epoch 4 is newer than the leader's


def test_an_older_lineage_after_an_unclean_election_does_not_count() -> None:
    # epoch 2's leader uploaded 100..199; an unclean election made epoch 3's leader, whose log
    # ended at 100, and it wrote and uploaded 100..149 again in epoch 3
    common = segment(0, 99, [(0, 0), (1, 50)], at=1)
    stale = segment(100, 199, [(2, 100)], at=2)
    current = segment(100, 149, [(3, 100)], at=3)
    assert current_lineage_segment([common, stale, current], 149, 3) is current
    # re-uploaded by a later leader with other boundaries: the latest record of that epoch
    again = segment(120, 149, [(3, 120)], at=4)
    assert current_lineage_segment([common, stale, current, again], 149, 3) is again
    assert bytes_in_remote_below([common, stale, current], 150) == 2000


def test_the_leaders_epoch_of_the_offset_below_makes_the_lineage_exact() -> None:
    # epoch 2's leader wrote 100..149 and uploaded them; epoch 3's leader (elected uncleanly, not
    # in the ISR) still held epoch 1 up to 149 and wrote 150.. in epoch 4: its offset 149 is epoch
    # 1's, which the highest-epoch rule alone cannot tell from the stale epoch 2 segment
    common = segment(0, 99, [(0, 0), (1, 50)], at=1)
    stale = segment(100, 149, [(2, 100)], at=2)
    current = segment(100, 149, [(1, 100)], at=3)
    assert current_lineage_segment([common, stale, current], 149, 4) is stale  # the guess is wrong here
    assert current_lineage_segment([common, stale, current], 149, 4, epoch=1) is current


def test_minus_5_answers_the_epoch_below_only_when_it_is_the_offset_below() -> None:
    answers = leader(pending=800, tiered_epoch=1)
    step, _ = resolve(situation(NONE), answers)
    assert step == Defer(AuxStateWork(TP, TIERED_OFFSET, 800, 3, 0, 1000, 1))
    answers[LATEST_TIERED_TIMESTAMP] = LeaderOffset(640, 1)  # not pending - 1 (a compacted gap?): unknown
    step, _ = resolve(situation(NONE), answers)
    assert step == Defer(AuxStateWork(TP, TIERED_OFFSET, 800, 3, 0, 1000, -1))


# -- perform: the aux state from the remote tier -------------------------------------------------------------------


class MemoryStorage:
    """A remote tier's storage in memory: the `.indexes` parts by segment, an error to raise."""

    def __init__(self) -> None:
        self.indexes: dict[uuid.UUID, dict[IndexType, bytes]] = {}
        self.error: RemoteStorageError | None = None
        self.gets = 0

    def put(self, segment: RemoteSegmentMetadata, history: list[EpochEntry], snapshot: bytes) -> None:
        self.indexes[segment.segment_id] = {IndexType.LEADER_EPOCH: encode_checkpoint(history),
                                            IndexType.PRODUCER_SNAPSHOT: snapshot}

    def fetch_index(self, segment: RemoteSegmentMetadata, index: IndexType) -> bytes:
        self.gets += 1
        if self.error is not None:
            raise self.error
        return self.indexes[segment.segment_id][index]


@dataclass
class FakeLog:
    size_in_bytes: int = 0


@dataclass
class FakePartition:
    remote: RemoteLogState | None
    local_log_start_offset: int = 0
    log_end_offset: int = 0
    isr: tuple[int, ...] = ()
    log: FakeLog = field(default_factory=FakeLog)


class FakeManager:
    """What the plug-in uses of `RemoteLogManager`."""

    def __init__(self, partition: FakePartition | None, storage: MemoryStorage) -> None:
        self.partition = partition
        self.storage = storage
        self.wake = asyncio.Event()
        self.metrics = RemoteStorageMetrics()
        self.crashes: list[str] = []
        self.on_refresh: list[RemoteSegmentMetadata] | None = None
        """What the remote metadata holds when `refresh` reads it (None: reading changes nothing)."""

    async def refresh(self, partition: FakePartition) -> None:
        if self.on_refresh is not None and partition.remote is not None:
            partition.remote.load(self.on_refresh)

    def hosted(self, topic: str, number: int) -> FakePartition | None:
        return self.partition

    async def run_blocking(self, fn, *args):  # type: ignore[no-untyped-def]
        return fn(*args)

    def crash_point(self, step: str) -> None:
        self.crashes.append(step)


SNAPSHOT = encode_producer_snapshot([ProducerSnapshotEntry(7000, 0, 41, 798, 2, 1_700_000_000_000)])
HISTORY = [EpochEntry(0, 0), EpochEntry(1, 300), EpochEntry(3, 600)]


def tiered(loaded: bool = True) -> tuple[FakeManager, list[RemoteSegmentMetadata]]:
    state = RemoteLogState(TIP)
    segments = [segment(0, 399, [(0, 0), (1, 300)], size=4000), segment(400, 799, [(1, 400), (3, 600)], size=5000)]
    if loaded:
        state.load(segments)
    storage = MemoryStorage()
    storage.put(segments[0], HISTORY[:2], b"")
    storage.put(segments[1], HISTORY, SNAPSHOT)
    return FakeManager(FakePartition(state), storage), segments


def perform(manager: FakeManager, work: AuxStateWork,
            clock: list[float] | None = None) -> tuple[Step, BootstrapReports]:
    times = clock or [0.0]
    plugin = FollowerBootstrapPlugin(101, manager, clock_ms=lambda: times[0],  # type: ignore[arg-type]
                                     metadata_wait_s=0)

    async def run() -> Step:
        step = await plugin.perform(TP, work)
        if plugin._watcher is not None:
            plugin._watcher.cancel()
        return step

    return asyncio.run(run()), plugin.reports


WORK = AuxStateWork(TP, TIERED_OFFSET, 800, 3, 0, 1000)


def test_perform_starts_at_the_pending_upload_offset_with_the_segments_epochs_and_producer_snapshot() -> None:
    manager, _ = tiered()
    step, reports = perform(manager, WORK)
    assert step == StartAt(800, (EpochStart(0, 0), EpochStart(1, 300), EpochStart(3, 600)), SNAPSHOT)
    assert decode_producer_snapshot(step.producer_snapshot or b"")[0].producer_id == 7000
    assert manager.storage.gets == 2 and manager.crashes == ["bootstrap-aux-state", "bootstrap-start-at"]
    (bootstrap,) = reports.active
    assert (bootstrap.start_offset, bootstrap.bytes_not_fetched, bootstrap.s3_requests) == (800, 9000, 2)
    assert manager.metrics.meter("BuildRemoteLogAuxStateRequestsPerSec", TP[0]) == 1
    assert manager.metrics.meter("BuildRemoteLogAuxStateErrorsPerSec") == 0


def test_the_epoch_entries_are_cut_below_the_start_offset() -> None:
    manager, segments = tiered()
    manager.storage.put(segments[1], [*HISTORY, EpochEntry(4, 800)], SNAPSHOT)  # an entry at its next offset
    step, _ = perform(manager, WORK)
    assert isinstance(step, StartAt) and step.leader_epochs[-1] == EpochStart(3, 600)


def test_kip_405s_path_starts_at_the_next_offset_of_the_segment_holding_the_local_start_less_one() -> None:
    manager, _ = tiered()
    step, _ = perform(manager, AuxStateWork(TP, LOCAL_LOG_START, 350, 1, 0, None))
    assert isinstance(step, StartAt) and step.offset == 400 and step.producer_snapshot is None
    assert step.leader_epochs == (EpochStart(0, 0), EpochStart(1, 300))


def test_remote_metadata_not_loaded_yet_is_retried_with_the_reason_and_wakes_the_task() -> None:
    manager, _ = tiered(loaded=False)
    step, _ = perform(manager, WORK)
    assert isinstance(step, Retry) and "remote log metadata" in step.reason
    manager.partition = None
    step, _ = perform(manager, WORK)
    assert isinstance(step, Retry) and "not open" in step.reason


def test_no_segment_up_to_the_target_yet_is_retried() -> None:
    manager, _ = tiered()
    step, _ = perform(manager, AuxStateWork(TP, TIERED_OFFSET, 900, 3, 0, 1000))
    assert isinstance(step, Retry) and "offset 899" in step.reason


def test_s3_errors_while_reading_the_aux_state_retry_when_transient_and_fail_naming_the_key_when_not() -> None:
    manager, _ = tiered()
    manager.storage.error = RemoteStorageError("get_object s3://b/k failed 8 times, last with SlowDown", True)
    step, _ = perform(manager, WORK)
    assert isinstance(step, Retry) and "SlowDown" in step.reason
    manager.storage.error = RemoteStorageError("get_object s3://b/k failed: NoSuchKey: gone")
    step, _ = perform(manager, WORK)  # deleted by remote retention since the metadata was read
    assert isinstance(step, Retry) and "NoSuchKey" in step.reason and manager.wake.is_set()
    manager.storage.error = RemoteStorageError("get_object s3://b/k failed: AccessDenied: no")
    step, _ = perform(manager, WORK)
    assert isinstance(step, Fail) and "s3://b/k" in step.reason and "AccessDenied" in step.reason
    assert manager.metrics.meter("BuildRemoteLogAuxStateErrorsPerSec", TP[0]) == 1  # the Fail, not the Retries


def test_damaged_aux_state_objects_fail_naming_the_segment() -> None:
    manager, segments = tiered()
    manager.storage.put(segments[1], HISTORY, SNAPSHOT[:-1])
    step, _ = perform(manager, WORK)
    assert isinstance(step, Fail) and segments[1].object_name in step.reason and "producer snapshot" in step.reason
    manager.storage.put(segments[1], [EpochEntry(0, 0)], SNAPSHOT)  # disagrees with the segment's epochs
    step, _ = perform(manager, WORK)
    assert isinstance(step, Fail) and "epoch 0" in step.reason


def test_the_report_counts_bytes_fetched_until_the_follower_sees_itself_in_the_isr() -> None:
    manager, _ = tiered()
    clock = [1000.0]
    step, reports = perform(manager, WORK, clock)
    assert isinstance(step, StartAt)
    assert reports.progress(TP, 300, 900, in_isr=False, now_ms=1500.0) is None
    assert reports.progress(TP, 200, 900, in_isr=True, now_ms=1600.0) is None  # not caught up to 1000 yet
    done = reports.progress(TP, 700, 1000, in_isr=True, now_ms=2500.0)
    assert done is not None and done.bytes_fetched == 700 and done.time_to_isr_ms == 1500.0
    assert reports.finished[TP] is done and not reports.active
    registry = CollectorRegistry()
    for collector in reports.metrics.collectors:
        registry.register(collector)
    exposed = generate_latest(registry).decode()
    labels = '{partition="0",topic="orders"}'
    assert f"kafka_server_tiered_follower_bootstrap_bytes_fetched_total{labels} 700.0" in exposed
    assert f"kafka_server_tiered_follower_bootstrap_bytes_not_fetched_total{labels} 9000.0" in exposed
    assert f"kafka_server_tiered_follower_bootstrap_time_to_isr_ms{labels} 1500.0" in exposed


# -- over S3: the GETs ---------------------------------------------------------------------------------------------


def test_the_aux_state_takes_one_s3_get_and_two_for_a_segment_with_only_its_manifest(each_s3,
                                                                                   tmp_path: Path) -> None:
    """On moto and on s3rver (`conftest.each_s3`). A segment uploaded now carries its manifest's facts
    in its custom metadata (KIP-917): one GET of its `.indexes`; one uploaded before that (no custom
    metadata) reads its manifest first."""
    from tiered_follower.s3_client import S3Client, S3Config
    from tiered_follower.s3_storage import S3RemoteStorage

    bucket = f"aux-state-{uuid.uuid4().hex[:12]}"
    each_s3.create_bucket(bucket)
    storage = S3RemoteStorage(S3Client(S3Config.from_properties(each_s3.properties(bucket))))
    seg = segment(400, 799, [(1, 400), (3, 600)], size=100)
    (tmp_path / "s.log").write_bytes(b"x" * 100)
    custom = storage.copy_segment(seg, SegmentUpload(str(tmp_path / "s.log"), 100, {
        IndexType.OFFSET: b"O" * 16, IndexType.TIMESTAMP: b"T" * 24,
        IndexType.LEADER_EPOCH: encode_checkpoint(HISTORY), IndexType.PRODUCER_SNAPSHOT: SNAPSHOT}))  # fmt: skip
    for carried, gets in ((custom, 1), (None, 2)):
        reader = S3RemoteStorage(S3Client(S3Config.from_properties(each_s3.properties(bucket))))
        aux = read_aux_state(reader, replace(seg, custom_metadata=carried))
        assert aux.s3_requests == gets and reader.client.stats["get_object"] == gets
        assert aux.producer_snapshot == SNAPSHOT and aux.leader_epochs[-1] == EpochStart(3, 600)


def test_perform_reads_the_remote_metadata_at_once_instead_of_backing_off() -> None:
    manager, segments = tiered(loaded=False)
    manager.on_refresh = segments
    plugin = FollowerBootstrapPlugin(101, manager, metadata_wait_s=60)  # type: ignore[arg-type]

    async def run() -> Step:
        step = await plugin.perform(TP, WORK)
        if plugin._watcher is not None:
            plugin._watcher.cancel()
        return step

    step = asyncio.run(run())
    assert isinstance(step, StartAt) and step.offset == 800


def test_perform_takes_only_a_segment_of_the_leaders_epoch_below_the_target_when_it_is_known() -> None:
    manager, _ = tiered()
    step, _ = perform(manager, AuxStateWork(TP, TIERED_OFFSET, 800, 3, 0, 1000, epoch_below=3))
    assert isinstance(step, StartAt) and step.offset == 800
    step, _ = perform(manager, AuxStateWork(TP, TIERED_OFFSET, 800, 3, 0, 1000, epoch_below=2))
    assert isinstance(step, Retry) and "of epoch 2 holds offset 799" in step.reason
