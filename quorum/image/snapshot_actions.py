"""Carry out the Raft core's KIP-630 actions on disk, the same way in the node and the simulator.

The core decides (sans-IO); this class does: it owns the fetched snapshot's `.checkpoint.part`
writers, installs a complete one (the log restarts at its end offset, the state machine loads
it), moves the log start offset and deletes the snapshots below it, and, as the high watermark
advances, replays committed records into the state machine and takes a snapshot when the
policy says so. Each method returns what the driver must report back to the core, so both
drivers stay a thin loop of "call the core, carry out its actions".
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from quorum.image.replay import MetadataReplayer, SnapshotJob
from quorum.log.errors import SnapshotError
from quorum.log.snapshot import SnapshotDirectory, SnapshotFetchWriter, SnapshotReader
from quorum.raft.interface import OffsetAndEpoch, WriteSnapshotChunk

logger = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class FetchedSnapshot:
    """The outcome of a fetched snapshot's last chunk: `RaftCore.on_snapshot_fetched`'s arguments."""

    snapshot_id: OffsetAndEpoch
    error: str | None
    cluster_id: str | None = None


class SnapshotActions:
    """One replica's snapshot files, log and state machine, as the core's actions change them."""

    def __init__(self, replayer: MetadataReplayer, snapshots: SnapshotDirectory) -> None:
        self.replayer = replayer
        self.snapshots = snapshots
        self.log = replayer.log
        self._fetches: dict[OffsetAndEpoch, SnapshotFetchWriter] = {}

    # -- fetching ----------------------------------------------------------------------------------

    def write_chunk(self, action: WriteSnapshotChunk) -> FetchedSnapshot | None:
        """Write one FetchSnapshot chunk; the outcome once the chunk was the last one (or failed)."""
        writer = self._fetches.get(action.snapshot_id)
        try:
            if writer is None:
                writer = self._fetches[action.snapshot_id] = SnapshotFetchWriter(self.snapshots.directory,
                                                                                 action.snapshot_id)
            if not writer.append_chunk(action.position, action.data, action.size):
                return None
        except (SnapshotError, OSError) as exc:
            logger.error("fetching snapshot %s failed: %s", action.snapshot_id, exc)
            self.abandon(action.snapshot_id)
            return FetchedSnapshot(action.snapshot_id, str(exc))
        del self._fetches[action.snapshot_id]
        self.snapshots.refresh()
        with SnapshotReader.open(self.snapshots.directory, action.snapshot_id) as reader:
            cluster_id = reader.cluster_id
        return FetchedSnapshot(action.snapshot_id, None, cluster_id)

    def abandon(self, snapshot_id: OffsetAndEpoch) -> None:
        """Give up a fetch: its `.part` file goes."""
        writer = self._fetches.pop(snapshot_id, None)
        if writer is not None:
            writer.abort()

    def drop_writers(self) -> None:
        """What `kill -9` does to fetches in flight: the files stay as they are (`.part`, never
        loaded; start-up removes them). For the simulator's crashes and a node's exit."""
        for writer in self._fetches.values():
            writer.close_without_cleanup()
        self._fetches.clear()

    # -- installing, the log start offset ------------------------------------------------------------

    def install(self, snapshot_id: OffsetAndEpoch, prefix_digest: int | None = None) -> None:
        """InstallSnapshot: the log restarts at the snapshot if it was behind, the state machine loads it.

        `prefix_digest` is the simulator's (its in-memory log chains digests over the prefix).
        """
        if prefix_digest is None:
            self.log.set_snapshot_boundary(snapshot_id)
        else:
            self.log.set_snapshot_boundary(snapshot_id, prefix_digest=prefix_digest)
        self.replayer.install(snapshot_id)

    def advance_log_start(self, offset: int) -> list[OffsetAndEpoch]:
        """AdvanceLogStartOffset: the log starts at `offset` (a snapshot's end), older snapshots go."""
        self.log.advance_start_offset(offset)
        deleted = self.snapshots.delete_below(offset)
        if deleted:
            logger.info("log start offset %d: deleted snapshots %s", offset, deleted)
        return deleted

    # -- replaying ---------------------------------------------------------------------------------

    def catch_up(self, high_watermark: int) -> None:
        """HighWatermarkAdvanced, for a driver that writes snapshots in the background when the
        active controller lets it (KIP-631): apply what is committed; `begin_snapshot` is separate."""
        self.replayer.catch_up(high_watermark)

    def begin_snapshot(self) -> SnapshotJob | None:
        """A snapshot job to `write()` off the core's path, then `finish_snapshot`, when the policy
        says one is due; None otherwise."""
        return self.replayer.begin_snapshot()

    def finish_snapshot(self, job: SnapshotJob) -> OffsetAndEpoch:
        """The job's file is complete: its id, for `RaftCore.on_snapshot_created`."""
        return self.replayer.finish_snapshot(job)

    def committed(self, high_watermark: int) -> OffsetAndEpoch | None:
        """HighWatermarkAdvanced: apply what is committed; the id of a new snapshot, if one was taken
        (report it with `RaftCore.on_snapshot_created`)."""
        self.replayer.catch_up(high_watermark)
        created = self.replayer.maybe_snapshot()
        self.replayer.update_lag(high_watermark)
        return created
