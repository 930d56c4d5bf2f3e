"""Metadata answers from an image, at every version, with and without the encoded-topic memo."""

from __future__ import annotations

import uuid

import pytest
from kafka.protocol.metadata.metadata import MetadataRequest
from kafka.protocol.metadata.metadata import MetadataResponse as ClientResponse

from quorum.broker.metadata import METADATA, encoded_metadata_response, metadata_response
from quorum.image.image import single_node_image
from quorum.wire.errors import ErrorCode
from quorum.wire.protocol import decode_body

IMAGE = single_node_image(4, "127.0.0.1", 9092, {"orders": 3, "payments": 2}, cluster_id="cluster-a")
Topic = MetadataRequest.MetadataRequestTopic


def requests_for(version: int) -> list:
    named = [Topic(name="orders"), Topic(name="missing")]
    if version >= 10:
        named = [Topic(name="orders", topic_id=None), Topic(name="missing", topic_id=None),
                 Topic(name=None, topic_id=IMAGE.topics["payments"].topic_id)] if version >= 12 else [
                 Topic(name="orders", topic_id=None), Topic(name="missing", topic_id=None)]
    everything = MetadataRequest(topics=[] if version == 0 else None)
    return [everything, MetadataRequest(topics=named)]


@pytest.mark.parametrize("version", range(METADATA.min_version, METADATA.max_version + 1))
def test_cached_encoding_equals_plain_encoding_and_clients_read_it(version):
    for request in requests_for(version):
        wire_request = decode_body(METADATA.request, request.encode(version=version), 0, version)
        plain = metadata_response(IMAGE, wire_request, version).encode(version=version)
        assert encoded_metadata_response(IMAGE, wire_request, version) == plain
        assert encoded_metadata_response(IMAGE, wire_request, version) == plain, "memo hit must match too"
        seen = ClientResponse.decode(plain, version=version)
        by_name = {t.name: t for t in seen.topics}
        assert by_name["orders"].error_code == 0 and len(by_name["orders"].partitions) == 3
        assert by_name["orders"].partitions[1].leader_id == 4
        if request.topics:
            assert by_name["missing"].error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
        if version >= 2:
            assert seen.cluster_id == "cluster-a"


@pytest.mark.parametrize("version", [9, 12, 13])
def test_topic_epoch_tag_reaches_the_sdk_and_is_skipped_by_other_clients(version):
    request = decode_body(METADATA.request, MetadataRequest(topics=None).encode(version=version), 0, version)
    encoded = encoded_metadata_response(IMAGE, request, version)
    ours = decode_body(METADATA.response, encoded, 0, version)
    assert {t.name: t.topic_epoch for t in ours.topics} == {
        name: topic.topic_epoch for name, topic in IMAGE.topics.items()}
    assert all(t.topic_epoch > 0 for t in ours.topics)
    theirs = ClientResponse.decode(encoded, version=version)
    assert [t.name for t in theirs.topics] == [t.name for t in ours.topics]


def test_unknown_topic_id_answers_unknown_topic_id():
    version = 12
    request = decode_body(METADATA.request, MetadataRequest(topics=[Topic(name=None, topic_id=uuid.uuid4())])
                          .encode(version=version), 0, version)
    (topic,) = metadata_response(IMAGE, request, version).topics
    assert topic.error_code == ErrorCode.UNKNOWN_TOPIC_ID
