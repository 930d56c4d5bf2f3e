"""The replicator's topics on both sides: partition counts, target topics, and the target's tail.

Kept apart from the run loop (`client_epochs.mirror`) because these are one-shot admin steps with
their own failure modes, each of which must end in a clear error rather than a wrong copy:

- the source's partition counts come from the SDK's epoch-aware `MetadataClient` (a stale broker
  may not list a new topic yet, so it is asked again for a while before the topic counts as missing);
- a missing target topic is created with as many partitions (source partition p goes to target
  partition p); one with fewer partitions is refused, since some source partition would have nowhere
  to go; the target being the source itself is refused too;
- the tail read: the last records of each target partition, whose provenance headers say how far an
  earlier run got (`progress.last_copied`).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from typing import Any

import confluent_kafka
from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import AdminClient, NewTopic

from client_epochs.metadata_client import MetadataClient, MetadataUnavailableError, StaleMetadataError
from client_epochs.model import TopicPartition

log = logging.getLogger(__name__)

TARGET_TOPIC_WAIT_S = 60.0
"""How long a created target topic may take to show in the target's metadata with all its partitions."""

Headers = list[tuple[str, bytes | None]] | None


class ReplicatorError(RuntimeError):
    """A condition the replicator cannot copy through: a missing or too small topic, a failed delivery."""


def source_partition_counts(metadata: MetadataClient, topics: Sequence[str], wait_s: float
                            ) -> tuple[dict[str, int], str | None]:
    """Each topic's partition count on the source, and the source's cluster id.

    ReplicatorError naming the topics still missing after `wait_s` seconds (and why).
    """
    deadline = time.monotonic() + wait_s
    counts: dict[str, int] = {}
    cluster_id: str | None = None
    while True:
        missing = [t for t in topics if t not in counts]
        try:
            current = metadata.refresh_until_current(missing, timeout=10)
        except (StaleMetadataError, MetadataUnavailableError) as exc:
            problem = str(exc)
        else:
            cluster_id = current.cluster_id
            for topic in missing:
                found = current.partitions_of(topic)
                if found:
                    counts[topic] = max(tp.partition for tp in found) + 1
            problem = "not in the source's metadata"
        missing = [t for t in topics if t not in counts]
        if not missing:
            return counts, cluster_id
        if time.monotonic() >= deadline:
            raise ReplicatorError(f"source topic(s) {', '.join(missing)} not found on {', '.join(metadata.brokers)} "
                                  f"after {wait_s:g} s: {problem}")
        time.sleep(0.5)


def ensure_target_topics(target: str, counts: dict[str, int], source_cluster_id: str | None,
                         config: dict[str, Any] | None = None) -> None:
    """Create the missing target topics with the source's partition counts (the target's default
    replication factor); ReplicatorError for a topic with fewer partitions, or for the source itself."""
    admin = AdminClient({"bootstrap.servers": target, **(config or {})})
    listed = admin.list_topics(timeout=30)
    if source_cluster_id is not None and listed.cluster_id == source_cluster_id:
        raise ReplicatorError(f"the target {target} is the source cluster (cluster id {source_cluster_id}): "
                              f"the replicator would copy its own copies")
    create = []
    for topic, count in counts.items():
        existing = listed.topics.get(topic)
        if existing is None or existing.error is not None:
            create.append(NewTopic(topic, count))
        elif len(existing.partitions) < count:
            raise ReplicatorError(_too_few(topic, len(existing.partitions), count))
    if create:
        for topic, future in admin.create_topics(create, request_timeout=30).items():
            try:
                future.result(timeout=60)
                log.info("created target topic %s with %d partitions", topic, counts[topic])
            except KafkaException as exc:
                if exc.args[0].code() != KafkaError.TOPIC_ALREADY_EXISTS:
                    raise ReplicatorError(f"could not create target topic {topic}: {exc.args[0].str()}") from None
    _wait_for_target_topics(admin, counts)


def _wait_for_target_topics(admin: AdminClient, counts: dict[str, int]) -> None:
    """Until the target's metadata lists every topic with its partitions (creation takes a moment)."""
    deadline = time.monotonic() + TARGET_TOPIC_WAIT_S
    while True:
        listed = admin.list_topics(timeout=30).topics
        have = {t: len(listed[t].partitions) if t in listed and listed[t].error is None else 0 for t in counts}
        short = {t: n for t, n in counts.items() if have[t] < n}
        if not short:
            return
        if time.monotonic() >= deadline:
            raise ReplicatorError("; ".join(
                _too_few(t, have[t], n) if have[t] else
                f"target topic {t} is not in the target's metadata after {TARGET_TOPIC_WAIT_S:g} s"
                for t, n in short.items()))
        time.sleep(0.2)


def _too_few(topic: str, have: int, need: int) -> str:
    return (f"target topic {topic} has {have} partitions but the source has {need}: partition p is copied to "
            f"partition p, so add partitions to the target topic (kafka-topics --alter --partitions {need})")


def _target_bounds(reader: confluent_kafka.Consumer, tp: TopicPartition, timeout_s: float) -> tuple[int, int] | None:
    """The target partition's (low, high) watermarks; None when the target has no such partition.

    A source partition added a moment ago is assigned to the replicator as soon as the source group
    sees it, while the flow's topic sync may not have grown the target topic yet: librdkafka then
    refuses the watermark request at once (_UNKNOWN_PARTITION, from its own metadata), which must
    not end the replicator. The target's own metadata is asked, so that only a partition the
    target really does not list counts as holding nothing."""
    partition = confluent_kafka.TopicPartition(tp.topic, tp.partition)
    try:
        return reader.get_watermark_offsets(partition, timeout=timeout_s)
    except KafkaException as exc:
        if exc.args[0].code() not in (KafkaError._UNKNOWN_PARTITION, KafkaError._UNKNOWN_TOPIC):
            raise
    listed = reader.list_topics(tp.topic, timeout=timeout_s).topics.get(tp.topic)
    if listed is None or listed.error is not None or tp.partition not in listed.partitions:
        log.info("target partition %s is not there yet: it holds no copy", tp)
        return None
    return reader.get_watermark_offsets(partition, timeout=timeout_s)


def read_tails(target: str, sources: Sequence[TopicPartition], records: int, config: dict[str, Any] | None = None,
               timeout_s: float = 30.0, target_topic: Callable[[str], str] = str
               ) -> dict[TopicPartition, list[Headers]]:
    """The headers of the last `records` records of the target partition of each source partition
    (the same number, in topic `target_topic(source topic)`), by source partition.

    A plain assign-based consumer, read up to the high watermark: only what the target made visible
    (acknowledged to acks=all producers) counts as copied.
    """
    names = {TopicPartition(target_topic(tp.topic), tp.partition): tp for tp in sources}
    keys = list(names)
    reader = confluent_kafka.Consumer({"bootstrap.servers": target, "group.id": "client-epochs-mirror-tail",
                                       "enable.auto.commit": False, "enable.partition.eof": False,
                                       **(config or {})})
    try:
        ends: dict[TopicPartition, int] = {}
        starts = []
        tails: dict[TopicPartition, list[Headers]] = {tp: [] for tp in keys}
        for tp in keys:
            bounds = _target_bounds(reader, tp, timeout_s)
            if bounds is None:
                continue  # the partition is not on the target yet: it holds no copy
            low, high = bounds
            if high > low:
                ends[tp] = high
                starts.append(confluent_kafka.TopicPartition(tp.topic, tp.partition, max(low, high - records)))
        if not starts:
            return {names[tp]: headers for tp, headers in tails.items()}
        reader.assign(starts)
        deadline = time.monotonic() + timeout_s
        reached = {tp: False for tp in ends}
        while not all(reached.values()):
            if time.monotonic() >= deadline:
                late = ", ".join(str(tp) for tp, done in reached.items() if not done)
                raise ReplicatorError(f"could not read the end of target partition(s) {late} within {timeout_s:g} s")
            for message in reader.consume(500, 0.5):
                if message.error() is not None:
                    log.info("target tail read: %s", message.error())
                    continue
                tp = TopicPartition(message.topic(), message.partition())
                if tp in ends and not reached[tp]:
                    tails[tp].append(message.headers())
                    reached[tp] = message.offset() + 1 >= ends[tp]
            for position in reader.position(starts):  # control records end a partition without a message
                tp = TopicPartition(position.topic, position.partition)
                if position.offset >= ends[tp]:
                    reached[tp] = True
        return {names[tp]: headers for tp, headers in tails.items()}
    finally:
        reader.close()
