"""Part 6 of the demo: tiered storage (KIP-405) on S3, as a platform engineer runs it.

`quorum local-cluster --tiered` starts a broker with an embedded S3 (moto's server on 127.0.0.1).
A topic with `remote.storage.enable` and a tiny `local.retention.bytes` gets small segments; the
broker uploads each rolled segment (log, indexes, manifest last) and deletes the local copy. The
demo shows the objects in S3, what `quorum get-offsets` answers for the earliest, earliest local,
latest tiered and earliest pending upload offsets, and then reads the topic from offset 0 with
confluent-kafka and kcat: the early records come from S3.
"""

from __future__ import annotations

import re
import shutil
import signal
import subprocess
import sys
import threading
from pathlib import Path

from examples.demo_waits import DemoFailure, scratch_directory, wait_for

READY = re.compile(r"^ready: .*; bootstrap servers: (?P<bootstrap>\S+)$")
S3_LINE = re.compile(r"^embedded S3 \(moto, in memory\) at (?P<endpoint>\S+), bucket (?P<bucket>\S+)$")
TOPIC = "clickstream"
MESSAGES = 3000


def tiered_demo() -> None:
    print("\n== Part 6: tiered storage on S3 (quorum local-cluster --tiered, KIP-405)", flush=True)
    with scratch_directory("quorum-demo-tiered-") as directory:
        command = [sys.executable, "-m", "quorum.cli", "local-cluster", "--controllers", "1", "--brokers", "1",
                   "--dir", directory, "--tiered", "--set", "log.segment.bytes=32768",
                   "--set", "remote.log.manager.task.interval.ms=500", "--set", "log.retention.check.interval.ms=1000"]
        print("$ quorum local-cluster " + " ".join(command[4:]), flush=True)
        process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        lines: list[str] = []
        threading.Thread(target=lambda: lines.extend(line.rstrip("\n") for line in process.stdout or ()),
                         daemon=True).start()
        logs = [Path(directory) / "node-101" / "node.log"]
        try:
            ready = wait_for("the tiered local cluster's ready line",
                             lambda: next((m for m in map(READY.match, list(lines)) if m), None), 90, logs)
            s3 = next(m for m in map(S3_LINE.match, list(lines)) if m)
            print(f"  {s3.group(0)}\n  {ready.group(0)}", flush=True)
            run_part(ready["bootstrap"], s3["endpoint"], s3["bucket"], Path(directory), logs)
        finally:
            process.send_signal(signal.SIGINT)
            try:
                process.wait(60)
            except subprocess.TimeoutExpired:
                process.kill()


def run_part(bootstrap: str, endpoint: str, bucket: str, directory: Path, logs: list[Path]) -> None:
    from confluent_kafka import Consumer, Producer, TopicPartition
    from confluent_kafka.admin import AdminClient, NewTopic

    from quorum.get_offsets import list_offsets
    from tiered_follower.embedded_s3 import ACCESS_KEY, REGION, SECRET_KEY

    admin = AdminClient({"bootstrap.servers": bootstrap})
    config = {"remote.storage.enable": "true", "local.retention.bytes": "1"}
    for future in admin.create_topics([NewTopic(TOPIC, 1, 1, config=config)]).values():
        future.result(30)
    print(f"created {TOPIC} with {config}; segments of 32 KiB (log.segment.bytes)", flush=True)
    producer = Producer({"bootstrap.servers": bootstrap, "batch.num.messages": 50, "enable.idempotence": True})
    values = [f"click-{n:05d} page=/item/{n % 97}".encode() for n in range(MESSAGES)]
    for value in values:
        producer.produce(TOPIC, value)
    if producer.flush(30):
        raise DemoFailure(f"{MESSAGES} messages to {TOPIC} not all acknowledged", logs)
    print(f"produced {MESSAGES} messages", flush=True)
    wait_for(f"{TOPIC}'s early segments to be uploaded and deleted locally",
             lambda: list_offsets(bootstrap, TOPIC, [0], -4)[0][0] > MESSAGES // 2, 60, logs)

    import boto3

    client = boto3.client("s3", endpoint_url=endpoint, region_name=REGION, aws_access_key_id=ACCESS_KEY,
                          aws_secret_access_key=SECRET_KEY)
    keys = [o["Key"] for o in client.list_objects_v2(Bucket=bucket).get("Contents", ())]
    segments = sorted(k for k in keys if k.endswith(".rsm-manifest"))
    print(f"S3 bucket {bucket}: {len(keys)} objects, {len(segments)} segments; the first one:")
    stem = segments[0].removesuffix(".rsm-manifest")
    for key in sorted(k for k in keys if k.startswith(stem) or (k.startswith(stem.rsplit("/", 1)[0] +
                                                                              "/remote_log_metadata/" +
                                                                              stem.rsplit("/", 1)[1]))):
        print(f"  {key}")
    local = sorted(p.name for p in (directory / "node-101" / "data" / f"{TOPIC}-0").glob("*.log"))
    print(f"on the broker's disk: {', '.join(local)}", flush=True)
    for spec in ("earliest", "earliest-local", "latest-tiered", "earliest-pending-upload", "latest"):
        out = subprocess.run([sys.executable, "-m", "quorum.cli", "get-offsets", "--bootstrap-server", bootstrap,
                              "--topic", TOPIC, "--time", spec], capture_output=True, text=True, timeout=60)
        print(f"$ quorum get-offsets --topic {TOPIC} --time {spec}\n  {out.stdout.strip() or out.stderr.strip()}")

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "tiered-demo", "enable.auto.commit": False})
    consumer.assign([TopicPartition(TOPIC, 0, 0)])
    got: list[bytes] = []

    def read_all() -> bool:
        got.extend(m.value() for m in consumer.consume(1000, 0.5) if m.error() is None)
        return len(got) >= MESSAGES

    wait_for(f"confluent-kafka reading {TOPIC} from offset 0", read_all, 60, logs)
    consumer.close()
    if got != values:
        raise DemoFailure(f"confluent-kafka read {len(got)} messages of {TOPIC} that differ from those produced")
    print(f"confluent-kafka read all {MESSAGES} messages from offset 0, byte for byte as produced "
          f"(the first {list_offsets(bootstrap, TOPIC, [0], -4)[0][0]} from S3)", flush=True)
    kcat = shutil.which("kcat")
    if kcat is not None:
        out = subprocess.run([kcat, "-C", "-b", bootstrap, "-t", TOPIC, "-o", "beginning", "-c", "3", "-e",
                              "-f", "  offset %o: %s\n"], capture_output=True, text=True, timeout=60)
        print(f"$ kcat -C -t {TOPIC} -o beginning -c 3\n{out.stdout.rstrip()}", flush=True)
