"""KIP-1023: an empty follower joining a tiered partition, three ways, on the same data in one run.

One partition of `--size` MiB (default 1024: the issue's 1 GiB) on broker 101, in segments of a
sixteenth of it, all but the active one uploaded to S3 (moto's server on 127.0.0.1), with local
retention keeping everything (`retention.ms`=-1, `local.retention.ms` following it); the same
records in a partition without tiered storage. Then an empty follower joins:

* (a) flag on: broker 102 with `follower.fetch.last.tiered.offset.enable=true` (KIP-1023: it builds
  the auxiliary state below the earliest pending upload offset from S3 and fetches from there);
* (b) flag off: the same broker with the flag false (KIP-405's local-log-start path: with local
  retention keeping everything, that is replicating the whole local log from offset 0);
* (c) no tiered storage: broker 103 joins the partition of the plain topic.

Each follower starts from a wiped disk (`LocalCluster.wipe`, then `start_node`); the figures are
the bytes of its partition's local log when it joins the ISR (all of it was fetched from the
leader: no records are produced meanwhile), the seconds until the leader's Metadata lists it in
the ISR, counted from the moment its replica starts following the leader (its log line "<partition>:
follower of <leader>"), which is what the goal compares, and from its process start (a Python
broker's start-up, the same ~2 s on every path, included; and until it is unfenced), and the S3
requests it made meanwhile, counted at an HTTP proxy between it and moto (the leader talks to moto directly):
GETs of segment objects (`.indexes`, `.rsm-manifest`, `.log`: the auxiliary state) apart from the
remote log metadata it reads (LISTs and GETs under `remote_log_metadata/`, Kafka's
`__remote_log_metadata` topic). Goals (the issue): (a) fetches at most 15% of the bytes of (b),
joins in at most 0.15x its time, with at most 3 S3 GETs per partition for the auxiliary state.

Run: `.venv/bin/python -m benchmarks.bench_bootstrap [--size MIB]` (a few MiB for a smoke run).
It exits 0 whether the goals are met or not; the table says which are.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from urllib.parse import urlsplit

if __package__ in (None, ""):  # run as a script: make `benchmarks` and `quorum` importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.table import print_table, progress  # noqa: E402
from quorum.launcher import LocalCluster  # noqa: E402
from tests.support.http_forwarder import HttpForwarder  # noqa: E402
from tiered_follower.embedded_s3 import s3_properties, start_embedded_s3  # noqa: E402

MIB = 1 << 20
FLAG = "follower.fetch.last.tiered.offset.enable"
LEADER, TIERED_FOLLOWER, PLAIN_FOLLOWER = 101, 102, 103
TIERED, PLAIN = "tiered", "plain"
BUCKET = "bench-bootstrap"
VALUE_BYTES = 1000
JOIN_TIMEOUT_S = 1800.0
GOAL_BYTES, GOAL_TIME, GOAL_GETS = 0.15, 0.15, 3


class CountingProxy(HttpForwarder):
    """An HTTP proxy on 127.0.0.1 in front of the S3 endpoint that counts the requests it forwards, by
    kind: "LIST", "metadata" (remote log metadata objects), "segment GET" (the objects of a segment)."""

    def __init__(self, target_url: str) -> None:
        self._lock = threading.Lock()
        self.counts: Counter[str] = Counter()
        super().__init__(target_url, "s3-counting-proxy", timeout_s=120.0)

    def take(self) -> Counter[str]:
        """What was counted since the last call."""
        with self._lock:
            counts, self.counts = self.counts, Counter()
        return counts

    @staticmethod
    def kind(method: str, path: str) -> str:
        url = urlsplit(path)
        if method == "GET" and "list-type" in url.query:
            return "LIST"
        if "/remote_log_metadata/" in url.path:
            return "metadata"
        return f"segment {method}"

    def handle(self, handler: BaseHTTPRequestHandler, body: bytes) -> None:
        with self._lock:
            self.counts[self.kind(handler.command, handler.path)] += 1
        super().handle(handler, body)


@dataclass
class Join:
    path: str
    start_offset: int
    local_bytes: int
    unfenced_s: float
    isr_s: float
    """From the follower's process start until the leader's Metadata lists it in the ISR."""
    following_isr_s: float
    """From the follower's replica starting to follow the leader (its log line) until then: the time
    to join the ISR without the process start-up, which is the same for every path."""
    s3: Counter[str]


def following_since(log_path: Path, topic: str, not_before: float) -> float | None:
    """The wall-clock time of the broker's first "<topic>-0: follower of ..." log line written at or
    after `not_before` (the node logs' `asctime`, local time with milliseconds); later ones are new
    leader epochs (the ISR change that admits it bumps it too)."""
    for line in log_path.read_text(encoding="utf-8", errors="replace").splitlines():
        if f" {topic}-0: follower of " in line:
            stamp = datetime.strptime(line[:23], "%Y-%m-%d %H:%M:%S,%f").timestamp()
            if stamp >= not_before - 0.001:
                return stamp
    return None


def partition_dir(cluster: LocalCluster, broker: int, topic: str) -> Path:
    return cluster.specs[broker].directory / "data" / f"{topic}-0"


def local_log(cluster: LocalCluster, broker: int, topic: str) -> tuple[int, int]:
    """(base offset of the first local segment, bytes of the `.log` files) of the broker's replica."""
    files = sorted(partition_dir(cluster, broker, topic).glob("*.log"))
    return (int(files[0].name.split(".")[0]) if files else -1), sum(f.stat().st_size for f in files)


def wait_until(what: str, condition: Callable[[], object], timeout_s: float,
               report: Callable[[], str] | None = None) -> None:
    """Until `condition()` is truthy; SystemExit naming `what` after `timeout_s`. `report` gives a
    progress line every 5 s."""
    started = time.monotonic()
    next_report = started + 5
    while not condition():
        now = time.monotonic()
        if now - started > timeout_s:
            raise SystemExit(f"timed out after {timeout_s:g} s waiting for {what}")
        if report is not None and now >= next_report:
            progress(f"{now - started:.0f} s: {report()}")
            next_report = now + 5
        time.sleep(0.1)


class Cluster:
    """The benchmark's cluster: 1 controller, a leader and two followers, and its Metadata view."""

    def __init__(self, directory: Path, endpoint: str, segment_bytes: int) -> None:
        from confluent_kafka.admin import AdminClient

        settings = {**s3_properties(endpoint, BUCKET), "log.segment.bytes": str(segment_bytes),
                    "remote.log.manager.task.interval.ms": "500", "log.retention.check.interval.ms": "1000",
                    "broker.session.timeout.ms": "3000", "broker.heartbeat.interval.ms": "500",
                    "replica.lag.time.max.ms": "5000", FLAG: "false"}
        self.local = LocalCluster(directory, controllers=1, brokers=3, settings=settings)
        self.local.format_storage()
        self.local.start()
        self.admin = AdminClient({"bootstrap.servers": self.local.specs[LEADER].address, "log_level": 0})

    def metadata(self, topic: str) -> tuple[set[int], tuple[int, ...]]:
        """(unfenced brokers, the partition's ISR) as the leader answers Metadata."""
        answer = self.admin.list_topics(topic, timeout=10)
        partition = answer.topics[topic].partitions.get(0)
        return set(answer.brokers), tuple(partition.isrs) if partition is not None else ()

    def wipe(self, broker: int, topic: str) -> None:
        """The broker's disk dies: kill -9, log dirs deleted and formatted; until it is out of the ISR."""
        self.local.wipe(broker)
        wait_until(f"broker {broker} out of the ISR of {topic}-0 and fenced once its session expired",
                   lambda: broker not in self.metadata(topic)[1] and broker not in self.metadata(topic)[0], 60)


def create_topics(cluster: Cluster, segment_bytes: int) -> None:
    from confluent_kafka.admin import NewTopic

    kept = {"retention.ms": "-1", "segment.bytes": str(segment_bytes)}
    topics = [NewTopic(TIERED, 1, replica_assignment=[[LEADER, TIERED_FOLLOWER]],
                       config={**kept, "remote.storage.enable": "true"}),
              NewTopic(PLAIN, 1, replica_assignment=[[LEADER, PLAIN_FOLLOWER]], config=kept)]
    for future in cluster.admin.create_topics(topics).values():
        future.result(60)


def load(cluster: Cluster, total_bytes: int) -> int:
    """`total_bytes` of 1 KB records to each topic (the followers down, so only the leader writes);
    the number of records."""
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": cluster.local.specs[LEADER].address, "acks": "1",
                         "linger.ms": 20, "batch.size": 1 << 20, "log_level": 0})
    value = os.urandom(VALUE_BYTES)
    count = total_bytes // VALUE_BYTES
    started = last = time.monotonic()
    for number in range(count):
        for topic in (TIERED, PLAIN):
            while True:
                try:
                    producer.produce(topic, value, partition=0)
                    break
                except BufferError:
                    producer.poll(0.1)
        if time.monotonic() - last >= 5:
            last = time.monotonic()
            progress(f"loading: {number * 2 * VALUE_BYTES / MIB:,.0f} of {2 * total_bytes / MIB:,.0f} MiB produced "
                     f"({number * 2 * VALUE_BYTES / MIB / (last - started):.0f} MiB/s)")
    if producer.flush(600):
        raise SystemExit("the producer could not deliver every record within 600 s")
    return count


def wait_uploaded(cluster: Cluster) -> int:
    """Until every rolled segment of the tiered partition is in S3 (the earliest pending upload offset,
    -6, is the active segment's base offset) while its local log still starts at 0; that offset."""
    from quorum.get_offsets import list_offsets

    address = cluster.local.specs[LEADER].address

    def offsets() -> tuple[int, int, int]:
        active = int(sorted(partition_dir(cluster.local, LEADER, TIERED).glob("*.log"))[-1].name.split(".")[0])
        return (active, *(list_offsets(address, TIERED, [0], spec)[0][0] for spec in (-6, -4)))

    wait_until(f"every rolled segment of {TIERED}-0 uploaded to S3 (offset -6 at the active segment's base)",
               lambda: offsets()[0] == offsets()[1] > 0, JOIN_TIMEOUT_S,
               report=lambda: "active segment at {}, earliest pending upload {}, earliest local {}".format(*offsets()))
    active, pending, local_start = offsets()
    if local_start != 0:
        raise SystemExit(f"the leader's local log of {TIERED}-0 starts at {local_start}, not 0: local retention "
                         f"was to keep everything")
    return pending


def join(cluster: Cluster, proxy: CountingProxy, path: str, broker: int, topic: str, flag: bool) -> Join:
    """Start the wiped `broker` (through the counting proxy, with the flag as given) and time it into the ISR."""
    cluster.local.settings[FLAG] = str(flag).lower()
    cluster.local.write_configs()  # only the stopped follower reads it again, when it starts
    proxy.take()
    progress(f"({path}) broker {broker} starts with an empty disk and joins {topic}-0 ({FLAG}={str(flag).lower()})")
    started, started_wall = time.monotonic(), time.time()
    cluster.local.start_node(broker)
    unfenced: list[float] = []
    joined_wall: list[float] = []

    def in_isr() -> bool:
        brokers, isr = cluster.metadata(topic)
        if broker in brokers and not unfenced:
            unfenced.append(time.monotonic() - started)
        if broker in isr:
            joined_wall.append(time.time())
        return broker in isr

    wait_until(f"broker {broker} in the ISR of {topic}-0", in_isr, JOIN_TIMEOUT_S,
               report=lambda: f"broker {broker} holds {local_log(cluster.local, broker, topic)[1] / MIB:,.1f} MiB "
                              f"of {topic}-0")
    isr_s = time.monotonic() - started
    start_offset, size = local_log(cluster.local, broker, topic)
    following = following_since(cluster.local.specs[broker].log_path, topic, started_wall)
    if following is None:
        raise SystemExit(f"broker {broker} logged no '{topic}-0: follower of' line (read "
                         f"{cluster.local.specs[broker].log_path})")
    following_isr_s = joined_wall[0] - following
    progress(f"({path}) broker {broker} in the ISR {isr_s:.1f} s after its start, {following_isr_s:.1f} s after "
             f"its replica began following, with {size / MIB:,.1f} MiB from offset {start_offset}")
    return Join(path, start_offset, size, unfenced[0] if unfenced else isr_s, isr_s, following_isr_s, proxy.take())


def run(total_bytes: int) -> tuple[int, list[Join]]:
    segment_bytes = max(total_bytes // 16, 64 * 1024)
    s3 = start_embedded_s3()
    proxy = CountingProxy(s3.endpoint_url)
    s3.create_bucket(BUCKET)
    try:
        with tempfile.TemporaryDirectory(dir=".") as tmp:
            cluster = Cluster(Path(tmp), s3.endpoint_url, segment_bytes)
            try:
                create_topics(cluster, segment_bytes)
                for broker, topic in ((TIERED_FOLLOWER, TIERED), (PLAIN_FOLLOWER, PLAIN)):
                    cluster.wipe(broker, topic)
                progress(f"loading {total_bytes / MIB:,.0f} MiB into {TIERED}-0 and into {PLAIN}-0 on broker "
                         f"{LEADER}, segments of {segment_bytes / MIB:g} MiB")
                records = load(cluster, total_bytes)
                pending = wait_uploaded(cluster)
                progress(f"{records:,} records per partition; {TIERED}-0 uploaded below offset {pending}")
                # the followers reach S3 through the counting proxy from now on; the leader keeps moto
                cluster.local.settings.update(s3_properties(proxy.endpoint_url, BUCKET))
                joins = [join(cluster, proxy, "b", TIERED_FOLLOWER, TIERED, flag=False)]
                cluster.wipe(TIERED_FOLLOWER, TIERED)
                joins.append(join(cluster, proxy, "a", TIERED_FOLLOWER, TIERED, flag=True))
                joins.append(join(cluster, proxy, "c", PLAIN_FOLLOWER, PLAIN, flag=False))
                _, leader_bytes = local_log(cluster.local, LEADER, TIERED)
            finally:
                cluster.local.stop()
    finally:
        proxy.stop()
        s3.stop()
    return leader_bytes, joins


def report(total_bytes: int, leader_bytes: int, joins: list[Join]) -> None:
    by_path = {j.path: j for j in joins}
    names = {"a": "(a) tiered, flag on (KIP-1023)", "b": "(b) tiered, flag off (KIP-405)", "c": "(c) no tiered storage"}
    off = by_path["b"]
    rows = []
    for key in "abc":
        j = by_path[key]
        rows.append((names[key], j.start_offset, j.local_bytes / MIB, j.local_bytes / leader_bytes * 100,
                     j.unfenced_s, j.isr_s, j.following_isr_s, j.following_isr_s / off.following_isr_s,
                     j.s3["segment GET"], j.s3["LIST"] + j.s3["metadata"]))
    print_table(f"An empty follower joining one partition of {leader_bytes / MIB:,.0f} MiB on the leader "
                f"({total_bytes / MIB:,.0f} MiB produced), all but the active segment in S3; seconds from the "
                f"follower's process start (unfenced, ISR) and from its replica's start to the ISR (following)",
                ["path", "starts at offset", "MiB fetched", "% of log", "s to unfenced", "s to ISR",
                 "s following to ISR", "vs (b)", "S3 segment GETs", "S3 metadata reqs"], rows)
    on = by_path["a"]
    bytes_ratio = on.local_bytes / off.local_bytes if off.local_bytes else float("inf")
    time_ratio = on.following_isr_s / off.following_isr_s
    whole_ratio = on.isr_s / off.isr_s
    goals = [("bytes fetched, (a) / (b)", f"<= {GOAL_BYTES:.2f}", f"{bytes_ratio:.3f}", bytes_ratio <= GOAL_BYTES),
             ("time to join the ISR from the replica's start, (a) / (b)", f"<= {GOAL_TIME:.2f}x", f"{time_ratio:.3f}x",
              time_ratio <= GOAL_TIME),
             ("  the same from the process start (start-up included)", f"<= {GOAL_TIME:.2f}x", f"{whole_ratio:.3f}x",
              whole_ratio <= GOAL_TIME),
             ("S3 GETs for the auxiliary state, (a)", f"<= {GOAL_GETS} per partition",
              str(on.s3["segment GET"]) if on.start_offset > 0 else "none: (a) did not start above offset 0",
              on.start_offset > 0 and on.s3["segment GET"] <= GOAL_GETS)]
    print_table("KIP-1023 goals (issue 15)", ["goal", "target", "measured", "met"],
                [(name, target, measured, "yes" if met else "NO") for name, target, measured, met in goals],
                left=(1, 2, 3))


def main() -> None:
    parser = argparse.ArgumentParser(prog="bench_bootstrap", description=__doc__.split("\n")[0])
    parser.add_argument("--size", type=int, default=1024, metavar="MIB",
                        help="MiB in the partition (default 1024, the issue's 1 GiB); a few for a smoke run")
    args, _ = parser.parse_known_args()  # `./run bench ARGS` hands every benchmark the same arguments
    if args.size < 1:
        raise SystemExit(f"--size must be at least 1 MiB, got {args.size}")
    total_bytes = args.size * MIB
    leader_bytes, joins = run(total_bytes)
    report(total_bytes, leader_bytes, joins)


if __name__ == "__main__":
    main()
