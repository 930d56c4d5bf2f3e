"""The group coordinator's settings (Kafka's config names and defaults) and which partition owns a group.

A group lives in one partition of `__consumer_offsets`: `abs(hashCode(group_id)) % partitions`,
with Java's String.hashCode, so that this cluster and Apache Kafka place every group in the same
partition and clients find the same coordinator for it.
"""

from __future__ import annotations

from dataclasses import dataclass

OFFSETS_TOPIC = "__consumer_offsets"
"""Kafka's internal topic holding committed offsets and group metadata."""
DEFAULT_OFFSETS_PARTITIONS = 50
"""Kafka's default of `offsets.topic.num.partitions`."""


@dataclass(frozen=True, slots=True)
class GroupConfig:
    """Kafka's group coordinator settings, under Kafka's names (dots as underscores), with its defaults."""

    offsets_topic_num_partitions: int = DEFAULT_OFFSETS_PARTITIONS
    """`offsets.topic.num.partitions`."""
    group_initial_rebalance_delay_ms: int = 3000
    """`group.initial.rebalance.delay.ms`: how long the first rebalance of an empty group waits for more joins."""
    group_min_session_timeout_ms: int = 6000
    """`group.min.session.timeout.ms`."""
    group_max_session_timeout_ms: int = 1_800_000
    """`group.max.session.timeout.ms`."""
    group_max_size: int = 2**31 - 1
    """`group.max.size`."""
    offset_metadata_max_bytes: int = 4096
    """`offset.metadata.max.bytes`: longer committed metadata answers OFFSET_METADATA_TOO_LARGE."""
    group_consumer_session_timeout_ms: int = 45_000
    """`group.consumer.session.timeout.ms` (KIP-848): a consumer-protocol member silent this long is removed."""
    group_consumer_min_session_timeout_ms: int = 45_000
    """`group.consumer.min.session.timeout.ms`."""
    group_consumer_max_session_timeout_ms: int = 60_000
    """`group.consumer.max.session.timeout.ms`."""
    group_consumer_heartbeat_interval_ms: int = 5_000
    """`group.consumer.heartbeat.interval.ms`: told to consumer-protocol members in every heartbeat answer."""
    group_consumer_min_heartbeat_interval_ms: int = 5_000
    """`group.consumer.min.heartbeat.interval.ms`."""
    group_consumer_max_heartbeat_interval_ms: int = 15_000
    """`group.consumer.max.heartbeat.interval.ms`."""
    group_consumer_max_size: int = 2**31 - 1
    """`group.consumer.max.size`."""
    group_consumer_assignors: tuple[str, ...] = ("uniform", "range")
    """`group.consumer.assignors`: the server-side assignors offered, the first the default."""
    kip232: bool = True
    """`quorum.kip232.enable` (the project's): false stores and checks offsets as Apache Kafka does,
    without the KIP-232 topic epoch, topic id or INVALID_INTERNAL_METADATA (`offsets.check_entry`)."""

    def __post_init__(self) -> None:
        if self.offsets_topic_num_partitions < 1:
            raise ValueError(f"offsets.topic.num.partitions is {self.offsets_topic_num_partitions}, not at least 1")
        if self.group_initial_rebalance_delay_ms < 0:
            raise ValueError("group.initial.rebalance.delay.ms must not be negative")
        _check_bounds(
            "group.consumer.session.timeout.ms",
            self.group_consumer_session_timeout_ms,
            self.group_consumer_min_session_timeout_ms,
            self.group_consumer_max_session_timeout_ms,
        )
        _check_bounds(
            "group.consumer.heartbeat.interval.ms",
            self.group_consumer_heartbeat_interval_ms,
            self.group_consumer_min_heartbeat_interval_ms,
            self.group_consumer_max_heartbeat_interval_ms,
        )
        if self.group_consumer_heartbeat_interval_ms >= self.group_consumer_session_timeout_ms:
            raise ValueError(
                f"group.consumer.heartbeat.interval.ms ({self.group_consumer_heartbeat_interval_ms}) must "
                f"be below group.consumer.session.timeout.ms ({self.group_consumer_session_timeout_ms})"
            )
        if not self.group_consumer_assignors:
            raise ValueError("group.consumer.assignors must name at least one assignor")


def _check_bounds(name: str, value: int, low: int, high: int) -> None:
    """Kafka's KafkaConfig checks: `name` within its group.consumer.min/max bounds, and those in order."""
    min_name, max_name = (
        name.replace("group.consumer.", "group.consumer.min."),
        name.replace("group.consumer.", "group.consumer.max."),
    )
    if low > high:
        raise ValueError(f"{min_name} ({low}) must not be above {max_name} ({high})")
    if not low <= value <= high:
        raise ValueError(f"{name} is {value}, outside {min_name} ({low}) to {max_name} ({high})")


def java_string_hash(text: str) -> int:
    """Java's String.hashCode: a signed 32-bit hash over the UTF-16 code units."""
    h = 0
    data = text.encode("utf-16-be")
    for i in range(0, len(data), 2):
        h = (31 * h + (data[i] << 8 | data[i + 1])) & 0xFFFFFFFF
    return h - (1 << 32) if h >= 1 << 31 else h


def partition_for(group_id: str, partitions: int = DEFAULT_OFFSETS_PARTITIONS) -> int:
    """The `__consumer_offsets` partition that owns `group_id` (Kafka's Utils.abs(hashCode) % partitions).

    Kafka's Utils.abs maps Integer.MIN_VALUE to 0 (`n & 0x7fffffff`), unlike Math.abs.
    """
    return (java_string_hash(group_id) & 0x7FFFFFFF) % partitions
