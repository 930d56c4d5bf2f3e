"""The leader-epoch cache: at which offset each leader epoch's batches begin.

It answers OffsetForLeaderEpoch / KIP-595 divergence questions ("where does my epoch end in your
log?") without reading the log. The cache itself is sans-IO (a plain object the log updates on
append and truncation); `read_checkpoint` / `write_checkpoint` persist it in Kafka's
`leader-epoch-checkpoint` text layout, so a Kafka tool reads it and the reverse::

    0               <- format version
    2               <- number of entries
    0 0             <- "epoch startOffset", epochs and offsets strictly increasing
    3 150

The checkpoint is an optimisation, never the truth: the log recovers it (drops entries that do
not agree with the batches, rescans the tail) when it is missing or stale after a crash.
"""

from __future__ import annotations

import bisect
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from quorum.log.atomic import atomic_write
from quorum.log.errors import CorruptFileError
from quorum.raft.interface import OffsetAndEpoch

CHECKPOINT_NAME = "leader-epoch-checkpoint"
CHECKPOINT_VERSION = 0
UNDEFINED = OffsetAndEpoch(-1, -1)


@dataclass(frozen=True, slots=True, order=True)
class EpochEntry:
    """Epoch `epoch` begins at `start_offset` (the base offset of its first batch)."""

    epoch: int
    start_offset: int


class LeaderEpochCache:
    """Epoch -> start offset, in increasing order of both."""

    def __init__(self, entries: Iterable[EpochEntry] = ()) -> None:
        self._entries: list[EpochEntry] = []
        for entry in entries:
            if self._entries and not (
                entry.epoch > self._entries[-1].epoch and entry.start_offset > self._entries[-1].start_offset
            ):
                raise ValueError(f"epoch entries must strictly increase: {entry} after {self._entries[-1]}")
            if entry.epoch < 0 or entry.start_offset < 0:
                raise ValueError(f"negative epoch or offset in {entry}")
            self._entries.append(entry)

    @property
    def entries(self) -> tuple[EpochEntry, ...]:
        return tuple(self._entries)

    def __len__(self) -> int:
        return len(self._entries)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, LeaderEpochCache) and self._entries == other._entries

    def __repr__(self) -> str:
        return f"LeaderEpochCache({self._entries!r})"

    @property
    def latest(self) -> EpochEntry | None:
        return self._entries[-1] if self._entries else None

    @property
    def latest_epoch(self) -> int:
        """The highest epoch, -1 when there is none."""
        return self._entries[-1].epoch if self._entries else -1

    def assign(self, epoch: int, start_offset: int) -> bool:
        """Record that `epoch` starts at `start_offset`; returns whether anything changed.

        As Kafka's LeaderEpochFileCache.assign: the same or an older epoch is ignored when it
        starts later than the latest entry (its batches continue that epoch); an entry that would
        break monotonicity replaces the entries it conflicts with. Negative epochs (batches never
        stamped by a leader) are not recorded.
        """
        if epoch < 0:
            return False
        latest = self.latest
        if latest is not None and epoch <= latest.epoch and start_offset >= latest.start_offset:
            return False
        while self._entries and (self._entries[-1].epoch >= epoch or self._entries[-1].start_offset >= start_offset):
            self._entries.pop()
        self._entries.append(EpochEntry(epoch, start_offset))
        return True

    def truncate_from_end(self, end_offset: int) -> bool:
        """Forget epochs that start at or after `end_offset`, after the log was cut there."""
        keep = bisect.bisect_left([e.start_offset for e in self._entries], end_offset)
        changed = keep < len(self._entries)
        del self._entries[keep:]
        return changed

    def truncate_from_start(self, start_offset: int) -> bool:
        """The log now starts at `start_offset`: drop epochs that end before it, as Kafka does,
        and move the start of the epoch that spans it up to `start_offset`."""
        keep = bisect.bisect_right([e.start_offset for e in self._entries], start_offset) - 1
        if keep < 0:
            return False
        spanning = self._entries[keep]
        changed = keep > 0 or spanning.start_offset != start_offset
        self._entries[: keep + 1] = [EpochEntry(spanning.epoch, start_offset)]
        return changed

    def epoch_for_offset(self, offset: int) -> int:
        """The epoch of the batch holding `offset` (-1 before the first entry)."""
        number = bisect.bisect_right([e.start_offset for e in self._entries], offset) - 1
        return self._entries[number].epoch if number >= 0 else -1

    def end_offset_for(self, epoch: int, log_end_offset: int) -> OffsetAndEpoch:
        """The largest epoch <= `epoch` and where it ends, as the RaftLog protocol asks.

        At or above the latest epoch: (log end offset, latest epoch), with epoch 0 for a log
        without epochs. Below every epoch, or for a negative epoch: (-1, -1). Otherwise the end of
        the largest epoch <= `epoch` is the start offset of the next one.
        """
        if epoch < 0:
            return UNDEFINED
        if not self._entries:
            return OffsetAndEpoch(log_end_offset, 0)
        if epoch >= self._entries[-1].epoch:
            return OffsetAndEpoch(log_end_offset, self._entries[-1].epoch)
        number = bisect.bisect_right([e.epoch for e in self._entries], epoch) - 1
        if number < 0:
            return UNDEFINED
        return OffsetAndEpoch(self._entries[number + 1].start_offset, self._entries[number].epoch)


# ---------------------------------------------------------------------------------------------
# The checkpoint file


def encode_checkpoint(entries: Iterable[EpochEntry]) -> bytes:
    entries = list(entries)
    lines = [str(CHECKPOINT_VERSION), str(len(entries))] + [f"{e.epoch} {e.start_offset}" for e in entries]
    return ("\n".join(lines) + "\n").encode("ascii")


def decode_checkpoint(data: bytes, path: Path | str) -> list[EpochEntry]:
    """Parse a checkpoint as Kafka's CheckpointFile does; raises CorruptFileError naming `path`."""
    try:
        text = data.decode("ascii")
    except UnicodeDecodeError as exc:
        raise CorruptFileError(path, f"not ASCII text (byte {exc.start})") from None
    lines = text.split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    if len(lines) < 2:
        raise CorruptFileError(path, f"expected a version and a count line, found {len(lines)} lines")
    if lines[0].strip() != str(CHECKPOINT_VERSION):
        raise CorruptFileError(path, f"unrecognised version {lines[0]!r} (expected {CHECKPOINT_VERSION})")
    try:
        count = int(lines[1])
    except ValueError:
        raise CorruptFileError(path, f"line 2: count {lines[1]!r} is not a number") from None
    if count != len(lines) - 2:
        raise CorruptFileError(path, f"expected {count} entries, found {len(lines) - 2}")
    entries = []
    for number, line in enumerate(lines[2:], start=3):
        fields = line.split()
        try:
            if len(fields) != 2:
                raise ValueError
            entries.append(EpochEntry(int(fields[0]), int(fields[1])))
        except ValueError:
            raise CorruptFileError(path, f"line {number}: {line!r} is not 'epoch offset'") from None
    try:
        LeaderEpochCache(entries)
    except ValueError as exc:
        raise CorruptFileError(path, str(exc)) from None
    return entries


def read_checkpoint(path: Path | str) -> list[EpochEntry] | None:
    """The entries of the checkpoint at `path`, None when there is no file."""
    try:
        data = Path(path).read_bytes()
    except FileNotFoundError:
        return None
    return decode_checkpoint(data, path)


def write_checkpoint(path: Path | str, entries: Iterable[EpochEntry]) -> None:
    """Durably replace the checkpoint (tmp, fsync, rename, fsync the directory)."""
    atomic_write(path, encode_checkpoint(entries))
