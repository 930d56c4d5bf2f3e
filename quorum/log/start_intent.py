"""The commit point of a log replaced by an empty one above offset 0 with a history below it.

A follower that bootstraps from a remote tier (KIP-405's local-log-start path, KIP-1023's
earliest-pending-upload path) replaces its whole log by an empty one at offset O whose
leader-epoch cache holds the leader's epochs below O and whose producer state is the leader's
producer snapshot at O. That takes several file operations (delete the segments, record the new
start, create the empty segment, rewrite the checkpoint, write `<O>.snapshot`), and a crash in
the middle must leave the old log or the new one, never a mix: so everything the new log is made
of is first written to one file, `log-start-intent`, atomically, and removed once the work is
done. Recovery (`quorum.log.Log`) redoes the work when it finds the file. Until the file exists
the old log is intact; once it exists the new log wins. Layout (text, as Kafka's checkpoints)::

    0                      <- format version
    5120                   <- the new log start offset
    3                      <- number of leader-epoch entries, then "epoch startOffset" lines
    0 0
    1 300
    2 4096
    0a1b...                <- the producer snapshot in hex, or "-" for none

Producer snapshots are Kafka's `<20-digit offset>.snapshot` files (`quorum.wire.producer_snapshot`
bytes) in the log directory: the producer state after every batch below that offset.
"""

from __future__ import annotations

import contextlib
import os
from dataclasses import dataclass
from pathlib import Path

from quorum.log.atomic import atomic_write, fsync_directory, read_text_file
from quorum.log.epoch_cache import EpochEntry, LeaderEpochCache
from quorum.log.errors import CorruptFileError

START_INTENT_NAME = "log-start-intent"
START_INTENT_VERSION = 0
PRODUCER_SNAPSHOT_SUFFIX = ".snapshot"


@dataclass(frozen=True, slots=True)
class StartIntent:
    """An empty log at `offset` with these epoch entries (all below it) and producer snapshot."""

    offset: int
    epochs: tuple[EpochEntry, ...]
    producer_snapshot: bytes | None

    def __post_init__(self) -> None:
        if self.offset < 0:
            raise ValueError(f"negative start offset {self.offset}")
        LeaderEpochCache(self.epochs)  # strictly increasing, not negative
        above = [entry for entry in self.epochs if entry.start_offset >= self.offset]
        if above:
            raise ValueError(f"leader-epoch entries {above} do not start below the new log start offset {self.offset}")


def encode_start_intent(intent: StartIntent) -> bytes:
    lines = [str(START_INTENT_VERSION), str(intent.offset), str(len(intent.epochs))]
    lines += [f"{e.epoch} {e.start_offset}" for e in intent.epochs]
    lines.append("-" if intent.producer_snapshot is None else intent.producer_snapshot.hex())
    return ("\n".join(lines) + "\n").encode("ascii")


def decode_start_intent(text: str, path: Path | str) -> StartIntent:
    """Parse the file's text; CorruptFileError names `path` and what is wrong."""
    lines = text.split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    if len(lines) < 4 or lines[0] != str(START_INTENT_VERSION):
        raise CorruptFileError(path, f"not a version {START_INTENT_VERSION} log start intent ({len(lines)} lines)")
    try:
        offset, count = int(lines[1]), int(lines[2])
        if count < 0 or len(lines) != 4 + count:
            raise ValueError(f"{count} epoch entries do not fit {len(lines)} lines")
        epochs = []
        for line in lines[3 : 3 + count]:
            epoch, start = line.split()
            epochs.append(EpochEntry(int(epoch), int(start)))
        snapshot = None if lines[-1] == "-" else bytes.fromhex(lines[-1])
        return StartIntent(offset, tuple(epochs), snapshot)
    except ValueError as exc:
        raise CorruptFileError(path, str(exc)) from None


def read_start_intent(directory: Path) -> StartIntent | None:
    path = directory / START_INTENT_NAME
    text = read_text_file(path)
    return None if text is None else decode_start_intent(text, path)


def write_start_intent(directory: Path, intent: StartIntent) -> None:
    atomic_write(directory / START_INTENT_NAME, encode_start_intent(intent))


def remove_start_intent(directory: Path) -> None:
    with contextlib.suppress(FileNotFoundError):
        os.unlink(directory / START_INTENT_NAME)
    fsync_directory(directory)


# ---------------------------------------------------------------------------------------------
# Producer snapshot files


def producer_snapshot_path(directory: Path, offset: int) -> Path:
    return directory / f"{offset:020d}{PRODUCER_SNAPSHOT_SUFFIX}"


def producer_snapshot_offsets(directory: Path) -> list[int]:
    """The offsets of the `<offset>.snapshot` files in `directory`, ascending."""
    offsets = []
    for name in os.listdir(directory):
        stem = name.removesuffix(PRODUCER_SNAPSHOT_SUFFIX)
        if name.endswith(PRODUCER_SNAPSHOT_SUFFIX) and len(stem) == 20 and stem.isdigit():
            offsets.append(int(stem))
    return sorted(offsets)


def write_producer_snapshot(directory: Path, offset: int, data: bytes) -> None:
    """Durably write `<offset>.snapshot` (tmp, fsync, rename, fsync the directory)."""
    atomic_write(producer_snapshot_path(directory, offset), data)


def delete_producer_snapshots(directory: Path, keep: int | None = None) -> int:
    """Delete every producer snapshot but the one at `keep`, durably; returns how many went."""
    doomed = [offset for offset in producer_snapshot_offsets(directory) if offset != keep]
    for offset in doomed:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(producer_snapshot_path(directory, offset))
    if doomed:
        fsync_directory(directory)
    return len(doomed)
