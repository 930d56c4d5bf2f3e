"""Named fault mixes for the simulator: what the network does and which faults strike how often."""

from __future__ import annotations

from dataclasses import dataclass

FAULTS = ("partition", "asymmetric", "isolate_leader", "crash", "kill_all", "leader_failures", "resign", "flaky")
"""The faults chaos mixes (see `Simulation._inject`). `failover` is left out: it comes with a
liveness deadline, which any other fault striking at the same time could rightly break."""

SNAPSHOT_FAULTS = ("outage", "crash_writing_snapshot", "crash")
"""The faults snapshot-crash mixes: a replica down long enough to need a snapshot, and kill -9
in the middle of writing one (fetches are cut by `kill_mid_fetch`)."""


@dataclass(frozen=True, slots=True)
class Scenario:
    name: str
    loss: float = 0.0
    duplicate: float = 0.0
    min_delay_ms: int = 1
    max_delay_ms: int = 10
    faults: tuple[str, ...] = ()
    fault_every_ms: tuple[int, int] = (1500, 4000)
    duration_ms: int = 20_000
    settle_ms: int = 30_000
    flush_delay_ms: tuple[int, int] = (1, 15)
    propose_every_ms: tuple[int, int] = (20, 200)
    failover_deadline_ms: int = 15_000
    """`failover` only: how long the survivors have to elect a leader that commits, the dead staying dead."""
    # -- KIP-630 snapshots ---------------------------------------------------------------------
    snapshot_bytes: int | None = None
    """metadata.log.max.record.bytes.between.snapshots for every node (the changed-records ratio
    is 0.5); None: snapshots off, and the workload stays random opaque values as it always was.
    With snapshots on, the workload is KIP-631 metadata records over a few entities."""
    start_offset_lag_time_max_ms: int = 7 * 24 * 60 * 60 * 1000
    """metadata.start.offset.lag.time.max.ms (Kafka's default: 7 days)."""
    outage_ms: tuple[int, int] = (3000, 7000)
    """How long the `outage` fault keeps a replica down (and the first one, with `long_outage`)."""
    long_outage: bool = False
    """Early in the run, one voter (when the others still make a majority) and the first observer
    go down for `outage_ms` while the rest commit, snapshot and move their log start past them."""
    kill_mid_fetch: float = 0.0
    """Chance that a replica is killed right after writing a chunk of a snapshot it fetches."""
    corrupt_snapshot_chunks: float = 0.0
    """Chance that one byte of a FetchSnapshot response's data is flipped in flight."""


SCENARIOS: dict[str, Scenario] = {s.name: s for s in (
    Scenario("calm"),
    Scenario("lossy", loss=0.1, duplicate=0.05, max_delay_ms=80),
    Scenario("partition", faults=("partition", "asymmetric"), max_delay_ms=20),
    Scenario("isolate-leader", faults=("isolate_leader",), fault_every_ms=(3000, 6000)),
    Scenario("crash", faults=("crash",), fault_every_ms=(800, 2500)),
    Scenario("kill-all", faults=("kill_all",), fault_every_ms=(3000, 6000)),
    Scenario("leader-failures", faults=("leader_failures",), fault_every_ms=(3000, 6000)),
    Scenario("resign", faults=("resign",), fault_every_ms=(1000, 3000)),
    # SIGTERM to the leader under network faults: the stopping node must never campaign, even when
    # it does not hear of its successor within an election timeout (issue 37's graceful failover).
    Scenario("graceful-stop", loss=0.02, max_delay_ms=20, faults=("graceful_stop", "asymmetric", "partition"),
             fault_every_ms=(1000, 3000)),
    # kill -9 of the leader, again and again, each victim restarted before the next kill: survivors
    # that lost their leader at different moments must still elect a successor, by a deadline.
    # -loopback answers within a millisecond, far inside every timeout, as real processes on
    # 127.0.0.1 do (where survivors once took turns at following the dead leader for ever).
    Scenario("failover", faults=("failover",), fault_every_ms=(1500, 4000), duration_ms=40_000),
    Scenario("failover-loopback", faults=("failover",), min_delay_ms=0, max_delay_ms=1, flush_delay_ms=(0, 3),
             fault_every_ms=(1500, 4000), duration_ms=40_000),
    Scenario("chaos", loss=0.05, duplicate=0.03, max_delay_ms=40, faults=FAULTS, fault_every_ms=(800, 3000),
             snapshot_bytes=2048, start_offset_lag_time_max_ms=10_000),
    # KIP-630: a replica down while the others snapshot and move their log start offset past its
    # log end must come back by FetchSnapshot; leaders resign now and then, so snapshots are
    # served by several nodes.
    Scenario("snapshot", loss=0.02, duplicate=0.02, max_delay_ms=20, faults=("resign",), fault_every_ms=(3000, 6000),
             snapshot_bytes=1024, start_offset_lag_time_max_ms=5000, long_outage=True, outage_ms=(9000, 13000)),
    # ... and kill -9 in the middle of fetching one and of writing one, and FetchSnapshot data
    # damaged in flight: the fetched file must be refused and fetched again.
    Scenario("snapshot-crash", loss=0.02, duplicate=0.02, max_delay_ms=20, faults=SNAPSHOT_FAULTS,
             fault_every_ms=(1000, 3000), snapshot_bytes=768, start_offset_lag_time_max_ms=3000,
             outage_ms=(3000, 6000), kill_mid_fetch=0.25, corrupt_snapshot_chunks=0.2),
)}
