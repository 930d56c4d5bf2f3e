"""MetadataDelta: Kafka's replay semantics per record type, made total; structural sharing; the fast decoder."""

from __future__ import annotations

import uuid

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from quorum.image.delta import MetadataDelta
from quorum.image.image import BrokerRegistration, Endpoint, MetadataImage, empty_image
from quorum.wire import metadata_records as mr
from quorum.wire.metadata_records import MetadataRecordError, decode_metadata_record, encode_metadata_record
from quorum.wire.metadata_records import decode_metadata_record_fast as decode_record
from tests.image.records import NO_OP
from tests.image.records import records as any_record

T1, T2, T3 = (uuid.UUID(int=n) for n in (0x11, 0x22, 0x33))
EP = mr.RegisterBrokerRecord.BrokerEndpoint


def register(broker: int, epoch: int = 1, fenced: bool = True, listeners: tuple[str, ...] = ("PLAINTEXT", "INTERNAL"),
             rack: str | None = None, version: int = 1) -> bytes:
    endpoints = [EP(name=name, host=f"{name.lower()}-{broker}", port=9092 + i, security_protocol=0)
                 for i, name in enumerate(listeners)]
    options = {"in_controlled_shutdown": False} if version >= 1 else {}
    return encode_metadata_record(mr.RegisterBrokerRecord(
        version=version, broker_id=broker, incarnation_id=uuid.UUID(int=broker + 100), broker_epoch=epoch,
        end_points=endpoints, features=[], rack=rack, fenced=fenced, **options))


def fence(broker: int, epoch: int = 1) -> bytes:
    return encode_metadata_record(mr.FenceBrokerRecord(version=0, id=broker, epoch=epoch))


def unfence(broker: int, epoch: int = 1) -> bytes:
    return encode_metadata_record(mr.UnfenceBrokerRecord(version=0, id=broker, epoch=epoch))


def unregister(broker: int, epoch: int = 1) -> bytes:
    return encode_metadata_record(mr.UnregisterBrokerRecord(version=0, broker_id=broker, broker_epoch=epoch))


def topic(topic_id: uuid.UUID, name: str, epoch: int = -1) -> bytes:
    return encode_metadata_record(mr.TopicRecord(version=0, name=name, topic_id=topic_id, topic_epoch=epoch))


def remove_topic(topic_id: uuid.UUID, epoch: int = -1) -> bytes:
    return encode_metadata_record(mr.RemoveTopicRecord(version=0, topic_id=topic_id, topic_epoch=epoch))


def partition(topic_id: uuid.UUID, index: int, replicas: list[int], leader: int | None = None,
              isr: list[int] | None = None, leader_epoch: int = 0, partition_epoch: int = 0) -> bytes:
    return encode_metadata_record(mr.PartitionRecord(
        version=0, partition_id=index, topic_id=topic_id, replicas=replicas, isr=replicas if isr is None else isr,
        removing_replicas=[], adding_replicas=[], leader=replicas[0] if leader is None else leader,
        leader_epoch=leader_epoch, partition_epoch=partition_epoch))


def change(topic_id: uuid.UUID, index: int, **fields: object) -> bytes:
    return encode_metadata_record(mr.PartitionChangeRecord(version=0, partition_id=index, topic_id=topic_id,
                                                           **fields))


def config(resource_type: int, resource: str, name: str, value: str | None) -> bytes:
    return encode_metadata_record(mr.ConfigRecord(version=0, resource_type=resource_type, resource_name=resource,
                                                  name=name, value=value))


def feature(name: str, level: int) -> bytes:
    return encode_metadata_record(mr.FeatureLevelRecord(version=0, name=name, feature_level=level))


def image_of(values: list[bytes], image: MetadataImage | None = None, listener: str | None = None) -> MetadataImage:
    delta = MetadataDelta(empty_image(listener=listener) if image is None else image)
    for offset, value in enumerate(values, image.offset + 1 if image is not None else 0):
        delta.replay(value, offset)
    return delta.apply()


BROKERS_UP = [register(1), register(2), register(3), unfence(1), unfence(2), unfence(3)]


# -- brokers -------------------------------------------------------------------------------------


def test_registration_fencing_and_unregistration_follow_the_broker_epoch() -> None:
    image = image_of([register(1, epoch=5, rack="r1")])
    registration = image.registrations[1]
    assert registration == BrokerRegistration(1, uuid.UUID(int=101), 5, (Endpoint("PLAINTEXT", "plaintext-1", 9092),
                                              Endpoint("INTERNAL", "internal-1", 9093)), "r1", fenced=True)
    assert image.brokers == {}, "a fenced broker is not listed"
    image = image_of([unfence(1, epoch=4)], image)
    assert image.registrations[1].fenced, "an unfence of another broker epoch is ignored"
    image = image_of([unfence(1, epoch=5)], image)
    assert not image.registrations[1].fenced and list(image.brokers) == [1]
    assert (image.brokers[1].host, image.brokers[1].port, image.brokers[1].rack) == ("plaintext-1", 9092, "r1")
    image = image_of([fence(1, epoch=5)], image)
    assert image.registrations[1].fenced and image.brokers == {}
    image = image_of([unregister(1, epoch=4)], image)
    assert 1 in image.registrations, "an unregistration of another broker epoch is ignored"
    image = image_of([unregister(1, epoch=5)], image)
    assert image.registrations == {}


def test_a_new_registration_replaces_the_old_one_fenced_as_the_record_says() -> None:
    image = image_of([register(1, epoch=1), unfence(1, epoch=1), register(1, epoch=2, fenced=False, rack="b")])
    assert image.registrations[1].broker_epoch == 2 and not image.registrations[1].fenced
    assert image.brokers[1].rack == "b"


@pytest.mark.parametrize(("listener", "host"), [(None, "plaintext-1"), ("PLAINTEXT", "plaintext-1"),
                                                 ("INTERNAL", "internal-1")])
def test_brokers_are_listed_with_the_endpoint_of_the_images_listener(listener: str | None, host: str) -> None:
    image = image_of([register(1, fenced=False), register(2, fenced=False, listeners=("PLAINTEXT",))],
                     listener=listener)
    assert image.brokers[1].host == host
    assert (2 in image.brokers) == (listener != "INTERNAL"), "a broker without the listener is not listed"


# -- topics and partitions -----------------------------------------------------------------------


def test_topics_partitions_and_offline_replicas() -> None:
    image = image_of([*BROKERS_UP, register(4), topic(T1, "orders", 1), partition(T1, 1, [2, 4, 1]),
                      partition(T1, 0, [1, 2, 5])])
    orders = image.topics["orders"]
    assert image.topics_by_id[T1] is orders and image.topic_by_id(T1) is orders
    assert [p.partition for p in orders.partitions] == [0, 1], "sorted by index whatever the record order"
    assert orders.partitions[0].offline_replicas == (5,), "not registered"
    assert orders.partitions[1].offline_replicas == (4,), "fenced"
    image = image_of([unfence(4)], image)
    assert image.topics["orders"].partitions[1].offline_replicas == (), "unfencing needs no partition record"
    assert image.topics["orders"].partitions[0].offline_replicas == (5,)


def test_partition_change_bumps_the_leader_epoch_on_a_leader_or_isr_change_and_the_partition_epoch_always() -> None:
    image = image_of([*BROKERS_UP, topic(T1, "t", 1), partition(T1, 0, [1, 2, 3], leader_epoch=7, partition_epoch=9)])

    def after(**fields: object):
        return image_of([change(T1, 0, **fields)], image).topics["t"].partitions[0]

    moved = after(leader=2)
    assert (moved.leader, moved.leader_epoch, moved.partition_epoch, moved.isr) == (2, 8, 10, (1, 2, 3))
    shrunk = after(isr=[1, 2])
    assert (shrunk.leader, shrunk.leader_epoch, shrunk.partition_epoch, shrunk.isr) == (1, 8, 10, (1, 2))
    reassigned = after(replicas=[1, 2, 3, 4], adding_replicas=[4])
    assert (reassigned.leader_epoch, reassigned.partition_epoch) == (7, 10), "neither leader nor ISR changed"
    assert reassigned.replicas == (1, 2, 3, 4) and reassigned.adding_replicas == (4,)
    leaderless = after(leader=-1, isr=[])
    assert (leaderless.leader, leaderless.isr, leaderless.leader_epoch) == (-1, (), 8)
    recovering = after(leader_recovery_state=1)
    assert recovering.leader_recovery_state == 1 and recovering.leader_epoch == 7
    twice = image_of([change(T1, 0, leader=2), change(T1, 0, isr=[2, 3])], image).topics["t"].partitions[0]
    assert (twice.leader, twice.isr, twice.leader_epoch, twice.partition_epoch) == (2, (2, 3), 9, 11)


def test_records_about_missing_entities_are_ignored() -> None:
    delta = MetadataDelta(image_of([topic(T1, "t", 1)]))
    assert not delta.replay(partition(T2, 0, [1]))
    assert not delta.replay(change(T1, 0, leader=1)), "no such partition"
    assert not delta.replay(fence(9)) and not delta.replay(unregister(9))
    assert not delta.replay(NO_OP)
    assert not delta.replay(topic(uuid.UUID(int=0), "zero", 5)), "the zero id is never a topic"
    image = delta.apply()
    assert list(image.topics) == ["t"] and image.topics["t"].partitions == ()
    assert image.topic_epoch == 5, "the counter takes every TopicEpoch it sees"


def test_a_topic_record_for_a_live_topic_raises_its_epoch_only() -> None:
    image = image_of([*BROKERS_UP, topic(T1, "t", 3), partition(T1, 0, [1])])
    expanded = image_of([topic(T1, "t", 5), partition(T1, 1, [2])], image)
    assert expanded.topics["t"].topic_epoch == 5 and len(expanded.topics["t"].partitions) == 2
    assert expanded.topic_epoch == 5
    assert image_of([topic(T1, "t", 2)], image).topics["t"].topic_epoch == 3, "never lowered"
    assert image_of([topic(T1, "renamed", 9)], image).topics["t"].topic_epoch == 9, "the name stays"
    clash = image_of([topic(T2, "t", 10)], image)
    assert list(clash.topics_by_id) == [T1] and clash.topic_epoch == 10, "a second topic of a live name is ignored"


def test_remove_topic_takes_partitions_and_topic_configs_and_raises_the_counter() -> None:
    image = image_of([topic(T1, "t", 1), partition(T1, 0, [1]), topic(T2, "u", 2), config(2, "t", "retention.ms", "1"),
                      config(2, "u", "retention.ms", "2"), config(4, "t", "x", "3"), remove_topic(T1, 3)])
    assert list(image.topics) == ["u"] and list(image.topics_by_id) == [T2]
    assert image.configs == {(2, "u"): {"retention.ms": "2"}, (4, "t"): {"x": "3"}}, "a broker named t keeps its"
    assert image.topic_epoch == 3
    image = image_of([remove_topic(uuid.UUID(int=0), 8), remove_topic(T3, 7)], image)
    assert list(image.topics) == ["u"] and image.topic_epoch == 8, "an unknown id only raises the counter"
    image = image_of([remove_topic(T2)], image)
    assert image.topics == {} and image.topic_epoch == 8, "a removal without TopicEpoch leaves the counter"
    recreated = image_of([topic(T1, "t", 9), partition(T1, 0, [2])], image)
    assert recreated.topics["t"].partitions[0].replicas == (2,), "nothing of the old topic comes back"


def test_configs_are_set_and_deleted_and_features_set_and_cleared() -> None:
    image = image_of([config(4, "1", "a", "x"), config(4, "1", "b", "y"), config(4, "1", "a", "z"),
                      config(4, "1", "c", None), feature("metadata.version", 21), feature("kraft.version", 1)])
    assert image.configs == {(4, "1"): {"a": "z", "b": "y"}}
    assert image.features == {"metadata.version": 21, "kraft.version": 1}
    image = image_of([config(4, "1", "a", None), config(4, "1", "b", None), feature("kraft.version", 0)], image)
    assert image.configs == {} and image.features == {"metadata.version": 21}


def test_not_a_metadata_record_raises_and_changes_nothing_but_the_offset() -> None:
    delta = MetadataDelta(image_of([topic(T1, "t", 1)]))
    with pytest.raises(MetadataRecordError):
        delta.replay(b"\x01\x02\x00garbage", 7)
    image = delta.apply()
    assert image.offset == 7 and list(image.topics) == ["t"]


def test_a_delta_is_applied_once() -> None:
    delta = MetadataDelta(empty_image())
    delta.apply()
    with pytest.raises(RuntimeError):
        delta.apply()
    with pytest.raises(RuntimeError):
        delta.replay(NO_OP)


# -- sharing -------------------------------------------------------------------------------------


def test_unchanged_topics_are_shared_with_their_encodings() -> None:
    image = image_of([*BROKERS_UP, topic(T1, "a", 1), partition(T1, 0, [1, 2]), topic(T2, "b", 2),
                      partition(T2, 0, [3])])
    image.encoded[("a", 12)] = b"a12"
    image.encoded[("b", 12)] = b"b12"
    image.encoded[("b", 9)] = b"b9"
    after = image_of([change(T2, 0, leader=3)], image)
    assert after.topics["a"] is image.topics["a"] and after.topics_by_id[T1] is image.topics["a"]
    assert after.topics["b"] is not image.topics["b"]
    assert after.encoded == {("a", 12): b"a12"}, "the memo of a changed topic is dropped"
    assert after.registrations is image.registrations and after.brokers is image.brokers
    fenced = image_of([fence(3)], after)
    assert fenced.topics["a"] is after.topics["a"], "a topic with no replica on the broker is untouched"
    assert fenced.topics["b"].partitions[0].offline_replicas == (3,)
    assert ("a", 12) in fenced.encoded


def test_order_is_the_record_by_record_order_however_records_are_batched() -> None:
    values = [topic(T1, "a", 1), topic(T2, "b", 2), remove_topic(T1, 3), topic(T3, "c", 4), topic(T1, "a", 5),
              register(1), register(2), unregister(2), register(2), config(2, "x", "k", "1"), config(2, "y", "k", "1"),
              config(2, "x", "k", None), config(2, "x", "k", "2")]
    one_delta = image_of(values)
    per_record = empty_image()
    for value in values:
        per_record = image_of([value], per_record)
    assert list(one_delta.topics_by_id) == list(per_record.topics_by_id) == [T2, T3, T1]
    assert list(one_delta.topics) == list(per_record.topics) == ["b", "c", "a"]
    assert list(one_delta.registrations) == list(per_record.registrations) == [1, 2]
    assert list(one_delta.configs) == list(per_record.configs) == [(2, "y"), (2, "x")]


# -- the fast decoder ----------------------------------------------------------------------------


def strict(value: bytes) -> object:
    try:
        return decode_metadata_record(value)
    except MetadataRecordError as exc:
        return type(exc)


def fast(value: bytes) -> object:
    try:
        return decode_record(value)
    except MetadataRecordError as exc:
        return type(exc)


def mangled(value: bytes, data: st.DataObject) -> bytes:
    how = data.draw(st.sampled_from(["cut", "extend", "flip", "same"]))
    if how == "cut":
        return value[: data.draw(st.integers(0, len(value)))]
    if how == "extend":
        return value + data.draw(st.binary(min_size=1, max_size=4))
    if how == "flip" and value:
        index = data.draw(st.integers(0, len(value) - 1))
        return value[:index] + bytes([data.draw(st.integers(0, 255))]) + value[index + 1:]
    return value


_IDS = st.lists(st.integers(0, 3), max_size=3)
VALID = st.one_of(
    any_record,
    st.builds(register, st.integers(0, 3)),
    st.builds(remove_topic, st.just(T1), st.integers(-1, 9)),
    st.builds(change, st.just(T1), st.integers(0, 2), leader=st.integers(-2, 3), isr=st.none() | _IDS),
    st.builds(partition, st.just(T1), st.integers(0, 2), _IDS.filter(bool)),
    st.builds(topic, st.just(T1), st.text(max_size=5), st.integers(-1, 1 << 20)),
)


@settings(max_examples=500, deadline=None)
@given(VALID, st.data())
def test_the_fast_decoder_agrees_with_the_strict_one(value: bytes, data: st.DataObject) -> None:
    value = mangled(value, data)
    assert fast(value) == strict(value)
