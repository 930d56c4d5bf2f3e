"""A cold read's first chunk from S3 (moto in its own process on 127.0.0.1): how long
`S3RemoteStorage.fetch_log` of a segment's first 8 MiB takes on a storage that has read nothing of
it yet (its manifest not cached), the way a broker's first Fetch of a tiered segment after a start
or a seek waits for it, and again for each next segment its fetch-ahead reaches. Two rows, rounds
interleaved, the median of BENCH_TIERED_COLD_ROUNDS (default 15) each:

* the segment's metadata carries its manifest's facts (KIP-917 custom metadata): one GET;
* the same segment as uploaded before that (no custom metadata): its manifest GET, then the range
  GET (the peer).

Goal: the first below the peer by about one manifest GET. Starting the manifest's GET beside the
range's for a segment without custom metadata was tried here too: 1.03-1.04x the peer (moto
answers one request's Python at a time; the manifest GET costs it CPU, not latency), so it was
not kept. Run: `.venv/bin/python -m benchmarks.bench_tiered_cold` (about 10 s).
"""

from __future__ import annotations

import os
import statistics
import tempfile
import time
import uuid
from dataclasses import replace
from pathlib import Path

from benchmarks.bench_tiered import start_s3_process
from benchmarks.table import print_table
from quorum.broker.remote_tier import IndexType, RemoteSegmentMetadata, SegmentUpload, TopicIdPartition
from quorum.log.epoch_cache import EpochEntry
from tiered_follower.s3_client import S3Client, S3Config
from tiered_follower.s3_storage import S3RemoteStorage

ROUNDS = int(os.environ.get("BENCH_TIERED_COLD_ROUNDS", "15"))
CHUNK = 8 << 20
SEGMENT = 16 << 20


def main() -> None:
    s3 = start_s3_process()
    try:
        bucket = f"cold-{uuid.uuid4().hex[:12]}"
        s3.create_bucket(bucket)
        config = S3Config.from_properties(s3.properties(bucket))
        partition = TopicIdPartition("cold", uuid.uuid4(), 0)
        segment = RemoteSegmentMetadata(partition, uuid.uuid4(), 0, 999, (EpochEntry(0, 0),), SEGMENT, 0, 1, 0)
        with tempfile.TemporaryDirectory() as scratch:
            path = Path(scratch) / "s.log"
            path.write_bytes(os.urandom(SEGMENT))
            custom = S3RemoteStorage(S3Client(config)).copy_segment(
                segment, SegmentUpload(str(path), SEGMENT, {kind: b"" for kind in IndexType}))
        cases = {
            "custom metadata: no manifest GET": replace(segment, custom_metadata=custom),
            "manifest only, then the range (the peer)": segment,
        }
        times: dict[str, list[float]] = {name: [] for name in cases}
        gets: dict[str, int] = {}
        for _ in range(ROUNDS):
            for name, read in cases.items():
                storage = S3RemoteStorage(S3Client(config))  # nothing cached
                start = time.perf_counter()
                assert len(storage.fetch_log(read, 0, CHUNK)) == CHUNK
                times[name].append((time.perf_counter() - start) * 1000)
                gets[name] = storage.client.stats["get_object"]
    finally:
        s3.stop()
    peer = statistics.median(times["manifest only, then the range (the peer)"])
    rows = [[name, gets[name], f"{statistics.median(t):.1f}", f"{min(t):.1f}", f"{statistics.median(t) / peer:.2f}"]
            for name, t in times.items()]
    print_table(f"A cold read of a segment's first {CHUNK >> 20} MiB from S3 (moto), median of {ROUNDS} rounds",
                ["segment", "GETs", "median ms", "best ms", "vs peer"], rows, left=(0,))
    print("(figures taken on a shared machine are indicative; moto in its own process)")


if __name__ == "__main__":
    main()
