"""Safety invariants of the quorum, checked by the simulator after every event.

- One leader per epoch, ever.
- Epochs never go back on a node (across restarts too: quorum-state is durable).
- A node's high watermark never goes back while it runs (Kafka does not persist it), and never
  passes what the node holds durably.
- Every committed offset is held, durably and identically, by a majority of voters.
- Committed prefixes are identical on every replica: what a node calls committed is exactly the
  committed log.
- At most one cluster id is ever committed.

"Committed" is the union of what any node has reported below its high watermark: the committed
log grows when a node's high watermark passes its end, taken from that node's log, and every
other claim is compared against it through the chained batch digests of `MemoryLog`.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from quorum.raft.state import Role
from quorum.sim.memory_log import MemoryLog


class InvariantViolation(AssertionError):
    """A safety property does not hold; the message says which, where and when."""


class ReplicaView(Protocol):
    """What the checker reads of a simulated node."""

    node_id: int
    log: MemoryLog
    incarnation: int
    meta_cluster_id: str | None

    @property
    def alive(self) -> bool: ...

    @property
    def epoch(self) -> int: ...

    @property
    def role(self) -> Role | None: ...

    @property
    def high_watermark(self) -> int: ...


@dataclass
class InvariantChecker:
    voters: Sequence[int]
    leaders: dict[int, int] = field(default_factory=dict)  # epoch -> leader
    epochs: dict[int, int] = field(default_factory=dict)
    high_watermarks: dict[int, tuple[int, int]] = field(default_factory=dict)  # node -> (incarnation, hw)
    committed_end: int = 0
    committed_digests: dict[int, int] = field(default_factory=lambda: {0: 0})  # batch end offset -> digest
    cluster_ids: set[str] = field(default_factory=set)

    @property
    def majority(self) -> int:
        return len(self.voters) // 2 + 1

    def check(self, nodes: Iterable[ReplicaView]) -> None:
        nodes = list(nodes)
        for node in nodes:
            if node.meta_cluster_id is not None:
                self.cluster_ids.add(node.meta_cluster_id)
                if len(self.cluster_ids) > 1:
                    self._fail(f"two cluster ids committed: {sorted(self.cluster_ids)}")
            if not node.alive:
                continue
            self._check_epoch(node)
            self._check_high_watermark(node)
        self._check_majority(nodes)

    def _check_epoch(self, node: ReplicaView) -> None:
        epoch = node.epoch
        previous = self.epochs.get(node.node_id, 0)
        if epoch < previous:
            self._fail(f"node {node.node_id} went from epoch {previous} back to {epoch}")
        self.epochs[node.node_id] = epoch
        if node.role is Role.LEADER:
            leader = self.leaders.setdefault(epoch, node.node_id)
            if leader != node.node_id:
                self._fail(f"two leaders in epoch {epoch}: {leader} and {node.node_id}")

    def _check_high_watermark(self, node: ReplicaView) -> None:
        hw = node.high_watermark
        incarnation, previous = self.high_watermarks.get(node.node_id, (node.incarnation, 0))
        if incarnation == node.incarnation and hw < previous:
            self._fail(f"node {node.node_id}: high watermark went back from {previous} to {hw}")
        self.high_watermarks[node.node_id] = (node.incarnation, hw)
        if hw > node.log.flushed_offset:
            self._fail(f"node {node.node_id}: high watermark {hw} beyond its durable log end {node.log.flushed_offset}")
        if hw <= self.committed_end:
            expected = self.committed_digests.get(hw)
            if expected is None or node.log.digest_at(hw) != expected:
                self._fail(f"node {node.node_id} calls [0, {hw}) committed, but its log differs from the "
                                 f"committed log there")
            return
        # The node is the first to commit past committed_end: its log must contain the committed
        # prefix, and its batches up to hw extend it.
        if node.log.digest_at(self.committed_end) != self.committed_digests[self.committed_end]:
            self._fail(f"node {node.node_id} commits up to {hw} on a log that differs from the committed "
                             f"prefix [0, {self.committed_end})")
        end_index = node.log.batch_index_ending_at(hw)
        if end_index is None:
            self._fail(f"node {node.node_id}: high watermark {hw} is not a batch boundary of its log")
        start_index = node.log.batch_index_ending_at(self.committed_end)
        first = 0 if start_index is None else start_index + 1
        for batch in node.log.batches[first:end_index + 1]:
            self.committed_digests[batch.next_offset] = batch.digest
        self.committed_end = hw

    def _check_majority(self, nodes: list[ReplicaView]) -> None:
        end = self.committed_end
        if end == 0:
            return
        digest = self.committed_digests[end]
        holders = [n.node_id for n in nodes
                   if n.node_id in self.voters and n.log.digest_at(end, flushed_only=True) == digest]
        if len(holders) < self.majority:
            self._fail(f"committed offset {end - 1} is durable on voters {holders} only, not on a majority "
                             f"of {list(self.voters)}")

    @staticmethod
    def _fail(what: str) -> None:
        raise InvariantViolation(what)
