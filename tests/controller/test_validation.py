"""CreateTopics / DeleteTopics / CreatePartitions checks: Kafka's error codes and messages."""

from __future__ import annotations

import pytest

from quorum.controller.results import ApiError
from quorum.controller.validation import (
    check_collision,
    check_manual_replicas,
    check_new_topic_name,
    check_partition_increase,
    check_replication_factor,
    manual_new_partitions,
    manual_topic_assignment,
    resolve_counts,
    unify_collision_chars,
    validate_topic_name,
)
from quorum.wire.errors import ErrorCode


def error_of(call, *args, **kwargs) -> ApiError:
    with pytest.raises(ApiError) as info:
        call(*args, **kwargs)
    return info.value


@pytest.mark.parametrize("name", ["a", "orders", "A.b_c-9", "x" * 249, "..."])
def test_legal_topic_names(name: str) -> None:
    validate_topic_name(name)


@pytest.mark.parametrize(("name", "message"), [
    ("", "Topic name is illegal, it can't be empty"),
    (".", 'Topic name cannot be "." or ".."'),
    ("..", 'Topic name cannot be "." or ".."'),
    ("x" * 250, f"Topic name is illegal, it can't be longer than 249 characters, Topic name: {'x' * 250}"),
    ("a b", 'Topic name "a b" is illegal, it contains a character other than ASCII alphanumerics, '
            "'.', '_' and '-'"),
    ("caf\u00e9", 'Topic name "caf\u00e9" is illegal, it contains a character other than ASCII alphanumerics, '
                  "'.', '_' and '-'"),
    ("a/b", None), ("a:b", None), ("a\nb", None),
])
def test_illegal_topic_names(name: str, message: str | None) -> None:
    error = error_of(validate_topic_name, name)
    assert error.code == ErrorCode.INVALID_TOPIC_EXCEPTION
    if message is not None:
        assert error.message == message


def test_collision_of_dot_and_underscore() -> None:
    assert unify_collision_chars("a.b_c") == "a_b_c"
    existing = {"a_b": "a_b"}
    error = error_of(check_collision, "a.b", existing)
    assert (error.code, error.message) == (ErrorCode.INVALID_TOPIC_EXCEPTION, "Topic 'a.b' collides with existing "
                                           "topic: a_b")
    check_collision("a_b", existing)  # the same name is not a collision (it is TOPIC_ALREADY_EXISTS)
    check_collision("ab", existing)


def test_new_topic_name_checks_in_kafka_order() -> None:
    assert error_of(check_new_topic_name, "a b", {"a b"}, {}).code == ErrorCode.INVALID_TOPIC_EXCEPTION
    error = error_of(check_new_topic_name, "orders", {"orders"}, {})
    assert (error.code, error.message) == (ErrorCode.TOPIC_ALREADY_EXISTS, "Topic 'orders' already exists.")
    assert error_of(check_new_topic_name, "__cluster_metadata", set(), {}).code == ErrorCode.INVALID_REQUEST
    check_new_topic_name("payments", {"orders"}, {})


def test_counts_default_to_kafka_defaults() -> None:
    assert resolve_counts(-1, -1) == (1, 1)
    assert resolve_counts(-1, -1, default_num_partitions=6, default_replication_factor=3) == (6, 3)
    assert resolve_counts(4, 2) == (4, 2)


@pytest.mark.parametrize(("partitions", "factor", "code", "message"), [
    (1, 0, ErrorCode.INVALID_REPLICATION_FACTOR, "Replication factor must be larger than 0, or -1 to use the "
                                                 "default value."),
    (1, -2, ErrorCode.INVALID_REPLICATION_FACTOR, None),
    (0, 1, ErrorCode.INVALID_PARTITIONS, "Number of partitions was set to an invalid non-positive value."),
    (-5, 1, ErrorCode.INVALID_PARTITIONS, None),
])
def test_invalid_counts(partitions: int, factor: int, code: int, message: str | None) -> None:
    error = error_of(resolve_counts, partitions, factor)
    assert error.code == code
    if message:
        assert error.message == message


def test_replication_factor_against_usable_brokers() -> None:
    check_replication_factor(3, 3)
    error = error_of(check_replication_factor, 3, 2)
    assert error.code == ErrorCode.INVALID_REPLICATION_FACTOR
    assert error.message == ("Unable to replicate the partition 3 time(s): The target replication factor of 3 cannot "
                             "be reached because only 2 broker(s) are registered and unfenced.")
    error = error_of(check_replication_factor, 1, 0)
    assert error.message == "Unable to replicate the partition 1 time(s): All brokers are currently fenced."


def test_manual_replicas() -> None:
    registered = {1, 2, 3}
    check_manual_replicas([3, 1], registered=registered, replication_factor=2)
    cases = [
        ([], None, "The manual partition assignment includes an empty replica list."),
        ([1, 4], None, "The manual partition assignment includes broker 4, but no such broker is registered."),
        ([2, 1, 2], None, "The manual partition assignment includes the broker 2 more than once."),
        ([1, 2, 3], 2, "The manual partition assignment includes a partition with 3 replica(s), but this is not "
                       "consistent with previous partitions, which have 2 replica(s)."),
    ]
    for replicas, factor, message in cases:
        error = error_of(check_manual_replicas, replicas, registered=registered, replication_factor=factor)
        assert (error.code, error.message) == (ErrorCode.INVALID_REPLICA_ASSIGNMENT, message)


def test_manual_topic_assignment() -> None:
    usable = {1, 2}.__contains__
    placed = manual_topic_assignment(-1, -1, [(1, [2, 3]), (0, [3, 1])], registered={1, 2, 3}, is_usable=usable)
    assert placed == [((3, 1), (1,)), ((2, 3), (2,))]  # ISR: the usable replicas, leader = first of them
    error = error_of(manual_topic_assignment, 2, -1, [(0, [1])], registered={1}, is_usable=usable)
    assert error.code == ErrorCode.INVALID_REQUEST
    assert error.message == "A manual partition assignment was specified, but numPartitions was not set to -1."
    error = error_of(manual_topic_assignment, -1, 1, [(0, [1])], registered={1}, is_usable=usable)
    assert error.message == ("A manual partition assignment was specified, but replication factor was not set "
                             "to -1.")
    error = error_of(manual_topic_assignment, -1, -1, [(0, [1]), (0, [2])], registered={1, 2}, is_usable=usable)
    assert error.message == "Found multiple manual partition assignments for partition 0"
    error = error_of(manual_topic_assignment, -1, -1, [(0, [1]), (2, [2])], registered={1, 2}, is_usable=usable)
    assert error.message == "partitions should be a consecutive 0-based integer sequence"
    error = error_of(manual_topic_assignment, -1, -1, [(0, [3])], registered={3}, is_usable=usable)
    assert (error.code, error.message) == (ErrorCode.INVALID_REPLICA_ASSIGNMENT, "All brokers specified in the "
                                           "manual partition assignment for partition 0 are fenced or in controlled "
                                           "shutdown.")


def test_partition_increase() -> None:
    check_partition_increase("t", 3, 4)
    error = error_of(check_partition_increase, "t", 3, 3)
    assert (error.code, error.message) == (ErrorCode.INVALID_PARTITIONS, "Topic already has 3 partition(s).")
    error = error_of(check_partition_increase, "t", 3, 2)
    assert error.message == "The topic t currently has 3 partition(s); 2 would not be an increase."


def test_manual_new_partitions() -> None:
    placed = manual_new_partitions(2, 4, 2, [[1, 2], [2, 3]], registered={1, 2, 3}, is_usable=lambda b: b != 3)
    assert placed == [((1, 2), (1, 2)), ((2, 3), (2,))]
    error = error_of(manual_new_partitions, 2, 4, 2, [[1, 2]], registered={1, 2}, is_usable=lambda b: True)
    assert (error.code, error.message) == (ErrorCode.INVALID_REPLICA_ASSIGNMENT, "Attempted to add 2 additional "
                                           "partition(s), but only 1 assignment(s) were specified.")
    error = error_of(manual_new_partitions, 2, 3, 2, [[1]], registered={1, 2}, is_usable=lambda b: True)
    assert "not consistent with previous partitions, which have 2 replica(s)" in error.message
