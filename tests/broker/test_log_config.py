"""Config layering of the settings the follower bootstrap reads: `cleanup.policy` (a compacted
topic is not bootstrapped from the tier) and KIP-1023's `follower.fetch.last.tiered.offset.enable`
(this broker's dynamic config over the cluster default over the properties over false)."""

from __future__ import annotations

import pytest

from quorum.broker.log_config import (
    BROKER_RESOURCE,
    FOLLOWER_FETCH_LAST_TIERED_OFFSET_ENABLE,
    LogConfigError,
    broker_flag,
    resolve_log_config,
)

FLAG = FOLLOWER_FETCH_LAST_TIERED_OFFSET_ENABLE


@pytest.mark.parametrize(("topic", "broker", "compacted"), [
    ({}, {}, False),
    ({"cleanup.policy": "compact"}, {}, True),
    ({"cleanup.policy": "delete, compact"}, {}, True),
    ({}, {"log.cleanup.policy": "compact"}, True),
    ({"cleanup.policy": "delete"}, {"log.cleanup.policy": "compact"}, False),
])  # fmt: skip
def test_compacted_follows_the_cleanup_policy(topic: dict, broker: dict, compacted: bool) -> None:
    assert resolve_log_config(topic, broker).compacted is compacted


@pytest.mark.parametrize(("own", "default", "static", "expected"), [
    (None, None, {}, False),
    (None, None, {FLAG: "true"}, True),
    (None, {FLAG: "true"}, {}, True),
    (None, {FLAG: "true"}, {FLAG: "false"}, True),
    ({FLAG: "false"}, {FLAG: "true"}, {}, False),
    ({FLAG: "TRUE"}, {FLAG: "false"}, {}, True),
])  # fmt: skip
def test_the_flag_is_this_brokers_then_the_cluster_default_then_the_properties(own, default, static,
                                                                               expected: bool) -> None:
    configs = {}
    if own is not None:
        configs[(BROKER_RESOURCE, "101")] = own
        configs[(BROKER_RESOURCE, "102")] = {FLAG: str(not expected).lower()}  # another broker's: not ours
    if default is not None:
        configs[(BROKER_RESOURCE, "")] = default
    assert broker_flag(configs, 101, static, FLAG) is expected


def test_a_bad_flag_value_is_named() -> None:
    with pytest.raises(LogConfigError, match=f"{FLAG} must be true or false, got 'yes'"):
        broker_flag({}, 1, {FLAG: "yes"}, FLAG)


def test_the_cleaners_settings_come_from_the_topic_then_the_broker_then_kafkas_defaults() -> None:
    default = resolve_log_config({}, {})
    assert (default.min_cleanable_dirty_ratio, default.delete_retention_ms, default.min_compaction_lag_ms,
            default.max_compaction_lag_ms, default.deletes) == (0.5, 86_400_000, 0, None, True)  # fmt: skip
    broker = {"log.cleaner.min.cleanable.ratio": "0.1", "log.cleaner.delete.retention.ms": "1000",
              "log.cleaner.min.compaction.lag.ms": "5", "log.cleaner.max.compaction.lag.ms": "60000"}
    config = resolve_log_config({"min.cleanable.dirty.ratio": "0.25", "cleanup.policy": "compact"}, broker)
    assert (config.min_cleanable_dirty_ratio, config.delete_retention_ms, config.min_compaction_lag_ms,
            config.max_compaction_lag_ms, config.compacted, config.deletes) == (0.25, 1000, 5, 60000, True, False)
    with pytest.raises(LogConfigError, match="min.cleanable.dirty.ratio"):
        resolve_log_config({"min.cleanable.dirty.ratio": "lots"}, {})
