"""The replicator's metrics, under MirrorMaker 2's names, on a Prometheus endpoint (`--metrics-port`).

MM2's MirrorSourceConnector reports per target partition (JMX `kafka.connect.mirror:type=
MirrorSourceConnector,target=B,topic=A.t,partition=0`): `record-count`, `byte-count`, `record-rate`,
`byte-rate`, `record-age-ms` (how old a record was when it was copied) and `replication-latency-ms`
(from the record's timestamp to the target's acknowledgement), each age and latency also as
`-min`, `-max` and `-avg`. Here the JMX name is written as the project writes its others
(`kafka_connect_mirror_MirrorSourceConnector_record_count`, dashes made underscores) with the
labels `source`, `target`, `topic` and `partition`; the counts are Prometheus counters (`rate()`
gives the per-second rates, which are also exported as MM2's gauges over the last
`window_s`); min/max/avg are over that window. Beside them, what MM2 does not have:
`client_epochs_mirror_stale_metadata_refused_total`, `..._rewind_refused_total`, `..._resets_total`,
`..._skipped_already_copied_total` and the lag.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

from prometheus_client import CollectorRegistry, start_http_server
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector

from client_epochs.mirror.progress import MirrorCounts
from client_epochs.model import TopicPartition

PREFIX = "kafka_connect_mirror_MirrorSourceConnector_"
OWN = "client_epochs_mirror_"
LABELS = ("source", "target", "topic", "partition")


@dataclass
class _Partition:
    records: int = 0
    bytes: int = 0
    window: deque[tuple[float, int, float, float]] = field(default_factory=deque)
    """(acknowledged at, bytes, record age ms, replication latency ms) of the copies in the window."""
    last_age_ms: float = 0.0
    last_latency_ms: float = 0.0


class FlowMetrics:
    """One flow's figures, fed by its replicator (`acknowledged`, and `counts` set to its MirrorCounts)."""

    def __init__(self, source_alias: str, target_alias: str, window_s: float, clock: Callable[[], float],
                 lock: threading.Lock) -> None:
        self.source_alias, self.target_alias = source_alias, target_alias
        self.window_s = window_s
        self._clock = clock
        self._lock = lock
        self.partitions: dict[tuple[str, int], _Partition] = {}
        self.counts: MirrorCounts | None = None
        """The replicator's own figures, read at each scrape."""

    def acknowledged(self, target: TopicPartition, size: int, timestamp_ms: int | None, copied_at: float) -> None:
        """A copy the target acknowledged: `copied_at` is when it was read (s since the epoch)."""
        now = self._clock()
        known = timestamp_ms is not None and timestamp_ms > 0
        age = max(0.0, copied_at * 1000 - timestamp_ms) if known else 0.0
        latency = max(0.0, now * 1000 - timestamp_ms) if known else 0.0
        with self._lock:
            partition = self.partitions.setdefault((target.topic, target.partition), _Partition())
            partition.records += 1
            partition.bytes += size
            partition.last_age_ms, partition.last_latency_ms = age, latency
            partition.window.append((now, size, age, latency))
            self.trim(partition, now)

    def trim(self, partition: _Partition, now: float) -> None:
        while partition.window and partition.window[0][0] < now - self.window_s:
            partition.window.popleft()


class MirrorMetrics(Collector):
    """Every flow of the process, read by Prometheus (`collect`); thread-safe, since the scrape runs
    on the HTTP server's thread and each flow copies on its own."""

    def __init__(self, window_s: float = 30.0, clock: Callable[[], float] = time.time) -> None:
        self.window_s = window_s
        self._clock = clock
        self._lock = threading.Lock()
        self.flows: list[FlowMetrics] = []

    def flow(self, source_alias: str, target_alias: str) -> FlowMetrics:
        flow = FlowMetrics(source_alias, target_alias, self.window_s, self._clock, self._lock)
        self.flows.append(flow)
        return flow

    def collect(self) -> Iterator[CounterMetricFamily | GaugeMetricFamily]:
        now = self._clock()
        families = {name: GaugeMetricFamily(PREFIX + name, doc, labels=LABELS) for name, doc in _GAUGES.items()}
        records = CounterMetricFamily(PREFIX + "record_count", "records copied and acknowledged", labels=LABELS)
        volume = CounterMetricFamily(PREFIX + "byte_count", "bytes of records copied and acknowledged", labels=LABELS)
        own = {name: CounterMetricFamily(OWN + name, doc, labels=["source", "target"]) for name, doc in _OWN.items()}
        lag = GaugeMetricFamily(OWN + "lag", "records the source holds that are not copied yet",
                                labels=["source", "target"])
        with self._lock:
            for flow in self.flows:
                for (topic, number), partition in sorted(flow.partitions.items()):
                    flow.trim(partition, now)
                    labels = [flow.source_alias, flow.target_alias, topic, str(number)]
                    records.add_metric(labels, partition.records)
                    volume.add_metric(labels, partition.bytes)
                    window = list(partition.window)
                    families["record_rate"].add_metric(labels, len(window) / self.window_s)
                    families["byte_rate"].add_metric(labels, sum(w[1] for w in window) / self.window_s)
                    for name, index, last in (("record_age_ms", 2, partition.last_age_ms),
                                              ("replication_latency_ms", 3, partition.last_latency_ms)):
                        values = [w[index] for w in window] or [last]
                        families[name].add_metric(labels, last)
                        families[name + "_min"].add_metric(labels, min(values))
                        families[name + "_max"].add_metric(labels, max(values))
                        families[name + "_avg"].add_metric(labels, sum(values) / len(values))
                counts = flow.counts
                if counts is not None:
                    pair = [flow.source_alias, flow.target_alias]
                    for name in _OWN:
                        own[name].add_metric(pair, getattr(counts, name))
                    lag.add_metric(pair, float("nan") if counts.lag is None else counts.lag)
        yield records
        yield volume
        yield from families.values()
        yield from own.values()
        yield lag


_OWN = {
    "stale_metadata_refused": "Metadata answers refused as older than what the replicator knew (KIP-232)",
    "rewind_refused": "records delivered below a partition's position, not copied again",
    "resets": "offset resets because the data was really gone",
    "skipped_already_copied": "records the target already held when a partition was resumed",
}


_GAUGES = {
    "record_rate": "records copied per second over the window",
    "byte_rate": "bytes copied per second over the window",
    "record_age_ms": "age of the last record when copied",
    "record_age_ms_min": "smallest record age in the window",
    "record_age_ms_max": "largest record age in the window",
    "record_age_ms_avg": "mean record age in the window",
    "replication_latency_ms": "record timestamp to target acknowledgement, last record",
    "replication_latency_ms_min": "smallest replication latency in the window",
    "replication_latency_ms_max": "largest replication latency in the window",
    "replication_latency_ms_avg": "mean replication latency in the window",
}


def serve(metrics: MirrorMetrics, port: int) -> int:
    """Serve `metrics` on 127.0.0.1:`port` (0: any free port); the port it listens on."""
    registry = CollectorRegistry()
    registry.register(metrics)
    server, _ = start_http_server(port, addr="127.0.0.1", registry=registry)
    return server.server_port
