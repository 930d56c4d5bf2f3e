"""Every API a broker and a controller serve, at every version they advertise, sent with every
nullable field null, with every string empty, and with every string null even where the schema
forbids it (issue 21: a null group id reached `java_string_hash(None)` and left 53 tracebacks).

Each node answers each request of the first two kinds (valid requests), never with UNKNOWN_SERVER_ERROR,
with Kafka's error code where the request is one Kafka refuses, and the node logs hold no
traceback afterwards. The third kind is a request Kafka cannot parse wherever a string the schema
does not let be null is null ("non-nullable field was serialized as null"): the node closes that
connection, as Kafka does, or answers it when every null string landed in a nullable field. The APIs
come from each node's own ApiVersions answer, so an API added later is covered without touching this
test.
"""

from __future__ import annotations

import itertools
import socket
import struct
from collections.abc import Iterator
from typing import Any

import pytest

from quorum.launcher import LocalCluster
from quorum.wire.errors import ErrorCode
from quorum.wire.protocol import APIS, RequestHeader, decode_response, encode_request
from tests.support.null_requests import MODES, nullable_paths, request_body
from tests.test_broker_processes import BROKER, one_broker
from tests.test_server_bad_input import _recv_exactly

pytestmark = pytest.mark.timeout(300)

CONTROLLER = 1
PRODUCE, FETCH, API_VERSIONS = 0, 1, 18
VALID_MODES = frozenset({"nulls", "empties"})
EMPTIES = frozenset({"empties"})
E = ErrorCode
# (API name, the modes it applies to) -> error codes Kafka answers that request with.
EXPECTED: dict[str, tuple[frozenset[str], set[int]]] = {
    # GroupCoordinator.isValidGroupId: the empty group id is INVALID_GROUP_ID for the membership APIs
    # (DescribeGroups and OffsetFetch allow it).
    "JoinGroup": (EMPTIES, {E.INVALID_GROUP_ID}),
    "SyncGroup": (EMPTIES, {E.INVALID_GROUP_ID}),
    "Heartbeat": (EMPTIES, {E.INVALID_GROUP_ID}),
    "LeaveGroup": (EMPTIES, {E.INVALID_GROUP_ID}),
    # KIP-848: throwIfConsumerGroupHeartbeatRequestIsInvalid ("GroupId can't be empty."), and
    # consumerGroupDescribe's isGroupIdNotEmpty.
    "ConsumerGroupHeartbeat": (EMPTIES, {E.INVALID_REQUEST}),
    "ConsumerGroupDescribe": (EMPTIES, {E.INVALID_GROUP_ID}),
    # KafkaRaftClient: a request that does not name the metadata partition.
    "Vote": (VALID_MODES, {E.INVALID_REQUEST}),
    "BeginQuorumEpoch": (VALID_MODES, {E.INVALID_REQUEST}),
    "EndQuorumEpoch": (VALID_MODES, {E.INVALID_REQUEST}),
    "FetchSnapshot": (VALID_MODES, {E.INVALID_REQUEST}),
    "CreateTopics": (VALID_MODES, {E.INVALID_TOPIC_EXCEPTION}),  # the name ""
    "InitProducerId": (EMPTIES, {E.INVALID_REQUEST}),  # transactional id ""
    "BrokerRegistration": (VALID_MODES, {E.INCONSISTENT_CLUSTER_ID}),
    "BrokerHeartbeat": (VALID_MODES, {E.STALE_BROKER_EPOCH}),  # broker 0 is not registered
    "AlterPartition": (VALID_MODES, {E.STALE_BROKER_EPOCH}),
    "AllocateProducerIds": (VALID_MODES, {E.STALE_BROKER_EPOCH}),
}


@pytest.fixture(scope="module")
def cluster(tmp_path_factory) -> Iterator[LocalCluster]:
    with one_broker(tmp_path_factory.mktemp("null-fields")) as (running, _):
        yield running


def error_codes(body: Any) -> set[int]:
    """Every error_code anywhere in a decoded response."""
    found: set[int] = set()

    def walk(value: Any) -> None:
        if isinstance(value, dict):
            for key, item in value.items():
                if key == "error_code":
                    found.add(item)
                else:
                    walk(item)
        elif isinstance(value, list):
            for item in value:
                walk(item)

    walk(body.to_dict())
    return found


class Connection:
    """One client connection to a node, opened again after the node closes it."""

    def __init__(self, port: int) -> None:
        self.port = port
        self.sock: socket.socket | None = None
        self.correlation = itertools.count(1)

    def call(self, api_key: int, version: int, body: Any) -> Any | None:
        """The decoded answer, or None when the node closed the connection instead."""
        if self.sock is None:
            self.sock = socket.create_connection(("127.0.0.1", self.port), timeout=30)
        api = APIS[api_key]
        correlation_id = next(self.correlation)
        try:
            self.sock.sendall(encode_request(api, RequestHeader(api_key, version, correlation_id, "null-fields"), body))
            size = struct.unpack(">i", _recv_exactly(self.sock, 4))[0]
            got, answer = decode_response(api, version, _recv_exactly(self.sock, size))
        except ConnectionError:
            self.close()
            return None
        assert got == correlation_id
        return answer

    def close(self) -> None:
        if self.sock is not None:
            self.sock.close()
            self.sock = None


def served(connection: Connection) -> list[tuple[int, int, int]]:
    api = APIS[API_VERSIONS]
    answer = connection.call(API_VERSIONS, 3, api.request(client_software_name="null-fields",
                                                         client_software_version="1"))
    assert answer is not None and answer.error_code == E.NONE
    return [(k.api_key, k.min_version, k.max_version) for k in answer.api_keys]


@pytest.mark.parametrize("node_id", [CONTROLLER, BROKER])
def test_every_api_with_null_and_empty_fields_gets_kafkas_error_codes(cluster: LocalCluster, node_id: int) -> None:
    connection = Connection(cluster.specs[node_id].port)
    problems: list[str] = []
    checked = 0
    try:
        apis = served(connection)
        for api_key, low, high in apis:
            api = APIS[api_key]
            for version, mode in itertools.product(range(low, high + 1), MODES):
                body = request_body(api, version, mode)
                if api_key == PRODUCE:
                    body.acks = -1  # acks=0 has no answer to check
                answer = connection.call(api_key, version, body)
                what = f"{api.name} v{version} ({mode}; nullable: {', '.join(nullable_paths(api, version)) or 'none'})"
                checked += 1
                modes, expected = EXPECTED.get(api.name, (frozenset(), set()))
                if answer is None:
                    if mode != "null strings" or mode in modes:
                        problems.append(f"{what}: the node closed the connection instead of answering")
                    continue
                codes = error_codes(answer)
                if E.UNKNOWN_SERVER_ERROR in codes:
                    problems.append(f"{what}: UNKNOWN_SERVER_ERROR in {sorted(codes)}")
                if mode in modes and not expected <= codes:
                    problems.append(f"{what}: error codes {sorted(codes)}, Kafka answers {sorted(expected)}")
    finally:
        connection.close()
    assert {key for key, _, _ in apis} >= ({FETCH, 52} if node_id == CONTROLLER else {FETCH, 3, 11}), apis
    assert checked >= 3 * len(apis)
    assert not problems, "\n".join(problems)
    log = cluster.specs[node_id].log_path.read_text(encoding="utf-8", errors="replace")
    assert "Traceback" not in log and "unexpected error" not in log, log[log.find("Traceback") - 2000:][:6000]
