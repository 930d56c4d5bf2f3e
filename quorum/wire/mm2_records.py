"""MirrorMaker 2's offset-sync and checkpoint records, byte for byte as MM2 writes and reads them.

MM2 (connect/mirror's OffsetSync and mirror-client's Checkpoint) lays these out with Kafka's
protocol `Schema` types, without tags or compact encodings:

* OffsetSync, in `mm2-offset-syncs.<target-alias>.internal` (on the source cluster by default):
  key = topic STRING, partition INT32; value = upstreamOffset INT64, offset INT64 (the downstream
  offset). "Upstream offset u was written at downstream offset d."
* Checkpoint, in `<source-alias>.checkpoints.internal` (on the target cluster):
  key = group STRING, topic STRING, partition INT32 (the topic is the *target* topic's name);
  value = version INT16 (0), upstreamOffset INT64, offset INT64, metadata STRING.
* Heartbeat, in `heartbeats` (on the target cluster):
  key = sourceClusterAlias STRING, targetClusterAlias STRING; value = version INT16 (0), timestamp INT64.

STRING is an int16 length then that many UTF-8 bytes (never null). The project's other replicator
code reads and writes these only through this module, so that MM2's own tools (its
OffsetSyncFormatter and CheckpointFormatter, RemoteClusterUtils.translateOffsets) read ours and ours
read theirs. Anything that does not decode raises `MM2RecordError` saying what and where.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

CHECKPOINT_VERSION = 0
"""The only Checkpoint value version MM2 has written so far."""
HEARTBEAT_VERSION = 0
"""The only Heartbeat value version MM2 has written so far."""

_INT16 = struct.Struct(">h")
_INT32 = struct.Struct(">i")
_INT64 = struct.Struct(">q")
_INT64_RANGE = range(-(2**63), 2**63)
_INT32_RANGE = range(-(2**31), 2**31)


class MM2RecordError(ValueError):
    """An MM2 record key or value that does not decode (or a field that cannot be encoded)."""


@dataclass(frozen=True, slots=True)
class OffsetSync:
    """MM2's OffsetSync: source `topic`-`partition` offset `upstream` was copied to target offset `downstream`."""

    topic: str
    partition: int
    upstream: int
    downstream: int

    def key(self) -> bytes:
        return _string(self.topic, "topic") + _int(_INT32, self.partition, _INT32_RANGE, "partition")

    def value(self) -> bytes:
        return (_int(_INT64, self.upstream, _INT64_RANGE, "upstreamOffset")
                + _int(_INT64, self.downstream, _INT64_RANGE, "offset"))

    @classmethod
    def decode(cls, key: bytes | None, value: bytes | None) -> OffsetSync:
        reader = _Reader(key, "offset-sync key")
        topic, partition = reader.string("topic"), reader.int32("partition")
        reader.end()
        reader = _Reader(value, "offset-sync value")
        upstream, downstream = reader.int64("upstreamOffset"), reader.int64("offset")
        return cls(topic, partition, upstream, downstream)  # as MM2: bytes after the struct are ignored


@dataclass(frozen=True, slots=True)
class Checkpoint:
    """MM2's Checkpoint: `group`'s committed source offset `upstream`, translated to `downstream` in the
    target partition `topic`-`partition` (the target topic's name), with the commit's metadata string."""

    group: str
    topic: str
    partition: int
    upstream: int
    downstream: int
    metadata: str = ""

    def key(self) -> bytes:
        return (_string(self.group, "group") + _string(self.topic, "topic")
                + _int(_INT32, self.partition, _INT32_RANGE, "partition"))

    def value(self) -> bytes:
        return (_INT16.pack(CHECKPOINT_VERSION) + _int(_INT64, self.upstream, _INT64_RANGE, "upstreamOffset")
                + _int(_INT64, self.downstream, _INT64_RANGE, "offset") + _string(self.metadata, "metadata"))

    @classmethod
    def decode(cls, key: bytes | None, value: bytes | None) -> Checkpoint:
        reader = _Reader(key, "checkpoint key")
        group, topic, partition = reader.string("group"), reader.string("topic"), reader.int32("partition")
        reader.end()
        reader = _Reader(value, "checkpoint value")
        version = reader.int16("version")
        if version != CHECKPOINT_VERSION:
            raise MM2RecordError(f"checkpoint value version {version} is not known (only {CHECKPOINT_VERSION})")
        upstream, downstream = reader.int64("upstreamOffset"), reader.int64("offset")
        metadata = reader.string("metadata")
        # MM2 reads the struct of its version and ignores what follows (a newer version's added fields)
        return cls(group, topic, partition, upstream, downstream, metadata)



@dataclass(frozen=True, slots=True)
class Heartbeat:
    """MM2's Heartbeat: the flow `source_alias`->`target_alias` was alive at `timestamp_ms`."""

    source_alias: str
    target_alias: str
    timestamp_ms: int

    def key(self) -> bytes:
        return _string(self.source_alias, "sourceClusterAlias") + _string(self.target_alias, "targetClusterAlias")

    def value(self) -> bytes:
        return _INT16.pack(HEARTBEAT_VERSION) + _int(_INT64, self.timestamp_ms, _INT64_RANGE, "timestamp")

    @classmethod
    def decode(cls, key: bytes | None, value: bytes | None) -> Heartbeat:
        reader = _Reader(key, "heartbeat key")
        source, target = reader.string("sourceClusterAlias"), reader.string("targetClusterAlias")
        reader.end()
        reader = _Reader(value, "heartbeat value")
        version = reader.int16("version")
        if version != HEARTBEAT_VERSION:
            raise MM2RecordError(f"heartbeat value version {version} is not known (only {HEARTBEAT_VERSION})")
        timestamp = reader.int64("timestamp")
        reader.end()
        return cls(source, target, timestamp)

def _string(text: str, name: str) -> bytes:
    data = text.encode("utf-8")
    if len(data) > 0x7FFF:
        raise MM2RecordError(f"{name} is {len(data)} bytes long: a STRING holds at most {0x7FFF}")
    return _INT16.pack(len(data)) + data


def _int(packer: struct.Struct, value: int, bounds: range, name: str) -> bytes:
    if type(value) is not int or value not in bounds:
        raise MM2RecordError(f"{name} {value!r} does not fit its field")
    return packer.pack(value)


class _Reader:
    def __init__(self, data: bytes | None, what: str) -> None:
        if data is None:
            raise MM2RecordError(f"{what} is null")
        self._data = bytes(data)
        self._at = 0
        self._what = what

    def _take(self, size: int, name: str) -> bytes:
        if self._at + size > len(self._data):
            raise MM2RecordError(f"{self._what} ends at byte {len(self._data)} inside {name} (needs {size} bytes "
                                 f"from byte {self._at})")
        chunk = self._data[self._at:self._at + size]
        self._at += size
        return chunk

    def int16(self, name: str) -> int:
        return int(_INT16.unpack(self._take(2, name))[0])

    def int32(self, name: str) -> int:
        return int(_INT32.unpack(self._take(4, name))[0])

    def int64(self, name: str) -> int:
        return int(_INT64.unpack(self._take(8, name))[0])

    def string(self, name: str) -> str:
        size = self.int16(f"{name} length")
        if size < 0:
            raise MM2RecordError(f"{self._what}: {name} is null (length {size}), which a STRING cannot be")
        raw = self._take(size, name)
        try:
            return raw.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise MM2RecordError(f"{self._what}: {name} is not UTF-8: {exc}") from None

    def end(self) -> None:
        if self._at != len(self._data):
            raise MM2RecordError(f"{self._what} has {len(self._data) - self._at} byte(s) after its last field")
