"""The `__consumer_offsets` partition log as the group coordinator's shell sees it, and an in-memory one.

The coordinator core never touches a log: it asks for appends (`events.Append`) and is told when
they are durable, and it is fed a partition's records when this broker becomes its leader. The
shell does that through this interface, which the node maps onto its partition logs (an append
completes when the records are committed, as Kafka's appends with acks=all complete).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from typing import Protocol

from quorum.wire.errors import ErrorCode

Record = tuple[bytes, bytes | None]
"""The key and value bytes of one record; a None value is a tombstone."""


class OffsetsLogError(Exception):
    """An append that failed, with the Kafka error code the partition answered (NOT_LEADER_OR_FOLLOWER, ...)."""

    def __init__(self, code: int, message: str = "") -> None:
        super().__init__(message or f"offsets log append failed with error {code}")
        self.code = int(code)


class OffsetsLog(Protocol):
    async def append(self, partition: int, records: Sequence[Record]) -> int:
        """Append `records` to `__consumer_offsets` partition `partition` as one batch; return the offset
        of the first record once they are durable. Raise OffsetsLogError when they will not be."""
        ...

    def replay(self, partition: int) -> AsyncIterator[Sequence[Record]]:
        """The partition's records from its start to its end, in order, in chunks (loading a coordinator)."""
        ...


class InMemoryOffsetsLog:
    """An OffsetsLog in a dict: for tests, the simulator and a broker without partition logs."""

    def __init__(self) -> None:
        self.partitions: dict[int, list[Record]] = {}
        self.fail_with: int | None = None
        """When set, appends fail with this error code (to test the failure path)."""

    async def append(self, partition: int, records: Sequence[Record]) -> int:
        if self.fail_with is not None:
            raise OffsetsLogError(self.fail_with)
        log = self.partitions.setdefault(partition, [])
        base = len(log)
        log.extend(records)
        return base

    async def replay(self, partition: int) -> AsyncIterator[Sequence[Record]]:
        records = list(self.partitions.get(partition, []))
        for start in range(0, len(records), 1000):
            yield records[start:start + 1000]


__all__ = ["ErrorCode", "InMemoryOffsetsLog", "OffsetsLog", "OffsetsLogError", "Record"]
