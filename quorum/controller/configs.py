"""Topic and broker configs: the keys Kafka knows, incremental changes, and what DescribeConfigs shows.

The controller keeps no config state: the view's `configs` maps (resource type, resource name)
to the keys set on that resource, replayed from ConfigRecords. Resource types and names are
Kafka's: TOPIC (2) named by topic, BROKER (4) named by broker id, or "" for the cluster-wide
default of every broker.

`alter` turns IncrementalAlterConfigs operations (SET, DELETE, APPEND, SUBTRACT) into the
(key, new value or None) pairs to write as ConfigRecords, checked as Kafka's controller checks
them: topic keys must be topic configs Kafka knows, values must parse as the key's type and
satisfy its range or allowed values (INVALID_CONFIG; INVALID_REQUEST for a broker's, as Kafka's broker
answers, KAFKA-13609), APPEND and SUBTRACT only apply to LIST keys. A topic key is
written only when its value changes; a broker key always (Kafka does so too, so that brokers
reconfigure). `replace` is the legacy AlterConfigs (API 33): the named configs become the
resource's whole set, every other one is deleted; it is said in `alter`'s operations, so that both
APIs share one set of checks and records. `describe` lists a resource's configs with their
source, for DescribeConfigs and for the configs of a CreateTopics response.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from enum import IntEnum

from quorum.controller.results import ApiError
from quorum.controller.validation import validate_topic_name
from quorum.wire.errors import ErrorCode

TOPIC = 2
BROKER = 4
"""Kafka's ConfigResource.Type ids (also ConfigRecord.ResourceType)."""
BROKER_LOGGER, CLIENT_METRICS, GROUP = 8, 16, 32
"""The other types Kafka's ConfigResource.Type knows (this controller keeps no configs for them)."""


class ConfigSource(IntEnum):
    """DescribeConfigsResponse ConfigSource."""

    UNKNOWN = 0
    TOPIC_CONFIG = 1
    DYNAMIC_BROKER_CONFIG = 2
    DYNAMIC_DEFAULT_BROKER_CONFIG = 3
    STATIC_BROKER_CONFIG = 4
    DEFAULT_CONFIG = 5


class ConfigType(IntEnum):
    """DescribeConfigsResponse ConfigType (v3+)."""

    UNKNOWN = 0
    BOOLEAN = 1
    STRING = 2
    INT = 3
    SHORT = 4
    LONG = 5
    DOUBLE = 6
    LIST = 7
    CLASS = 8
    PASSWORD = 9


class OpType(IntEnum):
    """IncrementalAlterConfigs ConfigOperation."""

    SET = 0
    DELETE = 1
    APPEND = 2
    SUBTRACT = 3


@dataclass(frozen=True, slots=True)
class ConfigKey:
    """A config Kafka defines: its type, default, and the checks on a value."""

    name: str
    type: ConfigType
    default: str | None
    at_least: float | None = None
    at_most: float | None = None
    one_of: tuple[str, ...] = ()


_INT_RANGE = {ConfigType.INT: (-(2**31), 2**31 - 1), ConfigType.SHORT: (-(2**15), 2**15 - 1),
              ConfigType.LONG: (-(2**63), 2**63 - 1)}
_LONG_MAX = str(2**63 - 1)


def _keys(*keys: ConfigKey) -> dict[str, ConfigKey]:
    return {key.name: key for key in keys}


TOPIC_CONFIGS: dict[str, ConfigKey] = _keys(
    ConfigKey("cleanup.policy", ConfigType.LIST, "delete", one_of=("compact", "delete")),
    ConfigKey("compression.type", ConfigType.STRING, "producer",
              one_of=("uncompressed", "zstd", "lz4", "snappy", "gzip", "producer")),
    ConfigKey("compression.gzip.level", ConfigType.INT, "-1"),
    ConfigKey("compression.lz4.level", ConfigType.INT, "9", at_least=1, at_most=17),
    ConfigKey("compression.zstd.level", ConfigType.INT, "3", at_least=-131072, at_most=22),
    ConfigKey("delete.retention.ms", ConfigType.LONG, "86400000", at_least=0),
    ConfigKey("file.delete.delay.ms", ConfigType.LONG, "60000", at_least=0),
    ConfigKey("flush.messages", ConfigType.LONG, _LONG_MAX, at_least=1),
    ConfigKey("flush.ms", ConfigType.LONG, _LONG_MAX, at_least=0),
    ConfigKey("follower.replication.throttled.replicas", ConfigType.LIST, ""),
    ConfigKey("index.interval.bytes", ConfigType.INT, "4096", at_least=0),
    ConfigKey("leader.replication.throttled.replicas", ConfigType.LIST, ""),
    ConfigKey("local.retention.bytes", ConfigType.LONG, "-2", at_least=-2),
    ConfigKey("local.retention.ms", ConfigType.LONG, "-2", at_least=-2),
    ConfigKey("max.compaction.lag.ms", ConfigType.LONG, _LONG_MAX, at_least=1),
    ConfigKey("max.message.bytes", ConfigType.INT, "1048588", at_least=0),
    ConfigKey("message.timestamp.after.max.ms", ConfigType.LONG, "3600000", at_least=0),
    ConfigKey("message.timestamp.before.max.ms", ConfigType.LONG, _LONG_MAX, at_least=0),
    # Deprecated by KIP-937 and gone from Kafka 4.0, kept with Kafka 3.x's meaning (the bound for
    # whichever of before/after is not set) so that topics made for 3.x brokers keep their limit.
    ConfigKey("message.timestamp.difference.max.ms", ConfigType.LONG, _LONG_MAX, at_least=0),
    ConfigKey("message.timestamp.type", ConfigType.STRING, "CreateTime", one_of=("CreateTime", "LogAppendTime")),
    ConfigKey("min.cleanable.dirty.ratio", ConfigType.DOUBLE, "0.5", at_least=0, at_most=1),
    ConfigKey("min.compaction.lag.ms", ConfigType.LONG, "0", at_least=0),
    ConfigKey("min.insync.replicas", ConfigType.INT, "1", at_least=1),
    ConfigKey("preallocate", ConfigType.BOOLEAN, "false"),
    ConfigKey("remote.log.copy.disable", ConfigType.BOOLEAN, "false"),
    ConfigKey("remote.log.delete.on.disable", ConfigType.BOOLEAN, "false"),
    ConfigKey("remote.storage.enable", ConfigType.BOOLEAN, "false"),
    ConfigKey("retention.bytes", ConfigType.LONG, "-1"),
    ConfigKey("retention.ms", ConfigType.LONG, "604800000", at_least=-1),
    ConfigKey("segment.bytes", ConfigType.INT, "1073741824", at_least=1024 * 1024),
    ConfigKey("segment.index.bytes", ConfigType.INT, "10485760", at_least=4),
    ConfigKey("segment.jitter.ms", ConfigType.LONG, "0", at_least=0),
    ConfigKey("segment.ms", ConfigType.LONG, "604800000", at_least=1),
    ConfigKey("unclean.leader.election.enable", ConfigType.BOOLEAN, "false"),
)
"""Kafka 4.0's topic configs (TopicConfig / LogConfig) with their defaults, and 3.x's
`message.timestamp.difference.max.ms`."""

BROKER_CONFIGS: dict[str, ConfigKey] = _keys(
    ConfigKey("auto.create.topics.enable", ConfigType.BOOLEAN, "true"),
    ConfigKey("auto.leader.rebalance.enable", ConfigType.BOOLEAN, "true"),
    ConfigKey("broker.heartbeat.interval.ms", ConfigType.INT, "2000"),
    ConfigKey("broker.session.timeout.ms", ConfigType.INT, "9000"),
    ConfigKey("default.replication.factor", ConfigType.INT, "1"),
    ConfigKey("delete.topic.enable", ConfigType.BOOLEAN, "true"),
    ConfigKey("follower.fetch.last.tiered.offset.enable", ConfigType.BOOLEAN, "false"),  # KIP-1023
    ConfigKey("leader.imbalance.check.interval.seconds", ConfigType.LONG, "300", at_least=1),
    ConfigKey("leader.imbalance.per.broker.percentage", ConfigType.INT, "10"),
    ConfigKey("log.cleanup.policy", ConfigType.LIST, "delete", one_of=("compact", "delete")),
    ConfigKey("log.retention.hours", ConfigType.INT, "168"),
    ConfigKey("message.max.bytes", ConfigType.INT, "1048588", at_least=0),
    ConfigKey("min.insync.replicas", ConfigType.INT, "1", at_least=1),
    ConfigKey("num.partitions", ConfigType.INT, "1", at_least=1),
    ConfigKey("unclean.leader.election.enable", ConfigType.BOOLEAN, "false"),
)
"""A few well-known broker configs and Kafka's defaults, for DescribeConfigs of a broker."""


def check_value(key: ConfigKey, value: str) -> None:
    """Raise INVALID_CONFIG with Kafka's ConfigDef message if `value` is not valid for `key`."""
    def invalid(reason: str) -> ApiError:
        return ApiError(ErrorCode.INVALID_CONFIG, f"Invalid value {value} for configuration {key.name}: {reason}")

    number: float | None = None
    text = value.strip()
    if key.type is ConfigType.BOOLEAN:
        if text.lower() not in ("true", "false"):
            raise invalid("Expected value to be either true or false")
    elif key.type in _INT_RANGE:
        try:
            number = int(text)
        except ValueError:
            raise invalid(f"Not a number of type {key.type.name}") from None
        low, high = _INT_RANGE[key.type]
        if not low <= number <= high:
            raise invalid(f"Not a number of type {key.type.name}")
    elif key.type is ConfigType.DOUBLE:
        try:
            number = float(text)
        except ValueError:
            raise invalid("Not a number of type DOUBLE") from None
    elif key.one_of:
        parts = [part.strip() for part in text.split(",")] if key.type is ConfigType.LIST else [text]
        if any(part not in key.one_of for part in parts if part or key.type is not ConfigType.LIST):
            raise invalid(f"String must be one of: {', '.join(key.one_of)}")
    if number is not None:
        if key.at_least is not None and number < key.at_least:
            raise invalid(f"Value must be at least {_show(key.at_least)}")
        if key.at_most is not None and number > key.at_most:
            raise invalid(f"Value must be no more than {_show(key.at_most)}")


def _show(bound: float) -> str:
    return str(int(bound)) if float(bound).is_integer() else str(bound)


def check_topic_configs(configs: Iterable[tuple[str, str | None]]) -> dict[str, str]:
    """The configs of a new topic (CreateTopics): known topic keys, each once, with valid non-null values."""
    result: dict[str, str] = {}
    for name, value in configs:
        if name in result:
            raise ApiError(ErrorCode.INVALID_REQUEST, f"Duplicate config key {name}.")
        key = TOPIC_CONFIGS.get(name)
        if key is None:
            raise ApiError(ErrorCode.INVALID_CONFIG, f"Unknown topic config name: {name}")
        if value is None:
            raise ApiError(ErrorCode.INVALID_CONFIG, f"Null value not supported for topic configs: {name}")
        check_value(key, value)
        result[name] = value
    check_remote_storage({}, result)
    return result


REMOTE_OFF_WITHOUT_DELETE = (
    "It is invalid to disable remote storage without deleting remote data. If you want to keep the remote data and "
    "turn to read only, please set `remote.storage.enable=true,remote.log.copy.disable=true`. If you want to disable "
    "remote storage and delete all remote data, please set `remote.storage.enable=false,"
    "remote.log.delete.on.disable=true`.")  # fmt: skip
"""Kafka's message (LogConfig.validateTurningOffRemoteStorageWithDelete), with INVALID_CONFIG."""


def check_remote_storage(existing: Mapping[str, str], resulting: Mapping[str, str]) -> None:
    """KIP-950's rules, as Kafka's LogConfig.validate applies them to a topic's configs (`existing`
    before the change, `resulting` after it; Kafka's defaults for keys not set): with remote storage
    on and `remote.log.copy.disable=true`, `local.retention.*` must be -2 or equal `retention.*`
    (nothing more goes to the remote tier); turning remote storage off needs
    `remote.log.delete.on.disable=true`. INVALID_CONFIG (InvalidConfigurationException) otherwise."""
    def value(name: str) -> str:
        found = resulting.get(name)
        return (TOPIC_CONFIGS[name].default if found is None else found).strip().lower()

    if value("remote.storage.enable") == "true":
        if value("remote.log.copy.disable") != "true":
            return
        for local, total in (("local.retention.bytes", "retention.bytes"), ("local.retention.ms", "retention.ms")):
            if int(value(local)) not in (-2, int(value(total))):
                raise ApiError(ErrorCode.INVALID_CONFIG, f"When `remote.log.copy.disable` is set to true, the "
                               f"`{local}` and `{total}` must be set to the identical value because there will be "
                               f"no more logs copied to the remote storage.")  # fmt: skip
    elif existing.get("remote.storage.enable", "false").strip().lower() == "true" and (
            value("remote.log.delete.on.disable") != "true"):  # fmt: skip
        raise ApiError(ErrorCode.INVALID_CONFIG, REMOTE_OFF_WITHOUT_DELETE)


def check_resource(resource_type: int, resource_name: str, topic_exists: bool) -> None:
    """The resource of an IncrementalAlterConfigs or DescribeConfigs entry is one the controller serves."""
    if resource_type == TOPIC:
        if not resource_name:
            raise ApiError(ErrorCode.INVALID_REQUEST, "Default topic resources are not allowed.")
        validate_topic_name(resource_name)
        if not topic_exists:
            raise ApiError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"The topic '{resource_name}' does not exist.")
    elif resource_type == BROKER:
        if resource_name and not (resource_name.isascii() and resource_name.isdigit()):
            raise ApiError(ErrorCode.INVALID_REQUEST, f"Invalid broker name {resource_name}")
    else:
        raise ApiError(ErrorCode.INVALID_REQUEST, f"Unsupported resource type {resource_type}: the controller "
                       "serves TOPIC (2) and BROKER (4) configs")


def check_legacy_resource_type(resource_type: int) -> None:
    """AlterConfigs (legacy) takes no BROKER_LOGGER resource (KIP-412's log levels are set incrementally
    only) and no type Kafka does not know: Kafka's broker refuses them, before forwarding, with this
    error (ConfigAdminManager.preprocess of an AlterConfigsRequest). The types it lets through go on
    to `check_resource`."""
    if resource_type not in (TOPIC, BROKER, CLIENT_METRICS, GROUP):
        raise ApiError(ErrorCode.INVALID_REQUEST, f"Unknown resource type {resource_type}")


def _schema(resource_type: int) -> dict[str, ConfigKey]:
    return TOPIC_CONFIGS if resource_type == TOPIC else BROKER_CONFIGS


def alter(resource_type: int, operations: Sequence[tuple[str, int, str | None]],
          current: Mapping[str, str]) -> list[tuple[str, str | None]]:
    """(key, new value or None for a removal) to write for one resource's operations (name, op, value).

    The resource itself must have been checked (`check_resource`). Raises ApiError for the whole
    resource: nothing of it is written when one operation is refused.
    """
    names = [name for name, _, _ in operations]
    if len(set(names)) != len(names):
        raise ApiError(ErrorCode.INVALID_REQUEST, "Error due to duplicate config keys")
    nulls = [name for name, op, value in operations if value is None and op != OpType.DELETE]
    if nulls:  # before any other check, naming them all, as Kafka's broker does (ConfigAdminManager.preprocess)
        raise ApiError(ErrorCode.INVALID_REQUEST, f"Null value not supported for : {', '.join(nulls)}")
    schema = _schema(resource_type)
    changes: list[tuple[str, str | None]] = []
    for name, op, value in operations:
        key = schema.get(name)
        if resource_type == TOPIC and key is None and op != OpType.DELETE:
            # Kafka validates the set that results: a deleted key is no longer in it, known or not
            # (so a key no longer known can still be removed, and the legacy API's deletions never fail)
            raise ApiError(ErrorCode.INVALID_CONFIG, f"Unknown topic config name: {name}")
        old = current.get(name)
        if op == OpType.SET:
            new: str | None = value
        elif op == OpType.DELETE:
            new = None
        elif op in (OpType.APPEND, OpType.SUBTRACT):
            if key is None or key.type is not ConfigType.LIST:
                verb = OpType(op).name
                raise ApiError(ErrorCode.INVALID_CONFIG, f"Can't {verb} to key {name} because its type is not LIST.")
            parts = _split(old if old is not None else key.default)
            given = _split(value)
            if op == OpType.APPEND:
                parts += [part for part in dict.fromkeys(given) if part not in parts]
            else:
                parts = [part for part in parts if part not in given]
            new = ",".join(parts)
        else:
            raise ApiError(ErrorCode.INVALID_REQUEST, f"Unknown config operation {op} for key {name}")
        if new is not None and key is not None:
            _check_resource_value(resource_type, key, new)
        if new != old or resource_type == BROKER:
            changes.append((name, new))
    if resource_type == TOPIC:
        resulting = dict(current)
        for name, new in changes:
            if new is None:
                resulting.pop(name, None)
            else:
                resulting[name] = new
        check_remote_storage(current, resulting)
    return changes


def replace(resource_type: int, configs: Sequence[tuple[str, str | None]],
            current: Mapping[str, str]) -> list[tuple[str, str | None]]:
    """(key, new value or None) to write for a legacy AlterConfigs of one resource: `configs` (name,
    value) become its whole set of dynamic configs.

    Kafka's ConfigurationControlManager.legacyAlterConfigs: each named key is set (written when its
    value changes, a broker key always), then every key the resource has and the request does not
    name is deleted (a ConfigRecord with a null value), and the set that results is validated as a
    whole. Said as a SET per named key and a DELETE per other current key, it is `alter`'s: the same
    checks (a duplicate key, a null value, an unknown topic key, an invalid value refuse the whole
    resource) and the same records as IncrementalAlterConfigs.
    """
    named = {name for name, _ in configs}
    operations: list[tuple[str, int, str | None]] = [(name, OpType.SET, value) for name, value in configs]
    operations += [(name, OpType.DELETE, None) for name in current if name not in named]
    return alter(resource_type, operations, current)


def _check_resource_value(resource_type: int, key: ConfigKey, value: str) -> None:
    """`check_value`, with the code Kafka answers for the resource: INVALID_CONFIG for a topic, INVALID_REQUEST
    for a broker (its broker validates dynamic broker configs and answers so, KAFKA-13609), same message."""
    try:
        check_value(key, value)
    except ApiError as error:
        if resource_type != BROKER:
            raise
        raise ApiError(ErrorCode.INVALID_REQUEST, error.message) from None


def _split(value: str | None) -> list[str]:
    return [part.strip() for part in value.split(",") if part.strip()] if value else []


@dataclass(frozen=True, slots=True)
class ConfigEntry:
    """One described config: its value, where the value comes from, and the values under it."""

    name: str
    value: str | None
    source: ConfigSource
    config_type: ConfigType
    synonyms: tuple[tuple[str, str | None, ConfigSource], ...]
    read_only: bool = False
    is_sensitive: bool = False


def topic_config_value(configs: Mapping[tuple[int, str], Mapping[str, str]], topic: str, name: str,
                       static_default: str | None = None) -> str | None:
    """The value a topic config takes effect with, as Kafka's controller resolves it
    (ConfigurationControlManager.getTopicConfig): the topic's own key, else the cluster-wide dynamic
    broker default (BROKER resource "") of the same name, else the controller's static setting
    (`static_default`), else Kafka's default. Topic keys and their broker synonyms share their name
    for the keys the controller reads (`unclean.leader.election.enable`, `min.insync.replicas`)."""
    for layer in (configs.get((TOPIC, topic), {}), configs.get((BROKER, ""), {})):
        if name in layer:
            return layer[name]
    if static_default is not None:
        return static_default
    key = TOPIC_CONFIGS.get(name)
    return key.default if key is not None else None


def describe(resource_type: int, resource_name: str, keys: Iterable[str] | None,
             configs: Mapping[tuple[int, str], Mapping[str, str]],
             static_defaults: Mapping[str, str] | None = None) -> list[ConfigEntry]:
    """A resource's configs, by name, from most to least specific source (the resource must exist).

    A topic: its own keys (TOPIC_CONFIG) over Kafka's defaults (DEFAULT_CONFIG). A broker: its
    own dynamic keys (DYNAMIC_BROKER_CONFIG), then the cluster-wide dynamic defaults
    (DYNAMIC_DEFAULT_BROKER_CONFIG), then the defaults (DEFAULT_CONFIG), of which
    `static_defaults` overrides some (the controller's own num.partitions, ...). `keys` None
    means every key; keys nobody knows are left out.
    """
    schema = _schema(resource_type)
    layers: list[tuple[ConfigSource, Mapping[str, str | None]]] = []
    if resource_type == TOPIC:
        layers.append((ConfigSource.TOPIC_CONFIG, configs.get((TOPIC, resource_name), {})))
    else:
        if resource_name:
            layers.append((ConfigSource.DYNAMIC_BROKER_CONFIG, configs.get((BROKER, resource_name), {})))
        layers.append((ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG, configs.get((BROKER, ""), {})))
    defaults: dict[str, str | None] = {name: key.default for name, key in schema.items()}
    if resource_type == BROKER and static_defaults:
        defaults.update(static_defaults)
    layers.append((ConfigSource.DEFAULT_CONFIG, defaults))
    known = dict.fromkeys(name for _, layer in layers for name in layer)
    wanted = sorted(known) if keys is None else [name for name in dict.fromkeys(keys) if name in known]
    entries = []
    for name in wanted:
        synonyms = tuple((name, layer[name], source) for source, layer in layers if name in layer)
        _, value, source = synonyms[0]
        key = schema.get(name)
        entries.append(ConfigEntry(name, value, source, key.type if key else ConfigType.UNKNOWN, synonyms))
    return entries


__all__ = [
    "BROKER", "BROKER_CONFIGS", "BROKER_LOGGER", "CLIENT_METRICS", "GROUP", "TOPIC", "TOPIC_CONFIGS", "ConfigEntry",
    "ConfigKey", "ConfigSource", "ConfigType", "OpType", "alter", "check_legacy_resource_type", "check_resource",
    "check_topic_configs", "check_value", "describe", "replace", "topic_config_value",
]
