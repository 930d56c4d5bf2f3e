"""The control records the core writes and reads: LeaderChangeMessage and the cluster id it carries.

KIP-595's last revision puts the cluster id in the LeaderChangeMessage: the first leader
generates it, every later leader repeats it, and a node caches it in meta.properties once the
record carrying it is committed (the rule in full, and the invariant it keeps: `cluster_id.py`).
Apache Kafka's schema has no such field, so the project carries it in a KIP-482 tagged field
(tag 10595) that Kafka skips.
"""

from __future__ import annotations

import base64
import random
import uuid
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass

from quorum.wire.control_records import (
    ControlRecordError,
    ControlRecordType,
    LeaderChangeMessage,
    decode_control_record,
    encode_control_record,
)
from quorum.wire.records import CorruptRecordError, RecordBatch, build_control_batch, iter_batches

LEADER_CHANGE_CONTENT_VERSION = 0


def generate_cluster_id(rng: random.Random) -> str:
    """A random UUID in Kafka's cluster id format: 22 characters of URL-safe base64, no padding.

    Drawn from the injected generator (so simulations replay), and never starting with '-', which
    Kafka's Uuid.randomUuid also avoids because such an id reads as an option on a command line.
    """
    while True:
        value = uuid.UUID(int=rng.getrandbits(128), version=4)
        text = base64.urlsafe_b64encode(value.bytes).rstrip(b"=").decode("ascii")
        if not text.startswith("-"):
            return text


def build_leader_change_batch(
    base_offset: int,
    epoch: int,
    leader_id: int,
    voters: Sequence[int],
    granting_voters: Sequence[int],
    cluster_id: str | None,
    timestamp: int,
) -> bytes:
    """The control batch a new leader appends first in its epoch."""
    voter = LeaderChangeMessage.fields["voters"].data_class
    granting = LeaderChangeMessage.fields["granting_voters"].data_class
    message = LeaderChangeMessage(
        version=0,
        content_version=LEADER_CHANGE_CONTENT_VERSION,
        leader_id=leader_id,
        voters=[voter(voter_id=v) for v in voters],
        granting_voters=[granting(voter_id=v) for v in granting_voters],
        cluster_id=cluster_id,
    )
    key, value = encode_control_record(message)
    return build_control_batch(key, value, base_offset, epoch, timestamp)


@dataclass(frozen=True, slots=True)
class BatchInfo:
    """What the core needs from a batch header: where it sits and which epoch wrote it."""

    base_offset: int
    next_offset: int
    epoch: int
    size: int
    leader_change: LeaderChangeMessage | None


def scan_batches(data: bytes | bytearray | memoryview) -> Iterator[BatchInfo]:
    """Walk the complete batches of `data`, decoding only control batches (to find LeaderChanges).

    A cut-off last batch ends the walk; a corrupt one raises CorruptRecordError.
    """
    for batch in iter_batches(data):
        yield BatchInfo(batch.base_offset, batch.next_offset, batch.partition_leader_epoch, batch.size_in_bytes,
                        _leader_change(batch))


def _leader_change(batch: RecordBatch) -> LeaderChangeMessage | None:
    if not batch.is_control:
        return None
    for record in batch.records():
        try:
            record_type, message = decode_control_record(record.key, record.value)
        except ControlRecordError:
            continue  # a control record this layer does not read (KRaft voters, markers)
        if record_type is ControlRecordType.LEADER_CHANGE:
            return message
    return None


def find_cluster_id(log_read: Callable[[int, int], bytes], start_offset: int, end_offset: int,
                    chunk_bytes: int = 1 << 16) -> tuple[int, str] | None:
    """The offset and cluster id of the first LeaderChange in a log that carries one, or None.

    Every leader repeats the first leader's id, so the first LeaderChange speaks for the log (one
    without the field was written by a leader that does not carry it, and so were the rest); a
    restarted node reads it to learn an id that may be committed although its meta.properties
    does not have it yet. `log_read(offset, max_bytes)` is RaftLog.read.
    """
    offset = start_offset
    while offset < end_offset:
        data = log_read(offset, chunk_bytes)
        if not data:
            return None
        advanced = offset
        try:
            for info in scan_batches(data):
                if info.leader_change is not None:
                    cluster_id = info.leader_change.cluster_id
                    return None if cluster_id is None else (info.base_offset, cluster_id)
                advanced = info.next_offset
        except CorruptRecordError:
            return None
        if advanced == offset:
            return None
        offset = advanced
    return None
