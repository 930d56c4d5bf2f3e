"""QuorumController: IncrementalAlterConfigs, the legacy AlterConfigs and DescribeConfigs."""

from __future__ import annotations

import random

import pytest

from quorum.controller import ControllerConfig, QuorumController
from quorum.wire import metadata_records as mr
from quorum.wire.errors import ErrorCode
from quorum.wire.protocol import APIS
from tests.controller.fakes import (
    alter_configs_request,
    brokers,
    decoded,
    describe_configs_request,
    legacy_alter_configs_request,
    replay,
    topic,
    view,
)

TOPIC, BROKER = 2, 4
SET, DELETE, APPEND, SUBTRACT = 0, 1, 2, 3


def controller() -> QuorumController:
    return QuorumController("cluster", ControllerConfig(default_num_partitions=3), random.Random(1))


def current():
    return view(topic("orders", ((1,), (1,), 1)), registrations=brokers(1),
                configs={(TOPIC, "orders"): {"retention.ms": "1000", "cleanup.policy": "delete"}})


def test_alter_topic_and_broker_configs() -> None:
    request = alter_configs_request(
        (TOPIC, "orders", [("retention.ms", SET, "2000"), ("cleanup.policy", APPEND, "compact"),
                           ("segment.ms", DELETE, None)]),
        (BROKER, "1", [("log.retention.hours", SET, "5")]),
        (BROKER, "", [("message.max.bytes", SET, "100")]))
    result = controller().incremental_alter_configs(request, current())
    got = [(r.resource_type, r.resource_name, r.name, r.value) for r in decoded(result.records)]
    assert all(isinstance(r, mr.ConfigRecord) for r in decoded(result.records))
    assert got == [(TOPIC, "orders", "retention.ms", "2000"), (TOPIC, "orders", "cleanup.policy", "delete,compact"),
                   (BROKER, "1", "log.retention.hours", "5"), (BROKER, "", "message.max.bytes", "100")]
    assert [(r.resource_type, r.resource_name, r.error_code, r.error_message) for r in result.response.responses] == [
        (TOPIC, "orders", 0, None), (BROKER, "1", 0, None), (BROKER, "", 0, None)]
    after = replay(current(), result.records)
    assert after.configs[(TOPIC, "orders")] == {"retention.ms": "2000", "cleanup.policy": "delete,compact"}


def test_alter_errors_refuse_the_whole_resource_only() -> None:
    request = alter_configs_request(
        (TOPIC, "orders", [("retention.ms", SET, "7"), ("retention.ms", SUBTRACT, "1")]),
        (TOPIC, "missing", [("retention.ms", SET, "7")]),
        (BROKER, "x", [("a", SET, "1")]),
        (BROKER, "2", [("a", SET, "1")]))
    result = controller().incremental_alter_configs(request, current())
    codes = [(r.resource_name, r.error_code) for r in result.response.responses]
    assert codes == [("orders", ErrorCode.INVALID_REQUEST), ("missing", ErrorCode.UNKNOWN_TOPIC_OR_PARTITION),
                     ("x", ErrorCode.INVALID_REQUEST), ("2", 0)]
    assert [(r.resource_name, r.name) for r in decoded(result.records)] == [("2", "a")]
    dup = controller().incremental_alter_configs(alter_configs_request((BROKER, "1", []), (BROKER, "1", [])), current())
    assert [r.error_code for r in dup.response.responses] == [ErrorCode.INVALID_REQUEST] * 2


def test_validate_only() -> None:
    result = controller().incremental_alter_configs(
        alter_configs_request((TOPIC, "orders", [("retention.ms", SET, "5")]), validate_only=True), current())
    assert result.records == () and result.response.responses[0].error_code == 0


def test_legacy_alter_configs_replaces_each_resources_whole_set() -> None:
    """AlterConfigs (API 33): what a resource does not name is deleted (a ConfigRecord with a null value,
    after the named ones, as Kafka's legacyAlterConfigs writes them); DescribeConfigs then shows it at
    its default."""
    before = view(topic("orders", ((1,), (1,), 1)), registrations=brokers(1), configs={
        (TOPIC, "orders"): {"retention.ms": "1000", "max.message.bytes": "2000"},
        (BROKER, "1"): {"log.retention.hours": "5", "num.partitions": "2"}})
    request = legacy_alter_configs_request((TOPIC, "orders", [("retention.ms", "7200000")]),
                                           (BROKER, "1", [("num.partitions", "2")]))
    result = controller().legacy_alter_configs(request, before)
    assert [(r.resource_type, r.resource_name, r.name, r.value) for r in decoded(result.records)] == [
        (TOPIC, "orders", "retention.ms", "7200000"), (TOPIC, "orders", "max.message.bytes", None),
        (BROKER, "1", "num.partitions", "2"), (BROKER, "1", "log.retention.hours", None)]
    assert [(r.resource_type, r.resource_name, r.error_code, r.error_message) for r in result.response.responses] == [
        (TOPIC, "orders", 0, None), (BROKER, "1", 0, None)]
    after = replay(before, result.records)
    assert after.configs[(TOPIC, "orders")] == {"retention.ms": "7200000"}
    assert after.configs[(BROKER, "1")] == {"num.partitions": "2"}
    described = controller().describe_configs(describe_configs_request((TOPIC, "orders", ["max.message.bytes"])),
                                              after)
    [shown] = described.response.results[0].configs
    assert (shown.value, shown.is_default) == ("1048588", True)

    emptied = controller().legacy_alter_configs(legacy_alter_configs_request((TOPIC, "orders", [])), after)
    assert (TOPIC, "orders") not in replay(after, emptied.records).configs  # no dynamic config left


def test_legacy_alter_configs_validate_only_and_refusals_write_nothing() -> None:
    request = legacy_alter_configs_request((TOPIC, "orders", [("retention.ms", "5")]), validate_only=True)
    checked = controller().legacy_alter_configs(request, current())
    assert checked.records == () and checked.response.responses[0].error_code == 0
    request = legacy_alter_configs_request(
        (TOPIC, "orders", [("retention.ms", "5"), ("no.such.config", "1")]),
        (TOPIC, "missing", [("retention.ms", "5")]),
        (8, "1", [("kafka.server", "DEBUG")]),
        (99, "x", []),
        (32, "group", [("consumer.session.timeout.ms", "45000")]),
        (BROKER, "x", []),
        (TOPIC, "twice", []), (TOPIC, "twice", []),
        (BROKER, "1", [("message.max.bytes", "0")]))
    result = controller().legacy_alter_configs(request, current())
    assert [(r.resource_name, r.error_code, r.error_message) for r in result.response.responses] == [
        ("orders", ErrorCode.INVALID_CONFIG, "Unknown topic config name: no.such.config"),
        ("missing", ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, "The topic 'missing' does not exist."),
        ("1", ErrorCode.INVALID_REQUEST, "Unknown resource type 8"),
        ("x", ErrorCode.INVALID_REQUEST, "Unknown resource type 99"),
        ("group", ErrorCode.INVALID_REQUEST, "Unsupported resource type 32: the controller serves TOPIC (2) and "
                                             "BROKER (4) configs"),
        ("x", ErrorCode.INVALID_REQUEST, "Invalid broker name x"),
        ("twice", ErrorCode.INVALID_REQUEST, "Duplicate resource."),
        ("twice", ErrorCode.INVALID_REQUEST, "Duplicate resource."),
        ("1", 0, None)]
    assert [(r.resource_name, r.name, r.value) for r in decoded(result.records)] == [("1", "message.max.bytes", "0")]


def test_describe_topic_and_broker() -> None:
    request = describe_configs_request((TOPIC, "orders", ["retention.ms", "segment.ms"]), (BROKER, "1"),
                                       (TOPIC, "missing"), (8, "1"), include_synonyms=True)
    result = controller().describe_configs(request, current())
    assert result.records == ()
    orders, broker, missing, logger = result.response.results
    assert (orders.error_code, orders.resource_type, orders.resource_name) == (0, TOPIC, "orders")
    shown = {c.name: c for c in orders.configs}
    assert list(shown) == ["retention.ms", "segment.ms"]
    retention = shown["retention.ms"]
    assert (retention.value, retention.config_source, retention.is_default, retention.config_type) == (
        "1000", 1, False, 5)
    assert [(s.value, s.source) for s in retention.synonyms] == [("1000", 1), ("604800000", 5)]
    assert (shown["segment.ms"].value, shown["segment.ms"].config_source) == ("604800000", 5)
    assert {c.name: c.value for c in broker.configs}["num.partitions"] == "3"  # the controller's own default
    assert (missing.error_code, missing.error_message) == (ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                                                           "The topic 'missing' does not exist.")
    assert logger.error_code == ErrorCode.INVALID_REQUEST


def test_describe_without_synonyms() -> None:
    result = controller().describe_configs(describe_configs_request((TOPIC, "orders")), current())
    assert all(c.synonyms == [] for c in result.response.results[0].configs)


@pytest.mark.parametrize("key", [32, 33, 44])
def test_responses_encode_at_every_version(key: int) -> None:
    qc = controller()
    if key == 33:
        result = qc.legacy_alter_configs(legacy_alter_configs_request((TOPIC, "orders", [("retention.ms", "1")]),
                                                                      (TOPIC, "x", [])), current())
    elif key == 32:
        result = qc.describe_configs(describe_configs_request((TOPIC, "orders"), (TOPIC, "x"), include_synonyms=True),
                                     current())
    else:
        result = qc.incremental_alter_configs(alter_configs_request((TOPIC, "orders", [("retention.ms", SET, "1")]),
                                                                    (TOPIC, "x", [])), current())
    api = APIS[key]
    for version in range(api.min_version, api.max_version + 1):
        assert api.response.decode(result.response.encode(version=version), version=version) is not None
