"""`quorum local-cluster --tiered` as a user runs it: an embedded S3 (moto's server on 127.0.0.1)
that every broker uploads to, and a topic read from offset 0 after its local copies are gone."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import threading

import boto3
import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from quorum.get_offsets import list_offsets
from tests.test_controller_processes import create, wait_until
from tiered_follower.embedded_s3 import ACCESS_KEY, REGION, SECRET_KEY

QUIET = {"log_level": 0}
S3_LINE = re.compile(r"^embedded S3 \(moto, in memory\) at (?P<endpoint>\S+), bucket (?P<bucket>\S+)$")
READY = re.compile(r"^ready: 1 controllers, 1 brokers; bootstrap servers: (?P<bootstrap>\S+)$")


@pytest.mark.parametrize("where", ["embedded", "external"])
def test_local_cluster_tiered_uploads_to_s3_and_serves_reads_from_it(tmp_path, s3_server, where):
    """`--tiered` alone starts an embedded S3; `--s3-endpoint URL --s3-bucket NAME` uses another one
    (here the tests' moto server, with credentials from the environment as boto3 reads them)."""
    command = [sys.executable, "-m", "quorum.cli", "local-cluster", "--controllers", "1", "--brokers", "1",
               "--dir", str(tmp_path), "--tiered", "--set", "log.segment.bytes=16384",
               "--set", "remote.log.manager.task.interval.ms=200", "--set", "log.retention.check.interval.ms=500"]
    environment = dict(os.environ)
    if where == "external":
        s3_server.create_bucket("external-tiered")
        command += ["--s3-endpoint", s3_server.endpoint_url, "--s3-bucket", "external-tiered"]
        environment.update(AWS_ACCESS_KEY_ID=ACCESS_KEY, AWS_SECRET_ACCESS_KEY=SECRET_KEY)
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                               env=environment)
    lines: list[str] = []
    ready = threading.Event()

    def drain() -> None:
        assert process.stdout is not None
        for line in process.stdout:
            lines.append(line.rstrip("\n"))
            if READY.match(lines[-1]):
                ready.set()

    threading.Thread(target=drain, daemon=True).start()
    try:
        assert ready.wait(90), "\n".join(lines)
        if where == "external":
            assert not any(map(S3_LINE.match, lines))
            endpoint, bucket = s3_server.endpoint_url, "external-tiered"
        else:
            s3 = next(m for m in map(S3_LINE.match, lines) if m)
            endpoint, bucket = s3["endpoint"], s3["bucket"]
        bootstrap = next(m for m in map(READY.match, lines) if m)["bootstrap"]
        admin = AdminClient({"bootstrap.servers": bootstrap, **QUIET})
        create(admin, NewTopic("orders", 1, 1, config={"remote.storage.enable": "true",
                                                      "local.retention.bytes": "1"}))
        producer = Producer({"bootstrap.servers": bootstrap, "batch.num.messages": 20, **QUIET})
        values = [f"order-{n}".encode() * 20 for n in range(1500)]
        for value in values:
            producer.produce("orders", value)
        assert producer.flush(30) == 0
        wait_until("orders' local log to start above 300",
                   lambda: list_offsets(bootstrap, "orders", [0], -4)[0][0] > 300)
        client = boto3.client("s3", endpoint_url=endpoint, region_name=REGION, aws_access_key_id=ACCESS_KEY,
                              aws_secret_access_key=SECRET_KEY)
        keys = [o["Key"] for o in client.list_objects_v2(Bucket=bucket).get("Contents", ())]
        assert any(re.search(r"orders-[0-9a-f-]{36}/0/0{20}-[0-9a-f-]{36}\.log$", k) for k in keys), keys
        consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "g", **QUIET})
        consumer.assign([TopicPartition("orders", 0, 0)])
        got: list[bytes] = []

        def done() -> bool:
            got.extend(m.value() for m in consumer.consume(500, 0.5) if m.error() is None)
            return len(got) >= len(values)

        wait_until("orders read from offset 0", done)
        consumer.close()
        assert got == values
    finally:
        process.send_signal(signal.SIGINT)
        process.wait(60)


def test_a_broker_with_tiered_storage_but_no_bucket_stops_naming_the_setting():
    from types import SimpleNamespace

    from quorum import cli

    config = SimpleNamespace(extra={"remote.log.storage.system.enable": "true"}, is_broker=True,
                             is_controller=False, node_id=101)
    with pytest.raises(SystemExit, match="rsm.config.storage.s3.bucket.name is required"):
        cli._remote_tier(config)
    assert cli._remote_tier(SimpleNamespace(extra={}, is_broker=True, is_controller=False, node_id=101)) is None
