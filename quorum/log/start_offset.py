"""The durable log start offset of one partition log: `log-start-offset` in its directory.

A log may start above its first segment's base offset: after a snapshot (KIP-630) the records
below the snapshot's end offset are deleted, but only whole segments can go, so the offset
where the log logically starts must be written down, or a restart would serve the deleted
records again. Apache Kafka keeps these offsets for all partitions of a log dir in one
`log-start-offset-checkpoint` file that its LogManager writes; here each log owns one small file
in its own directory, so a `Log` needs no shared state, in Kafka's checkpoint text layout
(a version line, then the value)::

    0
    5120

It is replaced atomically (tmp, fsync, rename, fsync the directory) and written *before* the
segments below it are deleted, so after a crash the file is never behind the segments.
"""

from __future__ import annotations

from pathlib import Path

from quorum.log.atomic import atomic_write, read_text_file
from quorum.log.errors import CorruptFileError

START_OFFSET_NAME = "log-start-offset"
START_OFFSET_VERSION = 0
_MAX_OFFSET = 2**63 - 1


def encode_start_offset(offset: int) -> bytes:
    return f"{START_OFFSET_VERSION}\n{offset}\n".encode("ascii")


def decode_start_offset(text: str, path: Path | str) -> int:
    """Parse the file's text; CorruptFileError names `path` and what is wrong."""
    lines = text.split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    if len(lines) != 2:
        raise CorruptFileError(path, f"expected a version line and an offset line, found {len(lines)} lines")
    if lines[0].strip() != str(START_OFFSET_VERSION):
        raise CorruptFileError(path, f"unrecognised version {lines[0]!r} (expected {START_OFFSET_VERSION})")
    digits = lines[1].strip()
    if not (digits.isascii() and digits.isdigit()):
        raise CorruptFileError(path, f"line 2: {lines[1]!r} is not an offset")
    offset = int(digits)
    if offset > _MAX_OFFSET:
        raise CorruptFileError(path, f"line 2: {offset} is beyond the largest offset")
    return offset


def read_start_offset(path: Path | str) -> int | None:
    """The recorded start offset, None when no file was written (the log starts at its first segment)."""
    text = read_text_file(path)
    return None if text is None else decode_start_offset(text, path)


def write_start_offset(path: Path | str, offset: int) -> None:
    """Durably replace the recorded start offset."""
    if offset < 0:
        raise ValueError(f"negative start offset {offset}")
    atomic_write(path, encode_start_offset(offset))
