"""Compression and envelope encryption of remote segments (`segment_transform`, `rsm_config`): the
sans-IO chunk index and ciphers, then segments of a real log uploaded by the remote log task to
moto's S3 server and read back as a consumer's Fetch reads them, and the settings refused."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa

from quorum.broker.log_config import LogConfig
from quorum.broker.partition import Partition
from quorum.broker.remote_tier import IndexType, RemoteStorageError
from quorum.wire.records import Record, build_batch, patch_base_offset
from tiered_follower import remote_reads
from tiered_follower.embedded_s3 import EmbeddedS3, s3_properties
from tiered_follower.remote_log_manager import RemoteLogManager
from tiered_follower.rsm_config import KeyPair, RsmConfig
from tiered_follower.s3_client import S3ConfigError
from tiered_follower.segment_transform import ChunkIndex, SegmentCipher, Transform, TransformError, read_range

BROKER = 101
MARKER = b"card-number-4111-1111-1111-1111"
"""A plaintext every record carries: no object in the bucket may hold it when encryption is on."""


def rsa_pair(directory: Path, name: str) -> dict[str, str]:
    """A fresh RSA key pair's PEM files under `directory`, as `rsm.config.` settings for pair `name`."""
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    private = directory / f"{name}-private.pem"
    public = directory / f"{name}-public.pem"
    private.write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                          serialization.NoEncryption()))  # fmt: skip
    public.write_bytes(key.public_key().public_bytes(serialization.Encoding.PEM,
                                                     serialization.PublicFormat.SubjectPublicKeyInfo))  # fmt: skip
    return {f"rsm.config.encryption.key.pairs.{name}.public.key.file": str(public),
            f"rsm.config.encryption.key.pairs.{name}.private.key.file": str(private)}  # fmt: skip


def encrypted(directory: Path, active: str, *names: str, compression: bool = True) -> dict[str, str]:
    """Settings for encryption with pairs `names` (fresh keys each), `active` wrapping new segments."""
    settings = {"rsm.config.encryption.enabled": "true", "rsm.config.encryption.key.pair.id": active,
                "rsm.config.encryption.key.pairs": ",".join(names), "rsm.config.chunk.size": str(64 * 1024),
                "rsm.config.compression.enabled": str(compression).lower()}  # fmt: skip
    for name in names:
        settings.update(rsa_pair(directory, name))
    return settings


# -- sans-IO ----------------------------------------------------------------------------------------


def test_the_chunk_index_names_the_stored_span_of_any_range() -> None:
    index = ChunkIndex(250, 100, (40, 70, 20))
    assert index.span(0, 1) == (0, 0, 0, 40)
    assert index.span(99, 101) == (0, 1, 0, 110)
    assert index.span(200, 250) == (2, 2, 110, 130)
    assert [index.chunk_length(n) for n in range(3)] == [100, 100, 50]
    with pytest.raises(TransformError, match="2 chunks cannot describe 250 bytes"):
        ChunkIndex(250, 100, (40, 70))


def test_chunks_come_back_whole_or_not_at_all() -> None:
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    pair = KeyPair("k1", key.public_key(), key)
    cipher = SegmentCipher.new(pair)
    transform = Transform(True, cipher)
    data = bytes(range(256)) * 10
    chunks = [transform.forward(data[n : n + 1000], f"log:{i}") for i, n in enumerate(range(0, len(data), 1000))]
    index = ChunkIndex(len(data), 1000, tuple(len(c) for c in chunks))
    stored = b"".join(chunks)
    for start, end in ((0, len(data)), (999, 1001), (2001, 2560), (5, 6)):
        _, _, lo, hi = index.span(start, end)
        assert read_range(index, transform, start, end, stored[lo:hi], "seg") == data[start:end]
    # the data key travels wrapped; the same pair unwraps it, another pair of the same id does not
    entry = cipher.manifest_entry(pair)
    again = Transform(True, SegmentCipher.from_manifest(entry, {"k1": pair}, "seg"))
    assert read_range(index, again, 0, len(data), stored, "seg") == data
    other = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    with pytest.raises(TransformError, match="seg: its data key does not unwrap with the private key of key pair 'k1'"):
        SegmentCipher.from_manifest(entry, {"k1": KeyPair("k1", other.public_key(), other)}, "seg")
    with pytest.raises(TransformError, match=r"seg is encrypted with key pair 'k1', which is not in .*\(k2\)"):
        SegmentCipher.from_manifest(entry, {"k2": KeyPair("k2", other.public_key(), other)}, "seg")
    # a chunk moved to another place fails its tag; so does a flipped bit
    with pytest.raises(TransformError, match="log:1 fails AES-GCM authentication"):
        transform.backward(chunks[0], "log:1", 1000, "seg")
    damaged = bytearray(chunks[1])
    damaged[20] ^= 1
    with pytest.raises(TransformError, match="log:1 fails AES-GCM authentication"):
        transform.backward(bytes(damaged), "log:1", 1000, "seg")
    with pytest.raises(TransformError, match="holds 1000 bytes once transformed back, not 999"):
        transform.backward(chunks[1], "log:1", 999, "seg")


# -- settings ---------------------------------------------------------------------------------------


def base() -> dict[str, str]:
    """Settings of a bucket at an endpoint no test reaches: parsing them needs no server."""
    return s3_properties("http://127.0.0.1:9", "b")


def test_unknown_and_bad_settings_stop_the_broker_naming_them(tmp_path: Path) -> None:
    refusals = {
        "rsm.config.encryption.enabeld": "rsm.config.encryption.enabeld: not a setting this remote storage implements",
        "rsm.config.storage.s3.sse.algorithm": "rsm.config.storage.s3.sse.algorithm: not a setting",
        "rsm.config.compression.heuristic.enabled": "rsm.config.compression.heuristic.enabled: not a setting",
        "rsm.config.storage.s3.storage.class": "storage.class=COLD is not one of S3's storage classes",
        "rsm.config.storage.s3.path.style.access.enabled": "path.style.access.enabled must be true or false",
        "rsm.config.storage.backend.class": "only S3 is implemented",
        "rsm.config.chunk.size": r"rsm.config.chunk.size must be at least 1, got 0",
    }
    values = {"rsm.config.storage.s3.storage.class": "COLD", "rsm.config.storage.s3.path.style.access.enabled": "yes",
              "rsm.config.storage.backend.class": "io.aiven.kafka.tieredstorage.storage.gcs.GcsStorage",
              "rsm.config.chunk.size": "0"}  # fmt: skip
    for key, message in refusals.items():
        with pytest.raises(S3ConfigError, match=message):
            RsmConfig.from_properties({**base(), key: values.get(key, "true")})
    with pytest.raises(S3ConfigError, match="remote.log.storage.manager.impl.prefix must not be empty"):
        RsmConfig.from_properties({**base(), "remote.log.storage.manager.impl.prefix": ""})
    moved = {k.replace("rsm.config.", "s3."): v for k, v in base().items()}
    with pytest.raises(S3ConfigError, match="s3.compression.enable: not a setting"):  # under another prefix too
        RsmConfig.from_properties(
            {**moved, "remote.log.storage.manager.impl.prefix": "s3.", "s3.compression.enable": "1"}
        )
    with pytest.raises(S3ConfigError, match="encryption.key.pair.id is required"):
        RsmConfig.from_properties({**base(), "rsm.config.encryption.enabled": "true"})
    pair = encrypted(tmp_path, "k1", "k1")
    with pytest.raises(S3ConfigError, match=r"encryption.key.pair.id=k9 is not one of rsm.config.encryption.key.pairs"):
        RsmConfig.from_properties({**base(), **pair, "rsm.config.encryption.key.pair.id": "k9"})
    missing = {**base(), **pair, "rsm.config.encryption.key.pairs.k1.private.key.file": str(tmp_path / "no")}
    with pytest.raises(S3ConfigError, match=r"k1.private.key.file=.*/no: No such file"):
        RsmConfig.from_properties(missing)
    swapped = {**base(), **pair, **{k.replace("k2", "k1"): v for k, v in rsa_pair(tmp_path, "k2").items()
                                             if k.endswith("public.key.file")}}  # fmt: skip
    with pytest.raises(S3ConfigError, match="k1: the public key is not the private key's"):
        RsmConfig.from_properties(swapped)
    config = RsmConfig.from_properties({**base(), **pair, "rsm.config.storage.s3.storage.class": "STANDARD_IA"})
    assert config.transform.active_key is not None and config.transform.compression
    assert config.s3.storage_class == "STANDARD_IA" and config.s3.path_style is True


def test_the_broker_start_refuses_an_unknown_key() -> None:
    from types import SimpleNamespace

    from quorum import cli

    extra = {"remote.log.storage.system.enable": "true", "rsm.config.storage.s3.bucket.name": "b",
             "rsm.config.encryption.enabled": "true"}  # fmt: skip
    config = SimpleNamespace(extra=extra, is_broker=True, is_controller=False, node_id=101)
    with pytest.raises(SystemExit, match="encryption.key.pair.id is required"):
        cli._remote_tier(config)
    config.extra = {**extra, "rsm.config.encryption.enabled": "false", "rsm.config.fetch.chunk.cache.retention.ms": "1"}
    with pytest.raises(SystemExit, match="rsm.config.fetch.chunk.cache.retention.ms: not a setting"):
        cli._remote_tier(config)


# -- against S3 -------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def s3_server(each_s3: EmbeddedS3) -> EmbeddedS3:
    """Against moto and against s3rver (`conftest.each_s3`)."""
    return each_s3


def tiered_partition(directory: Path) -> Partition:
    """A leader partition of text records carrying MARKER, two segments of about 900 KB to upload."""
    partition = Partition("secret", 0, uuid.uuid4(), directory,
                          LogConfig(segment_bytes=1 << 18, index_interval_bytes=4096, remote_storage_enable=True,
                                    local_retention_ms=None, retention_ms=None), BROKER)  # fmt: skip
    partition.update_state(BROKER, 1, (BROKER,))
    offset = 0
    for number in range(400):
        values = [MARKER + f" order {offset + i} ".encode() * 40 for i in range(1 + number % 5)]
        batch = bytearray(build_batch([Record(i, 1_000_000 + offset + i, b"", v) for i, v in enumerate(values)],
                                      partition_leader_epoch=1))  # fmt: skip
        patch_base_offset(batch, 0, offset)
        partition.append_as_follower(bytes(batch))
        offset += len(values)
    partition.advance_high_watermark(partition.log_end_offset)
    return partition


@pytest.fixture
def uploaded(s3_server: EmbeddedS3, bucket: str, tmp_path: Path) -> Iterator[tuple[Partition, dict[str, str]]]:
    """The partition's rolled segments uploaded compressed and encrypted under key pair k1 (k0 listed too)."""
    settings = {**s3_server.properties(bucket), **encrypted(tmp_path, "k1", "k0", "k1")}
    partition = tiered_partition(tmp_path / "secret-0")
    manager = RemoteLogManager.from_properties(BROKER, settings)
    manager.partition_opened(partition)
    asyncio.run(manager.run_once([partition]))
    assert partition.remote is not None and len(partition.remote.finished) >= 2
    yield partition, settings
    partition.close()


def bucket_objects(s3_server: EmbeddedS3, bucket: str) -> dict[str, bytes]:
    client = s3_server.client()
    keys = [e["Key"] for e in client.list_objects_v2(Bucket=bucket).get("Contents", ())]  # type: ignore[attr-defined]
    return {key: client.get_object(Bucket=bucket, Key=key)["Body"].read() for key in keys}  # type: ignore[attr-defined]


def test_encrypted_compressed_segments_read_back_and_the_bucket_holds_no_plaintext(
        uploaded, s3_server: EmbeddedS3, bucket: str) -> None:  # fmt: skip
    partition, settings = uploaded
    assert partition.remote is not None
    # a consumer's read through a broker that did not upload them (a fresh manager, same key pairs)
    reader = RemoteLogManager.from_properties(BROKER, settings)
    indexes = remote_reads.RemoteIndexCache(reader.storage)
    rolled = {s.base_offset: s.index_path.read_bytes() for s in partition.log.rolled_segments()}
    for segment in partition.remote.finished:
        for offset in range(segment.start_offset, segment.end_offset + 1, 97):
            for max_bytes in (1, 30_000, 300_000):
                remote = remote_reads.read_batches(reader.storage, indexes, segment, offset, max_bytes)
                assert remote == partition.log.read(offset, max_bytes, segment.end_offset + 1)
        assert reader.storage.fetch_index(segment, IndexType.OFFSET) == rolled[segment.start_offset]
    objects = bucket_objects(s3_server, bucket)
    logs = {k: v for k, v in objects.items() if k.endswith(".log")}
    assert len(logs) == len(partition.remote.finished)
    assert [k for k, v in objects.items() if MARKER in v or b" order 1" in v] == []  # the grep
    # compressed before encryption: the text shrinks, although ciphertext itself never would
    stored = sum(len(v) for v in logs.values())
    assert stored < sum(s.size_in_bytes for s in partition.remote.finished) / 3
    manifest = next(v for k, v in objects.items() if k.endswith(".rsm-manifest"))
    assert b'"key_pair_id": "k1"' in manifest and b'"version": 2' in manifest


def test_a_segment_of_another_key_is_refused_by_name(uploaded, tmp_path: Path) -> None:
    partition, settings = uploaded
    assert partition.remote is not None
    segment = partition.remote.finished[0]
    # k1 is no longer listed: the segment names the pair it needs
    rotated = {k: v for k, v in settings.items() if ".k1." not in k}
    rotated.update({"rsm.config.encryption.key.pair.id": "k0", "rsm.config.encryption.key.pairs": "k0"})
    without = RemoteLogManager.from_properties(BROKER, rotated)
    with pytest.raises(
        RemoteStorageError,
        match=rf"remote segment {segment.object_name} of .* is encrypted with "
        r"key pair 'k1', which is not in encryption.key.pairs \(k0\)",
    ):
        without.storage.fetch_log(segment, 0, 100)
    # a pair named k1 whose key is another: refused, never served
    other = {**settings, **rsa_pair(tmp_path / "..", "k1")}
    impostor = RemoteLogManager.from_properties(BROKER, other)
    with pytest.raises(
        RemoteStorageError,
        match=rf"{segment.object_name} .*does not unwrap with the private key of "
        r"key pair 'k1'",
    ):
        remote_reads.read_batches(impostor.storage, remote_reads.RemoteIndexCache(impostor.storage), segment,
                                  segment.start_offset, 1000)  # fmt: skip
    # and with encryption off: the manifest still says what it needs
    plain = {k: v for k, v in settings.items() if "encryption" not in k}
    with pytest.raises(RemoteStorageError, match="is encrypted with key pair 'k1', which is not in"):
        RemoteLogManager.from_properties(BROKER, plain).storage.fetch_index(segment, IndexType.OFFSET)


def test_compression_alone_and_the_storage_class(s3_server: EmbeddedS3, bucket: str, tmp_path: Path) -> None:
    settings = {**s3_server.properties(bucket), "rsm.config.compression.enabled": "true",
                "rsm.config.storage.s3.storage.class": "STANDARD_IA"}  # fmt: skip
    partition = tiered_partition(tmp_path / "secret-0")
    try:
        manager = RemoteLogManager.from_properties(BROKER, settings)
        manager.partition_opened(partition)
        asyncio.run(manager.run_once([partition]))
        assert partition.remote is not None
        indexes = remote_reads.RemoteIndexCache(manager.storage)
        for segment in partition.remote.finished:
            offset = (segment.start_offset + segment.end_offset) // 2
            assert remote_reads.read_batches(manager.storage, indexes, segment, offset, 1 << 20) == (
                partition.log.read(offset, 1 << 20, segment.end_offset + 1)
            )
        client = s3_server.client()
        logs = [k for k in bucket_objects(s3_server, bucket) if k.endswith(".log")]
        for key in logs:
            head = client.head_object(Bucket=bucket, Key=key)  # type: ignore[attr-defined]
            assert head["StorageClass"] == "STANDARD_IA"
            assert head["ContentLength"] < partition.remote.finished[0].size_in_bytes / 3
    finally:
        partition.close()
