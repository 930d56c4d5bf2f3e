"""QuorumController: CreateTopics, DeleteTopics, CreatePartitions, and the KIP-232 topic epoch."""

from __future__ import annotations

import base64
import random
import uuid

import pytest

from quorum.controller import ControllerConfig, QuorumController
from quorum.wire import metadata_records as mr
from quorum.wire.errors import ErrorCode
from quorum.wire.protocol import APIS, decode_body
from tests.controller.fakes import (
    brokers,
    create_partitions_request,
    create_topics_request,
    decoded,
    delete_topics_request,
    of_type,
    replay,
    topic,
    view,
)


def controller(seed: int = 42, **config) -> QuorumController:
    return QuorumController("cluster", ControllerConfig(**config), random.Random(seed))


def test_create_topic_records_and_response() -> None:
    current = view(registrations=brokers(1, 2, 3, 4, fenced=(4,)), topic_epoch=6)
    result = controller().create_topics(create_topics_request(("orders", 3, 2, {}, {"retention.ms": "1000"})),
                                        current)
    records = decoded(result.records)
    assert [type(r) for r in records] == [mr.TopicRecord, mr.ConfigRecord] + [mr.PartitionRecord] * 3
    created = records[0]
    assert (created.name, created.topic_epoch) == ("orders", 7)
    assert (records[1].resource_type, records[1].resource_name, records[1].name, records[1].value) == (
        2, "orders", "retention.ms", "1000")
    for index, part in enumerate(records[2:]):
        assert (part.topic_id, part.partition_id) == (created.topic_id, index)
        assert len(part.replicas) == 2 == len(set(part.replicas))
        assert set(part.replicas) <= {1, 2, 3}  # never the fenced broker
        assert (part.isr, part.leader, part.leader_epoch, part.partition_epoch) == (part.replicas, part.replicas[0],
                                                                                    0, 0)
    (answer,) = result.response.topics
    assert (answer.name, answer.error_code, answer.error_message) == ("orders", 0, None)
    assert (answer.topic_id, answer.num_partitions, answer.replication_factor) == (created.topic_id, 3, 2)
    shown = {c.name: (c.value, c.config_source) for c in answer.configs}
    assert shown["retention.ms"] == ("1000", 1) and shown["cleanup.policy"] == ("delete", 5)


def test_topic_ids_are_version_4_and_never_start_with_a_dash() -> None:
    result = controller().create_topics(create_topics_request(*((f"t{i}", 1, 1) for i in range(200))),
                                        view(registrations=brokers(1)))
    ids = [r.topic_id for r in of_type(result.records, mr.TopicRecord)]
    assert len(set(ids)) == 200
    for topic_id in ids:
        assert topic_id.version == 4
        assert not base64.urlsafe_b64encode(topic_id.bytes).startswith(b"-")


def test_each_topic_of_a_request_gets_its_own_epoch() -> None:
    result = controller().create_topics(create_topics_request(("a", 1, 1), ("b", 1, 1), ("c", 1, 1)),
                                        view(registrations=brokers(1)))
    assert [(r.name, r.topic_epoch) for r in of_type(result.records, mr.TopicRecord)] == [("a", 1), ("b", 2),
                                                                                          ("c", 3)]


def test_defaults_for_minus_one() -> None:
    current = view(registrations=brokers(1, 2, 3))
    result = controller().create_topics(create_topics_request(("a", -1, -1)), current)
    assert len(of_type(result.records, mr.PartitionRecord)) == 1
    result = controller(default_num_partitions=4, default_replication_factor=3).create_topics(
        create_topics_request(("a", -1, -1)), current)
    parts = of_type(result.records, mr.PartitionRecord)
    assert len(parts) == 4 and all(len(p.replicas) == 3 for p in parts)


def test_placement_is_deterministic_for_a_seed() -> None:
    current = view(registrations=brokers(1, 2, 3, 4, 5))
    one = controller(7).create_topics(create_topics_request(("a", 8, 3)), current)
    two = controller(7).create_topics(create_topics_request(("a", 8, 3)), current)
    assert one.records == two.records


def test_create_errors() -> None:
    current = view(topic("orders", ((1,), (1,), 1)), topic("a_b", ((1,), (1,), 1)), registrations=brokers(1, 2, 3,
                                                                                                           fenced=(3,)))
    request = create_topics_request(("orders", 1, 1), ("dup", 1, 1), ("dup", 2, 1), ("bad name", 1, 1),
                                    ("a.b", 1, 1), ("wide", 1, 3), ("zero", 0, 1), ("cfg", 1, 1, {}, {"x": "1"}),
                                    ("ok", 1, 1))
    result = controller().create_topics(request, current)
    answers = {t.name: (t.error_code, t.error_message) for t in result.response.topics}
    assert [t.name for t in result.response.topics] == ["orders", "dup", "bad name", "a.b", "wide", "zero", "cfg",
                                                        "ok"]
    assert answers["orders"] == (ErrorCode.TOPIC_ALREADY_EXISTS, "Topic 'orders' already exists.")
    assert answers["dup"] == (ErrorCode.INVALID_REQUEST, "Duplicate topic name.")
    assert answers["bad name"][0] == ErrorCode.INVALID_TOPIC_EXCEPTION
    assert answers["a.b"] == (ErrorCode.INVALID_TOPIC_EXCEPTION, "Topic 'a.b' collides with existing topic: a_b")
    assert answers["wide"] == (ErrorCode.INVALID_REPLICATION_FACTOR, "Unable to replicate the partition 3 time(s): "
                               "The target replication factor of 3 cannot be reached because only 2 broker(s) are "
                               "registered and unfenced.")
    assert answers["zero"][0] == ErrorCode.INVALID_PARTITIONS
    assert answers["cfg"] == (ErrorCode.INVALID_CONFIG, "Unknown topic config name: x")
    assert answers["ok"] == (0, None)
    assert [r.name for r in of_type(result.records, mr.TopicRecord)] == ["ok"]
    failed = next(t for t in result.response.topics if t.name == "wide")
    assert (failed.num_partitions, failed.replication_factor) == (-1, -1)


def test_collision_within_one_request() -> None:
    result = controller().create_topics(create_topics_request(("a_b", 1, 1), ("a.b", 1, 1)),
                                        view(registrations=brokers(1)))
    assert [t.error_code for t in result.response.topics] == [0, ErrorCode.INVALID_TOPIC_EXCEPTION]


def test_manual_assignment() -> None:
    current = view(registrations=brokers(1, 2, 3, fenced=(3,)))
    result = controller().create_topics(create_topics_request(("m", -1, -1, {0: [3, 1], 1: [2, 3]})), current)
    parts = of_type(result.records, mr.PartitionRecord)
    assert [(p.replicas, p.isr, p.leader) for p in parts] == [([3, 1], [1], 1), ([2, 3], [2], 2)]
    bad = controller().create_topics(create_topics_request(("m", -1, -1, {0: [3]})), current)
    assert bad.response.topics[0].error_code == ErrorCode.INVALID_REPLICA_ASSIGNMENT
    assert bad.records == ()


def test_validate_only_writes_nothing() -> None:
    result = controller().create_topics(create_topics_request(("a", 2, 1), validate_only=True),
                                        view(registrations=brokers(1)))
    assert result.records == ()
    assert (result.response.topics[0].error_code, result.response.topics[0].num_partitions) == (0, 2)


def test_pending_view_sees_earlier_uncommitted_results() -> None:
    qc = controller()
    pending = view(registrations=brokers(1, 2))
    first = qc.create_topics(create_topics_request(("a", 1, 1)), pending)
    pending = replay(pending, first.records)
    again = qc.create_topics(create_topics_request(("a", 1, 1), ("b", 1, 1)), pending)
    assert again.response.topics[0].error_code == ErrorCode.TOPIC_ALREADY_EXISTS
    assert [r.topic_epoch for r in of_type(again.records, mr.TopicRecord)] == [2]


def test_delete_by_name_and_by_id() -> None:
    a, b = topic("a", ((1,), (1,), 1), topic_epoch=3), topic("b", ((1,), (1,), 1), topic_epoch=4)
    current = view(a, b, registrations=brokers(1), topic_epoch=9)
    missing = uuid.UUID(int=77)
    result = controller().delete_topics(delete_topics_request(names=["a", "nope"], ids=[b.topic_id, missing]),
                                        current)
    removed = of_type(result.records, mr.RemoveTopicRecord)
    assert [(r.topic_id, r.topic_epoch) for r in removed] == [(a.topic_id, 10), (b.topic_id, 11)]
    answers = [(r.name, r.topic_id, r.error_code) for r in result.response.responses]
    assert answers == [("a", a.topic_id, 0), ("nope", uuid.UUID(int=0), ErrorCode.UNKNOWN_TOPIC_OR_PARTITION),
                       ("b", b.topic_id, 0), (None, missing, ErrorCode.UNKNOWN_TOPIC_ID)]
    after = replay(current, result.records)
    assert set(after.topics) == set() and after.topic_epoch == 11


def test_delete_old_versions_by_name() -> None:
    current = view(topic("a", ((1,), (1,), 1)), registrations=brokers(1))
    request = APIS[20].request
    body = decode_body(request, delete_topics_request(names=["a", "a"], version=5).encode(version=5), 0, 5)
    result = controller().delete_topics(body, current)
    assert result.records == ()
    assert [(r.name, r.error_code, r.error_message) for r in result.response.responses] == [
        ("a", ErrorCode.INVALID_REQUEST, "Duplicate topic name.")]
    result = controller().delete_topics(delete_topics_request(names=["a"], version=1), current)
    assert len(result.records) == 1 and result.response.responses[0].error_code == 0


def test_delete_the_same_topic_by_name_and_id() -> None:
    a = topic("a", ((1,), (1,), 1))
    result = controller().delete_topics(delete_topics_request(names=["a"], ids=[a.topic_id]),
                                        view(a, registrations=brokers(1)))
    assert len(result.records) == 1
    assert [r.error_code for r in result.response.responses] == [0, ErrorCode.INVALID_REQUEST]


def test_deleted_and_recreated_topic_gets_a_new_id_and_a_higher_epoch() -> None:
    qc = controller()
    pending = view(registrations=brokers(1, 2))
    pending = replay(pending, qc.create_topics(create_topics_request(("t", 2, 2)), pending).records)
    first = pending.topics["t"]
    pending = replay(pending, qc.delete_topics(delete_topics_request(names=["t"]), pending).records)
    pending = replay(pending, qc.create_topics(create_topics_request(("t", 2, 2)), pending).records)
    second = pending.topics["t"]
    assert second.topic_id != first.topic_id
    assert (first.topic_epoch, second.topic_epoch, pending.topic_epoch) == (1, 3, 3)


def test_create_partitions() -> None:
    t = topic("t", ((1, 2), (1, 2), 1), ((2, 3), (2, 3), 2), topic_epoch=2)
    current = view(t, registrations=brokers(1, 2, 3), topic_epoch=5)
    result = controller().create_partitions(create_partitions_request(("t", 5)), current)
    records = decoded(result.records)
    assert isinstance(records[0], mr.TopicRecord)
    assert (records[0].name, records[0].topic_id, records[0].topic_epoch) == ("t", t.topic_id, 6)
    parts = records[1:]
    assert [p.partition_id for p in parts] == [2, 3, 4]
    assert all(len(p.replicas) == 2 and p.topic_id == t.topic_id for p in parts)
    assert [(r.name, r.error_code, r.error_message) for r in result.response.results] == [("t", 0, None)]
    after = replay(current, result.records)
    assert (len(after.topics["t"].partitions), after.topics["t"].topic_epoch, after.topic_epoch) == (5, 6, 6)
    assert after.topics["t"].partitions[0] == t.partitions[0]  # the existing partitions stay


def test_create_partitions_errors_and_manual_assignment() -> None:
    t = topic("t", ((1, 2), (1, 2), 1))
    current = view(t, topic("u", ((1,), (1,), 1)), registrations=brokers(1, 2, 3))
    request = create_partitions_request(("t", 0), ("t2", 3), ("u", 3, [[2]]), ("nope", 2))
    result = controller().create_partitions(request, current)
    answers = {r.name: (r.error_code, r.error_message) for r in result.response.results}
    assert answers["t"] == (ErrorCode.INVALID_PARTITIONS, "The topic t currently has 1 partition(s); 0 would not be "
                            "an increase.")
    assert answers["nope"] == (ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, "The topic 'nope' does not exist.")
    assert answers["u"][0] == ErrorCode.INVALID_REPLICA_ASSIGNMENT
    assert answers["t2"][0] == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    assert result.records == ()
    ok = controller().create_partitions(create_partitions_request(("u", 3, [[2], [3]])), current)
    assert [(p.partition_id, p.replicas, p.leader) for p in of_type(ok.records, mr.PartitionRecord)] == [
        (1, [2], 2), (2, [3], 3)]
    dup = controller().create_partitions(create_partitions_request(("u", 3), ("u", 4)), current)
    assert [(r.name, r.error_code) for r in dup.response.results] == [("u", ErrorCode.INVALID_REQUEST)]
    same = controller().create_partitions(create_partitions_request(("t", 1)), current)
    assert same.response.results[0].error_message == "Topic already has 1 partition(s)."


def test_create_partitions_validate_only() -> None:
    current = view(topic("t", ((1,), (1,), 1)), registrations=brokers(1))
    result = controller().create_partitions(create_partitions_request(("t", 2), validate_only=True), current)
    assert result.records == () and result.response.results[0].error_code == 0


@pytest.mark.parametrize("key", [19, 20, 37])
def test_responses_encode_at_every_version(key: int) -> None:
    current = view(topic("t", ((1,), (1,), 1)), registrations=brokers(1))
    qc = controller()
    result = {19: lambda: qc.create_topics(create_topics_request(("n", 1, 1), ("t", 1, 1)), current),
              20: lambda: qc.delete_topics(delete_topics_request(names=["t", "x"]), current),
              37: lambda: qc.create_partitions(create_partitions_request(("t", 2), ("x", 2)), current)}[key]()
    api = APIS[key]
    for version in range(api.min_version, api.max_version + 1):
        assert api.response.decode(result.response.encode(version=version), version=version) is not None


def test_a_request_for_more_partitions_than_one_operation_may_write_fails_whole() -> None:
    """Kafka's MAX_RECORDS_PER_USER_OP (10,000 records): POLICY_VIOLATION for every topic of the request and
    nothing written; the protocol fuzzer's CreateTopics for 2**31 - 1 partitions held the controller placing them."""
    current = view(topic("t", ((1,), (1,), 1)), registrations=brokers(1, 2, 3))
    excessive = (ErrorCode.POLICY_VIOLATION, "Unable to perform excessively large batch operation.")
    for request in (create_topics_request(("small", 1, 1), ("huge", 2**31 - 1, 1)),
                    create_topics_request(("a", 5_000, 1), ("b", 5_000, 1))):
        result = controller().create_topics(request, current)
        assert result.records == ()
        assert {(t.error_code, t.error_message) for t in result.response.topics} == {excessive}
    result = controller().create_partitions(create_partitions_request(("t", 2**31 - 1)), current)
    assert result.records == ()
    assert [(r.name, r.error_code, r.error_message) for r in result.response.results] == [("t", *excessive)]
    assert len(controller().create_topics(create_topics_request(("fits", 9_998, 1)), current).records) == 9_999
