"""Kafka's remote storage metrics in Prometheus form (`remote_metrics`), fed by hand."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, generate_latest

from tiered_follower.remote_metrics import PREFIX, RemoteStorageMetrics


def exposition(metrics: RemoteStorageMetrics) -> dict[str, float]:
    registry = CollectorRegistry()
    registry.register(metrics)
    found = {}
    for line in generate_latest(registry).decode().splitlines():
        if line and not line.startswith("#"):
            name, _, value = line.rpartition(" ")
            found[name] = float(value)
    return found


def test_meters_and_gauges_per_topic_and_for_all_topics() -> None:
    stats = {"put_object": 7, "get_object": 3, "retries": 2, "retries.SlowDown": 2, "errors": 1,
             "errors.put_object": 1, "bytes_sent": 1000, "bytes_received": 300}  # fmt: skip
    metrics = RemoteStorageMetrics(lambda: stats)
    metrics.mark("RemoteCopyBytesPerSec", "a", 100)
    metrics.mark("RemoteCopyBytesPerSec", "b", 50)
    metrics.mark("RemoteFetchErrorsPerSec", "b")
    metrics.record("a", 0, copy_lag_bytes=10, copy_lag_segments=1, log_size_bytes=100, metadata_count=2)
    metrics.record("a", 1, copy_lag_bytes=5, copy_lag_segments=1, log_size_bytes=0, metadata_count=0)
    metrics.record("c", 0, copy_lag_bytes=7, copy_lag_segments=2, log_size_bytes=0, metadata_count=0)
    found = exposition(metrics)
    assert found[PREFIX + 'RemoteCopyBytesPerSec_total{topic="a"}'] == 100
    assert found[PREFIX + "RemoteCopyBytesPerSec_total"] == 150
    assert found[PREFIX + 'RemoteCopyBytesPerSec_total{topic="c"}'] == 0  # a topic has every figure
    assert found[PREFIX + 'RemoteFetchErrorsPerSec_total{topic="b"}'] == 1
    assert found[PREFIX + 'RemoteCopyLagBytes{topic="a"}'] == 15  # the topic's partitions summed
    assert found[PREFIX + "RemoteCopyLagBytes"] == 22
    assert found[PREFIX + "RemoteCopyLagSegments"] == 4
    assert found[PREFIX + 'RemoteLogMetadataCount{topic="a"}'] == 2
    metrics.forget("a", 0)  # no longer led here
    assert exposition(metrics)[PREFIX + 'RemoteCopyLagBytes{topic="a"}'] == 5
    assert metrics.gauge("RemoteCopyLagBytes") == 12 and metrics.meter("RemoteCopyBytesPerSec", "b") == 50
    assert found['tiered_storage_s3_requests_total{operation="put_object"}'] == 7
    assert found['tiered_storage_s3_retries_total{code="SlowDown"}'] == 2
    assert found['tiered_storage_s3_errors_total{operation="put_object"}'] == 1
    assert found["tiered_storage_s3_bytes_sent_total"] == 1000
    assert found["tiered_storage_s3_bytes_received_total"] == 300
    assert not any('operation="retries"' in k or 'operation="bytes_sent"' in k for k in found)
