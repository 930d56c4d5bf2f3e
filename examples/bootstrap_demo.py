"""Part 8 of the demo: a broker whose disk died comes back with the same id and bootstraps its
replicas from S3 (KIP-1023), as a platform engineer replacing a disk sees it.

Three brokers with tiered storage on an embedded S3 (moto's server on 127.0.0.1) and
`follower.fetch.last.tiered.offset.enable=true`; a topic with replication factor 3 whose rolled
segments are uploaded, a few of them kept locally. One broker is killed, its log dirs deleted and
formatted again, and it is started with the same id: each of its replicas builds its auxiliary state
(leader epochs, producer state) from the remote segment below the leader's earliest pending upload
offset and fetches only the rest from the leader. The demo waits, with a deadline naming the partition
and the broker, until the broker is back in every ISR, then prints what was fetched and what stayed in S3.
"""

from __future__ import annotations

import re
import time
from pathlib import Path

from examples.demo_waits import DemoFailure, scratch_directory, wait_for
from quorum.launcher import LocalCluster
from quorum.readiness import ClusterNotReadyError

TOPIC = "inventory"
PARTITIONS = 2
MESSAGES = 6000
SEGMENT_BYTES = 32 * 1024
BUCKET = "quorum-demo-bootstrap"
FLAG = "follower.fetch.last.tiered.offset.enable"
SEGMENT_LOG = re.compile(r"/(?P<partition>\d+)/(?P<base>\d{20})-[^/]+\.log$")


def bootstrap_demo() -> None:
    from tiered_follower.embedded_s3 import s3_properties, start_embedded_s3

    print("\n== Part 8: a broker wiped and restarted with the same id bootstraps from S3 (KIP-1023)", flush=True)
    s3 = start_embedded_s3()
    s3.create_bucket(BUCKET)
    settings = {**s3_properties(s3.endpoint_url, BUCKET), FLAG: "true", "log.segment.bytes": str(SEGMENT_BYTES),
                "remote.log.manager.task.interval.ms": "500", "log.retention.check.interval.ms": "1000",
                "broker.session.timeout.ms": "3000", "broker.heartbeat.interval.ms": "500"}
    try:
        with scratch_directory("quorum-demo-bootstrap-") as directory:
            cluster = LocalCluster(directory, controllers=1, brokers=3, settings=settings)
            print(f"$ quorum local-cluster --controllers 1 --brokers 3 --tiered --set {FLAG}=true "
                  f"--set log.segment.bytes={SEGMENT_BYTES}", flush=True)
            cluster.format_storage()
            try:
                cluster.start(timeout=60)
                run_part(cluster, s3)
            except ClusterNotReadyError as exc:
                raise DemoFailure(str(exc)) from None
            finally:
                cluster.stop()
    finally:
        s3.stop()


def node_logs(cluster: LocalCluster) -> list[Path]:
    return [spec.log_path for spec in cluster.specs.values()]


def isrs(bootstrap: str) -> dict[int, tuple[int, list[int]]]:
    """Partition -> (leader, ISR) of the topic, as the brokers answer Metadata."""
    from confluent_kafka.admin import AdminClient

    metadata = AdminClient({"bootstrap.servers": bootstrap, "log_level": 0}).list_topics(TOPIC, timeout=10)
    return {p: (m.leader, sorted(m.isrs)) for p, m in metadata.topics[TOPIC].partitions.items()}


def run_part(cluster: LocalCluster, s3: object) -> None:
    from confluent_kafka import Producer
    from confluent_kafka.admin import AdminClient, NewTopic

    from quorum.get_offsets import list_offsets

    bootstrap, logs = cluster.bootstrap_servers, node_logs(cluster)
    config = {"remote.storage.enable": "true", "local.retention.bytes": str(3 * SEGMENT_BYTES)}
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for future in admin.create_topics([NewTopic(TOPIC, PARTITIONS, 3, config=config)]).values():
        future.result(30)
    print(f"created {TOPIC}: {PARTITIONS} partitions, replication factor 3, {config}", flush=True)
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "enable.idempotence": True,
                         "linger.ms": 5, "batch.num.messages": 50})
    for n in range(MESSAGES):
        producer.produce(TOPIC, f"sku-{n:05d} stock={n % 113}".encode() + bytes(160), partition=n % PARTITIONS)
    if producer.flush(30):
        raise DemoFailure(f"{MESSAGES} messages to {TOPIC} not all acknowledged", logs)
    print(f"produced {MESSAGES} messages (acks=all)", flush=True)
    for partition in range(PARTITIONS):
        wait_for(f"{TOPIC}-{partition}'s rolled segments to be uploaded to S3",
                 lambda p=partition: list_offsets(bootstrap, TOPIC, [p], -6)[p][0] > MESSAGES // PARTITIONS // 2,
                 60, logs)
    leaders = {leader for leader, _ in isrs(bootstrap).values()}
    victim = next(b for b in sorted(cluster.specs) if cluster.specs[b].role == "broker" and b not in leaders)
    node_dir = cluster.specs[victim].directory
    print(f"\nbroker {victim} follows every partition of {TOPIC}; its disk dies:")
    print(f"$ kill -9 <broker {victim}>; rm -rf {node_dir}/data")
    cluster.wipe(victim)
    for partition in range(PARTITIONS):
        wait_for(f"the controller to drop broker {victim} from the ISR of {TOPIC}-{partition} (its session expires)",
                 lambda p=partition: victim not in isrs(bootstrap)[p][1], 30, logs)
    print(f"$ quorum storage format --config {node_dir}/server.properties   (a new disk)")
    print(f"$ quorum start {node_dir}/server.properties   ({FLAG}=true)", flush=True)
    started = time.monotonic()
    cluster.start_node(victim)
    joined: dict[int, float] = {}
    for partition in range(PARTITIONS):
        wait_for(f"broker {victim} back in the ISR of {TOPIC}-{partition}",
                 lambda p=partition: victim in isrs(bootstrap)[p][1], 60, [cluster.specs[victim].log_path])
        joined[partition] = time.monotonic() - started
    print(f"broker {victim} is back in every ISR of {TOPIC}:")
    print_saved(cluster, s3, victim, joined)


def remote_bytes_below(s3: object, partition: int, offset: int) -> tuple[int, int]:
    """(segments, bytes) of the partition's `.log` objects in S3 that start below `offset`."""
    client = s3.client()  # type: ignore[attr-defined]
    segments = total = 0
    for page in client.get_paginator("list_objects_v2").paginate(Bucket=BUCKET, Prefix=f"{TOPIC}-"):
        for entry in page.get("Contents", ()):
            match = SEGMENT_LOG.search(entry["Key"])
            if match and int(match["partition"]) == partition and int(match["base"]) < offset:
                segments, total = segments + 1, total + entry["Size"]
    return segments, total


def print_saved(cluster: LocalCluster, s3: object, victim: int, joined: dict[int, float]) -> None:
    """The bytes-saved report: what the wiped broker fetched from the leader beside what it left in S3."""
    for partition, seconds in joined.items():
        replica = cluster.specs[victim].directory / "data" / f"{TOPIC}-{partition}"
        files = sorted(replica.glob("*.log"))
        start = int(files[0].name.split(".")[0])
        fetched = sum(f.stat().st_size for f in files)
        segments, in_s3 = remote_bytes_below(s3, partition, start)
        if start == 0 or in_s3 == 0:
            raise DemoFailure(f"broker {victim} copied {TOPIC}-{partition} from offset 0 instead of bootstrapping "
                              f"from the earliest pending upload offset", [cluster.specs[victim].log_path])
        print(f"  {TOPIC}-{partition}: starts at offset {start}; fetched {fetched / 1024:,.1f} KiB from the leader, "
              f"left {in_s3 / 1024:,.1f} KiB ({segments} segments) in S3: {in_s3 / (in_s3 + fetched):.0%} not "
              f"copied; in the ISR {seconds:.1f} s after its start")
    for line in cluster.specs[victim].log_path.read_text(encoding="utf-8", errors="replace").splitlines():
        if f" {TOPIC}-" in line and ": bootstrap from offset" in line:
            print("  broker log: " + line.split(": ", 1)[-1])
