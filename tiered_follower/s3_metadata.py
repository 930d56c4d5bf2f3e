"""Remote log metadata kept beside the segments in S3 (`RemoteLogMetadataStore` with boto3).

Kafka keeps RemoteLogSegmentMetadata events in the `__remote_log_metadata` topic, which every
broker consumes. This project keeps each event as a small JSON object in the same bucket, under
`{prefix}{topic}-{topicId}/{partition}/remote_log_metadata/{20-digit base}-{segment id}.{state}`:

* It survives what KIP-1023 is about: a broker that comes back with an empty disk, or the loss of
  every replica of an internal topic, still finds the segments; the metadata cannot disagree with
  the bucket's contents by living in a second system with its own retention and replication.
* A PUT is durable when it returns and S3 reads are strongly consistent (read-after-write and
  list-after-write), which is exactly "COPY_SEGMENT_FINISHED is durable" with no extra protocol;
  an internal topic would need acks=all produce, a consumer per broker, and a catch-up barrier
  before a new leader may answer ListOffsets -6.
* Each event is its own object, named by its state, so concurrent writers (an old leader still
  finishing, a new one cleaning up) never overwrite each other, and a state only grows.

The cost is a LIST of the partition's metadata prefix when a broker opens a partition, becomes
its leader, or refreshes a follower's view (every `remote.log.manager.task.interval.ms`); each
event object is read once (a first listing reads them in parallel) and cached, so a refresh that
finds nothing new is one LIST. Requests (Fetch, ListOffsets) never touch the store: they read the
broker's in-memory `RemoteLogState`.
Once a segment is DELETE_SEGMENT_FINISHED its earlier events are removed; the last one stays as
the record that its offsets were once uploaded (KIP-1023's highest uploaded offset).
"""

from __future__ import annotations

import base64
import binascii
import json
import threading
import uuid
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from typing import Any

from quorum.broker.remote_tier import RemoteSegmentMetadata, RemoteSegmentState, RemoteStorageError, TopicIdPartition
from quorum.log.epoch_cache import EpochEntry
from tiered_follower.s3_client import S3Client
from tiered_follower.s3_storage import partition_prefix

METADATA_DIR = "remote_log_metadata/"
_READERS = 16
"""Event objects read at once when a broker first lists a partition (a wiped broker's bootstrap waits for it)."""
FORMAT_VERSION = 1


def metadata_prefix(key_prefix: str, partition: TopicIdPartition) -> str:
    return partition_prefix(key_prefix, partition) + METADATA_DIR


def event_key(key_prefix: str, segment: RemoteSegmentMetadata) -> str:
    state = segment.state
    return f"{metadata_prefix(key_prefix, segment.partition)}{segment.object_name}.{state.value}-{state.name}"


def encode_metadata(segment: RemoteSegmentMetadata) -> bytes:
    return json.dumps({
        "version": FORMAT_VERSION,
        "topic": segment.partition.topic,
        "topic_id": str(segment.partition.topic_id),
        "partition": segment.partition.partition,
        "segment_id": str(segment.segment_id),
        "start_offset": segment.start_offset,
        "end_offset": segment.end_offset,
        "leader_epochs": [[entry.epoch, entry.start_offset] for entry in segment.leader_epochs],
        "size_in_bytes": segment.size_in_bytes,
        "max_timestamp_ms": segment.max_timestamp_ms,
        "broker_id": segment.broker_id,
        "event_timestamp_ms": segment.event_timestamp_ms,
        "state": segment.state.name,
        "copied": segment.copied,
        "custom_metadata": None if segment.custom_metadata is None
        else base64.b64encode(segment.custom_metadata).decode(),
    }, sort_keys=True).encode()


def decode_metadata(data: bytes, where: str) -> RemoteSegmentMetadata:
    """Parse one event object; RemoteStorageError naming `where` when it is not one."""
    try:
        fields: dict[str, Any] = json.loads(data)
        if fields.get("version") != FORMAT_VERSION:
            raise ValueError(f"unknown version {fields.get('version')!r}")
        partition = TopicIdPartition(fields["topic"], uuid.UUID(fields["topic_id"]), int(fields["partition"]))
        return RemoteSegmentMetadata(
            partition=partition, segment_id=uuid.UUID(fields["segment_id"]),
            start_offset=int(fields["start_offset"]), end_offset=int(fields["end_offset"]),
            leader_epochs=tuple(EpochEntry(int(e), int(o)) for e, o in fields["leader_epochs"]),
            size_in_bytes=int(fields["size_in_bytes"]), max_timestamp_ms=int(fields["max_timestamp_ms"]),
            broker_id=int(fields["broker_id"]), event_timestamp_ms=int(fields["event_timestamp_ms"]),
            state=RemoteSegmentState[fields["state"]], copied=bool(fields["copied"]),
            custom_metadata=_custom_metadata(fields.get("custom_metadata")))  # fmt: skip
    except (ValueError, KeyError, TypeError, binascii.Error) as exc:
        raise RemoteStorageError(f"{where} is not a remote log segment metadata event: {exc}") from None


def _custom_metadata(text: object) -> bytes | None:
    """An event's KIP-917 custom metadata (base64); events written before it was kept have none."""
    if text is None:
        return None
    if not isinstance(text, str):
        raise ValueError(f"custom_metadata is {text!r}, not base64 text")
    return base64.b64decode(text, validate=True)


class S3RemoteLogMetadataStore:
    """See the module docstring; blocking and thread-safe."""

    def __init__(self, client: S3Client) -> None:
        self.client = client
        self.prefix = client.config.key_prefix
        self._events: dict[str, RemoteSegmentMetadata] = {}
        self._lock = threading.Lock()

    def publish(self, segment: RemoteSegmentMetadata) -> None:
        key = event_key(self.prefix, segment)
        self.client.put(key, encode_metadata(segment))
        with self._lock:
            self._events[key] = segment
        if segment.state == RemoteSegmentState.DELETE_SEGMENT_FINISHED:
            earlier = [event_key(self.prefix, replace(segment, state=state))
                       for state in RemoteSegmentState if state < segment.state]
            self.client.delete(earlier)

    def list_segments(self, partition: TopicIdPartition) -> Sequence[RemoteSegmentMetadata]:
        latest: dict[str, tuple[int, str]] = {}
        for key in self.client.list_keys(metadata_prefix(self.prefix, partition)):
            stem, _, state = key.rpartition(".")
            number = state.partition("-")[0]
            if not number.isdigit():
                continue
            if stem not in latest or int(number) > latest[stem][0]:
                latest[stem] = (int(number), key)
        keys = [key for _, key in latest.values()]
        with self._lock:
            unknown = [key for key in keys if key not in self._events]
        if unknown:  # a broker new to the partition reads every event once: in parallel
            with ThreadPoolExecutor(max_workers=min(_READERS, len(unknown))) as pool:
                read = list(pool.map(self._read_event, unknown))
            with self._lock:
                self._events.update(zip(unknown, read, strict=True))
        with self._lock:
            segments = [self._events[key] for key in keys]
        return sorted(segments, key=lambda s: (s.start_offset, s.end_offset))

    def _read_event(self, key: str) -> RemoteSegmentMetadata:
        return decode_metadata(self.client.get(key), f"s3://{self.client.config.bucket}/{key}")

    def delete_partition(self, partition: TopicIdPartition) -> int:
        prefix = metadata_prefix(self.prefix, partition)
        keys = self.client.list_keys(prefix)
        self.client.delete(keys)
        with self._lock:
            for key in [k for k in self._events if k.startswith(prefix)]:
                del self._events[key]
        return len(keys)
