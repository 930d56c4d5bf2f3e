"""The core's messages survive the trip through Kafka's KRaft RPCs on the wire, both ways."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from quorum.raft import interface as raft
from quorum.server import raft_rpc
from quorum.wire.framing import RequestHeader
from quorum.wire.protocol import decode_request, decode_response, encode_request, encode_response

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
)


def replies_for(request: raft.Message) -> st.SearchStrategy[raft.Message]:
    errors = st.sampled_from([0, 6, 74, 75, 104])
    if isinstance(request, raft.VoteRequest):
        return st.builds(raft.VoteResponse, errors, ids | st.just(-1), epochs, st.booleans(), st.just(request.pre_vote))
    if isinstance(request, raft.BeginQuorumEpochRequest):
        return st.builds(raft.BeginQuorumEpochResponse, errors, ids, epochs)
    if isinstance(request, raft.EndQuorumEpochRequest):
        return st.builds(raft.EndQuorumEpochResponse, errors, ids, epochs)
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
