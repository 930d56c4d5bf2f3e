"""Request and response classes of the KRaft RPCs, which kafka-python does not ship.

Raft between controllers (KIP-595 Vote, BeginQuorumEpoch, EndQuorumEpoch; KIP-630
FetchSnapshot) and the broker-to-controller calls of KIP-631 (BrokerRegistration,
BrokerHeartbeat, AlterPartition) and KIP-730 (AllocateProducerIds). The schemas live in
`quorum/wire/schemas/*.json`; each class is an ordinary kafka-python `ApiMessage`, so
`encode(version=...)` and `decode(data, version=...)` work as for kafka-python's own classes.

kafka-python's engine accepts every version from 0 to the highest one; the versions Kafka
itself serves are in each class's `valid_versions` (AlterPartition: 2-3 since Kafka 4.0).
"""

from __future__ import annotations

from kafka.protocol.api_message import ApiMessage

from quorum.wire.schema import define_message

VoteRequest = define_message("VoteRequest")
VoteResponse = define_message("VoteResponse")
BeginQuorumEpochRequest = define_message("BeginQuorumEpochRequest")
BeginQuorumEpochResponse = define_message("BeginQuorumEpochResponse")
EndQuorumEpochRequest = define_message("EndQuorumEpochRequest")
EndQuorumEpochResponse = define_message("EndQuorumEpochResponse")
AlterPartitionRequest = define_message("AlterPartitionRequest")
AlterPartitionResponse = define_message("AlterPartitionResponse")
FetchSnapshotRequest = define_message("FetchSnapshotRequest")
FetchSnapshotResponse = define_message("FetchSnapshotResponse")
BrokerRegistrationRequest = define_message("BrokerRegistrationRequest")
BrokerRegistrationResponse = define_message("BrokerRegistrationResponse")
BrokerHeartbeatRequest = define_message("BrokerHeartbeatRequest")
BrokerHeartbeatResponse = define_message("BrokerHeartbeatResponse")
AllocateProducerIdsRequest = define_message("AllocateProducerIdsRequest")
AllocateProducerIdsResponse = define_message("AllocateProducerIdsResponse")


def _pairs(*classes: type[ApiMessage]) -> dict[int, tuple[type[ApiMessage], type[ApiMessage]]]:
    """Index (request, response) pairs by API key, refusing a pair whose schemas disagree on it."""
    table: dict[int, tuple[type[ApiMessage], type[ApiMessage]]] = {}
    for request, response in zip(classes[::2], classes[1::2], strict=True):
        if request.API_KEY != response.API_KEY or not request.is_request() or response.is_request():
            raise ValueError(f"{request.__name__} and {response.__name__} are not one API's request and response")
        table[request.API_KEY] = (request, response)
    return table


KRAFT_APIS: dict[int, tuple[type[ApiMessage], type[ApiMessage]]] = _pairs(
    VoteRequest, VoteResponse,
    BeginQuorumEpochRequest, BeginQuorumEpochResponse,
    EndQuorumEpochRequest, EndQuorumEpochResponse,
    AlterPartitionRequest, AlterPartitionResponse,
    FetchSnapshotRequest, FetchSnapshotResponse,
    BrokerRegistrationRequest, BrokerRegistrationResponse,
    BrokerHeartbeatRequest, BrokerHeartbeatResponse,
    AllocateProducerIdsRequest, AllocateProducerIdsResponse,
)
"""API key -> (request class, response class) for every KRaft RPC above."""

__all__ = [
    "KRAFT_APIS",
    "AllocateProducerIdsRequest", "AllocateProducerIdsResponse",
    "AlterPartitionRequest", "AlterPartitionResponse",
    "BeginQuorumEpochRequest", "BeginQuorumEpochResponse",
    "BrokerHeartbeatRequest", "BrokerHeartbeatResponse",
    "BrokerRegistrationRequest", "BrokerRegistrationResponse",
    "EndQuorumEpochRequest", "EndQuorumEpochResponse",
    "FetchSnapshotRequest", "FetchSnapshotResponse",
    "VoteRequest", "VoteResponse",
]
