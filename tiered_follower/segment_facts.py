"""What a reader needs of a segment's manifest, carried in its remote log metadata instead (KIP-917).

Kafka's RemoteStorageManager.copyLogSegmentData may return custom metadata, which the broker
stores in the segment's COPY_SEGMENT_FINISHED event (`RemoteSegmentMetadata.custom_metadata`) and
hands back with every later read, as Aiven's plug-in carries its segment's remote size and object
key there. Here it carries the facts a read would otherwise GET the manifest for: the `.log`'s
size and the byte ranges of the `.indexes` parts. A cold read then starts with its first chunk's
GET, and a backfill makes one request fewer per segment (of ~two: bench_tiered's profile put the
manifest GET at 12 ms of a cold start's 53 ms).

Only untransformed segments carry them: a compressed or encrypted one needs its chunk index and
wrapped data key, larger than Kafka's `remote.log.metadata.custom.metadata.max.bytes` default
(128 bytes), so its reads keep reading the manifest. The manifest is still written, last, as the
commit marker, and stays what a segment without custom metadata (uploaded before this, or by
another plug-in) is read by.

The encoding is compact JSON, `{"v": 1, "s": log size, "i": [offset index position, length, time
index ..., leader-epoch ..., producer snapshot ...]}` (60-80 bytes), versioned so that a later
format is recognised as not this one.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

FACTS_VERSION = 1


class FactsError(ValueError):
    """Custom metadata that is not segment facts of a known version."""


@dataclass(frozen=True, slots=True)
class SegmentFacts:
    """A segment's `.log` size and its `.indexes` parts' (position, length), in `kinds` order."""

    log_size: int
    ranges: tuple[tuple[int, int], ...]

    @property
    def indexes_size(self) -> int:
        return max((position + length for position, length in self.ranges), default=0)

    def encode(self) -> bytes:
        flat = [number for pair in self.ranges for number in pair]
        return json.dumps({"v": FACTS_VERSION, "s": self.log_size, "i": flat}, separators=(",", ":")).encode()

    @classmethod
    def decode(cls, data: bytes, kinds: int) -> SegmentFacts:
        """FactsError saying what is wrong when `data` is not facts of `kinds` index parts."""
        try:
            fields: dict[str, Any] = json.loads(data)
        except (ValueError, UnicodeDecodeError) as exc:
            raise FactsError(f"not JSON ({exc})") from None
        if not isinstance(fields, dict) or fields.get("v") != FACTS_VERSION:
            raise FactsError(f"not segment facts of version {FACTS_VERSION}: {data[:80]!r}")
        size, flat = fields.get("s"), fields.get("i")
        if (not _natural(size) or not isinstance(flat, list) or len(flat) != 2 * kinds
                or not all(_natural(number) for number in flat)):
            raise FactsError(f"a log size and {kinds} index ranges expected, got {data[:80]!r}")
        return cls(size, tuple(zip(flat[0::2], flat[1::2], strict=True)))


def _natural(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0
