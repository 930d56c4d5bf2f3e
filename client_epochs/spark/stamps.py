"""The `kafka_epochs` sink's exactly-once rule, sans-IO: the origin stamp on every record, and how a task
finds on the target what an earlier attempt of itself already wrote.

Every record the sink writes carries one header, `kafka_epochs.origin`, naming where it came from: the
streaming query's id (kept in its checkpoint, so the same after a restart), the micro-batch, the Spark
partition the task writes and the record's place in that task's input (its sequence). A task is the
only writer of its stamps: an earlier attempt of the same task (a task retry, a task run again after its
executor was lost, the batch run again after the query restarted from its checkpoint) reads the same
input in the same order, so the same record gets the same stamp.

The stamp is binary, because it is on every record: the header and its value are some 30 bytes where
the text form was some 75 (a 100-byte record grew 40%, and the broker, the producer and every reader
of the target pay per byte), and the writer makes a batch's stamps in one C-level pass
(`TaskOrigin.stamps`). Its value: a format byte (1), the first 8 bytes of the BLAKE2b digest of the
query id, the batch id and the Spark partition as unsigned LEB128 varints, then the sequence as a
big-endian unsigned integer filling the rest (4 bytes, 8 from 2**32 on). Records written before it
carry `client_epochs.spark.origin` = "<query id>/<batch id>/<task>/<sequence>" in text, and the scan
reads both: a query restarted from its checkpoint after an upgrade finds its earlier attempts' records
in the old form on the target.

Before a task writes its first record to a topic, it reads the tail of every partition of that topic
(`TailScan`) and keeps the sequences stamped with its own (query, batch, task) (`Written`); a record
whose sequence is there is not written again. How far back: batch b of a query starts only after
batch b-1 committed, and a batch commits only after every record of it was acknowledged, so in each
partition every record of batch b lies after every acknowledged record of the query's earlier
batches. The scan of a partition goes back from its high watermark, a chunk at a time, until it reads
a record of the same query with a lower batch id, or the log start, or `limit` records.

The one remaining window: records an earlier attempt had sent that the target had not yet made
visible (received, or appended but below the high watermark) when the new attempt read the tail. The
new attempt writes them again. A dead attempt's in-flight requests land within the broker's request
handling and the followers' fetch; a task that fails by itself flushes its producer before it fails,
so only an attempt that died (executor `kill -9`) leaves such requests. The same reasoning also
bounds what is outside the rule: more than `limit` records of other writers after the query's last
record in a partition (the scan stops there), two attempts of one task at once (`spark.speculation`
must stay false, its default; a stopped query's cancelled tasks are waited for by the sink's abort,
`abortWaitMs`), an input that is not the same on a re-run (`Written.check` refuses
a record whose stamp is on the target with other bytes: NonDeterministicInputError), and two queries
whose ids share a 64-bit digest writing the same topic (odds of 2**-64 a pair; `Written.check`
refuses other bytes there too).

Nothing here opens a socket: `client_epochs.spark.sink` reads and writes.
"""

from __future__ import annotations

import hashlib
import zlib
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from quorum.wire.origin_stamp import (
    DIGEST_BYTES,
    STAMP_FORMAT,
    StampBytesError,
    decode_stamp,
    encode_stamp,
    pack_stamps,
    stamp_head,
)

ORIGIN_HEADER = "kafka_epochs.origin"
"""The header naming where a record written by the sink came from, in the binary form (the module's)."""
TEXT_ORIGIN_HEADER = "client_epochs.spark.origin"
"""The header of records written before the binary stamp: "<query>/<batch>/<task>/<sequence>", read only."""
ORIGIN_HEADERS = frozenset({ORIGIN_HEADER, TEXT_ORIGIN_HEADER})

Header = tuple[str, bytes | str | None]


class OriginError(ValueError):
    """An origin header whose value is not a stamp (either form); the message quotes it."""


def query_digest(query: str) -> bytes:
    """What a binary stamp carries of the query id: the first 8 bytes of its BLAKE2b digest."""
    return hashlib.blake2b(query.encode(), digest_size=DIGEST_BYTES).digest()


@dataclass(frozen=True, slots=True)
class TaskOrigin:
    """One task's writes: a query (its id, or a batch write's own id), a batch and a Spark partition."""

    query: str
    batch: int
    task: int
    digest: bytes = field(init=False, repr=False, compare=False)
    """`query_digest(query)`, what the binary stamps carry."""
    _prefix: bytes = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if not self.query or "/" in self.query:
            raise OriginError(f"query id {self.query!r} must be non-empty and hold no '/'")
        if self.batch < 0 or self.task < 0:
            raise OriginError(f"batch {self.batch} and task {self.task} must be 0 or more")
        digest = query_digest(self.query)
        object.__setattr__(self, "digest", digest)
        object.__setattr__(self, "_prefix", stamp_head(digest, self.batch, self.task))

    def stamp(self, sequence: int) -> bytes:
        """The binary stamp of this task's record `sequence`."""
        return self.stamps(sequence, 1)[0]

    def stamps(self, first: int, count: int) -> list[bytes]:
        """The stamps of sequences [first, first + count), made by one `map` of a struct packer (C speed,
        no Python step per record): a sequence below 2**32 in 4 bytes, from there on in 8."""
        if first < 0 or count < 0:
            raise OriginError(f"sequences from {first}, {count} of them: both must be 0 or more")
        return pack_stamps(self._prefix, first, count)

    def text(self, sequence: int) -> str:
        """The record's stamp in text, "<query>/<batch>/<task>/<sequence>": for messages, and the form
        records written before the binary stamp carry (`TEXT_ORIGIN_HEADER`)."""
        return f"{self.query}/{self.batch}/{self.task}/{sequence}"


@dataclass(frozen=True, slots=True)
class Origin:
    """Where one written record came from, as its stamp tells: of the query only its digest."""

    query_digest: bytes
    batch: int
    task: int
    sequence: int

    def encode(self) -> bytes:
        """The binary stamp (sequence in 4 bytes below 2**32, else 8)."""
        return encode_stamp(self.query_digest, self.batch, self.task, self.sequence)

    @classmethod
    def parse(cls, value: bytes | str | None) -> Origin:
        """A binary stamp (`ORIGIN_HEADER`'s value); OriginError, quoting the value, for anything else."""
        if not isinstance(value, bytes):
            raise OriginError(f"{ORIGIN_HEADER} header {value!r} is not a format-{STAMP_FORMAT} origin stamp")
        try:
            return cls(*decode_stamp(value))
        except StampBytesError as exc:
            raise OriginError(f"{ORIGIN_HEADER} header {value!r}: {exc}") from None

    @classmethod
    def parse_text(cls, value: bytes | str | None) -> Origin:
        """A text stamp (`TEXT_ORIGIN_HEADER`'s value, "<query>/<batch>/<task>/<sequence>"); OriginError,
        quoting the value, for anything else."""
        try:
            text = value.decode() if isinstance(value, bytes) else value
            query, batch, task, sequence = text.split("/")  # type: ignore[union-attr]
            if not query or not (batch.isdigit() and task.isdigit() and sequence.isdigit()):
                raise ValueError
            return cls(query_digest(query), int(batch), int(task), int(sequence))
        except (AttributeError, UnicodeDecodeError, ValueError):
            raise OriginError(
                f"{TEXT_ORIGIN_HEADER} header {value!r} is not <query>/<batch>/<task>/<sequence>"
            ) from None


def origin_of(headers: Iterable[Header] | None) -> Origin | None:
    """The origin stamp among a record's headers, in either form; None for a record without one (another
    writer's)."""
    for key, value in headers or ():
        if key == ORIGIN_HEADER:
            return Origin.parse(value)
        if key == TEXT_ORIGIN_HEADER:
            return Origin.parse_text(value)
    return None


def stamped(headers: Sequence[Header] | None, stamp: bytes) -> list[Header]:
    """The user's headers, minus an origin stamp they carry in either form (a record copied from a topic
    this sink wrote names its nearest writer only), plus this record's stamp."""
    kept = [(k, v) for k, v in headers or () if k not in ORIGIN_HEADERS]
    kept.append((ORIGIN_HEADER, stamp))
    return kept


def digest(key: bytes | str | None, value: bytes | str | None) -> int:
    """CRC-32 of a record's key and value, what a re-run's record is compared with."""
    crc = zlib.crc32(b"k" if key is None else b"K" + (key.encode() if isinstance(key, str) else key))
    return zlib.crc32(b"v" if value is None else b"V" + (value.encode() if isinstance(value, str) else value), crc)


class NonDeterministicInputError(RuntimeError):
    """A task run again got other bytes for a sequence an earlier attempt wrote: its input is not the same
    on a re-run, so skipping by sequence would lose a record. Named: the stamp and both digests."""

    def __init__(self, origin: TaskOrigin, sequence: int, written: int, now: int) -> None:
        super().__init__(
            f"record {origin.text(sequence)} is on the target with key+value CRC {written:#010x} but the "
            f"re-run gives CRC {now:#010x}: the query's input differs between attempts of a batch "
            "(the sink's exactly-once needs a replayable, deterministic input, as Spark's own sinks)"
        )
        self.origin = origin
        self.sequence = sequence


@dataclass(slots=True)
class Written:
    """The sequences of one task that are on the target already, with their key+value digests."""

    origin: TaskOrigin
    digests: dict[int, int] = field(default_factory=dict)

    def add(self, sequence: int, record_digest: int) -> None:
        self.digests[sequence] = record_digest

    def check(self, sequence: int, key: bytes | str | None, value: bytes | str | None) -> bool:
        """True when `sequence` is on the target (skip it), False when it must be written;
        NonDeterministicInputError when it is there with other bytes."""
        written = self.digests.get(sequence)
        if written is None:
            return False
        now = digest(key, value)
        if now != written:
            raise NonDeterministicInputError(self.origin, sequence, written, now)
        return True

    def __len__(self) -> int:
        return len(self.digests)


@dataclass(frozen=True, slots=True)
class ScannedRecord:
    """What the scan needs of one target record: where it is, its headers, its key and value."""

    partition: int
    offset: int
    headers: Sequence[Header] | None
    key: bytes | None
    value: bytes | None


@dataclass(slots=True)
class _PartitionScan:
    low: int
    next_end: int
    """The scan reads [.., next_end) next: it goes back from the high watermark."""
    step: int = 1
    scanned: int = 0
    done: bool = False
    why: str = ""


class TailScan:
    """Which records of a topic's partitions an earlier attempt of `origin` wrote (the module's rule).

    `bounds` maps each partition to its (log start, high watermark). The driver of the scan asks
    `reads()` for the [start, end) ranges to read next (`first` records back, then twice as many each
    time up to `chunk`), feeds every record of them to `record()`,
    calls `range_read()` once a range is read to its end, and asks again until `reads()` is empty.
    `written` then holds what the task must not write again.
    """

    def __init__(
        self,
        origin: TaskOrigin,
        bounds: Mapping[int, tuple[int, int]],
        *,
        chunk: int = 2000,
        limit: int = 100_000,
        first: int = 64,
    ) -> None:
        if chunk < 1 or limit < 1 or first < 1:
            raise ValueError(f"first ({first}), chunk ({chunk}) and limit ({limit}) must be positive")
        self.origin = origin
        self.chunk = chunk
        self.limit = limit
        self.written = Written(origin)
        self._partitions = {
            p: _PartitionScan(low, high, min(first, chunk), done=high <= low, why="empty" if high <= low else "")
            for p, (low, high) in bounds.items()
        }
        self._pending: dict[int, tuple[int, int]] = {}
        self._stop_seen: set[int] = set()

    def reads(self) -> dict[int, tuple[int, int]]:
        """Partition -> [start, end) to read now; empty when the scan is over."""
        for p, scan in self._partitions.items():
            if scan.done or p in self._pending:
                continue
            size = min(scan.step, self.limit - scan.scanned)
            start = max(scan.low, scan.next_end - size)
            self._pending[p] = (start, scan.next_end)
        return dict(self._pending)

    def record(self, record: ScannedRecord) -> None:
        """One record of a pending range (records outside the ranges asked for are ignored)."""
        pending = self._pending.get(record.partition)
        if pending is None or not pending[0] <= record.offset < pending[1]:
            return
        origin = origin_of(record.headers)
        if origin is None or origin.query_digest != self.origin.digest:
            return
        if origin.batch < self.origin.batch:
            self._stop_seen.add(record.partition)
        elif origin.batch == self.origin.batch and origin.task == self.origin.task:
            self.written.add(origin.sequence, digest(record.key, record.value))

    def range_read(self, partition: int) -> None:
        """The pending range of `partition` was read to its end: go further back, or stop."""
        start, end = self._pending.pop(partition)
        scan = self._partitions[partition]
        scan.scanned += end - start
        scan.next_end = start
        scan.step = min(scan.step * 2, self.chunk)
        if partition in self._stop_seen:
            scan.done, scan.why = True, "an earlier batch of the query"
        elif start <= scan.low:
            scan.done, scan.why = True, "the log start"
        elif scan.scanned >= self.limit:
            scan.done, scan.why = True, f"the scan limit ({self.limit} records)"

    @property
    def done(self) -> bool:
        return all(scan.done for scan in self._partitions.values())

    def stopped_at(self) -> dict[int, str]:
        """Why each partition's scan stopped (for the log; "the scan limit" is the rule's blind spot)."""
        return {p: scan.why for p, scan in self._partitions.items()}

    def scanned(self) -> int:
        return sum(scan.scanned for scan in self._partitions.values())
