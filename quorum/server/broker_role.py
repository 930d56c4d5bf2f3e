"""The broker role of a node: what real clients talk to.

It composes the broker's parts around the node's replayed metadata image: Metadata answers (with
topics auto-created as `auto.create.topics.enable` allows), admin requests forwarded to the active
controller, the hosted partitions (`ReplicaManager`) with Produce and the read path (Fetch,
ListOffsets, OffsetForLeaderEpoch), consumer groups and committed offsets, and the registration
and heartbeats that get the broker unfenced (KIP-631).

The partitions follow the image only once the broker has caught up with the metadata log to its
registration (`BrokerLifecycle.ready`), as a Kafka broker starts its ReplicaManager then: the
first image the ReplicaManager sees decides which logs on disk are strays, so it must not be a
stale one.

Replication: each image goes to the ReplicaManager (which partitions, leader or follower), then
to `Leadership` (an ISR tracker per partition led here: high watermark, ISR changes sent to the
controller as AlterPartition, acks=all), then to the `ReplicaFetcherManager` (a fetcher per
leader broker for the partitions followed here), in that order, so a partition that changes
role stops being led before it is fetched and the other way round.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING

from quorum.broker.ack_timings import ReplicationTimings
from quorum.broker.acl_apis import register_acl_apis
from quorum.broker.allocate_producer_ids_rpc import ControllerBlocks
from quorum.broker.auto_create import creation_allowed, topics_to_create
from quorum.broker.fetch import register_read_path
from quorum.broker.fetch_sessions import FetchSessionCache
from quorum.broker.forwarding import register_forwarding
from quorum.broker.leadership import Leadership
from quorum.broker.listener_view import ListenerViews
from quorum.broker.local_log_length import LocalLogLengths
from quorum.broker.metadata import encoded_metadata_response
from quorum.broker.offsets_topic import GroupCoordination, group_config
from quorum.broker.partition_view import AppendNotifier
from quorum.broker.produce import register_produce
from quorum.broker.producer_ids import ProducerIdManager
from quorum.broker.remote_tier_plugin import RemoteTier
from quorum.broker.replica_fetcher_manager import ReplicaFetcherManager
from quorum.broker.replica_fetcher_out_of_range import OutOfRangePlugin
from quorum.broker.replica_manager import ReplicaManager
from quorum.broker.scram_apis import register_scram_apis
from quorum.broker.served_image import ServedImage
from quorum.broker.topic_creation import OFFSETS_TOPIC, TopicCreator, TopicDefaults
from quorum.image.image import MetadataImage
from quorum.net.client_security import node_client_security
from quorum.net.dispatch import Reply
from quorum.security.authorization import metadata_refusals
from quorum.security.authorizer import authorizer_from_properties
from quorum.server.broker_lifecycle import BrokerLifecycle, ListenerInfo
from quorum.server.config import SECURITY_PROTOCOLS
from quorum.server.refusals import refuse
from quorum.wire.errors import ErrorCode, MalformedRequestError
from quorum.wire.protocol import Request

if TYPE_CHECKING:
    from quorum.broker.partition import Partition
    from quorum.server.node_services import NodeServices

log = logging.getLogger(__name__)

METADATA = 3
BROKER_READY_WAIT_S = 10.0
PAUSE_CHECK_SECONDS = 0.1
AUTO_CREATE_WAIT_S = 2.0
AUTO_CREATE_POLL_S = 0.02


def lists_registration(image: MetadataImage, node_id: int, broker_epoch: int) -> bool:
    """Whether `image` lists broker `node_id` unfenced under the registration of `broker_epoch`.

    The epoch matters after a restart: the images a broker replays from its own log may list its previous
    registration unfenced (it exited before replicating the FenceBrokerRecord of its controlled
    shutdown), and the fence record comes after it. A broker that took that listing as its own
    (with the KAFKA-6262 delay knob, whose answers trail replay) left itself out of an answer once
    the fence reached them: 1 answer in 363 in a fresh-clone run of `tests/test_replay_knob.py`."""
    registration = image.registrations.get(node_id)
    return node_id in image.brokers and registration is not None and registration.broker_epoch == broker_epoch


class BrokerRole:
    """A node's broker role; `node` gives the replayed image and the controller channel."""

    def __init__(self, node: NodeServices, out_of_range: OutOfRangePlugin | None = None,
                 remote: RemoteTier | None = None) -> None:
        """`out_of_range` is the remote tier's plug-in point (KIP-1023): what followers do when the
        leader answers OFFSET_OUT_OF_RANGE or OFFSET_MOVED_TO_TIERED_STORAGE; Kafka's way without it.
        `remote` is the remote tier itself (KIP-405: uploads, remote reads, remote retention)."""
        config = node.config
        self._node = node
        self._hosted_image: MetadataImage | None = None
        """The newest image whose partitions this broker has opened: what Metadata answers from."""
        self.served = ServedImage(self._answerable_image, config.test_metadata_delay_ms, config.pause_metadata_path)
        self.notifier = AppendNotifier()
        self.remote = remote
        producer_ids = ProducerIdManager(config.node_id, ControllerBlocks(
            config.node_id, node.controller_peer, lambda: node.core.leader_id, self._broker_epoch))
        self.replicas = ReplicaManager.from_node_config(config, self.notifier, remote, producer_ids)
        # the acks=all waits' parts (issue 37), kept, as Kafka's request metrics, where a metrics port reads them
        self.timings = ReplicationTimings() if config.metrics_port is not None else None
        self.leadership = Leadership(config.node_id, self.notifier, node.controller_peer, self._broker_epoch,
                                     config.extra, timings=self.timings)
        self.replicas.on_open = self.leadership.manage
        self.replicas.on_log_failure = self._log_dir_failed
        self.fetchers = ReplicaFetcherManager(config.node_id, self.notifier, self._broker_epoch, config.extra,
                                              out_of_range=out_of_range, timings=self.timings,
                                              security=node_client_security(config, config.client_endpoint().name,
                                                                            "sasl.mechanism.inter.broker.protocol"))
        self.topics = TopicCreator(node.controller_peer, TopicDefaults.from_properties(config.extra))
        self._applied_image: MetadataImage | None = None
        self._applier: asyncio.Task[None] | None = None
        self._listed_itself = False
        """Set once the image Metadata answers from first listed this broker (see `_until_listed`)."""
        self._stop = asyncio.Event()
        dispatcher = node.dispatcher
        dispatcher.register(METADATA, self._metadata)
        register_forwarding(dispatcher, node.controller_peer, refuse, node_id=config.node_id)
        register_acl_apis(dispatcher, lambda: node.image, refuse, authorizer_from_properties(config.extra) is not None)
        register_scram_apis(dispatcher, lambda: node.image)
        register_produce(dispatcher, self.replicas, replication=self.leadership)
        self.views = ListenerViews()  # each request's brokers are those of the listener it came on
        register_read_path(dispatcher, self.replicas, self.notifier, lambda: self.views.of(node.image),
                           FetchSessionCache.from_properties(config.extra), replication=self.leadership,
                           remote=remote)
        protocol_id = SECURITY_PROTOCOLS.index
        listeners = tuple(ListenerInfo(e.name, a.host, a.port, protocol_id(config.security_protocol(e.name)))
                          for e in config.client_endpoints() if (a := config.advertised(e.name)) is not None)
        lengths = LocalLogLengths()
        self.lifecycle = BrokerLifecycle(config.node_id, listeners, config.extra.get("broker.rack"),
                                         lambda: node.core.cluster_id, node.lifecycle_peer,
                                         lambda: node.replayer.applied_offset,
                                         int(config.extra.get("broker.heartbeat.interval.ms", "2000")),
                                         lambda: lengths.short(self.replicas.partitions(), node.now_ms()))
        self.groups = GroupCoordination(config.node_id, self.replicas, self.topics, group_config(config.extra),
                                        dispatcher, lambda: self.views.of(node.image),
                                        lambda: self.views.of(self._answerable_image()))

    @property
    def image(self) -> MetadataImage:
        """What this broker answers Metadata from: the replayed image, unless the KAFKA-6262 knob holds it back."""
        return self.served.image

    def _answerable_image(self) -> MetadataImage:
        """Metadata is answered from the last image this broker has applied, not the newest replayed:
        its partitions' logs open off the event loop a moment after the image names them, and a client
        told "this broker leads p" in that moment would get retriable errors for its produce, which a
        producer that is not idempotent retries out of order. Before the first image is applied
        (the broker is starting), the replayed image."""
        return self._hosted_image if self._hosted_image is not None else self._node.image_state.image

    def image_replayed(self) -> None:
        """The node replayed more of the metadata log (or installed a snapshot)."""
        self.served.replayed()
        self.groups.metadata_replayed(self._node.image)
        self._apply_image()

    def _apply_image(self) -> None:
        """Have the newest replayed image applied: by the applier task, started if none is running
        (one applies at a time, in order; images that come meanwhile are skipped to the newest)."""
        if not self.lifecycle.ready.is_set() or self._node.image is self._applied_image:
            return
        if self._applier is None or self._applier.done():
            self._applier = asyncio.create_task(self._apply_images())

    async def _apply_images(self) -> None:
        """Apply images until the newest is applied. New partition logs open in a worker thread
        (`ReplicaManager.apply_image_off_loop`, issue 17): requests are served meanwhile."""
        while (image := self._node.image) is not self._applied_image and not self._stop.is_set():
            self._applied_image = image
            try:
                await self.replicas.apply_image_off_loop(image)
                partitions = self.replicas.partitions()
                self.leadership.apply_image(image, partitions)
                self.fetchers.apply_image(image, partitions)
                self.groups.image_changed(image)
            except Exception:
                log.exception("applying the metadata image at offset %d failed", image.offset)
            self._hosted_image = image  # served even when applying failed: the failure is logged per partition
            self.served.replayed()

    def _log_dir_failed(self, partition: Partition, exc: BaseException) -> None:
        """A partition's log refuses writes (an fsync, truncation or roll failed, a full disk): its
        log dir failed. Kafka takes a failed log dir offline and halts when it was the only one; this
        broker stops (exit 1) whatever its number of log dirs, so the controller moves the leaderships
        away, and once restarted it recovers the log from what is on disk. Going on would keep the
        partition refused (KAFKA_STORAGE_ERROR as its leader, out of every ISR as a follower) with no
        one told. A failed append leaves the log intact and is retried instead (`LOG_FAILURE_RETRY_S`)."""
        self._node.stop_on_failed_log_dir(f"the log of {partition.name} in {partition.directory.parent} "
                                          f"refuses writes: {exc}")

    def _broker_epoch(self) -> int:
        return self.lifecycle.state.broker_epoch

    def tasks(self) -> list[asyncio.Task[None]]:
        """The broker's background work, cancelled at shutdown."""
        self.groups.start()
        work = [self.lifecycle.run(), self._watch_pause_forever(), self._apply_when_ready(),
                self.replicas.run_retention(self._stop), self.replicas.run_log_cleaner(self._stop)]
        if self.remote is not None:
            work.append(self.remote.run(self.replicas.partitions, self._stop))
        return [asyncio.create_task(job) for job in work]

    async def close(self) -> None:
        self._stop.set()
        if self._applier is not None:  # let a log being opened finish: it is closed with the others
            with contextlib.suppress(Exception):
                await self._applier
        await self.fetchers.close()
        await self.leadership.close()
        await self.groups.close()
        self.replicas.producer_ids.close()
        if self.remote is not None:
            await self.remote.close()
        self.replicas.close()

    async def _apply_when_ready(self) -> None:
        await self.lifecycle.ready.wait()
        self._apply_image()

    async def _watch_pause_forever(self) -> None:
        """The KAFKA-6262 pause file takes effect when it appears, not at the next Metadata request."""
        while True:
            self.served.check_pause()
            await asyncio.sleep(PAUSE_CHECK_SECONDS)

    async def _until_listed(self) -> None:
        """Until this broker is unfenced and the image Metadata answers from lists it, at most
        BROKER_READY_WAIT_S; once it has, never again.

        A Kafka broker opens its listener once unfenced; this one listens at once (tools watch for
        it) and holds Metadata answers until then, so a client never bootstraps from an empty image.
        Unfenced is not yet enough: the heartbeat answer that says so comes before this broker has
        replayed (and applied) the UnfenceBrokerRecord, and an answer given in that moment lists the
        other brokers but not the one answering. librdkafka then decommissions its handle for this
        broker, and its admin client's requests waiting for this broker (as controller or as a group's
        coordinator) timed out for good: "Failed while waiting for controller" after a coordinator
        restart, in 1 of ~10 restarts here (`test_static_member_ids_survive_a_coordinator_restart`)."""
        node_id = self._node.config.node_id
        loop = asyncio.get_running_loop()
        deadline = loop.time() + BROKER_READY_WAIT_S
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self.lifecycle.ready.wait(), BROKER_READY_WAIT_S)
        while not (listed := lists_registration(self.image, node_id, self._broker_epoch())) \
                and loop.time() < deadline:
            await asyncio.sleep(AUTO_CREATE_POLL_S)
        if not listed:
            log.warning("broker %d answers Metadata after %.0f s without its registration of broker epoch %d "
                        "listed unfenced in the image it answers from (offset %d)", node_id, BROKER_READY_WAIT_S,
                        self._broker_epoch(), self.image.offset)
        self._listed_itself = listed

    async def _metadata(self, request: Request) -> Reply:
        if not self._listed_itself:
            await self._until_listed()
        if request.version < 12 and any(getattr(t, "name", "") is None for t in request.body.topics or ()):
            # Kafka's KafkaApis refuses the request: topic ids (and so null names) start at v12, and a
            # v10/v11 answer cannot carry a null name. The listener closes the connection.
            raise MalformedRequestError(f"Metadata v{request.version}: a topic name can not be null before v12")
        missing = self._to_auto_create(request)
        refused = metadata_refusals(self._node.image, request.body.topics is not None, bool(missing))  # issue 18
        missing = [name for name in missing if refused is None or not refused(name)]
        created: list[str] = []
        if missing:
            codes = await asyncio.gather(*(self._create(name) for name in missing))
            created = [name for name, code in zip(missing, codes, strict=True) if code == ErrorCode.NONE]
        # Metadata is answered from the image whose partition logs are open, a moment behind the
        # replayed one: a topic this broker created, or has replayed, is waited for there. Waiting for
        # the replayed image only (and not at all for a topic another broker created) told a client
        # UNKNOWN_TOPIC_OR_PARTITION for a topic the broker knew, once in a while: a consumer
        # subscribed to it reported "Subscribed topic not available".
        replayed = self._node.image.topics
        named = [name for entry in request.body.topics or () if (name := getattr(entry, "name", None))]
        awaited = [name for name in named if name in created or name in replayed]
        if any(name not in self._answerable_image().topics for name in awaited):
            await self._wait_for(lambda image: all(name in image.topics for name in awaited))
        image = self.views.of(self.image)
        return Reply(encoded_metadata_response(image, request.body, request.version, refused,
                                               topic_epochs=self._node.config.kip232_enabled), request.version)

    def _create(self, name: str) -> Awaitable[int]:
        """CreateTopics for a topic a client named; `__consumer_offsets` with its own settings, as Kafka's."""
        return self.topics.create_offsets_topic() if name == OFFSETS_TOPIC else self.topics.auto_create(name)

    def _to_auto_create(self, request: Request) -> list[str]:
        """The topics a Metadata request names that do not exist and that it allows creating
        (`quorum.broker.auto_create`: Kafka's rules)."""
        body = request.body
        allowed = creation_allowed(request.version, bool(getattr(body, "allow_auto_topic_creation", True)),
                                   self.topics.defaults.auto_create, body.topics is None)
        names = [getattr(entry, "name", None) for entry in body.topics or ()]
        return topics_to_create(names, self._node.image.topics, allowed)

    async def _wait_for(self, condition: Callable[[MetadataImage], bool]) -> None:
        """Until the image Metadata is answered from (`_answerable_image`) satisfies `condition`, for
        at most AUTO_CREATE_WAIT_S: a client retries on its own after that (UNKNOWN_TOPIC_OR_PARTITION,
        which is what Kafka answers at once while it creates the topic)."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + AUTO_CREATE_WAIT_S
        while not condition(self._answerable_image()) and loop.time() < deadline:
            await asyncio.sleep(AUTO_CREATE_POLL_S)
