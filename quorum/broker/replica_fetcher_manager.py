"""The follower's side of replication on a broker: one `ReplicaFetcher` per leader broker, driven.

Kafka's ReplicaFetcherManager without threads: for every broker that leads a partition this broker
follows, a `_LeaderLink` owns the sans-IO `ReplicaFetcher` core, a connection to that leader and a
timer. Every event (the image added or removed partitions, an answer arrived, a request failed,
a deadline passed) is fed to the core on the event loop thread, and the actions it returns are
carried out at once and in order (appends, truncations, high watermark and log start moves on
the `Partition`), so the log is what the core expects before its next event; only its requests
leave as tasks, whose answers come back as new events.

The image decides what is followed (`apply_image`, called after the ReplicaManager has applied
the same image): partitions whose leader is another broker, in the image's leader epoch. A newer
leader epoch for the same leader (an ISR change bumps it in this cluster) is handed to the core
at once, which is what lets a fenced partition fetch again. A change of this broker's own
registration epoch restarts every link, since the fetcher sends it as KIP-903's ReplicaEpoch.

An out-of-range handler learns what KIP-1023's eligibility needs when a resolution begins
(`TieringFacts`): the partition's live topic config (`remote.storage.enable`, `cleanup.policy`),
the broker's `remote.log.storage.system.enable`, and `follower.fetch.last.tiered.offset.enable`
as the latest image resolves it (a per-broker or cluster-default ConfigRecord, then the properties).
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import time
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from quorum.broker import replica_fetcher_events as ev
from quorum.broker import replica_fetcher_rpc as rpc
from quorum.broker.ack_timings import ReplicationTimings
from quorum.broker.background import BackgroundTasks
from quorum.broker.log_config import FOLLOWER_FETCH_LAST_TIERED_OFFSET_ENABLE, LogConfigError, broker_flag
from quorum.broker.partition import Partition
from quorum.broker.partition_view import AppendNotifier
from quorum.broker.replica_fetcher import FetchPhase, ReplicaFetcher
from quorum.broker.replica_fetcher_out_of_range import Fail, OutOfRangePlugin, Step
from quorum.image.image import MetadataImage
from quorum.log.epoch_cache import EpochEntry
from quorum.log.errors import LogError
from quorum.net.client_security import ClientSecurity
from quorum.net.peer_client import PeerClient, PeerUnavailable
from quorum.raft.interface import OffsetAndEpoch

logger = logging.getLogger(__name__)

REPLICA_SOCKET_TIMEOUT_MS = 30_000  # Kafka's replica.socket.timeout.ms
LOG_FAILURE_RETRY_S = 5.0
"""How long a partition whose log action failed (an append on a full disk) waits before it is followed
again from what its log holds. Kafka takes the whole log dir offline (and, with one dir, halts); here
an append refused on a full disk leaves the log intact, the other partitions go on, and a disk freed
meanwhile lets this one catch up and rejoin the ISR without waiting for a new leader epoch that may
never come. A failure that leaves the log refusing writes (a truncation, roll or fsync) stops the
broker instead (`BrokerRole._log_dir_failed`)."""


def monotonic_ms() -> int:
    return int(time.monotonic() * 1000)


class PartitionFollowerLog:
    """`FollowerLog` over a `Partition`: always the log as it is now."""

    def __init__(self, partition: Partition) -> None:
        self.partition = partition

    @property
    def log_start_offset(self) -> int:
        return self.partition.log_start_offset

    @property
    def log_end_offset(self) -> int:
        return self.partition.log_end_offset

    @property
    def high_watermark(self) -> int:
        return self.partition.high_watermark

    def latest_epoch(self) -> int | None:
        entries = self.partition.log.epoch_entries
        return entries[-1].epoch if entries else None

    def end_offset_for_epoch(self, epoch: int) -> OffsetAndEpoch | None:
        log = self.partition.log
        if not log.epoch_entries:
            return None
        found = log.end_offset_for_epoch(epoch)
        return None if found.offset < 0 or found.epoch < 0 else found


def fetcher_config(broker_id: int, leader_id: int, broker_epoch: int,
                   properties: Mapping[str, str]) -> ev.ReplicaFetcherConfig:
    """Kafka's replica.fetch.* settings from the node's properties, Kafka's defaults otherwise."""
    defaults = ev.ReplicaFetcherConfig(broker_id, leader_id)

    def number(key: str, default: int) -> int:
        return int(properties.get(key, default))

    return ev.ReplicaFetcherConfig(
        broker_id, leader_id, broker_epoch,
        fetch_backoff_ms=number("replica.fetch.backoff.ms", defaults.fetch_backoff_ms),
        fetch_max_bytes=number("replica.fetch.max.bytes", defaults.fetch_max_bytes),
        fetch_response_max_bytes=number("replica.fetch.response.max.bytes", defaults.fetch_response_max_bytes),
        fetch_wait_max_ms=number("replica.fetch.wait.max.ms", defaults.fetch_wait_max_ms),
        fetch_min_bytes=number("replica.fetch.min.bytes", defaults.fetch_min_bytes))


class _LeaderLink:
    """One leader broker: its fetcher core, connection, timer and the partitions followed."""

    def __init__(self, config: ev.ReplicaFetcherConfig, address: tuple[str, int], notifier: AppendNotifier,
                 clock_ms: Callable[[], int], out_of_range: OutOfRangePlugin | None = None,
                 facts: Callable[[Partition], Callable[[], ev.TieringFacts]] | None = None,
                 security: ClientSecurity | None = None, timings: ReplicationTimings | None = None) -> None:
        self._timings = timings
        self._answered_at = 0.0  # when the last fetch's answer came (timings only)
        self.fetcher = ReplicaFetcher(config, out_of_range.handler if out_of_range is not None else None)
        self._out_of_range = out_of_range
        self._facts = facts if facts is not None else (lambda _: ev.no_tiering)
        self._versions = rpc.LeaderVersions()
        self.address = address
        self.peer = PeerClient(address[0], address[1], f"replica-fetcher-{config.broker_id}-{config.leader_id}",
                               REPLICA_SOCKET_TIMEOUT_MS + config.fetch_wait_max_ms, security=security)
        self.followed: dict[ev.TopicPartition, tuple[Partition, int]] = {}  # -> (partition, leader epoch)
        self._notifier = notifier
        self._clock_ms = clock_ms
        self._timer: asyncio.TimerHandle | None = None
        self._background = BackgroundTasks()
        self._retries: dict[ev.TopicPartition, asyncio.TimerHandle] = {}

    # -- events ------------------------------------------------------------------------------

    def follow(self, adds: list[tuple[Partition, int]], removes: Iterable[ev.TopicPartition]) -> None:
        removed = [tp for tp in removes if self.followed.pop(tp, None) is not None]
        if removed:
            self._feed(lambda now: self.fetcher.remove_partitions(removed, now))
        if adds:
            for partition, epoch in adds:
                self.followed[(partition.topic, partition.partition)] = (partition, epoch)
            batch = [ev.AddPartition((p.topic, p.partition), p.topic_id, epoch, PartitionFollowerLog(p), self._facts(p))
                     for p, epoch in adds]
            self._feed(lambda now: self.fetcher.add_partitions(batch, now))

    def _feed(self, event: Callable[[int], list[ev.Action]]) -> None:
        """One event into the core, then its actions carried out in order (a log failure is one more event)."""
        if self._background.closed:
            return
        pending = [event]
        while pending:
            actions = pending.pop(0)(self._clock_ms())
            for failed_tp, reason in self._carry_out(actions):
                pending.append(lambda now, tp=failed_tp, why=reason: self.fetcher.on_log_failed(tp, why, now))
                self._retry_later(failed_tp)
        self._reschedule()

    def _carry_out(self, actions: list[ev.Action]) -> list[tuple[ev.TopicPartition, str]]:
        """The log actions first, then the requests, without the partitions whose log action failed.

        The core builds the next Fetch in the same call that asks for the append of what the last
        one brought, at the offset after it: sent as it is after the append failed (a full disk), it
        told the leader this replica held records it did not, the leader counted them into its
        high watermark, and when this replica was elected it truncated the others below it, losing
        acknowledged records (issue 19's soak)."""
        failures: list[tuple[ev.TopicPartition, str]] = []
        sends: list[ev.Send] = []
        changed = False
        for action in actions:
            if isinstance(action, ev.Send):
                sends.append(action)
                continue
            if isinstance(action, ev.OutOfRangeWork) and self._out_of_range is not None:
                self._background.spawn(self._perform(action, self._out_of_range))
                continue
            tp = action.topic_partition
            if any(tp == failed for failed, _ in failures):
                continue
            entry = self.followed.get(tp)
            if entry is None:
                continue
            partition = entry[0]
            try:
                started = time.perf_counter()
                changed |= self._apply(partition, action)
                if self._timings is not None and isinstance(action, ev.AppendAsFollower):
                    self._timings.follower_appended(time.perf_counter() - started)
            except (LogError, OSError, ValueError) as exc:  # ValueError: a bad StartAt (epochs, producer snapshot)
                logger.error("%s: %s failed: %s", partition.name, type(action).__name__, exc)
                failures.append((tp, f"{type(action).__name__} failed: {exc}"))
        if changed:
            self._notifier.appended()
        failed = {tp for tp, _ in failures}
        for send in sends:
            self._background.spawn(self._send(send.request, _without(send.request, failed)))
        return failures

    @staticmethod
    def _apply(partition: Partition, action: ev.Action) -> bool:
        if isinstance(action, ev.AppendAsFollower):
            partition.append_as_follower(action.records, crc_checked=True)  # the core's _parse checked each batch
        elif isinstance(action, ev.Truncate):
            partition.truncate_to(action.offset)
        elif isinstance(action, ev.TruncateFullyAndStartAt):
            partition.start_at(action.offset, [EpochEntry(e.epoch, e.start_offset) for e in action.leader_epochs],
                               action.producer_snapshot)  # fmt: skip
        elif isinstance(action, ev.UpdateHighWatermark):
            partition.set_follower_high_watermark(action.high_watermark)
        elif isinstance(action, ev.IncrementLogStartOffset):
            partition.increment_log_start_offset(action.offset)
        elif isinstance(action, ev.PartitionFailed):
            logger.error("%s: replication stopped until the next leader epoch, or %.0f s if its log failed: %s",
                         partition.name, LOG_FAILURE_RETRY_S, action.reason)
            return False
        elif isinstance(action, ev.OutOfRangeWork):
            logger.error("%s: out-of-range work %r has no handler here", partition.name, action.work)
            return False
        return True

    async def _perform(self, action: ev.OutOfRangeWork, plugin: OutOfRangePlugin) -> None:
        """A `Defer` step's work, off the fetcher's path; its outcome goes back to the core."""
        try:
            step: Step = await plugin.perform(action.topic_partition, action.work)
        except Exception as exc:  # noqa: BLE001 - a plug-in's failure stops this partition only
            logger.error("%s-%d: out-of-range work failed: %s", *action.topic_partition, exc)
            step = Fail(f"out-of-range work failed: {exc}")
        self._feed(lambda now: self.fetcher.resolve_out_of_range(action.topic_partition, action.leader_epoch, step,
                                                                 now))

    async def _send(self, request: ev.Request, wire: ev.Request | None) -> None:
        """`wire` goes to the leader (None: nothing left to ask); the answer is fed back as that to `request`."""
        if self._answered_at and isinstance(request, ev.FetchRequest):
            assert self._timings is not None
            self._timings.follower_turned_around(time.perf_counter() - self._answered_at)
            self._answered_at = 0.0
        try:
            if wire is None:
                raise PeerUnavailable("every partition of the request failed on this broker's log")
            response: Any = await rpc.send(self.peer, wire, self._versions)
        except PeerUnavailable as exc:
            logger.debug("replica fetcher request to %s:%d failed: %s", *self.address, exc)
            self._feed(lambda now: self.fetcher.on_send_failed(request, now))
            return
        if isinstance(request, ev.FetchRequest):
            if self._timings is not None:
                self._answered_at = time.perf_counter()
            self._feed(lambda now: self.fetcher.on_fetch_response(request, response, now))
        elif isinstance(request, ev.OffsetsForLeaderEpochRequest):
            self._feed(lambda now: self.fetcher.on_offsets_for_leader_epoch_response(request, response, now))
        else:
            self._feed(lambda now: self.fetcher.on_list_offsets_response(request, response, now))

    def _retry_later(self, tp: ev.TopicPartition) -> None:
        if tp not in self._retries and not self._background.closed:
            self._retries[tp] = asyncio.get_running_loop().call_later(LOG_FAILURE_RETRY_S, self._retry, tp)

    def _retry(self, tp: ev.TopicPartition) -> None:
        """Follow a failed partition again, in the same leader epoch, from what its log holds now."""
        self._retries.pop(tp, None)
        entry, state = self.followed.get(tp), self.fetcher.state(tp)
        if entry is None or state is None or state.phase is not FetchPhase.FAILED or self._background.closed:
            return  # no longer followed, or a newer leader epoch has started it again meanwhile
        partition, epoch = entry
        logger.info("%s: following broker %d again from offset %d, %.0f s after its log failed", partition.name,
                    self.fetcher.leader_id, partition.log_end_offset, LOG_FAILURE_RETRY_S)
        self.follow([(partition, epoch)], [tp])

    def _reschedule(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        deadline = self.fetcher.next_deadline_ms()
        if deadline is None or self._background.closed:
            return
        delay_s = max(0, deadline - self._clock_ms()) / 1000
        self._timer = asyncio.get_running_loop().call_later(delay_s, self._tick)

    def _tick(self) -> None:
        self._timer = None
        self._feed(self.fetcher.tick)

    def stop(self) -> None:
        """No event reaches the core any more; requests in flight are cancelled."""
        if self._timer is not None:
            self._timer.cancel()
        for retry in self._retries.values():
            retry.cancel()
        self._retries.clear()
        self._background.close()

    async def close(self) -> None:
        self.stop()
        await self.peer.close()


class ReplicaFetcherManager:
    """See the module docstring."""

    def __init__(self, broker_id: int, notifier: AppendNotifier, broker_epoch: Callable[[], int],
                 properties: Mapping[str, str] | None = None, clock_ms: Callable[[], int] = monotonic_ms,
                 out_of_range: OutOfRangePlugin | None = None, security: ClientSecurity | None = None,
                 timings: ReplicationTimings | None = None) -> None:
        """`out_of_range` replaces Kafka's out-of-range behaviour of every follower (the remote tier's
        plug-in point, `quorum.broker.replica_fetcher_out_of_range`); `security`: TLS and SASL for the
        inter-broker listener (issue 18); `timings`: where the followers' appends are timed."""
        self._timings = timings
        self._security = security
        self.broker_id = broker_id
        self._out_of_range = out_of_range
        self._notifier = notifier
        self._broker_epoch = broker_epoch
        self._properties = dict(properties or {})
        self._clock_ms = clock_ms
        self._links: dict[int, _LeaderLink] = {}
        self._closing: set[asyncio.Task[None]] = set()
        self._epoch = -1
        remote = self._properties.get("remote.log.storage.system.enable", "")
        self._remote_log_storage = remote.strip().lower() == "true"
        self.fetch_from_tiered_offset = False
        """`follower.fetch.last.tiered.offset.enable` as the last image applied resolves it."""

    def tiering_facts(self, partition: Partition) -> Callable[[], ev.TieringFacts]:
        """What an out-of-range handler of `partition` reads when a resolution begins: live values."""
        def facts() -> ev.TieringFacts:
            config = partition.config
            return ev.TieringFacts(remote_storage_enabled=self._remote_log_storage and config.remote_storage_enable,
                                   compacted=config.compacted, fetch_from_tiered_offset=self.fetch_from_tiered_offset)
        return facts

    def link(self, leader_id: int) -> _LeaderLink | None:
        return self._links.get(leader_id)

    def apply_image(self, image: MetadataImage, partitions: Iterable[Partition]) -> None:
        """Follow what `image` says this broker follows, from whom, in which leader epoch."""
        try:
            enabled = broker_flag(image.configs, self.broker_id, self._properties,
                                  FOLLOWER_FETCH_LAST_TIERED_OFFSET_ENABLE)  # fmt: skip
        except LogConfigError as exc:
            logger.error("%s; taken as false", exc)
            enabled = False
        if enabled != self.fetch_from_tiered_offset:
            logger.info("%s is now %s", FOLLOWER_FETCH_LAST_TIERED_OFFSET_ENABLE, str(enabled).lower())
            self.fetch_from_tiered_offset = enabled
        epoch = self._broker_epoch()
        if epoch != self._epoch:
            self._epoch = epoch
            self._close_links(list(self._links))
        wanted: dict[int, dict[ev.TopicPartition, tuple[Partition, int]]] = {}
        for partition in partitions:
            topic = image.topics.get(partition.topic)
            if topic is None or topic.topic_id != partition.topic_id:
                continue
            info = next((p for p in topic.partitions if p.partition == partition.partition), None)
            if info is None or info.leader < 0 or info.leader == self.broker_id or self.broker_id not in info.replicas:
                continue
            wanted.setdefault(info.leader, {})[(partition.topic, partition.partition)] = (
                partition, max(info.leader_epoch, partition.leader_epoch))
        for leader_id in list(self._links):
            address = _address(image, leader_id)
            if leader_id not in wanted or (address is not None and address != self._links[leader_id].address):
                self._close_links([leader_id])
        for leader_id, followed in wanted.items():
            link = self._links.get(leader_id)
            if link is None:
                address = _address(image, leader_id)
                if address is None:
                    logger.info("no endpoint for leader broker %d yet", leader_id)
                    continue
                config = fetcher_config(self.broker_id, leader_id, epoch, self._properties)
                link = self._links[leader_id] = _LeaderLink(config, address, self._notifier, self._clock_ms,
                                                            self._out_of_range, self.tiering_facts, self._security,
                                                            self._timings)
                logger.info("replicating %d partition(s) from broker %d at %s:%d", len(followed), leader_id,
                            *address)  # fmt: skip
            removes = [tp for tp, (p, _) in link.followed.items() if tp not in followed or followed[tp][0] is not p]
            adds = [(p, e) for tp, (p, e) in followed.items()
                    if tp in removes or link.followed.get(tp, (None, -1))[1] != e]
            link.follow(adds, removes)

    def _close_links(self, leader_ids: list[int]) -> None:
        for leader_id in leader_ids:
            link = self._links.pop(leader_id)
            link.stop()
            task = asyncio.get_running_loop().create_task(link.peer.close())
            self._closing.add(task)
            task.add_done_callback(self._closing.discard)

    async def close(self) -> None:
        links, self._links = list(self._links.values()), {}
        for link in links:
            await link.close()


def _address(image: MetadataImage, broker_id: int) -> tuple[str, int] | None:
    broker = image.brokers.get(broker_id)
    if broker is not None:
        return broker.host, broker.port
    registration = image.registrations.get(broker_id)
    endpoint = registration.endpoint(image.listener) if registration is not None else None
    return None if endpoint is None else (endpoint.host, endpoint.port)


def _without(request: ev.Request, failed: set[ev.TopicPartition]) -> ev.Request | None:
    """A Fetch without the partitions whose log just failed (their offsets are not what the log
    holds); None when none is left. Other requests name no position of ours and go as they are."""
    if not failed or not isinstance(request, ev.FetchRequest):
        return request
    kept = tuple(part for part in request.partitions if part.topic_partition not in failed)
    if len(kept) == len(request.partitions):
        return request
    return dataclasses.replace(request, partitions=kept) if kept else None
