"""Recovery at open: torn tails truncated to the last valid batch, damage to committed data refused,
indexes rebuilt, the epoch checkpoint made to agree with the log."""

from __future__ import annotations

import logging
import os
import random
import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from quorum.log import CorruptLogError, Log
from quorum.log.epoch_cache import CHECKPOINT_NAME, EpochEntry, read_checkpoint, write_checkpoint
from quorum.raft.interface import OffsetAndEpoch
from quorum.wire.records import iter_batches
from tests.log.helpers import check_batch_contents, make_batch, segment_files

BATCH = len(make_batch(0, 3))
#: (epoch of each batch); three batches a segment with SEGMENT_BYTES.
EPOCHS = (1, 1, 2, 2, 2, 3, 3, 5, 5, 5)
SEGMENT_BYTES = BATCH * 3


def build_log(directory: Path, verify_all: bool = True) -> None:
    with Log(directory, segment_bytes=SEGMENT_BYTES, verify_all_segments=verify_all) as log:
        for epoch in EPOCHS:
            log.append(make_batch(log.end_offset, 3, epoch))
        assert log.segment_base_offsets == [0, 9, 18, 27]


def reopen(directory: Path, verify_all: bool = True) -> Log:
    return Log(directory, segment_bytes=SEGMENT_BYTES, verify_all_segments=verify_all)


def batch_positions(path: Path) -> list[int]:
    return [batch.position for batch in iter_batches(path.read_bytes())]


def flip_bit(path: Path, position: int, bit: int = 0) -> None:
    data = bytearray(path.read_bytes())
    data[position] ^= 1 << bit
    path.write_bytes(bytes(data))


def assert_valid(log: Log, end_offset: int) -> None:
    assert log.end_offset == end_offset
    offsets = []
    for batch in log.iter_batches():
        check_batch_contents(batch)
        offsets.append(batch.base_offset)
    assert offsets == list(range(0, end_offset, 3))


NEXT = make_batch(30, 3, 5)
TORN_TAILS = {
    "one byte of the next batch": NEXT[:1],
    "its offset and length only": NEXT[:12],
    "its header only": NEXT[:61],
    "all of it but the last byte": NEXT[:-1],
    "zeros, as a crashed file extension leaves": bytes(4096),
    "garbage": random.Random(7).randbytes(3000),
    "a batch length far past the end": NEXT[:8] + b"\x7f\xff\xff\xff" + NEXT[12:],
}


@pytest.mark.parametrize("tail", TORN_TAILS.values(), ids=TORN_TAILS.keys())
@pytest.mark.parametrize("verify_all", [True, False], ids=["verify-all", "verify-tail"])
def test_a_torn_tail_is_truncated_to_the_last_valid_batch(
    tmp_path: Path, tail: bytes, verify_all: bool, caplog: pytest.LogCaptureFixture
) -> None:
    build_log(tmp_path, verify_all)
    last = segment_files(tmp_path)[-1]
    size = last.stat().st_size
    with last.open("ab") as file:
        file.write(tail)
    with caplog.at_level(logging.WARNING, logger="quorum.log"), reopen(tmp_path, verify_all) as log:
        assert_valid(log, 30)
        assert log.flushed_offset == 30
        assert last.stat().st_size == size  # cut on disk, not only skipped
        assert log.epoch_entries == (EpochEntry(1, 0), EpochEntry(2, 6), EpochEntry(3, 15), EpochEntry(5, 21))
        log.append(make_batch(30, 3, 5))  # the log goes on from there
    assert f"{last}: torn or corrupt tail at byte {size}" in caplog.text


def test_a_flipped_bit_in_the_last_batch_drops_that_batch(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    build_log(tmp_path)
    last = segment_files(tmp_path)[-1]
    assert batch_positions(last) == [0]
    flip_bit(last, BATCH - 5, 3)  # inside the records, covered by the CRC
    with caplog.at_level(logging.WARNING, logger="quorum.log"), reopen(tmp_path) as log:
        assert_valid(log, 27)
        assert log.segment_base_offsets == [0, 9, 18, 27]  # the emptied segment stays the active one
        assert log.epoch_entries == (EpochEntry(1, 0), EpochEntry(2, 6), EpochEntry(3, 15), EpochEntry(5, 21))
        assert log.last_fetched_epoch() == 5
    assert "CRC mismatch" in caplog.text
    assert f"{last}: torn or corrupt tail at byte 0" in caplog.text


def test_damage_in_the_last_segment_truncates_from_the_damaged_batch(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    with Log(tmp_path) as log:
        for epoch in EPOCHS:
            log.append(make_batch(log.end_offset, 3, epoch))
    only = segment_files(tmp_path)[0]
    positions = batch_positions(only)
    flip_bit(only, positions[6] + 40)  # batch 6's CRC'd header fields
    with caplog.at_level(logging.WARNING, logger="quorum.log"), Log(tmp_path) as log:
        assert_valid(log, 18)
        assert log.epoch_entries == (EpochEntry(1, 0), EpochEntry(2, 6), EpochEntry(3, 15))
        assert (tmp_path / CHECKPOINT_NAME).read_text() == "0\n3\n1 0\n2 6\n3 15\n"
    assert f"at byte {positions[6]}" in caplog.text


@pytest.mark.parametrize("what", ["records", "crc", "base offset", "epoch"])
def test_damage_in_an_earlier_segment_is_refused_with_file_and_byte(tmp_path: Path, what: str) -> None:
    build_log(tmp_path)
    second = segment_files(tmp_path)[1]
    middle = batch_positions(second)[1]
    before = second.read_bytes()
    position = {"records": middle + 100, "crc": middle + 18, "base offset": middle + 7, "epoch": middle + 12}[what]
    flip_bit(second, position, 7 if what == "epoch" else 0)
    with pytest.raises(CorruptLogError) as caught:
        reopen(tmp_path)
    error = caught.value
    assert (error.path, error.position) == (second, middle)
    assert str(error).startswith(f"{second} at byte {middle}: ")
    assert "refusing to load" in str(error)
    assert second.read_bytes()[:middle] == before[:middle]  # nothing was cut
    assert len(second.read_bytes()) == len(before)


def test_without_verify_all_a_broken_frame_in_an_earlier_segment_is_still_refused(tmp_path: Path) -> None:
    build_log(tmp_path, verify_all=False)
    second = segment_files(tmp_path)[1]
    last_batch = batch_positions(second)[-1]
    flip_bit(second, last_batch + 11)  # batchLength: the batches no longer frame the file
    with pytest.raises(CorruptLogError) as caught:
        reopen(tmp_path, verify_all=False)
    assert caught.value.path == second
    assert caught.value.position == last_batch


def test_a_missing_segment_is_refused(tmp_path: Path) -> None:
    build_log(tmp_path)
    segment_files(tmp_path)[1].unlink()
    with pytest.raises(CorruptLogError, match="not contiguous"):
        reopen(tmp_path)


INDEX_DAMAGE = {
    "missing": None,
    "cut mid-entry": lambda data: data[:-3],
    "zero-filled, as Kafka preallocates": lambda data: data + bytes(80),
    "entries out of order": lambda data: data[8:16] + data[:8] + data[16:],
    "pointing past the log": lambda data: data[:-4] + b"\x7f\xff\xff\xff",
}


@pytest.mark.parametrize("damage", INDEX_DAMAGE.values(), ids=INDEX_DAMAGE.keys())
@pytest.mark.parametrize("verify_all", [True, False], ids=["verify-all", "verify-tail"])
def test_a_damaged_index_is_rebuilt(tmp_path: Path, damage, verify_all: bool) -> None:  # noqa: ANN001
    with Log(tmp_path, segment_bytes=BATCH * 12, index_interval_bytes=BATCH) as log:
        for number in range(20):
            log.append(make_batch(log.end_offset, 3, 1 + number // 5))
    assert len(segment_files(tmp_path)) == 2
    index = tmp_path / "00000000000000000000.index"
    original = index.read_bytes()
    assert len(original) >= 3 * 8
    if damage is None:
        index.unlink()
    else:
        index.write_bytes(damage(original))
    with Log(tmp_path, segment_bytes=BATCH * 12, verify_all_segments=verify_all, index_interval_bytes=BATCH) as log:
        assert index.read_bytes() == original
        assert_valid(log, 60)
        for offset in range(0, 60, 3):
            assert next(iter_batches(log.read(offset, 1))).base_offset == offset


def test_an_index_without_its_segment_is_deleted(tmp_path: Path) -> None:
    build_log(tmp_path)
    orphan = tmp_path / "00000000000000000099.index"
    orphan.write_bytes(b"\x00" * 8)
    with reopen(tmp_path) as log:
        assert_valid(log, 30)
    assert not orphan.exists()


EXPECTED_EPOCHS = [EpochEntry(1, 0), EpochEntry(2, 6), EpochEntry(3, 15), EpochEntry(5, 21)]
CHECKPOINT_DAMAGE = {
    "missing": None,
    "garbage": b"\x00\xffnot a checkpoint",
    "wrong count": b"0\n3\n1 0\n2 6\n",
    "stale: last epoch missing": [EpochEntry(1, 0), EpochEntry(2, 6), EpochEntry(3, 15)],
    "stale: middle epochs missing": [EpochEntry(1, 0), EpochEntry(5, 21)],
    "stale: an epoch that was truncated away": [EpochEntry(1, 0), EpochEntry(2, 6), EpochEntry(4, 12)],
    "an epoch past the end": EXPECTED_EPOCHS + [EpochEntry(6, 40)],
    "wrong start offset": [EpochEntry(1, 0), EpochEntry(2, 9), EpochEntry(3, 15), EpochEntry(5, 21)],
    "empty": [],
}


@pytest.mark.parametrize("damage", CHECKPOINT_DAMAGE.values(), ids=CHECKPOINT_DAMAGE.keys())
@pytest.mark.parametrize("verify_all", [True, False], ids=["verify-all", "verify-tail"])
def test_the_epoch_checkpoint_is_made_to_agree_with_the_log(tmp_path: Path, damage, verify_all: bool) -> None:  # noqa: ANN001
    build_log(tmp_path, verify_all)
    checkpoint = tmp_path / CHECKPOINT_NAME
    assert read_checkpoint(checkpoint) == EXPECTED_EPOCHS
    if damage is None:
        checkpoint.unlink()
    elif isinstance(damage, bytes):
        checkpoint.write_bytes(damage)
    else:
        write_checkpoint(checkpoint, damage)
    with reopen(tmp_path, verify_all) as log:
        assert list(log.epoch_entries) == EXPECTED_EPOCHS
        assert read_checkpoint(checkpoint) == EXPECTED_EPOCHS
        assert log.end_offset_for_epoch(4) == OffsetAndEpoch(21, 3)


def test_recovery_of_a_log_that_was_only_ever_written_without_epochs(tmp_path: Path) -> None:
    with Log(tmp_path) as log:
        log.append(make_batch(0, 2, epoch=-1) + make_batch(2, 2, epoch=-1))
    with Log(tmp_path) as log:
        assert (log.end_offset, log.epoch_entries, log.last_fetched_epoch()) == (4, (), 0)
        log.append(make_batch(4, 1, epoch=0))
        assert log.epoch_entries == (EpochEntry(0, 4),)


def test_stray_tmp_files_do_not_disturb_the_open(tmp_path: Path) -> None:
    build_log(tmp_path)
    (tmp_path / (CHECKPOINT_NAME + ".tmp")).write_bytes(b"half a chec")
    (tmp_path / "quorum-state").write_text("{}")  # the metadata log's directory holds it too
    with reopen(tmp_path) as log:
        assert_valid(log, 30)
    assert "quorum-state" in os.listdir(tmp_path)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.data())
def test_any_damage_to_the_last_segment_recovers_a_prefix(tmp_path: Path, data: st.DataObject) -> None:
    directory = Path(tempfile.mkdtemp(dir=tmp_path))
    with Log(directory) as log:
        for epoch in EPOCHS:
            log.append(make_batch(log.end_offset, 3, epoch))
    path = segment_files(directory)[0]
    content = bytearray(path.read_bytes())
    kind = data.draw(st.sampled_from(["cut", "flip", "overwrite", "append"]))
    position = data.draw(st.integers(0, len(content) - 1))
    if kind == "cut":
        del content[position:]
    elif kind == "flip":
        content[position] ^= 1 << data.draw(st.integers(0, 7))
    elif kind == "overwrite":
        chunk = data.draw(st.binary(min_size=1, max_size=200))
        content[position : position + len(chunk)] = chunk
    else:
        content += data.draw(st.binary(min_size=1, max_size=200))
    path.write_bytes(bytes(content))
    with Log(directory) as log:
        batches = list(log.iter_batches())
        assert [b.base_offset for b in batches] == list(range(0, log.end_offset, 3))
        for batch in batches:
            check_batch_contents(batch)
        assert path.stat().st_size == sum(b.size_in_bytes for b in batches)
        # a flip in a header field outside the CRC (offset, epoch) is caught by continuity, or
        # leaves an epoch that only went up: either way the cache agrees with what was kept
        expected = []
        for batch in batches:
            if not expected or batch.partition_leader_epoch > expected[-1].epoch:
                expected.append(EpochEntry(batch.partition_leader_epoch, batch.base_offset))
        assert list(log.epoch_entries) == expected
