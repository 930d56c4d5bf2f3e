"""The remote tier as the broker role is composed with it: KIP-405's remote log manager.

Kept apart from `remote_tier` (the remote metadata, the storage interfaces and the sans-IO
`RemoteLogState` that a partition holds), because this plug-in is handed partitions: were it
beside `RemoteLogState`, the partition and the module it imports would import each other.
Reads are handed the read path's view of a partition (`ServedPartition`), which is all Fetch and
ListOffsets have; the upload task and `partition_opened` the hosted `Partition` itself, whose
segment files it uploads.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Protocol

from quorum.broker.log_answers import TimestampOffset
from quorum.broker.partition_view import ServedPartition
from quorum.broker.remote_tier import TopicIdPartition
from quorum.wire.spliced import BufferRecords

if TYPE_CHECKING:
    from quorum.broker.partition import Partition


class RemoteReadError(Exception):
    """A read from the remote tier failed; Fetch answers the partition with a retriable error."""


class RemoteTier(Protocol):
    """KIP-405's remote log manager as the broker sees it."""

    def partition_opened(self, partition: Partition) -> None:
        """A hosted partition was opened: attach its `RemoteLogState` when its topic is tiered."""
        ...

    def partition_deleted(self, partition: TopicIdPartition) -> None:
        """The topic was deleted (or re-created): delete its remote data, off the event loop."""
        ...

    async def read(self, partition: ServedPartition, offset: int, max_bytes: int) -> BufferRecords:
        """Whole batches from the remote segment holding `offset` (the first whole however large),
        as buffers in order that the Fetch answer sends without copying them; raises RemoteReadError."""
        ...

    async def offset_for_timestamp(self, partition: ServedPartition, timestamp: int) -> TimestampOffset | None:
        """The first offset in the remote segments whose timestamp is >= `timestamp`."""
        ...

    async def run(self, partitions: Callable[[], Iterable[Partition]], stop: asyncio.Event) -> None:
        """The upload, cleanup and retention task over the hosted `partitions`, every
        `remote.log.manager.task.interval.ms`, until `stop` is set."""
        ...

    async def close(self) -> None: ...
