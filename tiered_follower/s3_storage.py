"""Segments in S3: `quorum.broker.remote_tier.RemoteStorage` with boto3.

One segment is three objects under `{prefix}{topic}-{topicId}/{partition}/`, named by the
segment's 20-digit base offset and its segment id (`{base}-{uuid}`), as Aiven's plug-in and
Kafka's RemoteLogSegmentId do:

* `{base}-{uuid}.log`: the segment's `.log` file as it is on the leader's disk (one PUT up to
  the part size, multipart above it; see `quorum`'s `rsm.config.` settings in `s3_client`).
* `{base}-{uuid}.indexes`: the offset index, the time index, the leader-epoch checkpoint
  truncated to the segment's end and the producer snapshot at its next offset, one after the
  other; each is read back with a range GET.
* `{base}-{uuid}.rsm-manifest`: JSON naming the sizes and byte ranges of the two others,
  written last. It is the commit marker: without it there is no segment, and reads refuse a
  segment whose manifest is missing or disagrees with the metadata.

Reads check sizes: a range GET must return what was asked (clipped to the object's size in the
manifest). Deletion removes the manifest first, so a half-deleted segment is not readable either.
"""

from __future__ import annotations

import json
import logging
import threading
from collections import OrderedDict
from collections.abc import Callable, Sequence
from typing import Any

from quorum.broker.remote_tier import (
    IndexType,
    RemoteSegmentMetadata,
    RemoteStorageError,
    SegmentUpload,
    TopicIdPartition,
)
from tiered_follower.s3_client import S3Client

logger = logging.getLogger(__name__)

MANIFEST_VERSION = 1
LOG_SUFFIX = ".log"
INDEXES_SUFFIX = ".indexes"
MANIFEST_SUFFIX = ".rsm-manifest"
INDEX_ORDER = (IndexType.OFFSET, IndexType.TIMESTAMP, IndexType.LEADER_EPOCH, IndexType.PRODUCER_SNAPSHOT)
_MANIFEST_CACHE = 1024


def partition_prefix(key_prefix: str, partition: TopicIdPartition) -> str:
    return f"{key_prefix}{partition.topic}-{partition.topic_id}/{partition.partition}/"


def segment_key(key_prefix: str, segment: RemoteSegmentMetadata, suffix: str) -> str:
    return f"{partition_prefix(key_prefix, segment.partition)}{segment.object_name}{suffix}"


class S3RemoteStorage:
    """See the module docstring. Blocking and thread-safe: the remote tier calls it from a thread pool."""

    def __init__(self, client: S3Client, before_object: Callable[[str], None] | None = None) -> None:
        """`before_object` is told "log", "indexes" and "manifest" before each object of a copy
        goes up (the test knob that kills a broker at each step of an upload)."""
        self.client = client
        self._before_object = before_object or (lambda _step: None)
        self.prefix = client.config.key_prefix
        self._manifests: OrderedDict[tuple[str, Any], dict[str, Any]] = OrderedDict()
        self._lock = threading.Lock()

    def key(self, segment: RemoteSegmentMetadata, suffix: str) -> str:
        return segment_key(self.prefix, segment, suffix)

    # -- writing ----------------------------------------------------------------------------------

    def copy_segment(self, segment: RemoteSegmentMetadata, data: SegmentUpload) -> None:
        """`.log`, then `.indexes`, then the manifest (the commit marker)."""
        if data.log_size != segment.size_in_bytes:
            raise RemoteStorageError(f"segment {segment.object_name} of {segment.partition}: the upload has "
                                     f"{data.log_size} bytes, its metadata says {segment.size_in_bytes}")
        log_key = self.key(segment, LOG_SUFFIX)
        ranges: dict[str, list[int]] = {}
        blob = bytearray()
        for kind in INDEX_ORDER:
            part = data.indexes.get(kind, b"")
            ranges[kind.value] = [len(blob), len(part)]
            blob += part
        indexes_key = self.key(segment, INDEXES_SUFFIX)
        self._before_object("log")
        self.client.upload_file(log_key, data.log_path, data.log_size)
        self._before_object("indexes")
        self.client.put(indexes_key, bytes(blob))
        manifest = {
            "version": MANIFEST_VERSION,
            "segment_id": str(segment.segment_id),
            "start_offset": segment.start_offset,
            "end_offset": segment.end_offset,
            "log": {"key": log_key, "size": data.log_size,
                    "multipart": data.log_size > self.client.config.part_size},
            "indexes": {"key": indexes_key, "size": len(blob), "ranges": ranges},
        }
        self._before_object("manifest")
        self.client.put(self.key(segment, MANIFEST_SUFFIX), json.dumps(manifest, sort_keys=True).encode())

    def delete_segment(self, segment: RemoteSegmentMetadata) -> None:
        with self._lock:
            self._manifests.pop((str(segment.partition), segment.segment_id), None)
        self.client.delete([self.key(segment, MANIFEST_SUFFIX)])
        self.client.delete([self.key(segment, LOG_SUFFIX), self.key(segment, INDEXES_SUFFIX)])

    def delete_partition(self, partition: TopicIdPartition) -> int:
        keys = self.client.list_keys(partition_prefix(self.prefix, partition))
        self.client.delete(keys)
        return len(keys)

    # -- reading ----------------------------------------------------------------------------------

    def manifest(self, segment: RemoteSegmentMetadata) -> dict[str, Any]:
        """The segment's manifest (cached), checked against its metadata; RemoteStorageError when
        it is missing (the copy never finished, or the segment was deleted) or disagrees."""
        found = self._cached_manifest(segment)
        if found is not None:
            return found
        cache_key = (str(segment.partition), segment.segment_id)
        key = self.key(segment, MANIFEST_SUFFIX)
        manifest = json.loads(self.client.get(key))
        if (manifest.get("version") != MANIFEST_VERSION or manifest.get("segment_id") != str(segment.segment_id)
                or manifest["log"]["size"] != segment.size_in_bytes
                or manifest.get("end_offset") != segment.end_offset):
            raise RemoteStorageError(f"s3://{self.client.config.bucket}/{key} does not describe segment "
                                     f"{segment.object_name} ({segment.size_in_bytes} bytes, offsets "
                                     f"{segment.start_offset}..{segment.end_offset}): {manifest}")
        with self._lock:
            self._manifests[cache_key] = manifest
            while len(self._manifests) > _MANIFEST_CACHE:
                self._manifests.popitem(last=False)
        return manifest

    def _cached_manifest(self, segment: RemoteSegmentMetadata) -> dict[str, Any] | None:
        cache_key = (str(segment.partition), segment.segment_id)
        with self._lock:
            found = self._manifests.get(cache_key)
            if found is not None:
                self._manifests.move_to_end(cache_key)
            return found

    def fetch_log(self, segment: RemoteSegmentMetadata, start_position: int, end_position: int) -> bytes:
        size = self.manifest(segment)["log"]["size"]
        end_position = min(end_position, size)
        if not 0 <= start_position <= end_position:
            raise RemoteStorageError(f"segment {segment.object_name} of {segment.partition}: bytes "
                                     f"[{start_position}, {end_position}) are outside its {size} bytes")
        if start_position == end_position:
            return b""
        key = self.key(segment, LOG_SUFFIX)
        data = self.client.get(key, start_position, end_position)
        if len(data) != end_position - start_position:
            raise RemoteStorageError(f"s3://{self.client.config.bucket}/{key}: asked for bytes "
                                     f"[{start_position}, {end_position}), got {len(data)}", retriable=True)
        return data

    def fetch_indexes(self, segment: RemoteSegmentMetadata,
                      kinds: Sequence[IndexType]) -> tuple[dict[IndexType, bytes], int]:
        """Several parts of the segment's `.indexes` with ONE range GET over their span (they lie
        one after the other), and how many GETs it took with the manifest's (1 or 2): a
        follower's auxiliary state (leader-epoch checkpoint and producer snapshot) in two."""
        cached = self._cached_manifest(segment) is not None
        manifest = self.manifest(segment)["indexes"]
        ranges = {kind: manifest["ranges"][kind.value] for kind in kinds}
        first = min(position for position, _ in ranges.values())
        end = max(position + length for position, length in ranges.values())
        gets = 0 if cached else 1
        span = b""
        if end > first:
            span = self.client.get(manifest["key"], first, end)
            gets += 1
            if len(span) != end - first:
                raise RemoteStorageError(f"s3://{self.client.config.bucket}/{manifest['key']}: asked for bytes "
                                         f"[{first}, {end}), got {len(span)}", retriable=True)
        return {kind: span[position - first:position - first + length]
                for kind, (position, length) in ranges.items()}, gets

    def fetch_index(self, segment: RemoteSegmentMetadata, index: IndexType) -> bytes:
        manifest = self.manifest(segment)["indexes"]
        position, length = manifest["ranges"][index.value]
        if length == 0:
            return b""
        data = self.client.get(manifest["key"], position, position + length)
        if len(data) != length:
            raise RemoteStorageError(f"s3://{self.client.config.bucket}/{manifest['key']}: the {index.value} index "
                                     f"is {length} bytes, got {len(data)}", retriable=True)
        return data
