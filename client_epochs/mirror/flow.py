"""One enabled `A->B` flow of an `mm2.properties`, run as MM2 runs it: discovery, config sync,
heartbeats, and the copy itself (the `Replicator`, with every guarantee it has).

Before copying, the flow syncs its topics once (`topic_sync`): a target that refuses to create a
copy stops the flow before anything is copied. Then the copy loop runs the flow's periodic work
between batches: every `refresh.topics.interval.seconds` the topics are synced again and the
consumer subscribed to what matches now (a new topic is copied from its beginning, a grown one
from its new partitions' beginning); every `sync.topic.configs.interval.seconds` the configs; every
`emit.heartbeats.interval.seconds` a heartbeat into the target's `heartbeats` topic (MM2's record).
A change is said in a line of its own (`client-epochs-mirror flow A->B: ...`) beside the status line.

Several processes with the same file share each flow's partitions through the flow's consumer group
(`client-epochs-mirror-A-B`); each also runs the topic sync, whose changes are idempotent, so no
process is elected for it and any one may stop without the others waiting for it.
"""

from __future__ import annotations

import logging
import time
from dataclasses import replace
from typing import TextIO

from confluent_kafka import KafkaError, KafkaException, Producer
from confluent_kafka.admin import AdminClient, NewTopic

from client_epochs.mirror.config import Flow, MirrorConfigError
from client_epochs.mirror.metrics import MirrorMetrics
from client_epochs.mirror.offsets import OffsetTranslationOptions
from client_epochs.mirror.policy import HEARTBEATS_TOPIC
from client_epochs.mirror.replicator import DEFAULT_GROUP, MirrorOptions, PeriodicTask, Replicator
from client_epochs.mirror.topic_sync import ADMIN_TIMEOUT_S, TopicSync, TopicSyncRefused
from client_epochs.model import TopicPartition
from quorum.wire.mm2_records import Heartbeat

log = logging.getLogger(__name__)


def flow_group(flow: Flow) -> str:
    """The consumer group of a flow's processes on the source."""
    return f"client-epochs-mirror-{flow.source.alias}-{flow.target.alias}"


class FlowRunner:
    """Runs one flow until `stop()`; `run()` blocks like `Replicator.run()`."""

    def __init__(self, flow: Flow, options: MirrorOptions | None = None, out: TextIO | None = None,
                 metrics: MirrorMetrics | None = None) -> None:
        self.flow = flow
        base = options or MirrorOptions()
        try:
            offsets = OffsetTranslationOptions.from_mm2(flow.settings, flow.source.alias, flow.target.alias,
                                                        flow.target_topic)
        except ValueError as exc:
            raise MirrorConfigError(f"{flow.name}: {exc}") from None
        self.options = replace(
            base, group=flow_group(flow) if base.group == DEFAULT_GROUP else base.group, offsets=offsets,
            consumer_config={**flow.source.client("consumer"), **base.consumer_config},
            producer_config={**flow.target.client("producer"), **base.producer_config})
        self._out = out
        self.sync = TopicSync({"bootstrap.servers": flow.source.bootstrap, **flow.source.client("admin")},
                              {"bootstrap.servers": flow.target.bootstrap, **flow.target.client("admin")},
                              should_replicate=flow.should_replicate, target_topic=flow.target_topic,
                              replication_factor=flow.number("replication.factor"),
                              excluded_configs=flow.config_properties_exclude,
                              sync_configs=flow.flag("sync.topic.configs.enabled"))
        self._heartbeats: Producer | None = None
        now = time.monotonic()
        tasks = []
        # One topic sync finds topics and partitions and syncs configs alike: it runs at the shorter of
        # the two intervals enabled, rather than twice whenever both fall due.
        intervals = [flow.number(f"{name}.interval.seconds") for name in ("refresh.topics", "sync.topic.configs")
                     if flow.flag(f"{name}.enabled")]
        if intervals:
            tasks.append(PeriodicTask("topic sync", min(intervals), self._refresh, due=now + min(intervals)))
        if flow.flag("emit.heartbeats.enabled"):
            tasks.append(PeriodicTask("heartbeats", flow.number("emit.heartbeats.interval.seconds"), self._heartbeat))
        self.replicator = Replicator(flow.source.bootstrap, flow.target.bootstrap, [], self.options, out=out,
                                     target_topic=flow.target_topic, tasks=tasks, prepare_target=False,
                                     before_assign=self._before_assign,
                                     metrics=None if metrics is None else metrics.flow(flow.source.alias,
                                                                                       flow.target.alias))

    def prepare(self) -> None:
        """The first topic sync and the heartbeats topic: TopicSyncRefused before anything is copied."""
        self._refresh(self.replicator, first=True)
        if self.flow.flag("emit.heartbeats.enabled"):
            self._create_heartbeats_topic()
            self._heartbeats = Producer({"bootstrap.servers": self.flow.target.bootstrap, "acks": "all",
                                         "client.id": "client-epochs-mirror-heartbeats",
                                         **self.flow.target.client("producer")})

    def run(self) -> None:
        try:
            self.replicator.run()
        finally:
            if self._heartbeats is not None:
                self._heartbeats.flush(10)

    def stop(self, reason: str = "stopped") -> None:
        self.replicator.stop(reason)

    def _refresh(self, replicator: Replicator, first: bool = False) -> None:
        before = dict(self.sync.copied)
        plan = self.sync.sync()
        replicator.set_source_partitions(self.sync.source_partitions)
        replicator.resubscribe(sorted(self.sync.copied))
        new = sorted(set(self.sync.copied) - set(before))
        gone = sorted(set(before) - set(self.sync.copied))
        if first or plan.changes or new or gone:
            notes = [f"topics {len(self.sync.copied)}"]
            notes += [f"new {', '.join(f'{t} -> {self.sync.copied[t]}' for t in new)}"] if new and not first else []
            notes += [f"gone {', '.join(gone)}"] if gone else []
            notes += [f"created {', '.join(c.topic for c in plan.create)}"] if plan.create else []
            notes += [f"grown {', '.join(f'{t} to {n}' for t, n in plan.grow.items())}"] if plan.grow else []
            notes += [f"configs synced {', '.join(c.topic for c in plan.configs)}"] if plan.configs else []
            print(f"client-epochs-mirror flow {self.flow.name}: {'; '.join(notes)}", file=self._out, flush=True)

    def _before_assign(self, partitions: list[TopicPartition]) -> None:
        """A partition the last sync did not see (the source grew since): sync now, so that its copy
        has a target partition to go to before the first record is copied."""
        if any(tp.partition >= self.sync.source_partitions.get(tp.topic, 0) for tp in partitions):
            self._refresh(self.replicator)

    def _create_heartbeats_topic(self) -> None:
        """MM2's `heartbeats` topic on the target: one compacted partition."""
        admin = AdminClient({"bootstrap.servers": self.flow.target.bootstrap, **self.flow.target.client("admin")})
        brokers = len(admin.list_topics(timeout=ADMIN_TIMEOUT_S).brokers)
        factor = max(1, min(self.flow.number("heartbeats.topic.replication.factor"), brokers))
        future = admin.create_topics([NewTopic(HEARTBEATS_TOPIC, 1, factor, config={"cleanup.policy": "compact"})],
                                     request_timeout=ADMIN_TIMEOUT_S)[HEARTBEATS_TOPIC]
        try:
            future.result(timeout=ADMIN_TIMEOUT_S)
        except KafkaException as exc:
            error = exc.args[0]
            if error.code() != KafkaError.TOPIC_ALREADY_EXISTS:
                raise TopicSyncRefused(f"the target refused creating topic {HEARTBEATS_TOPIC}: {error.name()}: "
                                       f"{error.str()}") from None

    def _heartbeat(self, _: Replicator) -> None:
        if self._heartbeats is None:
            return
        beat = Heartbeat(self.flow.source.alias, self.flow.target.alias, int(time.time() * 1000))
        self._heartbeats.produce(HEARTBEATS_TOPIC, key=beat.key(), value=beat.value(), partition=0)
        self._heartbeats.poll(0)
