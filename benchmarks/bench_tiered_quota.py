"""The KIP-956 copy quota over a wall-clock minute: a broker uploading a backlog under
`remote.log.manager.copy.max.bytes.per.second` = N, its achieved bytes/s beside N.

The unit tests hold the copy and fetch quotas within 10% over a virtual minute
(tests/tiered/test_rlm_quota.py); this is the same claim with a real clock, a real broker process
(`quorum start` of `LocalCluster`) and a real S3 endpoint (moto's server in a process of its own):
a topic with remote storage on and small segments (BENCH_TIERED_QUOTA_SEGMENT_KIB, default 1024,
the topic-level minimum of `segment.bytes`) is given a backlog larger than the quota can move in
the run, all at once; once it is on the broker's disk, the bytes of `.log` objects in the bucket
are summed every 5 s for BENCH_TIERED_QUOTA_S seconds (default 60). Achieved = what the bucket gained over that span /
the span. Goal: within 10% of N (BENCH_TIERED_QUOTA_MBPS, default 1 MB/s). The worst 5 s span
is printed beside it, for what it says about the rate's evenness (Kafka's quota is measured over
11 windows of a second, so a few seconds may run ahead or behind); it is not the goal.

Why the bucket and not the broker's own count: the broker counts a segment against the quota
before it copies it, so its own figure would agree with its quota by construction; the bucket
says what was uploaded. Why from when the backlog is in: until then the task's rate is bounded by
what has rolled, not by the quota. A segment counts when its `.log` object exists (segments are
below the multipart part size: one put_object), so the span's ends are off by a segment at most
(~2% of a minute at the defaults).

Run: `.venv/bin/python -m benchmarks.bench_tiered_quota` (about 80 s).
"""

from __future__ import annotations

import os
import sys
import tempfile
import time
from pathlib import Path

if __package__ in (None, ""):  # run as a script: make `benchmarks` and `quorum` importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.bench_tiered import start_s3_process, wait_until  # noqa: E402
from benchmarks.table import print_table, progress  # noqa: E402
from tiered_follower.embedded_s3 import EmbeddedS3, s3_properties  # noqa: E402

MB = 1_000_000
QUOTA = int(float(os.environ.get("BENCH_TIERED_QUOTA_MBPS", "1")) * MB)
"""remote.log.manager.copy.max.bytes.per.second"""
SECONDS = float(os.environ.get("BENCH_TIERED_QUOTA_S", "60"))
SEGMENT_BYTES = int(os.environ.get("BENCH_TIERED_QUOTA_SEGMENT_KIB", "1024")) * 1024
SAMPLE_S = 5.0
PROGRESS_S = 10.0
BACKLOG_BYTES = int(QUOTA * (SECONDS + 30))
"""More than the quota lets through in the run and the time before it (production, the roll)."""
BUCKET = "quota"


def uploaded_log_bytes(client: object) -> int:
    """Bytes of every `.log` object in the bucket (uploaded segments)."""
    total = 0
    for page in client.get_paginator("list_objects_v2").paginate(Bucket=BUCKET):  # type: ignore[attr-defined]
        total += sum(o["Size"] for o in page.get("Contents", ()) if o["Key"].endswith(".log"))
    return total


def produce_backlog(bootstrap: str) -> int:
    """BACKLOG_BYTES of 1 KB records to the topic, all at once; returns how many were sent."""
    from confluent_kafka import Producer

    value = os.urandom(1000)
    count = BACKLOG_BYTES // len(value)
    progress(f"producing a backlog of {count} records of 1 KB ({BACKLOG_BYTES / MB:.0f} MB)")
    # batches well below a segment, so that segments are the size asked (a batch is never split)
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 20, "batch.size": 64 << 10})
    for number in range(count):
        while True:
            try:
                producer.produce("quota", value)
                break
            except BufferError:
                producer.poll(0.1)
        if number % 10_000 == 0:
            producer.poll(0)
    if producer.flush(120) != 0:
        raise SystemExit("the backlog was not delivered within 120 s")
    return count


def measure(s3: EmbeddedS3, directory: Path) -> list[tuple[object, ...]]:
    from confluent_kafka.admin import AdminClient, NewTopic

    from quorum.launcher import LocalCluster

    settings = {
        **s3_properties(s3.endpoint_url, BUCKET),
        "remote.log.manager.task.interval.ms": "500",
        "remote.log.manager.copy.max.bytes.per.second": str(QUOTA),
    }
    s3.create_bucket(BUCKET)
    client = s3.client()
    cluster = LocalCluster(directory / "cluster", controllers=1, brokers=1, settings=settings)
    cluster.format_storage()
    cluster.start()
    try:
        bootstrap = cluster.bootstrap_servers
        config = {"remote.storage.enable": "true", "segment.bytes": str(SEGMENT_BYTES)}
        admin = AdminClient({"bootstrap.servers": bootstrap})  # kept: its futures die with it
        for future in admin.create_topics([NewTopic("quota", 1, 1, config=config)]).values():
            future.result(30)
        produced = produce_backlog(bootstrap)
        wait_until("the first segment uploaded", lambda: uploaded_log_bytes(client) > 0, timeout_s=60)
        progress(f"measuring the upload for {SECONDS:g} s (copy quota {QUOTA / MB:g} MB/s)")
        start, first = time.monotonic(), uploaded_log_bytes(client)
        samples = [(0.0, first)]
        next_progress = PROGRESS_S
        while (elapsed := time.monotonic() - start) < SECONDS:
            time.sleep(min(SAMPLE_S, SECONDS - elapsed))
            at, size = time.monotonic() - start, uploaded_log_bytes(client)
            samples.append((at, size))
            if at >= next_progress - 0.5 or at >= SECONDS:
                progress(f"{at:4.0f} s: {(size - first) / MB:6.1f} MB uploaded, {(size - first) / MB / at:5.2f} MB/s")
                next_progress += PROGRESS_S
        end_at, last = samples[-1]
        if last >= produced * 1000 - 2 * SEGMENT_BYTES:  # all but the active segment is up
            raise SystemExit("the backlog ran out before the run ended: the rate measured is not the quota's")
    finally:
        cluster.stop()
    achieved = (last - first) / end_at
    worst = max(
        abs((size - before) / (at - at_before) - QUOTA) / QUOTA
        for (at_before, before), (at, size) in zip(samples, samples[1:], strict=False)
        if at - at_before > 0
    )
    return [
        (
            f"copy quota over {end_at:.0f} s",
            QUOTA / MB,
            (last - first) / MB,
            achieved / MB,
            achieved / QUOTA,
            f"{worst:.0%}",
            "within 10% of the quota (0.9-1.1x)",
        )
    ]


def main() -> None:
    s3 = start_s3_process()
    try:
        with tempfile.TemporaryDirectory(dir=".") as tmp:
            rows = measure(s3, Path(tmp))
    finally:
        s3.stop()
    print_table(
        f"Upload under remote.log.manager.copy.max.bytes.per.second, wall clock, one broker, segments of "
        f"{SEGMENT_BYTES >> 10} KiB, S3 = moto on 127.0.0.1 (bytes: the bucket's .log objects)",
        ["run", "quota MB/s", "MB uploaded", "achieved MB/s", "vs quota", f"worst {SAMPLE_S:g} s vs quota", "goal"],
        rows,
        left=(6,),
    )
    print("(figures taken on a shared machine are indicative; moto, the broker and this script each in a process)")


if __name__ == "__main__":
    main()
