"""Offset translation's IO: offset syncs written, read back, turned into MM2 checkpoints, and (optionally)
committed to the groups on the target; `translate_offsets` for a consumer failing over.

The rules are `client_epochs.mirror.offsets` (sans IO, with the proof sketch); this module only moves
bytes. `OffsetTranslation` is what the Replicator holds when `MirrorOptions.offsets` is set:

- `copied()` from the target producer's delivery callback (the target acknowledged the copy and says
  its offset): the sync rule decides, and a sync goes to `mm2-offset-syncs.<target>.internal` on the
  source (created with one partition, cleanup.policy=delete and the options' retention if missing);
- `tick()` from the replicator's loop: the high marks, and every emit.checkpoints.interval.seconds a
  checkpoint round (read the syncs topic to its end; ListGroups on the source, filtered; each group's
  committed offsets with the SDK's OffsetFetch; translate; write MM2 Checkpoints to
  `<source>.checkpoints.internal` on the target, created compacted with one partition as MM2 does);
  and every sync.group.offsets.interval.seconds, when enabled, the translated offsets committed to
  each group that is Empty or Dead on the target (DescribeGroups), never moving a commit backwards,
  with KIP-232 internal metadata naming the target topic's epochs and id.

Failures of a round are logged and the round is tried again at the next interval, as MM2 does: they
never stop the copy. The rounds run on the replicator's loop thread (each call bounded by
`read_timeout_s`), so copying pauses while one runs.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

import confluent_kafka
from confluent_kafka import ConsumerGroupTopicPartitions, KafkaError, KafkaException, Producer
from confluent_kafka.admin import AdminClient, NewTopic

from client_epochs.metadata_client import MetadataClient
from client_epochs.mirror.offsets import (
    SYNC_STATES,
    Committed,
    GroupFilter,
    OffsetTranslationOptions,
    SyncHistory,
    SyncRule,
    apply_syncs,
    checkpoints_for_group,
    checkpoints_topic,
    first_copy,
    latest_checkpoints,
    offset_syncs_topic,
    offsets_to_sync,
    refine,
    target_commit_metadata,
)
from client_epochs.mirror.topics import ReplicatorError
from client_epochs.model import TopicPartition
from client_epochs.offset_fetch import OffsetFetcher
from quorum.wire.internal_metadata import InternalMetadata
from quorum.wire.mm2_records import Checkpoint, MM2RecordError, OffsetSync
from quorum.wire.sasl_client import ClientSecurity

log = logging.getLogger(__name__)

__all__ = ["OffsetTranslation", "client_settings", "read_checkpoints", "translate_offsets"]

_CLIENT_ID = "client-epochs-mirror-offsets"
_INTERNAL_READER_GROUP = "client-epochs-mirror-internal-reader"
"""group.id of the assign-only readers of the internal topics (they never join or commit)."""


def client_settings(config: Mapping[str, Any]) -> dict[str, Any]:
    """Of a user's librdkafka settings, those every helper client needs too: security and logging."""
    return {k: v for k, v in config.items()
            if k.startswith(("security.", "sasl.", "ssl.")) or k in ("log_level", "debug", "oauth_cb")}


class OffsetTranslation:
    """Offset syncs, checkpoints and group offset sync for one Replicator (module docstring)."""

    def __init__(self, source: str, target: str, options: OffsetTranslationOptions, own_group: str,
                 partitions: Mapping[str, int], source_config: Mapping[str, Any] | None = None,
                 target_config: Mapping[str, Any] | None = None,
                 clock: Callable[[], float] = time.monotonic) -> None:
        options.check()
        self.options = options
        self.source = source
        self.target = target
        self.partitions = [TopicPartition(t, p) for t, n in partitions.items() for p in range(n)]
        self._source_config = client_settings(source_config or {})
        self._target_config = client_settings(target_config or {})
        self._clock = clock
        self._filter = GroupFilter(options.groups, options.groups_exclude, own=[own_group])
        self.syncs_topic = offset_syncs_topic(options.target_alias)
        self.checkpoints_topic = checkpoints_topic(options.source_alias)
        self._rules: dict[TopicPartition, SyncRule] = {}
        self.histories: dict[TopicPartition, SyncHistory] = {}
        self.last: dict[str, dict[TopicPartition, Checkpoint]] = {}
        """The checkpoints written (or found in the topic at start), by group and target partition."""
        self.syncs_sent = 0
        self.checkpoints_sent = 0
        self.groups_synced: dict[str, dict[TopicPartition, int]] = {}
        self._sync_producer: Producer | None = None
        self._checkpoint_producer: Producer | None = None
        self._sync_reader: confluent_kafka.Consumer | None = None
        self._source_admin: AdminClient | None = None
        self._target_admin: AdminClient | None = None
        self._source_offsets: OffsetFetcher | None = None
        self._target_offsets: OffsetFetcher | None = None
        self._target_metadata: MetadataClient | None = None
        self._target_reader: confluent_kafka.Consumer | None = None
        self._refined: dict[tuple[TopicPartition, int, int], int] = {}
        """Refinements already read: (target partition, committed, conservative offset) -> exact offset."""
        now = clock()
        self._next_high_marks = now + options.offset_syncs_interval_s
        self._next_checkpoints = now + options.emit_checkpoints_interval_s
        self._next_group_sync = now + options.sync_group_offsets_interval_s

    def set_partitions(self, partitions: Mapping[str, int]) -> None:
        """The source partitions whose group commits are checkpointed from now on (a flow found more)."""
        self.partitions = [TopicPartition(t, p) for t, n in partitions.items() for p in range(n)]

    # --- life -------------------------------------------------------------------------------------------

    def start(self) -> None:
        """The internal topics created if missing, the clients opened, the checkpoints written before read."""
        timeout = self.options.read_timeout_s
        self._source_admin = AdminClient({"bootstrap.servers": self.source, **self._source_config})
        if self.options.emit_offset_syncs_enabled:
            _ensure_topic(self._source_admin, self.syncs_topic, {
                "cleanup.policy": "delete", "retention.ms": str(self.options.offset_syncs_retention_ms)},
                self.options.offset_syncs_topic_replication_factor, timeout)
            self._sync_producer = Producer({"bootstrap.servers": self.source, "client.id": _CLIENT_ID,
                                            "acks": "all", "enable.idempotence": True, "linger.ms": 5,
                                            **self._source_config})
        if not self.options.emit_checkpoints_enabled:
            return
        self._target_admin = AdminClient({"bootstrap.servers": self.target, **self._target_config})
        _ensure_topic(self._target_admin, self.checkpoints_topic, {"cleanup.policy": "compact"},
                      self.options.checkpoints_topic_replication_factor, timeout)
        self._checkpoint_producer = Producer({"bootstrap.servers": self.target, "client.id": _CLIENT_ID,
                                              "acks": "all", "enable.idempotence": True, **self._target_config})
        source_security = ClientSecurity.of_client_properties(self._source_config)
        target_security = ClientSecurity.of_client_properties(self._target_config)
        self._source_offsets = OffsetFetcher(self.source, client_id=_CLIENT_ID, security=source_security)
        self._target_offsets = OffsetFetcher(self.target, client_id=_CLIENT_ID, security=target_security)
        self._target_metadata = MetadataClient(self.target, client_id=_CLIENT_ID, security=target_security)
        for checkpoint in read_checkpoints(self.target, self.options.source_alias, timeout, self._target_config):
            self.last.setdefault(checkpoint.group, {})[
                TopicPartition(checkpoint.topic, checkpoint.partition)] = checkpoint

    def close(self) -> None:
        """The last acknowledged copies synced, the syncs and checkpoints flushed, the clients closed; never
        raises (a sync not written only makes translation coarser)."""
        try:
            self._high_marks(list(self._rules))
            for producer, what in ((self._sync_producer, "offset syncs"), (self._checkpoint_producer, "checkpoints")):
                if producer is not None and producer.flush(self.options.read_timeout_s):
                    log.warning("%s still unwritten at close", what)
        except (KafkaException, BufferError) as exc:
            log.warning("offset syncs at close: %s", exc)
        finally:
            for reader in (self._sync_reader, self._target_reader):
                if reader is not None:
                    reader.close()
            for client in (self._source_offsets, self._target_offsets, self._target_metadata):
                if client is not None:
                    client.close()

    # --- from the replicator ----------------------------------------------------------------------------

    def assigned(self, partitions: Iterable[TopicPartition]) -> None:
        """New assignment: each partition's first acknowledged copy gets a sync."""
        for tp in partitions:
            self._rules[tp] = SyncRule(self.options.offset_lag_max)

    def revoked(self, partitions: Iterable[TopicPartition]) -> None:
        """Partitions handed over (after the replicator flushed its copies): their last copies synced and
        written before the next owner starts."""
        keys = [tp for tp in partitions if tp in self._rules]
        self._high_marks(keys)
        if self._sync_producer is not None:
            self._sync_producer.flush(self.options.read_timeout_s)
        self.dropped(keys)

    def dropped(self, partitions: Iterable[TopicPartition]) -> None:
        """Partitions no longer owned (revoked or lost): later acknowledgements write no sync."""
        for tp in partitions:
            self._rules.pop(tp, None)

    def copied(self, tp: TopicPartition, upstream: int, downstream: int) -> None:
        """The target acknowledged the copy of source `tp` offset `upstream` at target offset `downstream`."""
        rule = self._rules.get(tp)
        if rule is not None and rule.copied(upstream, downstream):
            self._send_sync(OffsetSync(tp.topic, tp.partition, upstream, downstream))

    def tick(self, now: float | None = None) -> None:
        """The periodic work that is due: high marks, a checkpoint round, a group offset sync."""
        now = self._clock() if now is None else now
        if self._sync_producer is not None:
            self._sync_producer.poll(0)
        if now >= self._next_high_marks:
            self._high_marks(list(self._rules))
            self._next_high_marks = now + self.options.offset_syncs_interval_s
        if not self.options.emit_checkpoints_enabled:
            return
        if now >= self._next_checkpoints:
            self._guarded("checkpoint round", self.emit_checkpoints)
            self._next_checkpoints = self._clock() + self.options.emit_checkpoints_interval_s
        if self.options.sync_group_offsets_enabled and now >= self._next_group_sync:
            self._guarded("group offset sync", self.sync_group_offsets)
            self._next_group_sync = self._clock() + self.options.sync_group_offsets_interval_s

    # --- syncs ------------------------------------------------------------------------------------------

    def _high_marks(self, partitions: Sequence[TopicPartition]) -> None:
        for tp in partitions:
            rule = self._rules.get(tp)
            mark = rule.high_mark() if rule is not None else None
            if mark is not None:
                self._send_sync(OffsetSync(tp.topic, tp.partition, *mark))

    def _send_sync(self, sync: OffsetSync) -> None:
        producer = self._sync_producer
        if producer is None:
            return
        while True:
            try:
                producer.produce(self.syncs_topic, key=sync.key(), value=sync.value(), partition=0,
                                 on_delivery=_log_failure(f"offset sync {sync}"))
                self.syncs_sent += 1
                return
            except BufferError:
                producer.poll(0.1)

    def read_syncs(self) -> None:
        """The offset syncs topic read from where the last read stopped to its current end."""
        if self._sync_reader is None:
            self._sync_reader = confluent_kafka.Consumer({
                "bootstrap.servers": self.source, "group.id": _INTERNAL_READER_GROUP, "enable.auto.commit": False,
                # syncs deleted by retention under the reader's position: go on from the oldest left
                "enable.partition.eof": False, "auto.offset.reset": "earliest", **self._source_config})
            self._sync_reader.assign([confluent_kafka.TopicPartition(self.syncs_topic, 0,
                                                                     confluent_kafka.OFFSET_BEGINNING)])
        records = _read_to_end(self._sync_reader, self.syncs_topic, self.options.read_timeout_s)
        apply_syncs(self.histories, _decoded(records, OffsetSync.decode, self.syncs_topic))

    # --- checkpoints ------------------------------------------------------------------------------------

    def groups(self) -> list[str]:
        """The source's consumer groups that the filter lets through (ListGroups)."""
        assert self._source_admin is not None
        listed = self._source_admin.list_consumer_groups(request_timeout=self.options.read_timeout_s).result(
            timeout=self.options.read_timeout_s)
        for error in listed.errors:
            log.warning("ListGroups on the source: %s", error)
        return sorted(g.group_id for g in listed.valid if self._filter(g.group_id))

    def emit_checkpoints(self) -> dict[str, dict[TopicPartition, Checkpoint]]:
        """One checkpoint round; returns the checkpoints written, by group."""
        assert self._source_offsets is not None and self._checkpoint_producer is not None
        self.read_syncs()
        written: dict[str, dict[TopicPartition, Checkpoint]] = {}
        for group in self.groups():
            fetched = self._source_offsets.fetch(group, self.partitions, timeout=self.options.read_timeout_s)
            committed = {tp: Committed(c.offset, c.metadata) for tp, c in fetched.items() if c.offset >= 0}
            new = checkpoints_for_group(group, committed, self.histories, self.options.target_topic,
                                        self.last.get(group, {}),
                                        self._exact if self.options.exact_with_provenance else None)
            if not new:
                continue
            failures: list[str] = []
            for checkpoint in new.values():
                self._checkpoint_producer.produce(self.checkpoints_topic, key=checkpoint.key(),
                                                  value=checkpoint.value(), partition=0,
                                                  on_delivery=_collect_failure(failures))
            if self._checkpoint_producer.flush(self.options.read_timeout_s) or failures:
                raise ReplicatorError(f"checkpoints of group {group} not written: "
                                      f"{failures[0] if failures else 'timed out'}")
            self.last.setdefault(group, {}).update(new)
            self.checkpoints_sent += len(new)
            written[group] = new
            log.info("checkpoints of group %s: %s", group, ", ".join(
                f"{c.topic}-{c.partition} {c.upstream}->{c.downstream}" for c in new.values()))
        return written

    def _exact(self, target: TopicPartition, source: TopicPartition, committed: int, translated: int) -> int:
        """`translated` refined from the target's provenance headers (offsets.refine); itself when the
        read fails. Reads at most offset.lag.max records; remembered, since it cannot change."""
        key = (target, committed, translated)
        known = self._refined.get(key)
        if known is not None:
            return known
        try:
            exact, final = self._read_forward(target, source, committed, translated)
        except (KafkaException, ReplicatorError) as exc:
            log.info("%s at %d not refined from provenance: %s", target, translated, exc)
            return translated
        if final:
            if len(self._refined) > 100_000:
                self._refined.clear()
            self._refined[key] = exact
        return exact

    def _read_forward(self, target: TopicPartition, source: TopicPartition, committed: int, translated: int
                      ) -> tuple[int, bool]:
        """(refined offset, whether it is final: found, or not findable within the bound)."""
        if self._target_reader is None:
            self._target_reader = confluent_kafka.Consumer({
                "bootstrap.servers": self.target, "group.id": _INTERNAL_READER_GROUP, "enable.auto.commit": False,
                "enable.partition.eof": False, "auto.offset.reset": "earliest", **self._target_config})
        reader = self._target_reader
        partition = confluent_kafka.TopicPartition(target.topic, target.partition)
        timeout = self.options.read_timeout_s
        _, end = reader.get_watermark_offsets(partition, timeout=timeout)
        if translated >= end:
            return translated, False
        reader.assign([confluent_kafka.TopicPartition(target.topic, target.partition, translated)])
        limit = self.options.offset_lag_max
        records: list[tuple[int, Any]] = []
        deadline = time.monotonic() + timeout
        try:
            while len(records) < limit:
                if reader.position([partition])[0].offset >= end:
                    break
                if time.monotonic() >= deadline:
                    raise ReplicatorError(f"could not read {target} from {translated} within {timeout:g} s")
                batch = [(m.offset(), m.headers()) for m in reader.consume(limit - len(records), 0.2)
                         if m.error() is None and m.offset() < end]
                records.extend(batch)
                if first_copy(batch, source, committed) is not None:
                    break
        finally:
            reader.unassign()
        exact = refine(records, source, committed, translated, end)
        return exact, exact != translated or len(records) >= limit

    # --- group offset sync ------------------------------------------------------------------------------

    def sync_group_offsets(self) -> dict[str, dict[TopicPartition, int]]:
        """The checkpointed offsets committed to the groups that are Empty or Dead on the target; returns
        what was committed, by group."""
        assert self._target_admin is not None and self._target_offsets is not None
        groups = sorted(g for g, cps in self.last.items() if cps)
        if not groups:
            return {}
        timeout = self.options.read_timeout_s
        states = {}
        for group, future in self._target_admin.describe_consumer_groups(groups, request_timeout=timeout).items():
            try:
                states[group] = future.result(timeout=timeout).state.name
            except KafkaException as exc:
                log.warning("DescribeGroups of %s on the target: %s", group, exc.args[0])
        done: dict[str, dict[TopicPartition, int]] = {}
        for group in groups:
            if states.get(group) not in SYNC_STATES:
                log.debug("group %s is %s on the target: its offsets are not synced", group, states.get(group))
                continue
            checkpoints = self.last[group]
            current = self._target_offsets.fetch(group, checkpoints, timeout=timeout)
            wanted = offsets_to_sync(checkpoints, {tp: c.offset for tp, c in current.items()})
            if not wanted:
                continue
            epochs = self._target_epochs(wanted)
            offsets = []
            for tp, offset in sorted(wanted.items()):
                internal = epochs.get(tp)
                extra = {"leader_epoch": internal.leader_epoch} if internal is not None and \
                    internal.leader_epoch >= 0 else {}
                offsets.append(confluent_kafka.TopicPartition(
                    tp.topic, tp.partition, offset, metadata=target_commit_metadata(checkpoints[tp], internal),
                    **extra))
            future = self._target_admin.alter_consumer_group_offsets(
                [ConsumerGroupTopicPartitions(group, offsets)], request_timeout=timeout)[group]
            try:
                result = future.result(timeout=timeout)
            except KafkaException as exc:
                error = exc.args[0]
                if error.code() == KafkaError.UNKNOWN_MEMBER_ID:
                    log.warning("offsets of group %s not synced: it has members on the target now", group)
                else:
                    log.warning("offsets of group %s not synced: %s", group, error)
                continue
            committed = {TopicPartition(p.topic, p.partition): p.offset
                         for p in result.topic_partitions if p.error is None}
            done[group] = committed
            self.groups_synced.setdefault(group, {}).update(committed)
            log.info("synced offsets of group %s on the target: %s", group,
                     ", ".join(f"{tp}@{o}" for tp, o in sorted(committed.items())))
        return done

    def _target_epochs(self, partitions: Iterable[TopicPartition]) -> dict[TopicPartition, InternalMetadata]:
        assert self._target_metadata is not None
        wanted = list(partitions)
        current = self._target_metadata.refresh_until_current({tp.topic for tp in wanted},
                                                             timeout=self.options.read_timeout_s)
        out = {}
        for tp in wanted:
            meta = current.partitions.get(tp)
            if meta is not None:
                out[tp] = InternalMetadata(meta.topic_epoch, meta.leader_epoch, meta.topic_id)
        return out

    def _guarded(self, what: str, step: Callable[[], object]) -> None:
        try:
            step()
        except (KafkaException, ReplicatorError, OSError, ValueError) as exc:
            log.warning("%s failed (tried again at the next interval): %s", what, exc)


# --- helpers, and translate_offsets ------------------------------------------------------------------------


def translate_offsets(target_bootstrap: str, source_alias: str, group: str, timeout_s: float = 30.0,
                      config: Mapping[str, Any] | None = None) -> dict[TopicPartition, int]:
    """MM2's RemoteClusterUtils.translateOffsets: `group`'s offsets on the target, by target topic
    partition, from the newest checkpoints in `<source_alias>.checkpoints.internal` on the target.

    A consumer of `group` that starts from these reads every record it had not read on the source
    (and possibly some it had: the window, client_epochs.mirror.offsets). No checkpoint: {}.
    `config`: librdkafka settings for the reader (security, logging).
    """
    found = latest_checkpoints(read_checkpoints(target_bootstrap, source_alias, timeout_s, config), group)
    return {tp: checkpoint.downstream for tp, checkpoint in found.items()}


def read_checkpoints(target_bootstrap: str, source_alias: str, timeout_s: float = 30.0,
                     config: Mapping[str, Any] | None = None) -> list[Checkpoint]:
    """Every checkpoint in the target's checkpoints topic for `source_alias`, in order ([] without the topic)."""
    topic = checkpoints_topic(source_alias)
    reader = confluent_kafka.Consumer({"bootstrap.servers": target_bootstrap, "group.id": _INTERNAL_READER_GROUP,
                                       "enable.auto.commit": False, "enable.partition.eof": False,
                                       "auto.offset.reset": "earliest",
                                       **client_settings(config or {})})
    try:
        listed = reader.list_topics(timeout=timeout_s).topics.get(topic)  # all: never an auto-creation
        if listed is None or listed.error is not None or not listed.partitions:
            return []
        reader.assign([confluent_kafka.TopicPartition(topic, 0, confluent_kafka.OFFSET_BEGINNING)])
        return list(_decoded(_read_to_end(reader, topic, timeout_s), Checkpoint.decode, topic))
    finally:
        reader.close()


def _read_to_end(reader: confluent_kafka.Consumer, topic: str, timeout_s: float
                 ) -> list[tuple[bytes | None, bytes | None]]:
    """(key, value) of the records of partition 0 of `topic` from the reader's position to the current end."""
    partition = confluent_kafka.TopicPartition(topic, 0)
    low, end = reader.get_watermark_offsets(partition, timeout=timeout_s)
    deadline = time.monotonic() + timeout_s
    records: list[tuple[bytes | None, bytes | None]] = []
    while True:
        position = reader.position([partition])[0].offset  # negative until the first fetch
        if low >= end or position >= end:
            return records
        if time.monotonic() >= deadline:
            raise ReplicatorError(f"could not read {topic} to its end (offset {end}) within {timeout_s:g} s; "
                                  f"at {position}")
        for message in reader.consume(500, 0.2):
            if message.error() is not None:
                log.info("reading %s: %s", topic, message.error())
                continue
            records.append((message.key(), message.value()))


def _decoded(records: Iterable[tuple[bytes | None, bytes | None]], decode: Callable[[Any, Any], Any],
             topic: str) -> Iterable[Any]:
    for key, value in records:
        try:
            yield decode(key, value)
        except MM2RecordError as exc:  # as MM2: a record that does not decode is skipped, and said
            log.info("skipped a record of %s: %s", topic, exc)


def _ensure_topic(admin: AdminClient, topic: str, config: dict[str, str], replication_factor: int | None,
                  timeout: float) -> None:
    listed = admin.list_topics(timeout=timeout).topics.get(topic)  # all topics: never an auto-creation
    if listed is not None and listed.error is None and listed.partitions:
        return
    if replication_factor is not None:  # capped at the cluster's brokers, as the flows' other topics
        replication_factor = max(1, min(replication_factor, len(admin.list_topics(timeout=timeout).brokers)))
    new = NewTopic(topic, 1, replication_factor if replication_factor is not None else -1, config=config)
    try:
        admin.create_topics([new], request_timeout=timeout)[topic].result(timeout=timeout)
        log.info("created %s (%s)", topic, ", ".join(f"{k}={v}" for k, v in config.items()))
    except KafkaException as exc:
        if exc.args[0].code() != KafkaError.TOPIC_ALREADY_EXISTS:
            raise ReplicatorError(f"could not create {topic}: {exc.args[0].str()}") from None
    deadline = time.monotonic() + timeout
    while True:  # the producers and readers need it in their metadata
        listed = admin.list_topics(timeout=timeout).topics.get(topic)
        if listed is not None and listed.error is None and listed.partitions:
            return
        if time.monotonic() >= deadline:
            raise ReplicatorError(f"{topic} is not in the cluster's metadata {timeout:g} s after its creation")
        time.sleep(0.2)


def _log_failure(what: str) -> Callable[[KafkaError | None, Any], None]:
    def delivered(error: KafkaError | None, _: Any) -> None:
        if error is not None:
            log.warning("%s not written: %s", what, error.str())
    return delivered


def _collect_failure(failures: list[str]) -> Callable[[KafkaError | None, Any], None]:
    def delivered(error: KafkaError | None, _: Any) -> None:
        if error is not None:
            failures.append(error.str())
    return delivered
