"""What the soak checks at its end, from the clients' event files and the brokers' logs.

- `check_acked`: every record a producer had acknowledged is in its partition at the offset the
  acknowledgement named (anywhere in it, for one acknowledged without an offset), and no value is in
  the topic twice.
- `consumer_rewinds`: a consumer member of a group handed the loop a record below where the group
  stood: below the offset the group had committed for the partition before the member was assigned
  it, or below the member's own position while it held the partition. Skips (a record jumped over)
  are counted too.
- `committed_rewinds`: a group's committed offsets, sampled during the run, went back.
- `replicator_rewinds`: the source offsets (provenance header) the replicator wrote to a target
  partition went back; and which acknowledged records the target lacks or holds twice.
- `compare_replicas`: each partition's batches up to the high watermark, byte for byte, in every
  replica's segment files (read after the cluster stopped).
- `unexpected_errors`: the tracebacks in the nodes' logs (a handler that raised, a task that died).
"""

from __future__ import annotations

import bisect
import time
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from quorum.wire.records import iter_batches

PROVENANCE_HEADER = "client_epochs.source"
QUIET = {"log_level": 3}


UNKNOWN_OFFSET = -1


@dataclass
class Acked:
    records: dict[bytes, tuple[int, int]] = field(default_factory=dict)
    """value -> (partition, offset) of each acknowledged record; the offset is UNKNOWN_OFFSET where the
    client acknowledged the record without one (librdkafka's "implicitly acked by subsequent batch
    success": a retried batch whose answer was lost, known written because a later batch of the
    same idempotent producer succeeded; confluent-kafka reports its offset as None)."""
    failed: int = 0
    by_producer: Counter[str] = field(default_factory=Counter)


def read_acks(files: dict[str, Path]) -> Acked:
    acked = Acked()
    for name, path in files.items():
        for line in path.read_text().splitlines():
            parts = line.split(" ", 3)
            if parts[0] == "a" and len(parts) == 4:
                offset = UNKNOWN_OFFSET if parts[2] == "None" else int(parts[2])
                acked.records[parts[3].encode()] = (int(parts[1]), offset)
                acked.by_producer[name] += 1
            elif parts[0] == "f":
                acked.failed += 1
    return acked


def read_partition(bootstrap: str, topic: str, partition: int, end: int, timeout_s: float = 180.0
                   ) -> list[tuple[int, bytes, dict[str, bytes]]]:
    """(offset, value, headers) of every record of a partition from offset 0 to `end`."""
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "soak-check", "enable.auto.commit": False,
                         **QUIET})
    records: list[tuple[int, bytes, dict[str, bytes]]] = []
    try:
        if end <= 0:
            return records
        consumer.assign([TopicPartition(topic, partition, 0)])
        deadline = time.monotonic() + timeout_s
        position = 0
        while position < end:
            if time.monotonic() > deadline:
                raise TimeoutError(f"reading {topic}-{partition} at {bootstrap}: at offset {position} of {end} "
                                   f"after {timeout_s:.0f} s")
            for message in consumer.consume(1000, 1.0):
                if message.error() is not None:
                    raise RuntimeError(f"reading {topic}-{partition}: {message.error()}")
                if message.offset() >= end:
                    continue
                position = message.offset() + 1
                records.append((message.offset(), message.value(), dict(message.headers() or [])))
    finally:
        consumer.close()
    return records


def end_offsets(bootstrap: str, topic: str, partitions: int) -> list[int]:
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "soak-check", **QUIET})
    try:
        return [consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=30)[1] for p in range(partitions)]
    finally:
        consumer.close()


@dataclass
class RecordCheck:
    acked: int = 0
    checked: int = 0
    lost: int = 0
    """Acknowledged records not at their offset (nor anywhere else)."""
    moved: int = 0
    """Acknowledged records present, but at another offset than the one acknowledged."""
    duplicated: int = 0
    """Values present more than once (acknowledged or not)."""
    duplicated_values: list[bytes] = field(default_factory=list)
    examples: list[str] = field(default_factory=list)


def check_acked(acked: Acked, partitions: dict[int, list[tuple[int, bytes, dict[str, bytes]]]]) -> RecordCheck:
    check = RecordCheck(acked=len(acked.records))
    at: dict[tuple[int, int], bytes] = {}
    where: dict[bytes, tuple[int, int]] = {}
    seen: Counter[bytes] = Counter()
    for partition, records in partitions.items():
        for offset, value, _ in records:
            at[(partition, offset)] = value
            where[value] = (partition, offset)
            seen[value] += 1
    twice = [value for value, count in seen.items() if count > 1]
    check.duplicated = len(twice)
    check.duplicated_values = twice
    check.examples += [f"{value.decode()} is in the topic {seen[value]} times" for value in twice[:5]]
    for value, (partition, offset) in acked.records.items():
        check.checked += 1
        if at.get((partition, offset)) == value:
            continue
        if offset == UNKNOWN_OFFSET and value in where and where[value][0] == partition:
            continue  # acknowledged without an offset: in its partition is all it promised
        if value in where:
            check.moved += 1
            problem = f"{value.decode()} acknowledged at {partition}/{offset}, found at {where[value]}"
        else:
            check.lost += 1
            problem = f"{value.decode()} acknowledged at {partition}/{offset}, not in the topic"
        if len(check.examples) < 5:
            check.examples.append(problem)
    return check


@dataclass(frozen=True, slots=True)
class Copy:
    """One copy of a record in a replica's segment files, with what its producer wrote it under."""

    partition: int
    offset: int
    producer_id: int
    producer_epoch: int
    sequence: int

    def __str__(self) -> str:
        return (f"{self.partition}/{self.offset} (producer {self.producer_id} epoch {self.producer_epoch} "
                f"sequence {self.sequence})")


def copies_of(values: set[bytes], replica_dirs: dict[int, Path], ends: list[int]) -> dict[bytes, list[Copy]]:
    """Where each of `values` lies below the high watermark in one replica of each partition
    (partition -> its directory), read after the cluster stopped."""
    found: dict[bytes, list[Copy]] = defaultdict(list)
    for partition, directory in sorted(replica_dirs.items()):
        for _, raw in replica_batches(directory, ends[partition]):
            (batch,) = iter_batches(raw)
            for index, record in enumerate(batch):
                if record.value in values:
                    found[record.value].append(Copy(partition, record.offset, batch.producer_id,
                                                    batch.producer_epoch, batch.base_sequence + index))
    return found


def written_again_under_a_new_epoch(copies: list[Copy]) -> bool:
    """Copies that one idempotent producer wrote under different epochs: the client bumped its epoch
    and sent a retry that had been written already (librdkafka#4953), which no broker can take for a
    duplicate, as sequences count per epoch. The confluent producer's .err names the refusal it followed."""
    return (len(copies) > 1 and len({c.producer_id for c in copies}) == 1 and copies[0].producer_id >= 0
            and len({c.producer_epoch for c in copies}) > 1)


@dataclass
class ConsumerCheck:
    members: int = 0
    batches: int = 0
    records: int = 0
    commits: int = 0
    rewinds: int = 0
    skips: int = 0
    redelivered: int = 0
    """Records handed over more than once: read again from the committed offset after a rebalance
    whose last commit did not make it (at-least-once, not a rewind)."""
    examples: list[str] = field(default_factory=list)


def consumer_rewinds(files: list[Path]) -> ConsumerCheck:
    """One group's members' event files (see `soak_clients`), judged together (module docstring)."""
    check = ConsumerCheck(members=len(files))
    commits: dict[int, list[tuple[float, int]]] = defaultdict(list)  # partition -> (time, offset), group-wide
    events = []
    for member, path in enumerate(files):
        for line in path.read_text().splitlines():
            parts = line.split()
            if len(parts) < 2:
                continue
            events.append((float(parts[1]), member, parts[0], [int(p) for p in parts[2:]]))
            if parts[0] == "c" and len(parts) == 4:
                commits[int(parts[2])].append((float(parts[1]), int(parts[3])))
                check.commits += 1
    events.sort(key=lambda e: (e[0], e[1]))
    best: dict[int, tuple[list[float], list[int]]] = {}  # partition -> times, running max committed
    for partition, entries in commits.items():
        entries.sort()
        times, highest, top = [], [], -1
        for when, offset in entries:
            top = max(top, offset)
            times.append(when)
            highest.append(top)
        best[partition] = (times, highest)

    def committed_before(partition: int, when: float) -> int:
        times, highest = best.get(partition, ([], []))
        index = bisect.bisect_left(times, when)
        return highest[index - 1] if index else -1

    position: dict[tuple[int, int], int] = {}  # (member, partition) -> the next offset it must hand over
    handed: dict[int, set[int]] = defaultdict(set)  # partition -> offsets handed over by any member
    for when, member, kind, values in events:
        if kind == "assign":
            for partition in values:
                position[(member, partition)] = committed_before(partition, when)
        elif kind == "revoke":
            for partition in values:
                position.pop((member, partition), None)
        elif kind == "b" and len(values) == 4:
            partition, first, last, count = values
            check.batches += 1
            check.records += count
            handed[partition].update(range(first, last + 1))
            expected = position.get((member, partition), -1)
            if expected >= 0 and first < expected:
                check.rewinds += 1
                if len(check.examples) < 5:
                    check.examples.append(f"member {member}: partition {partition} handed over from {first}, "
                                          f"below {expected}")
            elif expected >= 0 and first > expected and (member, partition) in position:
                check.skips += 1
                if len(check.examples) < 5:
                    check.examples.append(f"member {member}: partition {partition} jumped from {expected} to {first}")
            position[(member, partition)] = last + 1
    check.redelivered = check.records - sum(len(offsets) for offsets in handed.values())
    return check


def committed_rewinds(samples: list[dict[int, int]]) -> int:
    """Times a partition's committed offset in one sample is below the one before it (-1: none yet)."""
    rewinds = 0
    last: dict[int, int] = {}
    for sample in samples:
        for partition, offset in sample.items():
            if offset >= 0 and offset < last.get(partition, -1):
                rewinds += 1
            if offset >= 0:
                last[partition] = offset
    return rewinds


@dataclass
class ReplicatorCheck:
    copied: int = 0
    rewinds: int = 0
    missing: int = 0
    duplicated: int = 0
    misplaced: int = 0


def replicator_check(topic: str, acked: Acked, target: dict[int, list[tuple[int, bytes, dict[str, bytes]]]]
                     ) -> ReplicatorCheck:
    check = ReplicatorCheck()
    seen: Counter[bytes] = Counter()
    for partition, records in target.items():
        previous = -1
        for _, value, headers in records:
            check.copied += 1
            seen[value] += 1
            parts = (headers.get(PROVENANCE_HEADER) or b"").decode().split("/")
            if len(parts) != 3 or parts[0] != topic or int(parts[1]) != partition:
                check.misplaced += 1
                continue
            offset = int(parts[2])
            if offset < previous:
                check.rewinds += 1
            previous = offset
    check.duplicated = sum(1 for count in seen.values() if count > 1)
    check.missing = sum(1 for value in acked.records if value not in seen)
    return check


@dataclass
class ReplicaCheck:
    partitions: int = 0
    replicas: int = 0
    batches: int = 0
    bytes: int = 0
    mismatches: list[str] = field(default_factory=list)


def replica_batches(directory: Path, end: int) -> list[tuple[int, bytes]]:
    """(base offset, bytes) of each batch below `end` in the segment files of one replica."""
    batches: list[tuple[int, bytes]] = []
    for segment in sorted(directory.glob("*.log")):
        data = segment.read_bytes()
        for batch in iter_batches(data):
            if batch.base_offset >= end:
                return batches
            batches.append((batch.base_offset, data[batch.position:batch.position + batch.size_in_bytes]))
    return batches


def compare_replicas(replica_dirs: dict[int, dict[int, Path]], ends: list[int]) -> ReplicaCheck:
    """`replica_dirs`: partition -> broker -> that replica's directory; `ends`: the high watermarks."""
    check = ReplicaCheck()
    for partition, dirs in sorted(replica_dirs.items()):
        check.partitions += 1
        end = ends[partition]
        copies = {broker: replica_batches(path, end) for broker, path in dirs.items()}
        check.replicas += len(copies)
        reference_broker = min(copies)
        reference = copies[reference_broker]
        check.batches += len(reference)
        check.bytes += sum(len(b) for _, b in reference)
        for broker, batches in copies.items():
            last = batches[-1][1] if batches else b""
            reaches = bool(batches) and _next_offset(last) == end if end else not batches
            if not reaches:
                check.mismatches.append(f"partition {partition}: broker {broker}'s log does not end a batch at the "
                                        f"high watermark {end} (last batch: "
                                        f"{batches[-1][0] if batches else 'none'})")
            if batches != reference:
                first = next((i for i, (a, b) in enumerate(zip(batches, reference, strict=False)) if a != b),
                             min(len(batches), len(reference)))
                check.mismatches.append(f"partition {partition}: broker {broker} differs from broker "
                                        f"{reference_broker} from batch {first} on")
    return check


def _next_offset(batch: bytes) -> int:
    (parsed,) = list(iter_batches(batch))
    return parsed.next_offset


def sample_committed(fetcher: Any, group: str, topic: str, partitions: int) -> dict[int, int]:
    from client_epochs.model import TopicPartition

    keys = [TopicPartition(topic, p) for p in range(partitions)]
    got = fetcher.fetch(group, keys, timeout=5)
    return {k.partition: got[k].offset for k in keys}


def unexpected_errors(logs: dict[int, Path]) -> list[str]:
    """Each traceback in the nodes' logs, as "node N: <the log line before it> / <its last line>"."""
    found: list[str] = []
    for node, path in sorted(logs.items()):
        if not path.exists():
            continue
        lines = path.read_text(errors="replace").splitlines()
        for index, line in enumerate(lines):
            if not line.startswith("Traceback"):
                continue
            end = index + 1
            while end < len(lines) and (lines[end].startswith((" ", "\t")) or not lines[end].strip()):
                end += 1
            last = lines[end] if end < len(lines) else "(cut off)"
            found.append(f"node {node}: {lines[index - 1][:160] if index else ''} / {last[:200]}")
    return found
