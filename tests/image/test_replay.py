"""MetadataReplayer over a real Log: boot, catch-up to the high watermark, snapshots written, loaded, installed."""

from __future__ import annotations

import itertools
import os
import shutil
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from quorum.image.metrics import NodeMetrics
from quorum.image.records_state import EntityKind, MetadataRecordsState
from quorum.image.replay import MetadataReplayer, ReplayError
from quorum.image.snapshot_policy import SnapshotPolicy
from quorum.log import Log
from quorum.log.errors import CorruptSnapshotError
from quorum.log.snapshot import SnapshotReader, partial_snapshot_path, snapshot_path
from quorum.raft.interface import OffsetAndEpoch
from quorum.sim.memory_log import MemoryLog
from quorum.wire.control_records import LeaderChangeMessage, encode_control_record
from quorum.wire.records import Record, build_batch, build_control_batch
from tests.image.records import TOPIC_IDS, change, config, fence, partition, register, topic, unfence, unregister

T1, T2, _ = TOPIC_IDS
NOW_MS = 1_763_700_000_000
ALWAYS = SnapshotPolicy(0.0, 0)
NEVER = SnapshotPolicy(1.0, 1 << 62)

# (epoch, values) per batch; None is a LeaderChange control batch.
HISTORY: list[tuple[int, list[bytes] | None]] = [
    (1, None),
    (1, [register(1), register(2), topic(T1)]),
    (1, [partition(T1, 0), partition(T1, 1)]),
    (2, None),
    (2, [fence(1), change(T1, 0, 2), config("t", "x", "1")]),
    (2, [b"not a metadata record"]),
    (3, None),
    (3, [unfence(1), topic(T2), partition(T2, 0), unregister(2)]),
    (3, [change(T1, 1, 1), config("t", "x", None)]),
]


def encode(history: list[tuple[int, list[bytes] | None]], base: int = 0) -> list[bytes]:
    batches = []
    offset = base
    for epoch, values in history:
        timestamp = NOW_MS + offset
        if values is None:
            key, value = encode_control_record(LeaderChangeMessage(version=0, content_version=0, leader_id=1,
                                                                   voters=[], granting_voters=[]))
            batches.append(build_control_batch(key, value, offset, epoch, timestamp))
            offset += 1
        else:
            records = [Record(offset + i, timestamp + i, None, value, []) for i, value in enumerate(values)]
            batches.append(build_batch(records, base_offset=offset, partition_leader_epoch=epoch))
            offset += len(values)
    return batches


BATCHES = encode(HISTORY)
BOUNDARIES = list(itertools.accumulate((1 if values is None else len(values) for _, values in HISTORY), initial=0))
END = BOUNDARIES[-1]


def full_state(upto: int = END) -> MetadataRecordsState:
    state = MetadataRecordsState()
    offset = 0
    for _, values in HISTORY:
        for value in values or [None]:
            if value is not None and offset < upto:
                state.apply(offset, value)
            offset += 1
    return state


def log_with_history(directory: Path, count: int = len(BATCHES)) -> Log:
    log = Log(directory)
    log.append(b"".join(BATCHES[:count]))
    log.flush()
    return log


def replayer(directory: Path, log: Log | MemoryLog, policy: SnapshotPolicy = NEVER,
             metrics: NodeMetrics | None = None, clock=None) -> MetadataReplayer:
    options = {} if clock is None else {"clock": clock}
    return MetadataReplayer(directory, log, MetadataRecordsState(), policy, metrics, **options)


def metric(metrics: NodeMetrics, name: str) -> float:
    for family in text_string_to_metric_families(metrics.render().decode()):
        for sample in family.samples:
            if sample.name == "kafka_controller_KafkaController_" + name:
                return sample.value
    raise KeyError(name)


def test_boot_without_snapshots_replays_from_the_log_start(tmp_path: Path) -> None:
    with log_with_history(tmp_path) as log:
        replay = replayer(tmp_path, log)
        assert replay.boot() is None
        assert replay.applied_offset == 0 and replay.applied_epoch is None
        assert replay.catch_up(END) == sum(len(values or ()) for _, values in HISTORY)
        assert replay.applied_offset == END and replay.applied_epoch == 3
        assert replay.state == full_state() and replay.state.digest() == full_state().digest()
        assert replay.catch_up(END) == 0


def test_catch_up_applies_whole_batches_below_the_high_watermark(tmp_path: Path) -> None:
    with log_with_history(tmp_path) as log:
        replay = replayer(tmp_path, log)
        replay.boot()
        assert replay.catch_up(BOUNDARIES[2] + 1) == 3, "the batch holding the high watermark waits"
        assert replay.applied_offset == BOUNDARIES[2]
        assert replay.catch_up(BOUNDARIES[4]) == 2, "a control batch advances the offset, applies nothing"
        assert replay.applied_offset == BOUNDARIES[4] and replay.applied_epoch == 2
        assert replay.last_contained_timestamp == NOW_MS + BOUNDARIES[3]
        assert replay.bytes_since_snapshot == sum(len(batch) for batch in BATCHES[:4])
        replay.catch_up(END)
        assert replay.state == full_state()
        assert replay.last_contained_timestamp == NOW_MS + END - 1


def test_a_snapshot_is_written_at_the_applied_offset_with_the_last_batchs_epoch(tmp_path: Path) -> None:
    metrics = NodeMetrics()
    with log_with_history(tmp_path) as log:
        replay = replayer(tmp_path, log, metrics=metrics)
        replay.boot()
        replay.catch_up(BOUNDARIES[5])
        snapshot_id = replay.snapshot_now()
        assert snapshot_id == OffsetAndEpoch(BOUNDARIES[5], 2)
        assert replay.snapshot_now() is None, "nothing new since"
        assert replay.snapshots.latest_snapshot() == snapshot_id and log.snapshot_boundary == snapshot_id
        with SnapshotReader.open(tmp_path, snapshot_id) as reader:
            assert list(reader) == full_state(BOUNDARIES[5]).snapshot_values()
            assert reader.last_contained_log_timestamp == NOW_MS + BOUNDARIES[5] - 1
            size = reader.size
        assert replay.state.records_in_snapshot == len(full_state(BOUNDARIES[5]))
        assert replay.state.changed_records == 0 and replay.bytes_since_snapshot == 0
        assert metric(metrics, "SnapshotSizeBytes") == size
        assert metric(metrics, "GenSnapshotLatencyMs_count") == 1
        replay.update_lag(END)
        assert metric(metrics, "SnapshotLag") == END - BOUNDARIES[5]


def test_replicas_at_the_same_offset_write_identical_snapshots(tmp_path: Path) -> None:
    files = []
    for name in ("a", "b"):
        directory = tmp_path / name
        with log_with_history(directory) as log:
            replay = replayer(directory, log)
            replay.boot()
            replay.catch_up(END)
            files.append(snapshot_path(directory, replay.snapshot_now()).read_bytes())
    assert files[0] == files[1]


@pytest.mark.parametrize("cut", [2, 4, 5, 7])
def test_snapshot_and_replay_is_the_full_replay(tmp_path: Path, cut: int) -> None:
    with log_with_history(tmp_path) as log:
        first = replayer(tmp_path, log)
        first.boot()
        first.catch_up(BOUNDARIES[cut])
        snapshot_id = first.snapshot_now()
        log.advance_start_offset(snapshot_id.offset)  # the records below the snapshot are gone
    with Log(tmp_path) as log:
        second = replayer(tmp_path, log)
        assert second.boot() == snapshot_id
        assert second.applied_offset == snapshot_id.offset and second.applied_epoch == snapshot_id.epoch
        assert log.snapshot_boundary == snapshot_id
        assert second.state == full_state(snapshot_id.offset)
        second.catch_up(END)
        assert second.state == full_state() and second.state.digest() == full_state().digest()


def test_a_part_file_left_by_a_crash_is_removed_and_not_loaded(tmp_path: Path) -> None:
    with log_with_history(tmp_path) as log:
        first = replayer(tmp_path, log)
        first.boot()
        first.catch_up(BOUNDARIES[3])
        older = first.snapshot_now()
        first.catch_up(END)
        newer = first.snapshot_now()
    left = partial_snapshot_path(tmp_path, newer)
    os.rename(snapshot_path(tmp_path, newer), left)  # as if the crash came before the rename
    with Log(tmp_path) as log:
        second = replayer(tmp_path, log)
        assert second.boot() == older
        assert not left.exists()
        assert second.state == full_state(older.offset)


def test_a_corrupt_snapshot_is_refused_with_its_path_and_position_and_nothing_is_loaded(tmp_path: Path) -> None:
    with log_with_history(tmp_path) as log:
        first = replayer(tmp_path, log)
        first.boot()
        first.catch_up(END)
        snapshot_id = first.snapshot_now()
    path = snapshot_path(tmp_path, snapshot_id)
    path.chmod(0o644)
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0xFF
    path.write_bytes(bytes(data))
    metrics = NodeMetrics()
    with Log(tmp_path) as log:
        second = replayer(tmp_path, log, metrics=metrics)
        second.state.apply(0, register(9))
        before = second.state.snapshot_values()
        with pytest.raises(CorruptSnapshotError) as caught:
            second.boot()
        assert caught.value.path == path and caught.value.position is not None
        assert str(path) in str(caught.value) and f"byte {caught.value.position}" in str(caught.value)
        assert second.state.snapshot_values() == before, "never half-loaded"
        assert log.snapshot_boundary is None
        assert metric(metrics, "LoadSnapshotLatencyMs_count") == 0


def test_load_latency_is_timed_with_the_clock(tmp_path: Path) -> None:
    with log_with_history(tmp_path) as log:
        first = replayer(tmp_path, log)
        first.boot()
        first.catch_up(END)
        first.snapshot_now()
    ticks = iter([100.0, 100.25])
    metrics = NodeMetrics()
    with Log(tmp_path) as log:
        second = replayer(tmp_path, log, metrics=metrics, clock=lambda: next(ticks))
        second.boot()
    assert metric(metrics, "LoadSnapshotLatencyMs_sum") == 250.0
    assert metric(metrics, "LoadSnapshotLatencyMs_count") == 1


def test_maybe_snapshot_follows_the_policy(tmp_path: Path) -> None:
    policy = SnapshotPolicy(min_changed_records_ratio=0.7, max_record_bytes_between_snapshots=len(BATCHES[1]))
    with log_with_history(tmp_path) as log:
        replay = replayer(tmp_path, log, policy)
        replay.boot()
        assert replay.maybe_snapshot() is None, "nothing applied"
        replay.catch_up(BOUNDARIES[1])
        assert replay.maybe_snapshot() is None, "too few bytes"
        replay.catch_up(BOUNDARIES[2])
        first = replay.maybe_snapshot()
        assert first == OffsetAndEpoch(BOUNDARIES[2], 1), "no snapshot yet: the bytes alone decide"
        assert replay.state.records_in_snapshot == 3  # two brokers and a topic
        # Broker 1 is fenced (its RegisterBroker counts) and partition 0 of T1, added since the
        # snapshot, changes (its PartitionRecord counts, as the KIP says): 2 of 3, below 0.7.
        replay.catch_up(BOUNDARIES[5])
        assert replay.state.changed_records == 2
        assert replay.maybe_snapshot() is None, "enough bytes, too few changes"
        replay.catch_up(END)
        assert replay.state.changed_records == 6
        assert replay.maybe_snapshot() == OffsetAndEpoch(END, 3)


def test_install_replaces_the_state_and_restarts_a_log_behind_it(tmp_path: Path) -> None:
    leader_dir, follower_dir = tmp_path / "leader", tmp_path / "follower"
    with log_with_history(leader_dir) as log:
        leader = replayer(leader_dir, log)
        leader.boot()
        leader.catch_up(BOUNDARIES[7])
        snapshot_id = leader.snapshot_now()
    metrics = NodeMetrics()
    with log_with_history(follower_dir, count=2) as log:
        follower = replayer(follower_dir, log, metrics=metrics)
        follower.boot()
        follower.catch_up(BOUNDARIES[2])
        shutil.copy(snapshot_path(leader_dir, snapshot_id), snapshot_path(follower_dir, snapshot_id))  # fetched
        follower.install(snapshot_id)
        assert (log.start_offset, log.end_offset, log.last_fetched_epoch()) == (snapshot_id.offset,) * 2 + (3,)
        assert follower.applied_offset == snapshot_id.offset and follower.state == full_state(snapshot_id.offset)
        assert follower.state.records_in_snapshot == len(full_state(snapshot_id.offset))
        assert follower.snapshots.latest_snapshot() == snapshot_id
        assert metric(metrics, "LoadSnapshotLatencyMs_count") == 1
        assert metric(metrics, "SnapshotSizeBytes") == snapshot_path(follower_dir, snapshot_id).stat().st_size
        log.append(b"".join(BATCHES[7:]))
        follower.catch_up(END)
        assert follower.state == full_state()


def test_catch_up_refuses_a_log_that_starts_past_the_state(tmp_path: Path) -> None:
    log = MemoryLog()
    for batch in BATCHES:
        log.append(batch)
    log.flush()
    replay = replayer(tmp_path, log)
    replay.boot()
    log.advance_start_offset(BOUNDARIES[2])
    with pytest.raises(ReplayError, match="the records in between are gone"):
        replay.catch_up(END)


def test_snapshot_lag_without_a_snapshot_counts_from_the_log_start(tmp_path: Path) -> None:
    metrics = NodeMetrics()
    with log_with_history(tmp_path) as log:
        replay = replayer(tmp_path, log, metrics=metrics)
        replay.boot()
        replay.catch_up(BOUNDARIES[4])
        assert metric(metrics, "SnapshotLag") == BOUNDARIES[4]


def test_the_simulators_memory_log_replays_the_same(tmp_path: Path) -> None:
    log = MemoryLog()
    for batch in BATCHES:
        log.append(batch)
    log.flush()
    replay = replayer(tmp_path, log, ALWAYS)
    replay.boot()
    replay.catch_up(BOUNDARIES[5])
    snapshot_id = replay.maybe_snapshot()
    assert snapshot_id == OffsetAndEpoch(BOUNDARIES[5], 2) and log.snapshot_boundary == snapshot_id
    log.advance_start_offset(snapshot_id.offset)
    again = replayer(tmp_path, log)
    assert again.boot() == snapshot_id
    again.catch_up(END)
    assert again.state == full_state()
    assert again.state.keys(EntityKind.BROKER) == [1]


def test_a_background_snapshot_holds_the_state_it_captured_while_replay_goes_on(tmp_path: Path) -> None:
    with log_with_history(tmp_path) as log:
        replay = replayer(tmp_path, log, policy=ALWAYS)
        replay.boot()
        replay.catch_up(BOUNDARIES[5])
        job = replay.begin_snapshot()
        assert job is not None and job.snapshot_id == OffsetAndEpoch(BOUNDARIES[5], 2)
        assert replay.begin_snapshot() is None, "one job at a time"
        replay.catch_up(END)  # the state moves on while the file is written
        assert replay.snapshots.latest_snapshot() is None, "not a snapshot before it is complete"
        job.write()
        assert replay.finish_snapshot(job) == job.snapshot_id
        assert replay.snapshots.latest_snapshot() == job.snapshot_id and log.snapshot_boundary == job.snapshot_id
        with SnapshotReader.open(tmp_path, job.snapshot_id) as reader:
            assert list(reader) == full_state(BOUNDARIES[5]).snapshot_values()
        assert replay.state == full_state(END)
        assert replay.begin_snapshot().snapshot_id == OffsetAndEpoch(END, 3)
