"""Which remote-tier work a partition needs now: the leader's upload and retention task, sans-IO.

Kafka's RemoteLogManager runs, for each partition it leads, a task every
`remote.log.manager.task.interval.ms`: copy the segments that are ready, expire remote segments
past `retention.*`, and clean up what an earlier leader left half done. `plan` is that decision,
a pure function of what the partition and its remote metadata look like now; the shell
(`tiered_follower.remote_log_manager`) carries the steps out in order, stopping at the first failure.

* Only the leader acts; a follower only follows the metadata (it deletes nothing remote).
* Cleanup first: a segment left in COPY_SEGMENT_STARTED by another leader (or by this broker
  before a restart) was never committed; its objects are deleted and it goes through
  DELETE_SEGMENT_STARTED to DELETE_SEGMENT_FINISHED. A DELETE_SEGMENT_STARTED left behind is
  finished the same way.
* Uploads: rolled segments (never the active one) that lie wholly below the high watermark and
  hold offsets above the highest uploaded offset, in offset order; none with KIP-950's
  `remote.log.copy.disable` (what is uploaded stays readable and expires as before).
* Retention over the whole log, local plus remote (KIP-405): remote segments, oldest first, while
  their largest timestamp is older than `retention.ms`, or while the log without them still holds
  `retention.bytes` (remote bytes plus the local bytes not yet uploaded). Deleting them moves the
  log start offset.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from quorum.broker.remote_tier import RemoteLogState, RemoteSegmentMetadata, RemoteSegmentState


@dataclass(frozen=True, slots=True)
class LocalSegment:
    """A rolled local segment, as `quorum.log.log.SegmentFiles` describes it."""

    base_offset: int
    next_offset: int
    size: int
    max_timestamp: int


@dataclass(frozen=True, slots=True)
class PartitionNow:
    """What the plan looks at."""

    broker_id: int
    is_leader: bool
    high_watermark: int
    rolled: Sequence[LocalSegment]
    retention_ms: int | None
    retention_bytes: int | None
    now_ms: int
    copying: frozenset[object] = frozenset()
    """Segment ids this broker is copying right now (not to be cleaned up under its feet)."""
    copy_disabled: bool = False
    """KIP-950's `remote.log.copy.disable`: no uploads; cleanup and expiration go on."""


@dataclass(frozen=True, slots=True)
class CleanUp:
    """Delete an unfinished copy's objects (or finish a deletion) and record DELETE_SEGMENT_*."""

    segment: RemoteSegmentMetadata


@dataclass(frozen=True, slots=True)
class Upload:
    segment: LocalSegment


@dataclass(frozen=True, slots=True)
class Expire:
    """Delete a committed remote segment past `retention.*`; `reason` is logged."""

    segment: RemoteSegmentMetadata
    reason: str


Step = CleanUp | Upload | Expire


def plan(now: PartitionNow, remote: RemoteLogState) -> list[Step]:
    """The steps for one run of the task; see the module docstring."""
    if not now.is_leader or not remote.loaded:
        return []
    steps: list[Step] = []
    for segment in remote.segments(RemoteSegmentState.COPY_SEGMENT_STARTED, RemoteSegmentState.DELETE_SEGMENT_STARTED):
        if segment.segment_id not in now.copying:
            steps.append(CleanUp(segment))
    steps += uploads(now, remote)
    steps += expirations(now, remote)
    return steps


def uploads(now: PartitionNow, remote: RemoteLogState) -> list[Upload]:
    uploaded = remote.highest_uploaded_offset
    assert uploaded is not None
    if now.copy_disabled:
        return []
    return [Upload(segment) for segment in now.rolled
            if segment.next_offset > uploaded + 1 and segment.next_offset <= now.high_watermark
            and segment.next_offset > segment.base_offset]


def expirations(now: PartitionNow, remote: RemoteLogState) -> list[Expire]:
    finished = list(remote.finished)
    expired: list[Expire] = []
    by_time = 0
    if now.retention_ms is not None:
        for segment in finished:
            if now.now_ms - segment.max_timestamp_ms <= now.retention_ms:
                break
            by_time += 1
    by_size = 0
    if now.retention_bytes is not None:
        uploaded = remote.highest_uploaded_offset
        uploaded = -1 if uploaded is None else uploaded  # not `or -1`: 0 is an uploaded offset
        local_only = sum(s.size for s in now.rolled if s.base_offset > uploaded)
        excess = remote.size_in_bytes + local_only - now.retention_bytes
        for segment in finished:
            if excess - segment.size_in_bytes < 0:
                break
            excess -= segment.size_in_bytes
            by_size += 1
    for number, segment in enumerate(finished[:max(by_time, by_size)]):
        reason = (f"retention.ms={now.retention_ms}: its largest timestamp {segment.max_timestamp_ms} is older"
                  if number < by_time else f"retention.bytes={now.retention_bytes}: the log is larger")
        expired.append(Expire(segment, reason))
    return expired
