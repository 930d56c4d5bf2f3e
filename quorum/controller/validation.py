"""Validation of CreateTopics, DeleteTopics and CreatePartitions items, with Kafka's codes and messages.

Every check raises `ApiError` for the one topic it is about; the controller turns that into the
topic's entry in the response. The rules and messages are Apache Kafka's (`Topic.validate`, and
the KRaft controller's ReplicationControlManager and ReplicaPlacer), except where noted:

* the replication factor is checked against the *usable* brokers (registered, unfenced and not
  in controlled shutdown): Kafka also places followers on fenced brokers, this controller does not;
* a '.'/'_' collision is also refused between two topics of the same request (Kafka only checks
  against topics that already exist).
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterable, Iterator, Mapping, Sequence

from quorum.controller.results import ApiError
from quorum.wire.errors import ErrorCode

MAX_TOPIC_NAME_LENGTH = 249
"""Kafka's Topic.MAX_NAME_LENGTH."""

DEFAULT_NUM_PARTITIONS = 1
"""Kafka's default of `num.partitions`."""
DEFAULT_REPLICATION_FACTOR = 1
"""Kafka's default of `default.replication.factor`."""

METADATA_TOPIC = "__cluster_metadata"

_LEGAL = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._-")


def topic_name_fault(name: str | None) -> str | None:
    """Why Kafka's Topic.validate refuses `name` (empty, "." or "..", over 249 characters, a
    character other than [a-zA-Z0-9._-]), in its words; None for a legal name. Brokers use it too:
    Metadata answers INVALID_TOPIC_EXCEPTION for such a name and never asks to create it."""
    if not name:
        return "Topic name is illegal, it can't be empty"
    if name in (".", ".."):
        return 'Topic name cannot be "." or ".."'
    if len(name) > MAX_TOPIC_NAME_LENGTH:
        return (f"Topic name is illegal, it can't be longer than {MAX_TOPIC_NAME_LENGTH} characters, "
                f"Topic name: {name}")
    if not _LEGAL.issuperset(name):
        return (f'Topic name "{name}" is illegal, it contains a character other than ASCII alphanumerics, '
                "'.', '_' and '-'")
    return None


def validate_topic_name(name: str | None) -> None:
    """Kafka's Topic.validate: raises INVALID_TOPIC_EXCEPTION with `topic_name_fault`'s reason."""
    fault = topic_name_fault(name)
    if fault is not None:
        raise ApiError(ErrorCode.INVALID_TOPIC_EXCEPTION, fault)


def has_collision_chars(name: str) -> bool:
    return "." in name or "_" in name


def unify_collision_chars(name: str) -> str:
    """Kafka's Topic.unifyCollisionChars: '.' and '_' collide in metric names."""
    return name.replace(".", "_")


class CollisionIndex(Mapping[str, str]):
    """unify_collision_chars(name) -> a topic name with it, for the view's topics and those created
    so far in the request. Built on the first look-up, which only a name with '.' or '_' makes: a
    request of plain names does not pay a pass over every topic (issue 17)."""

    def __init__(self, topics: Iterable[str]) -> None:
        self._topics = topics
        self._built: dict[str, str] | None = None

    def _index(self) -> dict[str, str]:
        if self._built is None:
            self._built = {unify_collision_chars(name): name for name in self._topics if has_collision_chars(name)}
        return self._built

    def __getitem__(self, key: str) -> str:
        return self._index()[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self._index())

    def __len__(self) -> int:
        return len(self._index())

    def setdefault(self, key: str, name: str) -> None:
        self._index().setdefault(key, name)


def check_collision(name: str, existing_by_unified: Mapping[str, str]) -> None:
    """Refuse a name that differs from an existing one only by '.' versus '_'.

    `existing_by_unified` maps `unify_collision_chars(name)` to one topic name having it.
    """
    if not has_collision_chars(name):
        return
    other = existing_by_unified.get(unify_collision_chars(name))
    if other is not None and other != name:
        raise ApiError(ErrorCode.INVALID_TOPIC_EXCEPTION, f"Topic '{name}' collides with existing topic: {other}")


def check_new_topic_name(name: str, existing: Collection[str], existing_by_unified: Mapping[str, str]) -> None:
    """Everything about a new topic's name: legal, not the metadata topic, no collision, not taken."""
    validate_topic_name(name)
    if name == METADATA_TOPIC:
        raise ApiError(ErrorCode.INVALID_REQUEST, f"Creation of internal topic {METADATA_TOPIC} is prohibited.")
    check_collision(name, existing_by_unified)
    if name in existing:
        raise ApiError(ErrorCode.TOPIC_ALREADY_EXISTS, f"Topic '{name}' already exists.")


def resolve_counts(num_partitions: int, replication_factor: int, *,
                   default_num_partitions: int = DEFAULT_NUM_PARTITIONS,
                   default_replication_factor: int = DEFAULT_REPLICATION_FACTOR) -> tuple[int, int]:
    """(partitions, replication factor) of an automatically placed topic; -1 means the default."""
    if replication_factor < -1 or replication_factor == 0:
        raise ApiError(ErrorCode.INVALID_REPLICATION_FACTOR,
                       "Replication factor must be larger than 0, or -1 to use the default value.")
    if num_partitions < -1 or num_partitions == 0:
        raise ApiError(ErrorCode.INVALID_PARTITIONS, "Number of partitions was set to an invalid non-positive value.")
    return (default_num_partitions if num_partitions == -1 else num_partitions,
            default_replication_factor if replication_factor == -1 else replication_factor)


def check_replication_factor(replication_factor: int, usable_brokers: int) -> None:
    """The replication factor must be positive and reachable with the usable (unfenced) brokers.

    Messages are the ones of Kafka's CreateTopics, where the placer's message follows "Unable to
    replicate the partition N time(s): ".
    """
    prefix = f"Unable to replicate the partition {replication_factor} time(s): "
    if replication_factor <= 0:
        raise ApiError(ErrorCode.INVALID_REPLICATION_FACTOR,
                       f"{prefix}Invalid replication factor {replication_factor}: the replication factor must be "
                       "positive.")
    if usable_brokers == 0:
        raise ApiError(ErrorCode.INVALID_REPLICATION_FACTOR, f"{prefix}All brokers are currently fenced.")
    if replication_factor > usable_brokers:
        raise ApiError(ErrorCode.INVALID_REPLICATION_FACTOR,
                       f"{prefix}The target replication factor of {replication_factor} cannot be reached because "
                       f"only {usable_brokers} broker(s) are registered and unfenced.")


def check_manual_replicas(replicas: Sequence[int], *, registered: Collection[int],
                          replication_factor: int | None) -> None:
    """Kafka's validateManualPartitionAssignment: non-empty, registered brokers, each once, one size."""
    if not replicas:
        raise ApiError(ErrorCode.INVALID_REPLICA_ASSIGNMENT,
                       "The manual partition assignment includes an empty replica list.")
    previous = None
    for broker in sorted(replicas):
        if broker not in registered:
            raise ApiError(ErrorCode.INVALID_REPLICA_ASSIGNMENT,
                           f"The manual partition assignment includes broker {broker}, but no such broker is "
                           "registered.")
        if broker == previous:
            raise ApiError(ErrorCode.INVALID_REPLICA_ASSIGNMENT,
                           f"The manual partition assignment includes the broker {broker} more than once.")
        previous = broker
    if replication_factor is not None and len(replicas) != replication_factor:
        raise ApiError(ErrorCode.INVALID_REPLICA_ASSIGNMENT,
                       f"The manual partition assignment includes a partition with {len(replicas)} replica(s), but "
                       f"this is not consistent with previous partitions, which have {replication_factor} "
                       "replica(s).")


def manual_isr(index: int, replicas: Sequence[int], is_usable: Callable[[int], bool]) -> tuple[int, ...]:
    """The first ISR of a manually placed partition: its usable replicas, in assignment order."""
    isr = tuple(broker for broker in replicas if is_usable(broker))
    if not isr:
        raise ApiError(ErrorCode.INVALID_REPLICA_ASSIGNMENT,
                       f"All brokers specified in the manual partition assignment for partition {index} are fenced "
                       "or in controlled shutdown.")
    return isr


def manual_topic_assignment(num_partitions: int, replication_factor: int,
                            assignments: Iterable[tuple[int, Sequence[int]]], *, registered: Collection[int],
                            is_usable: Callable[[int], bool]) -> list[tuple[tuple[int, ...], tuple[int, ...]]]:
    """(replicas, isr) per partition of a CreateTopics item with a manual assignment, by partition index."""
    if replication_factor != -1:
        raise ApiError(ErrorCode.INVALID_REQUEST,
                       "A manual partition assignment was specified, but replication factor was not set to -1.")
    if num_partitions != -1:
        raise ApiError(ErrorCode.INVALID_REQUEST,
                       "A manual partition assignment was specified, but numPartitions was not set to -1.")
    parts: dict[int, tuple[tuple[int, ...], tuple[int, ...]]] = {}
    factor: int | None = None
    for index, replicas in assignments:
        if index in parts:
            raise ApiError(ErrorCode.INVALID_REPLICA_ASSIGNMENT,
                           f"Found multiple manual partition assignments for partition {index}")
        check_manual_replicas(replicas, registered=registered, replication_factor=factor)
        factor = len(replicas)
        parts[index] = (tuple(replicas), manual_isr(index, replicas, is_usable))
    if any(index not in parts for index in range(len(parts))):
        raise ApiError(ErrorCode.INVALID_REPLICA_ASSIGNMENT,
                       "partitions should be a consecutive 0-based integer sequence")
    return [parts[index] for index in range(len(parts))]


def check_partition_increase(name: str, current: int, requested: int) -> None:
    """CreatePartitions: the new count must exceed the current one."""
    if requested == current:
        raise ApiError(ErrorCode.INVALID_PARTITIONS, f"Topic already has {current} partition(s).")
    if requested < current:
        raise ApiError(ErrorCode.INVALID_PARTITIONS, f"The topic {name} currently has {current} partition(s); "
                       f"{requested} would not be an increase.")


def manual_new_partitions(start: int, requested: int, replication_factor: int,
                          assignments: Sequence[Sequence[int]], *, registered: Collection[int],
                          is_usable: Callable[[int], bool]) -> list[tuple[tuple[int, ...], tuple[int, ...]]]:
    """(replicas, isr) of each partition CreatePartitions adds with a manual assignment."""
    additional = requested - start
    if len(assignments) != additional:
        raise ApiError(ErrorCode.INVALID_REPLICA_ASSIGNMENT,
                       f"Attempted to add {additional} additional partition(s), but only {len(assignments)} "
                       "assignment(s) were specified.")
    placed = []
    for offset, replicas in enumerate(assignments):
        check_manual_replicas(replicas, registered=registered, replication_factor=replication_factor)
        placed.append((tuple(replicas), manual_isr(start + offset, replicas, is_usable)))
    return placed


def unknown_topic(name: str) -> ApiError:
    return ApiError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"The topic '{name}' does not exist.")


def duplicate_topic() -> ApiError:
    return ApiError(ErrorCode.INVALID_REQUEST, "Duplicate topic name.")


__all__ = [
    "DEFAULT_NUM_PARTITIONS", "DEFAULT_REPLICATION_FACTOR", "MAX_TOPIC_NAME_LENGTH", "METADATA_TOPIC",
    "check_collision", "check_manual_replicas", "check_new_topic_name", "check_partition_increase",
    "check_replication_factor", "duplicate_topic", "has_collision_chars", "manual_isr", "manual_new_partitions",
    "manual_topic_assignment", "resolve_counts", "unify_collision_chars", "unknown_topic", "validate_topic_name",
]
