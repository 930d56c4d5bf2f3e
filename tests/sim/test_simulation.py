"""The simulator, over a bounded set of seeds per scenario (`python -m quorum.sim` runs thousands).

Each run checks the invariants after every event and, once the faults stop, that the quorum
elects a leader and commits a new record on every node.
"""

from __future__ import annotations

import multiprocessing
import os
import signal
import threading
import time

import pytest

from quorum.raft.core import RaftCore
from quorum.raft.leader import LeaderState
from quorum.raft.state import Role
from quorum.sim.__main__ import main
from quorum.sim.cluster import SimulationFailure, run_seed
from quorum.sim.invariants import InvariantChecker, InvariantViolation
from quorum.sim.memory_log import MemoryLog
from quorum.sim.scenarios import SCENARIOS
from tests.raft.harness import batch

SEEDS_PER_SCENARIO = 8  # the suite's bounded sample; `python -m quorum.sim --seeds N` runs thousands


@pytest.mark.parametrize("scenario", list(SCENARIOS))
def test_three_voters_and_an_observer_survive_every_scenario(scenario: str) -> None:
    runs = [run_seed(seed, voters=3, observers=1, scenario=scenario) for seed in range(SEEDS_PER_SCENARIO)]
    assert all(r.committed_offset > 0 for r in runs)
    if SCENARIOS[scenario].faults and scenario not in ("partition",):
        assert sum(r.elections for r in runs) > len(runs)  # the faults did cost leaders
    if "failover" in SCENARIOS[scenario].faults:
        assert all(r.failovers >= 3 for r in runs)  # leaders killed and replaced, each within the deadline
    if SCENARIOS[scenario].snapshot_bytes is not None:
        assert all(r.snapshots_taken > 0 for r in runs)
        assert sum(r.snapshots_installed > 0 for r in runs) > len(runs) // 4  # replicas came back by FetchSnapshot
    if SCENARIOS[scenario].long_outage:
        assert all(r.snapshots_installed > 0 and r.log_start_advances > 0 for r in runs)


@pytest.mark.parametrize(
    ("voters", "observers", "scenario", "seeds"),
    [
        (1, 2, "chaos", 10),
        (2, 1, "chaos", 10),
        (4, 0, "chaos", 8),
        (5, 2, "chaos", 8),
        (5, 1, "leader-failures", 5),
        (5, 0, "failover-loopback", 4),
        (5, 0, "partition", 5),
        (5, 0, "isolate-leader", 5),
    ],
)
def test_quorum_sizes(voters: int, observers: int, scenario: str, seeds: int) -> None:
    for seed in range(100, 100 + seeds):
        run_seed(seed, voters=voters, observers=observers, scenario=scenario)


def test_the_failover_scenario_catches_survivors_that_never_elect(monkeypatch: pytest.MonkeyPatch) -> None:
    # Break the core as it was: a prospective replica forgets the leader it lost touch with, so a
    # refusal naming that leader sends it back to following it, and survivors whose fetch timeouts
    # run out of step take turns at that for ever.
    monkeypatch.setattr(
        RaftCore,
        "leader_id",
        property(
            lambda core: (
                core.node_id
                if core.role is Role.LEADER
                else core._state.leader_id
                if core.role is Role.FOLLOWER
                else -1
            )
        ),
    )
    with pytest.raises(SimulationFailure, match=r"no leader after epoch \d+ committed within \d+ ms"):
        for seed in range(10):
            run_seed(seed, 3, 0, "failover-loopback")


def test_the_graceful_stop_scenario_catches_a_stopping_node_that_campaigns(monkeypatch: pytest.MonkeyPatch) -> None:
    # The core as it was: stopping only resigned, so a resigned leader that heard nothing of its
    # successor within an election timeout campaigned again (issue 37's graceful failover).
    monkeypatch.setattr(RaftCore, "shutdown", RaftCore.resign)
    with pytest.raises(SimulationFailure, match=r"campaigns while stopping"):
        for seed in range(SEEDS_PER_SCENARIO):
            run_seed(seed, 3, 1, "graceful-stop")


def test_a_seed_replays_exactly() -> None:
    first: list[str] = []
    second: list[str] = []
    stats = run_seed(7, 3, 1, "chaos", trace=first.append)
    assert run_seed(7, 3, 1, "chaos", trace=second.append) == stats
    assert first == second and len(first) > 100


def test_a_failing_run_names_its_seed_and_the_command_that_replays_it(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # Break the core: the leader counts records it has not flushed toward the high watermark.
    def count_unflushed(self: LeaderState, flushed_offset: int, now_ms: int) -> None:
        local = self.voters[self.node_id]
        local.end_offset = 10**9
        local.last_fetch_ms = now_ms

    monkeypatch.setattr(LeaderState, "update_local", count_unflushed)
    failure = None
    for seed in range(20):
        try:
            run_seed(seed, 3, 0, "crash")
        except SimulationFailure as caught:
            failure = caught
            break
    assert failure is not None, "the simulator missed a broken high watermark"
    message = str(failure)
    assert f"seed {failure.seed}:" in message
    command = f"python -m quorum.sim --seed {failure.seed} --voters 3 --observers 0 --scenario crash"
    assert message.endswith(f"replay: {command}")
    assert main(command.split()[3:] + ["--quiet"]) == 1
    assert f"seed {failure.seed}" in capsys.readouterr().err


def test_the_command_line_runs_many_seeds_and_prints_a_summary(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--seeds", "3", "--voters", "3", "--observers", "1", "--scenario", "crash"]) == 0
    out = capsys.readouterr().out
    assert "3 voter(s), 1 observer(s), seeds 0..2" in out
    assert "seeds/s" in out and "crash" in out


def test_jobs_spread_the_seeds_over_processes_and_print_the_same_table(capsys: pytest.CaptureFixture[str]) -> None:
    def table(jobs: str) -> list[list[str]]:
        assert main(["--seeds", "6", "--voters", "3", "--observers", "1", "--scenario", "chaos", "--jobs", jobs]) == 0
        header, row = capsys.readouterr().out.splitlines()[-2:]
        timed = header.split().index("seconds")  # it and seeds/s depend on the machine
        return [cells[:timed] + cells[timed + 2 :] for cells in (header.split(), row.split())]

    assert table("2") == table("1")
    with pytest.raises(SystemExit):
        main(["--seeds", "6", "--jobs", "0"])
    assert "--jobs must be at least 1" in capsys.readouterr().err


def test_a_list_of_scenarios_runs_each_and_an_unknown_one_is_named(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--seeds", "1", "--scenario", "calm,resign"]) == 0
    rows = [line.split()[:3] for line in capsys.readouterr().out.splitlines()[-2:]]
    assert rows == [["calm", "1", "0"], ["resign", "1", "0"]]
    with pytest.raises(SystemExit):
        main(["--seeds", "2", "--scenario", "calm,chaoss"])
    assert "unknown scenario(s) ['chaoss']" in capsys.readouterr().err


def test_the_command_line_replays_one_seed_with_its_trace(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--seed", "3", "--voters", "3", "--scenario", "resign"]) == 0
    out = capsys.readouterr().out
    assert "EndQuorumEpochRequest" in out and "ok: resign seed 3" in out


# -- the checker catches what it should ---------------------------------------------------------


class View:
    def __init__(self, node_id: int, log: MemoryLog, epoch: int = 1, role: Role = Role.FOLLOWER, hw: int = 0) -> None:
        self.node_id, self.log, self.epoch, self.role, self.high_watermark = node_id, log, epoch, role, hw
        self.incarnation = 0
        self.meta_cluster_id: str | None = None
        self.alive = True


def logs(*epochs: int) -> MemoryLog:
    log = MemoryLog()
    for offset, epoch in enumerate(epochs):
        log.append(batch(offset, epoch))
    log.flush()
    return log


def test_the_checker_catches_two_leaders_in_one_epoch() -> None:
    checker = InvariantChecker((1, 2, 3))
    checker.check([View(1, logs(), role=Role.LEADER)])
    with pytest.raises(InvariantViolation, match="two leaders in epoch 1"):
        checker.check([View(2, logs(), role=Role.LEADER)])


def test_the_checker_catches_epochs_and_high_watermarks_going_back() -> None:
    checker = InvariantChecker((1, 2, 3))
    checker.check([View(1, logs(1, 1), epoch=3, hw=2), View(2, logs(1, 1), hw=2)])
    with pytest.raises(InvariantViolation, match="back to 2"):
        checker.check([View(1, logs(1, 1), epoch=2)])
    with pytest.raises(InvariantViolation, match="high watermark went back"):
        checker.check([View(2, logs(1, 1), epoch=3, hw=1)])


def test_the_checker_catches_diverging_committed_prefixes_and_lost_majorities() -> None:
    checker = InvariantChecker((1, 2, 3))
    checker.check([View(1, logs(1, 1), hw=2), View(2, logs(1, 1)), View(3, logs())])
    with pytest.raises(InvariantViolation, match="differs from the committed"):
        checker.check([View(3, logs(1, 2), hw=2)])
    lost = InvariantChecker((1, 2, 3))
    with pytest.raises(InvariantViolation, match="not on a majority"):
        lost.check([View(1, logs(1, 1), hw=2), View(2, logs(1)), View(3, logs())])
    unflushed = logs(1)
    unflushed.append(batch(1, 1))
    with pytest.raises(InvariantViolation, match="beyond its durable log end"):
        InvariantChecker((1,)).check([View(1, unflushed, hw=2)])


def test_a_worker_killed_mid_run_ends_the_run_naming_it(capsys: pytest.CaptureFixture[str]) -> None:
    # multiprocessing.Pool replaced a killed worker and waited for ever for the seeds it held.
    status: list[int] = []

    def kill_a_worker() -> None:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and not multiprocessing.active_children():
            time.sleep(0.05)
        time.sleep(1.0)  # the workers have started their seeds
        for child in multiprocessing.active_children()[:1]:
            os.kill(child.pid, signal.SIGKILL)

    killer = threading.Thread(target=kill_a_worker, daemon=True)
    killer.start()
    runner = threading.Thread(
        target=lambda: status.append(main(["--seeds", "400", "--scenario", "failover", "--jobs", "2"])), daemon=True
    )
    runner.start()
    runner.join(240)
    assert status == [1], "the run did not end after one of its workers was killed"
    captured = capsys.readouterr()
    assert "a worker process died while running failover seeds from" in captured.err
    assert "NOT COMPLETE" in captured.out
