"""MirrorMaker 2's heartbeat record, byte for byte as MM2's `Heartbeat` writes it, so that MM2's own
tools (`HeartbeatFormatter`, `MirrorClient`) read the replicator's heartbeats and the other way round.

Kafka protocol structs (big-endian, STRING as an int16 length and UTF-8):
  key   = sourceClusterAlias STRING, targetClusterAlias STRING
  value = version INT16 (0), timestamp INT64 (ms since the epoch)
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

VERSION = 0
_INT16, _INT64 = struct.Struct(">h"), struct.Struct(">q")


class HeartbeatFormatError(ValueError):
    """Bytes that are not an MM2 heartbeat key or value; the message says what is wrong."""


@dataclass(frozen=True)
class Heartbeat:
    source_alias: str
    target_alias: str
    timestamp_ms: int

    def key(self) -> bytes:
        return _string(self.source_alias) + _string(self.target_alias)

    def value(self) -> bytes:
        return _INT16.pack(VERSION) + _INT64.pack(self.timestamp_ms)

    @classmethod
    def decode(cls, key: bytes, value: bytes) -> Heartbeat:
        source, at = _read_string(key, 0)
        target, at = _read_string(key, at)
        if at != len(key):
            raise HeartbeatFormatError(f"{len(key) - at} bytes after the heartbeat key")
        if len(value) != _INT16.size + _INT64.size:
            raise HeartbeatFormatError(f"a heartbeat value is 10 bytes, not {len(value)}")
        (version,) = _INT16.unpack_from(value, 0)
        if version != VERSION:
            raise HeartbeatFormatError(f"heartbeat version {version} is not {VERSION}")
        (timestamp,) = _INT64.unpack_from(value, _INT16.size)
        return cls(source, target, timestamp)


def _string(text: str) -> bytes:
    data = text.encode("utf-8")
    return _INT16.pack(len(data)) + data


def _read_string(data: bytes, at: int) -> tuple[str, int]:
    if at + _INT16.size > len(data):
        raise HeartbeatFormatError("heartbeat key cut short before a string's length")
    (length,) = _INT16.unpack_from(data, at)
    at += _INT16.size
    if length < 0 or at + length > len(data):
        raise HeartbeatFormatError(f"heartbeat key string of length {length} does not fit in {len(data)} bytes")
    try:
        return data[at:at + length].decode("utf-8"), at + length
    except UnicodeDecodeError:
        raise HeartbeatFormatError("heartbeat key string is not UTF-8") from None
