"""A topic's partitions kept as the PartitionRecord values they came in, decoded when first read.

A snapshot of 100,000 topics x 10 partitions holds a million PartitionRecords. Building a
`PartitionInfo` for each at load time (decode, tuples, offline replicas) is most of a node's
start-up, yet a broker reads few of them soon after: Metadata for the topics clients ask about,
its own replicas. So the delta (`quorum.image.delta`) keeps the run of plain PartitionRecord v0
values that follows a TopicRecord (`quorum.wire.metadata_records.plain_partition_v0`: in
ascending partition order, each once) as they are, and the topic's `partitions` is this sequence
of them, which decodes all of them the first time one is read.

It is a `Sequence[PartitionInfo]` equal to the tuple an eager replay builds (and hashes as that
tuple), so images compare the same whichever way they were built (`quorum.image.compare`, the
image verify); `len` needs no decoding. `offline_replicas` depend on which brokers are available,
kept beside the values: a broker coming or going gives a new sequence over the same values
(`settled`) without decoding. A snapshot of the image writes the values back as they are
(`quorum.image.image_state.ImageSnapshot`): a plain record is exactly what the encoder would
write for the partition it decodes to.

Two threads may decode the same sequence at once (the replay worker and the event loop): both
build equal tuples and either one is kept, so no lock is needed.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import overload

from quorum.image.image import PartitionInfo
from quorum.wire.metadata_records import decode_plain_partition_v0


def decode_partition(value: bytes, available: frozenset[int] | None) -> PartitionInfo:
    """The partition of a plain PartitionRecord v0, its offline replicas those not in `available`
    (none when None: not settled yet, as a replayed record is until its image is built)."""
    index, (replicas, isr, removing, adding), leader, leader_epoch, partition_epoch = decode_plain_partition_v0(value)
    if isr == replicas:
        isr = replicas
    offline: tuple[int, ...] = ()
    if available is not None and not available.issuperset(replicas):
        offline = tuple(replica for replica in replicas if replica not in available)
    return PartitionInfo(index, leader, leader_epoch, replicas, isr, offline, partition_epoch, removing, adding, 0)


class PartitionRecords(Sequence[PartitionInfo]):
    """The partitions of one topic as plain PartitionRecord v0 values; see the module docstring."""

    __slots__ = ("values", "available", "_decoded", "_broker_ids")

    def __init__(self, values: tuple[bytes, ...], available: frozenset[int]) -> None:
        """`values`: plain PartitionRecord v0 frames of one topic, in ascending partition order."""
        self.values = values
        self.available = available
        self._decoded: tuple[PartitionInfo, ...] | None = None
        self._broker_ids: frozenset[int] | None = None

    @property
    def decoded(self) -> tuple[PartitionInfo, ...]:
        """The partitions, decoded now if they were not yet."""
        found = self._decoded
        if found is None:
            available = self.available
            found = self._decoded = tuple(decode_partition(value, available) for value in self.values)
        return found

    @property
    def is_decoded(self) -> bool:
        return self._decoded is not None

    def settled(self, available: frozenset[int]) -> PartitionRecords:
        """The same partitions with the offline replicas of `available` brokers, not decoded."""
        settled = PartitionRecords(self.values, available)
        settled._broker_ids = self._broker_ids
        return settled

    def broker_ids(self) -> frozenset[int]:
        """Every broker the partitions name (replicas and leaders, as `TopicInfo.broker_ids`), read
        without building the partitions and kept: a broker that comes or goes leaves the topics
        it is not in untouched (`quorum.image.delta`)."""
        found = self._broker_ids
        if found is None:
            brokers: set[int] = set()
            for value in self.values:
                _, (replicas, *_), leader, _, _ = decode_plain_partition_v0(value)
                brokers.update(replicas)
                brokers.add(leader)
            found = self._broker_ids = frozenset(brokers)
        return found

    def __len__(self) -> int:
        return len(self.values)

    @overload
    def __getitem__(self, index: int) -> PartitionInfo: ...

    @overload
    def __getitem__(self, index: slice) -> tuple[PartitionInfo, ...]: ...

    def __getitem__(self, index: int | slice) -> PartitionInfo | tuple[PartitionInfo, ...]:
        return self.decoded[index]

    def __iter__(self) -> Iterator[PartitionInfo]:
        return iter(self.decoded)

    def __eq__(self, other: object) -> bool:
        if other is self:
            return True
        if isinstance(other, PartitionRecords):
            if self.values == other.values and self.available == other.available:
                return True
            return self.decoded == other.decoded
        if isinstance(other, Sequence) and not isinstance(other, (str, bytes)):
            return self.decoded == tuple(other)
        return NotImplemented

    def __hash__(self) -> int:
        return hash(self.decoded)

    def __repr__(self) -> str:
        if self._decoded is not None:
            return repr(self._decoded)
        return f"PartitionRecords({len(self.values)} partitions, not decoded yet)"
