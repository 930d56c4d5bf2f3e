"""Tiered storage throughput against one S3 endpoint (moto's server on 127.0.0.1), in one run:

* upload: the leader's remote log task (`tiered_follower.RemoteLogManager.run_once` over a real
  partition: COPY_SEGMENT_STARTED, the `.log` in parts, the `.indexes`, the manifest,
  COPY_SEGMENT_FINISHED, the producer snapshot replayed from the segment's batches) beside raw
  boto3 uploading the same `.log` files with the same part size (put_object up to it, multipart
  above), read from the same disk. Goal: the task at 0.8x raw boto3 or better. Rounds alternate
  raw and task, each to a fresh bucket; the best of each is kept.
* consume: confluent-kafka reading a partition from offset 0 whose segments are all in S3 but
  the active one (`local.retention.bytes`=1), beside the same records read from a partition on
  the broker's disk, from a `quorum start` broker of `LocalCluster` with tiered storage on, and
  beside raw boto3 GETs of the same `.log` objects (the broker's chunk size at a time from one
  GET of each object, as its fetch-ahead reads a run of chunks, as many at a time as it runs).
  Goal: S3 at 0.8x the local disk or better. The two reads are made BENCH_TIERED_PAIRS times
  (default 3), alternating which goes first, the broker restarted between pairs so that every S3
  read is a cold one; the figure is the median of the pairs' ratios, each row the median read.
  Beside each: how long the first records took, and the CPU seconds the broker (and of it, its
  event loop: the rest is its reader and GET threads), the S3 server and the consumer used
  meanwhile (on a shared machine a read's CPU decides its speed as much as a wait). A last row
  reads the tiered topic again from the chunk cache: labelled, as it is not an S3 read.
* a backfill under a fetch quota: the p99 of an acks=all producer (librdkafka's own delivery
  latency) alone, then while a consumer reads the tiered topic from offset 0 over and over; first
  without a quota, then with `remote.log.manager.fetch.max.bytes.per.second` at each of
  BENCH_TIERED_FETCH_QUOTAS_MB (default 20,5; the broker restarted with it, and the producer's
  p99 alone measured again after the restart, as that row's peer). The backfill's rate is printed
  beside its quota, and the broker's own mean time per Produce over the window (Kafka's request
  metrics: total, then queue / local / remote / send, and the share of produces it took over 1 ms
  longer), which says whether the backfill slows the broker's handling of a produce or what lies
  around it. Goal: the p99 under a quota'd backfill within 2x of the one alone. These windows are
  BENCH_TIERED_P99_S seconds each (default 10), not a minute: the minute-long quota
  checks are tests in virtual time (tests/tiered/test_rlm_quota.py).

Run: `.venv/bin/python -m benchmarks.bench_tiered`. BENCH_TIERED_PARTS (default upload,consume,p99)
picks the parts to run (p99 needs consume: it reuses its cluster), so that one part can be measured
again, or profiled, without the others' three minutes (BENCH_TIERED_PYSPY=path/to/py-spy samples the
broker while each topic is consumed, into bench_tiered-<topic>.pyspy.txt). BENCH_TIERED_MB (default 128) sets the bytes
uploaded per round and consumed per topic, BENCH_TIERED_SEGMENT_MB (default 16) the segment size
(the part size is 8 MiB, so each segment goes up in two parts). moto keeps objects in memory and is
Python: it is the ceiling of both sides here, which is why the task is compared with boto3 on it.
It runs in a process of its own (`python -m moto.server`), as S3 is not in the broker's or the
clients' process: in this script's process it shared one interpreter lock with the consumer's loop
and its own figures were the other side's.
"""

from __future__ import annotations

import asyncio
import itertools
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import NamedTuple

if __package__ in (None, ""):  # run as a script: make `benchmarks` and `quorum` importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.node_metrics import Histogram, histograms, metrics_url  # noqa: E402
from benchmarks.table import print_table, progress  # noqa: E402
from quorum.broker.log_config import LogConfig  # noqa: E402
from quorum.broker.partition import Partition  # noqa: E402
from quorum.wire.records import Record, build_batch, patch_base_offset  # noqa: E402
from tiered_follower.chunk_cache import AHEAD_STREAMS, DEFAULT_CHUNK_SIZE  # noqa: E402
from tiered_follower.embedded_s3 import EmbeddedS3, s3_properties  # noqa: E402
from tiered_follower.remote_log_manager import RemoteLogManager  # noqa: E402

MB = 1_000_000
TOTAL_BYTES = int(os.environ.get("BENCH_TIERED_MB", "128")) * MB
SEGMENT_BYTES = int(os.environ.get("BENCH_TIERED_SEGMENT_MB", "16")) * (1 << 20)
PART_SIZE = 8 << 20
CHUNK_SIZE = DEFAULT_CHUNK_SIZE  # the broker's rsm.config.chunk.size default (tiered_follower.chunk_cache)
AHEAD = AHEAD_STREAMS
"""GETs in flight at most for a sequential reader: the broker's fetch-ahead streams"""
P99_SECONDS = float(os.environ.get("BENCH_TIERED_P99_S", "10"))
FETCH_QUOTAS = [int(float(q) * MB) for q in os.environ.get("BENCH_TIERED_FETCH_QUOTAS_MB", "20,5").split(",")]
"""remote.log.manager.fetch.max.bytes.per.second values the producer's p99 is measured under (a broker restart each)"""
PROFILER = os.environ.get("BENCH_TIERED_PYSPY")
"""A py-spy binary: when set, the broker is sampled (raw collapsed stacks, 500 Hz, idle threads
left out) while each topic is consumed, into bench_tiered-<topic>.pyspy.txt in the current
directory, so that a change to the read path can be profiled before and after in the same way"""
PAIRS = int(os.environ.get("BENCH_TIERED_PAIRS", "3"))
"""Cold reads of the tiered topic, each beside a read of the local one (alternating which goes first),
the broker restarted between pairs so that its chunk cache is empty: one sub-second read on a shared
machine said more of the neighbours' load than of the read (single runs: 0.23-1.5x)"""
PARTS = {part.strip() for part in os.environ.get("BENCH_TIERED_PARTS", "upload,consume,p99").split(",")}
"""Which parts run: "upload", "consume", "p99" (the last within consume's cluster, so only beside it)"""
ROUNDS = 3
BROKER = 101
_buckets = itertools.count()


def filled_partition(directory: Path) -> Partition:
    """A leader partition whose log holds TOTAL_BYTES in SEGMENT_BYTES segments of 64 KiB batches."""
    partition = Partition(
        "bench",
        0,
        uuid.uuid4(),
        directory,
        LogConfig(segment_bytes=SEGMENT_BYTES, remote_storage_enable=True, local_retention_ms=None, retention_ms=None),
        BROKER,
    )
    partition.update_state(BROKER, 1, (BROKER,))
    value = os.urandom(1000)
    now_ms = int(time.time() * 1000)
    batch = bytearray(build_batch([Record(i, now_ms, b"", value) for i in range(64)], partition_leader_epoch=1))
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
                etag = client.upload_part(
                    Bucket=bucket,
                    Key=key,
                    UploadId=upload,
                    PartNumber=part,  # type: ignore
                    Body=data[position : position + PART_SIZE],
                )["ETag"]
                parts.append({"PartNumber": part, "ETag": etag})
            client.complete_multipart_upload(
                Bucket=bucket,
                Key=key,
                UploadId=upload,  # type: ignore
                MultipartUpload={"Parts": parts},
            )
        sent += len(data)
    return time.perf_counter() - start, sent


def task_upload(s3: EmbeddedS3, partition: Partition) -> tuple[float, int]:
    """Seconds and bytes for one run of the remote log task uploading every rolled segment."""
    properties = {
        **s3_properties(s3.endpoint_url, fresh_bucket(s3)),
        "rsm.config.storage.s3.multipart.upload.part.size": str(PART_SIZE),
    }
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
    return [
        ("raw boto3 (put_object / multipart)", len(files), size / MB, raw_best, raw_rate, 1.0),
        ("remote log task (objects + metadata)", len(files), size / MB, task_best, task_rate, task_rate / raw_rate),
    ]


def consume_rows(s3: EmbeddedS3, directory: Path) -> tuple[list[list[object]], list[tuple[object, ...]]]:
    from confluent_kafka import Producer
    from confluent_kafka.admin import AdminClient, NewTopic

    from quorum.get_offsets import list_offsets
    from quorum.launcher import LocalCluster

    settings = {
        **s3_properties(s3.endpoint_url, fresh_bucket(s3)),
        "log.segment.bytes": str(SEGMENT_BYTES),
        "remote.log.manager.task.interval.ms": "500",
        "log.retention.check.interval.ms": "1000",
        "quorum.metrics.port": "0",  # the broker's S3 GETs per read (`broker_s3_gets`)
    }
    cluster = LocalCluster(directory / "cluster", controllers=1, brokers=1, settings=settings)
    cluster.format_storage()
    cluster.start()
    rows: list[list[object]] = []
    try:
        bootstrap = cluster.bootstrap_servers
        admin = AdminClient({"bootstrap.servers": bootstrap})
        topics = [
            NewTopic("tiered", 1, 1, config={"remote.storage.enable": "true", "local.retention.bytes": "1"}),
            NewTopic("local", 1, 1),
            NewTopic("p99", 1, 1),
        ]
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

        wait_until(
            "every rolled segment of the tiered topic uploaded and deleted locally", all_rolled_in_s3, timeout_s=600
        )
        local_start = list_offsets(bootstrap, "tiered", [0], -4)[0][0]
        broker = next(n for n, spec in cluster.specs.items() if spec.role == "broker")
        s3_pid = s3.server.process.pid if isinstance(s3.server, _MotoProcess) else None
        where = {"tiered": f"S3 below offset {local_start} of {count}", "local": "local disk"}
        reads: dict[str, list[list[object]]] = {"tiered": [], "local": []}
        for pair in range(PAIRS):
            if pair:  # a broker with an empty chunk cache: every S3 read measured is a cold one
                progress(f"restarting the broker (pair {pair + 1} of {PAIRS}: its chunk cache empty)")
                cluster.kill(broker, signal.SIGTERM)
                cluster.start_node(broker)
                cluster.wait_ready()
                wait_until("the restarted broker answering the tiered topic's offsets as before", lambda: [
                    list_offsets(bootstrap, "tiered", [0], spec)[0][0] for spec in (-6, -4)] == [local_start] * 2,
                    timeout_s=120)  # fmt: skip
            warm_up_group_coordinator(bootstrap, f"bench-warm-up-{pair}")
            broker_pid = cluster.processes[broker].pid
            for topic in ("tiered", "local") if pair % 2 == 0 else ("local", "tiered"):
                seconds, first_ms, used = consume_all(bootstrap, topic, f"bench-{topic}-{pair}", count, broker_pid,
                                                      s3_pid, lambda: broker_s3_gets(cluster.specs[broker].log_path))
                reads[topic].append([topic, where[topic], count * len(value) / MB, seconds,
                                     count * len(value) / MB / seconds, first_ms, *used])  # fmt: skip
        # the median read of each (by time), and the median of the pairs' ratios as the tiered row's
        tiered, local = (sorted(reads[topic], key=lambda row: row[3])[PAIRS // 2] for topic in ("tiered", "local"))
        ratios = sorted(near[3] / far[3] for far, near in zip(reads["tiered"], reads["local"], strict=True))
        progress("the pairs' S3 / local ratios: " + ", ".join(f"{ratio:.2f}" for ratio in ratios))
        progress("reading the tiered topic again: its chunks now in the chunk cache (not an S3 read)")
        seconds, first_ms, used = consume_all(bootstrap, "tiered", "bench-tiered-warm", count, broker_pid, s3_pid,
                                              lambda: broker_s3_gets(cluster.specs[broker].log_path))
        warm = ["tiered", "chunk cache (warm: after the last cold read)", count * len(value) / MB, seconds,
                count * len(value) / MB / seconds, first_ms, *used]  # fmt: skip
        raw = raw_gets(s3, settings["rsm.config.storage.s3.bucket.name"])
        local_rate = local[4]
        rows = [tiered, local, warm, [*raw, "-", "-", "-", "-", "-", "-"]]
        tiered[5:5] = [ratios[PAIRS // 2], f">= 0.8x local ({PAIRS} pairs' median)"]
        local[5:5] = [1.0, "(the peer)"]
        warm[5:5] = [warm[4] / local_rate, "(not an S3 read)"]
        rows[3][5:5] = [rows[3][4] / local_rate, "(S3's ceiling here)"]
        del producer  # its connections would log every refusal while the broker restarts
        p99_rows = producer_p99_rows(cluster, bootstrap, value, local_start - 1, count - 1) if "p99" in PARTS else []
    finally:
        cluster.stop()
    return rows, p99_rows


def consume_all(bootstrap: str, topic: str, group: str, count: int, broker_pid: int,
                s3_pid: int | None, s3_gets: Callable[[], int]) -> tuple[float, float | None, list[float]]:
    """One confluent-kafka consumer reading `count` records of `topic` from offset 0: the seconds it
    took, when its first records came (ms), the CPU seconds the broker, its event loop, the S3
    server and this process used meanwhile, and the S3 GETs the broker made (`s3_gets`' count)."""
    from confluent_kafka import Consumer, TopicPartition

    progress(f"consuming {topic} from offset 0")
    profiler = start_profiler(broker_pid, topic)  # before the consumer, which fetches once assigned
    # fetch.queue.backoff.ms: librdkafka stops fetching while its queue holds queued.max.messages.kbytes
    # (64 MiB) and by default looks again only 1000 ms later; whichever read outran this loop stalled
    # a whole second (a trace of the broker's Fetches: 1.0 s without one, at ~100 MB of 128), which
    # made single reads of the same code 0.4-1.9 s
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False,
                         "fetch.max.bytes": 50 << 20, "fetch.queue.backoff.ms": 10})  # fmt: skip
    consumer.assign([TopicPartition(topic, 0, 0)])
    got = 0
    first_ms: float | None = None
    gets = s3_gets()
    cpu = cpu_seconds(broker_pid, s3_pid)
    loop_cpu = thread_cpu_seconds(broker_pid, broker_pid)
    start = time.perf_counter()
    while got < count:
        # never more than what is left: consume(n) waits out its timeout for n records, and
        # asking 10 000 when fewer were left added up to a second to both rows; the first
        # call asks for one, so that the first records' time is the first record's
        for message in consumer.consume(min(10_000, count - got) if got else 1, 1.0):
            if message.error() is not None:
                raise SystemExit(f"{topic}: {message.error()}")
            got += 1
        if got and first_ms is None:
            first_ms = (time.perf_counter() - start) * 1000
    seconds = time.perf_counter() - start
    used = [after - before for before, after in zip(cpu, cpu_seconds(broker_pid, s3_pid), strict=True)]
    used[1:1] = [thread_cpu_seconds(broker_pid, broker_pid) - loop_cpu]
    used.append(s3_gets() - gets)
    stop_profiler(profiler)
    consumer.close()
    return seconds, first_ms, used


def broker_s3_gets(log_path: Path) -> int:
    """The S3 GETs the broker has made since it started (`tiered_storage_s3_requests_total`), from the
    metrics endpoint its log names last (a restarted broker serves on a new port)."""
    import re
    import urllib.request

    with urllib.request.urlopen(metrics_url(log_path), timeout=10) as answer:
        text = answer.read().decode()
    found = re.search(r'^tiered_storage_s3_requests_total\{operation="get_object"\} ([0-9.e+]+)$', text, re.M)
    return int(float(found.group(1))) if found else 0


def start_profiler(pid: int, topic: str) -> subprocess.Popen[bytes] | None:
    """py-spy sampling `pid` while `topic` is consumed (BENCH_TIERED_PYSPY), once it has attached."""
    if not PROFILER:
        return None
    output = Path(f"bench_tiered-{topic}.pyspy.txt").resolve()
    extra = os.environ.get("BENCH_TIERED_PYSPY_ARGS", "").split()  # --gil, --native, ...
    command = [PROFILER, "record", "--pid", str(pid), "--format", "raw", "--rate", "500", "--output", str(output)]
    process = subprocess.Popen([*command, *extra], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    time.sleep(1.0)  # py-spy reads the interpreter's memory layout before its first sample
    if process.poll() is not None:
        raise SystemExit(f"py-spy exited with {process.returncode}: {process.stderr.read().decode()[-500:]}")  # type: ignore[union-attr]
    return process


def stop_profiler(process: subprocess.Popen[bytes] | None) -> None:
    """SIGINT makes py-spy write its samples; it is waited for 30 s, then killed."""
    if process is None:
        return
    process.send_signal(signal.SIGINT)
    try:
        process.wait(30)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait(10)
        raise SystemExit("py-spy did not stop within 30 s of SIGINT") from None
    progress(f"py-spy: {process.stderr.read().decode().strip().splitlines()[-1:]}")  # type: ignore[union-attr]


def warm_up_group_coordinator(bootstrap: str, group: str = "bench-warm-up") -> None:
    """A consumer of a group reads one record and goes: the broker creates `__consumer_offsets`
    (50 partitions, each log opened and its files synced) when a group first asks for its
    coordinator. Without this the first consumer measured (the tiered topic's) paid for it: the
    broker's profile showed those logs opening during its first records (~0.5 s of them)."""
    from confluent_kafka import Consumer, TopicPartition

    progress("warming up: a group consumer reads one record (the broker creates __consumer_offsets)")
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False})
    consumer.assign([TopicPartition("local", 0, 0)])
    deadline = time.monotonic() + 60
    while not [m for m in consumer.consume(1, 1.0) if m.error() is None]:
        if time.monotonic() > deadline:
            raise SystemExit("the warm-up consumer read nothing in 60 s")
    consumer.commit(asynchronous=False)  # the group's coordinator found and its offsets written
    consumer.close()


def cpu_seconds(*pids: int | None) -> list[float]:
    """CPU seconds (user + system) used so far by each process (0 for None), then by this one (the
    consumer, librdkafka's threads included): what a read costs each side, which on a shared
    machine decides its speed as much as any wait does."""
    tick = os.sysconf("SC_CLK_TCK")
    used = []
    for pid in pids:
        if pid is None:
            used.append(0.0)
            continue
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        used.append((int(fields[11]) + int(fields[12])) / tick)  # utime, stime
    times = os.times()
    return [*used, times.user + times.system]


def thread_cpu_seconds(pid: int, tid: int) -> float:
    """CPU seconds (user + system) one thread of `pid` has used: the broker's main thread is its event
    loop, so the broker's figure less this one is what its reader and fetch-ahead threads cost."""
    fields = Path(f"/proc/{pid}/task/{tid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def raw_gets(s3: EmbeddedS3, bucket: str) -> list[object]:
    """boto3 alone reading every tiered `.log` object with one GET, CHUNK_SIZE bytes at a time,
    AHEAD objects at a time: the shape of the broker's fetch-ahead of a sequential reader."""
    from concurrent.futures import ThreadPoolExecutor

    from tiered_follower.s3_client import S3Client, S3Config

    client = S3Client(S3Config.from_properties(s3.properties(bucket))).s3  # the broker's boto3 settings
    listing = client.list_objects_v2(Bucket=bucket)
    objects = [(o["Key"], o["Size"]) for o in listing.get("Contents", ()) if o["Key"].endswith(".log")]

    def get(item: tuple[str, int]) -> int:
        key, size = item
        body = client.get_object(Bucket=bucket, Key=key, Range=f"bytes=0-{size - 1}")["Body"]
        return sum(len(body.read(CHUNK_SIZE)) for _ in range(0, size, CHUNK_SIZE))

    start = time.perf_counter()
    with ThreadPoolExecutor(max_workers=AHEAD) as pool:
        total = sum(pool.map(get, objects))
    seconds = time.perf_counter() - start
    return [
        "raw boto3",
        f"a GET per object, read {CHUNK_SIZE >> 20} MiB at a time, {AHEAD} at a time, {len(objects)} objects",
        total / MB,
        seconds,
        total / MB / seconds,
    ]


def producer_p99_rows(cluster: object, bootstrap: str, value: bytes, remote_end: int,
                      local_end: int) -> list[tuple[object, ...]]:
    """The p99 of an acks=all producer alone, then beside a backfill of the tiered topic: without a
    fetch quota, then under each of FETCH_QUOTAS (the broker restarted with it, and the producer's
    p99 alone measured again after that restart: the peer of that row). Beside each quota's row, the
    same backfill rate read from the broker's local disk (the `local` topic, the consumer pacing
    itself to the quota): what any consumer of that rate costs the producer, tier or not."""
    from quorum.launcher import LocalCluster

    assert isinstance(cluster, LocalCluster)
    rows: list[tuple[object, ...]] = []
    broker = next(n for n, spec in cluster.specs.items() if spec.role == "broker")
    log_path = cluster.specs[broker].log_path

    def produce_times() -> dict[str, Histogram]:
        """The broker's Produce request metrics now (its endpoint: a restarted broker serves on a new port)."""
        found = histograms(metrics_url(log_path))
        return {phase: found.get((f"kafka_network_RequestMetrics_{phase}", (("request", "Produce"),)),
                                 Histogram((), 0.0)) for phase in PRODUCE_PHASES}

    for quota in [None, *FETCH_QUOTAS]:
        if quota is not None:
            progress(f"restarting the broker with remote.log.manager.fetch.max.bytes.per.second={quota}")
            cluster.kill(broker, signal.SIGTERM)
            cluster.settings["remote.log.manager.fetch.max.bytes.per.second"] = str(quota)
            cluster.write_configs()
            cluster.start_node(broker)
            cluster.wait_ready()
        named = "no fetch quota" if quota is None else f"fetch quota {quota / MB:g} MB/s"
        alone = producer_p99(bootstrap, value, False, remote_end, times=produce_times)
        rows.append((f"none ({named})", "-", *alone.latencies, "-", "(the peer)", alone.produce_share))
        held = producer_p99(bootstrap, value, True, remote_end, times=produce_times)
        goal = "-" if quota is None else "<= 2x none"
        rows.append((f"from S3, {named}", "-" if quota is None else f"{quota / MB:g}", *held.latencies,
                     held.p99_ms / alone.p99_ms, goal, held.produce_share))  # fmt: skip
        if quota is not None:
            paced = producer_p99(bootstrap, value, True, local_end, topic="local", pace=quota, times=produce_times)
            rows.append((f"from local disk, paced to {quota / MB:g} MB/s", "-", *paced.latencies,
                         paced.p99_ms / alone.p99_ms, "(the same rate, no tier)", paced.produce_share))  # fmt: skip
    return rows


class ProducerWindow(NamedTuple):
    """One producer_p99 window: what its row shows."""

    p50_ms: float
    p99_ms: float
    backfill_mb_s: float
    produce_share: str
    """`produce_share` of the window, or "-" without the broker's metrics"""

    @property
    def latencies(self) -> tuple[float, float, float]:
        """p50, p99 and the backfill's rate: the row's three figure columns."""
        return self.p50_ms, self.p99_ms, self.backfill_mb_s


def producer_p99(bootstrap: str, value: bytes, backfill: bool, remote_end: int, topic: str = "tiered",
                 pace: int | None = None,
                 times: Callable[[], dict[str, Histogram]] | None = None) -> ProducerWindow:
    """p50 and p99 (ms) of librdkafka's delivery latency of an acks=all producer sending 200 records/s
    for P99_SECONDS, the MB/s a backfill consumer of `topic` read meanwhile (0 without), and the
    broker's own time for those Produce requests (`produce_share`, from `times`); the backfill reads
    the topic up to `remote_end` over and over (back to offset 0 at its end), no faster than `pace`
    bytes a second when given (it sleeps while ahead)."""
    import threading

    from confluent_kafka import Consumer, Producer, TopicPartition

    progress(f"acks=all producer for {P99_SECONDS:g} s, {'with' if backfill else 'without'} a backfill")
    stop = threading.Event()
    read = [0]

    def backfill_consumer() -> None:
        consumer = Consumer(
            {
                "bootstrap.servers": bootstrap,
                "group.id": f"backfill-{time.monotonic()}",
                "enable.auto.commit": False,
                "fetch.max.bytes": 50 << 20,
            }
        )
        consumer.assign([TopicPartition(topic, 0, 0)])
        began = time.perf_counter()
        while not stop.is_set():
            if pace is not None and read[0] > pace * (time.perf_counter() - began):
                time.sleep(0.005)
                continue
            for message in consumer.consume(1000, 0.2):
                if message.error() is None:
                    read[0] += len(message.value() or b"")
                    if message.offset() >= remote_end:
                        consumer.seek(TopicPartition(topic, 0, 0))
                        break
        consumer.close()

    thread = threading.Thread(target=backfill_consumer, name="backfill") if backfill else None
    if thread is not None:
        thread.start()
        time.sleep(1.0)  # the backfill under way before the producer's clock starts
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 0})
    latencies: list[float] = []

    def delivered(error: object, message: object) -> None:
        if error is not None:
            raise SystemExit(f"acks=all producer: {error}")
        latencies.append(message.latency() * 1000)  # type: ignore[attr-defined]

    for _ in range(20):  # connected and warm (metadata, the leader's connection) before the clock starts
        producer.produce("p99", value)
    if producer.flush(60) != 0:
        raise SystemExit("the acks=all producer's warm-up did not complete within 60 s")
    before = times() if times is not None else None
    first_read, start = read[0], time.perf_counter()
    deadline = start + P99_SECONDS
    while time.perf_counter() < deadline:
        producer.produce("p99", value, on_delivery=delivered)
        producer.poll(0.005)
    if producer.flush(60) != 0:
        raise SystemExit("the acks=all producer did not deliver everything within 60 s")
    backfill_rate = (read[0] - first_read) / MB / (time.perf_counter() - start)
    share = "-" if times is None or before is None else produce_share(before, times())
    stop.set()
    if thread is not None:
        thread.join(30)
    latencies.sort()
    return ProducerWindow(latencies[len(latencies) // 2], latencies[int(len(latencies) * 0.99)], backfill_rate, share)


PRODUCE_PHASES = ("TotalTimeMs", "RequestQueueTimeMs", "LocalTimeMs", "RemoteTimeMs", "ResponseSendTimeMs")
SLOW_PRODUCE_MS = 1.0
"""A bucket bound of the request histograms (`quorum.net.latency.BUCKETS_MS`): the share of Produce requests
the broker took longer than this over, set beside the client's p99."""


def produce_share(before: dict[str, Histogram], after: dict[str, Histogram]) -> str:
    """The broker's mean time per Produce over a window, in ms: total, then queue / local / remote /
    send (Kafka's request metrics). Beside the client's delivery latency it says whether a backfill
    slows the broker's handling of a produce or what comes before and after it (the frame's reading
    while the event loop writes a backfill's answers, the client, the machine)."""
    window = {phase: after[phase].minus(before[phase]) for phase in PRODUCE_PHASES}
    means = {phase: histogram.mean() for phase, histogram in window.items()}
    total = window["TotalTimeMs"]
    if means["TotalTimeMs"] is None:
        return "-"
    parts = " / ".join(f"{means[phase] or 0:.3f}" for phase in PRODUCE_PHASES[1:])
    within = dict(total.buckets).get(SLOW_PRODUCE_MS, 0.0)
    return f"{means['TotalTimeMs']:.3f} ({parts}); {1 - within / total.count:.1%} over {SLOW_PRODUCE_MS:g} ms"


def wait_until(what: str, condition: Callable[[], bool], timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            raise SystemExit(f"timed out after {timeout_s:g} s waiting for {what}")
        time.sleep(0.2)


class _MotoProcess:
    """`EmbeddedS3.server` for a moto server in a child process: stopped by its pid."""

    def __init__(self, process: subprocess.Popen[bytes]) -> None:
        self.process = process

    def stop(self) -> None:
        self.process.terminate()
        try:
            self.process.wait(10)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait(10)


def start_s3_process() -> EmbeddedS3:
    """moto's S3 server in a process of its own on 127.0.0.1, once it answers (30 s at most)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    process = subprocess.Popen(
        [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    s3 = EmbeddedS3(f"http://127.0.0.1:{port}", _MotoProcess(process))

    def answers() -> bool:
        if process.poll() is not None:
            raise SystemExit(f"moto's server exited with {process.returncode} before answering")
        try:
            s3.client().list_buckets()  # type: ignore[attr-defined]
            return True
        except Exception:
            return False

    try:
        wait_until(f"moto's server answering on 127.0.0.1:{port}", answers, timeout_s=30)
    except BaseException:
        s3.stop()
        raise
    return s3


def main() -> None:
    if PAIRS < 1:
        raise SystemExit(f"BENCH_TIERED_PAIRS={PAIRS}: at least one pair of reads (tiered and local) is needed")
    if TOTAL_BYTES < 2 * SEGMENT_BYTES:
        raise SystemExit(
            f"BENCH_TIERED_MB={TOTAL_BYTES // MB} is less than two segments of "
            f"BENCH_TIERED_SEGMENT_MB={SEGMENT_BYTES >> 20}: nothing would be rolled and uploaded"
        )
    s3 = start_s3_process()
    try:
        with tempfile.TemporaryDirectory(dir=".") as tmp:
            directory = Path(tmp)
            uploads = upload_rows(s3, directory) if "upload" in PARTS else []
            consumes, p99s = consume_rows(s3, directory) if "consume" in PARTS else ([], [])
    finally:
        s3.stop()
    if uploads:
        print_table(
            f"Upload to S3 (moto on 127.0.0.1), best of {ROUNDS} rounds, segments of {SEGMENT_BYTES >> 20} "
            f"MiB, parts of {PART_SIZE >> 20} MiB (goal: the task at >= 0.8x raw boto3)",
            ["path", "segments", "MB", "seconds", "MB/s", "vs raw"],
            uploads,
        )
    if consumes:
        print_table(
            "Consume from offset 0 with confluent-kafka, one broker (remote reads: chunk cache, fetch-ahead)",
            ["topic", "records read from", "MB", "seconds", "MB/s", "vs local", "goal", "first records ms",
             "broker CPU s", "its loop's", "S3 CPU s", "consumer CPU s", "S3 GETs"],  # fmt: skip
            consumes,
            left=(1, 6),
        )
    if p99s:
        print_table(
            f"acks=all producer (200 records/s of 1 KB, {P99_SECONDS:g} s each) beside a backfill of the tiered "
            "topic from S3",
            ["backfill", "quota MB/s", "p50 ms", "p99 ms", "backfill MB/s", "p99 vs none", "goal",
             "broker's Produce ms, mean: total (queue / local / remote / send); share over 1 ms"],
            p99s,
            left=(6, 7),
        )
    print("(figures taken on a shared machine are indicative; moto, the broker and the clients each in a process)")


if __name__ == "__main__":
    main()
