"""QuorumController: IncrementalAlterConfigs and DescribeConfigs."""

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


@pytest.mark.parametrize("key", [32, 44])
def test_responses_encode_at_every_version(key: int) -> None:
    qc = controller()
    if key == 32:
        result = qc.describe_configs(describe_configs_request((TOPIC, "orders"), (TOPIC, "x"), include_synonyms=True),
                                     current())
    else:
        result = qc.incremental_alter_configs(alter_configs_request((TOPIC, "orders", [("retention.ms", SET, "1")]),
                                                                    (TOPIC, "x", [])), current())
    api = APIS[key]
    for version in range(api.min_version, api.max_version + 1):
        assert api.response.decode(result.response.encode(version=version), version=version) is not None
