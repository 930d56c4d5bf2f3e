"""KIP-848's consumer group RPCs: ConsumerGroupHeartbeat (API 68) and ConsumerGroupDescribe (API 69).

kafka-python does not ship them, so their schemas are Apache Kafka's JSON files, copied into
`quorum/wire/schemas` (comments dropped) and read by the same engine as every other message.
ConsumerGroupHeartbeat v1 adds SubscribedTopicRegex; librdkafka 2.12+ asks for v1.
"""

from __future__ import annotations

from kafka.protocol.api_message import ApiMessage

from quorum.wire.kraft_messages import _pairs
from quorum.wire.schema import define_message

ConsumerGroupHeartbeatRequest = define_message("ConsumerGroupHeartbeatRequest")
ConsumerGroupHeartbeatResponse = define_message("ConsumerGroupHeartbeatResponse")
ConsumerGroupDescribeRequest = define_message("ConsumerGroupDescribeRequest")
ConsumerGroupDescribeResponse = define_message("ConsumerGroupDescribeResponse")

CONSUMER_GROUP_HEARTBEAT_KEY = 68
CONSUMER_GROUP_DESCRIBE_KEY = 69

CONSUMER_GROUP_APIS: dict[int, tuple[type[ApiMessage], type[ApiMessage]]] = _pairs(
    ConsumerGroupHeartbeatRequest,
    ConsumerGroupHeartbeatResponse,
    ConsumerGroupDescribeRequest,
    ConsumerGroupDescribeResponse,
)
"""API key -> (request class, response class) for KIP-848's two RPCs."""
