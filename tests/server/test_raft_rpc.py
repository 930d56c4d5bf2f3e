"""The core's messages survive the trip through Kafka's KRaft RPCs on the wire, both ways.

Also what only the wire can say: a request that does not name `__cluster_metadata-0` is refused,
tagged structs at their -1 defaults read as absent, and a response Kafka refuses as a whole (only
a top-level error, no partitions) still reaches the core as that error.
"""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from quorum.controller.snapshot_coordinator import SnapshotReport
from quorum.raft import interface as raft
from quorum.server import raft_rpc
from quorum.wire.errors import ErrorCode, MalformedRequestError
from quorum.wire.framing import RequestHeader
from quorum.wire.protocol import APIS, decode_request, decode_response, encode_request, encode_response

ids = st.integers(0, 2**31 - 1)
epochs = st.integers(0, 2**31 - 1)
offsets = st.integers(0, 2**62)
cluster_ids = st.none() | st.text(min_size=1, max_size=22)
positions = st.builds(raft.OffsetAndEpoch, offsets, epochs)

requests = st.one_of(
    st.builds(raft.VoteRequest, cluster_ids, epochs, ids, epochs, offsets, st.booleans()),
    st.builds(raft.BeginQuorumEpochRequest, cluster_ids, ids, epochs),
    st.builds(raft.EndQuorumEpochRequest, cluster_ids, ids, epochs, st.lists(ids, max_size=4).map(tuple)),
    st.builds(raft.FetchRequest, cluster_ids, ids, epochs, offsets, epochs, st.integers(1, 2**31 - 1),
              st.integers(0, 60_000)),
    st.builds(raft.FetchSnapshotRequest, cluster_ids, ids, epochs | st.just(-1), positions, offsets,
              st.integers(0, 2**31 - 1)),
)


def replies_for(request: raft.Message) -> st.SearchStrategy[raft.Message]:
    errors = st.sampled_from([0, 6, 74, 75, 104])
    if isinstance(request, raft.VoteRequest):
        return st.builds(raft.VoteResponse, errors, ids | st.just(-1), epochs, st.booleans(), st.just(request.pre_vote))
    if isinstance(request, raft.BeginQuorumEpochRequest):
        return st.builds(raft.BeginQuorumEpochResponse, errors, ids, epochs)
    if isinstance(request, raft.EndQuorumEpochRequest):
        return st.builds(raft.EndQuorumEpochResponse, errors, ids, epochs)
    if isinstance(request, raft.FetchSnapshotRequest):
        snapshot_errors = st.sampled_from([0, 6, 74, 75, 98, 99, 104])
        return st.builds(raft.FetchSnapshotResponse, snapshot_errors, ids | st.just(-1), epochs | st.just(-1),
                         st.just(request.snapshot_id) | positions, offsets | st.just(-1), offsets | st.just(-1),
                         st.binary(max_size=64))
    return st.builds(raft.FetchResponse, errors, ids | st.just(-1), epochs, offsets, offsets, st.binary(max_size=64),
                     st.none() | positions, st.none() | positions)


@given(data=st.data(), request=requests, correlation_id=st.integers(0, 2**31 - 1))
def test_request_and_reply_round_trip(data, request, correlation_id):
    api, version = raft_rpc.request_api(request)
    framed = encode_request(api, RequestHeader(api.key, version, correlation_id, "node-1"),
                            raft_rpc.encode_request(request))
    received = decode_request(framed[4:])
    sender, decoded = raft_rpc.decode_request(api.key, received.body)
    assert decoded == request
    senders = (getattr(request, name, None) for name in ("candidate_id", "leader_id", "replica_id"))
    assert sender == next(s for s in senders if s is not None)

    reply = data.draw(replies_for(request))
    wire = encode_response(received, raft_rpc.encode_response(api.key, reply))
    got_correlation, body = decode_response(api, version, wire[4:])
    assert got_correlation == correlation_id
    assert raft_rpc.decode_response(api.key, body, request) == reply


def round_trip_response(request: raft.Message, wire_body) -> raft.Message:
    """What the core gets from `wire_body` once it has crossed the wire as the answer to `request`."""
    api, version = raft_rpc.request_api(request)
    framed = encode_request(api, RequestHeader(api.key, version, 1, "node-1"), raft_rpc.encode_request(request))
    wire = encode_response(decode_request(framed[4:]), wire_body)
    _, body = decode_response(api, version, wire[4:])
    return raft_rpc.decode_response(api.key, body, request)


def field_of(schema_json: dict, *path: str) -> dict:
    fields = schema_json["fields"]
    for name in path:
        found = next(f for f in fields if f["name"] == name)
        fields = found.get("fields", [])
    return found


SNAPSHOT_REQUEST = raft.FetchSnapshotRequest("cluster", 2, 5, raft.OffsetAndEpoch(100, 4), 0, 1 << 20)
FETCH_REQUEST = raft.FetchRequest("cluster", 2, 5, 10, 4)


def test_fetch_snapshot_travels_as_api_59_v0_and_is_a_raft_rpc():
    api, version = raft_rpc.request_api(SNAPSHOT_REQUEST)
    assert (api.key, api.name, version) == (59, "FetchSnapshot", 0)
    assert raft_rpc.FETCH_SNAPSHOT in raft_rpc.RAFT_API_KEYS
    assert APIS[59].supports(raft_rpc.WIRE_VERSIONS[raft_rpc.FETCH_SNAPSHOT])


def test_fetch_snapshot_chunk_keeps_its_bytes_and_leader():
    chunk = raft.FetchSnapshotResponse(0, 1, 5, raft.OffsetAndEpoch(100, 4), size=3000, position=1024,
                                       data=bytes(range(256)) * 4)
    assert round_trip_response(SNAPSHOT_REQUEST, raft_rpc.encode_response(59, chunk)) == chunk


@pytest.mark.parametrize("topic, partition", [("__cluster_metadata", 1), ("orders", 0)])
def test_fetch_snapshot_for_another_partition_is_malformed(topic, partition):
    schema = APIS[59].request
    part = schema.TopicSnapshot.PartitionSnapshot(
        partition=partition, current_leader_epoch=5,
        snapshot_id=schema.TopicSnapshot.PartitionSnapshot.SnapshotId(end_offset=100, epoch=4), position=0)
    body = schema(cluster_id=None, replica_id=2, max_bytes=1024,
                  topics=[schema.TopicSnapshot(name=topic, partitions=[part])])
    with pytest.raises(MalformedRequestError, match="FetchSnapshot does not name __cluster_metadata-0"):
        raft_rpc.decode_request(59, body)


def test_fetch_snapshot_without_topics_is_malformed():
    body = APIS[59].request(cluster_id=None, replica_id=2, max_bytes=1024, topics=[])
    with pytest.raises(MalformedRequestError):
        raft_rpc.decode_request(59, body)


@pytest.mark.parametrize("snapshot_id", [None, raft.OffsetAndEpoch(0, 0), raft.OffsetAndEpoch(2**40, 7)])
def test_fetch_response_snapshot_id_is_the_tagged_field_and_absent_means_none(snapshot_id):
    reply = raft.FetchResponse(0, 1, 5, 120, 100, snapshot_id=snapshot_id)
    body = raft_rpc.encode_response(raft_rpc.FETCH, reply)
    encoded = body.encode(version=12)
    # Tag 2 of the partition (KIP-630): written only when there is a snapshot to point at.
    assert field_of(APIS[1].response.json, "Responses", "Partitions", "SnapshotId")["tag"] == 2
    bare = raft_rpc.encode_response(raft_rpc.FETCH, raft.FetchResponse(0, 1, 5, 120, 100)).encode(version=12)
    assert (len(encoded) > len(bare)) == (snapshot_id is not None)
    assert round_trip_response(FETCH_REQUEST, body) == reply


def test_fetch_response_snapshot_id_at_its_defaults_reads_as_absent():
    schema = APIS[1].response
    data = schema.FetchableTopicResponse.PartitionData
    part = data(partition_index=0, error_code=0, high_watermark=120, last_stable_offset=120, log_start_offset=100,
                diverging_epoch=data.EpochEndOffset(epoch=-1, end_offset=-1),
                current_leader=data.LeaderIdAndEpoch(leader_id=1, leader_epoch=5),
                snapshot_id=data.SnapshotId(end_offset=-1, epoch=-1), aborted_transactions=None,
                preferred_read_replica=-1, records=b"")
    body = schema(throttle_time_ms=0, error_code=0, session_id=0,
                  responses=[schema.FetchableTopicResponse(topic="__cluster_metadata", partitions=[part])])
    got = round_trip_response(FETCH_REQUEST, body)
    assert got.snapshot_id is None and got.diverging_epoch is None
    assert (got.leader_id, got.leader_epoch, got.high_watermark, got.log_start_offset) == (1, 5, 120, 100)


@pytest.mark.parametrize("request_, expected", [
    (SNAPSHOT_REQUEST, raft.FetchSnapshotResponse(104, -1, -1, SNAPSHOT_REQUEST.snapshot_id)),
    (FETCH_REQUEST, raft.FetchResponse(104, -1, -1, -1, -1)),
    (raft.VoteRequest("cluster", 5, 2, 4, 10, pre_vote=True), raft.VoteResponse(104, -1, -1, False, True)),
    (raft.BeginQuorumEpochRequest("cluster", 2, 5), raft.BeginQuorumEpochResponse(104, -1, -1)),
    (raft.EndQuorumEpochRequest("cluster", 2, 5, (3,)), raft.EndQuorumEpochResponse(104, -1, -1)),
])
def test_a_response_with_only_a_top_level_error_reaches_the_core_as_that_error(request_, expected):
    """Kafka refuses a whole request (INCONSISTENT_CLUSTER_ID) with no partitions in the answer."""
    api, _ = raft_rpc.request_api(request_)
    schema = api.response
    fields = {"error_code": ErrorCode.INCONSISTENT_CLUSTER_ID}
    if api.key == raft_rpc.FETCH:
        fields.update(throttle_time_ms=0, session_id=0, responses=[])
    elif api.key == raft_rpc.FETCH_SNAPSHOT:
        fields.update(throttle_time_ms=0, topics=[])
    else:
        fields.update(topics=[])
    assert round_trip_response(request_, schema(**fields)) == expected


def test_a_response_without_error_or_partition_is_malformed():
    body = APIS[59].response(throttle_time_ms=0, error_code=0, topics=[])
    with pytest.raises(MalformedRequestError, match="FetchSnapshot response does not name"):
        raft_rpc.decode_response(59, body, SNAPSHOT_REQUEST)


@given(st.builds(SnapshotReport, st.integers(-1, 2**62), st.integers(0, 2**62), st.booleans(), st.booleans()),
       st.booleans())
def test_fetch_carries_the_snapshot_report_and_its_answer_the_grant(report, granted):
    """KIP-631: a replica's Fetch is its heartbeat to the active controller; the tags travel both ways."""
    api, version = raft_rpc.request_api(FETCH_REQUEST)
    framed = encode_request(api, RequestHeader(api.key, version, 7, "node-2"),
                            raft_rpc.encode_request(FETCH_REQUEST, report))
    received = decode_request(framed[4:])
    assert raft_rpc.snapshot_report_of(received.body) == report
    assert raft_rpc.decode_request(api.key, received.body)[1] == FETCH_REQUEST
    answer = raft.FetchResponse(0, 1, 5, 10, 0)
    wire = encode_response(received, raft_rpc.encode_response(api.key, answer, granted))
    _, body = decode_response(api, version, wire[4:])
    assert raft_rpc.snapshot_granted_of(body) is granted
    assert raft_rpc.decode_response(api.key, body, FETCH_REQUEST) == answer


def test_a_fetch_without_the_report_reads_as_none_and_its_answer_grants_nothing():
    """What Apache Kafka's replicas send, and what they get back."""
    api, version = raft_rpc.request_api(FETCH_REQUEST)
    framed = encode_request(api, RequestHeader(api.key, version, 7, "node-2"), raft_rpc.encode_request(FETCH_REQUEST))
    received = decode_request(framed[4:])
    assert raft_rpc.snapshot_report_of(received.body) is None
    wire = encode_response(received, raft_rpc.encode_response(api.key, raft.FetchResponse(0, 1, 5, 10, 0)))
    _, body = decode_response(api, version, wire[4:])
    assert raft_rpc.snapshot_granted_of(body) is False
