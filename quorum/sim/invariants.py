"""Safety invariants of the quorum, checked by the simulator after every event.

- One leader per epoch, ever.
- Epochs never go back on a node (across restarts too: quorum-state is durable).
- A node's high watermark never goes back while it runs (Kafka does not persist it), and never
  passes what the node holds durably.
- Every committed offset is held, durably and identically, by a majority of voters.
- Committed prefixes are identical on every replica: what a node calls committed is exactly the
  committed log.
- The cluster id (KIP-595, "Cluster Bootstrapping"; the rule is `quorum.raft.cluster_id`'s):
  every committed LeaderChange that carries an id carries the same one, the committed id; every
  node that records an id (meta.properties, and the core that acts on it) records exactly that
  one, never one that is not committed yet; and every snapshot header carries it once the
  committed log below the snapshot's end holds it (`check_snapshot_cluster_id`, called by the
  simulator as each snapshot is written or fetched).
- KIP-630: a live node whose log starts above 0 holds a snapshot ending exactly at its log start
  offset (and not past its high watermark), so nothing below the start is lost, and none ending
  below it ("When to Delete Snapshots").
- Loading the latest snapshot and replaying the log gives the same state as replaying the whole
  committed log: each node's `MetadataRecordsState.digest()` at its replayer's applied offset
  equals that of a reference state fed the committed history up to there. The history is the
  committed values by offset, recorded the first time any node's replayer applies them and
  compared when others apply the same offsets (`record_applied`).

"Committed" is the union of what any node has reported below its high watermark: the committed
log grows when a node's high watermark passes its end, taken from that node's log, and every
other claim is compared against it through the chained batch digests of `MemoryLog`. The
simulator also reports each HighWatermarkAdvanced as it carries it out (`observe_commit`): in
the same event the node may snapshot and move its log start past the batches just committed.
A log that starts above 0 still answers for the prefix below its start (`MemoryLog.digest_at`
at the start offset gives the digest of the prefix its snapshot stands for), which is how a
voter that snapshotted, or installed a snapshot, still counts as holding what it covers.
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from quorum.image.records_state import MetadataRecordsState
from quorum.raft.control import scan_batches
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

    # Optional (the simulator's nodes have them, hand-made views may not): `snapshots`, the
    # node's `quorum.log.snapshot.SnapshotDirectory`; `replayer`, its
    # `quorum.image.replay.MetadataReplayer`, whose state is a `RecordingState`.


class RecordingState(MetadataRecordsState):
    """A node's metadata state that reports every record it applies to the checker (`record_applied`)
    and counts its loads, so the checker knows when to compare it with the reference again."""

    def __init__(self, checker: InvariantChecker, node_id: int) -> None:
        super().__init__()
        self.checker = checker
        self.node_id = node_id
        self.loads = 0

    def apply(self, offset: int, value: bytes) -> None:
        self.checker.record_applied(self.node_id, offset, value)
        super().apply(offset, value)

    def load(self, values: Iterable[bytes]) -> None:
        self.loads += 1
        super().load(values)


@dataclass
class InvariantChecker:
    voters: Sequence[int]
    leaders: dict[int, int] = field(default_factory=dict)  # epoch -> leader
    epochs: dict[int, int] = field(default_factory=dict)
    high_watermarks: dict[int, tuple[int, int]] = field(default_factory=dict)  # node -> (incarnation, hw)
    committed_end: int = 0
    committed_digests: dict[int, int] = field(default_factory=lambda: {0: 0})  # batch end offset -> digest
    committed_cluster_id: tuple[int, str, str] | None = None
    """(offset, id, where it was seen) of the committed id: the first committed LeaderChange that
    carries one, or else the header of a snapshot of committed records."""
    check_states: bool = False
    """Compare every node's metadata state with the reference (the simulator turns it on with
    snapshots: its workload then touches a few entities, so a digest stays cheap)."""
    history_offsets: list[int] = field(default_factory=list)  # of the committed values applied, ascending
    history_values: list[bytes] = field(default_factory=list)
    _reference: MetadataRecordsState = field(default_factory=MetadataRecordsState)
    _reference_digests: list[str] = field(default_factory=list)  # [k]: after the first k values of the history
    # node -> (incarnation, loads, applied offset) when its state was last compared
    _states_checked: dict[int, tuple[int, int, int]] = field(default_factory=dict)
    # node -> (incarnation, epoch, role, high watermark, log version) when its epoch and high watermark were
    # last checked: the same again gives the same verdict (what those checks compare with only grows), so
    # only a node that changed is checked again (most events change one node of several)
    _replicas_checked: dict[int, tuple[Any, ...]] = field(default_factory=dict)
    # (committed end, each voter's log version) when the majority check last passed
    _majority_checked: tuple[Any, ...] | None = None

    def __post_init__(self) -> None:
        self._reference_digests.append(self._reference.digest())

    @property
    def majority(self) -> int:
        return len(self.voters) // 2 + 1

    def check(self, nodes: Iterable[ReplicaView]) -> None:
        nodes = list(nodes)
        check_states = self.check_states
        checked = self._replicas_checked
        for node in nodes:
            if not node.alive:
                continue
            version = getattr(node.log, "version", None)
            key = (node.incarnation, node.epoch, node.role, node.high_watermark, version)
            if version is None or checked.get(node.node_id) != key:
                self._check_epoch(node)
                self._check_high_watermark(node)
                checked[node.node_id] = key
            if node.log.start_offset:
                snapshots = getattr(node, "snapshots", None)
                if snapshots is not None:
                    self._check_log_start(node, snapshots)
            if check_states:
                replayer = getattr(node, "replayer", None)
                if replayer is not None:
                    self._check_state(node, replayer)
        self._check_majority(nodes)
        for node in nodes:  # after the commits this event made are observed
            self._check_recorded_cluster_id(node)

    # -- the replayed state (KIP-630: a snapshot and the log after it make the same state) -------

    def record_applied(self, node_id: int, offset: int, value: bytes) -> None:
        """A node's replayer applies the committed record at `offset`: the first time anyone
        does, it joins the history (and the reference state); later, it must be the same value."""
        offsets = self.history_offsets
        if offsets and offset <= offsets[-1]:
            index = bisect_left(offsets, offset)
            if index == len(offsets) or offsets[index] != offset:
                self._fail(f"node {node_id} applies a record at offset {offset}, where no committed record "
                           f"was applied before (the history goes up to {offsets[-1]})")
            if self.history_values[index] != value:
                self._fail(f"node {node_id} applies a record at offset {offset} that differs from the one "
                           f"applied there before")
            return
        offsets.append(offset)
        self.history_values.append(value)
        if self.check_states:
            self._reference.apply(offset, value)
            self._reference_digests.append(self._reference.digest())

    def reference_digest(self, applied_offset: int) -> str:
        """The digest of the state holding every committed record below `applied_offset`."""
        return self._reference_digests[bisect_left(self.history_offsets, applied_offset)]

    def _check_state(self, node: ReplicaView, replayer: object) -> None:
        state = replayer.state  # type: ignore[attr-defined]
        applied = replayer.applied_offset  # type: ignore[attr-defined]
        key = (node.incarnation, getattr(state, "loads", 0), applied)
        if self._states_checked.get(node.node_id) == key:
            return
        self._states_checked[node.node_id] = key
        if applied > self.committed_end:
            self._fail(f"node {node.node_id} applied records up to {applied}, past the committed log "
                       f"[0, {self.committed_end})")
        if state.digest() != self.reference_digest(applied):
            self._fail(f"node {node.node_id}: its metadata state at offset {applied} differs from the state "
                       f"that replaying the committed log up to there gives")

    def _check_log_start(self, node: ReplicaView, snapshots: object) -> None:
        """KIP-630, "Validation of Snapshot and Log": a log starting above 0 has a snapshot ending at
        its log start offset, at or below the high watermark, and none below it.

        Exactly at the start: the leader moves its start to its latest snapshot, a follower to its
        largest snapshot at or below the minimum of the leader's start and its own latest
        (`quorum.raft.snapshot_rules.follower_log_start_target`), and an installed snapshot
        restarts the log at its end offset; the leader's Fetch check reads the oldest snapshot as
        the one at its log start.
        """
        start = node.log.start_offset
        held = snapshots.snapshots  # type: ignore[attr-defined]
        below = [s for s in held if s.offset < start]
        if below:
            # KIP-630, "When to Delete Snapshots": the leader answers a Fetch at its log start from
            # its earliest snapshot, which must be the one there.
            self._fail(f"node {node.node_id}: its log starts at {start}, but it still holds snapshots ending below "
                       f"it: {[(s.offset, s.epoch) for s in below]}")
        hw = node.high_watermark
        if not any(s.offset == start for s in held) or start > hw:
            self._fail(f"node {node.node_id}: its log starts at {start} (high watermark {hw}), but no snapshot ends "
                       f"there (snapshots: {[(s.offset, s.epoch) for s in held]})")

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
        self.observe_commit(node.node_id, node.log, hw)

    def observe_commit(self, node_id: int, log: MemoryLog, hw: int) -> None:
        """`node_id` calls [0, hw) of `log` committed: it must be the committed log, and extends it.

        Checked after every event, and by the simulator as it carries out each HighWatermarkAdvanced:
        later in the same event the node may snapshot and move its log start offset past the
        batches it has just committed, after which its log no longer shows them to the checker.
        """
        if hw <= self.committed_end:
            expected = self.committed_digests.get(hw)
            if expected is None or log.digest_at(hw) != expected:
                self._fail(f"node {node_id} calls [0, {hw}) committed, but its log differs from the "
                           f"committed log there")
            return
        # The node is the first to commit past committed_end: its log must contain the committed
        # prefix, and its batches up to hw extend it.
        if log.digest_at(self.committed_end) != self.committed_digests[self.committed_end]:
            self._fail(f"node {node_id} commits up to {hw} on a log that differs from the committed "
                       f"prefix [0, {self.committed_end})")
        end_index = log.batch_index_ending_at(hw)
        if end_index is None:
            self._fail(f"node {node_id}: high watermark {hw} is not a batch boundary of its log")
        start_index = log.batch_index_ending_at(self.committed_end)
        first = 0 if start_index is None else start_index + 1
        for batch in log.batches[first:end_index + 1]:
            self.committed_digests[batch.next_offset] = batch.digest
            for info in scan_batches(batch.data):
                if info.leader_change is not None and info.leader_change.cluster_id is not None:
                    self._commit_cluster_id(info.base_offset, info.leader_change.cluster_id,
                                            f"the LeaderChange at offset {info.base_offset}")
        self.committed_end = hw

    # -- the cluster id ----------------------------------------------------------------------------

    def _commit_cluster_id(self, offset: int, cluster_id: str, where: str) -> None:
        known = self.committed_cluster_id
        if known is None:
            self.committed_cluster_id = (offset, cluster_id, where)
        elif known[1] != cluster_id:
            self._fail(f"two cluster ids committed: {known[1]} ({known[2]}) and {cluster_id} ({where})")

    def _check_recorded_cluster_id(self, node: ReplicaView) -> None:
        """What a node records (meta.properties) and what its core acts on is the committed id."""
        core = getattr(node, "core", None)
        known = self.committed_cluster_id
        if known is not None and node.meta_cluster_id in (None, known[1]) and (
                core is None or core.cluster_id in (None, known[1])):
            return  # the usual case, without building the list below
        recorded = [("meta.properties", node.meta_cluster_id)]
        if core is not None:
            recorded.append(("its core", core.cluster_id))
        for what, cluster_id in recorded:
            if cluster_id is None or (known is not None and known[1] == cluster_id):
                continue
            if known is None:
                self._fail(f"node {node.node_id} records cluster id {cluster_id} ({what}), but no committed "
                           f"LeaderChange or snapshot carries one yet")
            self._fail(f"node {node.node_id} records cluster id {cluster_id} ({what}), but the committed one is "
                       f"{known[1]} ({known[2]})")

    def check_snapshot_cluster_id(self, node_id: int, snapshot_id: object, end_offset: int,
                                  cluster_id: str | None, how: str) -> None:
        """A snapshot of the committed log up to `end_offset` was `how` ("written", "fetched") by
        `node_id`, its header carrying `cluster_id`: the committed id once the log below its end has
        it (a header without it leaves whoever installs the snapshot with no id, and as leader that
        node would generate a second one), and never another."""
        known = self.committed_cluster_id
        if cluster_id is None:
            if known is not None and known[0] < end_offset:
                self._fail(f"node {node_id}: snapshot {snapshot_id} ({how}) has no cluster id in its header, but "
                           f"the committed log below its end carries {known[1]} ({known[2]})")
            return
        self._commit_cluster_id(-1, cluster_id, f"the header of snapshot {snapshot_id} {how} by node {node_id}")

    def _check_majority(self, nodes: list[ReplicaView]) -> None:
        # A voter whose log starts at `end` holds it by the digest of its snapshot's prefix (durable
        # as the snapshot file is); none starts past it: a log start is at or below a snapshot, of
        # committed records only, so at or below a high watermark this checker has seen.
        end = self.committed_end
        if end == 0:
            return
        voters = [n for n in nodes if n.node_id in self.voters]
        key = (end, *(getattr(n.log, "version", None) for n in voters))
        if key == self._majority_checked and None not in key:
            return  # no voter's log and not the committed end changed since it passed
        digest = self.committed_digests[end]
        holders = [n.node_id for n in voters if n.log.digest_at(end, flushed_only=True) == digest]
        if len(holders) < self.majority:
            self._fail(f"committed offset {end - 1} is durable on voters {holders} only, not on a majority "
                             f"of {list(self.voters)}")
        self._majority_checked = key

    @staticmethod
    def _fail(what: str) -> None:
        raise InvariantViolation(what)
