"""Metadata record frames for the image tests, small enough to write by the thousand."""

from __future__ import annotations

import uuid

from hypothesis import strategies as st

from quorum.wire import metadata_records as mr
from quorum.wire.metadata_records import encode_metadata_record

TOPIC_IDS = [uuid.UUID(int=n) for n in (0x11, 0x22, 0x33)]


def register(broker: int, epoch: int = 1) -> bytes:
    return encode_metadata_record(mr.RegisterBrokerRecord(
        version=0, broker_id=broker, incarnation_id=uuid.UUID(int=broker + 1), broker_epoch=epoch,
        end_points=[], features=[], rack=None, fenced=True))


def unregister(broker: int, epoch: int = 1) -> bytes:
    return encode_metadata_record(mr.UnregisterBrokerRecord(version=0, broker_id=broker, broker_epoch=epoch))


def fence(broker: int, epoch: int = 1) -> bytes:
    return encode_metadata_record(mr.FenceBrokerRecord(version=0, id=broker, epoch=epoch))


def unfence(broker: int, epoch: int = 1) -> bytes:
    return encode_metadata_record(mr.UnfenceBrokerRecord(version=0, id=broker, epoch=epoch))


def topic(topic_id: uuid.UUID, name: str = "t") -> bytes:
    return encode_metadata_record(mr.TopicRecord(version=0, name=name, topic_id=topic_id))


def remove_topic(topic_id: uuid.UUID) -> bytes:
    return encode_metadata_record(mr.RemoveTopicRecord(version=0, topic_id=topic_id))


def partition(topic_id: uuid.UUID, index: int, leader: int = 1) -> bytes:
    return encode_metadata_record(mr.PartitionRecord(
        version=0, partition_id=index, topic_id=topic_id, replicas=[1, 2], isr=[1, 2], removing_replicas=[],
        adding_replicas=[], leader=leader, leader_epoch=0, partition_epoch=0))


def change(topic_id: uuid.UUID, index: int, leader: int) -> bytes:
    return encode_metadata_record(mr.PartitionChangeRecord(version=0, partition_id=index, topic_id=topic_id,
                                                           leader=leader))


def config(resource: str, name: str, value: str | None) -> bytes:
    return encode_metadata_record(mr.ConfigRecord(version=0, resource_type=2, resource_name=resource, name=name,
                                                  value=value))


def feature(name: str, level: int) -> bytes:
    return encode_metadata_record(mr.FeatureLevelRecord(version=0, name=name, feature_level=level))


NO_OP = encode_metadata_record(mr.NoOpRecord(version=0))

_BROKERS = st.integers(0, 2)
_TOPICS = st.sampled_from(TOPIC_IDS)
_PARTITIONS = st.integers(0, 1)
_SMALL = st.integers(0, 9)

records = st.one_of(
    st.builds(register, _BROKERS, _SMALL),
    st.builds(unregister, _BROKERS),
    st.builds(fence, _BROKERS, _SMALL),
    st.builds(unfence, _BROKERS, _SMALL),
    st.builds(topic, _TOPICS, st.sampled_from(["a", "b"])),
    st.builds(remove_topic, _TOPICS),
    st.builds(partition, _TOPICS, _PARTITIONS, _SMALL),
    st.builds(change, _TOPICS, _PARTITIONS, _SMALL),
    st.builds(config, st.sampled_from(["a", "b"]), st.sampled_from(["x", "y"]),
              st.none() | st.sampled_from(["1", "2"])),
    st.builds(feature, st.sampled_from(["metadata.version", "kraft.version"]), _SMALL),
    st.just(NO_OP),
    st.binary(max_size=6),  # not metadata records (mostly): opaque values
)
"""One record value of any kind, over few keys so that entities are changed and deleted often."""
