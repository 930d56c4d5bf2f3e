"""The segmented log: append, read, roll, truncate, reopen, and refusing bad appends."""

from __future__ import annotations

import os
import struct
import threading
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from quorum.log import InvalidAppendError, InvalidOffsetError, Log, LogError
from quorum.log.epoch_cache import CHECKPOINT_NAME, EpochEntry
from quorum.raft.interface import OffsetAndEpoch, RaftLog
from quorum.wire.records import RecordBatch, iter_batches
from tests.log.helpers import check_batch_contents, make_batch, make_batches, offsets_of, segment_files


def fill(log: Log, batches: int, count: int = 3, epoch: int = 1, value_size: int = 50) -> list[int]:
    """Append `batches` batches one by one; returns their base offsets."""
    bases = []
    for _ in range(batches):
        bases.append(log.end_offset)
        log.append(make_batch(log.end_offset, count, epoch, value_size))
    return bases


def test_a_new_log_is_one_empty_kafka_named_segment(tmp_path: Path) -> None:
    with Log(tmp_path / "topic-0") as log:
        assert (log.start_offset, log.end_offset, log.flushed_offset) == (0, 0, 0)
        assert log.last_fetched_epoch() == 0
        assert log.end_offset_for_epoch(0) == OffsetAndEpoch(0, 0)
        assert log.read(0, 1000) == b""
        raft_log: RaftLog = log  # what the Raft core consults (checked by a type checker)
        protocol = {name for name in vars(RaftLog) if not name.startswith("_")}
        assert protocol == {"start_offset", "end_offset", "flushed_offset", "last_fetched_epoch",
                            "end_offset_for_epoch", "read"}  # fmt: skip
        assert all(hasattr(raft_log, name) for name in protocol)
    names = sorted(os.listdir(tmp_path / "topic-0"))
    assert names == ["00000000000000000000.index", "00000000000000000000.log", CHECKPOINT_NAME]
    assert (tmp_path / "topic-0" / CHECKPOINT_NAME).read_text() == "0\n0\n"


def test_append_returns_the_end_offset_and_read_returns_whole_batches(tmp_path: Path) -> None:
    with Log(tmp_path) as log:
        data = make_batches(0, [(3, 1), (2, 1), (4, 2)])
        assert log.append(data) == 9
        assert log.end_offset == 9
        assert log.flushed_offset == 0  # written, not yet durable
        assert log.read(0, 10_000) == data
        assert offsets_of(log.read(3, 10_000)) == [3, 5]
        # an offset inside a batch reads from that batch, as Kafka does
        assert offsets_of(log.read(4, 10_000)) == [3, 5]
        # max_bytes cuts at a batch boundary, but the first batch always comes whole
        assert offsets_of(log.read(0, 1)) == [0]
        first = RecordBatch(log.read(0, 1))
        assert offsets_of(log.read(0, first.size_in_bytes + 10)) == [0]
        # upto (a high watermark) keeps only batches starting below it
        assert offsets_of(log.read(0, 10_000, upto=5)) == [0, 3]
        assert log.read(5, 10_000, upto=5) == b""
        assert log.read(9, 10) == b""
        for bad in (-1, 10):
            with pytest.raises(InvalidOffsetError):
                log.read(bad, 100)


def test_flush_makes_the_appended_offsets_durable(tmp_path: Path) -> None:
    with Log(tmp_path) as log:
        fill(log, 5)
        assert log.flushed_offset == 0
        assert log.flush() == 15
        assert log.flushed_offset == 15
        fill(log, 1)
        assert log.flushed_offset == 15
        assert log.flush() == 18


def test_segments_roll_at_segment_bytes_with_kafka_names(tmp_path: Path) -> None:
    batch_size = len(make_batch(0, 3))
    with Log(tmp_path, segment_bytes=batch_size * 4) as log:
        fill(log, 10)
        assert log.segment_base_offsets == [0, 12, 24]
        assert [p.name for p in segment_files(tmp_path)] == [
            "00000000000000000000.log", "00000000000000000012.log", "00000000000000000024.log",
        ]  # fmt: skip
        assert (tmp_path / "00000000000000000000.log").stat().st_size == batch_size * 4
        # reads stay within one segment, as Kafka's do
        assert offsets_of(log.read(6, 1 << 20)) == [6, 9]
        assert offsets_of(log.read(12, 1 << 20)) == [12, 15, 18, 21]
        assert [b.base_offset for b in log.iter_batches()] == list(range(0, 30, 3))
        assert [b.base_offset for b in log.iter_batches(7, upto=20)] == [6, 9, 12, 15, 18]


def test_an_append_larger_than_a_segment_gets_a_segment_of_its_own(tmp_path: Path) -> None:
    with Log(tmp_path, segment_bytes=200) as log:
        log.append(make_batch(0, 1, value_size=10))
        log.append(make_batches(1, [(2, 1), (2, 1), (2, 1)], value_size=100))
        log.append(make_batch(7, 1, value_size=10))
        assert log.segment_base_offsets == [0, 1, 7]


def test_the_index_has_kafka_layout_and_interval(tmp_path: Path) -> None:
    with Log(tmp_path, index_interval_bytes=1000) as log:
        fill(log, 40, value_size=100)
        log.flush()
        raw = (tmp_path / "00000000000000000000.log").read_bytes()
    index = (tmp_path / "00000000000000000000.index").read_bytes()
    assert index and len(index) % 8 == 0
    positions = {batch.position: batch for batch in iter_batches(raw)}
    previous = 0
    for relative, position in struct.iter_unpack(">ii", index):
        # each entry names the last offset of the batch that starts at its position
        assert positions[position].last_offset == relative
        # and is added once more than index.interval.bytes went by since the previous one
        assert position - previous > 1000
        previous = position


def test_appends_are_validated_and_refused_whole(tmp_path: Path) -> None:
    with Log(tmp_path) as log:
        log.append(make_batches(0, [(2, 3)]))
        good = make_batch(2, 2, epoch=3)
        flipped = bytearray(make_batch(4, 2, epoch=3))
        flipped[-3] ^= 0x01
        cases = {
            "CRC mismatch": good + bytes(flipped),
            "base offset 5 where offset 2 comes next": make_batch(5, 1, epoch=3),
            "base offset 3 where offset 4 comes next": good + make_batch(3, 1, epoch=3),
            "leader epoch 2 after epoch 3": make_batch(2, 1, epoch=2),
            "leader epoch 1 after epoch 4": make_batch(2, 1, epoch=4) + make_batch(3, 1, epoch=1),
            "truncated batch": good + make_batch(4, 1, epoch=3)[:-1],
            "magic 1": make_batch(2, 1, epoch=3)[:16] + b"\x01" + make_batch(2, 1, epoch=3)[17:],
        }
        size = (tmp_path / "00000000000000000000.log").stat().st_size
        for reason, data in cases.items():
            with pytest.raises(InvalidAppendError, match=reason):
                log.append(data)
            assert log.end_offset == 2
            assert (tmp_path / "00000000000000000000.log").stat().st_size == size
        assert log.epoch_entries == (EpochEntry(3, 0),)
        assert log.append(good) == 4
        assert log.append(b"") == 4


def test_truncate_to_a_batch_boundary(tmp_path: Path) -> None:
    batch_size = len(make_batch(0, 3))
    with Log(tmp_path, segment_bytes=batch_size * 3) as log:
        for epoch in (1, 1, 2, 2, 2, 4, 4):
            log.append(make_batch(log.end_offset, 3, epoch))
        log.flush()
        assert log.segment_base_offsets == [0, 9, 18]
        with pytest.raises(InvalidOffsetError, match="batch boundary"):
            log.truncate_to(10)
        with pytest.raises(InvalidOffsetError, match="outside"):
            log.truncate_to(22)
        log.truncate_to(12)
        assert (log.end_offset, log.flushed_offset) == (12, 12)
        assert log.segment_base_offsets == [0, 9]
        assert [p.name for p in segment_files(tmp_path)] == ["00000000000000000000.log", "00000000000000000009.log"]
        assert not (tmp_path / "00000000000000000018.index").exists()
        assert log.epoch_entries == (EpochEntry(1, 0), EpochEntry(2, 6))
        assert (tmp_path / CHECKPOINT_NAME).read_text() == "0\n2\n1 0\n2 6\n"
        assert log.last_fetched_epoch() == 2
        # the log continues from the cut, and epochs may go back up to the cut's epoch
        with pytest.raises(InvalidAppendError, match="epoch 1 after epoch 2"):
            log.append(make_batch(12, 1, 1))
        log.append(make_batch(12, 1, 3))
        assert log.epoch_entries == (EpochEntry(1, 0), EpochEntry(2, 6), EpochEntry(3, 12))
        # truncating to a segment's base offset keeps it, empty, as the active segment
        log.truncate_to(9)
        assert log.segment_base_offsets == [0, 9]
        assert (tmp_path / "00000000000000000009.log").stat().st_size == 0
        log.truncate_to(0)
        assert (log.end_offset, log.last_fetched_epoch(), log.epoch_entries) == (0, 0, ())
        assert log.segment_base_offsets == [0]
        log.append(make_batch(0, 1, 7))
    with Log(tmp_path) as log:
        assert (log.end_offset, log.epoch_entries) == (1, (EpochEntry(7, 0),))


def test_end_offset_for_epoch_answers_from_the_epoch_cache(tmp_path: Path) -> None:
    with Log(tmp_path) as log:
        log.append(make_batches(0, [(2, 1), (3, 1), (1, 3), (4, 5), (2, 5)]))
        assert log.epoch_entries == (EpochEntry(1, 0), EpochEntry(3, 5), EpochEntry(5, 6))
        assert log.last_fetched_epoch() == 5
        assert log.end_offset_for_epoch(7) == OffsetAndEpoch(12, 5)
        assert log.end_offset_for_epoch(5) == OffsetAndEpoch(12, 5)
        assert log.end_offset_for_epoch(4) == OffsetAndEpoch(6, 3)
        assert log.end_offset_for_epoch(3) == OffsetAndEpoch(6, 3)
        assert log.end_offset_for_epoch(2) == OffsetAndEpoch(5, 1)
        assert log.end_offset_for_epoch(1) == OffsetAndEpoch(5, 1)
        assert log.end_offset_for_epoch(0) == OffsetAndEpoch(-1, -1)


def test_reopening_restores_everything(tmp_path: Path) -> None:
    data = make_batches(0, [(2, 1), (3, 2), (1, 2), (4, 6)])
    with Log(tmp_path, segment_bytes=300) as log:
        log.append(data[: len(make_batch(0, 2))])
        log.append(data[len(make_batch(0, 2)) :])
        bases = log.segment_base_offsets
    with Log(tmp_path, segment_bytes=300) as log:
        assert (log.end_offset, log.flushed_offset) == (10, 10)
        assert log.segment_base_offsets == bases
        assert log.epoch_entries == (EpochEntry(1, 0), EpochEntry(2, 2), EpochEntry(6, 6))
        assert b"".join(bytes(b.raw) for b in log.iter_batches()) == data
        for batch in log.iter_batches():
            check_batch_contents(batch)


def test_a_closed_log_refuses_everything(tmp_path: Path) -> None:
    log = Log(tmp_path)
    log.append(make_batch(0))
    log.close()
    log.close()
    for call in (lambda: log.append(make_batch(1)), log.flush, lambda: log.read(0, 10), lambda: log.truncate_to(0)):
        with pytest.raises(LogError, match="closed"):
            call()


def test_a_failed_fsync_stops_further_writes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    log = Log(tmp_path)
    log.append(make_batch(0))

    def failing_fsync(fd: int) -> None:
        raise OSError(5, "Input/output error")

    monkeypatch.setattr(os, "fsync", failing_fsync)
    with pytest.raises(OSError):
        log.flush()
    monkeypatch.undo()
    assert log.flushed_offset == 0
    with pytest.raises(LogError, match="reopen"):
        log.append(make_batch(1))
    assert log.read(0, 1000) == make_batch(0)  # what was written can still be read
    log.close()
    with Log(tmp_path) as log:
        assert log.end_offset == 1


def test_reads_of_flushed_data_go_on_while_an_fsync_is_in_flight(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    log = Log(tmp_path)
    log.append(make_batch(0, 2))
    log.flush()
    log.append(make_batch(2, 2))
    entered, release = threading.Event(), threading.Event()
    real_fsync = os.fsync

    def slow_fsync(fd: int) -> None:
        entered.set()
        release.wait(10)
        real_fsync(fd)

    monkeypatch.setattr(os, "fsync", slow_fsync)
    flusher = threading.Thread(target=log.flush)
    flusher.start()
    try:
        assert entered.wait(10)
        # the disk is busy: reads and appends are still served
        assert offsets_of(log.read(0, 1 << 20)) == [0, 2]
        assert log.end_offset_for_epoch(1) == OffsetAndEpoch(4, 1)
        assert log.append(make_batch(4, 1)) == 5
        assert log.flushed_offset == 2
    finally:
        release.set()
        flusher.join(10)
    monkeypatch.undo()
    assert log.flushed_offset == 4  # what was appended before the flush started
    assert log.flush() == 5
    log.close()


def test_a_roll_makes_the_old_segment_durable_before_the_new_one_exists(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Why recovery may treat damage before the last segment as committed data, never a torn write."""
    log = Log(tmp_path, segment_bytes=len(make_batch(0, 3)) * 2)
    fill(log, 2)
    log.flush()
    events: list[str] = []
    real_fsync, real_open = os.fsync, os.open

    def fsync(fd: int) -> None:
        events.append("fsync " + os.path.basename(os.readlink(f"/proc/self/fd/{fd}")))
        real_fsync(fd)

    def open_(path, flags, mode=0o777, **kwargs):  # noqa: ANN001, ANN202
        if str(path).endswith(".log"):
            events.append("open " + os.path.basename(path))
        return real_open(path, flags, mode, **kwargs)

    monkeypatch.setattr(os, "fsync", fsync)
    monkeypatch.setattr(os, "open", open_)
    fill(log, 1)  # rolls
    assert events.index("fsync 00000000000000000000.log") < events.index("open 00000000000000000006.log")
    assert "fsync 00000000000000000000.index" in events
    events.clear()
    log.flush()  # the new segment's directory entry is made durable by the next flush
    assert events == ["fsync 00000000000000000006.log", f"fsync {tmp_path.name}"]
    events.clear()
    fill(log, 1)
    log.flush()
    assert events == ["fsync 00000000000000000006.log"]
    monkeypatch.undo()
    log.close()


def test_iteration_sees_appends_made_while_it_runs(tmp_path: Path) -> None:
    with Log(tmp_path) as log:
        fill(log, 2)
        seen = []
        for batch in log.iter_batches():
            seen.append(batch.base_offset)
            if batch.base_offset == 3:
                fill(log, 1)
        assert seen == [0, 3, 6]


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.binary(max_size=300), st.integers(0, 2))
def test_garbage_appends_are_refused_cleanly(tmp_path: Path, garbage: bytes, prefix_batches: int) -> None:
    directory = tmp_path / garbage.hex()[:40] / str(prefix_batches)
    with Log(directory) as log:
        fill(log, 1)
        data = make_batches(3, [(1, 1)] * prefix_batches) + garbage
        if not garbage:
            return
        with pytest.raises(InvalidAppendError):
            log.append(data)
        assert log.end_offset == 3
        assert offsets_of(log.read(0, 1 << 20)) == [0]
