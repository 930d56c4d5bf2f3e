"""Kafka's remote storage metrics (KIP-405, KIP-963) and the S3 client's counters, for Prometheus.

Kafka's names (`RemoteStorageMetrics.java`) are `kafka.server:type=BrokerTopicMetrics,name=X`,
each once per topic (tag `topic`) and once for all topics; the node's exporter maps JMX names as
`quorum.image.metrics` says (`:`, `=`, `,` become `_`), the topic tag becoming a `topic` label and
the all-topics figure the series without it:

    kafka_server_BrokerTopicMetrics_RemoteCopyBytesPerSec_total{topic="t"}   (and without topic)

Kafka's meters (`...PerSec`) are counters here: `rate()` gives the per-second figure and nothing
is lost between scrapes. Counted where Kafka marks them: RemoteCopyBytesPerSec with the segment's
size once its COPY_SEGMENT_FINISHED is stored, RemoteCopyRequestsPerSec per copy started,
RemoteCopyErrorsPerSec per copy that failed; RemoteFetchBytesPerSec / RequestsPerSec / ErrorsPerSec
per consumer read from the tier; RemoteDeleteRequestsPerSec / ErrorsPerSec per segment deletion;
BuildRemoteLogAuxStateRequestsPerSec / ErrorsPerSec per follower bootstrap step.

Gauges, summed over the topic's partitions that this broker leads (as Kafka's leader task records
them): RemoteCopyLagBytes and RemoteCopyLagSegments (the rolled segments not uploaded yet, the
active one excluded: Kafka's `onlyLocalLogSegmentsSize - activeSegment.size`), RemoteLogSizeBytes
(the finished remote segments) and RemoteLogMetadataCount (remote segments not deleted). The remote
log task records them on the event loop; a scrape reads that record from the metrics thread.

The S3 client's own counters (`S3Client.stats`), under the project's names:
`tiered_storage_s3_requests_total{operation}`, `..._errors_total{operation}` (calls that failed for
good), `..._retries_total{code}` (transient faults retried), `..._bytes_sent_total`,
`..._bytes_received_total` (object bodies).
"""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Callable, Iterator, Mapping

from prometheus_client.metrics_core import Metric
from prometheus_client.registry import Collector

PREFIX = "kafka_server_BrokerTopicMetrics_"
METERS = {
    "RemoteCopyBytesPerSec": "Bytes of segments copied to remote storage (rate() for Kafka's meter).",
    "RemoteCopyRequestsPerSec": "Segment copies to remote storage started.",
    "RemoteCopyErrorsPerSec": "Segment copies to remote storage that failed.",
    "RemoteFetchBytesPerSec": "Bytes read from remote storage for consumers' fetches.",
    "RemoteFetchRequestsPerSec": "Consumer reads served from remote storage.",
    "RemoteFetchErrorsPerSec": "Consumer reads from remote storage that failed.",
    "RemoteDeleteRequestsPerSec": "Remote segment deletions started.",
    "RemoteDeleteErrorsPerSec": "Remote segment deletions that failed.",
    "BuildRemoteLogAuxStateRequestsPerSec": "Followers' requests to build their auxiliary state from remote storage.",
    "BuildRemoteLogAuxStateErrorsPerSec": "Followers' auxiliary state builds that failed.",
}
GAUGES = {
    "RemoteCopyLagBytes": "Bytes of rolled local segments not yet copied to remote storage (partitions led here).",
    "RemoteCopyLagSegments": "Rolled local segments not yet copied to remote storage (partitions led here).",
    "RemoteLogSizeBytes": "Bytes of the finished remote segments (partitions led here).",
    "RemoteLogMetadataCount": "Remote segments not deleted, in any state (partitions led here).",
}
S3_PREFIX = "tiered_storage_s3_"


class RemoteStorageMetrics(Collector):
    """The broker's remote storage figures; thread-safe (marked on the event loop and the pool,
    read by the metrics server's thread)."""

    def __init__(self, s3_stats: Callable[[], Mapping[str, int]] | None = None) -> None:
        self._lock = threading.Lock()
        self._meters: dict[str, Counter[str]] = {name: Counter() for name in METERS}
        self._gauges: dict[tuple[str, int], dict[str, int]] = {}
        self._s3_stats = s3_stats or dict

    def mark(self, name: str, topic: str, amount: int = 1) -> None:
        """Kafka's `topicStats(topic).<name>.mark(amount)` and `allTopicsStats()`'s (the total is the sum)."""
        with self._lock:
            self._meters[name][topic] += amount

    def meter(self, name: str, topic: str | None = None) -> int:
        """A meter's count for `topic`, or over all topics."""
        with self._lock:
            counts = self._meters[name]
            return counts[topic] if topic is not None else sum(counts.values())

    def record(self, topic: str, partition: int, **values: int) -> None:
        """A leader partition's gauges (`copy_lag_bytes`, `copy_lag_segments`, `log_size_bytes`,
        `metadata_count`), replacing what it recorded before."""
        with self._lock:
            self._gauges.setdefault((topic, partition), {}).update(values)

    def forget(self, topic: str, partition: int) -> None:
        """This broker no longer leads the partition (or it was deleted): its gauges go."""
        with self._lock:
            self._gauges.pop((topic, partition), None)

    def gauge(self, name: str, topic: str | None = None) -> int:
        key = _GAUGE_KEYS[name]
        with self._lock:
            return sum(v.get(key, 0) for (t, _), v in self._gauges.items() if topic is None or t == topic)

    def collect(self) -> Iterator[Metric]:
        with self._lock:
            meters = {name: dict(counts) for name, counts in self._meters.items()}
            gauges = {k: dict(v) for k, v in self._gauges.items()}
        # as Kafka's topicStats(topic): once a topic has one figure it has them all
        topics = sorted({t for counts in meters.values() for t in counts} | {t for t, _ in gauges})
        for name, counts in meters.items():
            metric = Metric(PREFIX + name, METERS[name], "counter")
            for topic in topics:
                metric.add_sample(PREFIX + name + "_total", {"topic": topic}, counts.get(topic, 0))
            metric.add_sample(PREFIX + name + "_total", {}, sum(counts.values()))
            yield metric
        for name, key in _GAUGE_KEYS.items():
            metric = Metric(PREFIX + name, GAUGES[name], "gauge")
            by_topic: Counter[str] = Counter()
            for (topic, _), values in gauges.items():
                by_topic[topic] += values.get(key, 0)
            for topic in topics:
                metric.add_sample(PREFIX + name, {"topic": topic}, by_topic[topic])
            metric.add_sample(PREFIX + name, {}, sum(by_topic.values()))
            yield metric
        yield from s3_metrics(self._s3_stats())


_GAUGE_KEYS = {"RemoteCopyLagBytes": "copy_lag_bytes", "RemoteCopyLagSegments": "copy_lag_segments",
               "RemoteLogSizeBytes": "log_size_bytes", "RemoteLogMetadataCount": "metadata_count"}  # fmt: skip


def s3_metrics(stats: Mapping[str, int]) -> Iterator[Metric]:
    """`S3Client.stats` as counters (see the module docstring)."""
    requests = Metric(S3_PREFIX + "requests", "S3 requests sent, by operation (retries included).", "counter")
    errors = Metric(S3_PREFIX + "errors", "S3 calls that failed for good, by operation.", "counter")
    retries = Metric(S3_PREFIX + "retries", "Transient S3 faults retried, by error code.", "counter")
    for key, value in sorted(stats.items()):
        kind, _, detail = key.partition(".")
        if kind == "retries" and detail:
            retries.add_sample(S3_PREFIX + "retries_total", {"code": detail}, value)
        elif kind == "errors" and detail:
            errors.add_sample(S3_PREFIX + "errors_total", {"operation": detail}, value)
        elif kind not in ("retries", "errors", "bytes_sent", "bytes_received"):
            requests.add_sample(S3_PREFIX + "requests_total", {"operation": key}, value)
    yield from (requests, errors, retries)
    for name, doc in (("bytes_sent", "Object bytes sent to S3 (PUT bodies and parts)."),
                      ("bytes_received", "Object bytes received from S3 (GET bodies).")):  # fmt: skip
        metric = Metric(S3_PREFIX + name, doc, "counter")
        metric.add_sample(S3_PREFIX + name + "_total", {}, stats.get(name, 0))
        yield metric
