"""Which topics a Metadata request creates, and what a topic it names but nobody has gets.

Kafka's KafkaApis.handleTopicMetadataRequest and AutoTopicCreationManager decide it, and so does
this, as pure functions of the request and the broker's setting:

* a request may create topics only when the broker's `auto.create.topics.enable` and the
  request's AllowAutoTopicCreation (Metadata v4+: a consumer's `allow.auto.create.topics`, a
  producer's default true; before v4 the field does not exist and counts as true) both allow it,
  and only the topics it names (a request for all topics creates none);
* of those, only a name Kafka's Topic.validate takes: an illegal name (characters outside
  [a-zA-Z0-9._-], longer than 249, "." or "..") is never sent to the controller and is answered
  INVALID_TOPIC_EXCEPTION whether creation was allowed or not, so a client fails its messages at
  once (librdkafka takes it as a permanent error) instead of waiting for the topic to appear;
* a named topic that does not exist is otherwise UNKNOWN_TOPIC_OR_PARTITION, created or not.

`__consumer_offsets` is created with its own settings (as Kafka's creatableTopic does);
`__transaction_state` and `__share_group_state` are not created here (no transactions or share
groups), so they stay UNKNOWN_TOPIC_OR_PARTITION. The authorizer's say (CREATE) is applied by the
caller (`quorum.security.authorization.metadata_refusals`).
"""

from __future__ import annotations

from collections.abc import Collection, Iterable

from quorum.controller.validation import topic_name_fault
from quorum.wire.errors import ErrorCode

INTERNAL_TOPICS = frozenset({"__consumer_offsets", "__transaction_state", "__share_group_state"})
"""Kafka's Topic.isInternal: flagged is_internal in Metadata."""
NOT_CREATED_HERE = frozenset({"__transaction_state", "__share_group_state"})
"""Internal topics of features this cluster lacks: never auto-created."""


def creation_allowed(version: int, allow_auto_topic_creation: bool, broker_enabled: bool, all_topics: bool) -> bool:
    """Kafka's `autoCreateTopicsEnable && allowAutoTopicCreation && !isAllTopics`; before Metadata v4
    the request has no such field, and Kafka's default for it is true."""
    return broker_enabled and (version < 4 or allow_auto_topic_creation) and not all_topics


def topics_to_create(names: Iterable[str | None], existing: Collection[str], allowed: bool) -> list[str]:
    """The named topics a request creates: none unless `allowed`; else each legal name not yet in
    `existing`, once, in the request's order."""
    if not allowed:
        return []
    chosen: list[str] = []
    for name in names:
        if (name and name not in existing and name not in chosen and name not in NOT_CREATED_HERE
                and topic_name_fault(name) is None):
            chosen.append(name)
    return chosen


def missing_topic_error(name: str) -> ErrorCode:
    """The error for a topic a request names that the broker does not have (Kafka's getTopicMetadata)."""
    return ErrorCode.UNKNOWN_TOPIC_OR_PARTITION if topic_name_fault(name) is None else ErrorCode.INVALID_TOPIC_EXCEPTION
