"""KIP-631's metrics on real processes: one controller and one broker, scraped over HTTP.

The controller reports MetadataLag under `KafkaController`, the broker under `KafkaServer`; both
report MetadataSnapshotLag (the high watermark less the latest snapshot's offset, the whole log
before any snapshot). The active controller counts its requests (registration, heartbeats,
CreateTopics forwarded by the broker) and the records it commits, and times each commit. A topic
created through the broker with confluent-kafka moves the counters and the snapshot lag; a
bigger one makes both nodes snapshot, and the snapshot lag drops to what came after it.
"""

from __future__ import annotations

import pytest
from confluent_kafka.admin import AdminClient, NewTopic

from quorum.admin import wait_for_leader
from quorum.launcher import LocalCluster
from quorum.log.snapshot import SnapshotDirectory
from tests.test_controller_processes import create, metadata, wait_until
from tests.test_snapshot_processes import metadata_dir, scrape

pytestmark = pytest.mark.timeout(300)

CONTROLLER, BROKER = 1, 101
SETTINGS = {
    "quorum.metrics.port": "0",
    "broker.heartbeat.interval.ms": "300",
    # Small enough that a topic of 100 partitions makes every node snapshot, large enough that a
    # registration and a one-partition topic do not.
    "metadata.log.max.record.bytes.between.snapshots": "4000",
}

K = "kafka_controller_KafkaController_"
CONTROLLER_LAG = K + "MetadataLag"
BROKER_LAG = "kafka_controller_KafkaServer_MetadataLag"
SNAPSHOT_LAG = K + "MetadataSnapshotLag"
COMMIT_LATENCY_COUNT = K + "MetadataCommitLatencyMs_count"
COMMIT_RATE = K + "MetadataCommitRate_total"
REQUESTS_RATE = K + "ControllerRequestsRate_total"
GEN_COUNT = K + "GenSnapshotLatencyMs_count"


def high_watermark(cluster: LocalCluster) -> int:
    return wait_for_leader(lambda: [cluster.specs[CONTROLLER].address], None, 30.0).high_watermark


def caught_up(cluster: LocalCluster, min_offset: int = 0) -> tuple[int, dict[str, float], dict[str, float]]:
    """Wait until both nodes have replayed everything committed and agree on the snapshot lag of the
    high watermark; that high watermark and both nodes' metrics."""

    def settled():
        hw = high_watermark(cluster)
        controller, broker = scrape(cluster, CONTROLLER), scrape(cluster, BROKER)
        expected = {node: hw - _snapshot_offset(cluster, node) for node in (CONTROLLER, BROKER)}
        if (hw >= min_offset and controller[CONTROLLER_LAG] == 0 and broker[BROKER_LAG] == 0
                and controller[SNAPSHOT_LAG] == expected[CONTROLLER] and broker[SNAPSHOT_LAG] == expected[BROKER]
                and high_watermark(cluster) == hw):
            return hw, controller, broker
        return None

    return wait_until("both nodes caught up", settled)


def _snapshot_offset(cluster: LocalCluster, node_id: int) -> int:
    latest = SnapshotDirectory(metadata_dir(cluster, node_id)).latest_snapshot()
    return 0 if latest is None else latest.offset


def test_kip_631_metrics_move_with_the_metadata(tmp_path):
    cluster = LocalCluster(tmp_path, controllers=1, brokers=1, settings=SETTINGS)
    cluster.format_storage()
    cluster.start()
    try:
        broker_address = cluster.specs[BROKER].address
        wait_until("the broker unfenced", lambda: metadata(broker_address)[0] == {BROKER})

        hw, controller, broker = caught_up(cluster)
        # The names of each role: MetadataLag is KafkaController's on a controller, KafkaServer's on a broker.
        assert BROKER_LAG not in controller and CONTROLLER_LAG not in broker
        assert not {COMMIT_LATENCY_COUNT, COMMIT_RATE, REQUESTS_RATE} & set(broker)
        # A broker serves its log cleaner's metrics under Kafka's names; a controller has no cleaner.
        assert broker["kafka_log_LogCleanerManager_uncleanable_partitions_count"] == 0
        assert "kafka_log_LogCleanerManager_time_since_last_run_ms" in broker
        assert "kafka_log_LogCleaner_max_clean_time_secs" not in controller
        # Registered and unfenced: requests processed, records committed and timed.
        assert controller[REQUESTS_RATE] >= 2
        assert controller[COMMIT_RATE] >= 2 and controller[COMMIT_LATENCY_COUNT] >= 1
        # KIP-835: the controller has replayed every committed record (the broker has no such gauges).
        assert controller[K + "LastAppliedRecordOffset"] == controller[K + "LastCommittedRecordOffset"] == hw - 1
        assert K + "LastAppliedRecordOffset" not in broker
        # No snapshot yet: the spec's snapshot offset is 0, so the lag is the whole committed log.
        assert controller[SNAPSHOT_LAG] == broker[SNAPSHOT_LAG] == hw > 0
        assert controller[GEN_COUNT] == broker[GEN_COUNT] == 0

        # Heartbeats alone keep the request counter moving.
        wait_until("heartbeats counted", lambda: scrape(cluster, CONTROLLER)[REQUESTS_RATE] > controller[REQUESTS_RATE])

        admin = AdminClient({"bootstrap.servers": broker_address})
        create(admin, NewTopic("small", 1, 1))
        wait_until("small listed by the broker", lambda: "small" in metadata(broker_address)[1])
        hw_small, controller_small, broker_small = caught_up(cluster, min_offset=hw + 2)
        # A TopicRecord and a PartitionRecord, committed in one timed commit, by one more request.
        assert controller_small[COMMIT_RATE] >= controller[COMMIT_RATE] + 2
        assert controller_small[COMMIT_LATENCY_COUNT] >= controller[COMMIT_LATENCY_COUNT] + 1
        assert controller_small[REQUESTS_RATE] >= controller[REQUESTS_RATE] + 1
        assert controller_small[SNAPSHOT_LAG] == broker_small[SNAPSHOT_LAG] == hw_small >= hw + 2
        assert controller_small[GEN_COUNT] == broker_small[GEN_COUNT] == 0

        create(admin, NewTopic("big", 100, 1))
        wait_until("big listed by the broker", lambda: "big" in metadata(broker_address)[1])
        wait_until("both nodes snapshotted",
                   lambda: all(scrape(cluster, n)[GEN_COUNT] >= 1 for n in (CONTROLLER, BROKER)))
        hw_big, controller_big, broker_big = caught_up(cluster, min_offset=hw_small + 101)
        assert controller_big[COMMIT_RATE] >= controller_small[COMMIT_RATE] + 101
        for node, found in ((CONTROLLER, controller_big), (BROKER, broker_big)):
            snapshot_offset = _snapshot_offset(cluster, node)
            assert snapshot_offset > hw_small, (node, snapshot_offset)
            # After a snapshot the lag is what came after it, well below the committed log.
            assert found[SNAPSHOT_LAG] == hw_big - snapshot_offset < hw_big - hw_small
    finally:
        cluster.stop()
