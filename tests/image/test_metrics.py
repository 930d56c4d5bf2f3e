"""SnapshotMetrics: KIP-630's metrics under their Prometheus names, one registry per node, served over HTTP."""

from __future__ import annotations

import urllib.request

from prometheus_client.parser import text_string_to_metric_families

from quorum.image.metrics import SnapshotMetrics

GEN = "kafka_controller_KafkaController_GenSnapshotLatencyMs"
LOAD = "kafka_controller_KafkaController_LoadSnapshotLatencyMs"
SIZE = "kafka_controller_KafkaController_SnapshotSizeBytes"
LAG = "kafka_controller_KafkaController_SnapshotLag"


def samples(text: bytes) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    return {(sample.name, tuple(sorted(sample.labels.items()))): sample.value
            for family in text_string_to_metric_families(text.decode()) for sample in family.samples}


def test_the_four_metrics_of_kip_630() -> None:
    metrics = SnapshotMetrics()
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


def test_each_node_has_its_own_registry() -> None:
    a, b = SnapshotMetrics(), SnapshotMetrics()  # no "Duplicated timeseries" from a shared registry
    a.set_snapshot_lag(5)
    b.set_snapshot_lag(9)
    assert samples(a.render())[(LAG, ())] == 5
    assert samples(b.render())[(LAG, ())] == 9


def test_served_over_http_on_a_free_port() -> None:
    metrics = SnapshotMetrics()
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
