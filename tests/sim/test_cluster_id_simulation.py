"""The cluster id in the simulator: the chaos seeds that once committed two ids or stopped voters
on INVALID_CLUSTER_ID, and the invariant that names the first event where ids diverge."""

from __future__ import annotations

import pytest

from quorum.raft.control import build_leader_change_batch
from quorum.raft.core import RaftCore
from quorum.raft.interface import ClusterIdCommitted, HighWatermarkAdvanced, OffsetAndEpoch
from quorum.raft.state import Role
from quorum.sim.cluster import SimulationFailure, run_seed
from quorum.sim.invariants import InvariantChecker, InvariantViolation
from quorum.sim.memory_log import MemoryLog
from tests.raft.harness import batch

ID = "MkU3OEVBNTcwNTJENDM2Qk"
OTHER = "AAAAAAAAAAAAAAAAAAAAAA"


@pytest.mark.parametrize("seed", [1520, 1765, 1929, 3284, 3839])
def test_the_chaos_seeds_that_broke_the_cluster_id_pass(seed: int) -> None:
    # 1520, 1765, 1929, 3839: a voter stopped on INCONSISTENT_CLUSTER_ID from an elected leader
    # that had installed a snapshot without the id and generated a second one; 3284: a replica
    # committed its own uncommitted id as it installed a snapshot.
    stats = run_seed(seed, voters=3, observers=1, scenario="chaos")
    assert stats.snapshots_installed > 0


def test_the_simulator_names_the_first_event_where_the_ids_diverge(monkeypatch: pytest.MonkeyPatch) -> None:
    # The core as it was: the commit announced before the id, so the snapshot taken at that high
    # watermark has no id in its header. The fatal stop came 11 s later; the invariant fires at once.
    def announce_first(self: RaftCore, new: int) -> None:
        if new <= self._high_watermark:
            return
        self._high_watermark = new
        self._emit(HighWatermarkAdvanced(new))
        committed = self._cluster.high_watermark(new)
        if committed is not None:
            self._emit(ClusterIdCommitted(committed))

    monkeypatch.setattr(RaftCore, "_advance_high_watermark", announce_first)
    with pytest.raises(SimulationFailure) as caught:
        run_seed(1520, voters=3, observers=1, scenario="chaos")
    message = str(caught.value)
    assert "t=3277ms" in message and "stopped" not in message
    assert "snapshot OffsetAndEpoch(offset=35, epoch=1) (written) has no cluster id in its header" in message


class View:
    def __init__(self, node_id: int, log: MemoryLog, hw: int, meta_cluster_id: str | None = None) -> None:
        self.node_id, self.log, self.high_watermark, self.meta_cluster_id = node_id, log, hw, meta_cluster_id
        self.epoch, self.role, self.incarnation, self.alive = 2, Role.FOLLOWER, 0, True


def log_of(*cluster_ids: str | None) -> MemoryLog:
    """A LeaderChange per id (epochs 1, 2, ...), then a data batch."""
    log = MemoryLog()
    for offset, cluster_id in enumerate(cluster_ids):
        log.append(build_leader_change_batch(offset, offset + 1, 1, (1, 2, 3), (1, 2), cluster_id, 0))
    log.append(batch(len(cluster_ids), len(cluster_ids)))
    log.flush()
    return log


def test_the_checker_catches_two_committed_leader_changes_with_different_ids() -> None:
    log = log_of(ID, None, OTHER)
    checker = InvariantChecker((1, 2, 3))
    checker.check([View(1, log, 2), View(2, log, 2)])  # LeaderChange(ID) and one without an id
    with pytest.raises(InvariantViolation, match="two cluster ids committed"):
        checker.check([View(1, log, 4), View(2, log, 4)])


def test_the_checker_catches_a_node_recording_an_id_that_is_not_committed() -> None:
    log = log_of(ID)
    checker = InvariantChecker((1, 2, 3))
    with pytest.raises(InvariantViolation, match="records cluster id .* but no committed LeaderChange"):
        checker.check([View(1, log, 0, meta_cluster_id=ID)])
    checker = InvariantChecker((1, 2, 3))
    checker.check([View(1, log, 1, meta_cluster_id=ID), View(2, log, 1)])
    with pytest.raises(InvariantViolation, match=f"records cluster id {OTHER} .* the committed one is {ID}"):
        checker.check([View(1, log, 1), View(2, log, 1), View(3, MemoryLog(), 0, meta_cluster_id=OTHER)])


def test_the_checker_catches_a_snapshot_header_without_the_committed_id() -> None:
    log = log_of(ID)
    checker = InvariantChecker((1, 2, 3))
    checker.check([View(1, log, 2), View(2, log, 2)])
    checker.check_snapshot_cluster_id(1, OffsetAndEpoch(2, 1), 2, ID, "written")
    with pytest.raises(InvariantViolation, match="has no cluster id in its header"):
        checker.check_snapshot_cluster_id(2, OffsetAndEpoch(2, 1), 2, None, "fetched")
    with pytest.raises(InvariantViolation, match="two cluster ids committed"):
        checker.check_snapshot_cluster_id(2, OffsetAndEpoch(2, 1), 2, OTHER, "fetched")
