"""The group coordinator on a broker: `__consumer_offsets` partitions as its durable log.

Kafka keeps committed offsets and group metadata as records of the `__consumer_offsets` topic,
and the coordinator of a group is the leader of the group's partition. This module maps the
coordinator's `OffsetsLog` onto the broker's own partition logs (an append completes once the
high watermark covers it, as Kafka's appends with acks=all do), follows the image to load the
partitions this broker comes to lead and unload those it loses, tells the coordinator which topics
went away (their offsets are deleted with them, as Kafka's metadata publisher calls the coordinator's
onPartitionsDeleted), and asks the controller for the topic the first time a group needs a
coordinator (as Kafka's brokers create it).
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from collections.abc import AsyncIterator, Callable, Mapping, Sequence

from quorum.broker.groups.config import OFFSETS_TOPIC, GroupConfig
from quorum.broker.groups.consumer.assignors import TopicInfo, assignors_from_config
from quorum.broker.groups.coordinator import GroupCoordinator
from quorum.broker.groups.find_coordinator import CoordinatorNode, coordinator_from_image
from quorum.broker.groups.handlers import register_group_apis
from quorum.broker.groups.offsets_log import OffsetsLogError, Record
from quorum.broker.groups.shell import GroupCoordinatorShell
from quorum.broker.partition import AppendError
from quorum.broker.replica_manager import ReplicaManager
from quorum.broker.topic_creation import TopicCreator
from quorum.image.image import MetadataImage
from quorum.image.image import TopicInfo as TopicImage
from quorum.net.dispatch import Dispatcher
from quorum.wire import records as wire_records
from quorum.wire.errors import ErrorCode

log = logging.getLogger(__name__)

APPEND_TIMEOUT_S = 30.0
REPLAY_CHUNK_BYTES = 1 << 20


def group_config(props: Mapping[str, str]) -> GroupConfig:
    """The coordinator's settings from a node's properties, Kafka's names and defaults."""
    defaults = GroupConfig()
    values = {}
    for field in ("offsets_topic_num_partitions", "group_initial_rebalance_delay_ms", "group_min_session_timeout_ms",
                  "group_max_session_timeout_ms", "group_max_size", "offset_metadata_max_bytes",
                  "group_consumer_session_timeout_ms", "group_consumer_min_session_timeout_ms",
                  "group_consumer_max_session_timeout_ms", "group_consumer_heartbeat_interval_ms",
                  "group_consumer_min_heartbeat_interval_ms", "group_consumer_max_heartbeat_interval_ms",
                  "group_consumer_max_size"):
        key = field.replace("_", ".")
        raw = props.get(key)
        try:
            values[field] = getattr(defaults, field) if raw is None else int(raw)
        except ValueError:
            raise ValueError(f"{key} must be a whole number, not {raw!r}") from None
    kip232 = props.get("quorum.kip232.enable", "true").strip().lower()
    if kip232 not in ("true", "false"):
        raise ValueError(f"quorum.kip232.enable must be true or false, not {kip232!r}")
    assignors = assignors_from_config(props.get("group.consumer.assignors", "uniform,range"))
    return GroupConfig(**values, group_consumer_assignors=assignors, kip232=kip232 == "true")


class PartitionOffsetsLog:
    """`OffsetsLog` over the broker's `__consumer_offsets` partition logs."""

    def __init__(self, replicas: ReplicaManager, timeout_s: float = APPEND_TIMEOUT_S) -> None:
        self.replicas = replicas
        self.timeout_s = timeout_s

    async def append(self, partition: int, records: Sequence[Record]) -> int:
        hosted = self.replicas.get(OFFSETS_TOPIC, partition)
        if hosted is None or not hosted.is_leader:
            raise OffsetsLogError(ErrorCode.NOT_COORDINATOR, f"{OFFSETS_TOPIC}-{partition} is not led here")
        now = int(time.time() * 1000)
        batch = wire_records.build_batch([wire_records.Record(i, now, key, value)
                                          for i, (key, value) in enumerate(records)])
        try:
            result = hosted.append_as_leader(batch, now)
        except AppendError as exc:
            raise OffsetsLogError(ErrorCode.NOT_COORDINATOR if exc.code == ErrorCode.NOT_LEADER_OR_FOLLOWER
                                  else exc.code, exc.message) from None
        self.replicas.notifier.appended()
        late = await self.replicas.wait_for_high_watermarks([(hosted, result.last_offset + 1)], self.timeout_s)
        if late:
            raise OffsetsLogError(ErrorCode.REQUEST_TIMED_OUT, f"{hosted.name}: not committed in time")
        return result.base_offset

    async def replay(self, partition: int) -> AsyncIterator[Sequence[Record]]:
        hosted = self.replicas.get(OFFSETS_TOPIC, partition)
        if hosted is None:
            return
        offset, end = hosted.log_start_offset, hosted.log_end_offset
        while offset < end:
            data = hosted.read(offset, REPLAY_CHUNK_BYTES, end)
            if not data:
                break
            chunk: list[Record] = []
            for batch in wire_records.iter_batches(data):
                if not batch.is_control:
                    chunk.extend((record.key or b"", record.value) for record in batch.records()
                                 if record.offset >= offset)
                offset = batch.next_offset
            yield chunk


class GroupCoordination:
    """The coordinator, its shell and handlers, following the image's `__consumer_offsets` leaders."""

    def __init__(self, broker_id: int, replicas: ReplicaManager, topics: TopicCreator,
                 config: GroupConfig, dispatcher: Dispatcher, image: Callable[[], MetadataImage],
                 served_image: Callable[[], MetadataImage] | None = None) -> None:
        """`image` gives the broker's newest metadata image (what commits are checked against);
        `served_image` the one it answers Metadata from, once applied (default: `image`), which
        FindCoordinator answers from too, as Kafka answers both from its metadata cache: a broker names
        a coordinator only once it has applied the image naming it, by which time the coordinator's
        own broker has as a rule replayed it and counts the partition as loading (`metadata_replayed`)."""
        self.broker_id = broker_id
        self.replicas = replicas
        self.topics = topics
        self._image = image
        self._served_image = served_image or image
        self.shell = GroupCoordinatorShell(GroupCoordinator(config), PartitionOffsetsLog(replicas),
                                           locate=self._locate, partition_exists=self._partition_exists,
                                           current_topic_id=self._topic_id)
        register_group_apis(dispatcher, self.shell)
        self._led: set[int] = set()
        self._topic_ids: Mapping[uuid.UUID, TopicImage] | None = None
        """The topic ids of the image last applied (None before the first): deletions are ids that left it."""
        self._topics: object = None
        """The image's topics last given to the coordinator for KIP-848 assignments."""
        self._creating: asyncio.Task[int] | None = None
        self._named_in: object = None
        """The `__consumer_offsets` topic of the image `metadata_replayed` last looked at."""

    def start(self) -> None:
        self.shell.start()

    async def close(self) -> None:
        await self.shell.close()

    def _locate(self, partition: int) -> CoordinatorNode | None:
        """FindCoordinator: the leader of the group's partition in the image Metadata is answered from;
        the topic is created on first need. The newest image's elections are taken first (replay may
        have moved on in a worker thread since `metadata_replayed` was last called)."""
        newest = self._image()
        self.metadata_replayed(newest)
        if OFFSETS_TOPIC not in newest.topics and (self._creating is None or self._creating.done()):
            self._creating = asyncio.get_running_loop().create_task(self.topics.create_offsets_topic())
        return coordinator_from_image(self._served_image(), partition)

    def _partition_exists(self, topic: str, partition: int) -> bool:
        """Kafka's OffsetCommit check: a commit to a partition the broker's metadata lacks is refused."""
        info = self._image().topics.get(topic)
        return info is not None and 0 <= partition < len(info.partitions)

    def _topic_id(self, topic: str) -> uuid.UUID | None:
        info = self._image().topics.get(topic)
        return None if info is None else info.topic_id

    def metadata_replayed(self, image: MetadataImage) -> None:
        """The broker replayed more metadata: the `__consumer_offsets` partitions `image` names this
        broker the leader of are its coordinator's from now on (loading until the image is applied
        and they are loaded; Kafka's onElection moment), so a client sent here by FindCoordinator is
        told COORDINATOR_LOAD_IN_PROGRESS meanwhile, not NOT_COORDINATOR."""
        topic = image.topics.get(OFFSETS_TOPIC)
        if topic is self._named_in:
            return
        self._named_in = topic
        led = () if topic is None else [p.partition for p in topic.partitions if p.leader == self.broker_id]
        self.shell.elected(led)

    def image_changed(self, image: MetadataImage) -> None:
        """Tell the coordinator about deleted topics; load the partitions this broker now leads (their
        partition logs are open: the replica manager saw this image first), unload those it no longer
        leads. A deletion is a topic id that left the image, whether the image got there record by
        record or from a snapshot; one that happened while this broker was down is found when the
        partitions load (the coordinator checks loaded offsets against the image)."""
        if self._topic_ids is not None and image.topics_by_id is not self._topic_ids:
            gone = {topic_id: info.name for topic_id, info in self._topic_ids.items()
                    if topic_id not in image.topics_by_id}
            if gone:
                log.info("%d topic(s) deleted: their committed offsets are deleted too", len(gone))
                self.shell.topics_deleted(gone)
        if image.topics is not self._topics:
            self._topics = image.topics
            self.shell.core.set_topics({name: TopicInfo(info.topic_id, len(info.partitions))
                                        for name, info in image.topics.items()})
        self._topic_ids = image.topics_by_id
        topic = image.topics.get(OFFSETS_TOPIC)
        leading = set()
        if topic is not None:
            leading = {p.partition for p in topic.partitions if p.leader == self.broker_id
                       and self.replicas.get(OFFSETS_TOPIC, p.partition) is not None}
        for partition in sorted(self._led - leading):
            log.info("%s-%d: no longer its coordinator", OFFSETS_TOPIC, partition)
            self.shell.resign(partition)
        for partition in sorted(leading - self._led):
            asyncio.get_running_loop().create_task(self._load(partition))
        self._led = leading

    async def _load(self, partition: int) -> None:
        loaded = await self.shell.become_leader(partition)
        log.info("%s-%d: %s", OFFSETS_TOPIC, partition,
                 "coordinator loaded" if loaded else "coordinator not loaded (resigned or corrupt)")
