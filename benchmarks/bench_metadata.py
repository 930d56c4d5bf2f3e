"""MetadataResponse with 10,000 partitions: encodes and decodes per second, ours beside kafka-python's.

Run: `./run bench` (all benchmarks) or `.venv/bin/python -m benchmarks.bench_metadata`.
"server, first request" builds the response from a fresh metadata image and encodes it; "server,
cached" is every later request to the same image, which reuses each topic's encoded bytes. The
quorum.wire and kafka-python columns encode or decode the same response object.
"""

from __future__ import annotations

import uuid

from kafka.protocol.metadata.metadata import MetadataRequest as KpRequest
from kafka.protocol.metadata.metadata import MetadataResponse as KpResponse

from benchmarks.table import print_table, progress, rate
from quorum.broker.metadata import METADATA, encoded_metadata_response, metadata_response
from quorum.image.image import BrokerInfo, MetadataImage, PartitionInfo, TopicInfo
from quorum.wire.protocol import decode_body

TOPICS = 1_000
PARTITIONS_PER_TOPIC = 10
VERSIONS = (12, 8)


def build_image() -> MetadataImage:
    brokers = {n: BrokerInfo(n, "127.0.0.1", 9090 + n) for n in (1, 2, 3)}
    topics = {}
    for t in range(TOPICS):
        partitions = tuple(
            PartitionInfo(p, 1 + (t + p) % 3, 5, (1, 2, 3), (1, 2, 3)) for p in range(PARTITIONS_PER_TOPIC))
        topics[f"topic-{t:05d}"] = TopicInfo(f"topic-{t:05d}", uuid.uuid4(), partitions, topic_epoch=t + 1)
    return MetadataImage("bench-cluster", 1, brokers, topics)


def kafka_python_object(ours, version: int):
    """The same response as kafka-python client classes: what kafka-python itself would encode."""
    topic, partition, broker = KpResponse.MetadataResponseTopic, \
        KpResponse.MetadataResponseTopic.MetadataResponsePartition, KpResponse.MetadataResponseBroker
    return KpResponse(
        version=version, throttle_time_ms=0, cluster_id=ours.cluster_id, controller_id=ours.controller_id,
        brokers=[broker(version=version, node_id=b.node_id, host=b.host, port=b.port, rack=None) for b in ours.brokers],
        topics=[topic(version=version, error_code=0, name=t.name, topic_id=t.topic_id, is_internal=False,
                      partitions=[partition(version=version, error_code=0, partition_index=p.partition_index,
                                            leader_id=p.leader_id, leader_epoch=p.leader_epoch,
                                            replica_nodes=p.replica_nodes, isr_nodes=p.isr_nodes,
                                            offline_replicas=[]) for p in t.partitions])
                for t in ours.topics])


def measure(image: MetadataImage, version: int) -> list[tuple[str, ...]]:
    """Two table rows (encode, decode) for one Metadata version."""
    request = KpRequest(topics=None, version=version)
    ours = metadata_response(image, request, version)
    encoded = ours.encode(version=version)
    assert encoded_metadata_response(image, request, version) == encoded
    theirs = kafka_python_object(ours, version)
    progress(f"v{version}: {len(encoded):,} bytes per response")

    def first_request() -> bytes:
        fresh = MetadataImage(image.cluster_id, image.controller_id, image.brokers, image.topics)
        return encoded_metadata_response(fresh, request, version)

    cold = rate(first_request)
    cached = rate(lambda: encoded_metadata_response(image, request, version))
    our_encode = rate(lambda: ours.encode(version=version))
    their_encode = rate(lambda: theirs.encode(version=version))
    our_decode = rate(lambda: decode_body(METADATA.response, encoded, 0, version))
    their_decode = rate(lambda: KpResponse.decode(encoded, version=version))
    return [
        (f"v{version} encode", f"{cold:.1f}", f"{cached:.1f}", f"{our_encode:.1f}", f"{their_encode:.1f}",
         f"{cached / their_encode:.1f}x"),
        (f"v{version} decode", "", "", f"{our_decode:.1f}", f"{their_decode:.1f}", f"{our_decode / their_decode:.2f}x"),
    ]


def main() -> None:
    image = build_image()
    rows = [row for version in VERSIONS for row in measure(image, version)]
    print_table(
        f"MetadataResponse, {TOPICS:,} topics x {PARTITIONS_PER_TOPIC} partitions = "
        f"{TOPICS * PARTITIONS_PER_TOPIC:,} partitions (responses per second)",
        ["operation", "server, first request", "server, cached", "quorum.wire", "kafka-python",
         "best ours / kafka-python"], rows)


if __name__ == "__main__":
    main()
