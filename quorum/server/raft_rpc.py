"""Translate between the Raft core's message dataclasses and Kafka's KRaft RPCs on the wire.

The core speaks plain dataclasses (quorum.raft.interface); peers speak Vote v2, BeginQuorumEpoch
v1, EndQuorumEpoch v1 and Fetch v12 for the `__cluster_metadata-0` partition, as Kafka's
controllers do. This module is the only place that knows both shapes.
"""

from __future__ import annotations

from typing import Any

from quorum.raft import interface as raft
from quorum.wire.errors import ErrorCode, MalformedRequestError
from quorum.wire.protocol import APIS, Api

METADATA_TOPIC = "__cluster_metadata"
METADATA_PARTITION = 0

VOTE, BEGIN_QUORUM_EPOCH, END_QUORUM_EPOCH, FETCH = 52, 53, 54, 1
WIRE_VERSIONS = {VOTE: 2, BEGIN_QUORUM_EPOCH: 1, END_QUORUM_EPOCH: 1, FETCH: 12}
RAFT_API_KEYS = tuple(WIRE_VERSIONS)

_REQUEST_KEYS = {raft.VoteRequest: VOTE, raft.BeginQuorumEpochRequest: BEGIN_QUORUM_EPOCH,
                 raft.EndQuorumEpochRequest: END_QUORUM_EPOCH, raft.FetchRequest: FETCH}


def request_api(message: raft.Message) -> tuple[Api, int]:
    """The API and wire version a core request travels as."""
    key = _REQUEST_KEYS[type(message)]
    return APIS[key], WIRE_VERSIONS[key]


def _single_partition(topics: list[Any], what: str) -> Any:
    for topic in topics or ():
        name = getattr(topic, "topic_name", None) or getattr(topic, "topic", None)
        if name == METADATA_TOPIC:
            for partition in topic.partitions:
                index = getattr(partition, "partition_index", getattr(partition, "partition", None))
                if index == METADATA_PARTITION:
                    return partition
    raise MalformedRequestError(f"{what} does not name {METADATA_TOPIC}-{METADATA_PARTITION}")


# ---------------------------------------------------------------------------------------------
# Requests: core -> wire -> core


def encode_request(message: raft.Message) -> Any:
    """The wire request body for a core request."""
    api, _ = request_api(message)
    schema = api.request
    if isinstance(message, raft.VoteRequest):
        part = schema.TopicData.PartitionData(
            partition_index=METADATA_PARTITION, replica_epoch=message.candidate_epoch, replica_id=message.candidate_id,
            last_offset_epoch=message.last_epoch, last_offset=message.last_offset, pre_vote=message.pre_vote)
        return schema(cluster_id=message.cluster_id, voter_id=-1,
                      topics=[schema.TopicData(topic_name=METADATA_TOPIC, partitions=[part])])
    if isinstance(message, raft.BeginQuorumEpochRequest):
        part = schema.TopicData.PartitionData(partition_index=METADATA_PARTITION, leader_id=message.leader_id,
                                              leader_epoch=message.leader_epoch)
        return schema(cluster_id=message.cluster_id, voter_id=-1, leader_endpoints=[],
                      topics=[schema.TopicData(topic_name=METADATA_TOPIC, partitions=[part])])
    if isinstance(message, raft.EndQuorumEpochRequest):
        data = schema.TopicData.PartitionData
        part = data(partition_index=METADATA_PARTITION, leader_id=message.leader_id, leader_epoch=message.leader_epoch,
                    preferred_candidates=[data.ReplicaInfo(candidate_id=c) for c in message.preferred_successors])
        return schema(cluster_id=message.cluster_id, leader_endpoints=[],
                      topics=[schema.TopicData(topic_name=METADATA_TOPIC, partitions=[part])])
    if isinstance(message, raft.FetchRequest):
        part = schema.FetchTopic.FetchPartition(
            partition=METADATA_PARTITION, current_leader_epoch=message.current_leader_epoch,
            fetch_offset=message.fetch_offset, last_fetched_epoch=message.last_fetched_epoch, log_start_offset=-1,
            partition_max_bytes=message.max_bytes)
        return schema(cluster_id=message.cluster_id, replica_id=message.replica_id, max_wait_ms=message.max_wait_ms,
                      min_bytes=1, max_bytes=message.max_bytes, isolation_level=0, session_id=0, session_epoch=-1,
                      topics=[schema.FetchTopic(topic=METADATA_TOPIC, partitions=[part])],
                      forgotten_topics_data=[], rack_id="")
    raise TypeError(f"not a Raft request: {message!r}")


def decode_request(api_key: int, body: Any) -> tuple[int, raft.Message]:
    """(sender node id, core request) from a decoded wire request."""
    if api_key == VOTE:
        p = _single_partition(body.topics, "Vote")
        return p.replica_id, raft.VoteRequest(body.cluster_id, p.replica_epoch, p.replica_id, p.last_offset_epoch,
                                              p.last_offset, bool(p.pre_vote))
    if api_key == BEGIN_QUORUM_EPOCH:
        p = _single_partition(body.topics, "BeginQuorumEpoch")
        return p.leader_id, raft.BeginQuorumEpochRequest(body.cluster_id, p.leader_id, p.leader_epoch)
    if api_key == END_QUORUM_EPOCH:
        p = _single_partition(body.topics, "EndQuorumEpoch")
        successors = tuple(c.candidate_id for c in p.preferred_candidates or ())
        return p.leader_id, raft.EndQuorumEpochRequest(body.cluster_id, p.leader_id, p.leader_epoch, successors)
    if api_key == FETCH:
        p = _single_partition(body.topics, "Fetch")
        return body.replica_id, raft.FetchRequest(body.cluster_id, body.replica_id, p.current_leader_epoch,
                                                  p.fetch_offset, p.last_fetched_epoch, p.partition_max_bytes,
                                                  body.max_wait_ms)
    raise MalformedRequestError(f"API key {api_key} is not a Raft RPC")


# ---------------------------------------------------------------------------------------------
# Responses: core -> wire -> core


def encode_response(api_key: int, message: raft.Message) -> Any:
    """The wire response body for a core reply to a request of `api_key`."""
    schema = APIS[api_key].response
    if api_key == FETCH:
        assert isinstance(message, raft.FetchResponse)
        data = schema.FetchableTopicResponse.PartitionData
        diverging = data.EpochEndOffset(epoch=message.diverging_epoch.epoch,
                                        end_offset=message.diverging_epoch.offset) if message.diverging_epoch else None
        snapshot = data.SnapshotId(end_offset=message.snapshot_id.offset,
                                   epoch=message.snapshot_id.epoch) if message.snapshot_id else None
        part = data(partition_index=METADATA_PARTITION, error_code=message.error,
                    high_watermark=message.high_watermark, last_stable_offset=message.high_watermark,
                    log_start_offset=message.log_start_offset, diverging_epoch=diverging,
                    current_leader=data.LeaderIdAndEpoch(leader_id=message.leader_id,
                                                         leader_epoch=message.leader_epoch),
                    snapshot_id=snapshot, aborted_transactions=None, preferred_read_replica=-1,
                    records=message.records)
        return schema(throttle_time_ms=0, error_code=ErrorCode.NONE, session_id=0,
                      responses=[schema.FetchableTopicResponse(topic=METADATA_TOPIC, partitions=[part])])
    data = schema.TopicData.PartitionData
    fields = {"partition_index": METADATA_PARTITION, "error_code": message.error, "leader_id": message.leader_id,
              "leader_epoch": message.leader_epoch}
    if api_key == VOTE:
        assert isinstance(message, raft.VoteResponse)
        fields["vote_granted"] = message.vote_granted
    return schema(error_code=ErrorCode.NONE, topics=[schema.TopicData(topic_name=METADATA_TOPIC,
                                                                     partitions=[data(**fields)])])


def decode_response(api_key: int, body: Any, request: raft.Message) -> raft.Message:
    """The core response for a wire response to `request`."""
    if api_key == FETCH:
        top_error = body.error_code
        p = next(p for t in body.responses if t.topic == METADATA_TOPIC for p in t.partitions)
        leader = p.current_leader
        diverging = raft.OffsetAndEpoch(p.diverging_epoch.end_offset, p.diverging_epoch.epoch) \
            if p.diverging_epoch is not None and p.diverging_epoch.epoch >= 0 else None
        snapshot = raft.OffsetAndEpoch(p.snapshot_id.end_offset, p.snapshot_id.epoch) \
            if p.snapshot_id is not None and p.snapshot_id.epoch >= 0 else None
        return raft.FetchResponse(top_error or p.error_code, leader.leader_id if leader else -1,
                                  leader.leader_epoch if leader else -1, p.high_watermark, p.log_start_offset,
                                  bytes(p.records or b""), diverging, snapshot)
    p = _single_partition(body.topics, APIS[api_key].name)
    error = body.error_code or p.error_code
    if api_key == VOTE:
        assert isinstance(request, raft.VoteRequest)
        return raft.VoteResponse(error, p.leader_id, p.leader_epoch, bool(p.vote_granted), request.pre_vote)
    if api_key == BEGIN_QUORUM_EPOCH:
        return raft.BeginQuorumEpochResponse(error, p.leader_id, p.leader_epoch)
    if api_key == END_QUORUM_EPOCH:
        return raft.EndQuorumEpochResponse(error, p.leader_id, p.leader_epoch)
    raise MalformedRequestError(f"API key {api_key} is not a Raft RPC")
