"""The log cleaner's metrics, under Kafka's names (`quorum.image.metrics` says how JMX names map):

    kafka.log:type=LogCleaner,name=max-clean-time-secs
        -> kafka_log_LogCleaner_max_clean_time_secs          (gauge: the longest pass of the last round)
    kafka.log:type=LogCleaner,name=cleaner-recopy-percent
        -> kafka_log_LogCleaner_cleaner_recopy_percent       (gauge: bytes written / bytes of the
                                                              segments rewritten, last round)
    kafka.log:type=LogCleanerManager,name=time-since-last-run-ms
        -> kafka_log_LogCleanerManager_time_since_last_run_ms (gauge)
    kafka.log:type=LogCleanerManager,name=uncleanable-partitions-count
        -> kafka_log_LogCleanerManager_uncleanable_partitions_count (gauge: whose last pass failed)

Kafka computes them per cleaner thread and round the same way; there is one thread here. The
collectors are unregistered: the node serves them with its own (`NodeMetrics.register`).
"""

from __future__ import annotations

import time
from collections.abc import Sequence

from prometheus_client import Gauge
from prometheus_client.registry import Collector

from quorum.log.cleaner import CleanResult


class CleanerMetrics:
    """What one round of the broker's cleaner (`ReplicaManager.clean_logs`) reports."""

    def __init__(self) -> None:
        self._last_run = time.monotonic()
        self.max_clean_time = Gauge("kafka_log_LogCleaner_max_clean_time_secs",
                                    "The longest pass of the cleaner's last round, in seconds.", registry=None)
        self.recopy_percent = Gauge("kafka_log_LogCleaner_cleaner_recopy_percent",
                                    "Bytes the last round wrote as a percentage of the segments it rewrote.",
                                    registry=None)
        self.since_last_run = Gauge("kafka_log_LogCleanerManager_time_since_last_run_ms",
                                    "Milliseconds since the cleaner's last round ended.", registry=None)
        self.since_last_run.set_function(lambda: (time.monotonic() - self._last_run) * 1000)
        self.uncleanable = Gauge("kafka_log_LogCleanerManager_uncleanable_partitions_count",
                                 "Compacted partitions whose last cleaning failed.", registry=None)  # fmt: skip

    def round_done(self, results: Sequence[CleanResult], failed: int) -> None:
        """A round over every compacted partition ended: `results` of the passes that ran."""
        ran = [r for r in results if r.skipped is None]
        if ran:
            self.max_clean_time.set(max(r.seconds for r in ran))
            before = sum(r.bytes_before for r in ran)
            self.recopy_percent.set(100 * sum(r.bytes_after for r in ran) / before if before else 0)
        self.uncleanable.set(failed)
        self._last_run = time.monotonic()

    @property
    def collectors(self) -> tuple[Collector, ...]:
        return self.max_clean_time, self.recopy_percent, self.since_last_run, self.uncleanable
