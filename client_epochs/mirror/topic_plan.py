"""What a flow must change on the target so that its topics match the source's (sans-IO).

MM2's `MirrorSourceConnector` does three things every refresh: finds source topics the flow copies
(`refresh.topics.interval.seconds`), creates their copies on the target with the source's partition
count (`replication.factor`, capped at the target's broker count) and configs, adds partitions to
copies whose source grew, and keeps copied configs in step (`sync.topic.configs.*`, MM2's
DefaultConfigPropertyFilter leaving out what describes the source cluster rather than the data).
Here that is one pure function of what both sides report, so that every process of a flow can run
it (each change is idempotent: an already existing topic, an already grown one, a config already
set) and the rules are tested without clusters.

Configs copied are those set on the source topic itself (Kafka's DYNAMIC_TOPIC_CONFIG), minus
`config.properties.exclude`; a copied config the source no longer sets is removed from the copy,
so the copy falls back to the target's default as the source fell back to its own. Configs set on
the target copy that the filter excludes are left alone (an operator's own, e.g. min.insync.replicas).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from client_epochs.mirror.filters import PatternList


@dataclass(frozen=True)
class TopicState:
    """A topic as one cluster reports it: its partition count and the configs set on it."""

    partitions: int
    configs: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class NewCopy:
    topic: str
    source_topic: str
    partitions: int
    replication_factor: int
    configs: dict[str, str]


@dataclass(frozen=True)
class ConfigChange:
    topic: str
    set: dict[str, str]
    delete: tuple[str, ...]


@dataclass(frozen=True)
class TopicPlan:
    copied: dict[str, str]
    """Every source topic the flow copies, with its name on the target."""
    create: list[NewCopy] = field(default_factory=list)
    grow: dict[str, int] = field(default_factory=dict)
    """Target topics to grow to this many partitions."""
    configs: list[ConfigChange] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)

    @property
    def changes(self) -> int:
        return len(self.create) + len(self.grow) + len(self.configs)


def copied_configs(source: Mapping[str, str], excluded: PatternList) -> dict[str, str]:
    return {name: value for name, value in source.items() if not excluded.matches(name)}


def plan_topics(source: Mapping[str, TopicState], target: Mapping[str, TopicState], *,
                should_replicate: Callable[[str], bool], target_topic: Callable[[str], str],
                replication_factor: int, target_brokers: int, excluded_configs: PatternList,
                sync_configs: bool) -> TopicPlan:
    """The target changes that make the flow's copies match `source` (see the module docstring)."""
    copied = {topic: target_topic(topic) for topic in sorted(source) if should_replicate(topic)}
    plan = TopicPlan(copied)
    factor = replication_factor
    if copied and target_brokers < replication_factor:
        factor = max(1, target_brokers)
        plan.warnings.append(f"replication.factor {replication_factor} is more than the target's {target_brokers} "
                             f"broker(s): new copies get {factor}")
    for topic, name in copied.items():
        wanted = copied_configs(source[topic].configs, excluded_configs) if sync_configs else {}
        have = target.get(name)
        if have is None:
            plan.create.append(NewCopy(name, topic, source[topic].partitions, factor, wanted))
            continue
        if have.partitions < source[topic].partitions:
            plan.grow[name] = source[topic].partitions
        if sync_configs:
            changed = {k: v for k, v in wanted.items() if have.configs.get(k) != v}
            dropped = tuple(sorted(k for k in have.configs if k not in wanted and not excluded_configs.matches(k)))
            if changed or dropped:
                plan.configs.append(ConfigChange(name, changed, dropped))
    return plan
