"""NodeMetrics: KIP-630's and KIP-631's metrics under their Prometheus names, one registry per node, over HTTP."""

from __future__ import annotations

import urllib.request

import pytest
from prometheus_client.parser import text_string_to_metric_families

from quorum.image.metrics import NodeMetrics

GEN = "kafka_controller_KafkaController_GenSnapshotLatencyMs"
LOAD = "kafka_controller_KafkaController_LoadSnapshotLatencyMs"
SIZE = "kafka_controller_KafkaController_SnapshotSizeBytes"
LAG = "kafka_controller_KafkaController_SnapshotLag"
CONTROLLER_LAG = "kafka_controller_KafkaController_MetadataLag"
BROKER_LAG = "kafka_controller_KafkaServer_MetadataLag"
SNAPSHOT_LAG = "kafka_controller_KafkaController_MetadataSnapshotLag"
COMMIT_LATENCY = "kafka_controller_KafkaController_MetadataCommitLatencyMs"
COMMIT_RATE = "kafka_controller_KafkaController_MetadataCommitRate"
REQUESTS_RATE = "kafka_controller_KafkaController_ControllerRequestsRate"
APPLIED = "kafka_controller_KafkaController_LastAppliedRecordOffset"
COMMITTED = "kafka_controller_KafkaController_LastCommittedRecordOffset"


def samples(text: bytes) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    return {(sample.name, tuple(sorted(sample.labels.items()))): sample.value
            for family in text_string_to_metric_families(text.decode()) for sample in family.samples}


def test_the_four_metrics_of_kip_630() -> None:
    metrics = NodeMetrics()
    metrics.observe_gen_latency(3.0)
    metrics.observe_gen_latency(40_000.0)
    metrics.observe_load_latency(0.5)
    metrics.set_snapshot_size(4096)
    metrics.set_snapshot_lag(17)
    found = samples(metrics.render())
    assert found[(GEN + "_count", ())] == 2 and found[(GEN + "_sum", ())] == 40_003.0
    assert found[(GEN + "_bucket", (("le", "2.5"),))] == 0
    assert found[(GEN + "_bucket", (("le", "5.0"),))] == 1
    assert found[(GEN + "_bucket", (("le", "60000.0"),))] == 2
    assert found[(LOAD + "_bucket", (("le", "1.0"),))] == 1
    assert found[(SIZE, ())] == 4096
    assert found[(LAG, ())] == 17


def names(metrics: NodeMetrics) -> set[str]:
    return {name for name, _ in samples(metrics.render())}


def test_the_metrics_of_kip_631_on_a_controller() -> None:
    metrics = NodeMetrics(controller=True, broker=False)
    metrics.set_metadata_lag(high_watermark=120, applied_offset=100)
    metrics.set_metadata_snapshot_lag(high_watermark=120, snapshot_offset=90)
    metrics.observe_commit(3, 4.0)
    metrics.observe_commit(2, 0.2)
    metrics.count_controller_request()
    metrics.count_controller_request()
    found = samples(metrics.render())
    assert found[(CONTROLLER_LAG, ())] == 20
    assert found[(APPLIED, ())] == 99 and found[(COMMITTED, ())] == 119  # KIP-835: offsets of the last records
    assert (BROKER_LAG, ()) not in found
    assert found[(SNAPSHOT_LAG, ())] == 30
    assert found[(COMMIT_LATENCY + "_count", ())] == 2 and found[(COMMIT_LATENCY + "_sum", ())] == 4.2
    assert found[(COMMIT_LATENCY + "_bucket", (("le", "0.5"),))] == 1
    assert found[(COMMIT_LATENCY + "_bucket", (("le", "5.0"),))] == 2
    # Counters: the spec's per-second rates are the scraper's rate() of these.
    assert found[(COMMIT_RATE + "_total", ())] == 5
    assert found[(REQUESTS_RATE + "_total", ())] == 2


def test_a_broker_has_the_kafka_server_metadata_lag_and_no_controller_metrics() -> None:
    metrics = NodeMetrics(controller=False, broker=True)
    metrics.set_metadata_lag(high_watermark=7, applied_offset=7)
    found = samples(metrics.render())
    assert found[(BROKER_LAG, ())] == 0
    present = names(metrics)
    assert CONTROLLER_LAG not in present and SNAPSHOT_LAG in present and LAG in present
    assert APPLIED not in present and COMMITTED not in present
    assert not {COMMIT_LATENCY + "_count", COMMIT_RATE + "_total", REQUESTS_RATE + "_total"} & present
    with pytest.raises(RuntimeError):
        metrics.observe_commit(1, 1.0)
    with pytest.raises(RuntimeError):
        metrics.count_controller_request()


def test_a_node_with_both_roles_reports_both_metadata_lags() -> None:
    metrics = NodeMetrics(controller=True, broker=True)
    metrics.set_metadata_lag(high_watermark=10, applied_offset=4)
    found = samples(metrics.render())
    assert found[(CONTROLLER_LAG, ())] == 6 and found[(BROKER_LAG, ())] == 6


def test_lags_never_go_below_zero_and_no_snapshot_counts_as_offset_zero() -> None:
    metrics = NodeMetrics()
    metrics.set_metadata_lag(high_watermark=50, applied_offset=60)  # a snapshot installed ahead of the known HW
    metrics.set_metadata_snapshot_lag(high_watermark=50, snapshot_offset=None)
    found = samples(metrics.render())
    assert found[(CONTROLLER_LAG, ())] == 0
    assert found[(SNAPSHOT_LAG, ())] == 50  # the spec: "the offset of the last snapshot (or 0 ...)"


def test_each_node_has_its_own_registry() -> None:
    a, b = NodeMetrics(), NodeMetrics()  # no "Duplicated timeseries" from a shared registry
    a.set_snapshot_lag(5)
    b.set_snapshot_lag(9)
    assert samples(a.render())[(LAG, ())] == 5
    assert samples(b.render())[(LAG, ())] == 9


def test_served_over_http_on_a_free_port() -> None:
    metrics = NodeMetrics()
    metrics.set_snapshot_size(123)
    port = metrics.serve(0)
    try:
        assert port > 0 and metrics.port == port
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as response:
            body = response.read()
        assert samples(body)[(SIZE, ())] == 123
    finally:
        metrics.close()
    assert metrics.port is None
    metrics.close()
