"""Requests a controller answers about the quorum itself: DescribeQuorum, DescribeCluster,
DeleteRecords, which it refuses for the metadata log, and, with a test-only setting, Produce to
`__cluster_metadata`.

Produce to the metadata partition is this project's way for tests and benchmarks to commit raw
records through the quorum (`quorum.admin.QuorumWriter`): the response is sent once the batch is
committed (below the high watermark), like acks=all; a node that does not lead answers
NOT_LEADER_OR_FOLLOWER only when no controller could take it. A controller that does not lead passes
the write on to the leader it knows (on its own connection, `metadata_write_channels`, under the
client id FORWARDED_CLIENT_ID, and a forwarded write is never passed on again); when that leader
is resigning or gone, or an election is under way, it waits for the next leader, up to the election
timeout, and commits the write itself if it won or passes it on to the winner. A graceful handover
elects the successor in a few milliseconds; a write sent as the leader resigned used to be answered
NOT_LEADER first, and its client came back only after its retry backoff (bench_quorum's graceful
failover: 25-30 ms, against etcd's 3-7: etcd's followers forward proposals to the leader, as this
does now; Kafka's brokers hold a request for the controller while none is known). A write the
resigning leader had appended but not committed can be committed twice (once by the successor,
once passed on again), as a client's own retry can. It writes past the controller's validation
and the authorizer, so a node serves it only with `quorum.test.metadata.writes.enable=true`
(`NodeConfig.test_metadata_writes`).
Otherwise Produce is not served on any of a controller's listeners, as on Kafka's controller
listener: ApiVersions does not list it, and a Produce request closes its connection with the reason
logged (Kafka's SocketServer: "Received request api key PRODUCE ... which is not enabled").

DeleteRecords on `__cluster_metadata` answers POLICY_VIOLATION (KIP-630, "When to Increase the
LogStartOffset"): the metadata log's start offset moves only to a snapshot's end offset, when the
leader decides, so no client may cut the log where the replicas' state would be lost.
"""

from __future__ import annotations

import time
import uuid
from typing import TYPE_CHECKING, Any

from quorum.net.dispatch import Reply
from quorum.net.peer_client import PeerUnavailable
from quorum.raft.state import NO_NODE, Role
from quorum.server.commit_waiters import NotLeaderError
from quorum.server.raft_rpc import METADATA_PARTITION, METADATA_TOPIC
from quorum.wire.errors import ErrorCode, error_name
from quorum.wire.protocol import APIS, Request
from quorum.wire.records import CorruptRecordError, iter_batches

if TYPE_CHECKING:
    from quorum.server.node_services import NodeServices

PRODUCE, DELETE_RECORDS, DESCRIBE_QUORUM, DESCRIBE_CLUSTER = 0, 21, 55, 60
METADATA_WRITES_PRODUCE_VERSION = 9
"""The Produce version `quorum.admin.QuorumWriter` sends its metadata writes as (a node with them on
compiles its codecs at start)."""
METADATA_TOPIC_ID = uuid.UUID(int=1)  # Kafka's fixed id of __cluster_metadata
_NOT_LEADER = ErrorCode.NOT_LEADER_OR_FOLLOWER
FORWARDED_CLIENT_ID = "quorum-forwarded-metadata-write"
"""The client id a controller passes a metadata write on under: such a write is not passed on again."""


def _now_ms() -> int:
    return int(time.time() * 1000)


def register_quorum_admin(node: NodeServices) -> None:
    async def describe_quorum(request: Request) -> Reply:
        return Reply(describe_quorum_response(node, request.version), request.version)

    async def describe_cluster(request: Request) -> Reply:
        schema = APIS[DESCRIBE_CLUSTER].response
        brokers = [schema.DescribeClusterBroker(broker_id=v.node_id, host=v.host, port=v.port, rack=None)
                   for v in node.config.voters]
        body = schema(throttle_time_ms=0, error_code=0, error_message=None, cluster_id=node.core.cluster_id,
                      controller_id=node.core.leader_id, brokers=brokers, endpoint_type=2)
        return Reply(body, request.version)

    node.dispatcher.register(DESCRIBE_QUORUM, describe_quorum)
    node.dispatcher.register(DESCRIBE_CLUSTER, describe_cluster)
    node.dispatcher.register(DELETE_RECORDS, delete_records)


def describe_quorum_response(node: NodeServices, version: int) -> Any:
    schema = APIS[DESCRIBE_QUORUM].response
    topic, partition_schema = schema.TopicData, schema.TopicData.PartitionData
    replica = partition_schema.ReplicaState
    nodes = [schema.Node(node_id=v.node_id, listeners=[schema.Node.Listener(name="CONTROLLER", host=v.host,
                                                                          port=v.port)])
             for v in node.config.voters]
    core = node.core
    if core.leader_id != node.config.node_id:
        partition = partition_schema(partition_index=METADATA_PARTITION, error_code=_NOT_LEADER,
                                     error_message=f"node {node.config.node_id} is not the leader",
                                     leader_id=core.leader_id, leader_epoch=core.epoch, high_watermark=-1,
                                     current_voters=[], observers=[])
    else:
        described = core.describe(_now_ms())

        def state(r: Any) -> Any:
            return replica(replica_id=r.replica_id, replica_directory_id=None, log_end_offset=r.log_end_offset,
                           last_fetch_timestamp=r.last_fetch_timestamp,
                           last_caught_up_timestamp=r.last_caught_up_timestamp)

        partition = partition_schema(partition_index=METADATA_PARTITION, error_code=0, error_message=None,
                                     leader_id=described.leader_id, leader_epoch=described.leader_epoch,
                                     high_watermark=described.high_watermark,
                                     current_voters=[state(r) for r in described.voters],
                                     observers=[state(r) for r in described.observers])
    return schema(error_code=0, error_message=None, nodes=nodes,
                  topics=[topic(topic_name=METADATA_TOPIC, partitions=[partition])])


def register_metadata_writes(node: NodeServices) -> None:
    """Serve Produce to `__cluster_metadata` (test only: see the module's docstring)."""
    async def produce(request: Request) -> Reply | None:
        body = request.body
        responses = []
        for topic in body.topic_data:
            is_metadata = topic.name == METADATA_TOPIC or getattr(topic, "topic_id", None) == METADATA_TOPIC_ID
            partitions = []
            for part in topic.partition_data:
                if is_metadata and part.index == METADATA_PARTITION:
                    code, base_offset, message = await _commit(node, part.records, body.timeout_ms,
                                                               request.header.client_id == FORWARDED_CLIENT_ID)
                else:
                    code, base_offset, message = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, -1, "controllers serve only " \
                        f"{METADATA_TOPIC}-{METADATA_PARTITION}"
                partitions.append(_partition_response(request, part.index, code, base_offset, message))
            responses.append(APIS[PRODUCE].response.TopicProduceResponse(
                name=topic.name, topic_id=getattr(topic, "topic_id", None), partition_responses=partitions))
        if body.acks == 0:
            return None
        return Reply(APIS[PRODUCE].response(responses=responses, throttle_time_ms=0), request.version)

    node.dispatcher.register(PRODUCE, produce)


async def delete_records(request: Request) -> Reply:
    """Refuse every partition: POLICY_VIOLATION for the metadata log, which a controller keeps
    whole until a snapshot covers it (KIP-630), and UNKNOWN_TOPIC_OR_PARTITION for anything else,
    since a controller hosts no other partition. Nothing is deleted, so nothing waits."""
    schema = APIS[DELETE_RECORDS].response
    result = schema.DeleteRecordsTopicResult
    topics = []
    for topic in request.body.topics:
        code = ErrorCode.POLICY_VIOLATION if topic.name == METADATA_TOPIC else ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
        partitions = [result.DeleteRecordsPartitionResult(partition_index=p.partition_index, low_watermark=-1,
                                                          error_code=code) for p in topic.partitions]
        topics.append(result(name=topic.name, partitions=partitions))
    return Reply(schema(throttle_time_ms=0, topics=topics), request.version)


async def _commit(node: NodeServices, records: bytes | None, timeout_ms: int,
                  forwarded: bool = False) -> tuple[int, int, str | None]:
    """Propose the values of `records` as one batch and wait until it is committed, or have the
    leader do it (see the module docstring); `forwarded`: another controller passed it on."""
    try:
        values = [v or b"" for batch in iter_batches(records or b"", strict=True) for v in batch.values()]
    except CorruptRecordError as exc:
        return ErrorCode.CORRUPT_MESSAGE, -1, str(exc)
    if not values:
        return ErrorCode.INVALID_RECORD, -1, "no records"
    core, me = node.core, node.config.node_id
    deadline = time.monotonic() + max(timeout_ms, 1) / 1000

    def left_ms() -> int:
        return max(int((deadline - time.monotonic()) * 1000), 1)

    refused = frozenset({NO_NODE})  # no leader; then also the one that refused the write
    if not forwarded and core.role is Role.FOLLOWER and core.leader_id != me:
        leader = core.leader_id
        answer = await _pass_on(node, leader, records, left_ms())
        if answer[0] != _NOT_LEADER:
            return answer
        refused = frozenset({NO_NODE, leader})  # resigning or gone: wait for its successor
    if core.is_voter and core.leader_id in refused and core.role is not Role.RESIGNED:
        await node.new_leader(refused, min(left_ms(), node.config.election_timeout_ms) / 1000)
    if not forwarded and core.leader_id not in refused | {me}:
        return await _pass_on(node, core.leader_id, records, left_ms())
    try:
        base_offset = await node.commit(values, left_ms() / 1000)
    except NotLeaderError as exc:
        return _NOT_LEADER, -1, str(exc)
    except TimeoutError:
        return ErrorCode.REQUEST_TIMED_OUT, -1, f"not committed within {timeout_ms} ms ({error_name(7)})"
    return ErrorCode.NONE, base_offset, None


def metadata_write_request(records: bytes | None, timeout_ms: int) -> Any:
    """A Produce (acks=all) of `records` to `__cluster_metadata`: what `quorum.admin.QuorumWriter`
    sends and what a controller passes on to the leader."""
    data = APIS[PRODUCE].request.TopicProduceData
    return APIS[PRODUCE].request(transactional_id=None, acks=-1, timeout_ms=timeout_ms, topic_data=[data(
        name=METADATA_TOPIC, partition_data=[data.PartitionProduceData(index=METADATA_PARTITION, records=records)])])


async def _pass_on(node: NodeServices, leader: int, records: bytes | None,
                   timeout_ms: int) -> tuple[int, int, str | None]:
    """The leader's answer to the write passed on to it; NOT_LEADER when it cannot be reached."""
    channel = node.metadata_write_channels.get(leader)
    if channel is None:
        return _NOT_LEADER, -1, f"node {node.config.node_id} is not the leader (leader: {leader})"
    try:
        response = await channel.request(APIS[PRODUCE], METADATA_WRITES_PRODUCE_VERSION,
                                         metadata_write_request(records, timeout_ms), client_id=FORWARDED_CLIENT_ID)
    except PeerUnavailable as exc:
        return _NOT_LEADER, -1, f"the leader, node {leader}, could not be reached: {exc}"
    partition = response.responses[0].partition_responses[0]
    return partition.error_code, partition.base_offset, partition.error_message


def _partition_response(request: Request, index: int, code: int, base_offset: int, message: str | None) -> Any:
    schema = APIS[PRODUCE].response.TopicProduceResponse.PartitionProduceResponse
    return schema(index=index, error_code=code, base_offset=base_offset, log_append_time_ms=-1, log_start_offset=0,
                  record_errors=[], error_message=message)


__all__ = ["delete_records", "describe_quorum_response", "register_metadata_writes", "register_quorum_admin"]
