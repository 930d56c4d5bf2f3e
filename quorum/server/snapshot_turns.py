"""A node's side of KIP-631 snapshot coordination: when this node may write a snapshot.

The rules are `quorum.controller.snapshot_coordinator`'s; this class keeps what a node needs
around them. As the active controller it holds one coordinator per leadership (soft state: a
new leader starts from nothing) and answers each replica's Fetch with a grant or not. As any
other replica it reports its snapshots in each Fetch and remembers the last answer. Either way,
`decide` tells the node's periodic check what to do now: nothing, write a snapshot, or (the
active controller) resign first.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping

from quorum.controller.snapshot_coordinator import (
    DEGRADED_BYTES_CONFIG,
    DEGRADED_BYTES_FACTOR,
    NO_SNAPSHOT,
    OwnSnapshot,
    SnapshotCoordinator,
    SnapshotReport,
)
from quorum.image.replay import MetadataReplayer

log = logging.getLogger(__name__)

RESIGN_MEMORY_MS = 60_000
"""A controller re-elected this soon after resigning for a snapshot takes it in place instead."""


def degraded_min_bytes(config: Mapping[str, str], normal_min_bytes: int) -> int:
    """`metadata.log.max.record.bytes.between.snapshots.degraded`, 4x the normal threshold unless set."""
    value = config.get(DEGRADED_BYTES_CONFIG)
    if value is None:
        return DEGRADED_BYTES_FACTOR * normal_min_bytes
    try:
        parsed = int(value)
    except ValueError:
        raise ValueError(f"{DEGRADED_BYTES_CONFIG} must be a whole number of bytes, not {value!r}") from None
    if parsed < 0:
        raise ValueError(f"{DEGRADED_BYTES_CONFIG} must be at least 0, not {parsed}")
    return parsed


class SnapshotTurns:
    """When this node writes its snapshots (see the module docstring)."""

    def __init__(self, node_id: int, voters: Iterable[int], fetch_timeout_ms: int, degraded_bytes: int,
                 replayer: MetadataReplayer) -> None:
        self.node_id = node_id
        self.voters = frozenset(voters)
        self.fetch_timeout_ms = fetch_timeout_ms
        self.degraded_bytes = degraded_bytes
        self.replayer = replayer
        self._coordinator: SnapshotCoordinator | None = None
        self._coordinator_epoch = -1
        self._granted_until_ms = -1  # a grant from the last Fetch answer holds until then
        self._resigned_at_ms: int | None = None

    def report(self) -> SnapshotReport:
        """What this node says of its snapshots in each Fetch."""
        replayer = self.replayer
        latest = replayer.snapshots.latest_snapshot()
        return SnapshotReport(NO_SNAPSHOT if latest is None else latest.offset, replayer.bytes_since_snapshot,
                              replayer.snapshot_due, replayer.snapshot_in_progress)

    # -- as the active controller -------------------------------------------------------------------

    def answer_fetch(self, replica_id: int, report: SnapshotReport | None, leader_epoch: int | None,
                     now_ms: int) -> bool:
        """Whether the replica whose Fetch is being answered may write a snapshot now; `leader_epoch`
        is this node's epoch when it leads, None when it does not (then no grant)."""
        if report is None or leader_epoch is None:
            return False
        coordinator = self._coordinator_of(leader_epoch, now_ms)
        before = coordinator.snapshotting(now_ms)
        granted = coordinator.on_report(replica_id, report, now_ms)
        if granted and replica_id not in before.values():
            lane = "voters" if replica_id in self.voters else "observers"
            log.info("snapshot turn: node %d may write a snapshot (%s' lane, %d bytes since its latest)",
                     replica_id, lane, report.bytes_since_snapshot)
        return granted

    def _coordinator_of(self, leader_epoch: int, now_ms: int) -> SnapshotCoordinator:
        if self._coordinator is None or self._coordinator_epoch != leader_epoch:
            recently = self._resigned_at_ms is not None and now_ms - self._resigned_at_ms < RESIGN_MEMORY_MS
            self._coordinator = SnapshotCoordinator(self.node_id, self.voters, self.fetch_timeout_ms,
                                                    self.degraded_bytes, resigned_recently=recently)
            self._coordinator_epoch = leader_epoch
        return self._coordinator

    # -- as any other replica ----------------------------------------------------------------------

    def on_fetch_answer(self, granted: bool, now_ms: int) -> None:
        """The active controller's answer to this node's last Fetch."""
        self._granted_until_ms = now_ms + self.fetch_timeout_ms if granted else -1

    # -- what to do now ----------------------------------------------------------------------------

    def decide(self, leader_epoch: int | None, now_ms: int) -> OwnSnapshot:
        """WAIT, SNAPSHOT (begin one now) or RESIGN (the active controller gives up the leadership
        first); `leader_epoch` as in `answer_fetch`."""
        report = self.report()
        if leader_epoch is not None:
            decision = self._coordinator_of(leader_epoch, now_ms).own_turn(report, now_ms)
            if decision is OwnSnapshot.RESIGN:
                self._resigned_at_ms = now_ms
                log.info("snapshot turn: the active controller resigns to write its snapshot "
                         "(%d bytes since its latest)", report.bytes_since_snapshot)
            return decision
        if report.due and not report.in_progress and now_ms <= self._granted_until_ms:
            return OwnSnapshot.SNAPSHOT
        return OwnSnapshot.WAIT
