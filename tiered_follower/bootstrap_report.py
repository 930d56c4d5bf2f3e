"""What each follower bootstrap reports, as it goes and when done (log lines and Prometheus metrics).

KIP-1023 leaves reporting open; a platform engineer replacing a broker wants to see, per
partition: the bytes fetched from the leader since the bootstrap began, the bytes it did NOT
fetch because they are in the remote tier (the remote segments below its start offset), the S3
requests its auxiliary state took, and the time until it saw itself in the partition's ISR.

* One INFO line when a bootstrap starts (path, start offset, bytes left in S3, S3 requests) and
  one when it is done (the follower is in the ISR of its metadata image), with every figure.
* Metrics in Kafka's style, labelled by topic and partition (the Prometheus JMX exporter's
  lower-case form of `kafka.server:type=TieredFollowerBootstrap,...`):

  ``kafka_server_tiered_follower_bootstraps_total{topic,partition,path}``  bootstraps begun
  ``kafka_server_tiered_follower_bootstrap_bytes_fetched_total``          bytes fetched from the leader
  ``kafka_server_tiered_follower_bootstrap_bytes_not_fetched_total``      bytes left in S3
  ``kafka_server_tiered_follower_bootstrap_s3_requests_total``            S3 GETs for the auxiliary state
  ``kafka_server_tiered_follower_bootstrap_in_progress``                  1 until the ISR is joined
  ``kafka_server_tiered_follower_bootstrap_time_to_isr_ms``               the last bootstrap's time to the ISR

"Bytes fetched" is what the follower's local log holds since its start offset (it started
empty there, so that is what came from the leader), counted as it grows; "time to the ISR" runs
from the first time the bootstrap's auxiliary state was asked for. The metrics are created
unregistered: the node registers them (`collectors`) with the registry its endpoint serves.
The clock is passed in, so this is testable without waiting.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from prometheus_client import Counter, Gauge
from prometheus_client.registry import Collector

from quorum.broker.replica_fetcher_events import TopicPartition

logger = logging.getLogger(__name__)

PREFIX = "kafka_server_tiered_follower_bootstrap"


@dataclass(slots=True)
class Bootstrap:
    """One partition's bootstrap, as reported."""

    topic_partition: TopicPartition
    path: str
    start_offset: int
    started_ms: float
    bytes_not_fetched: int
    s3_requests: int
    leader_log_end: int | None
    bytes_fetched: int = 0
    time_to_isr_ms: float | None = None

    @property
    def name(self) -> str:
        return f"{self.topic_partition[0]}-{self.topic_partition[1]}"

    @property
    def done(self) -> bool:
        return self.time_to_isr_ms is not None

    def summary(self) -> str:
        isr = "not yet in the ISR" if self.time_to_isr_ms is None else f"in the ISR after {self.time_to_isr_ms:.0f} ms"
        return (f"{self.name}: bootstrap from offset {self.start_offset} ({self.path}): {self.bytes_fetched} bytes "
                f"fetched from the leader, {self.bytes_not_fetched} bytes not fetched (in S3), {self.s3_requests} "
                f"S3 requests, {isr}")


class BootstrapMetrics:
    """The Prometheus side (see the module docstring)."""

    def __init__(self) -> None:
        labels = ("topic", "partition")
        self.started = Counter(PREFIX.replace("bootstrap", "bootstraps"), "Follower bootstraps begun from the "
                               "remote tier, by path (tiered-offset: KIP-1023, local-log-start: KIP-405).",
                               (*labels, "path"), registry=None)  # fmt: skip
        self.bytes_fetched = Counter(f"{PREFIX}_bytes_fetched", "Bytes a bootstrapping follower fetched from the "
                                     "leader since its start offset.", labels, registry=None)  # fmt: skip
        self.bytes_not_fetched = Counter(f"{PREFIX}_bytes_not_fetched", "Bytes below a bootstrapping follower's "
                                         "start offset that it did not fetch because they are in the remote tier.",
                                         labels, registry=None)  # fmt: skip
        self.s3_requests = Counter(f"{PREFIX}_s3_requests", "S3 requests a follower's bootstrap made for its "
                                   "auxiliary state (leader epochs and producer snapshot).", labels,
                                   registry=None)  # fmt: skip
        self.in_progress = Gauge(f"{PREFIX}_in_progress", "1 while the follower's bootstrap has not joined the "
                                 "ISR.", labels, registry=None)  # fmt: skip
        self.time_to_isr_ms = Gauge(f"{PREFIX}_time_to_isr_ms", "Milliseconds from the follower's last bootstrap "
                                    "to its seeing itself in the partition's ISR.", labels, registry=None)  # fmt: skip

    @property
    def collectors(self) -> tuple[Collector, ...]:
        return (self.started, self.bytes_fetched, self.bytes_not_fetched, self.s3_requests, self.in_progress,
                self.time_to_isr_ms)


class BootstrapReports:
    """The bootstraps of one broker: `began` when the auxiliary state is read, `progress` as the
    follower's log grows and its ISR changes; logs and metrics as the module docstring says."""

    def __init__(self, broker_id: int, metrics: BootstrapMetrics | None = None) -> None:
        self.broker_id = broker_id
        self.metrics = metrics or BootstrapMetrics()
        self._active: dict[TopicPartition, Bootstrap] = {}
        self._first_asked: dict[TopicPartition, float] = {}
        self._pending_requests: dict[TopicPartition, int] = {}
        self._waiting: dict[TopicPartition, str] = {}
        self.finished: dict[TopicPartition, Bootstrap] = {}
        """The last completed bootstrap of each partition (tests, the demo)."""

    @property
    def active(self) -> tuple[Bootstrap, ...]:
        return tuple(self._active.values())

    def asked(self, tp: TopicPartition, description: str, now_ms: float) -> None:
        """The auxiliary state of `tp` is about to be read; a retry keeps the first time."""
        if tp not in self._first_asked:
            self._first_asked[tp] = now_ms
            logger.info("%s: follower bootstrap begins: %s", f"{tp[0]}-{tp[1]}", description)

    def waits(self, tp: TopicPartition, reason: str) -> None:
        """The bootstrap of `tp` is retried later; the reason is logged when it changes."""
        if self._waiting.get(tp) != reason:
            self._waiting[tp] = reason
            logger.info("follower bootstrap waits (retried after replica.fetch.backoff.ms): %s", reason)

    def retried(self, tp: TopicPartition, s3_requests: int) -> None:
        """An attempt that made `s3_requests` ended in Retry: they count into the bootstrap that follows."""
        self._pending_requests[tp] = self._pending_requests.get(tp, 0) + s3_requests
        if s3_requests:
            self.metrics.s3_requests.labels(tp[0], str(tp[1])).inc(s3_requests)

    def began(self, tp: TopicPartition, path: str, start_offset: int, now_ms: float, bytes_not_fetched: int,
              s3_requests: int, leader_log_end: int | None) -> Bootstrap:
        """The follower starts at `start_offset` with its auxiliary state read with `s3_requests`."""
        started_ms = self._first_asked.pop(tp, now_ms)
        self._waiting.pop(tp, None)
        requests = s3_requests + self._pending_requests.pop(tp, 0)
        bootstrap = Bootstrap(tp, path, start_offset, started_ms, bytes_not_fetched, requests, leader_log_end)
        self._active[tp] = bootstrap
        topic, partition = tp[0], str(tp[1])
        self.metrics.started.labels(topic, partition, path).inc()
        self.metrics.bytes_not_fetched.labels(topic, partition).inc(bytes_not_fetched)
        self.metrics.s3_requests.labels(topic, partition).inc(s3_requests)
        self.metrics.in_progress.labels(topic, partition).set(1)
        where = (f"the leader's log end was {leader_log_end}" if leader_log_end is not None
                 else "fetching up to the leader's log end")  # fmt: skip
        logger.info("%s: follower bootstrap (%s) starts at offset %d; %d bytes below it stay in S3 and are not "
                    "fetched; auxiliary state read with %d S3 request(s); %s", bootstrap.name, path, start_offset,
                    bytes_not_fetched, requests, where)  # fmt: skip
        return bootstrap

    def progress(self, tp: TopicPartition, local_bytes: int, log_end: int, in_isr: bool,
                 now_ms: float) -> Bootstrap | None:
        """The follower's local log holds `local_bytes` and ends at `log_end`; `in_isr` when its
        metadata image lists it in the ISR. Returns the bootstrap when this completes it."""
        bootstrap = self._active.get(tp)
        if bootstrap is None:
            return None
        grown = max(local_bytes - bootstrap.bytes_fetched, 0)
        if grown:
            bootstrap.bytes_fetched += grown
            self.metrics.bytes_fetched.labels(tp[0], str(tp[1])).inc(grown)
        caught_up = log_end >= (bootstrap.leader_log_end if bootstrap.leader_log_end is not None
                                else bootstrap.start_offset)  # fmt: skip
        if not (in_isr and caught_up):
            return None
        bootstrap.time_to_isr_ms = max(now_ms - bootstrap.started_ms, 0.0)
        del self._active[tp]
        self.finished[tp] = bootstrap
        self.metrics.in_progress.labels(tp[0], str(tp[1])).set(0)
        self.metrics.time_to_isr_ms.labels(tp[0], str(tp[1])).set(bootstrap.time_to_isr_ms)
        logger.info("%s", bootstrap.summary())
        return bootstrap

    def forget(self, tp: TopicPartition) -> None:
        """The partition is no longer hosted here: its bootstrap ends unreported."""
        self._first_asked.pop(tp, None)
        self._pending_requests.pop(tp, None)
        self._waiting.pop(tp, None)
        if self._active.pop(tp, None) is not None:
            self.metrics.in_progress.labels(tp[0], str(tp[1])).set(0)
