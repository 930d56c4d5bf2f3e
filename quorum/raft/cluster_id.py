"""Where a replica learns its cluster id, and when it may record and act on it (KIP-595, "Cluster Bootstrapping").

The rule
--------
1. **Generated once, by the first leader of a new history.** A leader whose history starts at
   offset 0 with no snapshot, and whose log carries no id, generates one and writes it in its
   LeaderChangeMessage. Every other leader repeats the id it knows: the committed one, else the
   one of the first LeaderChange in its log. A leader whose history starts at a snapshot never
   invents an id: the history below that snapshot began with a LeaderChange that carried one, so a
   new id would be a second. If it knows none (a snapshot header without the tag), it writes none.
2. **Recorded only once committed.** A replica records an id (meta.properties, the id it sends in
   requests and compares fatally) only when (a) the LeaderChange carrying it lies below its high
   watermark in its own log, (b) a snapshot header carries it (a snapshot holds committed records
   only), or (c) meta.properties had it at start. An id read from the log but not committed is
   used by a leader only, to repeat it and to validate Fetch and FetchSnapshot against it: a
   leader's log holds every committed record (Raft's leader completeness), so the first id in it
   is the committed one whenever one is committed.
3. **Forgotten with the record that carried it.** A truncation at or below the LeaderChange drops
   the log's id; so does installing a snapshot that ends past it (the snapshot stands for every
   record below its end offset, and only its header speaks for them: the log's own records there
   may be an old leader's, never committed) or that replaces the log (it is ahead of it). At
   start-up a LeaderChange below the latest snapshot's end is ignored for the same reason.
4. **Recorded before the commit is announced.** The core emits ClusterIdCommitted before the
   HighWatermarkAdvanced that commits it, so a snapshot taken at that high watermark carries the
   id in its header. (A header without it left a replica that installed it with no id, and as
   leader it generated a second one: chaos seeds 1520, 1765, 1929 and 3839.)

The invariant it keeps
----------------------
Every replica that records a cluster id records the same one, and it is the id of the first
LeaderChange in the committed log that carries one (every committed LeaderChange and every
snapshot header that carries an id carries that one). The simulator checks it after every event
(`quorum.sim.invariants`).
"""

from __future__ import annotations

import random

from quorum.raft.control import find_cluster_id, generate_cluster_id
from quorum.raft.interface import OffsetAndEpoch, RaftLog, SnapshotStore


def ids_conflict(theirs: str | None, ours: str | None) -> bool:
    """Only two known ids can conflict: a null one is a node that does not know it yet."""
    return theirs is not None and ours is not None and theirs != ours


class ClusterIdTracker:
    """One replica's cluster id: the committed one, and the one its log carries (sans-IO).

    The core asks it what to send and compare, tells it what happened to the log, and emits
    ClusterIdCommitted when a method returns a newly committed id, Fatal when one returns a reason.
    """

    def __init__(self, committed: str | None, log: RaftLog, snapshots: SnapshotStore) -> None:
        self.committed = committed
        """The id known to be committed (what belongs in meta.properties), or None."""
        found = find_cluster_id(log.read, log.start_offset, log.end_offset)
        latest = snapshots.latest_snapshot()
        if found is not None and latest is not None and found[0] < latest.offset:
            found = None  # rule 3: below the snapshot's end, only its header (meta.properties) speaks
        self.in_log: tuple[int, str] | None = found
        """(offset, id) of the first LeaderChange in the log that carries an id, maybe uncommitted."""

    def known(self) -> str | None:
        """The id to validate a Fetch against and to repeat as leader: committed, else the log's."""
        if self.committed is not None:
            return self.committed
        return self.in_log[1] if self.in_log else None

    def start_conflict(self) -> str | None:
        """Why a node must not start: its log carries another id than its meta.properties."""
        if self.in_log is not None and ids_conflict(self.in_log[1], self.committed):
            return f"the log carries cluster id {self.in_log[1]}, meta.properties says {self.committed}"
        return None

    def for_new_leader(self, start_offset: int, log: RaftLog, snapshots: SnapshotStore,
                       rng: random.Random) -> str | None:
        """The id a leader writes in its LeaderChange at `start_offset` (rule 1); None if unknown."""
        cluster_id = self.known()
        if cluster_id is None and log.start_offset == 0 and snapshots.latest_snapshot() is None:
            cluster_id = generate_cluster_id(rng)
        if cluster_id is not None and self.in_log is None:
            self.in_log = (start_offset, cluster_id)
        return cluster_id

    def fetched(self, offset: int, cluster_id: str) -> str | None:
        """A LeaderChange carrying `cluster_id` at `offset` is appended from the leader; a reason
        to stop when it contradicts the committed id."""
        if ids_conflict(cluster_id, self.committed):
            return f"the leader's log carries cluster id {cluster_id}, ours is {self.committed}"
        if self.in_log is None or offset < self.in_log[0]:
            self.in_log = (offset, cluster_id)
        return None

    def truncated(self, offset: int) -> None:
        """The log ends at `offset` now: a LeaderChange at or past it is gone."""
        if self.in_log is not None and self.in_log[0] >= offset:
            self.in_log = None

    def installed(self, snapshot_id: OffsetAndEpoch, log_last_epoch: int) -> None:
        """A fetched snapshot is installed (rule 3). `log_last_epoch` is the log's before it: the
        log restarts at the snapshot when the snapshot's epoch is above it (`Log.set_snapshot_boundary`)."""
        found = self.in_log
        if found is not None and (found[0] < snapshot_id.offset or snapshot_id.epoch > log_last_epoch):
            self.in_log = None

    def from_snapshot(self, cluster_id: str) -> tuple[str | None, str | None]:
        """A fetched snapshot's header carries `cluster_id`, committed as everything in a snapshot:
        (the newly committed id or None, a reason to stop or None)."""
        if ids_conflict(cluster_id, self.committed):
            return None, f"the leader's snapshot carries cluster id {cluster_id}, ours is {self.committed}"
        if self.committed is None:
            self.committed = cluster_id
            return cluster_id, None
        return None, None

    def high_watermark(self, high_watermark: int) -> str | None:
        """The high watermark moved to `high_watermark`: the log's id, if that commits it now."""
        found = self.in_log
        if self.committed is None and found is not None and high_watermark > found[0]:
            self.committed = found[1]
            return found[1]
        return None
