"""What a partition's log answers to the read path's questions, as values shared by both sides.

The partition (`quorum.broker.partition`), the read path's view of it (`partition_view`) and the
remote tier (`remote_tier`, `tiered_follower`) all speak these: kept apart from each of them so
none has to import another to name an answer.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class EpochEndOffset:
    """OffsetForLeaderEpoch's answer: the largest epoch <= the one asked for, and its end offset."""

    leader_epoch: int
    end_offset: int


@dataclass(frozen=True, slots=True)
class TimestampOffset:
    """ListOffsets' answer for a timestamp: the first offset whose timestamp is >= it, and that timestamp."""

    timestamp: int
    offset: int


class OffsetOutOfRange(Exception):
    """A read below the log start offset or above the log end offset (OFFSET_OUT_OF_RANGE)."""
