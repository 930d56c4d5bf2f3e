"""A node's Prometheus histograms, read from its metrics endpoint, and the difference of two reads.

Benchmarks start their nodes with `quorum.metrics.port=0`; each node prints the port it serves on
in its log ("metrics on http://127.0.0.1:PORT/metrics"), a restarted node on a new port, so the
last one printed is read.
"""

from __future__ import annotations

import math
import re
import urllib.request
from dataclasses import dataclass
from pathlib import Path

from prometheus_client.parser import text_string_to_metric_families

_ENDPOINT = re.compile(r"metrics on http://127\.0\.0\.1:(\d+)/metrics")


@dataclass(frozen=True)
class Histogram:
    """One series: cumulative counts per upper bound (ms, +Inf last) and the sum of the values."""

    buckets: tuple[tuple[float, float], ...]
    total: float

    @property
    def count(self) -> float:
        return self.buckets[-1][1] if self.buckets else 0.0

    def minus(self, earlier: Histogram | None) -> Histogram:
        if earlier is None:
            return self
        before = dict(earlier.buckets)
        return Histogram(tuple((bound, count - before.get(bound, 0.0)) for bound, count in self.buckets),
                         self.total - earlier.total)

    def plus(self, other: Histogram) -> Histogram:
        """The two series' values together (the same bounds: histograms of one kind)."""
        theirs = dict(other.buckets)
        return Histogram(tuple((bound, count + theirs.get(bound, 0.0)) for bound, count in self.buckets),
                         self.total + other.total)

    def mean(self) -> float | None:
        return self.total / self.count if self.count else None

    def quantile(self, q: float) -> float | None:
        """The upper bound of the bucket holding the q-quantile (None without values; the largest
        finite bound when it falls in +Inf)."""
        if not self.count:
            return None
        wanted = q * self.count
        finite = [bound for bound, _ in self.buckets if not math.isinf(bound)]
        for bound, cumulative in self.buckets:
            if cumulative >= wanted:
                return bound if not math.isinf(bound) else finite[-1]
        return finite[-1]


def metrics_url(log_path: Path) -> str:
    ports = _ENDPOINT.findall(log_path.read_text(errors="replace"))
    if not ports:
        raise SystemExit(f"{log_path} names no metrics endpoint: is quorum.metrics.port set?")
    return f"http://127.0.0.1:{ports[-1]}/metrics"


def gauge(url: str, name: str) -> float | None:
    """The value of the unlabelled gauge `name` the endpoint serves; None when it serves none."""
    with urllib.request.urlopen(url, timeout=10) as answer:
        text = answer.read().decode()
    for family in text_string_to_metric_families(text):
        if family.name == name and family.type == "gauge":
            return next((sample.value for sample in family.samples if not sample.labels), None)
    return None


def histograms(url: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], Histogram]:
    """Every histogram series the endpoint serves, keyed by (name, labels without `le`)."""
    with urllib.request.urlopen(url, timeout=10) as answer:
        text = answer.read().decode()
    found: dict[tuple[str, tuple[tuple[str, str], ...]], Histogram] = {}
    for family in text_string_to_metric_families(text):
        if family.type != "histogram":
            continue
        buckets: dict[tuple[tuple[str, str], ...], list[tuple[float, float]]] = {}
        sums: dict[tuple[tuple[str, str], ...], float] = {}
        for sample in family.samples:
            labels = tuple(sorted((k, v) for k, v in sample.labels.items() if k != "le"))
            if sample.name.endswith("_bucket"):
                buckets.setdefault(labels, []).append((float(sample.labels["le"]), sample.value))
            elif sample.name.endswith("_sum"):
                sums[labels] = sample.value
        for labels, series in buckets.items():
            found[(family.name, labels)] = Histogram(tuple(sorted(series)), sums.get(labels, 0.0))
    return found
