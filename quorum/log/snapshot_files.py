"""Snapshot file names and the directory operations on them, as Kafka's `Snapshots` names them.

A snapshot lives in the partition directory beside the log segments (KIP-630), named by its
SnapshotId, the end offset (20 digits) and epoch (10 digits) of the log it covers::

    00000000000000005120-0000000002.checkpoint          complete, immutable, listed
    00000000000000005120-0000000002.checkpoint.part     being written or fetched; never listed
    00000000000000005120-0000000002.checkpoint.deleted  marked for deletion by Kafka; never listed

(KIP-630's example shows a 20-digit epoch; Apache Kafka's code, which is the contract, writes 10.)
Kafka's writers give their `.part` files a random infix (`Files.createTempFile`); here the part
name is exactly the KIP's `<id>.checkpoint.part`, and the parser accepts both.

Only a `.checkpoint` name means "complete": a file gets it by an atomic rename after it was
fsynced and validated, so a crash can leave a `.part` behind but never a half-written
`.checkpoint`. `clean_partial_snapshots` removes the leftovers at start-up.
"""

from __future__ import annotations

import contextlib
import logging
import os
import re
from dataclasses import dataclass
from enum import Enum
from pathlib import Path

from quorum.log.atomic import fsync_directory
from quorum.raft.interface import OffsetAndEpoch

logger = logging.getLogger(__name__)

SNAPSHOT_SUFFIX = ".checkpoint"
PARTIAL_SUFFIX = ".checkpoint.part"
DELETED_SUFFIX = ".checkpoint.deleted"
OFFSET_WIDTH = 20
EPOCH_WIDTH = 10
_MAX_OFFSET = 2**63 - 1
_MAX_EPOCH = 2**31 - 1

_NAME = re.compile(rf"^(\d{{{OFFSET_WIDTH}}})-(\d{{{EPOCH_WIDTH}}})(.*)$")


class SnapshotState(Enum):
    """What a snapshot file name says about its content."""

    COMPLETE = "complete"
    PARTIAL = "partial"
    DELETED = "deleted"


@dataclass(frozen=True, slots=True)
class SnapshotFile:
    """A snapshot file found in a directory: its path, id, and whether it is complete."""

    path: Path
    snapshot_id: OffsetAndEpoch
    state: SnapshotState


def check_snapshot_id(snapshot_id: OffsetAndEpoch) -> None:
    """Refuse ids that Kafka's name cannot hold (negative, or wider than int64 / int32)."""
    if not 0 <= snapshot_id.offset <= _MAX_OFFSET or not 0 <= snapshot_id.epoch <= _MAX_EPOCH:
        raise ValueError(f"invalid snapshot id {snapshot_id}: offset must be 0..2^63-1 and epoch 0..2^31-1")


def snapshot_stem(snapshot_id: OffsetAndEpoch) -> str:
    """`<20-digit end offset>-<10-digit epoch>`, Kafka's `Snapshots.filenameFromSnapshotId`."""
    check_snapshot_id(snapshot_id)
    return f"{snapshot_id.offset:0{OFFSET_WIDTH}d}-{snapshot_id.epoch:0{EPOCH_WIDTH}d}"


def snapshot_path(directory: Path | str, snapshot_id: OffsetAndEpoch) -> Path:
    """Where the complete snapshot `snapshot_id` lives in `directory`."""
    return Path(directory) / (snapshot_stem(snapshot_id) + SNAPSHOT_SUFFIX)


def partial_snapshot_path(directory: Path | str, snapshot_id: OffsetAndEpoch) -> Path:
    """Where `snapshot_id` is written or fetched before it is complete."""
    return Path(directory) / (snapshot_stem(snapshot_id) + PARTIAL_SUFFIX)


def parse_snapshot_name(path: Path | str) -> SnapshotFile | None:
    """The snapshot a file name denotes, None for any other file (segments, checkpoints, ...).

    Complete and deleted names must be exact; a partial name may carry Kafka's random infix
    between the id and `.checkpoint.part`.
    """
    path = Path(path)
    match = _NAME.match(path.name)
    if match is None:
        return None
    rest = match.group(3)
    if rest == SNAPSHOT_SUFFIX:
        state = SnapshotState.COMPLETE
    elif rest == DELETED_SUFFIX:
        state = SnapshotState.DELETED
    elif rest.endswith(PARTIAL_SUFFIX):
        state = SnapshotState.PARTIAL
    else:
        return None
    offset, epoch = int(match.group(1)), int(match.group(2))
    if offset > _MAX_OFFSET or epoch > _MAX_EPOCH:
        return None
    return SnapshotFile(path, OffsetAndEpoch(offset, epoch), state)


def snapshot_files(directory: Path | str) -> list[SnapshotFile]:
    """Every snapshot file in `directory` (any state), in name order; [] when it does not exist."""
    directory = Path(directory)
    try:
        names = sorted(os.listdir(directory))
    except FileNotFoundError:
        return []
    return [found for name in names if (found := parse_snapshot_name(directory / name)) is not None]


def snapshot_order(snapshot_id: OffsetAndEpoch) -> tuple[int, int]:
    """Kafka's ordering of snapshot ids (`OffsetAndEpoch.compareTo`): epoch first, then offset.

    In one replica's log both grow together, so this only matters for ids that could not come
    from the same log.
    """
    return snapshot_id.epoch, snapshot_id.offset


def list_snapshots(directory: Path | str) -> list[OffsetAndEpoch]:
    """The ids of the complete snapshots in `directory`, oldest first. Partial and deleted files
    are never listed: their content is not known to be whole."""
    ids = [found.snapshot_id for found in snapshot_files(directory) if found.state is SnapshotState.COMPLETE]
    return sorted(ids, key=snapshot_order)


def latest_snapshot(directory: Path | str) -> OffsetAndEpoch | None:
    """The newest complete snapshot's id, None when there is none."""
    ids = list_snapshots(directory)
    return ids[-1] if ids else None


def delete_snapshots_below(directory: Path | str, offset: int) -> list[OffsetAndEpoch]:
    """Delete the complete snapshots whose end offset is below `offset` (KIP-630: once the log
    start offset passed them, nothing needs them); returns their ids. Durable on return.

    An open `SnapshotReader` on a deleted file keeps reading it (POSIX keeps unlinked files
    alive while open), which is why Kafka's asynchronous `.deleted` renaming is not needed here.
    """
    directory = Path(directory)
    deleted = []
    for snapshot_id in list_snapshots(directory):
        if snapshot_id.offset < offset:
            path = snapshot_path(directory, snapshot_id)
            with contextlib.suppress(FileNotFoundError):
                path.unlink()
                logger.info("%s: deleted, the log start offset is %d", path, offset)
            deleted.append(snapshot_id)
    if deleted:
        fsync_directory(directory)
    return deleted


def clean_partial_snapshots(directory: Path | str) -> list[Path]:
    """Delete the `.checkpoint.part` files a crash left (and Kafka's `.checkpoint.deleted` ones);
    returns their paths. Call it at start-up, before any writer or fetch begins: a part file is
    never complete, so nothing can resume from it."""
    directory = Path(directory)
    removed = []
    for found in snapshot_files(directory):
        if found.state is SnapshotState.COMPLETE:
            continue
        with contextlib.suppress(FileNotFoundError):
            found.path.unlink()
            what = "unfinished snapshot" if found.state is SnapshotState.PARTIAL else "snapshot marked for deletion"
            logger.warning("%s: %s left from before a restart, deleted", found.path, what)
            removed.append(found.path)
    if removed:
        fsync_directory(directory)
    return removed


__all__ = [
    "DELETED_SUFFIX",
    "EPOCH_WIDTH",
    "OFFSET_WIDTH",
    "PARTIAL_SUFFIX",
    "SNAPSHOT_SUFFIX",
    "SnapshotFile",
    "SnapshotState",
    "check_snapshot_id",
    "clean_partial_snapshots",
    "delete_snapshots_below",
    "latest_snapshot",
    "list_snapshots",
    "parse_snapshot_name",
    "partial_snapshot_path",
    "snapshot_files",
    "snapshot_order",
    "snapshot_path",
    "snapshot_stem",
]
