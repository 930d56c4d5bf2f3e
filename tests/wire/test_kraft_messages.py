"""The KRaft RPC schemas: Kafka's facts (keys, versions, layouts), round trips, and isolation from kafka-python."""

from __future__ import annotations

import contextlib
import importlib.resources
import json
import subprocess
import sys
import uuid

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from kafka.protocol.api_message import ApiMessage
from kafka.protocol.metadata.find_coordinator import FindCoordinatorResponse
from kafka.protocol.metadata.metadata import MetadataRequest, MetadataResponse

from quorum.wire import kraft_messages as km
from quorum.wire.errors import MalformedRequestError
from quorum.wire.kraft_messages import KRAFT_APIS
from quorum.wire.protocol import decode_body
from quorum.wire.schema import KAFKA_PYTHON_SCHEMAS, define_message
from tests.wire.schema_strategies import message_values, versioned_messages

U1 = uuid.UUID("00112233-4455-6677-8899-aabbccddeeff")
U2 = uuid.UUID("ffeeddcc-bbaa-9988-7766-554433221100")

# Apache Kafka's facts: API key -> (name, valid versions, first flexible version or None).
KAFKA_FACTS = {
    52: ("Vote", (0, 2), 0),
    53: ("BeginQuorumEpoch", (0, 1), 1),
    54: ("EndQuorumEpoch", (0, 1), 1),
    56: ("AlterPartition", (2, 3), 0),
    59: ("FetchSnapshot", (0, 1), 0),
    62: ("BrokerRegistration", (0, 4), 0),
    63: ("BrokerHeartbeat", (0, 1), 0),
    67: ("AllocateProducerIds", (0, 0), 0),
}

ALL_CLASSES = [schema for pair in KRAFT_APIS.values() for schema in pair]
CLASS_VERSIONS = [(schema, version) for schema in ALL_CLASSES for version in range(schema.max_version + 1)]


def _ids(case: tuple[type[ApiMessage], int]) -> str:
    return f"{case[0].__name__}-v{case[1]}"


@pytest.mark.parametrize("key", sorted(KAFKA_FACTS))
def test_api_keys_versions_and_flexibility_are_kafkas(key: int) -> None:
    name, versions, first_flexible = KAFKA_FACTS[key]
    request, response = KRAFT_APIS[key]
    assert (request.__name__, response.__name__) == (f"{name}Request", f"{name}Response")
    for schema in (request, response):
        assert key == schema.API_KEY
        assert schema.valid_versions == versions
        flexible = [v for v in range(versions[1] + 1) if schema.flexible_version_q(v)]
        assert flexible == list(range(first_flexible, versions[1] + 1))
    assert request.is_request() and not response.is_request()


def test_the_table_holds_exactly_the_kraft_rpcs() -> None:
    assert sorted(KRAFT_APIS) == sorted(KAFKA_FACTS)


@pytest.mark.parametrize("case", CLASS_VERSIONS, ids=_ids)
@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_every_message_round_trips_at_every_version(case: tuple[type[ApiMessage], int], data: st.DataObject) -> None:
    schema, version = case
    message = data.draw(message_values(schema, version))
    encoded = message.encode(version=version)
    decoded = schema.decode(encoded, version=version)
    assert decoded == message
    # kafka-python's decode leaves no header slot, so encode(version=...) would fail: reuse its own.
    assert decoded.encode() == encoded
    # The project's decoder (the one the server uses) reads the same, and reads all of it.
    assert decode_body(schema, encoded, 0, version) == message


@pytest.mark.parametrize("case", CLASS_VERSIONS, ids=_ids)
@settings(max_examples=10, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_every_cut_short_body_is_refused(case: tuple[type[ApiMessage], int], data: st.DataObject) -> None:
    schema, version = case
    encoded = data.draw(message_values(schema, version)).encode(version=version)
    cut = data.draw(st.integers(0, len(encoded) - 1))
    with pytest.raises(MalformedRequestError):
        decode_body(schema, encoded[:cut], 0, version)


@pytest.mark.parametrize("case", CLASS_VERSIONS, ids=_ids)
@settings(max_examples=60, deadline=None)
@given(garbage=st.binary(max_size=96))
def test_garbage_bodies_fail_cleanly(case: tuple[type[ApiMessage], int], garbage: bytes) -> None:
    schema, version = case
    with contextlib.suppress(MalformedRequestError):
        decode_body(schema, garbage, 0, version)


# Golden bytes, written out field by field from Kafka's layouts.

def test_vote_request_v2_golden_bytes() -> None:
    message = km.VoteRequest(version=2, cluster_id="c", voter_id=3, topics=[
        km.VoteRequest.TopicData(topic_name="__cluster_metadata", partitions=[
            km.VoteRequest.TopicData.PartitionData(
                partition_index=0, replica_epoch=5, replica_id=1, replica_directory_id=U1,
                voter_directory_id=U2, last_offset_epoch=4, last_offset=100, pre_vote=True)])])
    expected = (
        bytes.fromhex("0263")                                  # ClusterId: compact string "c"
        + bytes.fromhex("00000003")                            # VoterId
        + bytes.fromhex("02") + b"\x13__cluster_metadata"      # Topics: 1 entry; TopicName
        + bytes.fromhex("02")                                  # Partitions: 1 entry
        + bytes.fromhex("00000000 00000005 00000001")          # PartitionIndex, ReplicaEpoch, ReplicaId
        + U1.bytes + U2.bytes                                  # ReplicaDirectoryId, VoterDirectoryId
        + bytes.fromhex("00000004 0000000000000064")           # LastOffsetEpoch, LastOffset
        + bytes.fromhex("01")                                  # PreVote
        + bytes.fromhex("00 00 00")                            # tagged fields: partition, topic, request
    )
    assert message.encode(version=2) == expected
    assert km.VoteRequest.decode(expected, version=2) == message


def test_vote_request_v0_has_no_voter_key_nor_prevote() -> None:
    message = km.VoteRequest(version=0, cluster_id=None, topics=[
        km.VoteRequest.TopicData(topic_name="t", partitions=[
            km.VoteRequest.TopicData.PartitionData(
                partition_index=0, replica_epoch=1, replica_id=2, last_offset_epoch=0, last_offset=0)])])
    expected = bytes.fromhex("00 02 0274 02 00000000 00000001 00000002 00000000 0000000000000000 00 00 00")
    assert message.encode(version=0) == expected


def test_begin_quorum_epoch_request_v0_is_not_flexible() -> None:
    message = km.BeginQuorumEpochRequest(version=0, cluster_id=None, topics=[
        km.BeginQuorumEpochRequest.TopicData(topic_name="t", partitions=[
            km.BeginQuorumEpochRequest.TopicData.PartitionData(partition_index=0, leader_id=2, leader_epoch=7)])])
    expected = bytes.fromhex(
        "ffff"                          # ClusterId: null, int16 length
        "00000001" "0001" "74"          # Topics: int32 count; TopicName: int16 length + "t"
        "00000001"                      # Partitions: int32 count
        "00000000 00000002 00000007")   # PartitionIndex, LeaderId, LeaderEpoch; no tagged fields
    assert message.encode(version=0) == expected


def test_begin_quorum_epoch_request_v1_sends_leader_endpoints_untagged() -> None:
    message = km.BeginQuorumEpochRequest(version=1, cluster_id="c", voter_id=1, topics=[], leader_endpoints=[
        km.BeginQuorumEpochRequest.LeaderEndpoint(name="C", host="h", port=9093)])
    expected = bytes.fromhex("0263 00000001 01 02 0243 0268 2385 00 00")
    assert message.encode(version=1) == expected


def test_vote_response_v1_node_endpoints_are_tag_0() -> None:
    message = km.VoteResponse(version=1, error_code=0, topics=[], node_endpoints=[
        km.VoteResponse.NodeEndpoint(node_id=1, host="h", port=9093)])
    expected = bytes.fromhex(
        "0000" "01"                     # ErrorCode, Topics: empty compact array
        "01" "00" "0a"                  # one tagged field: tag 0, 10 bytes
        "02 00000001 0268 2385 00")     # NodeEndpoints: 1 entry: NodeId, Host "h", Port 9093 (uint16)
    assert message.encode(version=1) == expected
    assert km.VoteResponse.decode(expected, version=1) == message


def test_fetch_snapshot_request_v1_tags() -> None:
    message = km.FetchSnapshotRequest(version=1, cluster_id="c", replica_id=-1, max_bytes=0x7FFFFFFF, topics=[
        km.FetchSnapshotRequest.TopicSnapshot(name="x", partitions=[
            km.FetchSnapshotRequest.TopicSnapshot.PartitionSnapshot(
                partition=0, current_leader_epoch=2,
                snapshot_id=km.FetchSnapshotRequest.TopicSnapshot.PartitionSnapshot.SnapshotId(
                    end_offset=16, epoch=1),
                position=0, replica_directory_id=U1)])])
    expected = (
        bytes.fromhex("ffffffff 7fffffff")                     # ReplicaId, MaxBytes
        + bytes.fromhex("02 0278 02")                          # Topics: 1, Name "x", Partitions: 1
        + bytes.fromhex("00000000 00000002")                   # Partition, CurrentLeaderEpoch
        + bytes.fromhex("0000000000000010 00000001 00")        # SnapshotId {EndOffset, Epoch}
        + bytes.fromhex("0000000000000000")                    # Position
        + bytes.fromhex("01 00 10") + U1.bytes                 # tag 0: ReplicaDirectoryId
        + bytes.fromhex("00")                                  # topic tagged fields
        + bytes.fromhex("01 00 02 0263")                       # tag 0: ClusterId "c"
    )
    assert message.encode(version=1) == expected
    assert km.FetchSnapshotRequest.decode(expected, version=1) == message


def test_fetch_snapshot_request_defaults_are_kafkas() -> None:
    message = km.FetchSnapshotRequest(version=0, topics=[])
    assert (message.cluster_id, message.replica_id, message.max_bytes) == (None, -1, 0x7FFFFFFF)
    assert message.encode(version=0) == bytes.fromhex("ffffffff 7fffffff 01 00")


def test_broker_heartbeat_request_v1_offline_log_dirs_are_tag_0() -> None:
    message = km.BrokerHeartbeatRequest(version=1, broker_id=1, broker_epoch=10, current_metadata_offset=100,
                                        want_fence=False, want_shut_down=True, offline_log_dirs=[U1])
    expected = (bytes.fromhex("00000001 000000000000000a 0000000000000064 00 01")
                + bytes.fromhex("01 00 11 02") + U1.bytes)
    assert message.encode(version=1) == expected


def test_alter_partition_request_v3_golden_bytes() -> None:
    topic = km.AlterPartitionRequest.TopicData
    partition = topic.PartitionData
    message = km.AlterPartitionRequest(version=3, broker_id=1, broker_epoch=5, topics=[
        topic(topic_id=U1, partitions=[partition(
            partition_index=0, leader_epoch=3, leader_recovery_state=0, partition_epoch=9,
            new_isr_with_epochs=[partition.BrokerState(broker_id=1, broker_epoch=5)])])])
    expected = (bytes.fromhex("00000001 0000000000000005 02") + U1.bytes
                + bytes.fromhex("02 00000000 00000003 02 00000001 0000000000000005 00 00 00000009 00 00 00"))
    assert message.encode(version=3) == expected


def test_broker_registration_request_v4_golden_bytes() -> None:
    schema = km.BrokerRegistrationRequest
    message = schema(version=4, broker_id=1, cluster_id="c", incarnation_id=U1,
                     listeners=[schema.Listener(name="P", host="h", port=9092, security_protocol=0)],
                     features=[schema.Feature(name="f", min_supported_version=0, max_supported_version=1)],
                     rack=None, is_migrating_zk_broker=False, log_dirs=[U2], previous_broker_epoch=-1)
    expected = (bytes.fromhex("00000001 0263") + U1.bytes
                + bytes.fromhex("02 0250 0268 2384 0000 00")           # Listeners
                + bytes.fromhex("02 0266 0000 0001 00")                # Features
                + bytes.fromhex("00 00 02") + U2.bytes                 # Rack null, IsMigratingZkBroker, LogDirs
                + bytes.fromhex("ffffffffffffffff 00"))                # PreviousBrokerEpoch, tagged fields
    assert message.encode(version=4) == expected


def test_kafka_python_is_not_disturbed() -> None:
    """Importing the wire modules and building every API's classes leaves kafka-python's response registry and
    client classes as they were."""
    script = """
import json
from kafka.protocol.api_header import ResponseClassRegistry
from kafka.protocol.metadata.metadata import MetadataResponse
import kafka.protocol.metadata.api_versions
def snapshot():
    return {str(k): f"{v.__module__}.{v.__name__}" for k, v in ResponseClassRegistry._response_class_registry.items()}
before = snapshot()
import quorum.wire.kraft_messages, quorum.wire.metadata_records, quorum.wire.control_records, quorum.wire.protocol
from quorum.wire.protocol import APIS
[api.response for api in APIS.values()]  # the API table builds its classes on first use: all of them now
after = snapshot()
response = MetadataResponse(version=12, throttle_time_ms=0, brokers=[], cluster_id="c", controller_id=1, topics=[])
decoded = ResponseClassRegistry._response_class_registry[3].decode(response.encode(), version=12)
print(json.dumps({"before": before, "after": after, "same": decoded == response,
                  "cls": type(decoded).__module__}))
"""
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True)
    report = json.loads(result.stdout)
    changed = {key for key, name in report["before"].items() if report["after"].get(key) != name}
    assert not changed, f"kafka-python's response classes were replaced for API keys {changed}"
    assert report["after"] == report["before"]  # none of the project's classes entered kafka-python's table
    assert report["before"]["3"].startswith("kafka.protocol.")
    assert report["same"] and report["cls"].startswith("kafka.protocol.")


def test_building_the_api_table_never_puts_a_server_class_in_kafka_pythons_table_even_for_a_moment() -> None:
    """The API table builds classes on first use, while a kafka-python client's threads may be reading
    kafka-python's response table: no assignment of a project class may reach that table at all."""
    script = """
import json
from kafka.protocol.api_header import ResponseClassRegistry
class Watched(dict):
    def __setitem__(self, key, value):
        seen.append(f"{key}={value.__module__}")
        super().__setitem__(key, value)
seen = []
ResponseClassRegistry._response_class_registry = Watched(ResponseClassRegistry._response_class_registry)
import kafka.protocol.metadata.metadata
from quorum.wire.protocol import APIS
[api.response for api in APIS.values()]
print(json.dumps(seen))
"""
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True)
    assert [entry for entry in json.loads(result.stdout) if "quorum" in entry] == []


@pytest.mark.parametrize("schema", [MetadataRequest, MetadataResponse, FindCoordinatorResponse],
                         ids=lambda schema: schema.__name__)
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_kafka_python_client_classes_still_round_trip(schema: type[ApiMessage], data: st.DataObject) -> None:
    """kafka-python's own classes (MetadataResponse with its bitfield patch) work beside the project's."""
    message = data.draw(versioned_messages(schema))
    decoded = schema.decode(message.encode(), version=message.version)
    assert decoded == message


KAFKA_PYTHON_SCHEMA_NAMES = sorted(
    entry.name.removesuffix(".json") for entry in importlib.resources.files(KAFKA_PYTHON_SCHEMAS).iterdir()
    if entry.name.endswith(("Request.json", "Response.json")))


@pytest.mark.parametrize("name", KAFKA_PYTHON_SCHEMA_NAMES)
@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_every_schema_kafka_python_ships_round_trips(name: str, data: st.DataObject) -> None:
    """The shared strategy builds valid messages of any schema, and kafka-python's engine reads them back."""
    schema = _kafka_python_class(name)
    message = data.draw(versioned_messages(schema))
    encoded = message.encode()
    assert schema.decode(encoded, version=message.version) == message


_KAFKA_PYTHON_CLASSES: dict[str, type[ApiMessage]] = {}


def _kafka_python_class(name: str) -> type[ApiMessage]:
    if name not in _KAFKA_PYTHON_CLASSES:
        _KAFKA_PYTHON_CLASSES[name] = define_message(name, KAFKA_PYTHON_SCHEMAS)
    return _KAFKA_PYTHON_CLASSES[name]
