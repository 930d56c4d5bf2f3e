"""SnapshotDirectory: the complete snapshots as the Raft core reads them (SnapshotStore), cached until refresh."""

from __future__ import annotations

from pathlib import Path

import pytest

from quorum.log import SnapshotDirectory
from quorum.log.errors import PositionOutOfRangeError, SnapshotNotFoundError
from quorum.log.snapshot import SnapshotFetchWriter, SnapshotWriter, partial_snapshot_path, snapshot_path
from quorum.raft.interface import OffsetAndEpoch, SnapshotStore

NOW_MS = 1_763_700_000_000


def write_snapshot(directory: Path, snapshot_id: OffsetAndEpoch, count: int = 10) -> Path:
    with SnapshotWriter(directory, snapshot_id, NOW_MS, timestamp_ms=NOW_MS) as writer:
        writer.append(b"value-%d" % i for i in range(count))
        writer.freeze()
    return writer.path


def test_an_empty_or_missing_directory_has_no_snapshots(tmp_path: Path) -> None:
    store = SnapshotDirectory(tmp_path / "absent")
    assert store.earliest_snapshot() is None and store.latest_snapshot() is None
    assert store.snapshot_size(OffsetAndEpoch(5, 1)) is None
    assert len(store) == 0 and store.snapshots == ()
    with pytest.raises(SnapshotNotFoundError):
        store.read_snapshot(OffsetAndEpoch(5, 1), 0, 100)


def test_it_is_a_snapshot_store(tmp_path: Path) -> None:
    store: SnapshotStore = SnapshotDirectory(tmp_path)  # the protocol the core reads through
    assert store.latest_snapshot() is None


def test_lists_complete_snapshots_oldest_first_with_their_sizes(tmp_path: Path) -> None:
    ids = [OffsetAndEpoch(100, 3), OffsetAndEpoch(10, 1), OffsetAndEpoch(50, 2)]
    paths = {snapshot_id: write_snapshot(tmp_path, snapshot_id, count=5 + snapshot_id.offset // 10)
             for snapshot_id in ids}
    store = SnapshotDirectory(tmp_path)
    assert store.snapshots == (OffsetAndEpoch(10, 1), OffsetAndEpoch(50, 2), OffsetAndEpoch(100, 3))
    assert store.earliest_snapshot() == OffsetAndEpoch(10, 1)
    assert store.latest_snapshot() == OffsetAndEpoch(100, 3)
    for snapshot_id, path in paths.items():
        assert store.snapshot_size(snapshot_id) == path.stat().st_size
        assert snapshot_id in store and store.path(snapshot_id) == path
    assert store.snapshot_size(OffsetAndEpoch(100, 2)) is None


def test_the_listing_is_cached_until_refresh(tmp_path: Path) -> None:
    store = SnapshotDirectory(tmp_path)
    write_snapshot(tmp_path, OffsetAndEpoch(20, 1))
    assert store.latest_snapshot() is None, "no directory listing per call"
    with pytest.raises(SnapshotNotFoundError):
        store.read_snapshot(OffsetAndEpoch(20, 1), 0, 10)
    store.refresh()
    assert store.latest_snapshot() == OffsetAndEpoch(20, 1)


def test_partial_files_are_never_listed(tmp_path: Path) -> None:
    write_snapshot(tmp_path, OffsetAndEpoch(10, 1))
    fetch = SnapshotFetchWriter(tmp_path, OffsetAndEpoch(30, 2))
    fetch.append_chunk(0, b"\0" * 10, 100)
    store = SnapshotDirectory(tmp_path)
    assert store.snapshots == (OffsetAndEpoch(10, 1),)
    assert store.snapshot_size(OffsetAndEpoch(30, 2)) is None
    fetch.abort()


def test_read_snapshot_serves_chunks_and_refuses_as_fetch_snapshot_does(tmp_path: Path) -> None:
    snapshot_id = OffsetAndEpoch(20, 1)
    data = write_snapshot(tmp_path, snapshot_id).read_bytes()
    store = SnapshotDirectory(tmp_path)
    assert store.read_snapshot(snapshot_id, 0, 10) == data[:10]
    assert store.read_snapshot(snapshot_id, 10, 1 << 20) == data[10:]
    assert store.read_snapshot(snapshot_id, len(data) - 1, 5) == data[-1:]
    with pytest.raises(PositionOutOfRangeError):
        store.read_snapshot(snapshot_id, len(data), 5)
    with pytest.raises(PositionOutOfRangeError):
        store.read_snapshot(snapshot_id, -1, 5)
    with pytest.raises(SnapshotNotFoundError):
        store.read_snapshot(OffsetAndEpoch(20, 2), 0, 5)
    with pytest.raises(SnapshotNotFoundError):
        store.read_snapshot(OffsetAndEpoch(-1, -1), 0, 5)  # an id from a bad request


def test_a_snapshot_deleted_behind_its_back_is_not_found(tmp_path: Path) -> None:
    snapshot_id = OffsetAndEpoch(20, 1)
    path = write_snapshot(tmp_path, snapshot_id)
    store = SnapshotDirectory(tmp_path)
    path.chmod(0o644)
    path.unlink()
    with pytest.raises(SnapshotNotFoundError):
        store.read_snapshot(snapshot_id, 0, 5)
    store.refresh()
    assert store.latest_snapshot() is None


def test_delete_below_deletes_and_refreshes(tmp_path: Path) -> None:
    for snapshot_id in (OffsetAndEpoch(10, 1), OffsetAndEpoch(20, 1), OffsetAndEpoch(30, 2)):
        write_snapshot(tmp_path, snapshot_id)
    store = SnapshotDirectory(tmp_path)
    assert store.delete_below(30) == [OffsetAndEpoch(10, 1), OffsetAndEpoch(20, 1)]
    assert store.snapshots == (OffsetAndEpoch(30, 2),)
    assert store.earliest_snapshot() == store.latest_snapshot() == OffsetAndEpoch(30, 2)
    assert not snapshot_path(tmp_path, OffsetAndEpoch(10, 1)).exists()
    assert store.delete_below(30) == []


def test_clean_partial_removes_crash_leftovers_only(tmp_path: Path) -> None:
    write_snapshot(tmp_path, OffsetAndEpoch(10, 1))
    left = partial_snapshot_path(tmp_path, OffsetAndEpoch(40, 2))
    left.write_bytes(b"half a snapshot")
    store = SnapshotDirectory(tmp_path)
    assert store.clean_partial() == [left]
    assert not left.exists()
    assert store.snapshots == (OffsetAndEpoch(10, 1),)
