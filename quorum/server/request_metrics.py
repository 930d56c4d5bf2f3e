"""Kafka's request metrics (`kafka.network:type=RequestMetrics`), on the node's Prometheus endpoint.

Kafka's MBeans `kafka.network:type=RequestMetrics,name=<Name>,request=<Request>` become, as
`quorum.image.metrics` maps JMX names, `kafka_network_RequestMetrics_<Name>{request="<Request>"}`:

    RequestQueueTimeMs   frame read -> the handler began
    LocalTimeMs          the handler's own work (a Produce's append, a Fetch's first read)
    RemoteTimeMs         waiting on others: followers for acks=all, data for a long-polling Fetch
    ResponseQueueTimeMs  the answer ready -> its turn to be written (pipelined answers leave in order)
    ResponseSendTimeMs   writing the answer until the transport has taken it
    TotalTimeMs          frame read -> answer taken
    RequestsPerSec       a counter (`_total`) per request and version, as Kafka's meter is tagged

`<Request>` is the API's name (`Produce`, `Metadata`, ...); a Fetch is counted twice, as `Fetch`
and as `FetchFollower` (a replica's) or `FetchConsumer`, as Kafka's `RequestChannel` does. The
times come from `quorum.net.request_times`; what each phase covers here is Kafka's, with
asyncio's scheduling in place of Kafka's queues and threads. Requests the listener answers itself
(SASL) are not counted.
"""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Iterator

from prometheus_client.core import CounterMetricFamily
from prometheus_client.metrics_core import Metric
from prometheus_client.registry import Collector

from quorum.broker.fetch import FETCH_KEY, replica_id
from quorum.net.latency import LatencyHistograms
from quorum.net.request_times import RequestTimes
from quorum.wire.protocol import Request

PREFIX = "kafka_network_RequestMetrics_"
TIMES = {
    "RequestQueueTimeMs": "Milliseconds from the request read to its handler starting.",
    "LocalTimeMs": "Milliseconds of the handler's own work.",
    "RemoteTimeMs": "Milliseconds the handler waited on other brokers or for data.",
    "ResponseQueueTimeMs": "Milliseconds from the answer ready to its turn to be written.",
    "ResponseSendTimeMs": "Milliseconds writing the answer.",
    "TotalTimeMs": "Milliseconds from the request read to its answer written.",
}


def request_names(request: Request) -> tuple[str, ...]:
    """The `request` label(s) a request is counted under."""
    name = request.api.name
    if request.api.key != FETCH_KEY or request.body is None:
        return (name,)
    return (name, "FetchFollower" if replica_id(request.body, request.version) >= 0 else "FetchConsumer")


class RequestMetrics(Collector):
    """The listeners record every dispatched request here; the metrics thread collects."""

    def __init__(self) -> None:
        self.times = LatencyHistograms(("request",), TIMES)
        self._lock = threading.Lock()
        self._requests: Counter[tuple[str, int]] = Counter()

    def record(self, request: Request, times: RequestTimes) -> None:
        local_done = times.local_done or times.answered
        phases = (
            ("RequestQueueTimeMs", times.started - times.received),
            ("LocalTimeMs", local_done - times.started),
            ("RemoteTimeMs", times.answered - local_done),
            ("ResponseQueueTimeMs", times.send_started - times.answered),
            ("ResponseSendTimeMs", times.sent - times.send_started),
            ("TotalTimeMs", times.sent - times.received),
        )
        version = request.version
        for name in request_names(request):
            labels = (name,)
            for phase, seconds in phases:
                self.times.observe(phase, labels, max(seconds, 0.0) * 1000)
            with self._lock:
                self._requests[(name, version)] += 1

    def collect(self) -> Iterator[Metric]:
        yield from self.times.families(PREFIX)
        with self._lock:
            requests = dict(self._requests)
        counter = CounterMetricFamily(PREFIX + "RequestsPerSec", "Requests answered (rate() for Kafka's meter).",
                                      labels=["request", "version"])
        for (name, version), count in sorted(requests.items()):
            counter.add_metric([name, str(version)], count)
        yield counter
