"""Broker sessions and the broker state machine: the soft state of the active controller (KIP-631).

Only the active controller keeps it, and nothing of it is in the log: a controller that becomes
active starts with no sessions and gives every broker a full session timeout from the first time
it looks at it (`track`), as Kafka's controller does when it activates.

A broker's session is valid while `now_ms <= last contact + broker.session.timeout.ms`; a broker
whose session expired must be fenced. The next state of a broker at a heartbeat follows Kafka's
BrokerHeartbeatManager.calculateNextBrokerState:

* FENCED: WantShutDown -> SHUTDOWN_NOW; not WantFence and caught up (CurrentMetadataOffset at or
  past the offset of its registration record) -> UNFENCED; else FENCED.
* UNFENCED: WantFence -> SHUTDOWN_NOW with WantShutDown, else FENCED; WantShutDown -> CONTROLLED_SHUTDOWN
  while it leads partitions, else SHUTDOWN_NOW; else UNFENCED.
* CONTROLLED_SHUTDOWN: stays until it leads nothing and every active broker has replayed the
  records that moved its leaderships away (the lowest active metadata offset reaches its
  controlled shutdown offset); then SHUTDOWN_NOW.

Controlled shutdown is soft state here too (no BrokerRegistrationChangeRecord is written), as in
Kafka before metadata version 3.3: after a failover the broker asks again and gets it again.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from enum import Enum

DEFAULT_SESSION_TIMEOUT_MS = 9000
"""Kafka's default of `broker.session.timeout.ms`."""
DEFAULT_HEARTBEAT_INTERVAL_MS = 2000
"""Kafka's default of `broker.heartbeat.interval.ms`."""

NO_OFFSET = -1
_MAX_OFFSET = sys.maxsize


class BrokerControlState(Enum):
    """Kafka's BrokerControlState: (fenced, in controlled shutdown, should shut down)."""

    FENCED = (True, False, False)
    UNFENCED = (False, False, False)
    CONTROLLED_SHUTDOWN = (False, True, False)
    SHUTDOWN_NOW = (True, False, True)

    @property
    def fenced(self) -> bool:
        return self.value[0]

    @property
    def in_controlled_shutdown(self) -> bool:
        return self.value[1]

    @property
    def should_shut_down(self) -> bool:
        return self.value[2]


@dataclass(slots=True)
class _Session:
    last_contact_ms: int
    metadata_offset: int = NO_OFFSET
    controlled_shutdown_offset: int = NO_OFFSET
    """The offset every active broker must reach before this one may shut down; -1 when not shutting down."""


class BrokerHeartbeatManager:
    """Per-broker last contact, replayed metadata offset and controlled shutdown, and the state decisions."""

    def __init__(self, session_timeout_ms: int = DEFAULT_SESSION_TIMEOUT_MS,
                 heartbeat_interval_ms: int = DEFAULT_HEARTBEAT_INTERVAL_MS) -> None:
        if session_timeout_ms <= 0 or heartbeat_interval_ms <= 0:
            raise ValueError("broker.session.timeout.ms and broker.heartbeat.interval.ms must be positive")
        self.session_timeout_ms = session_timeout_ms
        self.heartbeat_interval_ms = heartbeat_interval_ms
        self._sessions: dict[int, _Session] = {}

    # -- sessions ------------------------------------------------------------------------------

    def register(self, broker_id: int, now_ms: int) -> None:
        """A (re)registration: a fresh session, nothing replayed yet, not shutting down."""
        self._sessions[broker_id] = _Session(now_ms)

    def track(self, broker_id: int, now_ms: int) -> None:
        """Start the session of a broker seen for the first time since this controller became active."""
        if broker_id not in self._sessions:
            self._sessions[broker_id] = _Session(now_ms)

    def touch(self, broker_id: int, now_ms: int, metadata_offset: int) -> None:
        """A heartbeat arrived: the session is renewed and the broker's replayed offset noted."""
        session = self._sessions.get(broker_id)
        if session is None:
            self._sessions[broker_id] = _Session(now_ms, metadata_offset)
        else:
            session.last_contact_ms = max(session.last_contact_ms, now_ms)
            session.metadata_offset = metadata_offset

    def remove(self, broker_id: int) -> None:
        self._sessions.pop(broker_id, None)

    def clear(self) -> None:
        """Forget everything: this controller is no longer active."""
        self._sessions.clear()

    def known(self, broker_id: int) -> bool:
        return broker_id in self._sessions

    def last_contact_ms(self, broker_id: int) -> int | None:
        session = self._sessions.get(broker_id)
        return None if session is None else session.last_contact_ms

    def metadata_offset(self, broker_id: int) -> int:
        session = self._sessions.get(broker_id)
        return NO_OFFSET if session is None else session.metadata_offset

    def has_valid_session(self, broker_id: int, now_ms: int) -> bool:
        session = self._sessions.get(broker_id)
        return session is not None and now_ms <= session.last_contact_ms + self.session_timeout_ms

    def expired(self, broker_ids: Iterable[int], now_ms: int) -> list[int]:
        """Of `broker_ids` (the unfenced brokers), those whose session expired, longest silent first.

        A broker not known yet starts its session now (`track`), so it is never expired here.
        """
        found = []
        for broker in broker_ids:
            self.track(broker, now_ms)
            session = self._sessions[broker]
            if now_ms > session.last_contact_ms + self.session_timeout_ms:
                found.append((session.last_contact_ms, broker))
        return [broker for _, broker in sorted(found)]

    def next_expiry_ms(self, broker_ids: Iterable[int]) -> int | None:
        """The first time at which one of `broker_ids` (tracked ones) will have expired, or None."""
        deadlines = [session.last_contact_ms + self.session_timeout_ms + 1
                     for broker in broker_ids if (session := self._sessions.get(broker)) is not None]
        return min(deadlines, default=None)

    # -- controlled shutdown -------------------------------------------------------------------

    def enter_controlled_shutdown(self, broker_id: int, offset: int) -> None:
        """The broker's leaderships were moved by records up to `offset`."""
        session = self._sessions.get(broker_id)
        if session is not None:
            session.controlled_shutdown_offset = max(offset, 0)

    def leave_controlled_shutdown(self, broker_id: int) -> None:
        """A fenced broker leaves controlled shutdown; at its next heartbeat it shuts down at once."""
        session = self._sessions.get(broker_id)
        if session is not None:
            session.controlled_shutdown_offset = NO_OFFSET

    def in_controlled_shutdown(self, broker_id: int) -> bool:
        session = self._sessions.get(broker_id)
        return session is not None and session.controlled_shutdown_offset >= 0

    def lowest_active_offset(self, active_broker_ids: Iterable[int]) -> int:
        """The lowest replayed offset among `active_broker_ids` (unfenced, not shutting down)."""
        return min((self.metadata_offset(broker) for broker in active_broker_ids), default=_MAX_OFFSET)

    # -- the state machine ---------------------------------------------------------------------

    def next_state(self, broker_id: int, current: BrokerControlState, *, want_fence: bool, want_shut_down: bool,
                   metadata_offset: int, registration_offset: int, has_leaderships: Callable[[], bool],
                   active_broker_ids: Callable[[], Iterable[int]]) -> BrokerControlState:
        """The state a heartbeat moves the broker to (see the module docstring)."""
        if current is BrokerControlState.FENCED:
            if want_shut_down:
                return BrokerControlState.SHUTDOWN_NOW
            if not want_fence and metadata_offset >= registration_offset:
                return BrokerControlState.UNFENCED
            return BrokerControlState.FENCED
        if current is BrokerControlState.UNFENCED:
            if want_fence:
                return BrokerControlState.SHUTDOWN_NOW if want_shut_down else BrokerControlState.FENCED
            if want_shut_down:
                return BrokerControlState.CONTROLLED_SHUTDOWN if has_leaderships() else BrokerControlState.SHUTDOWN_NOW
            return BrokerControlState.UNFENCED
        if current is BrokerControlState.CONTROLLED_SHUTDOWN:
            if has_leaderships():
                return BrokerControlState.CONTROLLED_SHUTDOWN
            session = self._sessions.get(broker_id)
            shutdown_offset = NO_OFFSET if session is None else session.controlled_shutdown_offset
            if shutdown_offset <= self.lowest_active_offset(active_broker_ids()):
                return BrokerControlState.SHUTDOWN_NOW
            return BrokerControlState.CONTROLLED_SHUTDOWN
        return BrokerControlState.SHUTDOWN_NOW


__all__ = [
    "DEFAULT_HEARTBEAT_INTERVAL_MS", "DEFAULT_SESSION_TIMEOUT_MS", "BrokerControlState", "BrokerHeartbeatManager",
]
