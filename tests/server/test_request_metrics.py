"""Kafka's request metrics (`kafka_network_RequestMetrics_*`) as a listener records them, and the
histograms behind them and behind the acks=all breakdown (`quorum_replication_*`)."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from quorum.broker.ack_timings import ReplicationTimings
from quorum.net.dispatch import Dispatcher, Reply
from quorum.net.latency import BUCKETS_MS, LatencyHistograms
from quorum.net.peer_client import PeerClient
from quorum.net.request_times import RequestTimes, mark_local_complete
from quorum.server.listener import KafkaListener
from quorum.server.request_metrics import RequestMetrics, request_names
from quorum.wire.protocol import APIS, Request, RequestHeader
from tests.controller.fakes import create_topics_request
from tests.server.test_listener_pipelining import CREATE_TOPICS, DESCRIBE_CONFIGS, created, describe_request

FETCH = APIS[1]
WAIT_S = 30
REMOTE_S = 0.05


def scraped(*collectors: Any) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """Every sample the collectors expose, as Prometheus reads it: (sample name, labels) -> value."""
    registry = CollectorRegistry()
    for collector in collectors:
        registry.register(collector)
    samples = {}
    for family in text_string_to_metric_families(generate_latest(registry).decode()):
        for sample in family.samples:
            samples[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    return samples


def test_a_value_lands_in_the_first_bucket_at_or_above_it_and_past_the_last_in_inf() -> None:
    histograms = LatencyHistograms(("request",), {})
    for value in (BUCKETS_MS[0], BUCKETS_MS[0] * 1.01, BUCKETS_MS[-1] * 2):
        histograms.observe("TotalTimeMs", ("Produce",), value)
    assert histograms.count_and_sum("TotalTimeMs", ("Produce",)) == (3, pytest.approx(BUCKETS_MS[0] * 2.01
                                                                                      + BUCKETS_MS[-1] * 2))
    assert histograms.count_and_sum("TotalTimeMs", ("Fetch",)) == (0, 0.0)
    families = {f.name: f for f in histograms.families("p_")}
    cumulative = {s.labels["le"]: s.value for s in families["p_TotalTimeMs"].samples if s.name.endswith("_bucket")}
    assert cumulative[repr(BUCKETS_MS[0])] == 1
    assert cumulative[repr(BUCKETS_MS[1])] == 2
    assert cumulative[repr(BUCKETS_MS[-1])] == 2
    assert cumulative["+Inf"] == 3


def fetch_request(replica_id: int) -> Request:
    body = FETCH.request(replica_id=replica_id, max_wait_ms=0, min_bytes=1, max_bytes=1, isolation_level=0,
                         session_id=0, session_epoch=-1, topics=[], forgotten_topics_data=[], rack_id="")
    return Request(RequestHeader(FETCH.key, 12, 1, "t"), FETCH, body)


def test_a_fetch_counts_as_fetch_and_as_follower_or_consumer_as_kafka_names_them() -> None:
    assert request_names(fetch_request(102)) == ("Fetch", "FetchFollower")
    assert request_names(fetch_request(-1)) == ("Fetch", "FetchConsumer")
    metrics = RequestMetrics()
    times = RequestTimes(received=1.0, started=1.001, answered=1.004, send_started=1.0045, sent=1.005)
    metrics.record(fetch_request(102), times)
    samples = scraped(metrics)
    for name in ("Fetch", "FetchFollower"):
        assert samples[("kafka_network_RequestMetrics_TotalTimeMs_count", (("request", name),))] == 1
        assert samples[("kafka_network_RequestMetrics_TotalTimeMs_sum", (("request", name),))] == pytest.approx(5)
        # never marked: the handler's whole time is local, as Kafka's when nothing parked the request
        assert samples[("kafka_network_RequestMetrics_LocalTimeMs_sum", (("request", name),))] == pytest.approx(3)
        assert samples[("kafka_network_RequestMetrics_RemoteTimeMs_sum", (("request", name),))] == 0
        requests = ("kafka_network_RequestMetrics_RequestsPerSec_total", (("request", name), ("version", "12")))
        assert samples[requests] == 1
    assert ("kafka_network_RequestMetrics_TotalTimeMs_count", (("request", "FetchConsumer"),)) not in samples


def test_the_listener_times_each_phase_and_the_handler_marks_where_its_wait_begins() -> None:
    """A pipelined handler that marks its own work done, then waits REMOTE_S (a Produce's acks=all
    wait): LocalTimeMs excludes the wait, RemoteTimeMs holds it, and the phases add up to TotalTimeMs;
    a plain handler's time is all local."""
    async def scenario() -> RequestMetrics:
        async def create(request: Request) -> Reply:
            mark_local_complete()
            await asyncio.sleep(REMOTE_S)
            return Reply(created(request.body.topics[0].name), request.version)

        async def describe(request: Request) -> Reply:
            return Reply(DESCRIBE_CONFIGS.response(throttle_time_ms=0, results=[]), request.version)

        dispatcher = Dispatcher()
        dispatcher.register(CREATE_TOPICS.key, create, pipelined=True)
        dispatcher.register(DESCRIBE_CONFIGS.key, describe)
        metrics = RequestMetrics()
        listener = KafkaListener(dispatcher, metrics=metrics)
        await listener.start()
        client = PeerClient("127.0.0.1", listener.port, "test", WAIT_S * 1000)
        try:
            await asyncio.gather(*(client.request(CREATE_TOPICS, 5, create_topics_request((name, 1, 1)))
                                   for name in "ab"))
            await client.request(DESCRIBE_CONFIGS, 4, describe_request())
        finally:
            await client.close()
            await listener.close()
        return metrics

    samples = scraped(asyncio.run(scenario()))

    def total(phase: str, request: str) -> float:
        return samples[(f"kafka_network_RequestMetrics_{phase}_sum", (("request", request),))]

    assert samples[("kafka_network_RequestMetrics_TotalTimeMs_count", (("request", "CreateTopics"),))] == 2
    assert total("RemoteTimeMs", "CreateTopics") >= 2 * REMOTE_S * 1000 * 0.9
    assert total("LocalTimeMs", "CreateTopics") < REMOTE_S * 1000
    phases = ("RequestQueueTimeMs", "LocalTimeMs", "RemoteTimeMs", "ResponseQueueTimeMs", "ResponseSendTimeMs")
    for request in ("CreateTopics", "DescribeConfigs"):
        assert sum(total(phase, request) for phase in phases) == pytest.approx(total("TotalTimeMs", request))
    assert total("RemoteTimeMs", "DescribeConfigs") == 0


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_an_acks_all_wait_is_split_at_the_answer_carrying_the_data_and_the_fetch_acknowledging_it() -> None:
    async def scenario() -> ReplicationTimings:
        clock = Clock()
        timings = ReplicationTimings(clock)
        partition = object()
        waited: asyncio.Future[int] = asyncio.get_running_loop().create_future()
        timings.wait_started(waited)  # at 100.000: the leader's append done
        clock.now = 100.004
        timings.follower_answered(partition, 102)  # the answer carrying it, 4 ms later
        clock.now = 100.010
        timings.wait_ended(waited, partition, (102, 100.009))  # 102's next fetch came at 100.009
        clock.now = 100.012
        waited.set_result(0)
        await asyncio.sleep(0)  # the done callback: the produce resumes
        unsplit: asyncio.Future[int] = asyncio.get_running_loop().create_future()
        timings.wait_started(unsplit)
        timings.wait_ended(unsplit, partition, None)  # a timeout or an ISR shrink: not split
        timings.follower_appended(0.0015)
        timings.follower_turned_around(0.002)
        return timings

    timings = asyncio.run(scenario())
    parts = {name: timings.histograms.count_and_sum(name, ()) for name in
             ("FollowerFetchWaitMs", "FollowerRoundMs", "HighWatermarkAdvanceMs", "FollowerAppendMs",
              "FollowerTurnaroundMs")}
    assert parts["FollowerFetchWaitMs"] == (1, pytest.approx(4))
    assert parts["FollowerRoundMs"] == (1, pytest.approx(5))
    assert parts["HighWatermarkAdvanceMs"] == (1, pytest.approx(3))
    assert parts["FollowerAppendMs"] == (1, pytest.approx(1.5))
    assert parts["FollowerTurnaroundMs"] == (1, pytest.approx(2))
    assert ("quorum_replication_FollowerRoundMs_count", ()) in scraped(timings)
