"""A broker's registration and heartbeats with the active controller (KIP-631).

The broker registers once per process (a new incarnation id each start), then heartbeats every
`broker.heartbeat.interval.ms` with the offset of the metadata it has replayed; the controller
unfences it once that offset reaches its registration, and fences it when heartbeats stop for
`broker.session.timeout.ms`. The active controller is the metadata quorum's leader, which the
broker's own Raft observer knows; when it changes, or answers NOT_CONTROLLER, the broker asks the
new one. A STALE_BROKER_EPOCH answer (the controller lost the registration) means register again.

On a graceful stop the broker shuts down under control (Kafka's beginControlledShutdown): it heartbeats
with WantShutDown until the controller answers ShouldShutDown, having moved its leaderships away and
fenced it, so its partitions get live leaders at once and its next incarnation registers at once,
instead of both waiting out `broker.session.timeout.ms`.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from quorum.net.peer_client import PeerClient, PeerUnavailable
from quorum.wire.errors import ErrorCode
from quorum.wire.protocol import APIS

log = logging.getLogger(__name__)

BROKER_REGISTRATION = APIS[62]
BROKER_HEARTBEAT = APIS[63]
PLAINTEXT = 0  # Kafka's SecurityProtocol id
STARTING_HEARTBEAT_S = 0.01
"""Kafka's heartbeat pace while a registered broker catches up with the metadata (STARTING)."""
SHUTDOWN_HEARTBEAT_S = 0.05
"""The heartbeat pace during a controlled shutdown."""
CONTROLLED_SHUTDOWN_DEADLINE_S = 5.0
"""How long a controlled shutdown waits for ShouldShutDown before the broker stops anyway."""


@dataclass(frozen=True, slots=True)
class ListenerInfo:
    name: str
    host: str
    port: int
    security_protocol: int = PLAINTEXT


@dataclass
class BrokerState:
    """What the broker knows of itself, as the controller's answers tell it."""

    broker_epoch: int = -1
    fenced: bool = True
    caught_up: bool = False
    registered_ms: float | None = None


class BrokerLifecycle:
    """Runs the registration and heartbeat loop; `state` says where the broker stands."""

    def __init__(self, broker_id: int, listeners: tuple[ListenerInfo, ...], rack: str | None,
                 cluster_id: Callable[[], str | None], controller: Callable[[], PeerClient | None],
                 metadata_offset: Callable[[], int], heartbeat_interval_ms: int = 2000,
                 short_local_logs: Callable[[], Mapping[uuid.UUID, Sequence[int]]] | None = None) -> None:
        """`short_local_logs()`: topic id -> partitions whose local log here is short
        (`quorum.broker.local_log_length`), sent in every heartbeat so that the controller's elections
        prefer other in-sync replicas (the ShortLocalLogs tag)."""
        self.broker_id = broker_id
        self.incarnation_id = uuid.uuid4()
        self.listeners = listeners
        self.rack = rack
        self.state = BrokerState()
        self.ready = asyncio.Event()
        """Set once the controller first unfenced this broker: it has replayed the metadata up to its
        registration, so what it answers is no older than what the controller knew when it joined."""
        self._cluster_id = cluster_id
        self._controller = controller
        self._metadata_offset = metadata_offset
        self._interval = heartbeat_interval_ms / 1000
        self._short_local_logs = short_local_logs
        self._shutting_down = False
        """The last heartbeat answer of a controlled shutdown."""

    async def run(self) -> None:
        while not self._shutting_down:
            peer = self._controller()
            cluster_id = self._cluster_id()
            if peer is None or cluster_id is None:
                await asyncio.sleep(0.1)  # no leader known yet, or the cluster id is not replicated yet
                continue
            try:
                if self.state.broker_epoch < 0:
                    await self._register(peer, cluster_id)
                    if self.state.broker_epoch >= 0:
                        continue  # registered: the first heartbeat goes at once, as Kafka's does
                else:
                    await self._heartbeat(peer)
            except PeerUnavailable as exc:
                log.info("broker %d: the controller did not answer: %s", self.broker_id, exc)
                await asyncio.sleep(0.2)
                continue
            await asyncio.sleep(self._next_wait_s())

    async def controlled_shutdown(self, deadline_s: float = CONTROLLED_SHUTDOWN_DEADLINE_S) -> bool:
        """Heartbeat with WantShutDown every SHUTDOWN_HEARTBEAT_S until the controller answers
        ShouldShutDown (True). Gives up (False) at once when the broker is not registered or fenced, no
        controller is known or it does not answer (a whole cluster stopping at once may have lost it
        already), and after `deadline_s` otherwise, saying what it waited for."""
        self._shutting_down = True
        state = self.state
        if state.broker_epoch < 0 or state.fenced:
            log.info("broker %d: controlled shutdown skipped: %s", self.broker_id,
                     "not registered" if state.broker_epoch < 0 else "fenced")
            return False
        loop = asyncio.get_running_loop()
        deadline = loop.time() + deadline_s
        last: Any = None  # the controller's last answer, named if the deadline passes
        while True:
            peer = self._controller()
            if peer is None:
                log.info("broker %d: controlled shutdown abandoned: no active controller known", self.broker_id)
                return False
            try:
                response = await asyncio.wait_for(self._heartbeat(peer, want_shut_down=True),
                                                  max(deadline - loop.time(), 0.001))
            except PeerUnavailable as exc:
                log.info("broker %d: controlled shutdown abandoned: the controller did not answer: %s",
                         self.broker_id, exc)
                return False
            except TimeoutError:
                response = last
            else:
                last = response
                if response.error_code == ErrorCode.NONE and response.should_shut_down:
                    log.info("broker %d: controlled shutdown complete (broker epoch %d)",
                             self.broker_id, state.broker_epoch)
                    return True
                if response.error_code != ErrorCode.NONE and response.error_code != ErrorCode.NOT_CONTROLLER:
                    log.info("broker %d: controlled shutdown abandoned: heartbeat answered %s", self.broker_id,
                             ErrorCode(response.error_code).name)
                    return False
            if loop.time() >= deadline:
                got = ("no answer" if response is None else
                       f"error {ErrorCode(response.error_code).name}, fenced {response.is_fenced}, "
                       f"should_shut_down {response.should_shut_down}")
                log.warning("broker %d: controlled shutdown abandoned after %.1f s waiting for the controller at "
                            "%s:%s to answer ShouldShutDown for broker epoch %d; it last answered: %s", self.broker_id,
                            deadline_s, peer.host, peer.port, state.broker_epoch, got)
                return False
            await asyncio.sleep(SHUTDOWN_HEARTBEAT_S)

    def _next_wait_s(self) -> float:
        """Kafka's BrokerLifecycleManager pace: a refused registration is asked again after 0.2 s; a
        new registration heartbeats at once, and every 10 ms while the broker has not replayed the
        metadata up to it (STARTING), so a restarted broker is unfenced, and its followers fetch,
        within moments instead of a heartbeat interval later; then every broker.heartbeat.interval.ms."""
        state = self.state
        if state.broker_epoch < 0:
            return 0.2
        return STARTING_HEARTBEAT_S if state.fenced and not state.caught_up else self._interval

    async def _register(self, peer: PeerClient, cluster_id: str) -> None:
        schema = BROKER_REGISTRATION.request
        version = BROKER_REGISTRATION.max_version
        request = schema(
            broker_id=self.broker_id, cluster_id=cluster_id, incarnation_id=self.incarnation_id,
            listeners=[schema.Listener(name=item.name, host=item.host, port=item.port,
                                       security_protocol=item.security_protocol) for item in self.listeners],
            features=[], rack=self.rack, is_migrating_zk_broker=False, log_dirs=[],
            previous_broker_epoch=-1)
        response: Any = await peer.request(BROKER_REGISTRATION, version, request)
        if response.error_code == ErrorCode.NONE:
            self.state.broker_epoch = response.broker_epoch
            log.info("broker %d registered with epoch %d", self.broker_id, response.broker_epoch)
        else:
            log.info("broker %d: registration refused: %s", self.broker_id, ErrorCode(response.error_code).name)

    async def _heartbeat(self, peer: PeerClient, want_shut_down: bool = False) -> Any:
        schema = BROKER_HEARTBEAT.request
        short = self._short_local_logs() if self._short_local_logs is not None else {}
        request = schema(broker_id=self.broker_id, broker_epoch=self.state.broker_epoch,
                         current_metadata_offset=self._metadata_offset(), want_fence=False,
                         want_shut_down=want_shut_down,
                         offline_log_dirs=[], short_local_logs=[
                             schema.ShortLocalLogTopic(topic_id=topic_id, partitions=list(partitions))
                             for topic_id, partitions in short.items()])
        response: Any = await peer.request(BROKER_HEARTBEAT, BROKER_HEARTBEAT.max_version, request)
        error = response.error_code
        if error == ErrorCode.NONE:
            if self.state.fenced and not response.is_fenced:
                log.info("broker %d is unfenced", self.broker_id)
                self.ready.set()
            self.state.fenced = response.is_fenced
            self.state.caught_up = response.is_caught_up
        elif error in (ErrorCode.STALE_BROKER_EPOCH, ErrorCode.BROKER_ID_NOT_REGISTERED):
            log.info("broker %d: %s: registering again", self.broker_id, ErrorCode(error).name)
            self.state = BrokerState()
        else:
            log.info("broker %d: heartbeat answered %s", self.broker_id, ErrorCode(error).name)
        return response
