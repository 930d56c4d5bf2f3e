"""Millisecond histograms cheap enough to observe on every request, exposed to Prometheus.

Why not prometheus_client's `Histogram`: its `observe` takes a lock per value and walks the buckets
(~1.5 us); a broker times several phases of every request it answers (`quorum.server.request_metrics`)
and a leader every acks=all wait (`quorum.broker.ack_timings`), thousands a second on the event
loop. Here an observation is a bisect and three additions under one uncontended lock, and the
scrape (the metrics thread) renders the counts as Prometheus histograms.
"""

from __future__ import annotations

import threading
from bisect import bisect_left
from collections.abc import Iterator

from prometheus_client.core import HistogramMetricFamily

BUCKETS_MS = (0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 25.0, 50.0, 100.0, 250.0, 500.0, 1_000.0, 2_500.0, 5_000.0,
              10_000.0, 30_000.0)
"""Upper bounds (ms): sub-millisecond steps, as loopback requests take tens of microseconds."""


class LatencyHistograms:
    """Histograms keyed by (metric name, label values), all in milliseconds with BUCKETS_MS."""

    def __init__(self, label_names: tuple[str, ...], documentation: dict[str, str]) -> None:
        self.label_names = label_names
        self.documentation = documentation
        self._lock = threading.Lock()
        self._series: dict[tuple[str, tuple[str, ...]], list[float]] = {}
        """(name, labels) -> counts per bucket (the last is +Inf), then the sum"""

    def observe(self, name: str, labels: tuple[str, ...], milliseconds: float) -> None:
        index = bisect_left(BUCKETS_MS, milliseconds)
        key = (name, labels)
        with self._lock:
            series = self._series.get(key)
            if series is None:
                series = self._series[key] = [0.0] * (len(BUCKETS_MS) + 2)
            series[index] += 1
            series[-1] += milliseconds

    def count_and_sum(self, name: str, labels: tuple[str, ...]) -> tuple[int, float]:
        """How many values `name` with `labels` has had, and their sum (ms): (0, 0.0) for none."""
        with self._lock:
            series = self._series.get((name, labels))
            return (0, 0.0) if series is None else (int(sum(series[:-1])), series[-1])

    def families(self, prefix: str) -> Iterator[HistogramMetricFamily]:
        """One Prometheus histogram family per name observed so far, each series cumulative."""
        with self._lock:
            copied = {key: list(series) for key, series in self._series.items()}
        by_name: dict[str, list[tuple[tuple[str, ...], list[float]]]] = {}
        for (name, labels), series in sorted(copied.items()):
            by_name.setdefault(name, []).append((labels, series))
        bounds = [*(repr(bound) for bound in BUCKETS_MS), "+Inf"]
        for name, entries in by_name.items():
            family = HistogramMetricFamily(prefix + name, self.documentation.get(name, name),
                                           labels=list(self.label_names))
            for labels, series in entries:
                cumulative, buckets = 0.0, []
                for bound, count in zip(bounds, series[:-1], strict=True):
                    cumulative += count
                    buckets.append((bound, cumulative))
                family.add_metric(list(labels), buckets, series[-1])
            yield family
