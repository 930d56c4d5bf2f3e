"""Replace a small file so that after a crash it holds either the old or the new bytes, never a mix.

The sequence is the one Kafka uses for quorum-state and checkpoints (write `<name>.tmp`, fsync it,
rename over the target, fsync the directory): the rename is atomic, the first fsync makes the
renamed file's data durable, and the directory fsync makes the rename itself durable, without
which a crash could bring back the old file after the new one was acknowledged.
"""

from __future__ import annotations

import contextlib
import os
from pathlib import Path

from quorum.log.errors import CorruptFileError

TMP_SUFFIX = ".tmp"


def fsync_directory(directory: Path | str) -> None:
    """Make creations, renames and deletions of entries in `directory` durable."""
    fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_all(fd: int, data: bytes | bytearray | memoryview, position: int | None = None) -> None:
    """Write every byte: os.write and os.pwrite may write less than asked (a full disk, a signal)."""
    view = memoryview(data)
    while view:
        written = os.write(fd, view) if position is None else os.pwrite(fd, view, position)
        if written <= 0:
            raise OSError(f"write returned {written}")
        view = view[written:]
        if position is not None:
            position += written


def atomic_write(path: Path | str, data: bytes) -> None:
    """Durably replace `path` with `data` (tmp, fsync, rename, fsync the directory)."""
    path = Path(path)
    tmp = path.with_name(path.name + TMP_SUFFIX)
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        try:
            write_all(fd, data)
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    fsync_directory(path.parent)


def read_text_file(path: Path | str) -> str | None:
    """A small state file's UTF-8 text; None when it does not exist. Undecodable bytes are refused
    with the path and the byte, because a state file that half-reads is worse than none."""
    try:
        data = Path(path).read_bytes()
    except FileNotFoundError:
        return None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise CorruptFileError(path, f"not UTF-8 text (byte {exc.start})") from None
