"""Issue 33: `quorum.kip232.enable=false` makes a broker answer as an Apache Kafka broker does.

No TopicEpoch tag in Metadata (Kafka's MetadataResponse has no tag 10232), OffsetCommitValue
records as Kafka writes them (v3, no topic epoch or topic id tags), and no INVALID_INTERNAL_METADATA:
Kafka's `validateOffsetCommit` checks only the metadata's length, so a KIP-232 string is metadata
like any other. The same requests against the default mode show what the setting turns off.
"""

from __future__ import annotations

import uuid

import pytest
from kafka.protocol.metadata.metadata import MetadataRequest

from quorum.broker.groups.config import GroupConfig
from quorum.broker.groups.events import CommitEntry, OffsetCommit, OffsetFetch
from quorum.broker.metadata import METADATA, encoded_metadata_response, memo_difference
from quorum.broker.offsets_topic import group_config
from quorum.image.image import single_node_image
from quorum.server.config import ConfigError, node_config
from quorum.wire.consumer_offsets import OffsetKey, decode_record
from quorum.wire.errors import ErrorCode as E
from quorum.wire.internal_metadata import InternalMetadata, encode
from quorum.wire.protocol import decode_body
from tests.broker.groups.harness import GROUP, Harness

IMAGE = single_node_image(4, "127.0.0.1", 9092, {"orders": 3, "payments": 2}, cluster_id="cluster-a")
TOPIC_ID = uuid.uuid4()


def served_topic_epochs(topic_epochs: bool, version: int = 12) -> dict[str, int]:
    image = single_node_image(4, "127.0.0.1", 9092, {"orders": 3, "payments": 2}, cluster_id="cluster-a")
    request = decode_body(METADATA.request, MetadataRequest(topics=None).encode(version=version), 0, version)
    encoded = encoded_metadata_response(image, request, version, topic_epochs=topic_epochs)
    assert memo_difference(image, topic_epochs) is None, "the memo must hold what this mode serves"
    return {t.name: t.topic_epoch for t in decode_body(METADATA.response, encoded, 0, version).topics}


@pytest.mark.parametrize("version", [9, 12, 13])
def test_metadata_carries_no_topic_epoch_as_kafka(version) -> None:
    assert all(epoch > 0 for epoch in served_topic_epochs(True, version).values())
    assert served_topic_epochs(False, version) == {"orders": -1, "payments": -1}


def kafka_mode() -> Harness:
    return Harness(GroupConfig(group_initial_rebalance_delay_ms=0, kip232=False))


def commit(h: Harness, *entries: CommitEntry) -> tuple[int, ...]:
    handle = h.send("offset_commit", OffsetCommit(GROUP, entries))
    h.flush()
    return h.answer(handle).errors


def internal(topic_epoch: int, leader_epoch: int, topic_id: uuid.UUID | None = None) -> str:
    return encode("user", InternalMetadata(topic_epoch, leader_epoch, topic_id))


def test_commits_are_never_refused_invalid_internal_metadata_as_kafka() -> None:
    """What the default mode refuses (older epochs, another topic id, an unparsable string), Kafka
    takes: the last commit wins, whatever its metadata string says."""
    entries = [CommitEntry("t", 0, 10, metadata=internal(5, 3), topic_id=TOPIC_ID),
               CommitEntry("t", 0, 11, metadata=internal(4, 9), topic_id=TOPIC_ID),
               CommitEntry("t", 0, 12, metadata=internal(5, 3, uuid.uuid4()), topic_id=TOPIC_ID),
               CommitEntry("t", 0, 13, metadata="kip232:not json\nuser", topic_id=TOPIC_ID)]
    ours, kafka = Harness(), kafka_mode()
    assert [commit(ours, entry)[0] for entry in entries] == [E.NONE] + [E.INVALID_INTERNAL_METADATA] * 3
    assert [commit(kafka, entry)[0] for entry in entries] == [E.NONE] * 4
    stored = kafka.core.offset_fetch(OffsetFetch(GROUP, None)).offsets[0]
    assert (stored.offset, stored.metadata) == (13, "kip232:not json\nuser")
    assert commit(kafka, CommitEntry("t", 0, 14, metadata="x" * 4097)) == (E.OFFSET_METADATA_TOO_LARGE,), (
        "Kafka's own check stays")


def test_offset_records_are_kafkas_v3_without_topic_epoch_or_topic_id() -> None:
    h = kafka_mode()
    commit(h, CommitEntry("t", 0, 10, leader_epoch=-1, metadata=internal(7, 4), topic_id=TOPIC_ID))
    [(key, value)] = [decode_record(k, v) for k, v in h.log[h.core.partition_for(GROUP)]]
    assert isinstance(key, OffsetKey)
    assert (value.topic_epoch, value.topic_id, value.leader_epoch) == (-1, None, -1), (
        "the client's leader epoch as it came, no KIP-232 fields")
    [raw] = [v for _, v in h.log[h.core.partition_for(GROUP)]]
    assert int.from_bytes(raw[:2], "big") == 3


def test_the_setting_reaches_the_broker_and_the_coordinator() -> None:
    base = {"node.id": "101", "process.roles": "broker", "controller.quorum.voters": "1@127.0.0.1:9093",
            "listeners": "PLAINTEXT://127.0.0.1:9092", "log.dirs": "/tmp/kafka-compatible"}
    assert node_config(base).kip232_enabled and group_config(base).kip232
    off = {**base, "quorum.kip232.enable": "false"}
    assert not node_config(off).kip232_enabled and not group_config(off).kip232
    with pytest.raises(ConfigError, match="quorum.kip232.enable must be true or false"):
        _ = node_config({**base, "quorum.kip232.enable": "maybe"}).kip232_enabled
