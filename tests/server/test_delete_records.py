"""DeleteRecords on `__cluster_metadata` is refused with POLICY_VIOLATION (KIP-630), end to end.

A real `quorum start` controller process answers. Its ApiVersions must advertise DeleteRecords,
and every version kafka-python's protocol classes speak must come back with POLICY_VIOLATION for
the metadata log and UNKNOWN_TOPIC_OR_PARTITION for any other topic.

The admin clients of kafka-python and confluent-kafka first ask Metadata for each partition's
leader, which a controller does not serve (like Kafka's, it is no broker). So they talk to a
small front in this test: it answers ApiVersions and Metadata itself (node 1, at the front's own
address, leads `__cluster_metadata-0`) and hands every DeleteRecords it receives, at the version
the client chose, to the real node, whose answer goes back unchanged.
"""

from __future__ import annotations

import socket
from collections.abc import Iterator
from typing import Any

import pytest
from confluent_kafka import KafkaError, KafkaException
from confluent_kafka import TopicPartition as ConfluentPartition
from confluent_kafka.admin import AdminClient
from kafka import KafkaAdminClient
from kafka.errors import PolicyViolationError, UnknownTopicOrPartitionError
from kafka.protocol.admin import DeleteRecordsRequest, DeleteRecordsResponse
from kafka.protocol.metadata import ApiVersionsRequest, ApiVersionsResponse
from kafka.structs import TopicPartition

from quorum.admin import wait_for_leader
from quorum.image.image import single_node_image
from quorum.launcher import LocalCluster, NodeSpec
from quorum.net.dispatch import Reply
from quorum.net.peer_client import PeerClient
from quorum.server.listener import KafkaListener
from quorum.server.standalone import metadata_dispatcher
from quorum.wire.errors import ErrorCode
from quorum.wire.protocol import APIS, Request
from tests.support.background_loop import BackgroundServer

pytestmark = pytest.mark.timeout(180)

DELETE_RECORDS = 21
METADATA = TopicPartition("__cluster_metadata", 0)


@pytest.fixture(scope="module")
def controller(tmp_path_factory) -> Iterator[NodeSpec]:
    """One real `quorum start` controller (node 1 on 127.0.0.1), elected leader of its single-voter quorum."""
    cluster = LocalCluster(tmp_path_factory.mktemp("delete-records"), controllers=1)
    cluster.format_storage()
    cluster.start()
    try:
        spec = cluster.specs[1]
        wait_for_leader(lambda: [spec.address], None, 60.0, 0)
        yield spec
    finally:
        cluster.stop()


class MetadataFront(BackgroundServer):
    """ApiVersions and Metadata answered here; DeleteRecords forwarded to the node, answer unchanged."""

    def __init__(self, node: NodeSpec) -> None:
        super().__init__()
        self._node = node
        self.forwarded: list[int] = []  # DeleteRecords versions the clients sent

    async def _serve(self) -> None:
        dispatcher, holder = metadata_dispatcher()
        peer = PeerClient("127.0.0.1", self._node.port, "delete-records-front", 10_000)

        async def forward(request: Request) -> Reply:
            self.forwarded.append(request.version)
            return Reply(await peer.request(request.api, request.version, request.body), request.version)

        dispatcher.register(DELETE_RECORDS, forward)
        listener = KafkaListener(dispatcher, "127.0.0.1", 0)
        await listener.start()
        holder.append(single_node_image(1, "127.0.0.1", listener.port, {"__cluster_metadata": 1, "orders": 1}))
        self._started(listener.port)
        await self._stop.wait()
        await listener.close()
        await peer.close()


def exchange(node: NodeSpec, request: Any, response_class: Any, version: int, correlation_id: int = 7) -> Any:
    """One request through kafka-python's own protocol classes on a socket to the real node."""
    request.with_header(correlation_id=correlation_id, client_id="delete-records-test")
    with socket.create_connection(("127.0.0.1", node.port), timeout=10) as sock:
        sock.sendall(request.encode(header=True, framed=True))
        size = int.from_bytes(_recv_exactly(sock, 4), "big")
        response = response_class.decode(_recv_exactly(sock, size), version=version, header=True)
    assert response.header.correlation_id == correlation_id
    return response


def _recv_exactly(sock: socket.socket, n: int) -> bytes:
    data = b""
    while len(data) < n:
        chunk = sock.recv(n - len(data))
        assert chunk, "connection closed"
        data += chunk
    return data


def test_the_controller_advertises_delete_records(controller):
    response = exchange(controller, ApiVersionsRequest(version=3, client_software_name="test",
                                                       client_software_version="1"), ApiVersionsResponse, 3)
    assert response.error_code == 0
    ranges = {k.api_key: (k.min_version, k.max_version) for k in response.api_keys}
    assert ranges[DELETE_RECORDS] == (APIS[DELETE_RECORDS].min_version, APIS[DELETE_RECORDS].max_version)


@pytest.mark.parametrize("version", range(APIS[DELETE_RECORDS].min_version, APIS[DELETE_RECORDS].max_version + 1))
def test_every_version_answers_policy_violation_for_the_metadata_log(controller, version):
    request = DeleteRecordsRequest(topics=[("__cluster_metadata", [(0, 5), (1, -1)]), ("orders", [(0, 5)])],
                                   timeout_ms=5000, version=version)
    response = exchange(controller, request, DeleteRecordsResponse, version)
    answers = {(t.name, p.partition_index): (p.error_code, p.low_watermark)
               for t in response.topics for p in t.partitions}
    assert answers == {
        ("__cluster_metadata", 0): (ErrorCode.POLICY_VIOLATION, -1),
        ("__cluster_metadata", 1): (ErrorCode.POLICY_VIOLATION, -1),
        ("orders", 0): (ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, -1),
    }


def test_kafka_python_admin_delete_records_raises_policy_violation(controller):
    with MetadataFront(controller) as front:
        admin = KafkaAdminClient(bootstrap_servers=front.address, client_id="delete-records-kafka-python",
                                 request_timeout_ms=10_000)
        try:
            with pytest.raises(PolicyViolationError):
                admin.delete_records({METADATA: 0}, timeout_ms=10_000)
            with pytest.raises(UnknownTopicOrPartitionError):
                admin.delete_records({TopicPartition("orders", 0): 0}, timeout_ms=10_000)
        finally:
            admin.close()
    assert len(front.forwarded) == 2, "the node did not answer both requests"


def test_confluent_kafka_admin_delete_records_fails_with_policy_violation(controller):
    with MetadataFront(controller) as front:
        admin = AdminClient({"bootstrap.servers": front.address, "client.id": "delete-records-confluent"})
        futures = admin.delete_records([ConfluentPartition("__cluster_metadata", 0, 0)], request_timeout=15)
        (future,) = futures.values()
        with pytest.raises(KafkaException) as raised:
            future.result(timeout=30)
    assert raised.value.args[0].code() == KafkaError.POLICY_VIOLATION
    assert front.forwarded, "the node was never asked"
