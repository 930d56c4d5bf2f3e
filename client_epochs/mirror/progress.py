"""The replicator's bookkeeping, sans IO: provenance headers, acknowledged offsets, where to resume.

`client_epochs.mirror` drives these with what its clients report; kept apart so that the rules
that decide what is committed and what is skipped (the rules that make the replicator never copy
a record twice and never rewind) can be tested without a cluster:

- Provenance: every copied record carries `client_epochs.source` = "<topic>/<partition>/<offset>"
  of the record it copies (Kafka topic names cannot hold "/", so the split is unambiguous), and
  `client_epochs.source_epochs` = the KIP-232 internal metadata it was read under. The target's
  own log then says how far the copy got, and under which epochs, even when the commit was lost.
- `PartitionProgress`: the source offsets sent to the target in order; the offset to commit is
  the one after the highest *contiguous* acknowledged record, never one past a record still in
  flight or failed, so a commit never claims a record the target may not hold.
- `decide_resume`: after an assignment, the committed offset against the last record the target
  holds from that partition: records beyond the commit that the target already has (the window
  between produce-ack and commit) are skipped, the seek carrying the newer of the two epochs.
"""

from __future__ import annotations

import functools
from collections import deque
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from client_epochs.model import TopicPartition
from quorum.wire.internal_metadata import InternalMetadata, InvalidInternalMetadataError

PROVENANCE_HEADER = "client_epochs.source"
"""Header naming the source record a target record copies: "<topic>/<partition>/<offset>"."""
EPOCHS_HEADER = "client_epochs.source_epochs"
"""Header with the KIP-232 internal metadata JSON the source record was read under."""

Header = tuple[str, bytes | str | None]


class ProvenanceError(ValueError):
    """A provenance header that does not read as "<topic>/<partition>/<offset>"."""


@dataclass(frozen=True, slots=True, order=True)
class Provenance:
    """Where a copied record came from: a source topic, partition and offset."""

    topic: str
    partition: int
    offset: int

    @property
    def tp(self) -> TopicPartition:
        return TopicPartition(self.topic, self.partition)

    def encode(self) -> bytes:
        return f"{self.topic}/{self.partition}/{self.offset}".encode()

    @classmethod
    def parse(cls, value: bytes | str | None) -> Provenance:
        """ProvenanceError, quoting the value, for anything but "<topic>/<partition>/<offset>"."""
        try:
            text = value.decode() if isinstance(value, bytes) else value
            topic, partition, offset = text.rsplit("/", 2)  # type: ignore[union-attr]
            if not topic or not partition.isdigit() or not offset.isdigit():
                raise ValueError
            return cls(topic, int(partition), int(offset))
        except (AttributeError, UnicodeDecodeError, ValueError):
            raise ProvenanceError(f"{PROVENANCE_HEADER} header {value!r} is not <topic>/<partition>/<offset>") from None


def copy_headers(headers: Sequence[Header] | None, source: Provenance,
                 epochs: InternalMetadata | None) -> list[Header]:
    """The source record's headers, minus provenance it carried (a record mirrored twice names its
    nearest source only), plus this copy's provenance and epochs."""
    kept = [(k, v) for k, v in headers or () if k not in (PROVENANCE_HEADER, EPOCHS_HEADER)]
    kept.append((PROVENANCE_HEADER, source.encode()))
    if epochs is not None:
        kept.append((EPOCHS_HEADER, _epochs_header(epochs)))
    return kept


@functools.lru_cache(maxsize=4096)
def _epochs_header(epochs: InternalMetadata) -> bytes:
    """The epochs header's bytes, made once per distinct value: a partition's epochs change only at a
    leader election or a topic change, and JSON-encoding them for every copy was a fifth of the
    replicator's CPU (cProfile, bench_mirror)."""
    return epochs.to_json().encode()


@dataclass(frozen=True, slots=True)
class CopiedRecord:
    """What a target record's headers say about its source; `epochs` None when absent or unreadable."""

    source: Provenance
    epochs: InternalMetadata | None


def read_provenance(headers: Iterable[Header] | None) -> CopiedRecord | None:
    """The provenance of a target record; None for a record without one (another writer's).

    A malformed provenance header raises ProvenanceError: the record claims to be a copy and the
    claim cannot be read, which resuming must not guess about. Unreadable epochs only weaken the
    wait for current metadata, so they read as None.
    """
    source: Provenance | None = None
    epochs: InternalMetadata | None = None
    for key, value in headers or ():
        if key == PROVENANCE_HEADER:
            source = Provenance.parse(value)
        elif key == EPOCHS_HEADER and value is not None:
            try:
                epochs = InternalMetadata.from_json(value.decode() if isinstance(value, bytes) else value)
            except (InvalidInternalMetadataError, UnicodeDecodeError):
                epochs = None
    return None if source is None else CopiedRecord(source, epochs)


def last_copied(records: Iterable[Iterable[Header] | None], tp: TopicPartition) -> CopiedRecord | None:
    """Of the target records given (a target partition's tail), the copy of `tp`'s highest offset.

    Records from other writers or other source partitions are passed over, so a tail shared with
    them still finds this partition's last copy if it lies within the records read.
    """
    best: CopiedRecord | None = None
    for headers in records:
        copied = read_provenance(headers)
        if copied is None or copied.source.tp != tp:
            continue
        if best is None or copied.source.offset > best.source.offset:
            best = copied
    return best


def newest(*epochs: InternalMetadata | None) -> InternalMetadata | None:
    """The newest epochs by KIP-232's order, None when none is known."""
    known = [e for e in epochs if e is not None]
    return max(known) if known else None


@dataclass(frozen=True, slots=True)
class Resume:
    """Where a newly assigned partition starts.

    `seek_to` None: from the committed offset, as the consumer does by itself (its wait for the
    committed epochs applies). Otherwise seek there with `floor` as internal metadata: the target
    already holds the records in between (`skipped` offsets). `note` says why, for the log.
    """

    seek_to: int | None
    floor: InternalMetadata | None
    skipped: int
    note: str


def decide_resume(tp: TopicPartition, committed: int | None, committed_epochs: InternalMetadata | None,
                  copied: CopiedRecord | None, source_start: int = 0) -> Resume:
    """Committed offset vs the target's last copy of `tp`: skip what the target already holds.

    `committed` None: the group never committed `tp`, so the consumer would start at `source_start`
    (the log start, auto.offset.reset=earliest). A target behind the commit (it lost records it had
    acknowledged, or its topic was recreated) is reported, never rewound to.
    """
    start = committed if committed is not None else source_start
    if copied is None:
        return Resume(None, None, 0, f"{tp}: the target holds no copy of it yet; from "
                                     f"{'committed offset' if committed is not None else 'the log start'} {start}")
    after = copied.source.offset + 1
    if after > start:
        return Resume(after, newest(committed_epochs, copied.epochs), after - start,
                      f"{tp}: the target already holds offsets {start}..{after - 1} (copied, not committed "
                      f"before the replicator stopped); resuming at {after}")
    if after < start:
        return Resume(None, None, 0, f"{tp}: the target's last copy is offset {after - 1} but offsets up to "
                                     f"{start - 1} were committed as acknowledged: the target lost records or was "
                                     f"recreated; not rewinding, resuming at {start}")
    return Resume(None, None, 0, f"{tp}: the target holds everything up to committed offset {start}")


@dataclass(slots=True)
class PartitionProgress:
    """One assigned source partition: offsets sent to the target, in order, and what they became.

    `position` is the next source offset to copy: the consumer delivering anything below it (an
    offset reset, a seek back, a fetch from before the resume seek) is not copied again. The
    offset to commit only moves over records the target acknowledged, contiguously from the start.
    """

    position: int | None = None
    """Next source offset to copy; None until the first record (the consumer's own start)."""
    skipped: range = range(0)
    """The offsets the resume seek skipped (already counted as skipped when delivered anyway)."""
    committed: int | None = None
    """The offset last committed for this partition (None: never, by this assignment)."""
    acked_upto: int | None = None
    """The offset after the highest contiguous acknowledged record (a resume point counts)."""
    acked_epoch: int | None = None
    """The source leader epoch of that record, committed with it."""
    failure: str | None = None
    """Why a delivery failed: nothing after it may be committed."""
    _in_flight: deque[int] = field(default_factory=deque)
    _done: dict[int, int | None] = field(default_factory=dict)

    @classmethod
    def resumed(cls, committed: int | None, resume: Resume) -> PartitionProgress:
        """State right after an assignment and its resume decision."""
        if resume.seek_to is None:
            return cls(position=committed, committed=committed, acked_upto=committed)
        return cls(position=resume.seek_to, skipped=range(resume.seek_to - resume.skipped, resume.seek_to),
                   committed=committed, acked_upto=resume.seek_to)

    @property
    def in_flight(self) -> int:
        return len(self._in_flight)

    def admit(self, offset: int) -> str:
        """"copy" an offset at or past the position (it is now in flight); "skipped" one below it
        that the resume already skipped; "rewound" one below it that was copied before."""
        if self.position is not None and offset < self.position:
            return "skipped" if offset in self.skipped else "rewound"
        self.position = offset + 1
        self._in_flight.append(offset)
        return "copy"

    def acknowledged(self, offset: int, leader_epoch: int | None = None) -> None:
        """The target acknowledged the copy of `offset` (delivery callbacks come in any order)."""
        self._done[offset] = leader_epoch
        while self._in_flight and self._in_flight[0] in self._done:
            head = self._in_flight.popleft()
            self.acked_epoch = self._done.pop(head)
            self.acked_upto = head + 1

    def failed(self, offset: int, reason: str) -> None:
        """The target refused or lost the copy of `offset`: commits stop before it for good."""
        if self.failure is None:
            self.failure = f"offset {offset}: {reason}"

    def to_commit(self) -> tuple[int, int | None] | None:
        """(offset, leader epoch) to commit now, None when the commit would not move."""
        if self.acked_upto is None or (self.committed is not None and self.acked_upto <= self.committed):
            return None
        return self.acked_upto, self.acked_epoch

    def lag(self, high_watermark: int | None, low_watermark: int | None = None) -> int | None:
        """Source records not yet read, given the partition's watermarks (None: unknown).

        Before its first record a partition with nothing committed starts at the log start (the
        replicator's auto.offset.reset=earliest, `decide_resume`), `low_watermark`; with no watermarks
        yet (never fetched) its lag is unknown, not 0."""
        if high_watermark is None or high_watermark < 0:
            return None
        start = self.position if self.position is not None else low_watermark
        if start is None or start < 0:
            return None
        return max(0, high_watermark - start)


def total_lag(lags: Iterable[int | None]) -> int | None:
    """A flow's lag: unknown (None, "?") while any assigned partition's is, not the sum of the others:
    summing only the known ones reads a partition assigned but never fetched as caught up, so a flow
    stuck on it would say `lag=0` (a silent wait)."""
    every = list(lags)
    return None if not every or None in every else sum(every)


@dataclass(slots=True)
class PartitionCounts:
    """What happened to one source partition over the replicator's life (kept across rebalances)."""

    replicated: int = 0
    skipped_already_copied: int = 0
    rewind_refused: int = 0
    committed: int | None = None


@dataclass(slots=True)
class MirrorCounts:
    """The replicator's figures, for the status line and the summary."""

    partitions: dict[TopicPartition, PartitionCounts] = field(default_factory=dict)
    stale_metadata_refused: int = 0
    resets: int = 0
    lag: int | None = None
    in_flight: int = 0
    assigned: int = 0

    def of(self, tp: TopicPartition) -> PartitionCounts:
        counts = self.partitions.get(tp)
        if counts is None:
            counts = self.partitions[tp] = PartitionCounts()
        return counts

    @property
    def replicated(self) -> int:
        return sum(c.replicated for c in self.partitions.values())

    @property
    def skipped_already_copied(self) -> int:
        return sum(c.skipped_already_copied for c in self.partitions.values())

    @property
    def rewind_refused(self) -> int:
        return sum(c.rewind_refused for c in self.partitions.values())

    def status_line(self) -> str:
        """One greppable line of name=value pairs; lag "?" while no high watermark is known."""
        lag = "?" if self.lag is None else str(self.lag)
        return (f"client-epochs-mirror status: replicated={self.replicated} "
                f"skipped_already_copied={self.skipped_already_copied} "
                f"stale_metadata_refused={self.stale_metadata_refused} resets={self.resets} "
                f"rewind_refused={self.rewind_refused} lag={lag} in_flight={self.in_flight} "
                f"partitions={self.assigned}")

    def summary(self, reason: str) -> str:
        """The table printed at exit: per partition, then the totals and the cluster-wide figures."""
        rows = [("partition", "replicated", "skipped_already_copied", "rewind_refused", "committed")]
        for tp, c in sorted(self.partitions.items()):
            rows.append((str(tp), str(c.replicated), str(c.skipped_already_copied), str(c.rewind_refused),
                         "-" if c.committed is None else str(c.committed)))
        rows.append(("total", str(self.replicated), str(self.skipped_already_copied), str(self.rewind_refused), ""))
        figures = (("stale_metadata_refused", self.stale_metadata_refused), ("resets", self.resets),
                   ("lag", "?" if self.lag is None else self.lag))
        widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
        widths[0] = max(widths[0], *(len(name) for name, _ in figures))
        lines = [f"client-epochs-mirror summary ({reason})"]
        for row in rows:
            lines.append("  " + "  ".join(cell.ljust(w) if i == 0 else cell.rjust(w)
                                          for i, (cell, w) in enumerate(zip(row, widths, strict=True))).rstrip())
        for name, value in figures:
            lines.append(f"  {name:<{widths[0]}}  {value}")
        return "\n".join(lines)
