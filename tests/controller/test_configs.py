"""Topic and broker configs: validation, incremental operations, describe with sources."""

from __future__ import annotations

import pytest

from quorum.controller.configs import (
    BROKER,
    TOPIC,
    TOPIC_CONFIGS,
    ConfigSource,
    ConfigType,
    OpType,
    alter,
    check_legacy_resource_type,
    check_resource,
    check_topic_configs,
    check_value,
    describe,
    replace,
)
from quorum.controller.results import ApiError
from quorum.wire.errors import ErrorCode


def error_of(call, *args, **kwargs) -> ApiError:
    with pytest.raises(ApiError) as info:
        call(*args, **kwargs)
    return info.value


@pytest.mark.parametrize(("name", "value", "message"), [
    ("retention.ms", "abc", "Invalid value abc for configuration retention.ms: Not a number of type LONG"),
    ("segment.bytes", "9999999999", "Invalid value 9999999999 for configuration segment.bytes: Not a number of "
                                    "type INT"),
    ("min.insync.replicas", "0", "Invalid value 0 for configuration min.insync.replicas: Value must be at least 1"),
    ("preallocate", "yes", "Invalid value yes for configuration preallocate: Expected value to be either true or "
                           "false"),
    ("compression.type", "brotli", "Invalid value brotli for configuration compression.type: String must be one "
                                   "of: uncompressed, zstd, lz4, snappy, gzip, producer"),
    ("cleanup.policy", "compact,forever", None),
    ("min.cleanable.dirty.ratio", "1.5", "Invalid value 1.5 for configuration min.cleanable.dirty.ratio: Value must "
                                         "be no more than 1"),
])
def test_invalid_values(name: str, value: str, message: str | None) -> None:
    error = error_of(check_value, TOPIC_CONFIGS[name], value)
    assert error.code == ErrorCode.INVALID_CONFIG
    if message:
        assert error.message == message


@pytest.mark.parametrize(("name", "value"), [
    ("retention.ms", "-1"), ("cleanup.policy", "compact,delete"), ("preallocate", "TRUE"),
    ("min.cleanable.dirty.ratio", "0.1"), ("compression.type", "zstd"), ("cleanup.policy", ""),
])
def test_valid_values(name: str, value: str) -> None:
    check_value(TOPIC_CONFIGS[name], value)


def test_new_topic_configs() -> None:
    assert check_topic_configs([("retention.ms", "1000")]) == {"retention.ms": "1000"}
    error = error_of(check_topic_configs, [("no.such.config", "1")])
    assert (error.code, error.message) == (ErrorCode.INVALID_CONFIG, "Unknown topic config name: no.such.config")
    assert error_of(check_topic_configs, [("retention.ms", None)]).code == ErrorCode.INVALID_CONFIG
    assert error_of(check_topic_configs, [("retention.ms", "1"), ("retention.ms", "2")]).code == \
        ErrorCode.INVALID_REQUEST


def test_resources() -> None:
    check_resource(TOPIC, "orders", topic_exists=True)
    check_resource(BROKER, "", topic_exists=False)
    check_resource(BROKER, "3", topic_exists=False)
    error = error_of(check_resource, TOPIC, "orders", topic_exists=False)
    assert (error.code, error.message) == (ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, "The topic 'orders' does not exist.")
    assert error_of(check_resource, TOPIC, "", topic_exists=False).code == ErrorCode.INVALID_REQUEST
    assert error_of(check_resource, TOPIC, "a b", topic_exists=False).code == ErrorCode.INVALID_TOPIC_EXCEPTION
    assert error_of(check_resource, BROKER, "x1", topic_exists=False).code == ErrorCode.INVALID_REQUEST
    assert error_of(check_resource, 8, "1", topic_exists=False).code == ErrorCode.INVALID_REQUEST


def test_set_and_delete_topic_keys_write_only_changes() -> None:
    current = {"retention.ms": "1000", "segment.ms": "5000"}
    changes = alter(TOPIC, [("retention.ms", OpType.SET, "1000"), ("segment.ms", OpType.DELETE, None),
                            ("cleanup.policy", OpType.DELETE, None), ("min.insync.replicas", OpType.SET, "2")],
                    current)
    assert changes == [("segment.ms", None), ("min.insync.replicas", "2")]


def test_broker_keys_are_always_written() -> None:
    changes = alter(BROKER, [("log.retention.hours", OpType.SET, "10"), ("x.y", OpType.DELETE, None)],
                    {"log.retention.hours": "10"})
    assert changes == [("log.retention.hours", "10"), ("x.y", None)]


def test_an_invalid_broker_value_is_an_invalid_request() -> None:
    """Kafka's broker validates dynamic broker configs itself and answers a bad value INVALID_REQUEST
    (KAFKA-13609), a topic's INVALID_CONFIG, with the same ConfigDef message."""
    error = error_of(alter, BROKER, [("num.partitions", OpType.SET, "0")], {})
    assert (error.code, error.message) == (ErrorCode.INVALID_REQUEST, "Invalid value 0 for configuration "
                                           "num.partitions: Value must be at least 1")
    assert error_of(alter, TOPIC, [("min.insync.replicas", OpType.SET, "0")], {}).code == ErrorCode.INVALID_CONFIG


def test_append_and_subtract_on_lists_start_from_the_default() -> None:
    assert alter(TOPIC, [("cleanup.policy", OpType.APPEND, "compact")], {}) == [("cleanup.policy", "delete,compact")]
    # The default made explicit is a change (Kafka compares with the value set, not the default).
    assert alter(TOPIC, [("cleanup.policy", OpType.APPEND, "delete")], {}) == [("cleanup.policy", "delete")]
    assert alter(TOPIC, [("cleanup.policy", OpType.APPEND, "delete")], {"cleanup.policy": "delete"}) == []
    assert alter(TOPIC, [("cleanup.policy", OpType.SUBTRACT, "delete")], {"cleanup.policy": "compact,delete"}) == \
        [("cleanup.policy", "compact")]
    assert alter(TOPIC, [("leader.replication.throttled.replicas", OpType.APPEND, "0:1,1:2")], {}) == \
        [("leader.replication.throttled.replicas", "0:1,1:2")]


def test_refused_operations() -> None:
    error = error_of(alter, TOPIC, [("retention.ms", OpType.APPEND, "5")], {})
    assert (error.code, error.message) == (ErrorCode.INVALID_CONFIG, "Can't APPEND to key retention.ms because its "
                                           "type is not LIST.")
    assert error_of(alter, TOPIC, [("nope", OpType.SET, "1")], {}).message == "Unknown topic config name: nope"
    assert error_of(alter, TOPIC, [("retention.ms", OpType.SET, None)], {}).code == ErrorCode.INVALID_REQUEST
    assert error_of(alter, TOPIC, [("retention.ms", OpType.SET, "x")], {}).code == ErrorCode.INVALID_CONFIG
    assert error_of(alter, TOPIC, [("cleanup.policy", OpType.APPEND, "bogus")], {}).code == ErrorCode.INVALID_CONFIG
    assert error_of(alter, TOPIC, [("retention.ms", 9, "1")], {}).code == ErrorCode.INVALID_REQUEST
    error = error_of(alter, TOPIC, [("retention.ms", OpType.SET, "1"), ("retention.ms", OpType.DELETE, None)], {})
    assert (error.code, error.message) == (ErrorCode.INVALID_REQUEST, "Error due to duplicate config keys")


def test_deleting_a_topic_key_nobody_knows_is_allowed() -> None:
    """Kafka validates the set that results, where a deleted key no longer is: an unknown key can go."""
    assert alter(TOPIC, [("no.longer.known", OpType.DELETE, None)], {"no.longer.known": "1"}) == [
        ("no.longer.known", None)]
    assert alter(TOPIC, [("never.known", OpType.DELETE, None)], {}) == []


def test_replace_sets_the_named_keys_and_deletes_the_others() -> None:
    """Kafka's legacyAlterConfigs: the named keys, changed ones only for a topic, then a deletion for
    every key set and not named."""
    current = {"retention.ms": "1000", "max.message.bytes": "2000", "segment.ms": "5000"}
    assert replace(TOPIC, [("retention.ms", "1000"), ("cleanup.policy", "compact")], current) == [
        ("cleanup.policy", "compact"), ("max.message.bytes", None), ("segment.ms", None)]
    assert replace(TOPIC, [], current) == [("retention.ms", None), ("max.message.bytes", None), ("segment.ms", None)]
    assert replace(TOPIC, [("retention.ms", "1000")], {"retention.ms": "1000"}) == []
    assert replace(TOPIC, [("segment.ms", "5000")], {"stale.key": "1", "segment.ms": "5000"}) == [("stale.key", None)]
    # broker keys are written even when unchanged (KAFKA-14136: brokers reconfigure), unknown ones too
    assert replace(BROKER, [("log.retention.hours", "10"), ("custom.key", "x")],
                   {"log.retention.hours": "10", "num.partitions": "3"}) == [
        ("log.retention.hours", "10"), ("custom.key", "x"), ("num.partitions", None)]


def test_replace_refuses_the_whole_resource_as_alter_does() -> None:
    current = {"retention.ms": "1000"}
    error = error_of(replace, TOPIC, [("retention.ms", "5"), ("no.such.config", "1")], current)
    assert (error.code, error.message) == (ErrorCode.INVALID_CONFIG, "Unknown topic config name: no.such.config")
    error = error_of(replace, TOPIC, [("retention.ms", "soon")], current)
    assert (error.code, error.message) == (ErrorCode.INVALID_CONFIG, "Invalid value soon for configuration "
                                           "retention.ms: Not a number of type LONG")
    error = error_of(replace, TOPIC, [("no.such.config", "1"), ("retention.ms", None), ("segment.ms", None)], current)
    assert (error.code, error.message) == (ErrorCode.INVALID_REQUEST,  # every null named, before other checks
                                           "Null value not supported for : retention.ms, segment.ms")
    error = error_of(replace, TOPIC, [("retention.ms", "5"), ("retention.ms", "6")], current)
    assert (error.code, error.message) == (ErrorCode.INVALID_REQUEST, "Error due to duplicate config keys")
    error = error_of(replace, BROKER, [("message.max.bytes", "-1")], {})  # as alter: KAFKA-13609's code
    assert (error.code, error.message) == (ErrorCode.INVALID_REQUEST, "Invalid value -1 for configuration "
                                           "message.max.bytes: Value must be at least 0")


def test_legacy_resource_types() -> None:
    """Kafka's broker takes TOPIC, BROKER, CLIENT_METRICS and GROUP resources in AlterConfigs; not
    BROKER_LOGGER (KIP-412 levels are incremental only) nor a type it does not know."""
    for kind in (TOPIC, BROKER, 16, 32):
        check_legacy_resource_type(kind)
    for kind in (8, 0, 1, 99):
        error = error_of(check_legacy_resource_type, kind)
        assert (error.code, error.message) == (ErrorCode.INVALID_REQUEST, f"Unknown resource type {kind}")


def test_describe_topic() -> None:
    configs = {(TOPIC, "orders"): {"retention.ms": "1000"}}
    entries = {e.name: e for e in describe(TOPIC, "orders", None, configs)}
    assert set(entries) == set(TOPIC_CONFIGS)
    retention = entries["retention.ms"]
    assert (retention.value, retention.source, retention.config_type) == ("1000", ConfigSource.TOPIC_CONFIG,
                                                                         ConfigType.LONG)
    assert retention.synonyms == (("retention.ms", "1000", ConfigSource.TOPIC_CONFIG),
                                  ("retention.ms", "604800000", ConfigSource.DEFAULT_CONFIG))
    assert (entries["cleanup.policy"].value, entries["cleanup.policy"].source) == ("delete",
                                                                                   ConfigSource.DEFAULT_CONFIG)
    only = describe(TOPIC, "orders", ["segment.ms", "unknown.key", "retention.ms"], configs)
    assert [e.name for e in only] == ["segment.ms", "retention.ms"]


def test_describe_broker_layers() -> None:
    configs = {(BROKER, "1"): {"log.retention.hours": "1"}, (BROKER, ""): {"log.retention.hours": "2",
                                                                          "message.max.bytes": "100"}}
    entries = {e.name: e for e in describe(BROKER, "1", None, configs, {"num.partitions": "6"})}
    assert (entries["log.retention.hours"].value, entries["log.retention.hours"].source) == (
        "1", ConfigSource.DYNAMIC_BROKER_CONFIG)
    assert [s for _, _, s in entries["log.retention.hours"].synonyms] == [
        ConfigSource.DYNAMIC_BROKER_CONFIG, ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG, ConfigSource.DEFAULT_CONFIG]
    assert (entries["message.max.bytes"].value, entries["message.max.bytes"].source) == (
        "100", ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG)
    assert entries["num.partitions"].value == "6"
    cluster = {e.name: e for e in describe(BROKER, "", None, configs)}
    assert cluster["log.retention.hours"].value == "2"


def test_topic_config_value_layers() -> None:
    from quorum.controller.configs import BROKER, TOPIC, topic_config_value

    key = "unclean.leader.election.enable"
    assert topic_config_value({}, "t", key) == "false"  # Kafka's default
    assert topic_config_value({}, "t", key, static_default="true") == "true"  # the controller's own setting
    cluster = {(BROKER, ""): {key: "true"}}
    assert topic_config_value(cluster, "t", key, static_default="false") == "true"  # dynamic over static
    assert topic_config_value({**cluster, (TOPIC, "t"): {key: "false"}}, "t", key) == "false"  # the topic first
    assert topic_config_value({(BROKER, "1"): {key: "true"}}, "t", key) == "false"  # one broker is no default
    assert topic_config_value({}, "t", "no.such.key") is None


def test_kip_950_turning_remote_storage_off_needs_delete_on_disable() -> None:
    """Kafka's LogConfig.validateTurningOffRemoteStorageWithDelete: INVALID_CONFIG with its message."""
    tiered = {"remote.storage.enable": "true"}
    for op, value in ((OpType.SET, "false"), (OpType.DELETE, None)):
        error = error_of(alter, TOPIC, [("remote.storage.enable", op, value)], tiered)
        assert error.code == ErrorCode.INVALID_CONFIG
        assert error.message.startswith("It is invalid to disable remote storage without deleting remote data.")
    with_delete = [("remote.storage.enable", OpType.SET, "false"), ("remote.log.delete.on.disable", OpType.SET, "true")]
    assert alter(TOPIC, with_delete, tiered) == [("remote.storage.enable", "false"),
                                                 ("remote.log.delete.on.disable", "true")]
    # set earlier is as good; a topic never tiered is not concerned
    assert alter(TOPIC, [("remote.storage.enable", OpType.SET, "false")],
                 {**tiered, "remote.log.delete.on.disable": "true"}) == [("remote.storage.enable", "false")]
    assert alter(TOPIC, [("retention.ms", OpType.SET, "5")], {}) == [("retention.ms", "5")]
    # the legacy AlterConfigs drops what it does not name: remote storage off, refused the same way
    assert error_of(replace, TOPIC, [("retention.ms", "5")], tiered).code == ErrorCode.INVALID_CONFIG


def test_kip_950_copy_disable_needs_local_retention_to_follow_retention() -> None:
    tiered = {"remote.storage.enable": "true", "local.retention.bytes": "1"}
    error = error_of(alter, TOPIC, [("remote.log.copy.disable", OpType.SET, "true")], tiered)
    assert (error.code, error.message) == (ErrorCode.INVALID_CONFIG, "When `remote.log.copy.disable` is set to "
                                           "true, the `local.retention.bytes` and `retention.bytes` must be set to the "
                                           "identical value because there will be no more logs copied to the remote "
                                           "storage.")  # fmt: skip
    ok = [("remote.log.copy.disable", OpType.SET, "true"), ("local.retention.bytes", OpType.DELETE, None)]
    assert alter(TOPIC, ok, tiered) == [("remote.log.copy.disable", "true"), ("local.retention.bytes", None)]
    with pytest.raises(ApiError, match="local.retention.ms` and `retention.ms"):
        check_topic_configs([("remote.storage.enable", "true"), ("remote.log.copy.disable", "true"),
                             ("local.retention.ms", "10"), ("retention.ms", "20")])
