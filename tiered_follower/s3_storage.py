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

An untransformed segment's copy also returns the manifest's facts as its custom metadata
(`segment_facts`, KIP-917), which the broker records with COPY_SEGMENT_FINISHED: a read of a segment
that carries them needs no manifest GET. Custom metadata that does not parse is logged and the
manifest read instead; facts that disagree with the segment's metadata are refused by name.

Reads check sizes: a range GET must return what was asked (clipped to the object's size in the
manifest). Deletion removes the manifest first, so a half-deleted segment is not readable either.

With `compression.enabled` or `encryption.enabled` (`rsm_config`) the `.log` goes up in chunks of
`chunk.size`, each transformed on its own, and each `.indexes` part transformed whole
(`segment_transform`); the manifest (version 2) then holds the chunk index, the original sizes and
the wrapped data key. A read fetches the stored span of the chunks it needs with one range GET and
transforms them back. A segment the configured key pairs cannot open is refused naming its key
pair, never served. Version-1 manifests (untransformed) stay readable whatever the settings.
"""

from __future__ import annotations

import json
import logging
import tempfile
import threading
from collections import OrderedDict
from collections.abc import Callable, Iterator, Sequence
from typing import Any

from quorum.broker.remote_tier import (
    IndexType,
    RemoteSegmentMetadata,
    RemoteStorageError,
    SegmentUpload,
    TopicIdPartition,
)
from tiered_follower.rsm_config import TransformConfig
from tiered_follower.s3_client import S3Client
from tiered_follower.segment_facts import FactsError, SegmentFacts
from tiered_follower.segment_transform import (
    ChunkIndex,
    SegmentCipher,
    Transform,
    TransformError,
    read_range,
    stored_parts,
    transform_chunks,
)

logger = logging.getLogger(__name__)

MANIFEST_VERSION = 1
TRANSFORMED_VERSION = 2
LOG_SUFFIX = ".log"
INDEXES_SUFFIX = ".indexes"
MANIFEST_SUFFIX = ".rsm-manifest"
INDEX_ORDER = (IndexType.OFFSET, IndexType.TIMESTAMP, IndexType.LEADER_EPOCH, IndexType.PRODUCER_SNAPSHOT)
_MANIFEST_CACHE = 1024


def partition_prefix(key_prefix: str, partition: TopicIdPartition) -> str:
    return f"{key_prefix}{partition.topic}-{partition.topic_id}/{partition.partition}/"


def file_chunks(path: str, size: int, chunk_size: int) -> Iterator[bytes]:
    """The first `size` bytes of the file in `chunk_size` pieces; RemoteStorageError if it is shorter."""
    read = 0
    with open(path, "rb") as source:
        while read < size:
            chunk = source.read(min(chunk_size, size - read))
            if not chunk:
                raise RemoteStorageError(f"{path} ended at byte {read}, not {size}")
            read += len(chunk)
            yield chunk


def segment_file_name(key: str) -> str:
    return key.rsplit("/", 1)[-1]


def segment_key(key_prefix: str, segment: RemoteSegmentMetadata, suffix: str) -> str:
    return f"{partition_prefix(key_prefix, segment.partition)}{segment.object_name}{suffix}"


class S3RemoteStorage:
    """See the module docstring. Blocking and thread-safe: the remote tier calls it from a thread pool."""

    def __init__(self, client: S3Client, before_object: Callable[[str], None] | None = None,
                 transform: TransformConfig | None = None) -> None:
        """`before_object` is told "log", "indexes" and "manifest" before each object of a copy
        goes up (the test knob that kills a broker at each step of an upload); `transform`: the
        compression and encryption settings (none by default)."""
        self.client = client
        self._before_object = before_object or (lambda _step: None)
        self.transform = transform or TransformConfig()
        self.prefix = client.config.key_prefix
        self._manifests: OrderedDict[tuple[str, Any], tuple[dict[str, Any], Transform | None]] = OrderedDict()
        self._lock = threading.Lock()

    def key(self, segment: RemoteSegmentMetadata, suffix: str) -> str:
        return segment_key(self.prefix, segment, suffix)

    # -- writing ----------------------------------------------------------------------------------

    def copy_segment(self, segment: RemoteSegmentMetadata, data: SegmentUpload) -> bytes | None:
        """`.log`, then `.indexes`, then the manifest (the commit marker); returns the manifest's
        facts as custom metadata when the segment is untransformed (`segment_facts`), else None."""
        if data.log_size != segment.size_in_bytes:
            raise RemoteStorageError(f"segment {segment.object_name} of {segment.partition}: the upload has "
                                     f"{data.log_size} bytes, its metadata says {segment.size_in_bytes}")
        config = self.transform
        cipher = SegmentCipher.new(config.active_key) if config.active_key is not None else None
        transform = Transform(config.compression, cipher) if config.transforms else None
        parts = [(kind.value, data.indexes.get(kind, b"")) for kind in INDEX_ORDER]
        ranges: dict[str, list[int]] = {}
        blob = bytearray()
        for kind, part in stored_parts(parts, transform):
            ranges[kind] = [len(blob), len(part)]
            blob += part
        log_key = self.key(segment, LOG_SUFFIX)
        indexes_key = self.key(segment, INDEXES_SUFFIX)
        manifest: dict[str, Any] = {
            "version": MANIFEST_VERSION,
            "segment_id": str(segment.segment_id),
            "start_offset": segment.start_offset,
            "end_offset": segment.end_offset,
            "log": {"key": log_key, "size": data.log_size},
            "indexes": {"key": indexes_key, "size": len(blob), "ranges": ranges},
        }
        self._before_object("log")
        if transform is None:
            self.client.upload_file(log_key, data.log_path, data.log_size)
            stored_size = data.log_size
        else:
            chunks = self._upload_transformed(log_key, data, transform)
            stored_size = chunks.stored_size
            manifest["version"] = TRANSFORMED_VERSION
            manifest["indexes"]["lengths"] = {kind: len(part) for kind, part in parts}
            manifest["transform"] = {
                "compression": config.compression, "chunk_size": config.chunk_size,
                "chunks": list(chunks.stored_sizes),
                "encryption": None if cipher is None or config.active_key is None
                else cipher.manifest_entry(config.active_key),
            }  # fmt: skip
        manifest["log"]["stored_size"] = stored_size
        manifest["log"]["multipart"] = stored_size > self.client.config.part_size
        self._before_object("indexes")
        self.client.put(indexes_key, bytes(blob))
        self._before_object("manifest")
        self.client.put(self.key(segment, MANIFEST_SUFFIX), json.dumps(manifest, sort_keys=True).encode())
        if transform is not None:
            return None
        return SegmentFacts(data.log_size, tuple((ranges[kind.value][0], ranges[kind.value][1])
                                                 for kind in INDEX_ORDER)).encode()

    def _upload_transformed(self, key: str, data: SegmentUpload, transform: Transform) -> ChunkIndex:
        """The `.log` chunk by chunk through `transform` into a temporary file, then up as usual
        (a segment can be 1 GiB: it is never held in memory whole)."""
        chunk_size = self.transform.chunk_size
        sizes: list[int] = []
        with tempfile.TemporaryDirectory(prefix="rsm-upload-") as scratch:
            stored_path = f"{scratch}/{segment_file_name(key)}"
            with open(stored_path, "wb") as out:
                for stored in transform_chunks(file_chunks(data.log_path, data.log_size, chunk_size), transform):
                    out.write(stored)
                    sizes.append(len(stored))
            index = ChunkIndex(data.log_size, chunk_size, tuple(sizes))
            self.client.upload_file(key, stored_path, index.stored_size)
        return index

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
        return self._opened(segment)[0]

    def _opened(self, segment: RemoteSegmentMetadata) -> tuple[dict[str, Any], Transform | None]:
        """The manifest and how to transform the segment's bytes back (its data key unwrapped);
        RemoteStorageError naming the key pair when the configured ones cannot open it."""
        manifest, transform, _ = self._open(segment)
        return manifest, transform

    def _open(self, segment: RemoteSegmentMetadata) -> tuple[dict[str, Any], Transform | None, int]:
        """`_opened`, and how many GETs it took (0: cached, or from the custom metadata; else 1)."""
        cache_key = (str(segment.partition), segment.segment_id)
        with self._lock:
            found = self._manifests.get(cache_key)
            if found is not None:
                self._manifests.move_to_end(cache_key)
                return (*found, 0)
        manifest = self._from_facts(segment)
        if manifest is not None:
            self._remember(cache_key, manifest, None)
            return manifest, None, 0
        key = self.key(segment, MANIFEST_SUFFIX)
        manifest = json.loads(self.client.get(key))
        if (manifest.get("version") not in (MANIFEST_VERSION, TRANSFORMED_VERSION)
                or manifest.get("segment_id") != str(segment.segment_id)
                or manifest["log"]["size"] != segment.size_in_bytes
                or manifest.get("end_offset") != segment.end_offset):
            raise RemoteStorageError(f"s3://{self.client.config.bucket}/{key} does not describe segment "
                                     f"{segment.object_name} ({segment.size_in_bytes} bytes, offsets "
                                     f"{segment.start_offset}..{segment.end_offset}): {manifest}")
        transform = self._transform_of(segment, manifest)
        self._remember(cache_key, manifest, transform)
        return manifest, transform, 1

    def _remember(self, cache_key: tuple[str, Any], manifest: dict[str, Any], transform: Transform | None) -> None:
        with self._lock:
            self._manifests[cache_key] = (manifest, transform)
            while len(self._manifests) > _MANIFEST_CACHE:
                self._manifests.popitem(last=False)

    def _from_facts(self, segment: RemoteSegmentMetadata) -> dict[str, Any] | None:
        """The manifest as the segment's custom metadata states it (no GET), or None when it has
        none or none that parses (logged: the manifest is read instead); RemoteStorageError naming
        the segment when they disagree with its metadata."""
        if segment.custom_metadata is None:
            return None
        try:
            facts = SegmentFacts.decode(segment.custom_metadata, len(INDEX_ORDER))
        except FactsError as exc:
            logger.warning("%s: its custom metadata is unreadable (%s): reading its manifest instead",
                           self._where(segment), exc)
            return None
        if facts.log_size != segment.size_in_bytes:
            raise RemoteStorageError(f"{self._where(segment)}: its custom metadata says the .log holds "
                                     f"{facts.log_size} bytes, its metadata {segment.size_in_bytes}")
        return {
            "version": MANIFEST_VERSION,
            "segment_id": str(segment.segment_id),
            "start_offset": segment.start_offset,
            "end_offset": segment.end_offset,
            "log": {"key": self.key(segment, LOG_SUFFIX), "size": facts.log_size, "stored_size": facts.log_size},
            "indexes": {"key": self.key(segment, INDEXES_SUFFIX), "size": facts.indexes_size,
                        "ranges": {kind.value: list(span) for kind, span in zip(INDEX_ORDER, facts.ranges,
                                                                                 strict=True)}},
        }

    def _transform_of(self, segment: RemoteSegmentMetadata, manifest: dict[str, Any]) -> Transform | None:
        entry = manifest.get("transform")
        if manifest["version"] == MANIFEST_VERSION or entry is None:
            return None
        cipher = None
        if entry.get("encryption") is not None:
            try:
                cipher = SegmentCipher.from_manifest(entry["encryption"], self.transform.key_pairs,
                                                     self._where(segment))
            except TransformError as exc:
                raise RemoteStorageError(str(exc)) from None
        return Transform(bool(entry.get("compression")), cipher)

    def _where(self, segment: RemoteSegmentMetadata) -> str:
        return f"remote segment {segment.object_name} of {segment.partition}"

    def _get_exactly(self, key: str, start: int, end: int, what: str) -> bytes:
        data = self.client.get(key, start, end)
        if len(data) != end - start:
            raise RemoteStorageError(f"s3://{self.client.config.bucket}/{key}: asked for {what}bytes "
                                     f"[{start}, {end}), got {len(data)}", retriable=True)
        return data

    def fetch_log(self, segment: RemoteSegmentMetadata, start_position: int, end_position: int) -> bytes:
        manifest, transform = self._opened(segment)
        size = manifest["log"]["size"]
        end_position = min(end_position, size)
        if not 0 <= start_position <= end_position:
            raise RemoteStorageError(f"segment {segment.object_name} of {segment.partition}: bytes "
                                     f"[{start_position}, {end_position}) are outside its {size} bytes")
        if start_position == end_position:
            return b""
        key = self.key(segment, LOG_SUFFIX)
        if transform is None:
            return self._get_exactly(key, start_position, end_position, "")
        entry = manifest["transform"]
        try:
            index = ChunkIndex(size, int(entry["chunk_size"]), tuple(entry["chunks"]))
            _, _, stored_start, stored_end = index.span(start_position, end_position)
            stored = self._get_exactly(key, stored_start, stored_end, "the chunks' ")
            return read_range(index, transform, start_position, end_position, stored, self._where(segment))
        except TransformError as exc:
            raise RemoteStorageError(str(exc)) from None

    def fetch_log_pieces(self, segment: RemoteSegmentMetadata, start_position: int, end_position: int,
                         piece_size: int) -> Iterator[bytes]:
        """`fetch_log` of bytes [start, end) handed over `piece_size` bytes at a time, with ONE ranged
        GET as the body arrives (`S3Client.get_pieces`): the chunk cache's fetch-ahead of several
        chunks. A transformed segment is read a piece per `fetch_log` (each its stored chunks'
        span)."""
        manifest, transform = self._opened(segment)
        end_position = min(end_position, manifest["log"]["size"])
        if not 0 <= start_position <= end_position:
            raise RemoteStorageError(f"segment {segment.object_name} of {segment.partition}: bytes "
                                     f"[{start_position}, {end_position}) are outside its "
                                     f"{manifest['log']['size']} bytes")
        if transform is not None:
            for position in range(start_position, end_position, piece_size):
                yield self.fetch_log(segment, position, min(end_position, position + piece_size))
            return
        yield from self.client.get_pieces(self.key(segment, LOG_SUFFIX), start_position, end_position, piece_size)

    def fetch_indexes(self, segment: RemoteSegmentMetadata,
                      kinds: Sequence[IndexType]) -> tuple[dict[IndexType, bytes], int]:
        """Several parts of the segment's `.indexes` with ONE range GET over their span (they lie
        one after the other), and how many GETs it took with the manifest's (1, or 2 when the
        manifest is read): a follower's auxiliary state (leader-epoch checkpoint and producer
        snapshot) in one or two."""
        manifest, transform, gets = self._open(segment)
        indexes = manifest["indexes"]
        ranges = {kind: indexes["ranges"][kind.value] for kind in kinds}
        first = min(position for position, _ in ranges.values())
        end = max(position + length for position, length in ranges.values())
        span = b""
        if end > first:
            span = self._get_exactly(indexes["key"], first, end, "")
            gets += 1
        return {kind: self._index_part(segment, manifest, transform, kind, span[position - first:
                                                                              position - first + length])
                for kind, (position, length) in ranges.items()}, gets

    def fetch_index(self, segment: RemoteSegmentMetadata, index: IndexType) -> bytes:
        manifest, transform = self._opened(segment)
        indexes = manifest["indexes"]
        position, length = indexes["ranges"][index.value]
        if length == 0:
            return b""
        stored = self._get_exactly(indexes["key"], position, position + length, f"the {index.value} index's ")
        return self._index_part(segment, manifest, transform, index, stored)

    def _index_part(self, segment: RemoteSegmentMetadata, manifest: dict[str, Any], transform: Transform | None,
                    kind: IndexType, stored: bytes) -> bytes:
        if transform is None or not stored:
            return stored
        try:
            return transform.backward(stored, f"index:{kind.value}", manifest["indexes"]["lengths"][kind.value],
                                      self._where(segment))
        except TransformError as exc:
            raise RemoteStorageError(str(exc)) from None
