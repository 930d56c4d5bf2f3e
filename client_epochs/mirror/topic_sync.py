"""The flow's topics on both clusters, read and brought in step through the admin API (the IO of
`topic_plan`): discovery of new source topics and partitions, creation of their copies, config sync.

Every process of a flow runs it; each change is idempotent (a copy another process created first,
partitions another process added, a config already set), so no process needs to be elected for it.
A refusal the replicator cannot copy through (no permission to create or alter a topic on the
target, a target that cannot take the replication factor) is a `TopicSyncRefused` naming the topic
and Kafka's error: at start the command stops before copying anything (exit status 2).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    ConfigSource,
    NewPartitions,
    NewTopic,
)

from client_epochs.mirror.filters import PatternList
from client_epochs.mirror.topic_plan import TopicPlan, TopicState, plan_topics
from client_epochs.mirror.topics import ReplicatorError

log = logging.getLogger(__name__)

ADMIN_TIMEOUT_S = 30.0
_ALREADY_DONE = {KafkaError.TOPIC_ALREADY_EXISTS, KafkaError.INVALID_PARTITIONS}
_REFUSALS = {KafkaError.TOPIC_AUTHORIZATION_FAILED, KafkaError.CLUSTER_AUTHORIZATION_FAILED,
             KafkaError.INVALID_REPLICATION_FACTOR, KafkaError.POLICY_VIOLATION, KafkaError.INVALID_CONFIG}


class TopicSyncRefused(ReplicatorError):
    """The target refused a change the flow needs (permission, replication factor, a config)."""


class TopicSync:
    """Reads both clusters' topics and applies `plan_topics`' changes to the target."""

    def __init__(self, source: dict[str, Any], target: dict[str, Any], *, should_replicate: Callable[[str], bool],
                 target_topic: Callable[[str], str], replication_factor: int, excluded_configs: PatternList,
                 sync_configs: bool) -> None:
        self._source = AdminClient(source)
        self._target = AdminClient(target)
        self._rules = {"should_replicate": should_replicate, "target_topic": target_topic,
                       "replication_factor": replication_factor, "excluded_configs": excluded_configs,
                       "sync_configs": sync_configs}
        self.copied: dict[str, str] = {}
        """The source topics copied at the last sync, with their names on the target."""
        self.source_partitions: dict[str, int] = {}

    def sync(self) -> TopicPlan:
        """One round: read both sides, apply what differs; the plan that was applied."""
        source_topics, _ = _topics(self._source, "source")
        wanted = [t for t in source_topics if self._rules["should_replicate"](t)]
        source = _states(self._source, {t: source_topics[t] for t in wanted}, self._rules["sync_configs"], "source")
        target_topics, brokers = _topics(self._target, "target")
        names = {self._rules["target_topic"](t) for t in wanted}
        target = _states(self._target, {t: n for t, n in target_topics.items() if t in names},
                         self._rules["sync_configs"], "target")
        plan = plan_topics(source, target, target_brokers=brokers, **self._rules)
        for warning in plan.warnings:
            log.warning("%s", warning)
        self._create(plan)
        self._grow(plan.grow)
        self._alter(plan)
        self.copied = dict(plan.copied)
        self.source_partitions = {t: source[t].partitions for t in plan.copied}
        return plan

    def _create(self, plan: TopicPlan) -> None:
        if not plan.create:
            return
        futures = self._target.create_topics(
            [NewTopic(c.topic, c.partitions, c.replication_factor, config=c.configs) for c in plan.create],
            request_timeout=ADMIN_TIMEOUT_S)
        for copy in plan.create:
            if _done(futures[copy.topic], f"creating target topic {copy.topic} (copy of {copy.source_topic})"):
                log.info("created target topic %s: %d partitions, replication factor %d, configs %s", copy.topic,
                         copy.partitions, copy.replication_factor, copy.configs or "{}")

    def _grow(self, grow: dict[str, int]) -> None:
        if not grow:
            return
        futures = self._target.create_partitions([NewPartitions(t, n) for t, n in grow.items()],
                                                 request_timeout=ADMIN_TIMEOUT_S)
        for topic, count in grow.items():
            if _done(futures[topic], f"adding partitions to target topic {topic} (to {count})"):
                log.info("target topic %s grown to %d partitions", topic, count)

    def _alter(self, plan: TopicPlan) -> None:
        if not plan.configs:
            return
        resources = []
        for change in plan.configs:
            entries = [ConfigEntry(k, v, incremental_operation=AlterConfigOpType.SET) for k, v in change.set.items()]
            entries += [ConfigEntry(k, None, incremental_operation=AlterConfigOpType.DELETE) for k in change.delete]
            resources.append(ConfigResource(ConfigResource.Type.TOPIC, change.topic, incremental_configs=entries))
        futures = self._target.incremental_alter_configs(resources, request_timeout=ADMIN_TIMEOUT_S)
        for resource, change in zip(resources, plan.configs, strict=True):
            if _done(futures[resource], f"syncing the configs of target topic {change.topic}"):
                log.info("target topic %s configs synced: set %s, removed %s", change.topic, change.set,
                         list(change.delete))


def _topics(admin: AdminClient, side: str) -> tuple[dict[str, int], int]:
    """Each topic's partition count as the cluster lists it, and how many brokers it lists."""
    try:
        listed = admin.list_topics(timeout=ADMIN_TIMEOUT_S)
    except KafkaException as exc:
        raise ReplicatorError(f"could not list the {side}'s topics: {exc.args[0].str()}") from None
    counts = {name: len(meta.partitions) for name, meta in listed.topics.items() if meta.error is None}
    return counts, len(listed.brokers)


def _states(admin: AdminClient, partitions: dict[str, int], with_configs: bool, side: str) -> dict[str, TopicState]:
    if not with_configs or not partitions:
        return {t: TopicState(n) for t, n in partitions.items()}
    resources = [ConfigResource(ConfigResource.Type.TOPIC, t) for t in partitions]
    futures = admin.describe_configs(resources, request_timeout=ADMIN_TIMEOUT_S)
    states = {}
    for resource in resources:
        try:
            entries = futures[resource].result(timeout=ADMIN_TIMEOUT_S)
        except KafkaException as exc:
            if exc.args[0].code() == KafkaError.UNKNOWN_TOPIC_OR_PART:
                continue  # deleted since it was listed: the next round sees it gone
            raise ReplicatorError(f"could not describe the {side}'s topic {resource.name}: {exc.args[0].str()}") \
                from None
        configs = {name: entry.value for name, entry in entries.items()
                   if _source(entry) == ConfigSource.DYNAMIC_TOPIC_CONFIG.value and entry.value is not None}
        states[resource.name] = TopicState(partitions[resource.name], configs)
    return states


def _source(entry: ConfigEntry) -> int:
    """The entry's ConfigSource as a number (confluent-kafka gives the enum or its value)."""
    return int(getattr(entry.source, "value", entry.source))


def _done(future: Any, what: str) -> bool:
    """Whether the change was made here (False: another process made it first); TopicSyncRefused for
    a refusal that will not change, ReplicatorError for anything else."""
    try:
        future.result(timeout=ADMIN_TIMEOUT_S)
    except KafkaException as exc:
        error = exc.args[0]
        if error.code() in _ALREADY_DONE:
            return False
        if error.code() in _REFUSALS:
            raise TopicSyncRefused(f"the target refused {what}: {error.name()}: {error.str()}") from None
        raise ReplicatorError(f"{what} failed: {error.str()}") from None
    return True

