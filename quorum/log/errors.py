"""What can go wrong with files on disk, each error naming the file and where.

Principle 5 of the design: a corrupt file is refused with its path and byte position, and a bad
append is refused with the reason, before anything is written. Callers tell a refusal to load
(`CorruptLogError`, `CorruptFileError`) from a refused write (`InvalidAppendError`) by type.
"""

from __future__ import annotations

from pathlib import Path


class LogError(Exception):
    """Base of every error raised by `quorum.log`."""


class InvalidAppendError(LogError, ValueError):
    """An append the log refused as a whole: nothing of it was written."""


class InvalidOffsetError(LogError, ValueError):
    """An offset outside the log, or not on a batch boundary where one is required."""


class CorruptLogError(LogError):
    """A log segment or index that cannot be loaded without losing committed data.

    `path` and `position` say which file and which byte, so an operator can look at it.
    """

    def __init__(self, path: Path | str, position: int | None, reason: str) -> None:
        self.path = Path(path)
        self.position = position
        self.reason = reason
        where = "" if position is None else f" at byte {position}"
        super().__init__(f"{self.path}{where}: {reason}")


class CorruptFileError(LogError):
    """A small state file (quorum-state, meta.properties, a checkpoint) that does not parse."""

    def __init__(self, path: Path | str, reason: str) -> None:
        self.path = Path(path)
        self.reason = reason
        super().__init__(f"{self.path}: {reason}")
