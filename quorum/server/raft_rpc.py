"""Translate between the Raft core's message dataclasses and Kafka's KRaft RPCs on the wire.

The core speaks plain dataclasses (quorum.raft.interface); peers speak Vote v2, BeginQuorumEpoch
v1, EndQuorumEpoch v1, Fetch v12 and FetchSnapshot v0 (KIP-630) for the `__cluster_metadata-0`
partition, as Kafka's controllers do. This module is the only place that knows both shapes.

Optional wire structs map to None in the core: Fetch's tagged DivergingEpoch and SnapshotId
(KIP-595, KIP-630) are absent when they hold their -1 defaults, and a leader that is not known is
-1/-1 in the tagged CurrentLeader of Fetch and FetchSnapshot responses.
"""

from __future__ import annotations

from typing import Any

from quorum.controller.snapshot_coordinator import SnapshotReport
from quorum.raft import interface as raft
from quorum.wire.errors import ErrorCode, MalformedRequestError
from quorum.wire.protocol import APIS, Api

METADATA_TOPIC = "__cluster_metadata"
METADATA_PARTITION = 0

VOTE, BEGIN_QUORUM_EPOCH, END_QUORUM_EPOCH, FETCH, FETCH_SNAPSHOT = 52, 53, 54, 1, 59
WIRE_VERSIONS = {VOTE: 2, BEGIN_QUORUM_EPOCH: 1, END_QUORUM_EPOCH: 1, FETCH: 12, FETCH_SNAPSHOT: 0}
RAFT_API_KEYS = tuple(WIRE_VERSIONS)

_REQUEST_KEYS = {raft.VoteRequest: VOTE, raft.BeginQuorumEpochRequest: BEGIN_QUORUM_EPOCH,
                 raft.EndQuorumEpochRequest: END_QUORUM_EPOCH, raft.FetchRequest: FETCH,
                 raft.FetchSnapshotRequest: FETCH_SNAPSHOT}


def request_api(message: raft.Message) -> tuple[Api, int]:
    """The API and wire version a core request travels as."""
    key = _REQUEST_KEYS[type(message)]
    return APIS[key], WIRE_VERSIONS[key]


def _first_attribute(item: Any, names: tuple[str, ...]) -> Any:
    return next((getattr(item, name) for name in names if hasattr(item, name)), None)


# The KRaft schemas do not agree on field names: Vote and its kin say TopicName/PartitionIndex,
# Fetch says Topic/Partition, FetchSnapshot says Name and Partition (request) or Index (response).
_TOPIC_NAMES = ("topic_name", "topic", "name")
_PARTITION_INDEXES = ("partition_index", "partition", "index")


def _find_partition(topics: list[Any] | None) -> Any | None:
    for topic in topics or ():
        if _first_attribute(topic, _TOPIC_NAMES) == METADATA_TOPIC:
            for partition in topic.partitions or ():
                if _first_attribute(partition, _PARTITION_INDEXES) == METADATA_PARTITION:
                    return partition
    return None


def _single_partition(topics: list[Any] | None, what: str) -> Any:
    partition = _find_partition(topics)
    if partition is None:
        raise MalformedRequestError(f"{what} does not name {METADATA_TOPIC}-{METADATA_PARTITION}")
    return partition


def _offset_and_epoch(wire: Any) -> raft.OffsetAndEpoch | None:
    """A SnapshotId or EpochEndOffset struct; None when left out or negative (its -1 defaults mean unset)."""
    if wire is None or wire.epoch < 0 or wire.end_offset < 0:
        return None
    return raft.OffsetAndEpoch(wire.end_offset, wire.epoch)


def _leader(wire: Any) -> tuple[int, int]:
    """(leader id, leader epoch) of a tagged CurrentLeader, -1/-1 when it was left out."""
    return (wire.leader_id, wire.leader_epoch) if wire is not None else (-1, -1)


# ---------------------------------------------------------------------------------------------
# Requests: core -> wire -> core


def encode_request(message: raft.Message, snapshot_report: SnapshotReport | None = None) -> Any:
    """The wire request body for a core request; a Fetch carries `snapshot_report` (KIP-631) in its tag."""
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
                      forgotten_topics_data=[], rack_id="", snapshot_report=_wire_report(schema, snapshot_report))
    if isinstance(message, raft.FetchSnapshotRequest):
        snapshot = schema.TopicSnapshot.PartitionSnapshot
        part = snapshot(partition=METADATA_PARTITION, current_leader_epoch=message.current_leader_epoch,
                        snapshot_id=snapshot.SnapshotId(end_offset=message.snapshot_id.offset,
                                                        epoch=message.snapshot_id.epoch),
                        position=message.position)
        return schema(cluster_id=message.cluster_id, replica_id=message.replica_id, max_bytes=message.max_bytes,
                      topics=[schema.TopicSnapshot(name=METADATA_TOPIC, partitions=[part])])
    raise TypeError(f"not a Raft request: {message!r}")


def _wire_report(schema: Any, report: SnapshotReport | None) -> Any:
    if report is None:
        return None
    return schema.SnapshotReport(latest_snapshot_end_offset=report.latest_snapshot_offset,
                                 bytes_since_snapshot=report.bytes_since_snapshot, snapshot_due=report.due,
                                 snapshot_in_progress=report.in_progress)


def snapshot_report_of(body: Any) -> SnapshotReport | None:
    """The KIP-631 snapshot report a Fetch request carries; None from a replica that sends none
    (Apache Kafka's, or this project's before coordination)."""
    wire = getattr(body, "snapshot_report", None)
    if wire is None:
        return None
    return SnapshotReport(wire.latest_snapshot_end_offset, wire.bytes_since_snapshot, bool(wire.snapshot_due),
                          bool(wire.snapshot_in_progress))


def snapshot_granted_of(body: Any) -> bool:
    """Whether a Fetch response lets the fetching replica write a snapshot now (KIP-631)."""
    return bool(getattr(body, "snapshot_granted", False))


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
    if api_key == FETCH_SNAPSHOT:
        p = _single_partition(body.topics, "FetchSnapshot")
        snapshot_id = raft.OffsetAndEpoch(p.snapshot_id.end_offset, p.snapshot_id.epoch)
        return body.replica_id, raft.FetchSnapshotRequest(body.cluster_id, body.replica_id, p.current_leader_epoch,
                                                          snapshot_id, p.position, body.max_bytes)
    raise MalformedRequestError(f"API key {api_key} is not a Raft RPC")


# ---------------------------------------------------------------------------------------------
# Responses: core -> wire -> core


def encode_response(api_key: int, message: raft.Message, snapshot_granted: bool = False) -> Any:
    """The wire response body for a core reply to a request of `api_key`; a Fetch answer says
    whether the fetching replica may write a snapshot now (`snapshot_granted`, KIP-631)."""
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
                      responses=[schema.FetchableTopicResponse(topic=METADATA_TOPIC, partitions=[part])],
                      snapshot_granted=snapshot_granted)
    if api_key == FETCH_SNAPSHOT:
        assert isinstance(message, raft.FetchSnapshotResponse)
        snapshot = schema.TopicSnapshot.PartitionSnapshot
        part = snapshot(index=METADATA_PARTITION, error_code=message.error,
                        snapshot_id=snapshot.SnapshotId(end_offset=message.snapshot_id.offset,
                                                        epoch=message.snapshot_id.epoch),
                        current_leader=snapshot.LeaderIdAndEpoch(leader_id=message.leader_id,
                                                                 leader_epoch=message.leader_epoch),
                        size=message.size, position=message.position, unaligned_records=message.data)
        return schema(throttle_time_ms=0, error_code=ErrorCode.NONE,
                      topics=[schema.TopicSnapshot(name=METADATA_TOPIC, partitions=[part])])
    data = schema.TopicData.PartitionData
    fields = {"partition_index": METADATA_PARTITION, "error_code": message.error, "leader_id": message.leader_id,
              "leader_epoch": message.leader_epoch}
    if api_key == VOTE:
        assert isinstance(message, raft.VoteResponse)
        fields["vote_granted"] = message.vote_granted
    return schema(error_code=ErrorCode.NONE, topics=[schema.TopicData(topic_name=METADATA_TOPIC,
                                                                     partitions=[data(**fields)])])


def decode_response(api_key: int, body: Any, request: raft.Message) -> raft.Message:
    """The core response for a wire response to `request`.

    Kafka answers a request it refuses as a whole (INCONSISTENT_CLUSTER_ID, INVALID_REQUEST) with
    only the top-level error and no partitions; that becomes the core's response with the error
    and no known leader. A response that has neither an error nor our partition is malformed.
    """
    if api_key not in WIRE_VERSIONS:
        raise MalformedRequestError(f"API key {api_key} is not a Raft RPC")
    top_error = body.error_code
    p = _find_partition(body.responses if api_key == FETCH else body.topics)
    if p is None and not top_error:
        raise MalformedRequestError(
            f"{APIS[api_key].name} response does not name {METADATA_TOPIC}-{METADATA_PARTITION}")
    if p is None:
        return _refused(api_key, top_error, request)
    error = top_error or p.error_code
    if api_key == FETCH:
        leader_id, leader_epoch = _leader(p.current_leader)
        return raft.FetchResponse(error, leader_id, leader_epoch, p.high_watermark, p.log_start_offset,
                                  bytes(p.records or b""), _offset_and_epoch(p.diverging_epoch),
                                  _offset_and_epoch(p.snapshot_id))
    if api_key == FETCH_SNAPSHOT:
        leader_id, leader_epoch = _leader(p.current_leader)
        return raft.FetchSnapshotResponse(error, leader_id, leader_epoch,
                                          raft.OffsetAndEpoch(p.snapshot_id.end_offset, p.snapshot_id.epoch),
                                          p.size, p.position, bytes(p.unaligned_records or b""))
    if api_key == VOTE:
        assert isinstance(request, raft.VoteRequest)
        return raft.VoteResponse(error, p.leader_id, p.leader_epoch, bool(p.vote_granted), request.pre_vote)
    if api_key == BEGIN_QUORUM_EPOCH:
        return raft.BeginQuorumEpochResponse(error, p.leader_id, p.leader_epoch)
    return raft.EndQuorumEpochResponse(error, p.leader_id, p.leader_epoch)


def _refused(api_key: int, error: int, request: raft.Message) -> raft.Message:
    """The core response for a wire response that carries only a top-level error."""
    if api_key == FETCH:
        return raft.FetchResponse(error, -1, -1, -1, -1)
    if api_key == FETCH_SNAPSHOT:
        assert isinstance(request, raft.FetchSnapshotRequest)
        return raft.FetchSnapshotResponse(error, -1, -1, request.snapshot_id)
    if api_key == VOTE:
        assert isinstance(request, raft.VoteRequest)
        return raft.VoteResponse(error, -1, -1, False, request.pre_vote)
    if api_key == BEGIN_QUORUM_EPOCH:
        return raft.BeginQuorumEpochResponse(error, -1, -1)
    return raft.EndQuorumEpochResponse(error, -1, -1)
