"""KIP-848's server-side assignors: `uniform` (Kafka's default) and `range`, as pure functions.

The coordinator computes a group's target assignment itself from the members' subscriptions and
the topics' partition counts (`group.consumer.assignors` names the ones it offers, the first is the
default). Both are deterministic (members and partitions are visited in sorted order) and both keep
a member's current partitions where they can, because every partition that moves has to be revoked
by its old owner before the new one may fetch it.

`uniform` follows Kafka's UniformAssignor: every partition of a subscribed topic goes to one of its
subscribers, and the members' partition counts differ by at most one among members that could take
each other's partitions; partitions stay with their owner unless the balance needs them. `range`
follows Kafka's RangeAssignor: per topic, its subscribers sorted by member id take consecutive
ranges, the first `partitions % subscribers` one partition more.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass

TopicPartition = tuple[uuid.UUID, int]
Partitions = frozenset[TopicPartition]


@dataclass(frozen=True, slots=True)
class TopicInfo:
    """What an assignor needs of a topic: its id and partition count (from the broker's metadata)."""

    topic_id: uuid.UUID
    partitions: int


@dataclass(frozen=True, slots=True)
class AssignmentSpec:
    """One member's input to an assignor: the topics it subscribes to and what it owns now (target)."""

    topics: frozenset[str]
    current: Partitions = frozenset()


Assignor = Callable[[Mapping[str, AssignmentSpec], Mapping[str, TopicInfo]], dict[str, Partitions]]


def _subscribers(members: Mapping[str, AssignmentSpec], topics: Mapping[str, TopicInfo]) -> dict[str, list[str]]:
    """Topic name -> its subscribing member ids (sorted), for the topics that exist."""
    subscribers: dict[str, list[str]] = {}
    for member_id in sorted(members):
        for name in members[member_id].topics:
            if name in topics:
                subscribers.setdefault(name, []).append(member_id)
    return subscribers


def uniform(members: Mapping[str, AssignmentSpec], topics: Mapping[str, TopicInfo]) -> dict[str, Partitions]:
    """Kafka's `uniform` assignor: balanced and sticky (see the module docstring)."""
    subscribers = _subscribers(members, topics)
    eligible: dict[TopicPartition, list[str]] = {}
    for name, member_ids in sorted(subscribers.items()):
        info = topics[name]
        for partition in range(info.partitions):
            eligible[(info.topic_id, partition)] = member_ids
    owned: dict[str, set[TopicPartition]] = {member_id: set() for member_id in members}
    owner: dict[TopicPartition, str] = {}
    for member_id in sorted(members):  # keep what a member has and may still have
        for tp in sorted(members[member_id].current):
            if member_id in eligible.get(tp, ()) and tp not in owner:
                owner[tp] = member_id
                owned[member_id].add(tp)
    for tp, member_ids in eligible.items():  # give the rest to the least loaded subscriber
        if tp not in owner:
            chosen = min(member_ids, key=lambda m: (len(owned[m]), m))
            owner[tp] = chosen
            owned[chosen].add(tp)
    _balance(owned, owner, eligible)
    return {member_id: frozenset(tps) for member_id, tps in owned.items()}


def _balance(
    owned: dict[str, set[TopicPartition]],
    owner: dict[TopicPartition, str],
    eligible: Mapping[TopicPartition, list[str]],
) -> None:
    """Move partitions from a member to one holding two or more fewer that may take them, until none
    can move: each move lowers the sum of squared counts, so this ends."""
    moved = True
    while moved:
        moved = False
        for tp in sorted(owner, key=lambda tp: (-len(owned[owner[tp]]), tp)):
            current = owner[tp]
            target = min(eligible[tp], key=lambda m: (len(owned[m]), m))
            if len(owned[target]) + 1 < len(owned[current]):
                owned[current].discard(tp)
                owned[target].add(tp)
                owner[tp] = target
                moved = True


def range_assignor(members: Mapping[str, AssignmentSpec], topics: Mapping[str, TopicInfo]) -> dict[str, Partitions]:
    """Kafka's `range` assignor: consecutive ranges of each topic's partitions per subscriber."""
    owned: dict[str, set[TopicPartition]] = {member_id: set() for member_id in members}
    for name, member_ids in _subscribers(members, topics).items():
        info = topics[name]
        quota, extra = divmod(info.partitions, len(member_ids))
        start = 0
        for index, member_id in enumerate(member_ids):
            count = quota + (1 if index < extra else 0)
            owned[member_id].update((info.topic_id, p) for p in range(start, start + count))
            start += count
    return {member_id: frozenset(tps) for member_id, tps in owned.items()}


ASSIGNORS: dict[str, Assignor] = {"uniform": uniform, "range": range_assignor}
"""The server-side assignors by their Kafka names."""


def assignors_from_config(names: str) -> tuple[str, ...]:
    """`group.consumer.assignors`: a comma-separated list of assignor names, the first the default.

    Kafka also takes class names; here only the built-in names are known, and any other is refused."""
    chosen = tuple(n.strip() for n in names.split(",") if n.strip())
    if not chosen:
        raise ValueError("group.consumer.assignors must name at least one assignor")
    unknown = [n for n in chosen if n not in ASSIGNORS]
    if unknown:
        raise ValueError(f"group.consumer.assignors names unknown assignor(s) {unknown}; known: {sorted(ASSIGNORS)}")
    return chosen
