"""AlterPartition (API 56) between the `IsrTracker` core and the wire: one partition per request.

Kafka batches the AlterPartition items of many partitions into one request; here each tracker
has its own single request in flight (Kafka's rule: one per partition), which keeps the answer
trivially matched to its proposal. v3 carries each ISR member's broker epoch (KIP-903).
"""

from __future__ import annotations

from typing import Any

from quorum.broker.isr import AlterPartitionRequest, AlterPartitionResponse
from quorum.net.peer_client import PeerClient, PeerUnavailable
from quorum.wire.errors import ErrorCode
from quorum.wire.protocol import APIS

ALTER_PARTITION = APIS[56]
ALTER_PARTITION_VERSION = 3


def encode(request: AlterPartitionRequest, broker_epoch: int) -> Any:
    schema = ALTER_PARTITION.request
    data = schema.TopicData.PartitionData
    part = data(partition_index=request.partition, leader_epoch=request.leader_epoch,
                new_isr_with_epochs=[data.BrokerState(broker_id=b, broker_epoch=e) for b, e in request.new_isr],
                leader_recovery_state=request.leader_recovery_state, partition_epoch=request.partition_epoch)
    return schema(broker_id=request.leader_id, broker_epoch=broker_epoch,
                  topics=[schema.TopicData(topic_id=request.topic_id, partitions=[part])])


def decode(request: AlterPartitionRequest, body: Any) -> AlterPartitionResponse:
    """The answer for our one partition; a top-level error (STALE_BROKER_EPOCH, NOT_CONTROLLER)
    or a missing partition answers it too."""
    if body.error_code != ErrorCode.NONE:
        return AlterPartitionResponse(body.error_code)
    for topic in body.topics or ():
        if topic.topic_id != request.topic_id:
            continue
        for p in topic.partitions or ():
            if p.partition_index == request.partition:
                if p.error_code != ErrorCode.NONE:
                    return AlterPartitionResponse(p.error_code)
                return AlterPartitionResponse(ErrorCode.NONE, p.leader_id, p.leader_epoch, p.partition_epoch,
                                              tuple(p.isr))
    return AlterPartitionResponse(ErrorCode.UNKNOWN_SERVER_ERROR)


async def send(peer: PeerClient, request: AlterPartitionRequest, broker_epoch: int) -> AlterPartitionResponse:
    """Raises PeerUnavailable when the controller does not answer."""
    body = await peer.request(ALTER_PARTITION, ALTER_PARTITION_VERSION, encode(request, broker_epoch))
    return decode(request, body)


__all__ = ["PeerUnavailable", "decode", "encode", "send"]
