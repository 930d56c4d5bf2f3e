"""Issue 38: no client writes `__cluster_metadata` unless a test setting says so.

A controller used to take Produce to the metadata partition from any client that reached it,
committing the values through Raft past the controller's validation and the authorizer: anyone on
the controller listener could write metadata records. Kafka's controller listener serves no
Produce: ApiVersions does not list it and a request for it closes the connection (SocketServer's
"Received request api key PRODUCE ... which is not enabled"). Kafka's broker answers a Produce
to `__cluster_metadata` UNKNOWN_TOPIC_OR_PARTITION, since no topic of that name is in its
metadata. Here a plain 1 + 1 cluster, without `quorum.test.metadata.writes.enable`, is asked all
three ways, keeps serving, and afterwards no value sent is in the metadata log. The secured
listeners are checked in tests/security/test_acl_sasl_processes.py.
"""

from __future__ import annotations

import asyncio
import uuid

import pytest

from quorum.admin import QuorumToolError, QuorumWriter, describe_quorum
from quorum.launcher import LocalCluster
from quorum.net.peer_client import PeerClient, PeerUnavailable
from quorum.wire.errors import ErrorCode
from quorum.wire.protocol import APIS
from tests.server.test_pending_writes_processes import produce_body
from tests.test_quorum_processes import committed_values

pytestmark = pytest.mark.timeout(180)

CONTROLLER, BROKER = 1, 101
PRODUCE, API_VERSIONS = 0, 18


async def served_apis(address: str) -> set[int]:
    host, _, port = address.rpartition(":")
    client = PeerClient(host, int(port), "api-versions", 10_000)
    try:
        answer = await client.request(APIS[API_VERSIONS], 0, APIS[API_VERSIONS].request())
    finally:
        await client.close()
    return {key.api_key for key in answer.api_keys}


async def produce_to_metadata(address: str, value: bytes) -> object:
    """A Produce of `value` to `__cluster_metadata-0` (acks=all): the answer's partition, or the
    PeerUnavailable raised when the node closes the connection."""
    host, _, port = address.rpartition(":")
    client = PeerClient(host, int(port), "metadata-writer", 10_000)
    try:
        response = await client.request(APIS[PRODUCE], 9, produce_body([value]))
        return response.responses[0].partition_responses[0]
    except PeerUnavailable as exc:
        return exc
    finally:
        await client.close()


def test_no_client_writes_the_metadata_log_without_the_test_setting(tmp_path) -> None:
    cluster = LocalCluster(tmp_path, controllers=1, brokers=1)
    cluster.format_storage()
    cluster.start(timeout=60)
    controller, broker = cluster.specs[CONTROLLER].address, cluster.specs[BROKER].address
    marker = f"forged-{uuid.uuid4().hex}".encode()
    try:
        assert PRODUCE not in asyncio.run(served_apis(controller)), "the controller advertises Produce"

        refused = asyncio.run(produce_to_metadata(controller, marker))
        assert isinstance(refused, PeerUnavailable), f"the controller answered a Produce: {refused}"
        log_text = cluster.specs[CONTROLLER].log_path.read_text()
        assert "API key 0" in log_text and "is not served here" in log_text, "no reason logged for the close"

        async def write_through_tool() -> None:
            writer = QuorumWriter([controller], timeout_ms=10_000)
            try:
                await writer.commit([marker], within_s=60)
            finally:
                await writer.close()

        with pytest.raises(QuorumToolError, match="quorum.test.metadata.writes.enable"):
            asyncio.run(write_through_tool())

        answer = asyncio.run(produce_to_metadata(broker, marker))
        assert not isinstance(answer, PeerUnavailable), f"the broker closed the connection: {answer}"
        assert answer.error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, ErrorCode(answer.error_code).name

        status = asyncio.run(describe_quorum(controller))  # still serving after the refusals
        assert status.leader_id == CONTROLLER
    finally:
        cluster.stop()
    values = committed_values(cluster, CONTROLLER, 10**9)
    assert marker not in values, "a refused Produce was committed to __cluster_metadata"
