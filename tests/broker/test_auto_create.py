"""Kafka's auto-creation decision and its answers for missing topics, without processes
(`quorum.broker.auto_create`, and Metadata's entry for a topic it does not have)."""

from __future__ import annotations

import pytest
from kafka.protocol.metadata.metadata import MetadataRequest
from kafka.protocol.metadata.metadata import MetadataResponse as ClientResponse

from quorum.broker.auto_create import creation_allowed, missing_topic_error, topics_to_create
from quorum.broker.metadata import METADATA, encoded_metadata_response
from quorum.controller.validation import topic_name_fault
from quorum.image.image import single_node_image
from quorum.wire.errors import ErrorCode
from quorum.wire.protocol import decode_body

IMAGE = single_node_image(4, "127.0.0.1", 9092, {"orders": 1})
ILLEGAL = ["bad$#!", "a" * 250, ".", "..", "with space", "ünïcode"]


@pytest.mark.parametrize(("version", "client", "broker", "all_topics", "created"), [
    (12, True, True, False, True),
    (12, False, True, False, False),  # a consumer's allow.auto.create.topics=false
    (12, True, False, False, False),  # the broker's auto.create.topics.enable=false
    (12, True, True, True, False),  # a request for all topics creates none
    (3, False, True, False, True),  # before v4 the field does not exist: Kafka's default, true
    (3, False, False, False, False),
])
def test_the_broker_and_the_client_both_decide(version, client, broker, all_topics, created):
    assert creation_allowed(version, client, broker, all_topics) is created


def test_only_legal_missing_names_are_created_once_each():
    names = ["orders", "new", "new", None, "", *ILLEGAL, "__consumer_offsets", "__transaction_state", "__mine"]
    assert topics_to_create(names, {"orders"}, allowed=True) == ["new", "__consumer_offsets", "__mine"]
    assert topics_to_create(names, {"orders"}, allowed=False) == []


@pytest.mark.parametrize("name", ILLEGAL)
def test_an_illegal_name_is_invalid_topic_exception(name):
    assert topic_name_fault(name) is not None
    assert missing_topic_error(name) == ErrorCode.INVALID_TOPIC_EXCEPTION


def test_a_legal_missing_name_is_unknown_topic_or_partition():
    assert topic_name_fault("a" * 249) is None
    assert missing_topic_error("a" * 249) == missing_topic_error("x.y_z-1") == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION


@pytest.mark.parametrize("version", [1, 4, 9, 12])
def test_metadata_answers_each_missing_topic_as_kafka_does(version):
    topic = MetadataRequest.MetadataRequestTopic
    names = ["orders", "missing", "bad$#!", "__transaction_state"]
    wanted = [topic(name=name, topic_id=None) if version >= 10 else topic(name=name) for name in names]
    request = decode_body(METADATA.request, MetadataRequest(topics=wanted, allow_auto_topic_creation=False)
                          .encode(version=version), 0, version)
    answer = ClientResponse.decode(encoded_metadata_response(IMAGE, request, version), version=version)
    codes = {t.name: (t.error_code, t.is_internal) for t in answer.topics}
    assert codes == {"orders": (ErrorCode.NONE, False), "missing": (ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, False),
                     "bad$#!": (ErrorCode.INVALID_TOPIC_EXCEPTION, False),
                     "__transaction_state": (ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, True)}
