"""The embedded demo: start a local node and list its metadata with three real Kafka clients.

Run it with `./run demo`. It grows as the project does; today the node is a single standalone
broker serving a fixed metadata image, and the clients are confluent-kafka (librdkafka),
kafka-python and Debian's kcat, each unchanged, each pointed at 127.0.0.1.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys

from quorum.launcher import start_standalone

TOPICS = ("orders:3", "payments:2", "audit:1")


def confluent_view(bootstrap: str) -> dict[str, int]:
    from confluent_kafka.admin import AdminClient

    metadata = AdminClient({"bootstrap.servers": bootstrap}).list_topics(timeout=15)
    return {name: len(topic.partitions) for name, topic in metadata.topics.items()}


def kafka_python_view(bootstrap: str) -> dict[str, int]:
    from kafka import KafkaAdminClient

    admin = KafkaAdminClient(bootstrap_servers=bootstrap)
    try:
        described = admin.describe_topics()
    finally:
        admin.close()
    return {topic["name"]: len(topic["partitions"]) for topic in described}


def kcat_view(bootstrap: str) -> dict[str, int]:
    kcat = shutil.which("kcat")
    if kcat is None:
        raise RuntimeError("kcat is not installed (./run demo installs Debian's kcat package)")
    out = subprocess.run([kcat, "-L", "-b", bootstrap], capture_output=True, text=True, timeout=60, check=True)
    return {m[1]: int(m[2]) for m in re.finditer(r'topic "([^"]+)" with (\d+) partitions', out.stdout)}


def print_table(rows: list[tuple[str, dict[str, int] | str]], topics: list[str]) -> None:
    """One row per client, one column per topic: the partition count that client sees."""
    table = [["client", *(f"{t} partitions" for t in topics)]]
    for client, view in rows:
        if isinstance(view, str):
            table.append([client, view, *([""] * (len(topics) - 1))])
        else:
            table.append([client, *(str(view[t]) if t in view else "missing" for t in topics)])
    widths = [max(len(row[i]) for row in table) for i in range(len(table[0]))]
    for number, row in enumerate(table):
        print("  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)).rstrip())
        if number == 0:
            print("  ".join("-" * width for width in widths))


def main() -> int:
    print("Starting a local node: quorum standalone --listen 127.0.0.1:0 " + " ".join(f"--topic {t}" for t in TOPICS))
    node = start_standalone(*TOPICS)
    try:
        print("".join(node.output), end="")
        topics = sorted(spec.split(":")[0] for spec in TOPICS)
        rows: list[tuple[str, dict[str, int] | str]] = []
        failures = 0
        for name, view in (("confluent-kafka", confluent_view), ("kafka-python", kafka_python_view),
                           ("kcat", kcat_view)):
            print(f"... listing metadata with {name}", flush=True)
            try:
                rows.append((name, view(node.bootstrap)))
            except Exception as exc:  # the demo reports every client, even when one fails
                failures += 1
                rows.append((name, f"FAILED: {exc}"))
        print()
        print_table(rows, topics)
    finally:
        node.stop()
    print()
    print("All three clients listed the node's metadata." if not failures else f"{failures} client(s) failed.")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
