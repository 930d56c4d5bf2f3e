"""What the broker's read path (Fetch, ListOffsets, OffsetForLeaderEpoch) needs of a hosted partition.

The write path (`quorum.broker.replica_manager`: partition logs, Produce) implements these
protocols; the read path (`quorum.broker.fetch`, `quorum.broker.list_offsets`) only depends on
them, so either side can change its insides without the other noticing.

Offsets follow Kafka: `log_start_offset` is the first offset still in the log, `log_end_offset`
the next offset to be written, `high_watermark` the first offset not yet committed to every
in-sync replica (what consumers may read up to), `last_stable_offset` the first offset of an
open transaction (this cluster has no transactions, so it equals the high watermark).
"""

from __future__ import annotations

import asyncio
import uuid
from typing import TYPE_CHECKING, Protocol

from quorum.broker.log_answers import EpochEndOffset, TimestampOffset

if TYPE_CHECKING:
    from quorum.broker.remote_tier import RemoteLogState
    from quorum.wire.spliced import FileRecords


class ServedPartition(Protocol):
    """One partition this broker hosts (leader or follower)."""

    topic: str
    partition: int
    topic_id: uuid.UUID

    @property
    def is_leader(self) -> bool: ...

    @property
    def leader_epoch(self) -> int: ...

    @property
    def log_start_offset(self) -> int: ...

    @property
    def local_log_start_offset(self) -> int:
        """The first offset on this broker's disk: the log start offset unless a remote tier
        holds the head of the log (KIP-405)."""
        ...

    @property
    def remote(self) -> RemoteLogState | None:
        """The remote tier's view of the partition's uploaded segments; None when not tiered."""
        ...

    @property
    def log_end_offset(self) -> int: ...

    @property
    def high_watermark(self) -> int: ...

    @property
    def last_stable_offset(self) -> int: ...

    def read(self, offset: int, max_bytes: int, upto: int) -> bytes:
        """Whole record batches from the one holding `offset`, none at or past `upto`; at most
        `max_bytes`, except that the first batch is returned whole however large (KIP-74), so a
        consumer always makes progress. b"" when `offset` == `upto`. Raises OffsetOutOfRange
        when `offset` is below the log start or above the log end."""
        ...

    def read_records(self, offset: int, max_bytes: int, upto: int) -> bytes | FileRecords:
        """What `read` returns, or the same bytes as a span of a file that is not read yet
        (`quorum.wire.spliced.FileRecords`, which the caller closes): what Fetch answers with."""
        ...

    def end_offset_for_epoch(self, leader_epoch: int) -> EpochEndOffset:
        """KIP-101/279: the largest epoch <= `leader_epoch` and the offset where it ended (the log
        end offset for the current epoch); (-1, -1) when the log knows no such epoch."""
        ...

    def offset_for_timestamp(self, timestamp: int) -> TimestampOffset | None:
        """The first offset whose record timestamp is >= `timestamp`, found by the time index; None
        when every record is older."""
        ...

    def max_timestamp(self) -> TimestampOffset | None:
        """KIP-734 (ListOffsets -3): the record with the largest timestamp and its offset; None when empty."""
        ...


class PartitionLookup(Protocol):
    """The partitions a broker hosts, by name or by topic id (Fetch v13+ names topics by id)."""

    def get(self, topic: str, partition: int) -> ServedPartition | None: ...

    def get_by_id(self, topic_id: uuid.UUID, partition: int) -> ServedPartition | None: ...


class AppendNotifier:
    """Wakes Fetch requests that wait for data (MaxWaitMs, MinBytes) when a partition grows or
    its high watermark moves. The write path calls `appended()`; waiters call `wait()` and then
    look again, so a wake-up that finds nothing new just waits again."""

    def __init__(self) -> None:
        self._event = asyncio.Event()

    def appended(self) -> None:
        self._event.set()
        self._event = asyncio.Event()

    async def wait(self, timeout_s: float) -> bool:
        """Wait up to `timeout_s` for the next append; True when one happened."""
        event = self._event
        try:
            await asyncio.wait_for(event.wait(), timeout_s)
        except TimeoutError:
            return False
        return True
