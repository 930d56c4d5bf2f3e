"""Produce and consume throughput over TLS and SASL beside PLAINTEXT, in one run against one broker
(issue 18): what encryption and authentication cost a client on this machine.

Run: `./run bench`, `.venv/bin/python -m benchmarks.bench_security`, or
`.venv/bin/python benchmarks/bench_security.py`. BENCH_SECURITY_MESSAGES sets how many 1 KiB
messages each run produces and consumes (default 300,000: 300 MB; a few seconds a run).

The cluster is `quorum.launcher.LocalCluster(security=True, plaintext_listener=True)`: one controller
(its listener on mutual TLS) and one broker serving the same data on four listeners, PLAINTEXT, SSL
(TLS 1.2+, Python's `ssl`), SASL_SSL (SCRAM-SHA-512 over TLS) and SASL_PLAINTEXT (PLAIN, no
encryption). Each listener gets its own 4-partition topic; each run is one confluent-kafka client in
a child process (benchmarks.bench_broker's produce and consume runs, the same settings for every
listener; see that module for what the clock covers), produce acks=1 then consume from offset 0.
The rows of one run compare listeners with each other; "% of PLAINTEXT" is MB/s beside the
PLAINTEXT row of the same operation. "broker CPU" is the broker process's CPU during the run, "client
CPU" the client child's own: TLS moves the cost of encrypting every byte there. "CPU ms/MB" (both
together per MB) beside PLAINTEXT's is the figure to judge on a loaded machine, where MB/s is noise.
"""

from __future__ import annotations

import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

if __package__ in (None, ""):  # run as a script: make `benchmarks` and `quorum` importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.bench_broker import (  # noqa: E402
    BROKER,
    CLUSTER_SETTINGS,
    MESSAGE_BYTES,
    child_main,
    create_topic,
    high_watermarks,
    process_cpu_s,
    run_client,
)
from benchmarks.table import print_table, progress  # noqa: E402

MESSAGES = int(os.environ.get("BENCH_SECURITY_MESSAGES", "300000"))
PARTITIONS = 4
LISTENERS = (("PLAINTEXT", None), ("SSL", None), ("SASL_SSL", "SCRAM-SHA-512"), ("SASL_PLAINTEXT", "PLAIN"))


def main() -> None:
    from quorum.launcher import LocalCluster

    results: list[tuple[str, str, dict[str, Any]]] = []
    with tempfile.TemporaryDirectory(prefix="bench-security-") as name:
        progress(f"{MESSAGES:,} messages of {MESSAGE_BYTES} bytes a run; 1 controller, 1 broker with 4 listeners")
        cluster = LocalCluster(Path(name) / "cluster", controllers=1, brokers=1, settings=CLUSTER_SETTINGS,
                               security=True, plaintext_listener=True)
        try:
            cluster.format_storage()
            cluster.start(timeout=90)
            broker_pid = cluster.processes[BROKER].pid
            for protocol, mechanism in LISTENERS:
                settings = cluster.client_settings(protocol, mechanism=mechanism or "PLAIN")
                address = settings.pop("bootstrap.servers")
                topic = f"bench-{protocol.lower()}"
                create_topic(cluster, address, topic, PARTITIONS, settings)
                for operation in ("produce", "consume"):
                    label = f"{protocol}{f' ({mechanism})' if mechanism else ''}: {operation}"
                    job: dict[str, Any] = {"operation": operation, "address": address, "topic": topic,
                                           "messages": MESSAGES, "acks": "1", "partitions": PARTITIONS,
                                           "label": label, "client": settings}
                    if operation == "consume":
                        job["ends"] = high_watermarks(address, topic, PARTITIONS, settings)
                    began = process_cpu_s(broker_pid)
                    run = run_client(job, "benchmarks.bench_security")
                    run["server_cpu"] = process_cpu_s(broker_pid) - began
                    results.append((label.split(":")[0], operation, run))
                    time.sleep(0.5)  # let the broker's page-cache writes settle between runs
        finally:
            cluster.stop()
    report(results)


def report(results: list[tuple[str, str, dict[str, Any]]]) -> None:
    plain = {operation: run for listener, operation, run in results if listener == "PLAINTEXT"}
    rows = []
    for listener, operation, run in results:
        rate, megabytes = run["bytes"] / run["seconds"], run["bytes"] / 1e6
        cpu_per_mb = (run["server_cpu"] + run.get("client_cpu", 0.0)) / megabytes * 1000
        peer = plain.get(operation)
        peer_cpu = peer and (peer["server_cpu"] + peer.get("client_cpu", 0.0)) / (peer["bytes"] / 1e6) * 1000
        rows.append([listener, operation, run["messages"], megabytes, run["seconds"], rate / 1e6,
                     round(run["messages"] / run["seconds"]), f"{run['server_cpu']:.1f} s",
                     f"{run.get('client_cpu', 0.0):.1f} s", f"{cpu_per_mb:.1f}",
                     f"{rate / (peer['bytes'] / peer['seconds']):.0%}" if peer else "",
                     f"{cpu_per_mb / peer_cpu:.2f}x" if peer_cpu else ""])
    print_table(
        f"confluent-kafka against one broker over each of its listeners, {PARTITIONS} partitions, "
        f"{MESSAGE_BYTES}-byte messages, acks=1; consume: assign() from offset 0; MB = 10^6 bytes of values. "
        "CPU ms/MB: broker and client CPU per MB (steadier than MB/s on a loaded machine)",
        ["listener", "operation", "messages", "MB", "seconds", "MB/s", "msgs/s", "broker CPU", "client CPU",
         "CPU ms/MB", "MB/s % of PLAINTEXT", "CPU/MB vs PLAINTEXT"],
        rows, left=(0, 1))


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "--child":
        child_main(sys.argv[2])
    else:
        main()
