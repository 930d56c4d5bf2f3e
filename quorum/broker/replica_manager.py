"""The partitions this broker hosts, kept in step with the metadata image.

`ReplicaManager.apply_image` is the broker's reaction to each new metadata image (KIP-631's
image-driven brokers, as Kafka's ReplicaManager.applyDelta): it opens or creates the log of
every partition whose replicas include this broker, marks each leader or follower with the
image's leader epoch and ISR, applies topic config changes, and deletes the logs of partitions
it no longer hosts: topics deleted, re-created under a new topic id, or reassigned away. It looks
only at the topics the image changed (an image shares its unchanged topics with the one before),
and `apply_image_off_loop` opens new logs and closes and renames removed ones in a worker thread,
and removes the renamed directories in the background (`LogDeleter`), so that creating or deleting
topics costs a broker what they change, off its event loop (issue 17); it returns what changed
(`HostedChanges`).

Partition directories are `<log dir>/<topic>-<partition>` with a `partition.metadata` naming
the topic id; new ones go to the log dir holding the fewest partitions, as Kafka places them.
At construction the log dirs are scanned: leftovers of interrupted deletions (`*-delete`) are
removed, and the partition directories found are opened by the first image that assigns them.
That first image also deletes the directories (with a `partition.metadata`, so surely ours) that
it does not assign to this broker: Kafka's stray logs. So only hand `apply_image` an image that
has caught up with the metadata log, never an empty or partial one at start-up.

It is the `PartitionLookup` of the read path and calls `AppendNotifier.appended()` whenever a
partition grows or a high watermark or leadership moves.
"""

from __future__ import annotations

import asyncio
import logging
import shutil
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from quorum.broker.cleaner_metrics import CleanerMetrics
from quorum.broker.log_config import TOPIC_RESOURCE, LogConfig, LogConfigError, config_layers, topic_log_config
from quorum.broker.log_deletion import (
    DELETE_SUFFIX,
    LogDeleter,
    delete_partition_dir,
    remove_renamed,
    rename_for_deletion,
)
from quorum.broker.partition import Partition, partition_dir_name
from quorum.broker.partition_view import AppendNotifier
from quorum.broker.producer_ids import InProcessBlocks, ProducerIdManager
from quorum.broker.remote_tier import TopicIdPartition
from quorum.broker.remote_tier_plugin import RemoteTier
from quorum.image.image import MetadataImage, PartitionInfo, TopicInfo
from quorum.log.cleaner import CleanResult
from quorum.log.errors import CorruptFileError, LogError
from quorum.log.partition_metadata import read_partition_metadata

logger = logging.getLogger(__name__)

#: Kafka's defaults: `log.retention.check.interval.ms`, `producer.id.expiration.ms`, `log.cleaner.backoff.ms`.
DEFAULT_RETENTION_CHECK_INTERVAL_MS = 300_000
DEFAULT_PRODUCER_ID_EXPIRATION_MS = 86_400_000
DEFAULT_CLEANER_BACKOFF_MS = 15_000
METADATA_TOPIC = "__cluster_metadata"


def parse_partition_dir(name: str) -> tuple[str, int] | None:
    """(topic, partition) of a partition directory name, None for anything else."""
    topic, sep, number = name.rpartition("-")
    if not sep or not topic or not number.isdigit() or "." in number:
        return None
    return topic, int(number)


@dataclass(frozen=True, slots=True)
class HostedChanges:
    """What applying an image did to the hosted partitions, for those that act on them next
    (leadership, replica fetchers): `everything` when it looked at every partition."""

    everything: bool
    updated: tuple[Partition, ...]
    """Opened, or given the image's leader, epoch and ISR again (their topic changed)."""
    removed: tuple[Partition, ...]


@dataclass(frozen=True, slots=True)
class _ToOpen:
    topic: TopicInfo
    info: PartitionInfo
    config: LogConfig
    directory: Path
    broker_id: int


@dataclass(frozen=True, slots=True)
class _OpenFailed:
    reason: str
    directory: Path


@dataclass(slots=True)
class _Plan:
    everything: bool
    removed: list[Partition]
    strays: list[Path]
    to_open: list[_ToOpen] = field(default_factory=list)
    updated: list[Partition] = field(default_factory=list)

    def retire(self) -> list[Path]:
        """Close the removed partitions' logs and rename their directories and the strays' for deletion
        (`rename_for_deletion`); returns the renamed directories, to be removed. File I/O on what has
        already left the broker's maps, so it may run in a worker thread; it runs before any log of the
        plan is opened, since a topic re-created under the same name opens the same directory."""
        for partition in self.removed:
            try:
                partition.close()
            except (LogError, OSError) as exc:
                logger.error("%s: closing its log before deleting it failed: %s", partition.name, exc)
        return rename_for_deletion([*(partition.directory for partition in self.removed), *self.strays])


def _open_log(item: _ToOpen) -> Partition | _OpenFailed:
    """Open (or create) one partition's log: file I/O only, touching nothing shared, so it may run
    in a worker thread. A directory left by an earlier topic of the same name is deleted first."""
    directory, topic, index = item.directory, item.topic, item.info.partition
    try:
        if directory.exists():
            try:
                recorded = read_partition_metadata(directory)
            except CorruptFileError as exc:
                raise LogError(f"{exc}; not loading a log of unknown topic id") from None
            if recorded is not None and recorded != topic.topic_id:
                logger.info("%s: belongs to an earlier topic %s (id %s, now %s): deleting it",
                            directory, topic.name, recorded, topic.topic_id)  # fmt: skip
                delete_partition_dir(directory)
        return Partition(topic.name, index, topic.topic_id, directory, item.config, item.broker_id)
    except (LogError, OSError) as exc:
        return _OpenFailed(str(exc), directory)


class ReplicaManager:
    """See the module docstring. Runs on the event loop thread; no method awaits mid-change."""

    def __init__(self, broker_id: int, log_dirs: Sequence[Path | str], properties: Mapping[str, str] | None = None,
                 notifier: AppendNotifier | None = None, remote: RemoteTier | None = None,
                 producer_ids: ProducerIdManager | None = None) -> None:
        """`properties` are the node's (NodeConfig.extra): the broker defaults of topic configs
        (`log.segment.bytes`, `log.retention.ms`, ...), read with Kafka's names and defaults.
        `remote` is the remote tier (KIP-405), told of every partition opened and of every topic
        deleted, whose remote data goes with it. `producer_ids` hands out InitProducerId's ids: a
        node's broker passes one fed by the controller (KIP-730); without it, ids come from this
        process only (`InProcessBlocks`, for brokers without a controller)."""
        if not log_dirs:
            raise ValueError("at least one log dir is needed")
        self.broker_id = broker_id
        self.log_dirs = [Path(d) for d in log_dirs]
        self.properties = dict(properties or {})
        self.notifier = notifier if notifier is not None else AppendNotifier()
        self.producer_ids = producer_ids or ProducerIdManager(broker_id, InProcessBlocks())
        self.image: MetadataImage | None = None
        self._partitions: dict[tuple[str, int], Partition] = {}
        self.cleaner_metrics = CleanerMetrics()
        self._by_id: dict[tuple[uuid.UUID, int], Partition] = {}
        self._hosted: dict[str, set[int]] = {}  # topic name -> the indexes of its partitions hosted here
        #: Partitions the image assigns here that could not be opened, with the reason (answered
        #: KAFKA_STORAGE_ERROR); retried at the next image.
        self.failed: dict[tuple[str, int], str] = {}
        self._on_disk = self._scan_log_dirs()
        self._strays_checked = False
        self._configs: dict[str, tuple[tuple[int, ...], LogConfig]] = {}
        self._deleter = LogDeleter()
        self.remote = remote
        self.on_open: Callable[[Partition], None] | None = None
        """Told of every partition opened, before the image marks it leader or follower
        (replication takes over its high watermark there)."""
        self.on_log_failure: Callable[[Partition, BaseException], None] | None = None
        """Told, from the thread that failed, when a hosted partition's log starts refusing writes
        (a failed fsync, truncation or roll): its log dir failed."""

    @classmethod
    def from_node_config(cls, config: object, notifier: AppendNotifier | None = None,
                         remote: RemoteTier | None = None, producer_ids: ProducerIdManager | None = None,
                         ) -> ReplicaManager:
        """From a `quorum.server.config.NodeConfig`: its node id, `log.dirs` and properties."""
        return cls(config.node_id, config.log_dirs, config.extra, notifier, remote,  # type: ignore[attr-defined]
                   producer_ids)

    # -- PartitionLookup ---------------------------------------------------------------------

    def get(self, topic: str, partition: int) -> Partition | None:
        return self._partitions.get((topic, partition))

    def get_by_id(self, topic_id: uuid.UUID, partition: int) -> Partition | None:
        return self._by_id.get((topic_id, partition))

    def partitions(self) -> list[Partition]:
        return list(self._partitions.values())

    # -- the metadata image ------------------------------------------------------------------

    def apply_image(self, image: MetadataImage) -> HostedChanges:
        """Make the hosted partitions what `image` assigns to this broker; see the module docstring.
        New partition logs are opened here, on the caller's thread."""
        plan = self._plan(image)
        for doomed in plan.retire():
            remove_renamed(doomed)
        return self._finish(image, plan, [_open_log(item) for item in plan.to_open])

    async def apply_image_off_loop(self, image: MetadataImage) -> HostedChanges:
        """`apply_image`, with the file work off the event loop, so that it keeps serving meanwhile: the
        logs of removed partitions are closed and renamed and the new ones opened in a worker thread
        (directories, files and fsyncs: milliseconds each), and the renamed directories are removed by
        the `LogDeleter` afterwards (a topic of 4,099 partitions deleted on the loop stopped a broker
        for 7 s). The maps change on the loop before and after. One call at a time: the caller waits
        for the last."""
        plan = self._plan(image)
        if plan.to_open or plan.removed or plan.strays:
            doomed, opened = await asyncio.to_thread(
                lambda: (plan.retire(), [_open_log(item) for item in plan.to_open]))
            self._deleter.remove(doomed)
        else:
            opened = []
        return self._finish(image, plan, opened)

    def _plan(self, image: MetadataImage) -> _Plan:
        """Remove what `image` no longer assigns here, decide what to open and what to update.

        Only the topics that changed since the last image are looked at (issue 17: a broker's work
        per image follows the change, not the number of topics): an image shares every topic it did
        not change with the one before, so identity tells. Everything is looked at for the first
        image, when the broker-level config layers changed, and for topics whose partitions failed
        to open (they are retried)."""
        previous = self.image
        everything = previous is None or not self._strays_checked or any(
            image.configs.get(key) is not previous.configs.get(key) for key in config_layers("", self.broker_id)[1:])
        if everything:
            names: Iterable[str] = set(image.topics) | set(self._hosted)
        else:
            assert previous is not None
            changed = {name for name, topic in image.topics.items() if previous.topics.get(name) is not topic}
            changed.update(name for name in previous.topics if name not in image.topics)
            if image.configs is not previous.configs:
                changed.update(name for kind, name in image.configs.keys() | previous.configs.keys()
                               if kind == TOPIC_RESOURCE and image.configs.get((kind, name))
                               is not previous.configs.get((kind, name)))  # fmt: skip
            changed.update(topic for topic, _ in self.failed)
            names = changed
        wanted: dict[tuple[str, int], tuple[TopicInfo, PartitionInfo]] = {}
        removed: list[Partition] = []
        for name in names:
            topic = image.topics.get(name)
            if topic is not None:
                for info in topic.partitions:
                    if self.broker_id in info.replicas:
                        wanted[(name, info.partition)] = (topic, info)
            for index in list(self._hosted.get(name, ())):
                partition = self._partitions[(name, index)]
                target = wanted.get((name, index))
                if target is None or target[0].topic_id != partition.topic_id:
                    why = ("deleted or moved away" if target is None
                           else f"re-created with topic id {target[0].topic_id}")
                    logger.info("%s: no longer hosted here (%s): deleting its log", partition.name, why)
                    self._unregister(partition)
                    removed.append(partition)
                    if self.remote is not None and partition.remote is not None and (
                            topic is None or topic.topic_id != partition.topic_id):
                        self.remote.partition_deleted(partition.remote.partition)
        strays = []
        if not self._strays_checked:
            strays = self._strays(wanted, image)
            self._strays_checked = True
        self.failed = {key: reason for key, reason in self.failed.items() if key in wanted}
        plan = _Plan(everything, removed, strays)
        configs: dict[str, LogConfig] = {}
        placed: Counter[Path] = Counter()
        for key, (topic, info) in wanted.items():
            config = configs.get(topic.name)
            if config is None:
                config = configs[topic.name] = self._config_for(image, topic.name)
            partition = self._partitions.get(key)
            if partition is None:
                directory = self._on_disk.pop(key, None)
                if directory is None:
                    parent = self._place(placed)
                    placed[parent] += 1
                    directory = parent / partition_dir_name(topic.name, info.partition)
                plan.to_open.append(_ToOpen(topic, info, config, directory, self.broker_id))
                continue
            if partition.config != config:
                partition.apply_config(config)
            partition.update_state(info.leader, info.leader_epoch, info.isr)
            plan.updated.append(partition)
        return plan

    def _finish(self, image: MetadataImage, plan: _Plan, opened: list[Partition | _OpenFailed]) -> HostedChanges:
        """Take the opened partitions in (or note why they failed), mark them leader or follower."""
        for item, result in zip(plan.to_open, opened, strict=True):
            key = (item.topic.name, item.info.partition)
            if isinstance(result, _OpenFailed):
                logger.error("%s-%d: cannot open its log: %s", item.topic.name, item.info.partition, result.reason)
                self.failed[key] = result.reason
                if result.directory.exists():
                    self._on_disk[key] = result.directory
                continue
            self.failed.pop(key, None)
            if self.remote is not None:
                self.remote.partition_opened(result)
            if self.on_open is not None:
                self.on_open(result)
            self._add(result)
            result.update_state(item.info.leader, item.info.leader_epoch, item.info.isr)
            plan.updated.append(result)
        self.image = image
        self.notifier.appended()
        return HostedChanges(plan.everything, tuple(plan.updated), tuple(plan.removed))

    def _config_for(self, image: MetadataImage, topic: str) -> LogConfig:
        """The topic's log config; resolved again only when one of its layers changed (an image
        shares the config mappings it did not change, so identity tells)."""
        layers = tuple(id(image.configs.get(key)) for key in config_layers(topic, self.broker_id))
        memo = self._configs.get(topic)
        if memo is not None and memo[0] == layers:
            return memo[1]
        config = self._resolve_config(image, topic)
        self._configs[topic] = (layers, config)
        return config

    def _resolve_config(self, image: MetadataImage, topic: str) -> LogConfig:
        try:
            return topic_log_config(image.configs, topic, self.broker_id, self.properties)
        except LogConfigError as exc:
            logger.error("topic %s: %s; using the broker defaults", topic, exc)
            try:
                return topic_log_config({}, topic, self.broker_id, self.properties)
            except LogConfigError as broker_exc:
                logger.error("broker properties: %s; using Kafka's defaults", broker_exc)
                return LogConfig()

    def _add(self, partition: Partition) -> None:
        def failed(_: Path, exc: BaseException) -> None:
            if self.on_log_failure is not None:
                self.on_log_failure(partition, exc)

        partition.log.on_failure = failed
        self._partitions[(partition.topic, partition.partition)] = partition
        self._by_id[(partition.topic_id, partition.partition)] = partition
        self._hosted.setdefault(partition.topic, set()).add(partition.partition)

    def _unregister(self, partition: Partition) -> None:
        """Take a partition out of the maps: from now on no request finds it; its log is closed and
        deleted by the plan (`_Plan.retire`)."""
        del self._partitions[(partition.topic, partition.partition)]
        self._by_id.pop((partition.topic_id, partition.partition), None)
        hosted = self._hosted.get(partition.topic)
        if hosted is not None:
            hosted.discard(partition.partition)
            if not hosted:
                del self._hosted[partition.topic]

    def _place(self, planned: Counter[Path]) -> Path:
        """The log dir with the fewest partitions, counting those `planned` there, for a new one
        (Kafka's default placement)."""
        if len(self.log_dirs) == 1:
            return self.log_dirs[0]
        counts = {directory: planned[directory] for directory in self.log_dirs}
        for partition in self._partitions.values():
            parent = partition.directory.parent
            if parent in counts:
                counts[parent] += 1
        return min(self.log_dirs, key=lambda directory: counts[directory])

    def _scan_log_dirs(self) -> dict[tuple[str, int], Path]:
        found: dict[tuple[str, int], Path] = {}
        for log_dir in self.log_dirs:
            if not log_dir.is_dir():
                continue
            for entry in sorted(log_dir.iterdir()):
                if not entry.is_dir():
                    continue
                if entry.name.endswith(DELETE_SUFFIX):
                    logger.info("%s: finishing an interrupted deletion", entry)
                    shutil.rmtree(entry, ignore_errors=True)
                    continue
                parsed = parse_partition_dir(entry.name)
                if parsed is None or parsed[0] == METADATA_TOPIC:
                    continue
                if parsed in found:
                    raise LogError(f"partition {entry.name} is in two log dirs: {found[parsed]} and {entry}")
                found[parsed] = entry
        return found

    def _strays(self, wanted: Mapping[tuple[str, int], tuple[TopicInfo, PartitionInfo]],
                image: MetadataImage) -> list[Path]:
        """Directories of ours (they have a `partition.metadata`) that the first image does not assign here,
        to be deleted with the plan. A topic deleted (or re-created) while this broker was down also loses
        its remote data, in case no broker hosting it was up to delete it (deleting what is already gone
        costs one LIST)."""
        strays = []
        for key, directory in list(self._on_disk.items()):
            if key in wanted:
                continue
            try:
                recorded = read_partition_metadata(directory)
            except CorruptFileError as exc:
                logger.warning("%s; leaving it alone", exc)
                continue
            if recorded is None:
                continue  # not a partition log of ours: leave it alone
            logger.info("%s: stray log (topic id %s is not assigned to broker %d): deleting it",
                        directory, recorded, self.broker_id)  # fmt: skip
            del self._on_disk[key]
            current = image.topics.get(key[0])
            if self.remote is not None and (current is None or current.topic_id != recorded):
                self.remote.partition_deleted(TopicIdPartition(key[0], recorded, key[1]))
            strays.append(directory)
        return strays

    # -- housekeeping ------------------------------------------------------------------------

    def enforce_retention(self, now_ms: int | None = None) -> int:
        """One retention pass over every partition (and producer id expiry); segments deleted."""
        now_ms = int(time.time() * 1000) if now_ms is None else now_ms
        expiration = int(self.properties.get("producer.id.expiration.ms", DEFAULT_PRODUCER_ID_EXPIRATION_MS))
        deleted = 0
        for partition in list(self._partitions.values()):
            try:
                deleted += partition.delete_old_segments(now_ms)
            except (LogError, OSError) as exc:
                logger.error("%s: retention failed: %s", partition.name, exc)
            partition.producers.expire(now_ms, expiration)
        return deleted

    async def run_retention(self, stop: asyncio.Event) -> None:
        """Enforce retention every `log.retention.check.interval.ms` until `stop` is set."""
        interval = int(self.properties.get("log.retention.check.interval.ms", DEFAULT_RETENTION_CHECK_INTERVAL_MS))
        while not stop.is_set():
            try:
                await asyncio.wait_for(stop.wait(), interval / 1000)
            except TimeoutError:
                self.enforce_retention()

    def clean_logs(self, partitions: Sequence[Partition], now_ms: int | None = None) -> int:
        """One log-cleaner pass over each of `partitions` (Kafka's LogCleaner); segments rewritten.
        A failure is logged and leaves that log as it was; the others are still cleaned."""
        now_ms = int(time.time() * 1000) if now_ms is None else now_ms
        results: list[CleanResult] = []
        failed = 0
        for partition in partitions:
            try:
                result = partition.clean(now_ms)
            except (LogError, OSError) as exc:
                if not partition.log.closed:  # else removed or shut down meanwhile: nothing to say
                    logger.error("%s: log cleaning failed, the log is left as it was: %s", partition.name, exc)
                    failed += 1
                continue
            if result is not None:
                results.append(result)
                if result.segments_rewritten:
                    logger.info("%s", result.describe(partition.name))
        self.cleaner_metrics.round_done(results, failed)
        return sum(result.segments_rewritten for result in results)

    async def run_log_cleaner(self, stop: asyncio.Event) -> None:
        """Clean the compacted partitions every `log.cleaner.backoff.ms` on a thread of their own,
        until `stop` is set; off with `log.cleaner.enable=false`, as in Kafka."""
        if self.properties.get("log.cleaner.enable", "true").strip().lower() == "false":
            return
        backoff_s = int(self.properties.get("log.cleaner.backoff.ms", DEFAULT_CLEANER_BACKOFF_MS)) / 1000
        while not stop.is_set():
            try:
                await asyncio.wait_for(stop.wait(), backoff_s)
            except TimeoutError:
                compacted = [p for p in self._partitions.values() if p.config.compacted]
                if compacted:
                    await asyncio.to_thread(self.clean_logs, compacted)

    async def wait_for_high_watermarks(self, waits: Iterable[tuple[Partition, int]],
                                       timeout_s: float) -> set[Partition]:
        """Wait until each partition's high watermark reaches its offset (acks=all), at most
        `timeout_s`; returns the partitions that did not get there in time."""
        pending = {(partition, offset) for partition, offset in waits}
        deadline = asyncio.get_running_loop().time() + timeout_s
        while True:
            pending = {(p, o) for p, o in pending if p.high_watermark < o}
            remaining = deadline - asyncio.get_running_loop().time()
            if not pending or remaining <= 0 or not any(p.is_leader for p, _ in pending):
                return {p for p, _ in pending}
            await self.notifier.wait(remaining)

    def close(self) -> None:
        """Close every log; deletions still queued are left for the next start (`-delete` directories)."""
        self._deleter.close()
        for partition in self._partitions.values():
            try:
                partition.close()
            except (LogError, OSError) as exc:
                logger.error("%s: close failed: %s", partition.name, exc)
        self._partitions.clear()
        self._by_id.clear()
        self._hosted.clear()
