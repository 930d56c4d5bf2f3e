"""The leader-epoch cache (sans-IO) and its Kafka `leader-epoch-checkpoint` file."""

from __future__ import annotations

import contextlib
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from quorum.log import CorruptFileError
from quorum.log.epoch_cache import (
    EpochEntry,
    LeaderEpochCache,
    decode_checkpoint,
    encode_checkpoint,
    read_checkpoint,
    write_checkpoint,
)
from quorum.raft.interface import OffsetAndEpoch


def cache(*pairs: tuple[int, int]) -> LeaderEpochCache:
    return LeaderEpochCache(EpochEntry(epoch, start) for epoch, start in pairs)


def test_assign_records_new_epochs_only() -> None:
    c = LeaderEpochCache()
    assert c.latest_epoch == -1
    assert not c.assign(-1, 0)  # unstamped batches have no epoch
    assert c.assign(1, 0)
    assert not c.assign(1, 5)  # epoch 1 goes on
    assert c.assign(3, 7)
    assert c.entries == (EpochEntry(1, 0), EpochEntry(3, 7))
    # Kafka's rule for a non-monotonic assignment: it replaces what it conflicts with
    assert c.assign(2, 6)
    assert c.entries == (EpochEntry(1, 0), EpochEntry(2, 6))


def test_truncation_from_either_end() -> None:
    c = cache((1, 0), (2, 10), (4, 20))
    assert c.truncate_from_end(20)
    assert c.entries == (EpochEntry(1, 0), EpochEntry(2, 10))
    assert not c.truncate_from_end(15)
    assert c.truncate_from_start(12)
    assert c.entries == (EpochEntry(2, 12),)
    assert c.epoch_for_offset(11) == -1 and c.epoch_for_offset(12) == 2


def test_end_offset_for_follows_the_raft_log_protocol() -> None:
    c = cache((1, 0), (3, 10), (6, 25))
    assert c.end_offset_for(9, 40) == OffsetAndEpoch(40, 6)
    assert c.end_offset_for(6, 40) == OffsetAndEpoch(40, 6)
    assert c.end_offset_for(5, 40) == OffsetAndEpoch(25, 3)
    assert c.end_offset_for(2, 40) == OffsetAndEpoch(10, 1)
    assert c.end_offset_for(0, 40) == OffsetAndEpoch(-1, -1)
    assert c.end_offset_for(-1, 40) == OffsetAndEpoch(-1, -1)
    assert LeaderEpochCache().end_offset_for(3, 7) == OffsetAndEpoch(7, 0)


def test_entries_must_increase() -> None:
    for pairs in (((1, 0), (1, 5)), ((1, 5), (2, 5)), ((2, 0), (1, 5)), ((-1, 0),)):
        with pytest.raises(ValueError):
            cache(*pairs)


def test_the_checkpoint_has_kafka_layout(tmp_path: Path) -> None:
    path = tmp_path / "leader-epoch-checkpoint"
    write_checkpoint(path, [EpochEntry(0, 0), EpochEntry(3, 150)])
    assert path.read_text() == "0\n2\n0 0\n3 150\n"
    assert read_checkpoint(path) == [EpochEntry(0, 0), EpochEntry(3, 150)]
    assert not (tmp_path / "leader-epoch-checkpoint.tmp").exists()
    assert read_checkpoint(tmp_path / "missing") is None


@pytest.mark.parametrize(
    "content, reason",
    [
        (b"", "expected a version and a count"),
        (b"1\n0\n", "unrecognised version '1'"),
        (b"0\nx\n", "count 'x' is not a number"),
        (b"0\n2\n0 0\n", "expected 2 entries, found 1"),
        (b"0\n1\n0 0 7\n", "line 3: '0 0 7' is not 'epoch offset'"),
        (b"0\n1\nzero 0\n", "is not 'epoch offset'"),
        (b"0\n2\n3 0\n2 5\n", "must strictly increase"),
        (b"0\n1\n\xff 0\n", "not ASCII"),
    ],
)
def test_a_corrupt_checkpoint_is_refused_with_its_path(tmp_path: Path, content: bytes, reason: str) -> None:
    path = tmp_path / "leader-epoch-checkpoint"
    path.write_bytes(content)
    with pytest.raises(CorruptFileError, match=reason) as caught:
        read_checkpoint(path)
    assert caught.value.path == path
    assert str(caught.value).startswith(str(path))


def _strictly_increasing(pairs: list[tuple[int, int]]) -> list[EpochEntry]:
    epochs = sorted({epoch for epoch, _ in pairs})
    offsets = sorted({offset for _, offset in pairs})
    return [EpochEntry(epoch, offset) for epoch, offset in zip(epochs, offsets, strict=False)]


entries = st.lists(st.tuples(st.integers(0, 50), st.integers(0, 1000)), max_size=8).map(_strictly_increasing)


@settings(max_examples=200, deadline=None)
@given(entries)
def test_checkpoint_round_trip(values: list[EpochEntry]) -> None:
    assert decode_checkpoint(encode_checkpoint(values), "x") == values


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=60))
def test_checkpoint_garbage_gives_a_clean_error(data: bytes) -> None:
    with contextlib.suppress(CorruptFileError):
        decode_checkpoint(data, "x")
