"""Assemble a MetadataResponse from topic entries encoded once and reused.

A metadata image is immutable, so the bytes of each topic at each response version never change
while that image is served. Encoding them once and splicing them into the response turns the
cost of a Metadata request from "encode every partition" into "join some byte strings", which is
what a node serving 10,000 partitions to many clients needs.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence
from typing import Any

from kafka.protocol.api_message import ApiMessage
from kafka.protocol.schemas.fields.codecs import EncodeBufferPool

from quorum.wire.varint import encode_uvarint

_INT32 = struct.Struct(">i")


def _array_length(count: int, flexible: bool) -> bytes:
    """Array length prefix: compact (unsigned varint of count+1) in flexible versions, else int32."""
    if not flexible:
        return _INT32.pack(count)
    return encode_uvarint(count + 1)


def _fields_after_topics(version: int) -> int:
    """Bytes after the Topics array: ClusterAuthorizedOperations (v8-10), ErrorCode (v13+), tag section."""
    return (4 if 8 <= version <= 10 else 0) + (2 if version >= 13 else 0) + (1 if version >= 9 else 0)


def encode_topics(schema: type[ApiMessage], topics: Sequence[Any], version: int) -> list[bytes]:
    """Each MetadataResponseTopic entry's bytes exactly as inside the Topics array, encoded in one
    pass of the engine's compiled encoder into one buffer."""
    flexible = schema.flexible_version_q(version)
    element = schema._struct.fields["topics"].array_of
    encode_into = element.compiled_encode_into(version, compact=flexible, tagged=flexible)
    with EncodeBufferPool.acquire() as out:
        bounds = []
        for topic in topics:
            start = out.pos
            encode_into(topic, out)
            bounds.append((start, out.pos))
        buffer = out.buf
        return [bytes(buffer[start:end]) for start, end in bounds]


def splice_topics(schema: type[ApiMessage], response: Any, version: int, topics: Sequence[bytes]) -> bytes:
    """The response body with `topics` (pre-encoded entries) as its Topics array.

    `response` must have an empty Topics list; everything else in it is encoded normally.
    """
    flexible = schema.flexible_version_q(version)
    shell = response.encode(version=version)
    empty = _array_length(0, flexible)
    split = len(shell) - _fields_after_topics(version) - len(empty)
    if shell[split:split + len(empty)] != empty:
        raise AssertionError(f"MetadataResponse v{version} layout is not the one this splice expects")
    return b"".join((shell[:split], _array_length(len(topics), flexible), *topics, shell[split + len(empty):]))
