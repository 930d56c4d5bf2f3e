"""KIP-630's snapshot metrics, for Prometheus.

The KIP names four JMX metrics; here each is a Prometheus metric named ``<domain>_<type>_<name>``
from the MBean name, the dots of the domain turned into underscores (Prometheus names allow no
dots). That is how the Prometheus JMX exporter's default rule names Kafka's MBeans, less the
attribute it appends (``_Value``, ``_Count``), which native Prometheus metrics do not need::

    kafka.controller:type=KafkaController,name=GenSnapshotLatencyMs
        -> kafka_controller_KafkaController_GenSnapshotLatencyMs    (histogram)
    kafka.controller:type=KafkaController,name=LoadSnapshotLatencyMs
        -> kafka_controller_KafkaController_LoadSnapshotLatencyMs   (histogram)
    kafka.controller:type=KafkaController,name=SnapshotSizeBytes
        -> kafka_controller_KafkaController_SnapshotSizeBytes       (gauge)
    kafka.controller:type=KafkaController,name=SnapshotLag
        -> kafka_controller_KafkaController_SnapshotLag             (gauge)

The histograms are in milliseconds, as the names say, with buckets from 1 ms to 60 s; a histogram
also exposes the usual ``_bucket``, ``_count``, ``_sum`` and ``_created`` series.

Every `SnapshotMetrics` has its own CollectorRegistry rather than prometheus_client's global
one, because several nodes can live in one process (the simulator, tests) and each must report
its own figures; a node serves its registry on its own port (`serve`).
"""

from __future__ import annotations

import threading
from wsgiref.simple_server import WSGIServer

from prometheus_client import CollectorRegistry, Gauge, Histogram, generate_latest, start_http_server

PREFIX = "kafka_controller_KafkaController_"
"""The JMX domain and type, `kafka.controller:type=KafkaController`, in Prometheus form."""

LATENCY_BUCKETS_MS = (1.0, 2.5, 5.0, 10.0, 25.0, 50.0, 100.0, 250.0, 500.0, 1_000.0, 2_500.0, 5_000.0,
                      10_000.0, 30_000.0, 60_000.0, float("inf"))  # fmt: skip
"""Snapshot write and load times run from a millisecond (a small state) to tens of seconds (millions of records)."""


class SnapshotMetrics:
    """GenSnapshotLatencyMs, LoadSnapshotLatencyMs, SnapshotSizeBytes and SnapshotLag of one node."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        self.gen_snapshot_latency_ms = Histogram(
            PREFIX + "GenSnapshotLatencyMs", "The time it took to generate a snapshot, in milliseconds.",
            registry=self.registry, buckets=LATENCY_BUCKETS_MS)  # fmt: skip
        self.load_snapshot_latency_ms = Histogram(
            PREFIX + "LoadSnapshotLatencyMs", "The time it took to load a snapshot, in milliseconds.",
            registry=self.registry, buckets=LATENCY_BUCKETS_MS)  # fmt: skip
        self.snapshot_size_bytes = Gauge(
            PREFIX + "SnapshotSizeBytes", "Size of the latest snapshot in bytes.", registry=self.registry)
        self.snapshot_lag = Gauge(
            PREFIX + "SnapshotLag", "The number of offsets between the largest snapshot offset and the high-watermark.",
            registry=self.registry)  # fmt: skip
        self._server: WSGIServer | None = None
        self._thread: threading.Thread | None = None

    def observe_gen_latency(self, milliseconds: float) -> None:
        self.gen_snapshot_latency_ms.observe(milliseconds)

    def observe_load_latency(self, milliseconds: float) -> None:
        self.load_snapshot_latency_ms.observe(milliseconds)

    def set_snapshot_size(self, size_bytes: int) -> None:
        self.snapshot_size_bytes.set(size_bytes)

    def set_snapshot_lag(self, offsets: int) -> None:
        self.snapshot_lag.set(offsets)

    def render(self) -> bytes:
        """The registry in the Prometheus text exposition format (what `/metrics` answers)."""
        return generate_latest(self.registry)

    def serve(self, port: int = 0, host: str = "127.0.0.1") -> int:
        """Serve `render()` over HTTP on `host:port` from a daemon thread; returns the bound port
        (so port 0 picks a free one). One server per instance; `close` stops it."""
        if self._server is not None:
            raise RuntimeError(f"the metrics are already served on port {self.port}")
        # prometheus_client 0.26 returns the WSGI server and its thread.
        self._server, self._thread = start_http_server(port, addr=host, registry=self.registry)
        return self._server.server_port

    @property
    def port(self) -> int | None:
        """The port the metrics are served on, None when they are not."""
        return None if self._server is None else self._server.server_port

    def close(self) -> None:
        """Stop serving (harmless when not serving)."""
        server, thread = self._server, self._thread
        self._server = self._thread = None
        if server is not None:
            server.shutdown()
            server.server_close()
        if thread is not None:
            thread.join()
