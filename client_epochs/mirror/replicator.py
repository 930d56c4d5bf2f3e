"""`Replicator`: a MirrorMaker-style copier of topics from a source cluster to a target that never rewinds.

KAFKA-6262 is what made MirrorMaker rewind: a broker answering with old metadata sends the
consumer to an old leader, OffsetOutOfRange follows, and `auto.offset.reset=earliest` copies the
whole topic again. This replicator reads with the epoch-aware `client_epochs.confluent.Consumer`
(group-managed, explicit commits carrying KIP-232 internal metadata, partitions held back until the
cluster's metadata is at least as new as their commits) and writes with an idempotent acks=all
confluent_kafka.Producer, source partition p to target partition p of the same topic name, keys,
values, timestamps and headers preserved.

What it guarantees, and how:

- A source offset is committed only after the target acknowledged it and every record before it
  (delivery callbacks; `progress.PartitionProgress`): a crash never loses a record.
- Every copy carries its provenance (`client_epochs.source` = "<topic>/<partition>/<offset>", and
  the epochs it was read under in `client_epochs.source_epochs`). On assignment the replicator reads
  the tail of each target partition; when the target already holds records beyond the committed
  offset (a `kill -9` between the target's ack and the commit), it seeks past them with the
  wrapper's KIP-232 `seek(partition, offset, internal_metadata)`, so the wait for current metadata
  still applies. A restart after `kill -9` thus copies nothing twice in the normal case.
- Never rewinds: a record the consumer delivers below the partition's position (an offset reset,
  a fetch from before the resume seek) is not copied again (counted as rewind_refused), so the
  provenance offsets in each target partition only ever increase.
- A source topic deleted and created again under its name: its commits go with it, and each copy's
  epochs name the topic id they were read under, so a resume from the target's last copy onto the
  new topic raises TopicRecreatedError naming both ids, never skips the new topic's first records.

Where it is still at-least-once (a record may be present twice in the target):

- Records the target had written but not yet acknowledged, or not yet made visible (below its high
  watermark), when the replicator was killed: the tail read on restart does not see them, so they
  are copied again. With a single-broker target this is the requests the broker had received but
  not processed at the moment of the restart; with replicated targets, also writes still waiting
  for the in-sync replicas.
- Other writers to the target topic: the tail read covers the last `tail_records` records of each
  target partition; when more foreign records than that follow this replicator's last copy, it
  cannot see the copy and resumes from the committed offset.
- A second replicator (another source cluster, another group) writing the same topic and partition
  names into the same target: provenance names the topic, not the cluster.
- A target that lost acknowledged records (unclean election, recreated topic) is reported and not
  rewound to: those records stay missing rather than duplicated.
- A delivery that fails for good (the producer's message timeout) stops the replicator with an
  error; it commits only what came before it, so the restart copies from there.

Not copied: topic configurations (the target topic is created with the source's partition count
and the target's default replication factor), ACLs; other groups' offsets only as MM2 translates them,
when `MirrorOptions.offsets` is set (offset syncs, checkpoints, group offset sync:
`client_epochs.mirror.checkpoints`).
"""

from __future__ import annotations

import logging
import sys
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import partial
from typing import Any, TextIO

import confluent_kafka
from confluent_kafka import TIMESTAMP_NOT_AVAILABLE, KafkaError, KafkaException, Producer

from client_epochs.confluent import Consumer
from client_epochs.log_bounds import LogBoundsClient
from client_epochs.metadata_client import MetadataClient
from client_epochs.mirror.checkpoints import OffsetTranslation
from client_epochs.mirror.metrics import FlowMetrics
from client_epochs.mirror.offsets import OffsetTranslationOptions
from client_epochs.mirror.progress import (
    CopiedRecord,
    MirrorCounts,
    PartitionProgress,
    Provenance,
    copy_headers,
    decide_resume,
    last_copied,
    newest,
    total_lag,
)
from client_epochs.mirror.topics import ReplicatorError, ensure_target_topics, read_tails, source_partition_counts
from client_epochs.model import NO_EPOCH, TopicPartition
from client_epochs.offset_fetch import OffsetFetcher
from client_epochs.waits import WaitTimer, diagnose
from quorum.wire.internal_metadata import InternalMetadata
from quorum.wire.sasl_client import ClientSecurity

log = logging.getLogger(__name__)

__all__ = ["DEFAULT_GROUP", "RESERVED", "MirrorOptions", "PeriodicTask", "Replicator", "ReplicatorError"]

DEFAULT_GROUP = "client-epochs-mirror"
TARGET_PARTITION_WAIT_S = 60.0
"""How long a copy waits for the target producer's metadata to list a partition a flow just created."""
_LOG_START_TIMEOUT_S = 30.0
"""How long a resume waits for a partition's current leader to give its log start (a leader being moved)."""


@dataclass
class MirrorOptions:
    """How a `Replicator` runs; the defaults are the command's."""

    group: str = DEFAULT_GROUP
    instance_id: str | None = None
    """`group.instance.id` (static membership): a restarted replicator takes its partitions back at
    once instead of waiting for the dead member's session to time out."""
    commit_interval_s: float = 1.0
    status_interval_s: float = 5.0
    stop_after_idle_s: float | None = None
    """Stop once the assigned partitions gave nothing for this long (nothing in flight, none waiting)."""
    tail_records: int = 100
    """How many records at the end of each target partition are read for provenance on assignment."""
    topic_wait_s: float = 30.0
    """How long a source topic may be absent from the source's metadata before it is an error."""
    flush_timeout_s: float = 60.0
    give_up_after_s: float = 300.0
    """How long the replicator waits for what it lacks (its group's coordinator, metadata as new as its
    commits, a partition's leader; named on the status line) before it stops with that reason as its error."""
    consumer_config: dict[str, Any] = field(default_factory=dict)
    """More librdkafka settings for the source consumer (not those in RESERVED)."""
    producer_config: dict[str, Any] = field(default_factory=dict)
    """More librdkafka settings for the target producer (not those in RESERVED)."""
    offsets: OffsetTranslationOptions | None = None
    """Offset syncs, checkpoints and group offset sync (client_epochs.mirror.checkpoints); None: none."""

    def check(self) -> None:
        """ValueError for settings the replicator's guarantees rest on, or intervals that are not positive."""
        for kind, config in (("consumer", self.consumer_config), ("producer", self.producer_config)):
            clash = sorted(set(config) & set(RESERVED[kind]))
            if clash:
                raise ValueError(f"{kind} setting(s) {', '.join(clash)} cannot be changed: the replicator sets them "
                                 f"itself")
        for name in ("commit_interval_s", "status_interval_s", "flush_timeout_s", "topic_wait_s", "give_up_after_s"):
            if not getattr(self, name) > 0:
                raise ValueError(f"{name} must be positive, not {getattr(self, name)!r}")
        if self.stop_after_idle_s is not None and not self.stop_after_idle_s > 0:
            raise ValueError(f"stop_after_idle_s must be positive or None, not {self.stop_after_idle_s!r}")
        if self.tail_records < 1:
            raise ValueError(f"tail_records must be 1 or more, not {self.tail_records!r}")
        if self.offsets is not None:
            self.offsets.check()
        # the replicator's own source connections take the consumer's security settings: one they cannot
        # use (sasl.mechanism=GSSAPI, sasl.oauthbearer.method=oidc, ...) is refused now, naming it
        ClientSecurity.of_client_properties(self.consumer_config)


RESERVED = {"consumer": ("bootstrap.servers", "group.id", "enable.auto.commit", "group.instance.id"),
            "producer": ("bootstrap.servers", "acks", "enable.idempotence")}
"""Settings the replicator's guarantees rest on: set from its own arguments, never overridden."""


@dataclass
class PeriodicTask:
    """Work a flow adds to the copy loop every `interval_s` (topic discovery, config sync, heartbeats):
    run on the loop's thread between batches, so it needs no lock; an exception stops the replicator
    with it as the error, after the usual clean shutdown."""

    name: str
    interval_s: float
    run: Callable[[Replicator], None]
    due: float = 0.0


def _key(partition: confluent_kafka.TopicPartition) -> TopicPartition:
    return TopicPartition(partition.topic, partition.partition)


def _ck(tp: TopicPartition, offset: int = confluent_kafka.OFFSET_INVALID) -> confluent_kafka.TopicPartition:
    return confluent_kafka.TopicPartition(tp.topic, tp.partition, offset)


class Replicator:
    """Copies `topics` from `source` to `target` until `stop()` (see the module docstring).

    `run()` blocks: it prepares the target topics, subscribes, copies, and on stop (or error)
    flushes the producer, commits what the target acknowledged, closes, and prints the summary.
    `out` receives the status lines and the summary (stdout by default).
    """

    def __init__(self, source: str, target: str, topics: Sequence[str], options: MirrorOptions | None = None,
                 out: TextIO | None = None, clock: Callable[[], float] = time.monotonic, *,
                 target_topic: Callable[[str], str] = str, tasks: Sequence[PeriodicTask] = (),
                 prepare_target: bool = True,
                 before_assign: Callable[[list[TopicPartition]], None] | None = None,
                 metrics: FlowMetrics | None = None) -> None:
        """`target_topic` names the copy of a source topic on the target (a replication policy; the
        same name by default); `tasks` run in the copy loop; without `prepare_target` the target topics
        are the caller's to create (a flow's topic sync), and `topics` may be empty until it finds some;
        `before_assign` sees each assignment first (a flow makes sure the target partitions exist);
        `metrics` gets every acknowledged copy (MM2's per-partition metrics) and the counts."""
        if not topics and prepare_target:
            raise ValueError("no topic to replicate")
        (options or MirrorOptions()).check()
        self.source = source
        self.target = target
        self.topics = list(dict.fromkeys(topics))
        self.options = options or MirrorOptions()
        self.counts = MirrorCounts()
        self._target_topic = target_topic
        self._tasks = list(tasks)
        self._prepare_target = prepare_target
        self._source_partitions: dict[str, int] = {}
        self._before_assign = before_assign
        self._metrics = metrics
        if metrics is not None:
            metrics.counts = self.counts
        self._out = out if out is not None else sys.stdout
        self._clock = clock
        self._stopping: str | None = None
        self._failure: str | None = None
        self._progress: dict[TopicPartition, PartitionProgress] = {}
        self._pending_seeks: dict[TopicPartition, tuple[int, str]] = {}
        """Resume seeks not yet done: (offset, internal metadata JSON) of paused partitions."""
        self._held: set[TopicPartition] = set()
        """Partitions this replicator paused for their resume seek, until their metadata wait ends."""
        self._consumer: Consumer | None = None
        self._producer: Producer | None = None
        # the replicator's own source connections, secured as its consumer (issue 18)
        security = ClientSecurity.of_client_properties(self.options.consumer_config)
        self._source_metadata = MetadataClient(source, client_id="client-epochs-mirror", security=security)
        self._source_cluster_id: str | None = None
        self._source_bounds = LogBoundsClient(self._source_metadata)
        """Log starts for a resume with nothing committed, asked of each partition's current leader with
        retries: librdkafka's get_watermark_offsets raised _DESTROY_BROKER out of the assignment when the
        broker it asked was killed meanwhile, and the replicator died of it."""
        self._last_activity = clock()
        self._offsets = OffsetFetcher(source, client_id="client-epochs-mirror", security=security)
        self._probe = MetadataClient(source, client_id="client-epochs-mirror", security=security)
        """The group's coordinator and the source's metadata, asked directly when the replicator is not
        copying (client_epochs.waits); apart from the consumer's, so that probing counts no refusal of its own."""
        self._waits = WaitTimer()
        self._floors: dict[TopicPartition, InternalMetadata] = {}
        """The epochs each assigned partition waits for before it is fetched (commits, resume seeks)."""
        self._copied_since_status = False
        self._translation: OffsetTranslation | None = None
        """Offset syncs and checkpoints, when options.offsets is set (created in run())."""

    # --- control ----------------------------------------------------------------------------------------

    def stop(self, reason: str = "stopped") -> None:
        """Ask `run()` to finish (flush, commit, close) after the current batch; safe from a signal handler."""
        if self._stopping is None:
            self._stopping = reason

    def run(self) -> MirrorCounts:
        """Copy until stopped; ReplicatorError (after the clean shutdown) when copying cannot go on."""
        try:
            partitions = self.prepare_topics() if self._prepare_target else {}
        except BaseException:
            for client in (self._source_bounds, self._source_metadata, self._probe, self._offsets):
                client.close()
            raise
        log.info("replicating %s from %s to %s", ", ".join(f"{t} ({n} partitions)" for t, n in partitions.items()),
                 self.source, self.target)
        self._producer = Producer({
            "bootstrap.servers": self.target, "client.id": "client-epochs-mirror", "acks": "all",
            "enable.idempotence": True, "linger.ms": 5, **self.options.producer_config,
            "error_cb": self._producer_error})
        consumer_config = {
            "bootstrap.servers": self.source, "group.id": self.options.group, "client.id": "client-epochs-mirror",
            "enable.auto.commit": False, "auto.offset.reset": "earliest",
            # librdkafka postpones a group join until its subscription's metadata arrives; when that
            # Metadata request dies with its broker, it waits for the periodic refresh (5 minutes by
            # default) with no partitions at all: a replicator should not stall that long.
            "topic.metadata.refresh.interval.ms": 10_000, **self.options.consumer_config}
        if self.options.instance_id:
            consumer_config["group.instance.id"] = self.options.instance_id
        # The status line says why the replicator has no partitions (client_epochs.waits): not the wrapper's log too.
        self._consumer = Consumer(consumer_config, no_partitions_warning_s=None)
        reason = "stopped"
        try:
            if self.options.offsets is not None:
                self._translation = OffsetTranslation(self.source, self.target, self.options.offsets,
                                                      self.options.group, partitions or self._source_partitions,
                                                      self.options.consumer_config,
                                                      self.options.producer_config, self._clock)
                self._translation.start()
            if self.topics:
                self._subscribe()
            self._loop()
            reason = f"error: {self._failure}" if self._failure is not None else self._stopping or reason
        except BaseException as exc:
            reason = f"error: {exc}"
            raise
        finally:
            self._finish(reason)
        if self._failure is not None:
            raise ReplicatorError(self._failure)
        return self.counts

    # --- topics -----------------------------------------------------------------------------------------

    def set_source_partitions(self, partitions: Mapping[str, int]) -> None:
        """Each copied source topic's partition count, as a flow's topic sync last found them: the
        partitions whose group commits the offset translation checkpoints."""
        self._source_partitions = dict(partitions)
        if self._translation is not None:
            self._translation.set_partitions(self._source_partitions)

    def resubscribe(self, topics: Sequence[str]) -> None:
        """Copy `topics` from now on (a flow found new ones): the group rebalances onto them."""
        wanted = list(dict.fromkeys(topics))
        if wanted != self.topics:
            self.topics = wanted
            if self._consumer is not None:
                self._subscribe()

    def _subscribe(self) -> None:
        assert self._consumer is not None
        if not self.topics:
            self._consumer.unsubscribe()
            return
        self._consumer.subscribe(self.topics, on_assign=self._on_assign, on_revoke=self._on_revoke,
                                 on_lost=self._on_lost)

    def prepare_topics(self) -> dict[str, int]:
        """Each source topic's partition count, the target topics created or checked (client_epochs.mirror.topics)."""
        counts, self._source_cluster_id = source_partition_counts(self._source_metadata, self.topics,
                                                                  self.options.topic_wait_s)
        ensure_target_topics(self.target, counts, self._source_cluster_id, _quiet(self.options.producer_config))
        return counts

    # --- the loop ---------------------------------------------------------------------------------------

    def _loop(self) -> None:
        assert self._consumer is not None and self._producer is not None
        now = self._clock()
        next_commit = now + self.options.commit_interval_s
        next_status = now + self.options.status_interval_s
        while self._stopping is None and self._failure is None:
            self._run_tasks()
            if self._held:
                self._apply_seeks()
            for message in self._consumer.consume(500, 0.2):
                self._handle(message)
            self._producer.poll(0)
            now = self._clock()
            if self._in_flight() or self._held or self._consumer.waiting_for_metadata or not self._progress:
                self._last_activity = now
            if now >= next_commit:
                self._commit()
                next_commit = now + self.options.commit_interval_s
            if now >= next_status:
                self._status()
                next_status = now + self.options.status_interval_s
            if self._translation is not None:
                self._translation.tick(now)
            idle = self.options.stop_after_idle_s
            if idle is not None and self._progress and now - self._last_activity >= idle:
                self.stop(f"idle for {idle:g} s")

    def _run_tasks(self) -> None:
        now = self._clock()
        for task in self._tasks:
            if now >= task.due:
                task.run(self)
                task.due = self._clock() + task.interval_s

    def _handle(self, message: confluent_kafka.Message) -> None:
        error = message.error()
        if error is not None:
            if error.code() != KafkaError._PARTITION_EOF:
                log.warning("consumer: %s", error)
                if error.fatal():
                    raise ReplicatorError(f"the source consumer failed: {error.str()}")
            return
        tp = TopicPartition(message.topic(), message.partition())
        progress = self._progress.get(tp)
        if progress is None:
            return  # a partition revoked since the fetch: its new owner copies it
        self._last_activity = self._clock()
        self._copied_since_status = True
        offset = message.offset()
        verdict = progress.admit(offset)
        if verdict == "skipped":
            return  # fetched from before the resume seek; counted when the seek was decided
        if verdict == "rewound":
            self.counts.of(tp).rewind_refused += 1
            return
        leader_epoch = message.leader_epoch()
        ts_type, timestamp = message.timestamp()
        extra: dict[str, Any] = {} if ts_type == TIMESTAMP_NOT_AVAILABLE else {"timestamp": timestamp}
        headers = copy_headers(message.headers(), Provenance(tp.topic, tp.partition, offset),
                               self._epochs(tp, leader_epoch))
        target = self._target_topic(tp.topic)
        on_delivery = partial(self._delivered, tp, progress, offset, leader_epoch)
        if self._metrics is not None:
            size = len(message.value() or b"") + len(message.key() or b"")
            measured = TopicPartition(target, tp.partition), size, extra.get("timestamp"), time.time()
            on_delivery = partial(self._measured, on_delivery, measured)
        while True:
            try:
                self._producer.produce(target, value=message.value(), key=message.key(),
                                       partition=tp.partition, headers=headers, on_delivery=on_delivery, **extra)
                return
            except BufferError:  # the producer's queue is full: wait for the target to take some
                self._producer.poll(0.1)
            except KafkaException as exc:
                if exc.args[0].code() not in (KafkaError._UNKNOWN_PARTITION, KafkaError._UNKNOWN_TOPIC):
                    raise
                self._await_target_partition(target, tp.partition)

    def _await_target_partition(self, topic: str, partition: int) -> None:
        """A target partition created a moment ago (a flow's topic sync) that the producer's metadata
        does not list yet: librdkafka refuses to produce to it at once and refreshes a topic's metadata
        only every few minutes, so ask for it until it is listed (ReplicatorError past the deadline)."""
        assert self._producer is not None
        deadline = self._clock() + TARGET_PARTITION_WAIT_S
        while True:
            listed = self._producer.list_topics(topic, timeout=5).topics.get(topic)
            if listed is not None and listed.error is None and partition in listed.partitions:
                return
            if self._clock() >= deadline:
                raise ReplicatorError(f"the target's metadata does not list partition {topic}-{partition} after "
                                      f"{TARGET_PARTITION_WAIT_S:g} s")
            log.info("waiting for the target's metadata to list partition %s-%d", topic, partition)
            self._producer.poll(0.2)

    def _epochs(self, tp: TopicPartition, leader_epoch: int | None) -> InternalMetadata | None:
        """The epochs a record was read under: the topic epoch the consumer's metadata client accepted,
        the record's own leader epoch (what a resume seek waits for), and the topic id its position
        was read under, as the wrapper's commits name it (issue 22): a resume seek from this copy onto
        a topic deleted and created again since is then a recreation with certainty, whatever the
        epochs say, and not a silent skip of the new topic's first records."""
        consumer = self._consumer
        known = consumer.metadata_client.cache.get(tp) if consumer is not None else None
        topic_epoch = NO_EPOCH if known is None else known.topic_epoch
        if leader_epoch is None or leader_epoch < 0:
            leader_epoch = NO_EPOCH if known is None else known.leader_epoch
        topic_id = consumer.read_topic_id(tp) if consumer is not None else None
        metadata = InternalMetadata(topic_epoch, leader_epoch, topic_id)
        return None if metadata.is_unknown else metadata

    def _delivered(self, tp: TopicPartition, progress: PartitionProgress, offset: int, leader_epoch: int | None,
                   error: KafkaError | None, message: confluent_kafka.Message) -> None:
        if error is None:
            progress.acknowledged(offset, leader_epoch)
            self.counts.of(tp).replicated += 1
            if self._translation is not None and self._progress.get(tp) is progress:  # still ours
                self._translation.copied(tp, offset, message.offset())
            return
        progress.failed(offset, error.str())
        if self._failure is None:
            self._failure = (f"the target did not take the copy of {tp} offset {offset}: {error.str()}; nothing "
                             f"from there on is committed, a restart copies it again")

    def _measured(self, delivered: Callable[[KafkaError | None, Any], None],
                  copy: tuple[TopicPartition, int, int | None, float], error: KafkaError | None, message: Any) -> None:
        if error is None and self._metrics is not None:
            self._metrics.acknowledged(*copy)
        delivered(error, message)

    def _producer_error(self, error: KafkaError) -> None:
        if error.fatal():
            self._failure = self._failure or f"the target producer failed: {error.str()}"
        else:
            log.info("target producer: %s", error.str())

    def _in_flight(self) -> int:
        return sum(p.in_flight for p in self._progress.values())

    # --- assignment -------------------------------------------------------------------------------------

    def _on_assign(self, consumer: Consumer, partitions: list[confluent_kafka.TopicPartition]) -> None:
        """Resume each partition where the target says the copy got to, then let the wrapper wait."""
        keys = [_key(p) for p in partitions]
        if self._before_assign is not None and keys:
            self._before_assign(keys)
        committed = {_key(p): (p.offset if p.offset >= 0 else None)
                     for p in consumer.committed([_ck(tp) for tp in keys], timeout=30)} if keys else {}
        committed_epochs = consumer.committed_internal_metadata(keys) if keys else {}
        copies = self._target_copies(keys)
        decisions = {}
        for tp in keys:
            start = 0
            if committed[tp] is None and copies.get(tp) is not None:
                start = self._source_bounds.fetch(tp, timeout=_LOG_START_TIMEOUT_S).log_start
            decisions[tp] = decide_resume(tp, committed[tp], committed_epochs.get(tp), copies.get(tp), start)
        # A seek right after assign() fails in librdkafka while the partition's fetcher is not started
        # yet (Local: Erroneous state), so the resume offset goes into the assignment itself; the
        # partition stays paused until the loop's KIP-232 seek (same offset, with the floor) succeeds.
        consumer.assign([_ck(tp, decisions[tp].seek_to) if decisions[tp].seek_to is not None else p
                         for tp, p in zip(keys, partitions, strict=True)])
        held = []
        for tp in keys:
            resume = decisions[tp]
            log.info("%s", resume.note)
            floor = resume.floor
            if resume.seek_to is not None and floor is not None and not floor.is_unknown:
                self._pending_seeks[tp] = (resume.seek_to, floor.to_json())
                held.append(_ck(tp))
            self._progress[tp] = PartitionProgress.resumed(committed[tp], resume)
            waits_for = newest(committed_epochs.get(tp), floor)
            if waits_for is not None:
                self._floors[tp] = waits_for
            counts = self.counts.of(tp)
            counts.skipped_already_copied += resume.skipped
            if committed[tp] is not None:
                counts.committed = committed[tp]
        if held:
            consumer.pause(held)
            self._held.update(_key(p) for p in held)
        self.counts.assigned = len(self._progress)
        self._last_activity = self._clock()
        if self._translation is not None:
            self._translation.assigned(keys)

    def _apply_seeks(self) -> None:
        """The resume seeks with their internal metadata: the wrapper then holds each partition until
        the source's metadata is at least as new as the epochs the last copy was read under; the
        partition is resumed here once it no longer waits (the wrapper leaves a user's pause alone)."""
        consumer = self._consumer
        assert consumer is not None
        for tp, (offset, floor) in list(self._pending_seeks.items()):
            try:
                consumer.seek(_ck(tp), offset, floor)
            except KafkaException as exc:
                if exc.args[0].code() == KafkaError._STATE:
                    continue  # the fetcher has not started yet: next time round
                raise
            del self._pending_seeks[tp]
        waiting = consumer.waiting_for_metadata
        ready = [tp for tp in self._held if tp not in self._pending_seeks and tp not in waiting]
        if ready:
            consumer.resume([_ck(tp) for tp in ready])
            self._held.difference_update(ready)

    def _on_revoke(self, _: Consumer, partitions: list[confluent_kafka.TopicPartition]) -> None:
        """Before the partitions go: wait for the target's acks and commit them, so the next owner
        starts exactly after the last copy."""
        keys = [_key(p) for p in partitions]
        self._flush()
        self._commit(keys)
        if self._translation is not None:
            self._translation.revoked(keys)
        self._drop(keys)

    def _on_lost(self, _: Consumer, partitions: list[confluent_kafka.TopicPartition]) -> None:
        """Lost (the session expired): another member may own them already, so nothing is committed;
        the new owner's tail read finds what was copied."""
        self._drop(_key(p) for p in partitions)

    def _drop(self, keys: Iterable[TopicPartition]) -> None:
        keys = list(keys)
        if self._translation is not None:
            self._translation.dropped(keys)
        for tp in keys:
            self._progress.pop(tp, None)
            self._pending_seeks.pop(tp, None)
            self._held.discard(tp)
            self._floors.pop(tp, None)
        self.counts.assigned = len(self._progress)

    def _target_copies(self, keys: Sequence[TopicPartition]) -> dict[TopicPartition, CopiedRecord | None]:
        """The last copy of each source partition that its target partition holds (tail read)."""
        if not keys:
            return {}
        tails = read_tails(self.target, keys, self.options.tail_records, _quiet(self.options.producer_config),
                           target_topic=self._target_topic)
        return {tp: last_copied(tails[tp], tp) for tp in keys}

    # --- commits, status, shutdown ----------------------------------------------------------------------

    def _commit(self, keys: Iterable[TopicPartition] | None = None) -> None:
        """Commit, per partition, the offset after the highest contiguous acknowledged copy."""
        if self._consumer is None:
            return
        wanted = list(self._progress) if keys is None else [tp for tp in keys if tp in self._progress]
        offsets = []
        for tp in wanted:
            commit = self._progress[tp].to_commit()
            if commit is not None:
                offset, epoch = commit
                extra = {"leader_epoch": epoch} if epoch is not None and epoch >= 0 else {}
                offsets.append(confluent_kafka.TopicPartition(tp.topic, tp.partition, offset, **extra))
        if not offsets:
            return
        try:
            result = self._consumer.commit(offsets=offsets, asynchronous=False)
        except KafkaException as exc:
            log.warning("commit of %s failed (tried again later): %s",
                        ", ".join(f"{p.topic}-{p.partition}@{p.offset}" for p in offsets), exc.args[0])
            return
        for partition in result or offsets:
            tp = _key(partition)
            if partition.error is not None:
                log.warning("commit of %s@%d refused: %s", tp, partition.offset, partition.error)
                continue
            if tp in self._progress:
                self._progress[tp].committed = partition.offset
            self.counts.of(tp).committed = partition.offset

    def _flush(self) -> None:
        if self._producer is not None:
            left = self._producer.flush(self.options.flush_timeout_s)
            if left:
                log.warning("%d copies still unacknowledged after %g s; they are not committed", left,
                            self.options.flush_timeout_s)

    def _refresh_counts(self) -> None:
        consumer = self._consumer
        self.counts.in_flight = self._in_flight()
        self.counts.assigned = len(self._progress)
        if consumer is None:
            return
        self.counts.stale_metadata_refused = consumer.metadata_client.refusals + self._source_metadata.refusals
        self.counts.resets = int(getattr(consumer, "resets", 0) or 0)
        lags: list[int | None] = []
        for tp, progress in self._progress.items():
            try:
                low, high = consumer.get_watermark_offsets(_ck(tp), cached=True)
            except KafkaException:
                low = high = None
            lags.append(progress.lag(high, low))
        self.counts.lag = total_lag(lags)

    def _status(self) -> None:
        """The counts, and what the replicator waits for when it is not copying; gives up past give_up_after_s."""
        self._refresh_counts()
        consumer = self._consumer
        assert consumer is not None
        waiting = consumer.waiting_for_metadata
        wait = diagnose(self._probe, self._offsets, self.options.group, self.topics, self._progress,
                        {tp: floor for tp, floor in self._floors.items() if tp in waiting},
                        self._copied_since_status)
        self._copied_since_status = False
        now = self._clock()
        self._waits.observe(wait, now)
        waiting_line = self._waits.line(now)
        line = self.counts.status_line()
        print(line if waiting_line is None else f"{line} {waiting_line}", file=self._out, flush=True)
        gave_up = self._waits.expired(now, self.options.give_up_after_s)
        if gave_up is not None and self._failure is None:
            self._failure = gave_up

    def _finish(self, reason: str) -> None:
        """Flush, commit what the target acknowledged, leave the group, print the summary."""
        try:
            if self._producer is not None:
                self._flush()
            self._commit()
            self._refresh_counts()
        finally:
            try:
                if self._consumer is not None:
                    self._consumer.close()
            finally:
                if self._translation is not None:
                    self._translation.close()
                self._source_bounds.close()
                self._source_metadata.close()
                self._offsets.close()
                self._probe.close()
                self._consumer = None
                print(self.counts.summary(reason), file=self._out, flush=True)


def _quiet(config: dict[str, Any]) -> dict[str, Any]:
    """The user's log settings, for the helper clients (admin, tail reader)."""
    return {k: v for k, v in config.items() if k in ("log_level", "debug")}
