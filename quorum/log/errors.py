"""What can go wrong with files on disk, each error naming the file and where.

Principle 5 of the design: a corrupt file is refused with its path and byte position, and a bad
append is refused with the reason, before anything is written. Callers tell a refusal to load
(`CorruptLogError`, `CorruptFileError`, `CorruptSnapshotError`) from a refused write
(`InvalidAppendError`, `SnapshotChunkError`) by type, and the snapshot errors that FetchSnapshot
answers with an error code (SNAPSHOT_NOT_FOUND, POSITION_OUT_OF_RANGE) have a type each.
"""

from __future__ import annotations

from pathlib import Path


class LogError(Exception):
    """Base of every error raised by `quorum.log`."""


class InvalidAppendError(LogError, ValueError):
    """An append the log refused as a whole: nothing of it was written."""


class InvalidOffsetError(LogError, ValueError):
    """An offset outside the log, or not on a batch boundary where one is required."""


class _CorruptAt(LogError):
    """Damage at a byte of a file: the message names both, so an operator can look at it."""

    def __init__(self, path: Path | str, position: int | None, reason: str) -> None:
        self.path = Path(path)
        self.position = position
        self.reason = reason
        where = "" if position is None else f" at byte {position}"
        super().__init__(f"{self.path}{where}: {reason}")


class CorruptLogError(_CorruptAt):
    """A log segment or index that cannot be loaded without losing committed data.

    `path` and `position` say which file and which byte, so an operator can look at it.
    """


class CorruptFileError(LogError):
    """A small state file (quorum-state, meta.properties, a checkpoint) that does not parse."""

    def __init__(self, path: Path | str, reason: str) -> None:
        self.path = Path(path)
        self.reason = reason
        super().__init__(f"{self.path}: {reason}")


class OffsetOutOfRangeError(InvalidOffsetError):
    """A read outside the log: below its start offset (deleted, e.g. after a snapshot) or past its end.

    Carries the figures a Fetch handler needs to answer OFFSET_OUT_OF_RANGE (or, for the Raft log,
    to point the follower at a snapshot) without parsing the message.
    """

    def __init__(self, offset: int, start_offset: int, end_offset: int, directory: Path | str) -> None:
        self.offset = offset
        self.start_offset = start_offset
        self.end_offset = end_offset
        if offset < start_offset:
            reason = (
                f"offset {offset} is below the log start offset {start_offset} in {directory}: the records "
                "before the start offset were deleted (a snapshot holds their state)"
            )
        else:
            reason = f"offset {offset} is past the end of the log in {directory}, which ends at offset {end_offset}"
        super().__init__(reason)


class SnapshotError(LogError):
    """Base of the errors about snapshot files (`quorum.log.snapshot`)."""


class CorruptSnapshotError(_CorruptAt, SnapshotError):
    """A snapshot file (complete or fetched) that fails validation; nothing of it was loaded.

    `path` and `position` (a byte offset in the file) say where, as for a corrupt log segment.
    """


class SnapshotNotFoundError(SnapshotError, FileNotFoundError):
    """No complete snapshot with that id: what FetchSnapshot answers with SNAPSHOT_NOT_FOUND."""


class SnapshotExistsError(SnapshotError, FileExistsError):
    """A snapshot with that id is already complete (or being written) in the directory."""


class PositionOutOfRangeError(SnapshotError, ValueError):
    """A FetchSnapshot position outside the snapshot: what FetchSnapshot answers with POSITION_OUT_OF_RANGE."""

    def __init__(self, path: Path | str, position: int, size: int) -> None:
        self.path = Path(path)
        self.position = position
        self.size = size
        super().__init__(f"{self.path}: position {position} is outside the snapshot's {size} bytes (0..{size - 1})")


class SnapshotChunkError(SnapshotError, ValueError):
    """A fetched chunk that does not continue the partial snapshot (wrong position, size or length)."""
