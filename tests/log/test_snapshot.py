"""KIP-630 snapshot files: names, write/read round trips, crashes, corruption, FetchSnapshot chunks."""

from __future__ import annotations

import logging
import os
import signal
import stat
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from quorum.log import Log
from quorum.log.errors import (
    CorruptSnapshotError,
    PositionOutOfRangeError,
    SnapshotChunkError,
    SnapshotError,
    SnapshotExistsError,
    SnapshotNotFoundError,
)
from quorum.log.snapshot import (
    SnapshotFetchWriter,
    SnapshotReader,
    SnapshotState,
    SnapshotWriter,
    clean_partial_snapshots,
    delete_snapshots_below,
    latest_snapshot,
    list_snapshots,
    parse_snapshot_name,
    partial_snapshot_path,
    read_snapshot_chunk,
    snapshot_path,
)
from quorum.raft.interface import OffsetAndEpoch
from quorum.wire.control_records import ControlRecordType, decode_control_record
from quorum.wire.records import Compression, Record, build_batch, build_control_batch, iter_batches
from tests.log.helpers import make_batch

ID = OffsetAndEpoch(5120793, 2)
NOW_MS = 1_763_700_000_000
ROOT = Path(__file__).resolve().parents[2]


def write_snapshot(directory: Path, snapshot_id: OffsetAndEpoch = ID, values: list[bytes] | None = None,
                   **options: object) -> Path:  # fmt: skip
    values = [b"value-%d" % i for i in range(20)] if values is None else values
    with SnapshotWriter(directory, snapshot_id, NOW_MS - 5, timestamp_ms=NOW_MS, **options) as writer:
        writer.append(values)
        writer.freeze()
    return writer.path


def writable_copy(path: Path) -> bytearray:
    """The bytes of a (read-only) snapshot, and the file made writable so a test can damage it."""
    os.chmod(path, 0o644)
    return bytearray(path.read_bytes())


# -- names ----------------------------------------------------------------------------------------


def test_names_are_kafkas_20_digit_offset_and_10_digit_epoch(tmp_path: Path) -> None:
    assert snapshot_path(tmp_path, ID).name == "00000000000005120793-0000000002.checkpoint"
    assert partial_snapshot_path(tmp_path, ID).name == "00000000000005120793-0000000002.checkpoint.part"
    cases = {
        "00000000000005120793-0000000002.checkpoint": SnapshotState.COMPLETE,
        "00000000000005120793-0000000002.checkpoint.part": SnapshotState.PARTIAL,
        # Kafka's writers put a random infix in the part name (Files.createTempFile)
        "00000000000005120793-0000000002-8712638716.checkpoint.part": SnapshotState.PARTIAL,
        "00000000000005120793-0000000002.checkpoint.deleted": SnapshotState.DELETED,
    }
    for name, state in cases.items():
        found = parse_snapshot_name(tmp_path / name)
        assert found is not None and (found.snapshot_id, found.state) == (ID, state), name
    for other in ("00000000000000000000.log", "leader-epoch-checkpoint", "quorum-state", "log-start-offset",
                  "5120793-2.checkpoint", "00000000000005120793-2.checkpoint",
                  "00000000000005120793-0000000002.checkpointx", "00000000000005120793-0000000002-x.checkpoint"):
        assert parse_snapshot_name(tmp_path / other) is None, other
    with pytest.raises(ValueError):
        snapshot_path(tmp_path, OffsetAndEpoch(-1, 0))


def test_listing_orders_complete_snapshots_and_skips_everything_else(tmp_path: Path) -> None:
    assert list_snapshots(tmp_path / "missing") == [] and latest_snapshot(tmp_path) is None
    ids = [OffsetAndEpoch(10, 1), OffsetAndEpoch(300, 4), OffsetAndEpoch(120, 2)]
    for snapshot_id in ids:
        write_snapshot(tmp_path, snapshot_id)
    (tmp_path / "00000000000000000900-0000000009.checkpoint.part").write_bytes(b"half")
    (tmp_path / "00000000000000000005-0000000001.checkpoint.deleted").write_bytes(b"old")
    with Log(tmp_path) as log:
        log.append(make_batch(0, 3))  # the log's own files live beside the snapshots
    assert list_snapshots(tmp_path) == sorted(ids, key=lambda i: (i.epoch, i.offset))
    assert latest_snapshot(tmp_path) == OffsetAndEpoch(300, 4)
    assert delete_snapshots_below(tmp_path, 120) == [OffsetAndEpoch(10, 1)]
    assert list_snapshots(tmp_path) == [OffsetAndEpoch(120, 2), OffsetAndEpoch(300, 4)]
    assert delete_snapshots_below(tmp_path, 120) == []


# -- writing and reading ----------------------------------------------------------------------------


def test_layout_is_header_data_footer_numbered_from_zero_in_the_snapshot_epoch(tmp_path: Path) -> None:
    path = write_snapshot(tmp_path, values=[b"x" * 40] * 10, max_batch_bytes=200)
    assert path.name == "00000000000005120793-0000000002.checkpoint"
    assert not stat.S_IMODE(path.stat().st_mode) & 0o222, "a complete snapshot is read-only, as Kafka's"
    batches = list(iter_batches(path.read_bytes()))
    assert sum(b.size_in_bytes for b in batches) == path.stat().st_size
    assert [b.base_offset for b in batches] == [0, 1, 4, 7, 10, 11]
    assert [b.records_count for b in batches] == [1, 3, 3, 3, 1, 1]
    assert {b.partition_leader_epoch for b in batches} == {ID.epoch}
    assert [b.is_control for b in batches] == [True, False, False, False, False, True]
    header_type, header = decode_control_record(batches[0].records()[0].key, batches[0].records()[0].value)
    footer_type, footer = decode_control_record(batches[-1].records()[0].key, batches[-1].records()[0].value)
    assert (header_type, header.content_version, header.last_contained_log_timestamp) == (
        ControlRecordType.SNAPSHOT_HEADER, 0, NOW_MS - 5)
    assert (footer_type, footer.content_version) == (ControlRecordType.SNAPSHOT_FOOTER, 0)
    assert all(r.key is None and r.timestamp == NOW_MS for b in batches[1:-1] for r in b.records())


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    appends=st.lists(st.lists(st.binary(max_size=300), max_size=30), max_size=6),
    max_batch_bytes=st.integers(1, 3000),
    compression=st.sampled_from([Compression.NONE, Compression.GZIP, Compression.LZ4, Compression.ZSTD]),
    offset=st.integers(0, 2**63 - 1),
    epoch=st.integers(0, 2**31 - 1),
    timestamp=st.integers(-1, 2**62),
    chunk=st.integers(1, 5000),
)
def test_write_read_round_trip(appends: list[list[bytes]], max_batch_bytes: int, compression: Compression,
                               offset: int, epoch: int, timestamp: int, chunk: int) -> None:  # fmt: skip
    snapshot_id = OffsetAndEpoch(offset, epoch)
    with tempfile.TemporaryDirectory() as name:
        directory = Path(name)
        with SnapshotWriter(directory, snapshot_id, timestamp, compression=compression,
                            max_batch_bytes=max_batch_bytes) as writer:  # fmt: skip
            for values in appends:
                writer.append(values)
            size = writer.freeze()
        assert list_snapshots(directory) == [snapshot_id]
        assert os.listdir(directory) == [snapshot_path(directory, snapshot_id).name]
        expected = [value for values in appends for value in values]
        with SnapshotReader.open(directory, snapshot_id) as reader:
            assert reader.snapshot_id == snapshot_id
            assert reader.size == size == snapshot_path(directory, snapshot_id).stat().st_size
            assert reader.last_contained_log_timestamp == timestamp
            assert reader.record_count == len(expected)
            assert list(reader) == expected
            assert [r.offset for r in reader.records()] == list(range(1, len(expected) + 1))
            # FetchSnapshot chunks of any size put the file back together
            chunks = [reader.read_chunk(position, chunk) for position in range(0, size, chunk)]
            assert b"".join(chunks) == snapshot_path(directory, snapshot_id).read_bytes()


def test_an_empty_snapshot_is_a_header_and_a_footer(tmp_path: Path) -> None:
    path = write_snapshot(tmp_path, values=[])
    with SnapshotReader(path) as reader:
        assert list(reader) == [] and reader.record_count == 0
        assert [b.base_offset for b in iter_batches(path.read_bytes())] == [0, 1]


def test_a_batch_never_splits_a_value_and_a_big_value_gets_its_own_batch(tmp_path: Path) -> None:
    values = [b"a" * 10, b"b" * 5000, b"c" * 10, b"d" * 10]
    path = write_snapshot(tmp_path, values=values, max_batch_bytes=100)
    counts = [b.records_count for b in iter_batches(path.read_bytes())]
    assert counts == [1, 1, 1, 2, 1]
    with SnapshotReader(path) as reader:
        assert list(reader) == values


def test_writer_refuses_an_existing_snapshot_and_a_second_writer(tmp_path: Path) -> None:
    write_snapshot(tmp_path)
    with pytest.raises(SnapshotExistsError, match="already exists"):
        SnapshotWriter(tmp_path, ID, 0)
    other = OffsetAndEpoch(9, 1)
    with SnapshotWriter(tmp_path, other, 0) as first:
        with pytest.raises(SnapshotExistsError, match="already being written"):
            SnapshotWriter(tmp_path, other, 0)
        first.append([b"v"])
        first.freeze()
        with pytest.raises(SnapshotError, match="frozen"):
            first.append([b"late"])
    assert list_snapshots(tmp_path) == [other, ID]


def test_leaving_the_writer_without_freezing_removes_the_part_file(tmp_path: Path) -> None:
    with pytest.raises(RuntimeError), SnapshotWriter(tmp_path, ID, 0) as writer:
        writer.append([b"v"] * 100)
        assert partial_snapshot_path(tmp_path, ID).exists()
        raise RuntimeError("the state machine failed while writing")
    assert os.listdir(tmp_path) == []
    with SnapshotWriter(tmp_path, ID, 0):
        pass
    assert os.listdir(tmp_path) == []


CRASHING_WRITER = textwrap.dedent("""
    import os, signal, sys
    sys.path.insert(0, sys.argv[2])
    from quorum.log.snapshot import SnapshotWriter
    from quorum.raft.interface import OffsetAndEpoch
    writer = SnapshotWriter(sys.argv[1], OffsetAndEpoch(5120793, 2), 0, max_batch_bytes=1000)
    writer.append([b"x" * 100] * 500)
    os.kill(os.getpid(), signal.SIGKILL)  # dies between two appends, the footer never written
""")


def test_a_crash_while_writing_leaves_a_part_file_that_is_never_listed_and_is_cleaned(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    write_snapshot(tmp_path, OffsetAndEpoch(100, 1))
    child = subprocess.run([sys.executable, "-c", CRASHING_WRITER, str(tmp_path), str(ROOT)],
                           capture_output=True, text=True, timeout=60)  # fmt: skip
    assert child.returncode == -signal.SIGKILL, child.stderr
    partial = partial_snapshot_path(tmp_path, ID)
    assert partial.stat().st_size > 40_000
    assert list_snapshots(tmp_path) == [OffsetAndEpoch(100, 1)]
    assert latest_snapshot(tmp_path) == OffsetAndEpoch(100, 1)
    with pytest.raises(SnapshotExistsError, match="clean_partial_snapshots"):
        SnapshotWriter(tmp_path, ID, 0)
    with caplog.at_level(logging.WARNING, logger="quorum.log"):
        assert clean_partial_snapshots(tmp_path) == [partial]
    assert f"{partial}: unfinished snapshot left from before a restart, deleted" in caplog.text
    assert sorted(os.listdir(tmp_path)) == ["00000000000000000100-0000000001.checkpoint"]
    write_snapshot(tmp_path)  # the id can be written again
    assert list_snapshots(tmp_path) == [OffsetAndEpoch(100, 1), ID]


# -- corruption -------------------------------------------------------------------------------------


def batch_starts(data: bytes) -> list[int]:
    return [batch.position for batch in iter_batches(data)]


def test_a_corrupt_byte_is_refused_with_the_path_and_the_batch_position(tmp_path: Path) -> None:
    path = write_snapshot(tmp_path, values=[b"v" * 50] * 30, max_batch_bytes=400)
    original = writable_copy(path)
    starts = batch_starts(bytes(original))
    for batch_number in (0, 2, len(starts) - 1):  # header, data, footer
        damaged = bytearray(original)
        damaged[starts[batch_number] + 70] ^= 0x10  # inside the records, covered by the CRC
        path.write_bytes(damaged)
        with pytest.raises(CorruptSnapshotError) as caught:
            SnapshotReader(path)
        assert caught.value.path == path and caught.value.position == starts[batch_number]
        assert str(caught.value).startswith(f"{path} at byte {starts[batch_number]}: CRC mismatch")


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.data())
def test_any_damaged_byte_is_refused_or_lies_where_snapshots_carry_no_meaning(tmp_path: Path,
                                                                              data: st.DataObject) -> None:
    path = tmp_path / "00000000000000000100-0000000001.checkpoint"
    if not path.exists():
        path = write_snapshot(tmp_path, OffsetAndEpoch(100, 1), values=[b"w" * 30] * 12, max_batch_bytes=150,
                              compression=Compression.GZIP)  # fmt: skip
        os.chmod(path, 0o644)
        (tmp_path / "original").write_bytes(path.read_bytes())
    original = (tmp_path / "original").read_bytes()
    position = data.draw(st.integers(0, len(original) - 1))
    damaged = bytearray(original)
    damaged[position] ^= data.draw(st.integers(1, 255))
    path.write_bytes(damaged)
    try:
        with SnapshotReader(path) as reader:
            values = list(reader)
    except CorruptSnapshotError as exc:
        assert exc.path == path and exc.position is not None and 0 <= exc.position <= len(original)
        return
    # Only baseOffset and partitionLeaderEpoch lie outside the CRC, and KIP-630 gives them no
    # meaning in a snapshot: flipping them changes nothing that is read.
    start = max(s for s in batch_starts(original) if s <= position)
    assert position - start in (*range(0, 8), *range(12, 16))
    assert values == [b"w" * 30] * 12


def snapshot_of(batches: list[bytes], tmp_path: Path) -> Path:
    path = snapshot_path(tmp_path, ID)
    path.write_bytes(b"".join(batches))
    return path


def test_structure_faults_are_refused(tmp_path: Path) -> None:
    path = write_snapshot(tmp_path, values=[b"v"] * 5)
    good = writable_copy(path)
    header, data, footer = [bytes(b.raw) for b in iter_batches(bytes(good))]
    leader_change = build_control_batch(b"\x00\x00\x00\x02", b"\x00" * 12, 0, 2, NOW_MS)
    unknown_control = build_control_batch(b"\x00\x00\x00\x63", b"", 0, 2, NOW_MS)
    cases = {
        "empty file": ([], 0),
        "the first batch is not a SnapshotHeaderRecord control batch": ([data, footer], 0),
        "ends without a SnapshotFooterRecord": ([header, data], len(header) + len(data)),
        "a batch after the footer": ([header, data, footer, data], len(header) + len(data) + len(footer)),
        "a second SnapshotHeaderRecord": ([header, header, footer], len(header)),
        "control record does not decode: unknown control record type 99": ([header, unknown_control, footer],
                                                                            len(header)),
        "the first batch holds LEADER_CHANGE": ([leader_change, footer], 0),
        "trailing byte(s), too few for a batch": ([header, data, footer, b"\x00" * 5], len(good)),
        "by its length field, but": ([header, data, footer[:-1]], len(header) + len(data)),
        "the first batch holds SNAPSHOT_FOOTER": ([footer, data, footer], 0),
    }
    for reason, (batches, position) in cases.items():
        snapshot_of(batches, tmp_path)
        with pytest.raises(CorruptSnapshotError, match=reason.replace("(", r"\(").replace(")", r"\)")) as caught:
            SnapshotReader(path)
        assert caught.value.position == position, reason
    # the footer's batch may carry other KRaft control records after the header (Kafka 3.9+)
    with_voters = build_batch([Record(0, NOW_MS, *decode_first(header)), Record(1, NOW_MS, b"\x00\x00\x00\x06", b"?")],
                              partition_leader_epoch=2, is_control=True)  # fmt: skip
    snapshot_of([with_voters, data, footer], tmp_path)
    with SnapshotReader(path) as reader:
        assert list(reader) == [b"v"] * 5


def decode_first(batch: bytes) -> tuple[bytes | None, bytes | None]:
    record = next(iter_batches(batch)).records()[0]
    return record.key, record.value


def test_a_missing_snapshot_is_not_found(tmp_path: Path) -> None:
    with pytest.raises(SnapshotNotFoundError):
        SnapshotReader.open(tmp_path, ID)
    with pytest.raises(SnapshotNotFoundError):
        read_snapshot_chunk(tmp_path, ID, 0, 100)
    with pytest.raises(SnapshotNotFoundError, match="not a valid snapshot id"):
        read_snapshot_chunk(tmp_path, OffsetAndEpoch(-1, -1), 0, 100)  # what a request may carry
    with pytest.raises(ValueError, match="not a complete snapshot"):
        SnapshotReader(partial_snapshot_path(tmp_path, ID))


# -- FetchSnapshot ----------------------------------------------------------------------------------


def test_chunk_reads_follow_fetch_snapshot_position_and_max_bytes(tmp_path: Path) -> None:
    path = write_snapshot(tmp_path)
    data = path.read_bytes()
    size = len(data)
    assert read_snapshot_chunk(tmp_path, ID, 0, 10) == (data[:10], size)
    assert read_snapshot_chunk(tmp_path, ID, 7, 1 << 20) == (data[7:], size)
    assert read_snapshot_chunk(tmp_path, ID, size - 1, 10) == (data[-1:], size)
    assert read_snapshot_chunk(tmp_path, ID, 3, 0) == (b"", size)
    # Kafka refuses position >= size (KIP-630 says "greater than the size"; the end has no bytes)
    for position in (size, size + 1, -1):
        with pytest.raises(PositionOutOfRangeError) as caught:
            read_snapshot_chunk(tmp_path, ID, position, 10)
        assert (caught.value.position, caught.value.size, caught.value.path) == (position, size, path)
    with SnapshotReader(path) as reader:
        assert reader.read_chunk(5, 20) == data[5:25]
        with pytest.raises(PositionOutOfRangeError, match=f"position {size} is outside the snapshot's {size} bytes"):
            reader.read_chunk(size, 1)


def fetch(leader: Path, follower: Path, snapshot_id: OffsetAndEpoch, max_bytes: int) -> list[int]:
    """A follower's fetch loop; returns the Position of each request."""
    positions = []
    with SnapshotFetchWriter(follower, snapshot_id) as writer:
        done = False
        while not done:
            positions.append(writer.position)
            data, size = read_snapshot_chunk(leader, snapshot_id, writer.position, max_bytes)
            assert list_snapshots(follower) == []  # nothing is a snapshot before the last byte
            done = writer.append_chunk(writer.position, data, size)
        assert writer.complete and writer.size == size
    return positions


def test_a_snapshot_fetched_in_chunks_is_renamed_when_complete(tmp_path: Path) -> None:
    leader, follower = tmp_path / "leader", tmp_path / "follower"
    path = write_snapshot(leader, values=[b"%05d" % i for i in range(1000)], max_batch_bytes=1000)
    size = path.stat().st_size
    positions = fetch(leader, follower, ID, 4096)
    assert positions == list(range(0, size, 4096))
    assert os.listdir(follower) == [path.name]
    fetched = follower / path.name
    assert fetched.read_bytes() == path.read_bytes()
    assert not stat.S_IMODE(fetched.stat().st_mode) & 0o222
    with SnapshotReader(fetched) as reader:
        assert list(reader) == [b"%05d" % i for i in range(1000)]
    with pytest.raises(SnapshotExistsError):
        SnapshotFetchWriter(follower, ID)


def test_chunks_must_continue_the_file(tmp_path: Path) -> None:
    path = write_snapshot(tmp_path / "leader")
    data = path.read_bytes()
    size = len(data)
    with SnapshotFetchWriter(tmp_path, ID) as writer:
        assert not writer.append_chunk(0, data[:100], size)
        for position, chunk, total, reason in [
            (50, data[50:60], size, "chunk at position 50, but 100 bytes were received"),
            (200, data[200:210], size, "the next chunk must start at 100"),
            (100, data[100:110], size + 1, f"now reports {size + 1} bytes, earlier {size}"),
            (100, data[100:] + b"x", size, "runs past the size"),
        ]:
            with pytest.raises(SnapshotChunkError, match=reason):
                writer.append_chunk(position, chunk, total)
        assert writer.position == 100 and partial_snapshot_path(tmp_path, ID).stat().st_size == 100
        assert not writer.append_chunk(100, b"", size)  # an empty chunk is no progress
        assert writer.append_chunk(100, data[100:], size)
    assert snapshot_path(tmp_path, ID).read_bytes() == data
    other = OffsetAndEpoch(ID.offset, 3)
    with pytest.raises(SnapshotChunkError, match="snapshot of 0 bytes"), SnapshotFetchWriter(tmp_path, other) as fetch:
        fetch.append_chunk(0, b"", 0)
    assert list_snapshots(tmp_path) == [ID]


def test_a_corrupt_fetched_snapshot_is_refused_deleted_and_never_listed(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = write_snapshot(tmp_path / "leader", values=[b"v" * 100] * 50, max_batch_bytes=1000)
    data = bytearray(path.read_bytes())
    starts = batch_starts(bytes(data))
    data[starts[3] + 100] ^= 0x01  # damaged in transit
    partial = partial_snapshot_path(tmp_path, ID)
    with SnapshotFetchWriter(tmp_path, ID) as writer:
        assert not writer.append_chunk(0, data[:1000], len(data))
        with caplog.at_level(logging.ERROR, logger="quorum.log"), pytest.raises(CorruptSnapshotError) as caught:
            writer.append_chunk(1000, data[1000:], len(data))
        assert not writer.complete
    assert caught.value.path == partial and caught.value.position == starts[3]
    assert "CRC mismatch" in caplog.text and "was deleted" in caplog.text
    assert os.listdir(tmp_path) == ["leader"] and list_snapshots(tmp_path) == []
    fetch(tmp_path / "leader", tmp_path, ID, 1 << 20)  # the follower may fetch it again
    assert list_snapshots(tmp_path) == [ID]


def test_aborting_a_fetch_removes_its_part_file(tmp_path: Path) -> None:
    writer = SnapshotFetchWriter(tmp_path, ID)
    writer.append_chunk(0, b"\x00" * 10, 100)
    writer.abort()
    writer.abort()
    assert os.listdir(tmp_path) == []
    with pytest.raises(SnapshotError, match="aborted"):
        writer.append_chunk(10, b"\x00", 100)
