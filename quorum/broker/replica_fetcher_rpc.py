"""The replica fetcher's requests on the wire: its plain dataclasses to Kafka RPCs and back.

Fetch goes as a full sessionless request (SessionId 0, SessionEpoch -1) at v15, which names topics
by id and carries KIP-903's ReplicaState (this broker's id and registration epoch); the fetcher
never uses incremental sessions. OffsetForLeaderEpoch (v4) and ListOffsets name topics by name and
carry ReplicaId, so the leader answers a replica (its log end, not its high watermark). Every
broker of this cluster serves these versions, so no ApiVersions round trip is made for them.

ListOffsets goes at v7 unless a timestamp spec needs more, as Kafka gates them: -4 (earliest
local, KIP-405) v8, -5 (latest tiered) v9, -6 (earliest pending upload, KIP-1023) v11. For those
the leader's ApiVersions is asked once per leader (`LeaderVersions`); a timestamp its versions do
not carry is answered UNSUPPORTED_VERSION here without being sent, which the fetcher hands to
its out-of-range handler (KIP-1023 then falls back to KIP-405's path).
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from typing import Any

from quorum.broker import replica_fetcher_events as ev
from quorum.net.peer_client import PeerClient
from quorum.raft.interface import OffsetAndEpoch
from quorum.wire.errors import ErrorCode
from quorum.wire.protocol import APIS

FETCH = APIS[1]
OFFSET_FOR_LEADER_EPOCH = APIS[23]
LIST_OFFSETS = APIS[2]
API_VERSIONS = APIS[18]
FETCH_VERSION = 15
OFFSET_FOR_LEADER_EPOCH_VERSION = 4
LIST_OFFSETS_VERSION = 7
API_VERSIONS_VERSION = 3
READ_UNCOMMITTED = 0
LIST_OFFSETS_VERSION_FOR = {-4: 8, -5: 9, -6: 11}
"""The first ListOffsets version carrying each timestamp spec above v7 (Kafka's ListOffsetsRequest)."""


def list_offsets_version(timestamp: int) -> int:
    return LIST_OFFSETS_VERSION_FOR.get(timestamp, LIST_OFFSETS_VERSION)


@dataclass(slots=True)
class LeaderVersions:
    """The newest ListOffsets version one leader serves, from its ApiVersions, asked once."""

    list_offsets_max: int | None = None

    async def list_offsets(self, peer: PeerClient) -> int:
        if self.list_offsets_max is None:
            body = await peer.request(API_VERSIONS, API_VERSIONS_VERSION, API_VERSIONS.request(
                client_software_name="quorum-replica-fetcher", client_software_version="1"))
            served = {key.api_key: key.max_version for key in body.api_keys or ()} \
                if body.error_code == ErrorCode.NONE else {}
            self.list_offsets_max = served.get(LIST_OFFSETS.key, -1)
        return self.list_offsets_max


async def send(peer: PeerClient, request: ev.Request, versions: LeaderVersions | None = None) -> \
        ev.FetchResponse | ev.OffsetsForLeaderEpochResponse | ev.ListOffsetsResponse:
    """One request to the leader and its answer as the core's dataclass; PeerUnavailable on failure.
    `versions` is what is known of the leader's versions (each leader link keeps one)."""
    if isinstance(request, ev.FetchRequest):
        body = await peer.request(FETCH, FETCH_VERSION, encode_fetch(request))
        return decode_fetch(request, body)
    if isinstance(request, ev.OffsetsForLeaderEpochRequest):
        body = await peer.request(OFFSET_FOR_LEADER_EPOCH, OFFSET_FOR_LEADER_EPOCH_VERSION, encode_epochs(request))
        return decode_epochs(body)
    return await send_list_offsets(peer, request, versions if versions is not None else LeaderVersions())


async def send_list_offsets(peer: PeerClient, request: ev.ListOffsetsRequest,
                            versions: LeaderVersions) -> ev.ListOffsetsResponse:
    """ListOffsets at the lowest version carrying every timestamp spec the leader serves; the
    specs it serves no version of are answered UNSUPPORTED_VERSION without asking."""
    needed = max(list_offsets_version(q.timestamp) for q in request.partitions)
    served = needed if needed <= LIST_OFFSETS_VERSION else await versions.list_offsets(peer)
    sendable = tuple(q for q in request.partitions if list_offsets_version(q.timestamp) <= served)
    answers = [ev.ListedOffset(q.topic_partition, ErrorCode.UNSUPPORTED_VERSION)
               for q in request.partitions if list_offsets_version(q.timestamp) > served]
    if sendable:
        version = max(list_offsets_version(q.timestamp) for q in sendable)
        body = await peer.request(LIST_OFFSETS, version,
                                  encode_list_offsets(ev.ListOffsetsRequest(request.replica_id, sendable)))
        answers += decode_list_offsets(body).partitions
    return ev.ListOffsetsResponse(ErrorCode.NONE, tuple(answers))


# -- Fetch ------------------------------------------------------------------------------------


def encode_fetch(request: ev.FetchRequest) -> Any:
    schema = FETCH.request
    topics: dict[uuid.UUID, list[Any]] = {}
    for p in request.partitions:
        topics.setdefault(p.topic_id, []).append(schema.FetchTopic.FetchPartition(
            partition=p.topic_partition[1], current_leader_epoch=p.current_leader_epoch, fetch_offset=p.fetch_offset,
            last_fetched_epoch=p.last_fetched_epoch, log_start_offset=p.log_start_offset,
            partition_max_bytes=p.partition_max_bytes))
    return schema(cluster_id=None, replica_id=-1,
                  replica_state=schema.ReplicaState(replica_id=request.replica_id,
                                                    replica_epoch=request.replica_epoch),
                  max_wait_ms=request.max_wait_ms, min_bytes=request.min_bytes, max_bytes=request.max_bytes,
                  isolation_level=READ_UNCOMMITTED, session_id=0, session_epoch=-1,
                  topics=[schema.FetchTopic(topic="", topic_id=topic_id, partitions=parts)
                          for topic_id, parts in topics.items()],
                  forgotten_topics_data=[], rack_id="")


def decode_fetch(request: ev.FetchRequest, body: Any) -> ev.FetchResponse:
    names = {(p.topic_id, p.topic_partition[1]): p.topic_partition for p in request.partitions}
    answers = []
    for topic in body.responses or ():
        for p in topic.partitions or ():
            tp = names.get((topic.topic_id, p.partition_index))
            if tp is None:
                continue
            if p.error_code != ErrorCode.NONE:
                answers.append(ev.FetchedPartition(tp, p.error_code))
                continue
            diverging = p.diverging_epoch
            found = (OffsetAndEpoch(diverging.end_offset, diverging.epoch)
                     if diverging is not None and diverging.epoch >= 0 and diverging.end_offset >= 0 else None)
            answers.append(ev.FetchedPartition(tp, ErrorCode.NONE, p.high_watermark, p.log_start_offset,
                                               bytes(p.records or b""), found))
    return ev.FetchResponse(body.error_code, tuple(answers))


# -- OffsetForLeaderEpoch -----------------------------------------------------------------------


def encode_epochs(request: ev.OffsetsForLeaderEpochRequest) -> Any:
    schema = OFFSET_FOR_LEADER_EPOCH.request
    topics: dict[str, list[Any]] = {}
    for q in request.partitions:
        topics.setdefault(q.topic_partition[0], []).append(schema.OffsetForLeaderTopic.OffsetForLeaderPartition(
            partition=q.topic_partition[1], current_leader_epoch=q.current_leader_epoch, leader_epoch=q.leader_epoch))
    return schema(replica_id=request.replica_id,
                  topics=[schema.OffsetForLeaderTopic(topic=name, partitions=parts) for name, parts in topics.items()])


def decode_epochs(body: Any) -> ev.OffsetsForLeaderEpochResponse:
    answers = [ev.EpochAnswer((topic.topic, p.partition), p.error_code, p.leader_epoch, p.end_offset)
               for topic in body.topics or () for p in topic.partitions or ()]
    return ev.OffsetsForLeaderEpochResponse(ErrorCode.NONE, tuple(answers))


# -- ListOffsets --------------------------------------------------------------------------------


def encode_list_offsets(request: ev.ListOffsetsRequest) -> Any:
    schema = LIST_OFFSETS.request
    topics: dict[str, list[Any]] = {}
    for q in request.partitions:
        topics.setdefault(q.topic_partition[0], []).append(schema.ListOffsetsTopic.ListOffsetsPartition(
            partition_index=q.topic_partition[1], current_leader_epoch=q.current_leader_epoch,
            timestamp=q.timestamp, max_num_offsets=1))
    return schema(replica_id=request.replica_id, isolation_level=READ_UNCOMMITTED, timeout_ms=0,
                  topics=[schema.ListOffsetsTopic(name=name, partitions=parts) for name, parts in topics.items()])


def decode_list_offsets(body: Any) -> ev.ListOffsetsResponse:
    answers = [ev.ListedOffset((topic.name, p.partition_index), p.error_code, p.offset, p.leader_epoch, p.timestamp)
               for topic in body.topics or () for p in topic.partitions or ()]
    return ev.ListOffsetsResponse(ErrorCode.NONE, tuple(answers))
