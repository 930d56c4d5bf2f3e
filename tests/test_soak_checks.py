"""The soak's end checks (benchmarks/soak_checks.py) catch what they are there for, on made-up inputs:
the soak itself runs for minutes on real processes (`python -m benchmarks.soak`), so its judges are
tested here, fast, each against the failure it must report."""

from __future__ import annotations

from pathlib import Path

from benchmarks import soak_checks as checks
from quorum.wire.records import Record, build_batch


def test_acked_records_lost_moved_and_duplicated_are_counted() -> None:
    acked = checks.Acked(records={b"a-1": (0, 0), b"a-2": (0, 1), b"a-3": (1, 0), b"a-4": (1, 5)})
    topic = {0: [(0, b"a-1", {}), (1, b"a-9", {}), (2, b"a-9", {})],  # a-2 lost, a-9 twice
             1: [(0, b"a-3", {}), (1, b"a-4", {})]}  # a-4 at 1, acknowledged at 5
    check = checks.check_acked(acked, topic)
    assert (check.checked, check.lost, check.moved, check.duplicated) == (4, 1, 1, 1)
    assert "a-9 is in the topic 2 times" in check.examples
    clean = checks.check_acked(checks.Acked(records={b"a-1": (0, 0)}), {0: [(0, b"a-1", {})]})
    assert (clean.lost, clean.moved, clean.duplicated) == (0, 0, 0)


def test_a_record_acknowledged_without_an_offset_counts_as_kept_in_its_partition_only(tmp_path: Path) -> None:
    """librdkafka acknowledges a retried batch whose answer was lost once a later batch of the same
    idempotent producer succeeds ("implicitly acked"), without an offset: confluent-kafka says None.
    The fault-injecting soak met one and stopped on the line instead of checking it."""
    events = _events(tmp_path, "producer-confluent.events",
                     ["a 0 None p-1", "a 0 7 p-2", "a 1 None p-3", "a 0 None p-4", "f p-5 timed out"])
    acked = checks.read_acks({"confluent": events})
    assert acked.records[b"p-1"] == (0, checks.UNKNOWN_OFFSET) and acked.failed == 1
    topic = {0: [(3, b"p-1", {}), (7, b"p-2", {}), (8, b"p-3", {})], 1: []}
    check = checks.check_acked(acked, topic)
    assert (check.checked, check.lost, check.moved) == (4, 1, 1)  # p-4 nowhere; p-3 in another partition
    assert any("p-3" in example for example in check.examples)


def _events(tmp_path: Path, name: str, lines: list[str]) -> Path:
    path = tmp_path / name
    path.write_text("\n".join(lines) + "\n")
    return path


def test_a_member_handed_records_below_the_groups_commit_is_a_rewind(tmp_path: Path) -> None:
    first = _events(tmp_path, "m0", ["assign 1.0 0", "b 2.0 0 0 99 100", "c 2.1 0 90", "revoke 3.0 0"])
    fine = _events(tmp_path, "m1", ["assign 4.0 0", "b 5.0 0 90 149 60", "c 5.1 0 150"])  # from the commit
    check = checks.consumer_rewinds([first, fine])
    assert (check.rewinds, check.redelivered, check.records) == (0, 10, 160)
    first = _events(tmp_path, "m0", ["assign 1.0 0", "b 2.0 0 0 99 100", "c 2.1 0 100", "revoke 3.0 0"])
    rewound = _events(tmp_path, "m2", ["assign 4.0 0", "b 5.0 0 0 149 150"])  # back to the log start
    check = checks.consumer_rewinds([first, rewound])
    assert check.rewinds == 1 and "below 100" in check.examples[0]
    skipped = _events(tmp_path, "m3", ["assign 1.0 0", "b 2.0 0 0 9 10", "b 3.0 0 20 29 10"])
    assert checks.consumer_rewinds([skipped]).skips == 1


def test_committed_offsets_going_back_are_counted() -> None:
    assert checks.committed_rewinds([{0: -1, 1: 5}, {0: 3, 1: 5}, {0: 4, 1: 6}]) == 0
    assert checks.committed_rewinds([{0: 3}, {0: 0}, {0: 4}]) == 1


def test_the_replicator_going_back_in_a_source_partition_is_a_rewind() -> None:
    def copy(offset: int) -> tuple[int, bytes, dict[str, bytes]]:
        return offset, f"v-{offset}".encode(), {checks.PROVENANCE_HEADER: f"t/0/{offset}".encode()}

    acked = checks.Acked(records={f"v-{n}".encode(): (0, n) for n in range(3)})
    assert checks.replicator_check("t", acked, {0: [copy(0), copy(1), copy(2)]}).rewinds == 0
    check = checks.replicator_check("t", acked, {0: [copy(0), copy(1), copy(0), copy(2)]})
    assert (check.rewinds, check.duplicated, check.missing) == (1, 1, 0)


def test_replicas_whose_batches_differ_below_the_high_watermark_are_named(tmp_path: Path) -> None:
    def replica(name: str, values: list[bytes], epoch: int = 0) -> Path:
        directory = tmp_path / name
        directory.mkdir()
        data = b"".join(build_batch([Record(offset=n, timestamp=1000, value=v)], base_offset=n,
                                    partition_leader_epoch=epoch)
                        for n, v in enumerate(values))
        (directory / "00000000000000000000.log").write_bytes(data)
        return directory

    same = {0: {101: replica("a", [b"x", b"y", b"z"]), 102: replica("b", [b"x", b"y"])}}
    check = checks.compare_replicas(same, [2])  # 101's third batch is above the high watermark
    assert check.mismatches == [] and check.batches == 2
    other = {0: {101: replica("c", [b"x", b"y"]), 102: replica("d", [b"x", b"Y"])}}
    assert any("broker 102 differs from broker 101 from batch 1" in m
               for m in checks.compare_replicas(other, [2]).mismatches)
    short = {0: {101: replica("e", [b"x", b"y"]), 102: replica("f", [b"x"])}}
    assert any("does not end a batch at the high watermark 2" in m
               for m in checks.compare_replicas(short, [2]).mismatches)


def test_tracebacks_in_node_logs_are_listed(tmp_path: Path) -> None:
    log = tmp_path / "node.log"
    log.write_text("INFO fine\nERROR closing connection after an unexpected error\nTraceback (most recent call last):\n"
                   "  File \"x.py\", line 1, in f\n    g()\nAttributeError: 'FileRecords' object has no attribute "
                   "'seek'\nINFO after\n")
    (found,) = checks.unexpected_errors({101: log, 102: tmp_path / "missing.log"})
    assert found.startswith("node 101: ERROR closing connection") and "AttributeError" in found


def test_a_record_written_again_under_a_bumped_producer_epoch_is_named_so(tmp_path: Path) -> None:
    def batch(offset: int, value: bytes, producer_id: int, epoch: int, sequence: int) -> bytes:
        return build_batch([Record(offset=offset, timestamp=1000, value=value)], base_offset=offset,
                           producer_id=producer_id, producer_epoch=epoch, base_sequence=sequence)

    directory = tmp_path / "soak-1"
    directory.mkdir()
    (directory / "00000000000000000000.log").write_bytes(
        batch(0, b"c-418", 7, 0, 139) + batch(1, b"c-419", 7, 0, 140) + batch(2, b"k-5", 8, 0, 5)
        + batch(3, b"k-5", 8, 0, 9) + batch(4, b"c-418", 7, 1, 0) + batch(5, b"c-420", 7, 1, 1))
    copies = checks.copies_of({b"c-418", b"k-5"}, {1: directory}, [0, 5])
    assert [str(c) for c in copies[b"c-418"]] == ["1/0 (producer 7 epoch 0 sequence 139)",
                                                  "1/4 (producer 7 epoch 1 sequence 0)"]
    assert checks.written_again_under_a_new_epoch(copies[b"c-418"])
    assert not checks.written_again_under_a_new_epoch(copies[b"k-5"])  # one epoch: not the bump's window
