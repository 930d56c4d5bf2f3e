"""Metadata answers from an image (fixed, or replayed from records), at every version, with and without the memo."""

from __future__ import annotations

import uuid

import pytest
from kafka.protocol.metadata.metadata import MetadataRequest
from kafka.protocol.metadata.metadata import MetadataResponse as ClientResponse

from quorum.broker.metadata import METADATA, encoded_metadata_response, memo_difference, metadata_response
from quorum.image.image import single_node_image
from quorum.image.image_state import ImageState
from quorum.wire.errors import ErrorCode
from quorum.wire.protocol import decode_body
from tests.image.test_delta import change, fence, partition, register, topic, unfence

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


# -- an image built by replaying the metadata log ------------------------------------------------


def replayed_state() -> ImageState:
    orders, payments = uuid.UUID(int=0x11), uuid.UUID(int=0x22)
    state = ImageState(listener="PLAINTEXT", cluster_id="cluster-r", controller_id=1)
    values = [register(1), register(2), register(3), unfence(1), unfence(2),
              topic(orders, "orders", 1), partition(orders, 0, [1, 2, 3]), partition(orders, 1, [2, 1]),
              partition(orders, 2, [3, 1]), change(orders, 1, leader=-1, isr=[]),
              topic(payments, "payments", 2), partition(payments, 0, [2, 1])]
    for offset, value in enumerate(values):
        state.apply(offset, value)
    return state


def test_a_replayed_image_lists_unfenced_brokers_offline_replicas_and_missing_leaders():
    image = replayed_state().image
    version = 12
    request = decode_body(METADATA.request, MetadataRequest(topics=None).encode(version=version), 0, version)
    encoded = encoded_metadata_response(image, request, version)
    assert encoded == metadata_response(image, request, version).encode(version=version)
    seen = ClientResponse.decode(encoded, version=version)
    assert sorted((b.node_id, b.host, b.port) for b in seen.brokers) == [(1, "plaintext-1", 9092),
                                                                          (2, "plaintext-2", 9092)]
    partitions = {p.partition_index: p for t in seen.topics if t.name == "orders" for p in t.partitions}
    assert (partitions[0].error_code, partitions[0].leader_id, partitions[0].offline_replicas) == (0, 1, [3])
    assert (partitions[1].error_code, partitions[1].leader_id, partitions[1].leader_epoch) == (
        ErrorCode.LEADER_NOT_AVAILABLE, -1, 1), "no leader"
    assert (partitions[2].error_code, partitions[2].leader_id, partitions[2].replica_nodes) == (
        ErrorCode.LEADER_NOT_AVAILABLE, -1, [3, 1]), "a fenced leader is not named"
    ours = decode_body(METADATA.response, encoded, 0, version)
    assert {t.name: t.topic_epoch for t in ours.topics} == {"orders": 1, "payments": 2}
    by_id = decode_body(METADATA.request, MetadataRequest(topics=[Topic(name=None, topic_id=uuid.UUID(int=0x22))])
                        .encode(version=version), 0, version)
    (payments,) = metadata_response(image, by_id, version).topics
    assert payments.name == "payments" and payments.error_code == 0


def test_the_memo_follows_the_images_a_delta_builds():
    state = replayed_state()
    version = 12
    request = decode_body(METADATA.request, MetadataRequest(topics=None).encode(version=version), 0, version)
    before = encoded_metadata_response(state.image, request, version)
    state.apply(100, unfence(3))  # broker 3 comes back: orders changes, payments (on 1 and 2) does not
    image = state.image
    assert ("payments", version) in image.encoded and ("orders", version) not in image.encoded
    after = encoded_metadata_response(image, request, version)
    assert after != before and after == metadata_response(image, request, version).encode(version=version)
    state.apply(101, fence(2))
    image = state.image
    assert image.encoded == {}, "both topics have a replica on broker 2"
    assert encoded_metadata_response(image, request, version) == metadata_response(image, request, version).encode(
        version=version)


def test_the_memo_check_finds_a_stale_encoding_and_passes_a_current_one():
    """`memo_difference` (the verify.image check of what Metadata serves): the next image keeps the
    memo of unchanged topics and drops that of changed ones, so it passes; a memo entry left over
    from an older image of the topic is named."""
    T1 = uuid.UUID(int=0x71)
    state = ImageState()
    for offset, value in enumerate([register(1), unfence(1), topic(T1, "live"), partition(T1, 0, [1])]):
        state.apply(offset, value)
    everything = decode_body(METADATA.request, MetadataRequest(topics=None).encode(version=12), 0, 12)
    before = state.image
    encoded_metadata_response(before, everything, 12)
    assert memo_difference(before) is None and ("live", 12) in before.encoded
    state.apply(4, partition(T1, 1, [1]))
    after = state.image
    encoded_metadata_response(after, everything, 12)
    assert memo_difference(after) is None
    fresh = after.encoded[("live", 12)]
    after.encoded[("live", 12)] = before.encoded[("live", 12)]  # as if the change had not dropped it
    assert memo_difference(after) == ("the Metadata v12 encoding of topic 'live' held for the image is stale: "
                                      f"{len(before.encoded[('live', 12)])} bytes served, "
                                      f"{len(fresh)} bytes for its 2 partitions now")
