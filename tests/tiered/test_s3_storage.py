"""S3 remote storage and metadata against moto's server, directly and through a fault proxy."""

from __future__ import annotations

import json
import os
import uuid
from dataclasses import replace
from pathlib import Path

import pytest

from quorum.broker.remote_tier import (
    IndexType,
    RemoteSegmentMetadata,
    RemoteSegmentState,
    RemoteStorageError,
    SegmentUpload,
    TopicIdPartition,
)
from quorum.log.epoch_cache import EpochEntry
from tests.tiered.fault_proxy import FaultProxy
from tiered_follower.embedded_s3 import EmbeddedS3
from tiered_follower.rsm_config import TransformConfig
from tiered_follower.s3_client import MIN_PART_SIZE, S3Client, S3Config, S3ConfigError
from tiered_follower.s3_metadata import S3RemoteLogMetadataStore, decode_metadata, encode_metadata, event_key
from tiered_follower.s3_storage import S3RemoteStorage

PARTITION = TopicIdPartition("orders", uuid.UUID("00000000-0000-0000-0000-0000000000aa"), 3)


@pytest.fixture(scope="module")
def s3_server(each_s3: EmbeddedS3) -> EmbeddedS3:
    """Every test here runs against moto and against s3rver (`conftest.each_s3`)."""
    return each_s3


def client_for(server: EmbeddedS3, bucket: str, endpoint: str | None = None, **extra: str) -> S3Client:
    """A client of `bucket` on `server` (through `endpoint` when given: a fault proxy in front of it)."""
    properties = server.properties(bucket, key_prefix="tiered/")
    if endpoint is not None:
        properties["rsm.config.storage.s3.endpoint.url"] = endpoint
    properties.update({f"rsm.config.{k}": v for k, v in extra.items()})
    config = S3Config.from_properties(properties)
    return S3Client(config, sleep=lambda _s: None)


def metadata(start: int, end: int, size: int, state: RemoteSegmentState = RemoteSegmentState.COPY_SEGMENT_STARTED,
             epochs: tuple[EpochEntry, ...] | None = None) -> RemoteSegmentMetadata:
    return RemoteSegmentMetadata(PARTITION, uuid.uuid4(), start, end, epochs or (EpochEntry(0, start),), size,
                                 1_700_000_000_000 + end, 101, 1, state)


def upload(tmp_path: Path, segment: RemoteSegmentMetadata, data: bytes) -> SegmentUpload:
    path = tmp_path / f"{segment.start_offset:020d}.log"
    path.write_bytes(data)
    return SegmentUpload(str(path), len(data), {IndexType.OFFSET: b"O" * 16, IndexType.TIMESTAMP: b"T" * 24,
                                                IndexType.LEADER_EPOCH: b"0\n1\n0 0\n",
                                                IndexType.PRODUCER_SNAPSHOT: b"P" * 10})


def test_segment_objects_follow_the_layout_and_read_back(s3_server: EmbeddedS3, bucket: str, tmp_path: Path) -> None:
    storage = S3RemoteStorage(client_for(s3_server, bucket))
    data = os.urandom(10_000)
    segment = metadata(100, 199, len(data))
    storage.copy_segment(segment, upload(tmp_path, segment, data))
    keys = storage.client.list_keys("")
    stem = f"tiered/orders-{PARTITION.topic_id}/3/{100:020d}-{segment.segment_id}"
    assert keys == [stem + ".indexes", stem + ".log", stem + ".rsm-manifest"]
    assert storage.fetch_log(segment, 0, 10_000) == data
    assert storage.fetch_log(segment, 1234, 5678) == data[1234:5678]
    assert storage.fetch_log(segment, 9_000, 20_000) == data[9_000:]  # clipped to the object
    assert storage.fetch_index(segment, IndexType.TIMESTAMP) == b"T" * 24
    assert storage.fetch_index(segment, IndexType.LEADER_EPOCH) == b"0\n1\n0 0\n"
    assert storage.fetch_index(segment, IndexType.PRODUCER_SNAPSHOT) == b"P" * 10
    storage.delete_segment(segment)
    assert storage.client.list_keys("") == []


def test_a_segment_without_its_manifest_is_not_readable(s3_server: EmbeddedS3, bucket: str, tmp_path: Path) -> None:
    storage = S3RemoteStorage(client_for(s3_server, bucket))
    data = b"x" * 500
    segment = metadata(0, 9, len(data))
    storage.copy_segment(segment, upload(tmp_path, segment, data))
    storage.client.delete([storage.key(segment, ".rsm-manifest")])
    fresh = S3RemoteStorage(client_for(s3_server, bucket))
    with pytest.raises(RemoteStorageError, match=r"s3://tiered-test-\d+/tiered/orders-.*rsm-manifest.*NoSuchKey"):
        fresh.fetch_log(segment, 0, 100)


def test_a_manifest_that_disagrees_with_the_metadata_is_refused(s3_server: EmbeddedS3, bucket: str,
                                                                tmp_path: Path) -> None:
    storage = S3RemoteStorage(client_for(s3_server, bucket))
    segment = metadata(0, 9, 500)
    storage.copy_segment(segment, upload(tmp_path, segment, b"y" * 500))
    other = RemoteSegmentMetadata(PARTITION, segment.segment_id, 0, 19, segment.leader_epochs, 500, 0, 101, 0)
    with pytest.raises(RemoteStorageError, match="does not describe segment"):
        S3RemoteStorage(storage.client).fetch_log(other, 0, 10)


def test_a_range_read_in_pieces_is_one_get_and_the_same_bytes(s3_server: EmbeddedS3, bucket: str,
                                                               tmp_path: Path) -> None:
    """The chunk cache's fetch-ahead of several chunks: one ranged GET, handed over a chunk at a
    time; a compressed segment is read a chunk per GET of its stored span, the same bytes."""
    data = os.urandom(50_000)
    plain = S3RemoteStorage(client_for(s3_server, bucket))
    compressed = S3RemoteStorage(client_for(s3_server, bucket), transform=TransformConfig(chunk_size=4096,
                                                                                         compression=True))
    for storage in (plain, compressed):
        segment = metadata(0, 99, len(data), RemoteSegmentState.COPY_SEGMENT_FINISHED)
        storage.copy_segment(segment, upload(tmp_path, segment, data))
        storage.manifest(segment)
        gets = storage.client.stats["get_object"]
        pieces = list(storage.fetch_log_pieces(segment, 8192, len(data) + 10, 8192))
        assert [len(piece) for piece in pieces] == [8192] * 5 + [len(data) - 6 * 8192]
        assert b"".join(pieces) == data[8192:]
        assert storage.client.stats["get_object"] - gets == (1 if storage is plain else 6)


def test_a_body_cut_short_midway_is_asked_for_again_from_where_it_broke(s3_server: EmbeddedS3, bucket: str,
                                                                        tmp_path: Path) -> None:
    data = os.urandom(20_000)
    segment = metadata(0, 99, len(data), RemoteSegmentState.COPY_SEGMENT_FINISHED)
    S3RemoteStorage(client_for(s3_server, bucket)).copy_segment(segment, upload(tmp_path, segment, data))
    # every other GET of the .log: its headers promise the whole body, half of it comes
    proxy = FaultProxy(s3_server.endpoint_url, rate=0.5, seed=3, kinds=("truncate",), methods=("GET",),
                       path_filter=".log")
    try:
        storage = S3RemoteStorage(client_for(s3_server, bucket, endpoint=proxy.endpoint_url))
        storage.manifest(segment)
        before = storage.client.stats["bytes_received"]
        for _ in range(4):
            assert b"".join(storage.fetch_log_pieces(segment, 0, len(data), 3000)) == data
    finally:
        proxy.stop()
    assert proxy.injected["truncate"] > 0
    assert storage.client.stats["retries"] == proxy.injected["truncate"]
    # the pieces before the cut were used, the rest asked for again: less than the whole again
    assert storage.client.stats["bytes_received"] - before == 4 * len(data)


def test_large_logs_go_up_in_parts(s3_server: EmbeddedS3, bucket: str, tmp_path: Path) -> None:
    client = client_for(s3_server, bucket, **{"storage.s3.multipart.upload.part.size": str(MIN_PART_SIZE)})
    storage = S3RemoteStorage(client)
    data = os.urandom(2 * MIN_PART_SIZE + 12345)
    segment = metadata(0, 999, len(data))
    storage.copy_segment(segment, upload(tmp_path, segment, data))
    assert client.stats["upload_part"] == 3
    assert client.stats["complete_multipart_upload"] == 1
    assert storage.fetch_log(segment, 0, len(data)) == data


def test_permanent_errors_name_bucket_and_key(s3_server: EmbeddedS3, tmp_path: Path) -> None:
    storage = S3RemoteStorage(client_for(s3_server, "no-such-bucket-here"))
    segment = metadata(0, 9, 100)
    with pytest.raises(RemoteStorageError) as caught:
        storage.copy_segment(segment, upload(tmp_path, segment, b"z" * 100))
    assert "s3://no-such-bucket-here/tiered/orders-" in str(caught.value)
    assert "NoSuchBucket" in str(caught.value)
    assert not caught.value.retriable
    assert storage.client.stats["retries"] == 0


def test_missing_and_bad_settings_are_named() -> None:
    with pytest.raises(S3ConfigError, match="rsm.config.storage.s3.bucket.name is required"):
        S3Config.from_properties({"remote.log.storage.system.enable": "true"})
    with pytest.raises(S3ConfigError, match=r"rsm.config.storage.s3.multipart.upload.part.size must be at least"):
        S3Config.from_properties({"rsm.config.storage.s3.bucket.name": "b",
                                  "rsm.config.storage.s3.multipart.upload.part.size": "1000"})
    config = S3Config.from_properties({"remote.log.storage.manager.impl.prefix": "s3.",
                                       "s3.storage.s3.bucket.name": "b", "s3.key.prefix": "p/"})
    assert (config.bucket, config.key_prefix) == ("b", "p/")


def test_metadata_events_survive_a_new_store_and_keep_the_latest_state(s3_server: EmbeddedS3, bucket: str) -> None:
    store = S3RemoteLogMetadataStore(client_for(s3_server, bucket))
    first = metadata(0, 99, 1000, epochs=(EpochEntry(0, 0), EpochEntry(2, 50)))
    second = metadata(100, 199, 1000, epochs=(EpochEntry(2, 100),))
    for event in (first, second, first.moved_to(RemoteSegmentState.COPY_SEGMENT_FINISHED, 101, 5)):
        store.publish(event)
    loaded = S3RemoteLogMetadataStore(client_for(s3_server, bucket)).list_segments(PARTITION)
    assert [(s.segment_id, s.state) for s in loaded] == [
        (first.segment_id, RemoteSegmentState.COPY_SEGMENT_FINISHED),
        (second.segment_id, RemoteSegmentState.COPY_SEGMENT_STARTED)]
    assert loaded[0].leader_epochs == (EpochEntry(0, 0), EpochEntry(2, 50))
    deleting = loaded[0].moved_to(RemoteSegmentState.DELETE_SEGMENT_STARTED, 102, 6)
    store.publish(deleting)
    store.publish(deleting.moved_to(RemoteSegmentState.DELETE_SEGMENT_FINISHED, 102, 7))
    keys = store.client.list_keys("")
    assert len([k for k in keys if str(first.segment_id) in k]) == 1  # earlier events of a deleted segment go
    again = store.list_segments(PARTITION)
    assert again[0].state == RemoteSegmentState.DELETE_SEGMENT_FINISHED and again[0].broker_id == 102
    assert store.delete_partition(PARTITION) == 2
    assert store.list_segments(PARTITION) == []


def test_transient_faults_are_retried_until_the_data_is_right(s3_server: EmbeddedS3, bucket: str,
                                                              tmp_path: Path) -> None:
    proxy = FaultProxy(s3_server.endpoint_url, rate=0.4, seed=7, slow_s=0.05,
                       kinds=("500", "slowdown", "throttle", "reset", "truncate", "slow"))
    try:
        client = client_for(s3_server, bucket, endpoint=proxy.endpoint_url, **{"storage.retries": "30"})
        storage = S3RemoteStorage(client)
        store = S3RemoteLogMetadataStore(client)
        segments = []
        for number in range(6):
            data = os.urandom(20_000 + number)
            segment = metadata(number * 100, number * 100 + 99, len(data))
            store.publish(segment)
            storage.copy_segment(segment, upload(tmp_path, segment, data))
            store.publish(segment.moved_to(RemoteSegmentState.COPY_SEGMENT_FINISHED, 101, 2))
            segments.append((segment, data))
        for segment, data in segments:
            fresh = S3RemoteStorage(client)
            assert fresh.fetch_log(segment, 0, len(data)) == data
            assert fresh.fetch_log(segment, 777, 9999) == data[777:9999]
            assert b"".join(fresh.fetch_log_pieces(segment, 500, len(data), 3000)) == data[500:]
            assert fresh.fetch_index(segment, IndexType.PRODUCER_SNAPSHOT) == b"P" * 10
        listed = store.list_segments(PARTITION)
        assert [s.state for s in listed] == [RemoteSegmentState.COPY_SEGMENT_FINISHED] * 6
    finally:
        proxy.stop()
    retries = client.stats["retries"]
    print(f"faults injected: {dict(proxy.injected)} ({proxy.total_injected} in all), retries: {retries}")
    assert {"500", "slowdown", "throttle", "reset", "truncate", "slow"} <= set(proxy.injected)
    # every fault but a slow answer costs exactly one retry
    assert client.stats["retries"] == proxy.total_injected - proxy.injected["slow"]


def test_faults_that_outlast_the_retries_fail_retriably(s3_server: EmbeddedS3, bucket: str) -> None:
    proxy = FaultProxy(s3_server.endpoint_url, rate=1.0, kinds=("slowdown",))
    try:
        client = client_for(s3_server, bucket, endpoint=proxy.endpoint_url, **{"storage.retries": "3"})
        failed = r"put_object s3://tiered-test-\d+/k failed 3 times.*SlowDown"
        with pytest.raises(RemoteStorageError, match=failed) as e:
            client.put("k", b"v")
        assert e.value.retriable
    finally:
        proxy.stop()
    assert proxy.injected["slowdown"] == 3


# -- KIP-917: the manifest's facts in the segment's custom metadata ------------------------------


def test_a_segment_uploaded_now_is_read_with_no_manifest_get(s3_server: EmbeddedS3, bucket: str,
                                                             tmp_path: Path) -> None:
    storage = S3RemoteStorage(client_for(s3_server, bucket))
    data = os.urandom(5_000)
    started = metadata(0, 9, len(data))
    custom = storage.copy_segment(started, upload(tmp_path, started, data))
    assert custom is not None and len(custom) <= 128  # Kafka's custom.metadata.max.bytes default
    store = S3RemoteLogMetadataStore(storage.client)
    store.publish(replace(started.moved_to(RemoteSegmentState.COPY_SEGMENT_FINISHED, 101, 2),
                          custom_metadata=custom))
    segment = S3RemoteLogMetadataStore(client_for(s3_server, bucket)).list_segments(PARTITION)[0]
    assert segment.custom_metadata == custom
    reader = S3RemoteStorage(client_for(s3_server, bucket))
    assert reader.fetch_log(segment, 100, 4_000) == data[100:4_000]
    assert reader.fetch_indexes(segment, [IndexType.LEADER_EPOCH, IndexType.PRODUCER_SNAPSHOT]) == (
        {IndexType.LEADER_EPOCH: b"0\n1\n0 0\n", IndexType.PRODUCER_SNAPSHOT: b"P" * 10}, 1)
    assert reader.fetch_index(segment, IndexType.OFFSET) == b"O" * 16
    assert reader.client.stats["get_object"] == 3  # the .log's range, two of the .indexes: no manifest


def test_a_segment_uploaded_with_only_its_manifest_still_reads(s3_server: EmbeddedS3, bucket: str,
                                                               tmp_path: Path) -> None:
    """Segments in a bucket before custom metadata was kept: their events have no custom_metadata."""
    storage = S3RemoteStorage(client_for(s3_server, bucket))
    data = os.urandom(5_000)
    started = metadata(0, 9, len(data))
    storage.copy_segment(started, upload(tmp_path, started, data))
    finished = started.moved_to(RemoteSegmentState.COPY_SEGMENT_FINISHED, 101, 2)
    event = json.loads(encode_metadata(finished))
    del event["custom_metadata"]  # as the code before this wrote it
    storage.client.put(event_key(storage.prefix, finished), json.dumps(event).encode())
    segment = S3RemoteLogMetadataStore(client_for(s3_server, bucket)).list_segments(PARTITION)[0]
    assert segment.custom_metadata is None and segment.state == RemoteSegmentState.COPY_SEGMENT_FINISHED
    reader = S3RemoteStorage(client_for(s3_server, bucket))
    assert reader.fetch_log(segment, 100, 4_000) == data[100:4_000]
    assert reader.client.stats["get_object"] == 2  # the manifest, then the .log's range


def test_unreadable_custom_metadata_falls_back_to_the_manifest_and_disagreeing_is_refused(
        s3_server: EmbeddedS3, bucket: str, tmp_path: Path) -> None:
    storage = S3RemoteStorage(client_for(s3_server, bucket))
    data = os.urandom(3_000)
    segment = metadata(0, 9, len(data))
    custom = storage.copy_segment(segment, upload(tmp_path, segment, data))
    assert custom is not None
    for garbage in (b"\xff not json", b'{"v":9,"s":3000,"i":[]}', b'{"v":1,"s":3000,"i":[0,1]}'):
        reader = S3RemoteStorage(client_for(s3_server, bucket))
        assert reader.fetch_log(replace(segment, custom_metadata=garbage), 0, 3_000) == data
        assert reader.client.stats["get_object"] == 2  # read by its manifest
    wrong = custom.replace(b'"s":3000', b'"s":2999')
    with pytest.raises(RemoteStorageError, match=rf"remote segment {segment.object_name} .*custom metadata says "
                                                 r"the .log holds 2999 bytes, its metadata 3000"):
        S3RemoteStorage(client_for(s3_server, bucket)).fetch_log(replace(segment, custom_metadata=wrong), 0, 10)


def test_a_transformed_segment_returns_no_custom_metadata(s3_server: EmbeddedS3, bucket: str,
                                                          tmp_path: Path) -> None:
    """Its chunk index does not fit Kafka's 128 bytes: its reads keep reading the manifest."""
    storage = S3RemoteStorage(client_for(s3_server, bucket), transform=TransformConfig(compression=True))
    segment = metadata(0, 9, 2_000)
    assert storage.copy_segment(segment, upload(tmp_path, segment, b"z" * 2_000)) is None


def test_a_metadata_event_whose_custom_metadata_is_not_base64_is_refused_by_name() -> None:
    event = json.loads(encode_metadata(metadata(0, 9, 10)))
    event["custom_metadata"] = "not base64!"
    with pytest.raises(RemoteStorageError, match="s3://b/k is not a remote log segment metadata event"):
        decode_metadata(json.dumps(event).encode(), "s3://b/k")


def test_a_closed_client_does_not_retry_so_a_stopping_broker_is_not_held_by_retries() -> None:
    """Python joins a tier pool's running workers at exit; a call in its retries held a stopped broker
    for up to `attempts` call timeouts. Closed during an attempt, that attempt is the last."""
    client = S3Client(S3Config("b", endpoint_url="http://127.0.0.1:9", access_key_id="k", secret_access_key="s"),
                      sleep=lambda _s: None)
    attempts = 0

    def timing_out() -> None:
        nonlocal attempts
        attempts += 1
        client.close()  # the broker stops while this attempt is under way
        raise ConnectionResetError("reset by the test")

    with pytest.raises(RemoteStorageError, match="not retried, the client is closed") as e:
        client.call("get_object", "k", timing_out)
    assert e.value.retriable and attempts == 1
