"""Golden tests: the exact bytes real clients write to a socket decode, and our answers satisfy them.

Each client talks to a real `quorum standalone` process through a recording proxy. Every frame it
sent must decode with the wire layer and re-encode to the same bytes (apart from padding Kafka
tolerates), and the client must list the node's brokers, topics and partitions.
"""

from __future__ import annotations

import re
import subprocess

import pytest
from confluent_kafka.admin import AdminClient
from kafka import KafkaAdminClient

from quorum.wire.protocol import decode_request
from tests.support.proxy import RecordingProxy

EXPECTED_PARTITIONS = {"orders": 3, "payments": 2, "audit": 1}


def decode_all(frames: list[bytes]) -> list:
    requests = [decode_request(frame) for frame in frames]
    assert requests, "the client sent nothing"
    return requests


def assert_reencodes_exactly(frames: list[bytes]) -> None:
    """Our encoding of what we decoded is byte-identical to what the client sent."""
    for frame, request in zip(frames, decode_all(frames), strict=True):
        if request.body is None:
            continue
        sent = frame[request.body_offset:]
        ours = request.body.encode(version=request.version)
        assert sent[:len(ours)] == ours, (
            f"{request.api.name} v{request.version} from {request.header.client_id!r} re-encodes differently")
        assert len(sent) - len(ours) <= 3, f"{len(sent) - len(ours)} unread bytes after {request.api.name}"


def api_names(frames: list[bytes]) -> list[str]:
    return [request.api.name for request in decode_all(frames)]


def test_confluent_kafka_admin_lists_metadata(standalone_node):
    with RecordingProxy(standalone_node.host, standalone_node.port) as proxy:
        client = AdminClient({"bootstrap.servers": proxy.address, "client.id": "golden-confluent"})
        metadata = client.list_topics(timeout=15)
        frames = proxy.recorded()
    assert {name: len(t.partitions) for name, t in metadata.topics.items()} == EXPECTED_PARTITIONS
    assert [b.id for b in metadata.brokers.values()] == [1]
    assert metadata.topics["orders"].partitions[2].leader == 1
    requests = decode_all(frames)
    first = requests[0]
    assert first.api.name == "ApiVersions" and first.header.client_id == "golden-confluent"
    assert first.body.client_software_name == "confluent-kafka-python"
    assert "Metadata" in api_names(frames)
    assert_reencodes_exactly(frames)


def test_kafka_python_admin_lists_metadata(standalone_node):
    with RecordingProxy(standalone_node.host, standalone_node.port) as proxy:
        admin = KafkaAdminClient(bootstrap_servers=proxy.address, client_id="golden-kafka-python")
        try:
            topics = set(admin.list_topics())
            cluster = admin.describe_cluster()
        finally:
            admin.close()
        frames = proxy.recorded()
    assert topics == set(EXPECTED_PARTITIONS)
    assert [b["broker_id"] for b in cluster["brokers"]] == [1]
    requests = decode_all(frames)
    assert requests[0].api.name == "ApiVersions"
    assert requests[0].body.client_software_name == "kafka-python"
    metadata = [r for r in requests if r.api.name == "Metadata"]
    assert metadata and all(r.header.client_id == "golden-kafka-python" for r in metadata)
    assert_reencodes_exactly(frames)


def test_kcat_lists_metadata(standalone_node, kcat):
    with RecordingProxy(standalone_node.host, standalone_node.port) as proxy:
        result = subprocess.run([kcat, "-L", "-b", proxy.address, "-m", "10"], capture_output=True,
                                text=True, timeout=60)
        frames = proxy.recorded()
    assert result.returncode == 0, result.stderr
    listed = {m["name"]: int(m["count"])
              for m in re.finditer(r'topic "(?P<name>[^"]+)" with (?P<count>\d+) partitions', result.stdout)}
    assert listed == EXPECTED_PARTITIONS
    assert re.search(r"1 brokers:\s+broker 1 at 127\.0\.0\.1:\d+", result.stdout), result.stdout
    requests = decode_all(frames)
    assert requests[0].api.name == "ApiVersions"
    assert requests[0].body.client_software_name == "librdkafka"
    assert "Metadata" in api_names(frames)
    assert_reencodes_exactly(frames)


@pytest.mark.parametrize("version", [0, 1, 4, 9, 12, 13])
def test_metadata_every_version_through_kafka_python_codec(standalone_node, version):
    """kafka-python's own client classes decode our Metadata answers at old and new versions."""
    import socket

    from kafka.protocol.metadata.metadata import MetadataRequest, MetadataResponse

    request = MetadataRequest(topics=None if version else [], version=version)
    request.with_header(correlation_id=7, client_id="versions")
    with socket.create_connection((standalone_node.host, standalone_node.port), timeout=10) as sock:
        sock.sendall(request.encode(header=True, framed=True))
        size = int.from_bytes(_recv_exactly(sock, 4), "big")
        payload = _recv_exactly(sock, size)
    response = MetadataResponse.decode(payload, version=version, header=True)
    assert response.header.correlation_id == 7
    assert {t.name: len(t.partitions) for t in response.topics} == EXPECTED_PARTITIONS


def _recv_exactly(sock, n: int) -> bytes:
    data = b""
    while len(data) < n:
        chunk = sock.recv(n - len(data))
        assert chunk, "connection closed"
        data += chunk
    return data
