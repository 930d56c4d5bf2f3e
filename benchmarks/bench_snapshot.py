"""KIP-630 snapshots: write, load and transfer the metadata of 100,000 topics x 10 partitions
(KIP-630's sizing example), each step beside the raw sequential read rate of the same file,
measured in the same run on the same disk.

Run: `./run bench` (all benchmarks), `.venv/bin/python -m benchmarks.bench_snapshot`, or
`.venv/bin/python benchmarks/bench_snapshot.py`. Set BENCH_SNAPSHOT_DIR to measure another
filesystem (the default is a temporary directory under the current one), BENCH_SNAPSHOT_TOPICS
for a quicker, smaller run (the figures of the issue are for the default 100,000).

The snapshot holds one TopicRecord (v0, with this project's KIP-232 topic epoch tag) per topic and
one PartitionRecord (v0, 3 replicas out of 100 brokers, all in sync) per partition. "generate" is
what a node does when it writes a snapshot (`quorum.image.replay.SnapshotJob.write`): the image of
those topics, every partition built as a replay of the log builds it, is encoded as snapshot
records (`ImageSnapshot`, the struct encoders of the two records) and written by `SnapshotWriter`
(its default 1 MiB batches, uncompressed, the cluster id in the header). Building that image is
not part of the figure (the row says how long it took). Generation and loading each run in a child
process, so that the peak resident memory (`ru_maxrss`) reported is the step's own; a child that
only imports the same modules gives the interpreter's baseline.

Issue 17's goals stand beside their figures (generate <= 5 s; node load <= 2 s and <= 1 GiB; install
on an observer <= 2 s), each met or NOT met; the run exits 0 either way.

Two loads are measured:

* "node load" is what a node does at start-up (`quorum.server.node`): `MetadataReplayer.boot()`
  reads and validates the whole snapshot, then loads its values into `ImageState`
  (the metadata image a node keeps), and tells the log its boundary. The node keeps that state, so its
  peak memory is the node's own.
* "read + decode, streamed" validates, iterates and fully decodes every record with
  `decode_metadata_record`, dropping each: the file's cost without any state (a node does not
  decode records with the schema engine's generic path; `ImageState` uses the compiled one).

FetchSnapshot is measured between two real node processes (`quorum.launcher.LocalCluster`, `quorum
start`, on 127.0.0.1): a controller (node 1, the only voter, so it elects itself) whose metadata
directory is seeded with the snapshot and whose log starts at the snapshot's end offset, so that
it answers a Fetch from offset 0 with the SnapshotId; and an observer (a broker, ids 101..) that
starts empty, fetches the snapshot chunk by chunk (writing `.checkpoint.part`), validates it
(the CRC of every batch), fsyncs and renames it, and installs it into its state. Each run uses a
fresh observer. The figures come from the observer's own output and files: "ready" is when it
prints "listening on" (it has booted, empty; its first Fetch follows at once), "all bytes
written" is when the `.part` file reaches the snapshot's size (polled every millisecond),
"fetched" and "installed" are the timestamps (millisecond resolution) of its log lines "snapshot
fetched" (quorum.log.snapshot) and "installed snapshot" (quorum.image.replay); the install is also
read from the node's LoadSnapshotLatencyMs metric. A FetchSnapshot response carries
min(request MaxBytes, leader's replica.fetch.response.max.bytes): the leader is configured with the
largest size tried and each observer with the size of its run (10 MiB, Kafka's default, when the
row says "default"). A node's peak memory is its VmHWM (peak resident set size, what `ru_maxrss`
reports) read from /proc while it runs.

"raw read" is `os.read` of the same file in 1 MiB chunks. Dropping a file from the page cache
needs no root: `posix_fadvise(POSIX_FADV_DONTNEED)` asks the kernel to evict its clean pages, so
the "cold" figures read from the disk where the kernel honours the advice (some container
filesystems do not; then cold and warm come out alike; on a virtual machine the host may still
cache the disk image). The loads are measured cold the same way: validation reads the file from
the disk, iteration then reads it again from the page cache. The leader's own start-up load reads
the file cold too; it serves FetchSnapshot from the page cache afterwards (the "warm" runs, beside
the warm raw read), or from the disk when the file is dropped again first (the "cold" run).
"""

from __future__ import annotations

import asyncio
import json
import os
import random
import re
import resource
import signal
import sys
import tempfile
import time
import urllib.request
import uuid
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

if __package__ in (None, ""):  # run as a script: make `benchmarks` and `quorum` importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.table import print_table, progress  # noqa: E402
from benchmarks.table import run_child as run_step
from quorum.admin import wait_for_leader  # noqa: E402
from quorum.image.image import MetadataImage, PartitionInfo, TopicInfo  # noqa: E402
from quorum.image.image_state import ImageSnapshot, ImageState  # noqa: E402
from quorum.image.replay import MetadataReplayer  # noqa: E402
from quorum.image.snapshot_policy import SnapshotPolicy  # noqa: E402
from quorum.launcher import LocalCluster  # noqa: E402
from quorum.log.log import Log  # noqa: E402
from quorum.log.snapshot import (  # noqa: E402
    SnapshotDirectory,
    SnapshotReader,
    SnapshotWriter,
    partial_snapshot_path,
    snapshot_path,
)
from quorum.raft.interface import OffsetAndEpoch  # noqa: E402
from quorum.server.config import node_config  # noqa: E402
from quorum.wire.metadata_records import decode_metadata_record  # noqa: E402
from quorum.wire.properties import format_properties  # noqa: E402

TOPICS = int(os.environ.get("BENCH_SNAPSHOT_TOPICS", "100000"))
PARTITIONS = 10
RECORDS = TOPICS * (1 + PARTITIONS)
BROKERS = 100
REPLICATION = 3
# Epoch 1: the controller that serves it starts with an empty quorum-state and elects itself in epoch 1,
# as the first leader that wrote these records would have been.
SNAPSHOT_ID = OffsetAndEpoch(5_120_793, 1)
CLUSTER_ID = "MkU3OEVBNTcwNTJENDM2Qg"
READ_CHUNK = 1 << 20
MiB = 1 << 20
DEFAULT_FETCH_BYTES = 10 * MiB  # replica.fetch.response.max.bytes, Kafka's default
LARGE_FETCH_BYTES = 64 * MiB  # under socket.request.max.bytes (100 MiB), the largest frame a node accepts
# (observer's replica.fetch.response.max.bytes or None for the default, drop the leader's file from the cache first)
FETCH_RUNS = ((None, True), (None, False), (LARGE_FETCH_BYTES, False))
NODE_TIMEOUT_S = 600.0
LEADER = 1
ROOT = Path(__file__).resolve().parent.parent
# Issue 17's goals for the default size (100,000 topics x 10 partitions); the table says met or not,
# and the run exits 0 either way.
GOAL_LOAD_S = 2.0
GOAL_LOAD_RSS_MB = (1 << 30) / 1e6  # 1 GiB, in the table's MB
GOAL_GENERATE_S = 5.0
GOAL_INSTALL_S = 2.0


# -- children ---------------------------------------------------------------------------------------


def peak_rss_mb() -> float:
    """This process's peak resident set size (Linux reports KiB)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024 / 1e6


def proc_status_mb(pid: int | str, key: str) -> float:
    """A size from /proc/<pid>/status (VmHWM: peak resident set size; VmRSS: resident now), in MB."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(key + ":"):
            return int(line.split()[1]) * 1024 / 1e6
    raise KeyError(key)


def bench_image() -> MetadataImage:
    """The image a node holds after replaying the creation of the topics: every partition built
    (`PartitionInfo`), as a replay of the log builds them (a loaded snapshot's undecoded
    partitions would be written back as they are, which is faster)."""
    rng = random.Random(630)
    topics = {}
    for topic in range(TOPICS):
        topic_id = uuid.UUID(int=rng.getrandbits(128))
        partitions = []
        for partition in range(PARTITIONS):
            replicas = tuple(rng.sample(range(BROKERS), REPLICATION))
            partitions.append(PartitionInfo(partition, replicas[0], 0, replicas, replicas))
        name = f"topic-{topic:06d}"
        topics[name] = TopicInfo(name, topic_id, tuple(partitions), topic_epoch=topic + 1)
    return MetadataImage(cluster_id=CLUSTER_ID, controller_id=LEADER, topics=topics, topic_epoch=TOPICS)


def generate(directory: Path) -> dict[str, float]:
    """Write the snapshot of the image as a node does (`quorum.image.replay.SnapshotJob.write`:
    `ImageState.snapshot_values()` into a SnapshotWriter); times encoding the records and the
    writer (batching, writes, fsync, validation, rename) apart."""
    built = time.perf_counter()
    image = bench_image()
    start = time.perf_counter()
    values = list(ImageSnapshot(image))  # the records, encoded (SnapshotJob.write encodes as it writes)
    wrote = time.perf_counter()
    with SnapshotWriter(directory, SNAPSHOT_ID, last_contained_log_timestamp=1_763_700_000_000,
                        cluster_id=CLUSTER_ID) as writer:  # fmt: skip
        writer.append(values)
        frozen = time.perf_counter()
        size = writer.freeze()
    done = time.perf_counter()
    return {
        "build_image": start - built, "total": done - start, "encode": wrote - start, "write": done - wrote,
        "freeze": done - frozen, "size": size, "records": len(values), "peak_rss_mb": peak_rss_mb(),
    }  # fmt: skip


def load(path: Path) -> dict[str, float]:
    """Validate, then stream the values (batch decoding) and decode every metadata record,
    dropping each: a metadata image would keep them, which is the image's cost, not the file's."""
    clock = time.perf_counter
    start = clock()
    reader = SnapshotReader(path)
    validated = clock()
    decode_seconds = 0.0
    kinds: dict[str, int] = {}
    for number, value in enumerate(reader):
        began = clock()
        name = type(decode_metadata_record(value)).__name__
        decode_seconds += clock() - began
        kinds[name] = kinds.get(name, 0) + 1
        if (number + 1) % 275_000 == 0:
            progress(f"read + decode: {number + 1:,} records decoded")
    done = clock()
    reader.close()
    assert kinds == {"TopicRecord": TOPICS, "PartitionRecord": TOPICS * PARTITIONS}, kinds
    return {
        "validate": validated - start, "iterate": done - validated - decode_seconds, "decode": decode_seconds,
        "total": done - start, "records": sum(kinds.values()), "batches": reader.batch_count,
        "peak_rss_mb": peak_rss_mb(),
    }  # fmt: skip


class _TimedState(ImageState):
    """ImageState (the state a node keeps) that times its `load` (the rest of `boot` is reading the file)."""

    load_seconds = 0.0

    def load(self, values):  # type: ignore[no-untyped-def]
        began = time.perf_counter()
        super().load(values)
        self.load_seconds += time.perf_counter() - began


def node_load(directory: Path) -> dict[str, float]:
    """What a node does at start-up (quorum.server.node.RaftNode): open the log, then
    MetadataReplayer.boot() loads the latest snapshot into ImageState."""
    clock = time.perf_counter
    opened = clock()
    log = Log(directory)
    start = clock()
    state = _TimedState()
    replayer = MetadataReplayer(directory, log, state, SnapshotPolicy(), snapshots=SnapshotDirectory(directory))
    loaded = replayer.boot()
    done = clock()
    assert loaded == SNAPSHOT_ID and len(state) == RECORDS, (loaded, len(state))
    assert log.start_offset == SNAPSHOT_ID.offset, log.start_offset
    rss_after = proc_status_mb("self", "VmRSS")
    peak = peak_rss_mb()
    log.close()
    began = clock()  # what an eager load would add: every partition built now (the lazy image defers it)
    decoded = sum(len(topic.partitions.decoded) for topic in state.image.topics.values())  # type: ignore[attr-defined]
    assert decoded == TOPICS * PARTITIONS, decoded
    return {
        "open_log": start - opened, "boot": done - start, "state_load": state.load_seconds,
        "read": done - start - state.load_seconds, "records": len(state), "peak_rss_mb": peak,
        "rss_after_mb": rss_after, "decode_all": clock() - began,
    }  # fmt: skip


def child_main(mode: str, argument: str) -> None:
    if mode == "generate":
        result = generate(Path(argument))
    elif mode == "load":
        result = load(Path(argument))
    elif mode == "node-load":
        result = node_load(Path(argument))
    else:
        result = {"peak_rss_mb": peak_rss_mb()}
    print(json.dumps(result), flush=True)


def run_child(mode: str, argument: str) -> dict[str, float]:
    """Run a step in a child process (see `benchmarks.table.run_child`)."""
    return run_step("benchmarks.bench_snapshot", mode, argument)


# -- raw reads ---------------------------------------------------------------------------------------


def drop_from_cache(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)  # only clean pages can be dropped
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    finally:
        os.close(fd)


def raw_read_seconds(path: Path) -> float:
    fd = os.open(path, os.O_RDONLY)
    try:
        start = time.perf_counter()
        while os.read(fd, READ_CHUNK):
            pass
        return time.perf_counter() - start
    finally:
        os.close(fd)


def cold_read_seconds(path: Path) -> float:
    drop_from_cache(path)
    return raw_read_seconds(path)


# -- FetchSnapshot between two node processes ----------------------------------------------------------

_LOG_LINE = re.compile(r"^(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3}) \w+ [\w.]+: (.*)$", re.MULTILINE)


def asyncio_loopback_seconds(path: Path, frame_bytes: int = 10 * 1024 * 1024) -> float:
    """The transport's own ceiling: the file sent as size-prefixed frames of `frame_bytes` over a
    127.0.0.1 socket between an asyncio server and an asyncio client (both in this process, as in a
    node each end is one event loop), no Kafka encoding, no disk writes."""
    data = path.read_bytes()
    chunks = [data[i:i + frame_bytes] for i in range(0, len(data), frame_bytes)]

    async def run() -> float:
        async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            for chunk in chunks:
                writer.write(len(chunk).to_bytes(4, "big"))
                writer.write(chunk)
                await writer.drain()
            writer.close()

        server = await asyncio.start_server(serve, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        started = time.perf_counter()
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        for _ in chunks:
            await reader.readexactly(int.from_bytes(await reader.readexactly(4), "big"))
        elapsed = time.perf_counter() - started
        writer.close()
        server.close()
        return elapsed

    return asyncio.run(run())


def log_time(text: str, needle: str) -> float | None:
    """Wall-clock time (seconds since the epoch) of the first log line containing `needle`: the
    middle of the millisecond it names (logging truncates its timestamps to the millisecond)."""
    for match in _LOG_LINE.finditer(text):
        if needle in match[2]:
            return datetime.strptime(match[1], "%Y-%m-%d %H:%M:%S,%f").timestamp() + 0.0005
    return None


def load_latency_seconds(text: str) -> float | None:
    """The node's LoadSnapshotLatencyMs (its sum: one load), scraped from its metrics endpoint."""
    match = re.search(r"metrics on (http://\S+)", text)
    if match is None:
        return None
    with urllib.request.urlopen(match[1], timeout=10) as response:
        body = response.read().decode()
    found = re.search(r"^kafka_controller_KafkaController_LoadSnapshotLatencyMs_sum (\S+)$", body, re.MULTILINE)
    return None if found is None else float(found[1]) / 1000.0


@dataclass
class NodeWatch:
    """Follows one node's output file (stdout and log) from where it was when the watch began."""

    path: Path
    offset: int = 0
    text: str = ""

    def __post_init__(self) -> None:
        self.offset = self.path.stat().st_size if self.path.exists() else 0

    def poll(self) -> str:
        with open(self.path, "rb") as out:
            out.seek(self.offset)
            data = out.read()
        self.offset += len(data)
        self.text += data.decode("utf-8", "replace")
        return self.text


def node_tail(watch: NodeWatch, lines: int = 25) -> str:
    return "\n".join(watch.text.splitlines()[-lines:])


def node_metadata_dir(cluster: LocalCluster, node_id: int) -> Path:
    return node_config(cluster.properties(cluster.specs[node_id])).metadata_log_dir


def start_leader(cluster: LocalCluster, snapshot: Path) -> dict[str, float]:
    """Seed node 1's metadata directory with the snapshot, its log starting at the snapshot's end
    offset, start it and wait until it leads; its start-up figures."""
    directory = node_metadata_dir(cluster, LEADER)
    directory.mkdir(parents=True, exist_ok=True)
    seeded = snapshot_path(directory, SNAPSHOT_ID)
    os.link(snapshot, seeded)  # the same file (and page cache) as the one measured above
    with Log(directory) as log:
        log.truncate_fully_and_start_at(SNAPSHOT_ID.offset, SNAPSHOT_ID.epoch)
    drop_from_cache(seeded)
    watch = NodeWatch(cluster.specs[LEADER].log_path)
    started = time.time()
    cluster.start_node(LEADER)
    process = cluster.processes[LEADER]
    next_status = started + 5
    while "listening on" not in watch.poll():
        if process.poll() is not None:
            raise RuntimeError(f"the leader exited ({process.returncode}):\n{node_tail(watch)}")
        if time.time() > started + NODE_TIMEOUT_S:
            raise RuntimeError(f"the leader did not start:\n{node_tail(watch)}")
        if time.time() > next_status:
            progress(f"leader (node {LEADER}) loading the snapshot, {time.time() - started:.0f} s")
            next_status += 5
        time.sleep(0.01)
    ready = time.time()
    status = wait_for_leader(lambda: [cluster.specs[LEADER].address], timeout_s=60.0)
    elected = time.time()
    assert status.leader_id == LEADER and status.high_watermark >= SNAPSHOT_ID.offset, status
    progress(f"leader ready: epoch {status.leader_epoch}, high watermark {status.high_watermark:,}")
    boot = load_latency_seconds(watch.poll())
    return {
        "start_to_ready": ready - started, "ready_to_leader": elected - ready, "boot": boot or float("nan"),
        "peak_rss_mb": proc_status_mb(process.pid, "VmHWM"),
    }  # fmt: skip


def write_node_config(cluster: LocalCluster, node_id: int, fetch_bytes: int | None) -> None:
    """The node's server.properties, with replica.fetch.response.max.bytes set (or left to its default)."""
    spec = cluster.specs[node_id]
    props = cluster.properties(spec)
    if fetch_bytes is None:
        props.pop("replica.fetch.response.max.bytes", None)
    else:
        props["replica.fetch.response.max.bytes"] = str(fetch_bytes)
    spec.config_path.write_text(format_properties(props, f" node {node_id}: bench_snapshot"), encoding="utf-8")


def fetch_into_observer(cluster: LocalCluster, node_id: int, size: int, leader_snapshot: Path,
                        cold: bool) -> dict[str, float]:  # fmt: skip
    """Start a fresh observer and follow it until it has fetched and installed the snapshot."""
    directory = node_metadata_dir(cluster, node_id)
    part = partial_snapshot_path(directory, SNAPSHOT_ID)
    final = snapshot_path(directory, SNAPSHOT_ID)
    if cold:
        drop_from_cache(leader_snapshot)
    watch = NodeWatch(cluster.specs[node_id].log_path)
    started = time.time()
    cluster.start_node(node_id)
    process = cluster.processes[node_id]
    nan = float("nan")
    ready: float | None = None
    first_seen = all_bytes = nan  # the first chunk seen on disk, the last one written
    first_size = written = 0
    next_status = started + 5
    try:
        while True:
            now = time.time()
            text = watch.poll()
            if ready is None and "listening on" in text:
                ready = now
            if written < size:
                try:
                    written = part.stat().st_size
                except FileNotFoundError:
                    if final.exists():  # renamed between two polls: when the last bytes came is unknown
                        written = size
                else:
                    if first_size == 0 and written > 0:
                        first_seen, first_size = now, written
                    if written == size:
                        all_bytes = now
            if "installed snapshot" in text:
                break
            if process.poll() is not None:
                raise RuntimeError(f"observer {node_id} exited ({process.returncode}):\n{node_tail(watch)}")
            if now > started + NODE_TIMEOUT_S:
                raise RuntimeError(f"observer {node_id} did not install the snapshot:\n{node_tail(watch)}")
            if now > next_status:
                what = f"{written / 1e6:,.1f} of {size / 1e6:,.1f} MB fetched" if written < size else "installing"
                progress(f"observer {node_id}: {what}, {now - started:.0f} s")
                next_status += 5
            time.sleep(0.001 if written < size else 0.02)  # poll the file closely, then leave the CPU to the node
        time.sleep(0.2)  # the metric is observed just before the "installed" line is logged
        text = watch.poll()
        fetched, installed = log_time(text, "snapshot fetched"), log_time(text, "installed snapshot")
        counted = re.search(r"installed snapshot .*\((\d+) records\)", text)
        assert fetched is not None and installed is not None and counted is not None, node_tail(watch)
        assert int(counted[1]) == RECORDS, counted[0]
        assert ready is not None
        peak = proc_status_mb(process.pid, "VmHWM")
        install_metric = load_latency_seconds(text)
    finally:
        cluster.kill(node_id, signal.SIGTERM)
    return {
        "start_to_ready": ready - started, "to_all_bytes": all_bytes - ready, "stream": all_bytes - first_seen,
        "stream_bytes": size - first_size, "validate": fetched - all_bytes, "fetch": fetched - ready,
        "install": installed - fetched, "install_metric": install_metric or float("nan"),
        "ready_to_installed": installed - ready, "peak_rss_mb": peak,
    }  # fmt: skip


def transfer(workdir: Path, snapshot: Path, size: int) -> tuple[dict[str, float], list[dict[str, float]]]:
    """The leader, then one fresh observer for each of FETCH_RUNS; the leader's figures and each run's."""
    settings = {"quorum.metrics.port": "0", "replica.fetch.response.max.bytes": str(LARGE_FETCH_BYTES)}
    cluster = LocalCluster(workdir / "cluster", controllers=1, brokers=len(FETCH_RUNS), settings=settings)
    cluster.format_storage(CLUSTER_ID)
    observers = [node_id for node_id, spec in cluster.specs.items() if spec.role == "broker"]
    for node_id, (fetch_bytes, _) in zip(observers, FETCH_RUNS, strict=True):
        write_node_config(cluster, node_id, fetch_bytes)
    runs = []
    try:
        progress(f"leader (node {LEADER}) starting from the snapshot (its file dropped from the page cache first)")
        leader = start_leader(cluster, snapshot)
        leader_snapshot = snapshot_path(node_metadata_dir(cluster, LEADER), SNAPSHOT_ID)
        for node_id, (fetch_bytes, cold) in zip(observers, FETCH_RUNS, strict=True):
            progress(f"observer {node_id}: FetchSnapshot with {fetch_label(fetch_bytes)} responses"
                     f"{', leader file dropped from the page cache' if cold else ''}")  # fmt: skip
            run = fetch_into_observer(cluster, node_id, size, leader_snapshot, cold)
            run["leader_peak_rss_mb"] = proc_status_mb(cluster.processes[LEADER].pid, "VmHWM")
            runs.append(run)
    finally:
        cluster.stop()
    return leader, runs


def fetch_label(fetch_bytes: int | None) -> str:
    return f"{DEFAULT_FETCH_BYTES // MiB} MiB (default)" if fetch_bytes is None else f"{fetch_bytes // MiB} MiB"


# -- the parent ---------------------------------------------------------------------------------------


def goal_text(seconds: float, limit_s: float, rss_mb: float | None = None, limit_mb: float | None = None) -> str:
    """The goal beside a figure, and whether the figure meets it."""
    met = seconds <= limit_s
    target = f"<= {limit_s:g} s"
    if limit_mb is not None and rss_mb is not None:
        met = met and rss_mb <= limit_mb
        target += f", <= {limit_mb * 1e6 / (1 << 30):g} GiB"
    return f"{target}: {'met' if met else 'NOT met'}"


def ratio(seconds: float, raw: float) -> str:
    value = seconds / raw
    return f"{value:,.0f}x" if value >= 10 else f"{value:.1f}x"


def main() -> None:
    base = Path(os.environ.get("BENCH_SNAPSHOT_DIR", "."))
    with tempfile.TemporaryDirectory(prefix="bench-snapshot-", dir=base) as name:
        workdir = Path(name)
        directory = workdir / "snapshot"
        path = snapshot_path(directory, SNAPSHOT_ID)
        progress(f"measuring in {workdir.resolve()}: {TOPICS:,} topics x {PARTITIONS} partitions")
        baseline = run_child("baseline", "-")
        progress("generate (a child process)")
        made = run_child("generate", str(directory))
        size = made["size"]
        progress(f"snapshot written: {size / 1e6:,.1f} MB; raw reads of it")
        cold = min(cold_read_seconds(path) for _ in range(3))
        warm = min(raw_read_seconds(path) for _ in range(3))
        loopback = min(asyncio_loopback_seconds(path) for _ in range(3))
        progress("read + decode, streamed (a child process, file dropped from the page cache first)")
        drop_from_cache(path)
        loaded = run_child("load", str(path))
        progress("node load: MetadataReplayer.boot into ImageState (a child process, file cold)")
        boot_dir = workdir / "node-load"
        boot_dir.mkdir()
        os.link(path, snapshot_path(boot_dir, SNAPSHOT_ID))
        drop_from_cache(path)
        booted = run_child("node-load", str(boot_dir))
        progress("FetchSnapshot between two node processes on 127.0.0.1")
        leader, runs = transfer(workdir, path, size)
    megabytes = size / 1e6

    def row(step: str, seconds: float | None, raw: float | None, note: str, rss: float | None = None,
            megabytes_moved: float = megabytes, goal: str = "") -> tuple[object, ...]:  # fmt: skip
        if seconds is None or not seconds > 0 or megabytes_moved <= 0:  # a memory row; not measured; too short
            return step, "" if seconds is None else "n/a", goal, "", "", "", "" if rss is None else rss, note
        if raw is None:  # a time, not a pass over the file
            return step, seconds, goal, "", "", "", "" if rss is None else rss, note
        rate = megabytes_moved / seconds
        versus = ratio(seconds, raw * megabytes_moved / megabytes)
        return step, seconds, goal, rate, megabytes / raw, versus, "" if rss is None else rss, note

    rows = [
        row("raw read, cold", cold, cold, "os.read 1 MiB chunks after POSIX_FADV_DONTNEED (best of 3)"),
        row("raw read, warm", warm, warm, "os.read 1 MiB chunks from the page cache (best of 3)"),
        row("asyncio loopback, 10 MiB frames", loopback, warm,
            "the file as bare frames, asyncio server -> client on 127.0.0.1: the transport's ceiling (best of 3)"),
        row(
            "generate",
            made["total"],
            cold,
            f"ImageState's snapshot records + SnapshotWriter, fsync, validate, rename (child; building the "
            f"image first: {made['build_image']:.1f} s more)",
            made["peak_rss_mb"],
            goal=goal_text(made["total"], GOAL_GENERATE_S),
        ),
        row("  encode records", made["encode"], cold, "ImageSnapshot: TopicRecord, PartitionRecord v0 struct encoders"),
        row("  SnapshotWriter", made["write"], cold, "batches, writes, freeze (fsync, validate, rename)"),
        row(
            "node load (start-up)",
            booted["boot"],
            cold,
            "MetadataReplayer.boot -> ImageState, file cold (child)",
            booted["peak_rss_mb"],
            goal=goal_text(booted["boot"], GOAL_LOAD_S, booted["peak_rss_mb"], GOAL_LOAD_RSS_MB),
        ),
        row("  read snapshot", booted["read"], cold, "SnapshotReader: validate + all values in a list"),
        row("  state.load", booted["state_load"], warm, "ImageState.load (decode, build the image)"),
        row("  then decode all partitions", booted["decode_all"], warm,
            "not in the load: what an eager image adds (struct decoder + PartitionInfo for each)"),
        row(
            "  state held after load",
            None,
            None,
            "VmRSS of the child once booted (the state a node keeps)",
            booted["rss_after_mb"],
        ),
        row(
            "read + decode, streamed",
            loaded["total"],
            cold,
            "validate + iterate + decode_metadata_record, each dropped (child)",
            loaded["peak_rss_mb"],
        ),
        row("  validate", loaded["validate"], cold, "framing, CRC, header, footer (disk read)"),
        row("  iterate values", loaded["iterate"], warm, "CRC again + batch decoding (page cache)"),
        row("  decode records", loaded["decode"], warm, "decode_metadata_record per value"),
        row(
            "leader node: boot",
            leader["boot"],
            cold,
            "`quorum start` loading the seeded snapshot (LoadSnapshotLatencyMs), file cold",
            leader["peak_rss_mb"],
        ),
        row("  start -> listening", leader["start_to_ready"], None, "process start, imports, boot, listener"),
        row("  listening -> leader", leader["ready_to_leader"], None, "elects itself (1 voter); describe answers"),
    ]
    for (fetch_bytes, cold_leader), run in zip(FETCH_RUNS, runs, strict=True):
        raw = cold if cold_leader else warm
        cache = "leader's file cold" if cold_leader else "leader's file in page cache"
        rows += [
            row(
                f"FetchSnapshot, {fetch_label(fetch_bytes)}",
                run["fetch"],
                raw,
                f"observer ready -> .checkpoint renamed ({cache}); observer's peak RSS",
                run["peak_rss_mb"],
            ),
            row(
                "  ready -> all bytes written",
                run["to_all_bytes"],
                raw,
                "Fetch (-> SnapshotId), then FetchSnapshot chunks into .checkpoint.part",
            ),
            row(
                "  chunks after the first",
                run["stream"],
                raw,
                "from the first chunk on disk to the last",
                megabytes_moved=run["stream_bytes"] / 1e6,
            ),
            row("  validate + rename", run["validate"], warm, "fsync, CRC of every batch, rename, fsync dir"),
            row(
                "  install on the observer",
                run["install"],
                warm,
                f"MetadataReplayer.install (LoadSnapshotLatencyMs {run['install_metric']:.2f} s)",
                goal=goal_text(run["install"], GOAL_INSTALL_S),
            ),
            row(
                "  ready -> installed",
                run["ready_to_installed"],
                raw,
                f"observer start -> ready: {run['start_to_ready']:.2f} s more",
            ),
            row(
                "  leader's peak RSS so far",
                None,
                None,
                "VmHWM of the leader after serving this fetch",
                run["leader_peak_rss_mb"],
            ),
        ]
    rows.append(row("baseline child", None, None, "interpreter + the same imports", baseline["peak_rss_mb"]))
    print_table(
        f"Snapshot of {TOPICS:,} topics x {PARTITIONS} partitions: {made['records']:,} records, {megabytes:,.1f} MB "
        f"({size / made['records']:.1f} bytes a record, {loaded['batches']:,} batches),\n"
        "each step beside raw reads of the same file; peak RSS of each process (ru_maxrss of a child, VmHWM of a node)",
        ["step", "seconds", "goal (issue 17)", "MB/s", "raw read MB/s", "time vs raw read", "peak RSS MB", "what"],
        rows,
        left=(2, -1),
    )


if __name__ == "__main__":
    if len(sys.argv) == 4 and sys.argv[1] == "--child":
        child_main(sys.argv[2], sys.argv[3])
    else:
        main()
