"""Named fault mixes for the simulator: what the network does and which faults strike how often."""

from __future__ import annotations

from dataclasses import dataclass

FAULTS = ("partition", "asymmetric", "isolate_leader", "crash", "kill_all", "leader_failures", "resign", "flaky")
"""The faults chaos mixes (see `Simulation._inject`). `failover` is left out: it comes with a
liveness deadline, which any other fault striking at the same time could rightly break."""


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


SCENARIOS: dict[str, Scenario] = {s.name: s for s in (
    Scenario("calm"),
    Scenario("lossy", loss=0.1, duplicate=0.05, max_delay_ms=80),
    Scenario("partition", faults=("partition", "asymmetric"), max_delay_ms=20),
    Scenario("isolate-leader", faults=("isolate_leader",), fault_every_ms=(3000, 6000)),
    Scenario("crash", faults=("crash",), fault_every_ms=(800, 2500)),
    Scenario("kill-all", faults=("kill_all",), fault_every_ms=(3000, 6000)),
    Scenario("leader-failures", faults=("leader_failures",), fault_every_ms=(3000, 6000)),
    Scenario("resign", faults=("resign",), fault_every_ms=(1000, 3000)),
    # kill -9 of the leader, again and again, each victim restarted before the next kill: survivors
    # that lost their leader at different moments must still elect a successor, by a deadline.
    # -loopback answers within a millisecond, far inside every timeout, as real processes on
    # 127.0.0.1 do (where survivors once took turns at following the dead leader for ever).
    Scenario("failover", faults=("failover",), fault_every_ms=(1500, 4000), duration_ms=40_000),
    Scenario("failover-loopback", faults=("failover",), min_delay_ms=0, max_delay_ms=1, flush_delay_ms=(0, 3),
             fault_every_ms=(1500, 4000), duration_ms=40_000),
    Scenario("chaos", loss=0.05, duplicate=0.03, max_delay_ms=40, faults=FAULTS, fault_every_ms=(800, 3000)),
)}
