"""Replication policies: what a source topic is called on the target, and which topics are copies.

MirrorMaker 2's two (`replication.policy.class`): `DefaultReplicationPolicy` names the copy of topic
`t` from cluster `A` `A.t` (`replication.policy.separator`, default "."), so a topic's origin can be
read from its name and a two-way A<->B setup never copies a copy back (`is_cycle`);
`IdentityReplicationPolicy` keeps the name, as the replicator always did, and cannot tell a copy
from an original (MM2 says so too: no cycle detection). Heartbeats are renamed by both, so that
heartbeats from several sources stay apart. Names of MM2's internal topics follow the same rules,
so tools written for MM2 find them (`client_epochs.mirror.offsets.offset_syncs_topic`, `checkpoints_topic`).
"""

from __future__ import annotations

from dataclasses import dataclass

HEARTBEATS_TOPIC = "heartbeats"
_MM2 = "org.apache.kafka.connect.mirror."


@dataclass(frozen=True)
class ReplicationPolicy:
    """DefaultReplicationPolicy (`prefix_remote_topics`), or IdentityReplicationPolicy (not)."""

    separator: str = "."
    prefix_remote_topics: bool = True

    @property
    def name(self) -> str:
        return "DefaultReplicationPolicy" if self.prefix_remote_topics else "IdentityReplicationPolicy"

    def format_remote_topic(self, source_alias: str, topic: str) -> str:
        """The name on the target of `topic` copied from cluster `source_alias`."""
        if self.prefix_remote_topics or topic == HEARTBEATS_TOPIC:
            return f"{source_alias}{self.separator}{topic}"
        return topic

    def topic_source(self, topic: str) -> str | None:
        """The alias of the cluster `topic` was copied from, None for a topic that is no copy (or,
        under the identity policy, cannot be told from one)."""
        if not self.prefix_remote_topics and not self.is_heartbeats_topic(topic):
            return None
        source, separator, rest = topic.partition(self.separator)
        return source if separator and source and rest else None

    def upstream_topic(self, topic: str) -> str | None:
        """The name `topic` had on the cluster it was copied from (None: no copy)."""
        source = self.topic_source(topic)
        return None if source is None else topic[len(source) + len(self.separator):]

    def is_heartbeats_topic(self, topic: str) -> bool:
        """`heartbeats`, or a copy of one (`A.heartbeats`, `B.A.heartbeats`)."""
        return topic == HEARTBEATS_TOPIC or topic.endswith(f"{self.separator}{HEARTBEATS_TOPIC}")

    def is_internal_topic(self, topic: str) -> bool:
        """MM2's `isInternalTopic`: its own `.internal` topics, Kafka's (`__consumer_offsets`,
        `__transaction_state`, anything starting `__` or `.`), and Connect's (`*-internal`)."""
        return (topic.endswith(".internal") or topic.endswith("-internal") or topic.startswith("__")
                or topic.startswith("."))

    def is_cycle(self, topic: str, target_alias: str) -> bool:
        """Whether `topic` came from `target_alias`, directly or through other clusters (MM2's
        `MirrorSourceConnector.isCycle`): copying it there would copy a copy back."""
        seen = topic
        while True:
            source = self.topic_source(seen)
            if source is None:
                return False
            if source == target_alias:
                return True
            upstream = self.upstream_topic(seen)
            if upstream is None or upstream == seen:
                return False
            seen = upstream


def policy_for(class_name: str, separator: str = ".") -> ReplicationPolicy:
    """The policy MM2's `replication.policy.class` names (its full class name or the short one);
    ValueError for any other, since the replicator has no plug-in policies."""
    short = class_name.strip().removeprefix(_MM2)
    if not separator:
        raise ValueError("replication.policy.separator must not be empty")
    if short == "DefaultReplicationPolicy":
        return ReplicationPolicy(separator, prefix_remote_topics=True)
    if short == "IdentityReplicationPolicy":
        return ReplicationPolicy(separator, prefix_remote_topics=False)
    raise ValueError(f"replication.policy.class {class_name!r} is not one the replicator has: "
                     f"{_MM2}DefaultReplicationPolicy or {_MM2}IdentityReplicationPolicy")
