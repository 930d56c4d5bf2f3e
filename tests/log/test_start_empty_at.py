"""A partition log replaced by an empty one above offset 0 with the leader's history below it
(`Log.start_empty_at`, the follower bootstrap of KIP-405/KIP-1023): epochs below the start kept
across restarts, appends after it, and a crash at every step leaving the old log or the new one."""

from __future__ import annotations

from pathlib import Path

import pytest

from quorum.log import Log, LogError
from quorum.log import log as log_module
from quorum.log.epoch_cache import CHECKPOINT_NAME, EpochEntry, read_checkpoint
from quorum.log.segment import LogSegment
from quorum.log.start_intent import (
    START_INTENT_NAME,
    StartIntent,
    decode_start_intent,
    encode_start_intent,
    producer_snapshot_offsets,
    producer_snapshot_path,
)
from quorum.raft.interface import OffsetAndEpoch
from tests.log.helpers import check_batch_contents, make_batch

BATCH = len(make_batch(0, 3))
HISTORY = (EpochEntry(0, 0), EpochEntry(1, 3), EpochEntry(3, 5))  # epochs with a gap (no 2)
SNAPSHOT = b"producer-state-at-600"


def open_log(directory: Path, verify_all: bool = True) -> Log:
    return Log(directory, segment_bytes=BATCH * 2, verify_all_segments=verify_all, keep_epochs_below_start=True)


def old_log(directory: Path) -> tuple[int, int, tuple[EpochEntry, ...], list[bytes]]:
    """A log of offsets 0-14 in epochs 1 and 2, over three segments; returns what identifies it."""
    with open_log(directory) as log:
        for epoch in (1, 1, 2, 2, 2):
            log.append(make_batch(log.end_offset, 3, epoch))
        log.flush()
        return identity(log)


def identity(log: Log) -> tuple[int, int, tuple[EpochEntry, ...], list[bytes]]:
    return log.start_offset, log.end_offset, log.epoch_entries, [bytes(b.raw) for b in log.iter_batches()]


@pytest.mark.parametrize("verify_all", [True, False])
def test_the_history_below_the_start_survives_restarts_and_appends(tmp_path: Path, verify_all: bool) -> None:
    old_log(tmp_path)
    with open_log(tmp_path, verify_all) as log:
        log.start_empty_at(600, HISTORY, SNAPSHOT)
        assert (log.start_offset, log.end_offset, log.epoch_entries) == (600, 600, HISTORY)
        assert log.last_fetched_epoch() == 3
        assert log.end_offset_for_epoch(1) == OffsetAndEpoch(5, 1)
        assert log.end_offset_for_epoch(2) == OffsetAndEpoch(5, 1)  # the gap: epoch 2 never wrote
        assert log.end_offset_for_epoch(3) == OffsetAndEpoch(600, 3)
    assert producer_snapshot_offsets(tmp_path) == [600]
    assert producer_snapshot_path(tmp_path, 600).read_bytes() == SNAPSHOT
    assert not (tmp_path / START_INTENT_NAME).exists()
    with open_log(tmp_path, verify_all) as log:
        assert (log.start_offset, log.end_offset, log.epoch_entries) == (600, 600, HISTORY)
        for epoch in (3, 3, 4, 4, 4):  # five batches over three segments: recovery walks or checks the older ones
            log.append(make_batch(log.end_offset, 3, epoch))
    with open_log(tmp_path, verify_all) as log:
        assert log.epoch_entries == (*HISTORY, EpochEntry(4, 606))
        assert log.end_offset_for_epoch(3) == OffsetAndEpoch(606, 3)
        assert [b.base_offset for b in log.iter_batches()] == list(range(600, 615, 3))
        for batch in log.iter_batches():
            check_batch_contents(batch)
        log.truncate_to(600)  # a divergence down to the start keeps the history below it
        assert log.epoch_entries == HISTORY
    with open_log(tmp_path, verify_all) as log:
        assert (log.start_offset, log.end_offset, log.epoch_entries) == (600, 600, HISTORY)


def test_the_raft_log_keeps_only_epochs_it_holds_records_of(tmp_path: Path) -> None:
    with Log(tmp_path, keep_epochs_below_start=True) as log:
        log.start_empty_at(600, HISTORY)
    with Log(tmp_path) as log:
        assert (log.start_offset, log.end_offset, log.epoch_entries) == (600, 600, ())
        assert (tmp_path / CHECKPOINT_NAME).exists() and read_checkpoint(tmp_path / CHECKPOINT_NAME) == []


@pytest.mark.parametrize(("epochs", "message"), [
    ((EpochEntry(0, 0), EpochEntry(1, 600)), "do not start below the new log start offset 600"),
    ((EpochEntry(2, 0), EpochEntry(1, 3)), "must strictly increase"),
    ((EpochEntry(-1, 0),), "negative"),
])  # fmt: skip
def test_bad_histories_are_refused_before_anything_changes(tmp_path: Path, epochs: tuple[EpochEntry, ...],
                                                           message: str) -> None:
    before = old_log(tmp_path)
    with open_log(tmp_path) as log:
        with pytest.raises(ValueError, match=message):
            log.start_empty_at(600, epochs)
        assert identity(log) == before
        log.append(make_batch(15, 1, 2))  # still writable


def test_intent_round_trips_and_garbage_is_named(tmp_path: Path) -> None:
    intent = StartIntent(600, HISTORY, SNAPSHOT)
    assert decode_start_intent(encode_start_intent(intent).decode(), "x") == intent
    assert decode_start_intent(encode_start_intent(StartIntent(7, (), None)).decode(), "x") == StartIntent(7, (), None)
    (tmp_path / START_INTENT_NAME).write_text("0\n600\n5\n0 0\n-\n")
    with pytest.raises(LogError, match=f"{START_INTENT_NAME}: 5 epoch entries do not fit"):
        open_log(tmp_path)


class Crash(Exception):
    """The process died here (the test stops the work at this call)."""


# Every file operation `start_empty_at` makes, in the order it makes them.
STEPS = [(log_module, "write_start_intent"), (LogSegment, "delete"), (log_module, "fsync_directory"),
         (log_module, "write_start_offset"), (Log, "_start_empty_segment"), (log_module, "write_checkpoint"),
         (log_module, "delete_producer_snapshots"), (log_module, "write_producer_snapshot"),
         (log_module, "remove_start_intent")]  # fmt: skip


def crash_at(monkeypatch: pytest.MonkeyPatch, crash_call: int) -> list[str]:
    """Make the `crash_call`-th file operation raise Crash instead of running; returns the calls made."""
    calls: list[str] = []
    for owner, name in STEPS:
        real = getattr(owner, name)

        def step(*args: object, real=real, name=name, **kwargs: object) -> object:
            if len(calls) == crash_call:
                raise Crash(name)
            calls.append(name)
            return real(*args, **kwargs)

        monkeypatch.setattr(owner, name, step)
    return calls


def test_a_crash_at_each_step_leaves_the_old_log_or_the_new_one(tmp_path: Path,
                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    with monkeypatch.context() as m:  # how many operations a whole run makes
        old_log(tmp_path / "count")
        with open_log(tmp_path / "count") as log:
            calls = crash_at(m, 10**6)
            log.start_empty_at(600, HISTORY, SNAPSHOT)
        total = len(calls)
    assert total >= 12 and calls.count("delete") == 3, calls
    outcomes = []
    for crash_call in range(total):
        directory = tmp_path / f"crash-{crash_call}"
        before = old_log(directory)
        with monkeypatch.context() as m:
            log = open_log(directory)
            crash_at(m, crash_call)
            with pytest.raises(Crash):
                log.start_empty_at(600, HISTORY, SNAPSHOT)
            with pytest.raises(LogError, match="refuses writes after a failed write"):
                log.append(make_batch(15, 1, 2))
            log.close()  # writes nothing more: the log has failed
        with open_log(directory) as reopened:
            if crash_call == 0:  # the intent, the commit point, was never written
                assert identity(reopened) == before
                assert producer_snapshot_offsets(directory) == []
                outcomes.append("old")
            else:
                assert (reopened.start_offset, reopened.end_offset, reopened.epoch_entries) == (600, 600, HISTORY)
                assert producer_snapshot_offsets(directory) == [600]
                assert producer_snapshot_path(directory, 600).read_bytes() == SNAPSHOT
                outcomes.append("new")
            assert not (directory / START_INTENT_NAME).exists()
        with open_log(directory) as again:  # and the next restart agrees
            assert again.start_offset in (0, 600) and again.epoch_entries in (before[2], HISTORY)
    assert outcomes == ["old"] + ["new"] * (total - 1)
