"""KIP-630 snapshots in the simulator: real snapshot files under every node, replayed metadata
state checked against a reference, replicas that come back by FetchSnapshot, kill -9 in the
middle of fetching and of writing a snapshot, and snapshot data damaged in flight."""

from __future__ import annotations

import functools
import re

import pytest

from quorum.image.records_state import MetadataRecordsState
from quorum.log.snapshot import SnapshotDirectory
from quorum.raft.core import RaftCore
from quorum.raft.interface import InstallSnapshot, OffsetAndEpoch
from quorum.raft.state import Role
from quorum.sim.cluster import SimulationFailure, run_seed
from quorum.sim.invariants import InvariantChecker, InvariantViolation
from quorum.sim.memory_log import MemoryLog
from quorum.sim.scenarios import SCENARIOS
from tests.raft.harness import batch


def traced(seed: int, scenario: str, voters: int = 3, observers: int = 1) -> tuple[list[str], object]:
    lines: list[str] = []
    stats = run_seed(seed, voters, observers, scenario, trace=lines.append)
    return lines, stats


@functools.cache
def crash_run(seed: int) -> tuple[tuple[str, ...], object]:
    """One traced "snapshot-crash" run of `seed`, shared by the tests that read it (a seed replays
    exactly: test_a_snapshot_seed_replays_exactly runs one twice, uncached)."""
    lines, stats = traced(seed, "snapshot-crash")
    return tuple(lines), stats


def test_a_replica_down_while_the_log_start_passed_it_comes_back_by_fetch_snapshot() -> None:
    for seed in range(8):
        lines, stats = traced(seed, "snapshot")
        [outage] = [line for line in lines if "long outage of" in line]
        victims = [int(v) for v in re.findall(r"\d+", outage.split("long outage of")[1])]
        assert len(victims) == 2  # a voter and the observer
        after = lines[lines.index(outage) :]
        for victim in victims:
            # Told by the leader to fetch a snapshot, it did, and loaded it.
            assert any(
                re.search(rf" n{victim} <- \d+ FetchResponse\(.*snapshot_id=OffsetAndEpoch", line) for line in after
            ), (seed, victim)
            assert any(f" n{victim}   -> InstallSnapshot(" in line for line in after), (seed, victim)
        assert stats.snapshots_taken > 0 and stats.log_start_advances > 0 and stats.snapshots_installed >= 2


def test_kill_9_while_fetching_or_writing_a_snapshot_leaves_a_part_that_start_up_removes() -> None:
    fetch_crashes = write_crashes = 0
    for seed in range(10):
        lines, stats = crash_run(seed)
        # Every node killed with a .part open removed it at its next start and loaded a complete
        # snapshot or none (the simulator fails the run otherwise).
        assert stats.partial_snapshots_cleaned >= stats.fetch_crashes + stats.write_crashes
        for line in lines:
            killed = re.search(r"killing node (\d+) in the middle of", line)
            if killed:
                node = killed.group(1)
                rest = lines[lines.index(line) :]
                start = next(i for i, later in enumerate(rest) if f" n{node} start, incarnation" in later)
                assert f" n{node} start-up removed unfinished snapshot(s)" in rest[start - 1], rest[start - 1]
        fetch_crashes += stats.fetch_crashes
        write_crashes += stats.write_crashes
    assert fetch_crashes > 0 and write_crashes > 0


def test_a_snapshot_damaged_in_flight_is_refused_with_its_path_and_byte_and_fetched_again() -> None:
    refused = 0
    for seed in range(10):
        lines, stats = crash_run(seed)
        refused += stats.corrupt_snapshots_refused
        for index, line in enumerate(lines):
            found = re.search(
                r" n(\d+) snapshot fetched (OffsetAndEpoch\(.*?\)) refused: <sim>/n\1/\d{20}-\d{10}"
                r"\.checkpoint\.part at byte \d+: ",
                line,
            )
            if found is None:
                continue
            node, snapshot = found.groups()
            # Never installed from the damaged file: an install of that id comes after a clean fetch.
            rest = lines[index + 1 :]
            install = f" n{node}   -> InstallSnapshot(snapshot_id={snapshot})"
            installs = [i for i, later in enumerate(rest) if later.endswith(install)]
            if installs:
                assert any(later.endswith(f" n{node} snapshot fetched {snapshot}") for later in rest[: installs[0]])
    assert refused > 0


def test_a_snapshot_seed_replays_exactly() -> None:
    first, stats = traced(0, "snapshot-crash")
    second, again = traced(0, "snapshot-crash")
    assert stats == again and first == second
    assert stats.corrupt_snapshots_refused > 0 and any("<sim>/n" in line for line in first)


# -- the checks catch what they should --------------------------------------------------------------


def test_start_up_that_keeps_a_part_file_is_caught(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(SnapshotDirectory, "clean_partial", lambda self: [])
    with pytest.raises(
        SimulationFailure,
        match=r"start-up left unfinished snapshot files \['\d{20}-\d{10}"
        r"\.checkpoint\.part'\]",
    ):
        for seed in range(10):
            run_seed(seed, 3, 0, "snapshot-crash")


def test_a_snapshot_that_misses_a_record_is_caught(monkeypatch: pytest.MonkeyPatch) -> None:
    # Break the state machine: its snapshots lose their last record. Loading one then replaying the
    # log no longer gives what replaying the whole log gives.
    values = MetadataRecordsState.snapshot_values
    monkeypatch.setattr(MetadataRecordsState, "snapshot_values", lambda self: values(self)[:-1])
    with pytest.raises(SimulationFailure, match="differs from the state that replaying the committed log"):
        run_seed(0, 3, 1, "snapshot")


def test_a_leader_that_loads_a_snapshot_is_caught(monkeypatch: pytest.MonkeyPatch) -> None:
    created = RaftCore.on_snapshot_created

    def leader_loads_it(self: RaftCore, snapshot_id: OffsetAndEpoch, now_ms: int) -> list:
        actions = created(self, snapshot_id, now_ms)
        return actions + [InstallSnapshot(snapshot_id)] if self.role is Role.LEADER else actions

    monkeypatch.setattr(RaftCore, "on_snapshot_created", leader_loads_it)
    with pytest.raises(SimulationFailure, match="a leader never loads a fetched snapshot"):
        run_seed(0, 3, 0, "snapshot")


class View:
    def __init__(self, node_id: int, log: MemoryLog, hw: int, snapshots: tuple[OffsetAndEpoch, ...]) -> None:
        self.node_id, self.log, self.high_watermark = node_id, log, hw
        self.epoch, self.role, self.incarnation, self.meta_cluster_id, self.alive = 1, Role.FOLLOWER, 0, None, True
        self.snapshots = type("Listing", (), {"snapshots": snapshots})()


def started_at(start: int, end: int) -> MemoryLog:
    log = MemoryLog()
    for offset in range(end):
        log.append(batch(offset, 1))
    log.flush()
    log.advance_start_offset(start)
    return log


def test_the_checker_wants_a_snapshot_at_every_non_zero_log_start() -> None:
    checker = InvariantChecker((1,))
    checker.check([View(1, started_at(0, 6), 6, ())])
    checker.check([View(1, started_at(3, 6), 6, (OffsetAndEpoch(3, 1), OffsetAndEpoch(5, 1)))])
    with pytest.raises(InvariantViolation, match="its log starts at 3 .high watermark 6., but no snapshot ends there"):
        checker.check([View(1, started_at(3, 6), 6, (OffsetAndEpoch(5, 1),))])
    with pytest.raises(InvariantViolation, match="its log starts at 3 .high watermark 6., but no snapshot ends there"):
        checker.check([View(1, started_at(3, 6), 6, ())])
    with pytest.raises(InvariantViolation, match=r"still holds snapshots ending below it: \[\(2, 1\)\]"):
        checker.check([View(1, started_at(3, 6), 6, (OffsetAndEpoch(2, 1), OffsetAndEpoch(3, 1)))])


def test_the_checker_wants_every_replica_to_apply_the_same_committed_values() -> None:
    checker = InvariantChecker((1, 2), check_states=True)
    checker.record_applied(1, 0, b"a")
    checker.record_applied(1, 2, b"b")
    checker.record_applied(2, 0, b"a")
    with pytest.raises(InvariantViolation, match="differs from the one applied there before"):
        checker.record_applied(2, 2, b"c")
    with pytest.raises(InvariantViolation, match="where no committed record was applied before"):
        checker.record_applied(2, 1, b"x")
    reference = MetadataRecordsState()
    assert checker.reference_digest(0) == reference.digest()  # the state holds the records below the offset
    reference.apply(0, b"a")
    assert checker.reference_digest(1) == checker.reference_digest(2) == reference.digest()
    reference.apply(2, b"b")
    assert checker.reference_digest(3) == reference.digest()


def test_every_snapshot_scenario_is_listed() -> None:
    assert {"snapshot", "snapshot-crash"} <= set(SCENARIOS)
    assert SCENARIOS["chaos"].snapshot_bytes is not None
