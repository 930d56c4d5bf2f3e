"""The `kafka_epochs` source's options, checked and converted on the driver before anything is asked.

Names and rules are Spark's Kafka source's (`KafkaSourceProvider`) where they mean the same, so a job
moves over by changing its format: subscriptions, offsets and offsets by time (`startingTimestamp` over
`startingOffsetsByTimestamp` over `startingOffsets`, as Spark ranks them), trigger pacing
(`maxOffsetsPerTrigger`, `minOffsetsPerTrigger` with `maxTriggerDelay`), task splitting
(`minPartitions`, `maxRecordsPerPartition`), `groupIdPrefix`, and `kafka.*` for the clients. A
missing, unknown or malformed option is a SourceOptionError naming it, raised when the query is
defined rather than at its first batch. Sans-IO: nothing here opens a socket or reads a clock.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass

from client_epochs.model import TopicPartition
from client_epochs.spark.planning import (
    DEFAULT_NUM_RETRIES,
    DEFAULT_POLL_TIMEOUT_MS,
    DEFAULT_RETRY_INTERVAL_MS,
    Offsets,
    SourceOptionError,
    TimeSpec,
    offsets_from_json,
    per_partition,
)
from quorum.wire.sasl_client import sasl_login_of_client_properties

ON_RECREATED = ("fail", "earliest")
BY_TIMESTAMP_STRATEGIES = ("error", "latest")
"""startingOffsetsByTimestampStrategy: what a partition with no record at or after the timestamp starts
at: fail the query (Spark's default), or the latest offset."""
ISOLATION_LEVELS = ("read_uncommitted", "read_committed")
DEFAULT_ISOLATION_LEVEL = "read_uncommitted"
"""Spark's Kafka source reads with the Java consumer's default, read_uncommitted (librdkafka's own default
is read_committed): the executors' consumers are set to it explicitly, and the driver lists offsets at
the same level, so a plan never ends past what the tasks can read."""
DEFAULT_MAX_TRIGGER_DELAY_MS = 15 * 60 * 1000  # Spark's maxTriggerDelay default, "15m"
DEFAULT_GROUP_ID_PREFIX = {True: "spark-kafka-source", False: "spark-kafka-relation"}
"""Spark's executor group id prefixes, streaming and batch, when neither groupIdPrefix nor kafka.group.id is given."""

_SUBSCRIPTIONS = ("subscribe", "subscribePattern", "assign")
_KNOWN = {
    *_SUBSCRIPTIONS,
    "startingOffsets",
    "endingOffsets",
    "startingTimestamp",
    "startingOffsetsByTimestamp",
    "startingOffsetsByTimestampStrategy",
    "endingTimestamp",
    "endingOffsetsByTimestamp",
    "maxOffsetsPerTrigger",
    "minOffsetsPerTrigger",
    "maxTriggerDelay",
    "minPartitions",
    "maxRecordsPerPartition",
    "groupIdPrefix",
    "failOnDataLoss",
    "includeHeaders",
    "onTopicRecreated",
    "commitOffsetsToGroup",
    "fetchOffset.numRetries",
    "fetchOffset.retryIntervalMs",
    "kafkaConsumer.pollTimeoutMs",
    "path",
}
_BATCH_ONLY = ("endingOffsets", "endingTimestamp", "endingOffsetsByTimestamp")
_TIME_UNITS_MS = {"us": 0.001, "ms": 1, "s": 1000, "m": 60_000, "min": 60_000, "h": 3_600_000, "d": 86_400_000}


@dataclass(frozen=True, slots=True)
class SourceOptions:
    """The source's options, with the names of Spark's Kafka source where they mean the same.

    `onTopicRecreated` (fail | earliest) and `commitOffsetsToGroup` (a group id) are this source's own.
    `client` holds the `kafka.*` options without their prefix, passed to the clients (isolation.level
    always set, to `isolation_level`).
    """

    bootstrap: str
    client: Mapping[str, str]
    topics: tuple[str, ...] = ()
    pattern: re.Pattern[str] | None = None
    assigned: tuple[TopicPartition, ...] = ()
    starting: str | Offsets = "latest"
    ending: str | Offsets = "latest"
    starting_time: TimeSpec | None = None
    """startingTimestamp or startingOffsetsByTimestamp; when set, it decides the first start, not `starting`."""
    starting_time_strategy: str = "error"
    ending_time: TimeSpec | None = None
    max_offsets_per_trigger: int | None = None
    min_offsets_per_trigger: int | None = None
    max_trigger_delay_ms: int = DEFAULT_MAX_TRIGGER_DELAY_MS
    min_partitions: int | None = None
    max_records_per_partition: int | None = None
    group_id_prefix: str | None = None
    isolation_level: str = DEFAULT_ISOLATION_LEVEL
    fail_on_data_loss: bool = True
    include_headers: bool = False
    on_topic_recreated: str = "fail"
    commit_group: str | None = None
    num_retries: int = DEFAULT_NUM_RETRIES
    retry_interval_ms: int = DEFAULT_RETRY_INTERVAL_MS
    poll_timeout_ms: int = DEFAULT_POLL_TIMEOUT_MS

    def wants(self, topic: str) -> bool:
        """Whether a topic the cluster lists belongs to this subscription."""
        if self.pattern is not None:
            return self.pattern.fullmatch(topic) is not None
        return topic in self.topics or any(tp.topic == topic for tp in self.assigned)

    @property
    def read_committed(self) -> bool:
        return self.isolation_level == "read_committed"

    def executor_group_id(self, unique: str, streaming: bool) -> str:
        """The executors' consumer group id, as Spark names it: kafka.group.id as given, else
        `<groupIdPrefix>-<unique>-executor` (`unique`: a fresh id per query, from the caller). The
        consumers assign their ranges and never commit, so the group matters only to ACLs and quotas."""
        given = self.client.get("group.id")
        if given:
            return given
        prefix = self.group_id_prefix or DEFAULT_GROUP_ID_PREFIX[streaming]
        return f"{prefix}-{unique}-executor"


def parse_options(options: Mapping[str, str], *, streaming: bool = True) -> SourceOptions:
    """Check and convert the options a user passed to `.option()`; SourceOptionError names the bad one.

    Spark lower-cases nothing here (Python data sources get a case-insensitive map), so names are
    matched without regard to case, as Spark's Kafka source does.
    """
    by_lower = {key.lower(): (key, value) for key, value in options.items()}

    def get(name: str) -> str | None:
        found = by_lower.get(name.lower())
        return None if found is None else found[1]

    client = {key[len("kafka.") :]: value for key, value in options.items() if key.lower().startswith("kafka.")}
    bootstrap = client.pop("bootstrap.servers", None)
    if not bootstrap:
        raise SourceOptionError("option kafka.bootstrap.servers is required (host:port,...)")
    try:  # the driver's own connections take these: what they cannot use is refused now, not at the first batch
        sasl_login_of_client_properties(client)
    except ValueError as exc:
        raise SourceOptionError(f"option kafka.{exc}") from None
    known = {k.lower() for k in _KNOWN}
    unknown = sorted(
        key for key, _ in by_lower.values() if not key.lower().startswith("kafka.") and key.lower() not in known
    )
    if unknown:
        raise SourceOptionError(f"unknown option(s) {unknown}; known: {sorted(_KNOWN)} and kafka.*")
    isolation = (client.get("isolation.level") or DEFAULT_ISOLATION_LEVEL).strip().lower()
    if isolation not in ISOLATION_LEVELS:
        raise SourceOptionError(
            f"option kafka.isolation.level must be one of {ISOLATION_LEVELS}, got {client['isolation.level']!r}"
        )
    client["isolation.level"] = isolation
    topics, pattern, assigned = _subscription(get)
    if streaming:
        given_batch_only = [name for name in _BATCH_ONLY if get(name) is not None]
        if given_batch_only:
            raise SourceOptionError(
                f"option(s) {given_batch_only} are for batch reads only (spark.read), not spark.readStream"
            )
    starting_time = _time_option(get, "startingTimestamp", "startingOffsetsByTimestamp")
    starting = _offsets_option("startingOffsets", get("startingOffsets"), "earliest" if not streaming else "latest")
    ending = _offsets_option("endingOffsets", get("endingOffsets"), "latest")
    if ending == "earliest":
        raise SourceOptionError("option endingOffsets cannot be earliest")
    if starting == "latest" and not streaming and starting_time is None:
        raise SourceOptionError("option startingOffsets cannot be latest for a batch read")
    strategy = (get("startingOffsetsByTimestampStrategy") or "error").strip().lower()
    if strategy not in BY_TIMESTAMP_STRATEGIES:
        raise SourceOptionError(
            f"option startingOffsetsByTimestampStrategy must be one of {BY_TIMESTAMP_STRATEGIES}, got {strategy!r}"
        )
    recreated = (get("onTopicRecreated") or "fail").lower()
    if recreated not in ON_RECREATED:
        raise SourceOptionError(f"option onTopicRecreated must be one of {ON_RECREATED}, got {recreated!r}")
    prefix = get("groupIdPrefix")
    if prefix is not None and not prefix.strip():
        raise SourceOptionError("option groupIdPrefix is empty")
    num_retries = _positive("fetchOffset.numRetries", get("fetchOffset.numRetries"), zero=True)
    return SourceOptions(
        bootstrap=bootstrap,
        client=client,
        topics=topics,
        pattern=pattern,
        assigned=assigned,
        starting=starting,
        ending=ending,
        starting_time=starting_time,
        starting_time_strategy=strategy,
        ending_time=_time_option(get, "endingTimestamp", "endingOffsetsByTimestamp"),
        max_offsets_per_trigger=_positive("maxOffsetsPerTrigger", get("maxOffsetsPerTrigger")),
        min_offsets_per_trigger=_positive("minOffsetsPerTrigger", get("minOffsetsPerTrigger")),
        max_trigger_delay_ms=_duration_ms("maxTriggerDelay", get("maxTriggerDelay"), DEFAULT_MAX_TRIGGER_DELAY_MS),
        min_partitions=_positive("minPartitions", get("minPartitions")),
        max_records_per_partition=_positive("maxRecordsPerPartition", get("maxRecordsPerPartition")),
        group_id_prefix=prefix.strip() if prefix else None,
        isolation_level=isolation,
        fail_on_data_loss=_boolean("failOnDataLoss", get("failOnDataLoss"), True),
        include_headers=_boolean("includeHeaders", get("includeHeaders"), False),
        on_topic_recreated=recreated,
        commit_group=get("commitOffsetsToGroup") or None,
        num_retries=DEFAULT_NUM_RETRIES if num_retries is None else num_retries,
        retry_interval_ms=_positive("fetchOffset.retryIntervalMs", get("fetchOffset.retryIntervalMs"))
        or DEFAULT_RETRY_INTERVAL_MS,
        poll_timeout_ms=_positive("kafkaConsumer.pollTimeoutMs", get("kafkaConsumer.pollTimeoutMs"))
        or DEFAULT_POLL_TIMEOUT_MS,
    )


def _subscription(get) -> tuple[tuple[str, ...], re.Pattern[str] | None, tuple[TopicPartition, ...]]:
    """(topics, pattern, assigned partitions): exactly one of subscribe, subscribePattern, assign."""
    given = [name for name in _SUBSCRIPTIONS if get(name) is not None]
    if len(given) != 1:
        raise SourceOptionError(
            f"exactly one of subscribe, subscribePattern, assign is required, got {given or 'none'}"
        )
    if given[0] == "subscribe":
        topics = tuple(sorted({t.strip() for t in (get("subscribe") or "").split(",") if t.strip()}))
        if not topics:
            raise SourceOptionError("option subscribe names no topic")
        return topics, None, ()
    if given[0] == "subscribePattern":
        try:
            return (), re.compile(get("subscribePattern") or ""), ()
        except re.error as exc:
            raise SourceOptionError(f"option subscribePattern is not a regular expression: {exc}") from None
    return (), None, _assignment(get("assign") or "")


def _assignment(text: str) -> tuple[TopicPartition, ...]:
    try:
        value = json.loads(text)
    except json.JSONDecodeError as exc:
        raise SourceOptionError(f'option assign is not JSON ({{"topic": [0, 1]}}): {exc}') from None
    if not isinstance(value, dict) or not value:
        raise SourceOptionError(f"option assign must map topics to partition lists, got {text!r}")
    out = []
    for topic, partitions in value.items():
        if not isinstance(partitions, list) or not all(isinstance(p, int) and p >= 0 for p in partitions):
            raise SourceOptionError(f"option assign: topic {topic!r} needs a list of partition numbers")
        out += [TopicPartition(topic, p) for p in partitions]
    return tuple(sorted(set(out)))


def _offsets_option(name: str, text: str | None, default: str) -> str | Offsets:
    if text is None:
        return default
    word = text.strip().lower()
    if word in ("earliest", "latest"):
        return word
    return offsets_from_json(text, f"option {name}")


def _time_option(get, global_name: str, by_partition_name: str) -> TimeSpec | None:
    """`global_name` (one timestamp) over `by_partition_name` (JSON per partition), as Spark ranks them."""
    text = get(global_name)
    if text is not None:
        try:
            stamp = int(text.strip())
        except ValueError:
            raise SourceOptionError(
                f"option {global_name} must be milliseconds since the epoch, got {text!r}"
            ) from None
        if stamp < 0:
            raise SourceOptionError(f"option {global_name} must be at least 0, got {stamp}")
        return stamp
    text = get(by_partition_name)
    if text is None:
        return None
    stamps = per_partition(text, f"option {by_partition_name}", "timestamps", _timestamp)
    if not stamps:
        raise SourceOptionError(f"option {by_partition_name} names no partition")
    return stamps


def _timestamp(entry: object, what: str) -> int:
    if isinstance(entry, bool) or not isinstance(entry, int) or entry < -2:
        raise SourceOptionError(
            f"{what} must be milliseconds since the epoch (or -2 earliest, -1 latest), got {entry!r}"
        )
    return entry


def _positive(name: str, text: str | None, zero: bool = False) -> int | None:
    return positive_int(name, text, SourceOptionError, zero)


def positive_int(name: str, text: str | None, error: type[ValueError], zero: bool = False) -> int | None:
    """Option `name`'s value `text` as a positive integer (0 too with `zero`), None when unset;
    `error` (the source's or the sink's option error) naming the option otherwise."""
    if text is None:
        return None
    try:
        value = int(text)
    except ValueError:
        raise error(f"option {name} must be an integer, got {text!r}") from None
    if value < 0 or (value == 0 and not zero):
        raise error(f"option {name} must be {'at least 0' if zero else 'positive'}, got {value}")
    return value


def _duration_ms(name: str, text: str | None, default: int) -> int:
    """A duration as Spark writes them (`timeStringAsMs`: "15m", "30s", "500ms", a bare number is ms)."""
    if text is None:
        return default
    found = re.fullmatch(r"\s*(\d+)\s*([a-z]*)\s*", text.lower())
    if found is None or found.group(2) not in ("", *_TIME_UNITS_MS):
        raise SourceOptionError(f"option {name} must be a duration such as 500ms, 30s, 15m, 1h or 1d, got {text!r}")
    return int(int(found.group(1)) * _TIME_UNITS_MS.get(found.group(2) or "ms", 1))


def _boolean(name: str, text: str | None, default: bool) -> bool:
    if text is None:
        return default
    if text.strip().lower() not in ("true", "false"):
        raise SourceOptionError(f"option {name} must be true or false, got {text!r}")
    return text.strip().lower() == "true"
