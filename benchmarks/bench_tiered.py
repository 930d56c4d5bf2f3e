"""Tiered storage throughput against one S3 endpoint (moto's server on 127.0.0.1), in one run:

* upload: the leader's remote log task (`tiered_follower.RemoteLogManager.run_once` over a real
  partition: COPY_SEGMENT_STARTED, the `.log` in parts, the `.indexes`, the manifest,
  COPY_SEGMENT_FINISHED, the producer snapshot replayed from the segment's batches) beside raw
  boto3 uploading the same `.log` files with the same part size (put_object up to it, multipart
  above), read from the same disk. Goal: the task at 0.8x raw boto3 or better. Rounds alternate
  raw and task, each to a fresh bucket; the best of each is kept.
* consume: confluent-kafka reading a partition from offset 0 whose segments are all in S3 but
  the active one (`local.retention.bytes`=1), beside the same records read from a partition on
  the broker's disk, from a `quorum start` broker of `LocalCluster` with tiered storage on.

Run: `.venv/bin/python -m benchmarks.bench_tiered`. BENCH_TIERED_MB (default 128) sets the bytes
uploaded per round and consumed per topic, BENCH_TIERED_SEGMENT_MB (default 16) the segment size
(the part size is 8 MiB, so each segment goes up in two parts). moto keeps objects in memory and is
Python: it is the ceiling of both sides here, which is why the task is compared with boto3 on it.
"""

from __future__ import annotations

import asyncio
import itertools
import os
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from pathlib import Path

if __package__ in (None, ""):  # run as a script: make `benchmarks` and `quorum` importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.table import print_table, progress  # noqa: E402
from quorum.broker.log_config import LogConfig  # noqa: E402
from quorum.broker.partition import Partition  # noqa: E402
from quorum.wire.records import Record, build_batch, patch_base_offset  # noqa: E402
from tiered_follower.embedded_s3 import EmbeddedS3, s3_properties, start_embedded_s3  # noqa: E402
from tiered_follower.remote_log_manager import RemoteLogManager  # noqa: E402

MB = 1_000_000
TOTAL_BYTES = int(os.environ.get("BENCH_TIERED_MB", "128")) * MB
SEGMENT_BYTES = int(os.environ.get("BENCH_TIERED_SEGMENT_MB", "16")) * (1 << 20)
PART_SIZE = 8 << 20
ROUNDS = 3
BROKER = 101
_buckets = itertools.count()


def filled_partition(directory: Path) -> Partition:
    """A leader partition whose log holds TOTAL_BYTES in SEGMENT_BYTES segments of 64 KiB batches."""
    partition = Partition("bench", 0, uuid.uuid4(), directory,
                          LogConfig(segment_bytes=SEGMENT_BYTES, remote_storage_enable=True, local_retention_ms=None,
                                    retention_ms=None), BROKER)
    partition.update_state(BROKER, 1, (BROKER,))
    value = os.urandom(1000)
    now_ms = int(time.time() * 1000)
    batch = bytearray(build_batch([Record(i, now_ms, b"", value) for i in range(64)],
                                  partition_leader_epoch=1))
    offset = 0
    while partition.log.size_in_bytes < TOTAL_BYTES + SEGMENT_BYTES:  # the last segment stays active
        patch_base_offset(batch, 0, offset)
        partition.append_as_follower(bytes(batch))
        offset += 64
    partition.log.flush()
    partition.advance_high_watermark(partition.log_end_offset)
    return partition


def fresh_bucket(s3: EmbeddedS3) -> str:
    name = f"bench-{next(_buckets)}"
    s3.create_bucket(name)
    return name


def raw_upload(s3: EmbeddedS3, files: list[Path]) -> tuple[float, int]:
    """Seconds and bytes for boto3 alone: put_object up to the part size, multipart above."""
    client = s3.client()
    bucket = fresh_bucket(s3)
    sent = 0
    start = time.perf_counter()
    for number, path in enumerate(files):
        data = path.read_bytes()
        key = f"raw/{number:020d}.log"
        if len(data) <= PART_SIZE:
            client.put_object(Bucket=bucket, Key=key, Body=data)  # type: ignore[attr-defined]
        else:
            upload = client.create_multipart_upload(Bucket=bucket, Key=key)["UploadId"]  # type: ignore[attr-defined]
            parts = []
            for part, position in enumerate(range(0, len(data), PART_SIZE), start=1):
                etag = client.upload_part(Bucket=bucket, Key=key, UploadId=upload, PartNumber=part,  # type: ignore
                                          Body=data[position:position + PART_SIZE])["ETag"]
                parts.append({"PartNumber": part, "ETag": etag})
            client.complete_multipart_upload(Bucket=bucket, Key=key, UploadId=upload,  # type: ignore
                                             MultipartUpload={"Parts": parts})
        sent += len(data)
    return time.perf_counter() - start, sent


def task_upload(s3: EmbeddedS3, partition: Partition) -> tuple[float, int]:
    """Seconds and bytes for one run of the remote log task uploading every rolled segment."""
    properties = {**s3_properties(s3.endpoint_url, fresh_bucket(s3)),
                  "rsm.config.storage.s3.multipart.upload.part.size": str(PART_SIZE)}
    manager = RemoteLogManager.from_properties(BROKER, properties)
    partition.remote = None
    manager.partition_opened(partition)

    async def run() -> float:
        start = time.perf_counter()
        await manager.run_once([partition])
        elapsed = time.perf_counter() - start
        await manager.close()
        return elapsed

    elapsed = asyncio.run(run())
    assert partition.remote is not None
    uploaded = partition.remote.size_in_bytes
    expected = sum(s.size for s in partition.log.rolled_segments())
    if uploaded != expected:
        raise SystemExit(f"the task uploaded {uploaded} bytes, not the {expected} of the rolled segments")
    return elapsed, uploaded


def upload_rows(s3: EmbeddedS3, directory: Path) -> list[tuple[object, ...]]:
    progress(f"writing {TOTAL_BYTES / MB:.0f} MB of segments of {SEGMENT_BYTES >> 20} MiB")
    partition = filled_partition(directory / "bench-0")
    files = [s.log_path for s in partition.log.rolled_segments()]
    raw_best = task_best = float("inf")
    size = 0
    for number in range(ROUNDS):
        progress(f"upload round {number + 1} of {ROUNDS}")
        raw_seconds, size = raw_upload(s3, files)
        task_seconds, task_size = task_upload(s3, partition)
        assert task_size == size
        raw_best, task_best = min(raw_best, raw_seconds), min(task_best, task_seconds)
    partition.close()
    raw_rate, task_rate = size / MB / raw_best, size / MB / task_best
    return [("raw boto3 (put_object / multipart)", len(files), size / MB, raw_best, raw_rate, 1.0),
            ("remote log task (objects + metadata)", len(files), size / MB, task_best, task_rate,
             task_rate / raw_rate)]


def consume_rows(s3: EmbeddedS3, directory: Path) -> list[tuple[object, ...]]:
    from confluent_kafka import Consumer, Producer, TopicPartition
    from confluent_kafka.admin import AdminClient, NewTopic

    from quorum.get_offsets import list_offsets
    from quorum.launcher import LocalCluster

    settings = {**s3_properties(s3.endpoint_url, fresh_bucket(s3)), "log.segment.bytes": str(SEGMENT_BYTES),
                "remote.log.manager.task.interval.ms": "500", "log.retention.check.interval.ms": "1000"}
    cluster = LocalCluster(directory / "cluster", controllers=1, brokers=1, settings=settings)
    cluster.format_storage()
    cluster.start()
    rows: list[tuple[object, ...]] = []
    try:
        bootstrap = cluster.bootstrap_servers
        admin = AdminClient({"bootstrap.servers": bootstrap})
        topics = [NewTopic("tiered", 1, 1, config={"remote.storage.enable": "true", "local.retention.bytes": "1"}),
                  NewTopic("local", 1, 1)]
        for future in admin.create_topics(topics).values():
            future.result(30)
        value = os.urandom(1000)
        count = TOTAL_BYTES // len(value)
        progress(f"producing {count} messages of 1 KB to each topic")
        producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 20, "batch.size": 1 << 20})
        for number in range(count):
            for topic in ("tiered", "local"):
                while True:
                    try:
                        producer.produce(topic, value)
                        break
                    except BufferError:
                        producer.poll(0.1)
            if number % 10_000 == 0:
                producer.poll(0)
        assert producer.flush(120) == 0
        progress("waiting for the tiered topic's segments to be uploaded and deleted locally")
        def all_rolled_in_s3() -> bool:
            """Every rolled segment uploaded and deleted locally: -6 == -4, and still so after
            several runs of the task and of the retention check (nothing left to do)."""
            before = [list_offsets(bootstrap, "tiered", [0], spec)[0][0] for spec in (-6, -4)]
            time.sleep(2.5)
            after = [list_offsets(bootstrap, "tiered", [0], spec)[0][0] for spec in (-6, -4)]
            return before == after and after[0] == after[1] > 0

        wait_until("every rolled segment of the tiered topic uploaded and deleted locally", all_rolled_in_s3,
                   timeout_s=600)
        local_start = list_offsets(bootstrap, "tiered", [0], -4)[0][0]
        for topic in ("tiered", "local"):
            consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"bench-{topic}",
                                 "enable.auto.commit": False, "fetch.max.bytes": 50 << 20})
            consumer.assign([TopicPartition(topic, 0, 0)])
            got = 0
            start = time.perf_counter()
            while got < count:
                for message in consumer.consume(10_000, 1.0):
                    if message.error() is not None:
                        raise SystemExit(f"{topic}: {message.error()}")
                    got += 1
            seconds = time.perf_counter() - start
            consumer.close()
            where = (f"S3 below offset {local_start} of {count}" if topic == "tiered" else "local disk")
            rows.append((topic, where, count * len(value) / MB, seconds, count * len(value) / MB / seconds))
    finally:
        cluster.stop()
    return rows


def wait_until(what: str, condition: Callable[[], bool], timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            raise SystemExit(f"timed out after {timeout_s:g} s waiting for {what}")
        time.sleep(0.2)


def main() -> None:
    if TOTAL_BYTES < 2 * SEGMENT_BYTES:
        raise SystemExit(f"BENCH_TIERED_MB={TOTAL_BYTES // MB} is less than two segments of "
                         f"BENCH_TIERED_SEGMENT_MB={SEGMENT_BYTES >> 20}: nothing would be rolled and uploaded")
    s3 = start_embedded_s3()
    try:
        with tempfile.TemporaryDirectory(dir=".") as tmp:
            directory = Path(tmp)
            uploads = upload_rows(s3, directory)
            consumes = consume_rows(s3, directory)
    finally:
        s3.stop()
    print_table(f"Upload to S3 (moto on 127.0.0.1), best of {ROUNDS} rounds, segments of {SEGMENT_BYTES >> 20} "
                f"MiB, parts of {PART_SIZE >> 20} MiB (goal: the task at >= 0.8x raw boto3)",
                ["path", "segments", "MB", "seconds", "MB/s", "vs raw"], uploads)
    print_table("Consume from offset 0 with confluent-kafka, one broker",
                ["topic", "records read from", "MB", "seconds", "MB/s"], consumes, left=(1,))


if __name__ == "__main__":
    main()
