"""A partition's log settings: topic configs over broker configs over Kafka's defaults.

Kafka resolves each topic setting from, in order: the topic's own config (`segment.bytes`), the
broker's dynamic config for this broker, the cluster-wide dynamic broker default, the broker's
static properties (`log.segment.bytes`), and Kafka's default. The metadata image holds the
dynamic ones (ConfigRecords: TOPIC resources by name, BROKER resources by id, "" for the
cluster default); the node's properties file the static ones. Pure functions of those inputs.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

TOPIC_RESOURCE = 2
BROKER_RESOURCE = 4

_LONG_MAX = 2**63 - 1
_HOUR_MS = 60 * 60 * 1000


@dataclass(frozen=True, slots=True)
class LogConfig:
    """What the write path of one partition acts on; None for a limit that is off."""

    segment_bytes: int = 1 << 30
    segment_ms: int | None = 7 * 24 * _HOUR_MS
    retention_ms: int | None = 7 * 24 * _HOUR_MS
    retention_bytes: int | None = None
    max_message_bytes: int = 1048588
    index_interval_bytes: int = 4096
    log_append_time: bool = False
    min_insync_replicas: int = 1
    flush_messages: int | None = None
    remote_storage_enable: bool = False
    """KIP-405's topic `remote.storage.enable`; takes effect only on brokers with
    `remote.log.storage.system.enable` (those composed with a remote tier)."""
    remote_log_copy_disable: bool = False
    """KIP-950's `remote.log.copy.disable`: no more uploads; what is in the remote tier is still
    served and expires by `retention.*`."""
    remote_log_delete_on_disable: bool = False
    """KIP-950's `remote.log.delete.on.disable`: turning `remote.storage.enable` off deletes the
    partition's remote data (the controller refuses turning it off without this)."""
    local_retention_ms: int | None = 7 * 24 * _HOUR_MS
    """`local.retention.ms` resolved: -2 (the default) follows `retention.ms`."""
    local_retention_bytes: int | None = None
    """`local.retention.bytes` resolved: -2 (the default) follows `retention.bytes`."""
    compacted: bool = False
    """`cleanup.policy` (`log.cleanup.policy`) contains `compact`: the log cleaner keeps the latest
    record of each key (`quorum.log.cleaner`), and KIP-1023 does not bootstrap such a topic from
    the tier."""
    min_cleanable_dirty_ratio: float = 0.5
    """`min.cleanable.dirty.ratio` (`log.cleaner.min.cleanable.ratio`): the share of a compacted
    log's cleanable bytes written since its last cleaning that starts the next one."""
    delete_retention_ms: int = 24 * _HOUR_MS
    """`delete.retention.ms` (`log.cleaner.delete.retention.ms`): how long the cleaner keeps a tombstone."""
    min_compaction_lag_ms: int = 0
    """`min.compaction.lag.ms`: a record this young is not compacted yet."""
    max_compaction_lag_ms: int | None = None
    """`max.compaction.lag.ms`: a dirty record this old gets its log cleaned whatever the ratio."""
    deletes: bool = True
    """`cleanup.policy` contains `delete`: only then do `retention.ms` and `retention.bytes` delete
    segments, as in Kafka (a `compact`-only topic keeps every key's latest record however old)."""
    timestamp_before_max_ms: int | None = None
    """`message.timestamp.before.max.ms` (KIP-937): how far in the past a CreateTime record's
    timestamp may lie; None for no limit (Kafka's default, Long.MAX_VALUE)."""
    timestamp_after_max_ms: int | None = _HOUR_MS
    """`message.timestamp.after.max.ms` (KIP-937): how far in the future it may lie; Kafka 4.0's
    default is one hour. Both fall back to the deprecated `message.timestamp.difference.max.ms`
    where they are not set, as Kafka 3.6 to 3.9 resolve them."""


# (topic config, broker config, Kafka's default as text)
_KEYS = {
    "segment_bytes": ("segment.bytes", "log.segment.bytes", str(1 << 30)),
    "segment_ms": ("segment.ms", "log.roll.ms", None),
    "retention_ms": ("retention.ms", "log.retention.ms", None),
    "retention_bytes": ("retention.bytes", "log.retention.bytes", "-1"),
    "max_message_bytes": ("max.message.bytes", "message.max.bytes", "1048588"),
    "index_interval_bytes": ("index.interval.bytes", "log.index.interval.bytes", "4096"),
    "timestamp_type": ("message.timestamp.type", "log.message.timestamp.type", "CreateTime"),
    "min_insync_replicas": ("min.insync.replicas", "min.insync.replicas", "1"),
    "flush_messages": ("flush.messages", "log.flush.interval.messages", str(_LONG_MAX)),
    "remote_storage_enable": ("remote.storage.enable", "", "false"),
    "remote_log_copy_disable": ("remote.log.copy.disable", "", "false"),
    "remote_log_delete_on_disable": ("remote.log.delete.on.disable", "", "false"),
    "local_retention_ms": ("local.retention.ms", "log.local.retention.ms", "-2"),
    "local_retention_bytes": ("local.retention.bytes", "log.local.retention.bytes", "-2"),
    "cleanup_policy": ("cleanup.policy", "log.cleanup.policy", "delete"),
    "min_cleanable_dirty_ratio": ("min.cleanable.dirty.ratio", "log.cleaner.min.cleanable.ratio", "0.5"),
    "delete_retention_ms": ("delete.retention.ms", "log.cleaner.delete.retention.ms", str(24 * _HOUR_MS)),
    "min_compaction_lag_ms": ("min.compaction.lag.ms", "log.cleaner.min.compaction.lag.ms", "0"),
    "max_compaction_lag_ms": ("max.compaction.lag.ms", "log.cleaner.max.compaction.lag.ms", str(_LONG_MAX)),
    "timestamp_before_max_ms": ("message.timestamp.before.max.ms", "log.message.timestamp.before.max.ms",
                                str(_LONG_MAX)),
    "timestamp_after_max_ms": ("message.timestamp.after.max.ms", "log.message.timestamp.after.max.ms",
                               str(_HOUR_MS)),
    "timestamp_difference_max_ms": ("message.timestamp.difference.max.ms",
                                    "log.message.timestamp.difference.max.ms", str(_LONG_MAX)),
}
_TIMESTAMP_BOUNDS = ("timestamp_before_max_ms", "timestamp_after_max_ms")
FOLLOW_RETENTION = -2
"""`local.retention.*`'s default: the same as `retention.*` (KIP-405)."""


class LogConfigError(ValueError):
    """A setting that does not parse; names the key and the value."""


def _broker_value(broker: tuple[Mapping[str, str], ...], key: str) -> str | None:
    for layer in broker:
        if key in layer:
            return layer[key]
    return None


def _int(key: str, text: str) -> int:
    try:
        return int(text.strip())
    except ValueError:
        raise LogConfigError(f"{key} must be an integer, got {text!r}") from None


def _bool(values: Mapping[str, str], name: str) -> bool:
    text = values[name].strip().lower()
    if text not in ("true", "false"):
        raise LogConfigError(f"{_KEYS[name][0]} must be true or false, got {values[name]!r}")
    return text == "true"


def _broker_time_ms(broker: tuple[Mapping[str, str], ...], ms_key: str, minutes_key: str | None,
                    hours_key: str, default_hours: int) -> str:
    """Kafka's `log.retention.{ms,minutes,hours}` and `log.roll.{ms,hours}`: the finest one set wins."""
    for key, factor in ((ms_key, 1), (minutes_key, 60_000), (hours_key, _HOUR_MS)):
        if key is None:
            continue
        value = _broker_value(broker, key)
        if value is not None:
            number = _int(key, value)
            return str(number * factor if number >= 0 else -1)
    return str(default_hours * _HOUR_MS)


def resolve_log_config(
    topic_configs: Mapping[str, str],
    static: Mapping[str, str],
    dynamic_broker: Mapping[str, str] | None = None,
    dynamic_default: Mapping[str, str] | None = None,
) -> LogConfig:
    """The LogConfig of a topic with `topic_configs`, on a broker with properties `static` and the
    dynamic broker configs of the image (this broker's, then the cluster default)."""
    broker = tuple(layer for layer in (dynamic_broker, dynamic_default, static) if layer)
    values: dict[str, str] = {}
    unset: set[str] = set()  # settings at Kafka's default: set on neither the topic nor the broker
    for name, (topic_key, broker_key, default) in _KEYS.items():
        if topic_key not in topic_configs and (not broker_key or _broker_value(broker, broker_key) is None):
            unset.add(name)
        if topic_key in topic_configs:
            values[name] = topic_configs[topic_key]
        elif name == "retention_ms":
            values[name] = _broker_time_ms(broker, "log.retention.ms", "log.retention.minutes",
                                           "log.retention.hours", 168)
        elif name == "segment_ms":
            values[name] = _broker_time_ms(broker, "log.roll.ms", None, "log.roll.hours", 168)
        elif not broker_key:
            values[name] = default or ""
        else:
            found = _broker_value(broker, broker_key)
            values[name] = found if found is not None else (default or "")
    retention_ms = _int("retention.ms", values["retention_ms"])
    retention_bytes = _int("retention.bytes", values["retention_bytes"])
    segment_ms = _int("segment.ms", values["segment_ms"])
    flush = _int("flush.messages", values["flush_messages"])
    local_ms = _int("local.retention.ms", values["local_retention_ms"])
    local_bytes = _int("local.retention.bytes", values["local_retention_bytes"])
    remote, copy_disable, delete_on_disable = (_bool(values, name) for name in (
        "remote_storage_enable", "remote_log_copy_disable", "remote_log_delete_on_disable"))
    for key, value in (("local.retention.ms", local_ms), ("local.retention.bytes", local_bytes)):
        if value < FOLLOW_RETENTION:
            raise LogConfigError(f"{key} must be -2 (follow retention), -1 (unlimited) or more, got {value}")
    policies = {policy.strip().lower() for policy in values["cleanup_policy"].split(",")}  # the controller checked them
    timestamp_type = values["timestamp_type"].strip()
    if timestamp_type not in ("CreateTime", "LogAppendTime"):
        raise LogConfigError(f"message.timestamp.type must be CreateTime or LogAppendTime, got {timestamp_type!r}")
    try:
        dirty_ratio = float(values["min_cleanable_dirty_ratio"].strip())
    except ValueError:
        raise LogConfigError(f"min.cleanable.dirty.ratio must be a number, got "
                             f"{values['min_cleanable_dirty_ratio']!r}") from None  # fmt: skip
    if not 0 <= dirty_ratio <= 1:
        raise LogConfigError(f"min.cleanable.dirty.ratio must be 0..1, got {dirty_ratio}")
    max_lag = _int("max.compaction.lag.ms", values["max_compaction_lag_ms"])
    before, after = _timestamp_bounds(values, unset)
    config = LogConfig(
        segment_bytes=_int("segment.bytes", values["segment_bytes"]),
        segment_ms=segment_ms if 0 < segment_ms < _LONG_MAX else None,
        retention_ms=retention_ms if 0 <= retention_ms < _LONG_MAX else None,
        retention_bytes=retention_bytes if retention_bytes >= 0 else None,
        max_message_bytes=_int("max.message.bytes", values["max_message_bytes"]),
        index_interval_bytes=_int("index.interval.bytes", values["index_interval_bytes"]),
        log_append_time=timestamp_type == "LogAppendTime",
        min_insync_replicas=_int("min.insync.replicas", values["min_insync_replicas"]),
        flush_messages=flush if 0 < flush < _LONG_MAX else None,
        remote_storage_enable=remote,
        remote_log_copy_disable=copy_disable,
        remote_log_delete_on_disable=delete_on_disable,
        local_retention_ms=(retention_ms if 0 <= retention_ms < _LONG_MAX else None) if local_ms == FOLLOW_RETENTION
        else (local_ms if 0 <= local_ms < _LONG_MAX else None),
        local_retention_bytes=(retention_bytes if retention_bytes >= 0 else None) if local_bytes == FOLLOW_RETENTION
        else (local_bytes if local_bytes >= 0 else None),
        compacted="compact" in policies,
        deletes="delete" in policies,
        min_cleanable_dirty_ratio=dirty_ratio,
        delete_retention_ms=max(_int("delete.retention.ms", values["delete_retention_ms"]), 0),
        min_compaction_lag_ms=max(_int("min.compaction.lag.ms", values["min_compaction_lag_ms"]), 0),
        max_compaction_lag_ms=max_lag if 0 < max_lag < _LONG_MAX else None,
        timestamp_before_max_ms=before,
        timestamp_after_max_ms=after,
    )
    if not 14 <= config.segment_bytes <= 2**31 - 1:
        raise LogConfigError(f"segment.bytes must be 14..{2**31 - 1}, got {config.segment_bytes}")
    return config


def _timestamp_bounds(values: Mapping[str, str], unset: set[str]) -> tuple[int | None, int | None]:
    """`message.timestamp.before.max.ms` and `.after.max.ms` (None for Long.MAX_VALUE: no limit).
    The deprecated `message.timestamp.difference.max.ms`, when set, stands in for either bound left
    at its default or at Long.MAX_VALUE, as Kafka 3.6 to 3.9 did (KIP-937; Kafka 4.0 removed it),
    so that a topic made for an older broker keeps refusing what it refused there."""
    difference = _int("message.timestamp.difference.max.ms", values["timestamp_difference_max_ms"])
    if difference < 0:
        raise LogConfigError(f"message.timestamp.difference.max.ms must be at least 0, got {difference}")
    bounds: list[int | None] = []
    for name in _TIMESTAMP_BOUNDS:
        key = _KEYS[name][0]
        value = _int(key, values[name])
        if value < 0:
            raise LogConfigError(f"{key} must be at least 0, got {value}")
        if "timestamp_difference_max_ms" not in unset and (name in unset or value == _LONG_MAX):
            value = difference
        bounds.append(value if 0 <= value < _LONG_MAX else None)
    return bounds[0], bounds[1]


FOLLOWER_FETCH_LAST_TIERED_OFFSET_ENABLE = "follower.fetch.last.tiered.offset.enable"
"""KIP-1023's broker config: an empty follower of a tiered topic starts at the leader's earliest
pending upload offset. BOOLEAN, default false, dynamic per broker and as the cluster default."""


def broker_flag(configs: Mapping[tuple[int, str], Mapping[str, str]], broker_id: int, static: Mapping[str, str],
                key: str, default: bool = False) -> bool:
    """A BOOLEAN broker config's live value: this broker's dynamic config, the cluster-wide
    default ("" BROKER resource), the node's properties, then `default`. The controller refuses
    a dynamic value that is not a boolean; a bad static one raises LogConfigError naming it."""
    layers = tuple(layer for layer in (configs.get((BROKER_RESOURCE, str(broker_id))),
                                       configs.get((BROKER_RESOURCE, "")), static) if layer)  # fmt: skip
    found = _broker_value(layers, key)
    if found is None:
        return default
    text = found.strip().lower()
    if text not in ("true", "false"):
        raise LogConfigError(f"{key} must be true or false, got {found!r}")
    return text == "true"


def config_layers(topic: str, broker_id: int) -> tuple[tuple[int, str], ...]:
    """The keys of an image's `configs` a topic's log config is resolved from: the topic's own,
    this broker's dynamic config, the cluster-wide broker default."""
    return (TOPIC_RESOURCE, topic), (BROKER_RESOURCE, str(broker_id)), (BROKER_RESOURCE, "")


def topic_log_config(configs: Mapping[tuple[int, str], Mapping[str, str]], topic: str, broker_id: int,
                     static: Mapping[str, str]) -> LogConfig:
    """`resolve_log_config` with the layers taken from an image's `configs`."""
    own, broker, default = (configs.get(key) for key in config_layers(topic, broker_id))
    return resolve_log_config(own or {}, static, broker, default)
