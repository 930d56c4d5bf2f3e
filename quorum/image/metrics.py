"""The node's metrics for Prometheus: KIP-630's snapshot metrics, KIP-631's metadata metrics and
KIP-835's replay offsets.

The KIPs name JMX metrics; here each is a Prometheus metric named ``<domain>_<type>_<name>``
from the MBean name, the dots of the domain turned into underscores (Prometheus names allow no
dots). That is how the Prometheus JMX exporter's default rule names Kafka's MBeans, less the
attribute it appends (``_Value``, ``_Count``), which native Prometheus metrics do not need.

KIP-630, on every node::

    kafka.controller:type=KafkaController,name=GenSnapshotLatencyMs
        -> kafka_controller_KafkaController_GenSnapshotLatencyMs    (histogram)
    kafka.controller:type=KafkaController,name=LoadSnapshotLatencyMs
        -> kafka_controller_KafkaController_LoadSnapshotLatencyMs   (histogram)
    kafka.controller:type=KafkaController,name=SnapshotSizeBytes
        -> kafka_controller_KafkaController_SnapshotSizeBytes       (gauge)
    kafka.controller:type=KafkaController,name=SnapshotLag
        -> kafka_controller_KafkaController_SnapshotLag             (gauge)

KIP-631 ("New Metrics")::

    kafka.controller:type=KafkaController,name=MetadataLag             (controllers)
        -> kafka_controller_KafkaController_MetadataLag             (gauge)
    kafka.controller:type=KafkaServer,name=MetadataLag                 (brokers)
        -> kafka_controller_KafkaServer_MetadataLag                 (gauge)
    kafka.controller:type=KafkaController,name=MetadataSnapshotLag     (every node)
        -> kafka_controller_KafkaController_MetadataSnapshotLag     (gauge)
    kafka.controller:type=KafkaController,name=MetadataCommitLatencyMs (controllers)
        -> kafka_controller_KafkaController_MetadataCommitLatencyMs (histogram)
    kafka.controller:type=KafkaController,name=MetadataCommitRate      (controllers)
        -> kafka_controller_KafkaController_MetadataCommitRate_total   (counter)
    kafka.controller:type=KafkaController,name=ControllerRequestsRate  (controllers)
        -> kafka_controller_KafkaController_ControllerRequestsRate_total (counter)

KIP-835 ("Monitor KRaft Controller Quorum Health"), on controllers::

    kafka.controller:type=KafkaController,name=LastAppliedRecordOffset
        -> kafka_controller_KafkaController_LastAppliedRecordOffset   (gauge)
    kafka.controller:type=KafkaController,name=LastCommittedRecordOffset
        -> kafka_controller_KafkaController_LastCommittedRecordOffset (gauge)

What they measure:

* MetadataLag: the committed offsets this node has not replayed yet, ``high watermark -
  applied offset`` (the metadata log has no transactions, so its last stable offset is its high
  watermark; the applied offset is the next one to replay). Set when the high watermark advances,
  before the replay (what is waiting) and after it (0 once caught up, unless the last batch is
  still partly uncommitted), and after a snapshot is installed. A node with both roles serves
  both names. It follows replay, not answers: a broker whose Metadata answers are held back by
  the KAFKA-6262 test knob (`quorum.server.node`) still reports the lag of its replay.
* LastAppliedRecordOffset and LastCommittedRecordOffset: the offset of the last record this node
  has replayed (the applied offset less one) and of the last one it knows committed (the high
  watermark less one), set with MetadataLag; -1 before any. What a rolling restart waits for: a
  controller just started knows its log but not what is committed, so MetadataLag reads 0 until
  its first Fetch answer, while LastAppliedRecordOffset is compared with the leader's.
* MetadataSnapshotLag: the spec's definition, ``last stable offset - offset of the last
  snapshot``, with 0 as the snapshot offset when there is none, so a node without snapshots
  reports its whole committed log. KIP-630's SnapshotLag differs only there: without a snapshot
  it counts from the log start offset.
* MetadataCommitLatencyMs: on the active controller, from proposing a controller result's
  records (one batch) to their commit (the high watermark passing them), in milliseconds;
  results without records and failed commits are not observed.
* MetadataCommitRate and ControllerRequestsRate: the spec's figures are per second. They are
  exposed as Prometheus counters (``_total``: records the active controller committed; controller
  requests it processed, registrations, heartbeats and admin requests alike, but not the
  NOT_CONTROLLER refusals of a node that is not active), the source Prometheus computes a rate
  from, e.g. ``rate(kafka_controller_KafkaController_MetadataCommitRate_total[1m])``; a gauge of
  a moving rate computed in the node would lose what happened between two scrapes.

The histograms are in milliseconds, as the names say; a histogram also exposes the usual
``_bucket``, ``_count``, ``_sum`` and ``_created`` series, a counter ``_total`` and ``_created``.

Every `NodeMetrics` has its own CollectorRegistry rather than prometheus_client's global one,
because several nodes can live in one process (the simulator, tests) and each must report its
own figures; a node serves its registry on its own port (`serve`).
"""

from __future__ import annotations

import threading
from collections.abc import Iterable
from wsgiref.simple_server import WSGIServer

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest, start_http_server
from prometheus_client.registry import Collector

PREFIX = "kafka_controller_KafkaController_"
"""The JMX domain and type, `kafka.controller:type=KafkaController`, in Prometheus form."""

SERVER_PREFIX = "kafka_controller_KafkaServer_"
"""`kafka.controller:type=KafkaServer`, the broker's MetadataLag in KIP-631, in Prometheus form."""

LATENCY_BUCKETS_MS = (1.0, 2.5, 5.0, 10.0, 25.0, 50.0, 100.0, 250.0, 500.0, 1_000.0, 2_500.0, 5_000.0,
                      10_000.0, 30_000.0, 60_000.0, float("inf"))  # fmt: skip
"""Snapshot write and load times run from a millisecond (a small state) to tens of seconds (millions of records)."""

COMMIT_BUCKETS_MS = (0.5, 1.0, 2.5, 5.0, 10.0, 25.0, 50.0, 100.0, 250.0, 500.0, 1_000.0, 2_500.0, 5_000.0,
                     10_000.0, 30_000.0, float("inf"))  # fmt: skip
"""A commit is an fsync and a round of fetches: a millisecond on loopback, up to the 30 s commit timeout."""


class NodeMetrics:
    """One node's metrics (see the module docstring): KIP-630's on every node, and KIP-631's
    MetadataLag under the names of the node's roles (`controller`, `broker`), MetadataSnapshotLag
    on every node and the active controller's MetadataCommitLatencyMs, MetadataCommitRate and
    ControllerRequestsRate on controllers. Without arguments: a controller's set."""

    def __init__(self, controller: bool = True, broker: bool = False) -> None:
        self.registry = registry = CollectorRegistry()
        self.gen_snapshot_latency_ms = Histogram(
            PREFIX + "GenSnapshotLatencyMs", "The time it took to generate a snapshot, in milliseconds.",
            registry=registry, buckets=LATENCY_BUCKETS_MS)  # fmt: skip
        self.load_snapshot_latency_ms = Histogram(
            PREFIX + "LoadSnapshotLatencyMs", "The time it took to load a snapshot, in milliseconds.",
            registry=registry, buckets=LATENCY_BUCKETS_MS)  # fmt: skip
        self.snapshot_size_bytes = Gauge(
            PREFIX + "SnapshotSizeBytes", "Size of the latest snapshot in bytes.", registry=registry)
        self.snapshot_lag = Gauge(
            PREFIX + "SnapshotLag", "The number of offsets between the largest snapshot offset and the high-watermark.",
            registry=registry)  # fmt: skip
        # KIP-631
        self.metadata_lag: list[Gauge] = []
        if controller:
            self.metadata_lag.append(Gauge(
                PREFIX + "MetadataLag", "The offset delta between the latest metadata record this controller has "
                "replayed and the last stable offset of the metadata topic.", registry=registry))  # fmt: skip
        if broker:
            self.metadata_lag.append(Gauge(
                SERVER_PREFIX + "MetadataLag", "The offset delta between the latest metadata record this broker has "
                "replayed and the last stable offset of the metadata topic.", registry=registry))  # fmt: skip
        self.last_applied_record_offset: Gauge | None = None
        self.last_committed_record_offset: Gauge | None = None
        if controller:  # KIP-835
            self.last_applied_record_offset = Gauge(
                PREFIX + "LastAppliedRecordOffset", "The offset of the last record from the cluster metadata "
                "partition that was applied by the controller.", registry=registry)  # fmt: skip
            self.last_committed_record_offset = Gauge(
                PREFIX + "LastCommittedRecordOffset", "The offset of the last record committed to the cluster "
                "metadata partition.", registry=registry)  # fmt: skip
            self.last_applied_record_offset.set(-1)
            self.last_committed_record_offset.set(-1)
        self.metadata_snapshot_lag = Gauge(
            PREFIX + "MetadataSnapshotLag", "The offset delta between the latest stable offset of the metadata topic "
            "and the offset of the last snapshot (or 0 if there are no snapshots).", registry=registry)  # fmt: skip
        self.metadata_commit_latency_ms: Histogram | None = None
        self.metadata_commit_rate: Counter | None = None
        self.controller_requests_rate: Counter | None = None
        if controller:
            self.metadata_commit_latency_ms = Histogram(
                PREFIX + "MetadataCommitLatencyMs", "The latency of committing a message to the metadata topic, in "
                "milliseconds (on the active controller).", registry=registry, buckets=COMMIT_BUCKETS_MS)  # fmt: skip
            self.metadata_commit_rate = Counter(
                PREFIX + "MetadataCommitRate", "Metadata records the active controller committed (the spec's rate is "
                "the rate of this counter).", registry=registry)  # fmt: skip
            self.controller_requests_rate = Counter(
                PREFIX + "ControllerRequestsRate", "Controller requests the active controller processed (the spec's "
                "rate is the rate of this counter).", registry=registry)  # fmt: skip
        self._server: WSGIServer | None = None
        self._thread: threading.Thread | None = None

    # -- KIP-630 ---------------------------------------------------------------------------------

    def observe_gen_latency(self, milliseconds: float) -> None:
        self.gen_snapshot_latency_ms.observe(milliseconds)

    def observe_load_latency(self, milliseconds: float) -> None:
        self.load_snapshot_latency_ms.observe(milliseconds)

    def set_snapshot_size(self, size_bytes: int) -> None:
        self.snapshot_size_bytes.set(size_bytes)

    def set_snapshot_lag(self, offsets: int) -> None:
        self.snapshot_lag.set(offsets)

    # -- KIP-631 ---------------------------------------------------------------------------------

    def set_metadata_lag(self, high_watermark: int, applied_offset: int) -> None:
        """MetadataLag: committed offsets not replayed yet (never below 0: a snapshot installed
        ahead of the high watermark this node knows has nothing left to replay); on a controller
        also KIP-835's LastAppliedRecordOffset and LastCommittedRecordOffset."""
        lag = max(high_watermark - applied_offset, 0)
        for gauge in self.metadata_lag:
            gauge.set(lag)
        if self.last_applied_record_offset is not None and self.last_committed_record_offset is not None:
            self.last_applied_record_offset.set(applied_offset - 1)
            self.last_committed_record_offset.set(high_watermark - 1)

    def set_metadata_snapshot_lag(self, high_watermark: int, snapshot_offset: int | None) -> None:
        """MetadataSnapshotLag: the high watermark less the latest snapshot's end offset, 0 for it
        without a snapshot (the spec's definition)."""
        self.metadata_snapshot_lag.set(max(high_watermark - (snapshot_offset or 0), 0))

    def observe_commit(self, records: int, milliseconds: float) -> None:
        """The active controller committed `records` records proposed `milliseconds` ago."""
        if self.metadata_commit_latency_ms is None or self.metadata_commit_rate is None:
            raise RuntimeError("commit metrics are a controller's; this node has no controller role")
        self.metadata_commit_latency_ms.observe(milliseconds)
        self.metadata_commit_rate.inc(records)

    def count_controller_request(self) -> None:
        """The active controller processed one controller request."""
        if self.controller_requests_rate is None:
            raise RuntimeError("ControllerRequestsRate is a controller's; this node has no controller role")
        self.controller_requests_rate.inc()

    def register(self, collectors: Iterable[Collector]) -> None:
        """Serve these metrics too (a plug-in's, e.g. the follower bootstrap's in `tiered_follower`)."""
        for collector in collectors:
            self.registry.register(collector)

    # -- serving ---------------------------------------------------------------------------------

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


"""The former name, from when the class held KIP-630's metrics only."""
