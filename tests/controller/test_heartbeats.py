"""Broker sessions and the broker state machine (Kafka's BrokerHeartbeatManager)."""

from __future__ import annotations

import pytest

from quorum.controller.heartbeats import BrokerControlState, BrokerHeartbeatManager

FENCED, UNFENCED = BrokerControlState.FENCED, BrokerControlState.UNFENCED
CONTROLLED, NOW = BrokerControlState.CONTROLLED_SHUTDOWN, BrokerControlState.SHUTDOWN_NOW


def test_kafka_defaults() -> None:
    manager = BrokerHeartbeatManager()
    assert (manager.session_timeout_ms, manager.heartbeat_interval_ms) == (9000, 2000)
    with pytest.raises(ValueError):
        BrokerHeartbeatManager(0)


def test_session_expires_after_the_timeout() -> None:
    manager = BrokerHeartbeatManager(session_timeout_ms=100)
    manager.register(1, now_ms=1000)
    assert manager.has_valid_session(1, 1100)
    assert manager.expired([1], 1100) == []
    assert not manager.has_valid_session(1, 1101)
    assert manager.expired([1], 1101) == [1]
    manager.touch(1, 1101, metadata_offset=5)
    assert manager.expired([1], 1150) == []
    assert manager.metadata_offset(1) == 5
    assert manager.next_expiry_ms([1]) == 1202


def test_unknown_brokers_get_a_full_session_from_when_they_are_first_seen() -> None:
    manager = BrokerHeartbeatManager(session_timeout_ms=100)
    assert manager.expired([1, 2], 5000) == []
    assert manager.last_contact_ms(2) == 5000
    assert manager.expired([1, 2], 5101) == [1, 2]
    manager.clear()
    assert not manager.known(1)


def test_expired_longest_silent_first() -> None:
    manager = BrokerHeartbeatManager(session_timeout_ms=10)
    manager.register(1, 50)
    manager.register(2, 20)
    manager.register(3, 100)
    assert manager.expired([1, 2, 3], 100) == [2, 1]


def test_touch_never_moves_last_contact_back() -> None:
    manager = BrokerHeartbeatManager(session_timeout_ms=10)
    manager.register(1, 100)
    manager.touch(1, 90, 0)
    assert manager.last_contact_ms(1) == 100


def decide(manager: BrokerHeartbeatManager, current: BrokerControlState, *, want_fence: bool = False,
           want_shut_down: bool = False, offset: int = 100, registration: int = 50, leads: bool = False,
           active: tuple[int, ...] = ()) -> BrokerControlState:
    return manager.next_state(1, current, want_fence=want_fence, want_shut_down=want_shut_down,
                              metadata_offset=offset, registration_offset=registration,
                              has_leaderships=lambda: leads, active_broker_ids=lambda: active)


def test_fenced_broker_is_unfenced_once_caught_up_and_asking() -> None:
    manager = BrokerHeartbeatManager()
    manager.register(1, 0)
    assert decide(manager, FENCED, offset=49) is FENCED
    assert decide(manager, FENCED, offset=50) is UNFENCED
    assert decide(manager, FENCED, offset=50, want_fence=True) is FENCED
    assert decide(manager, FENCED, want_shut_down=True) is NOW


def test_unfenced_broker() -> None:
    manager = BrokerHeartbeatManager()
    manager.register(1, 0)
    assert decide(manager, UNFENCED) is UNFENCED
    assert decide(manager, UNFENCED, want_fence=True) is FENCED
    assert decide(manager, UNFENCED, want_fence=True, want_shut_down=True) is NOW
    assert decide(manager, UNFENCED, want_shut_down=True, leads=True) is CONTROLLED
    assert decide(manager, UNFENCED, want_shut_down=True, leads=False) is NOW


def test_controlled_shutdown_waits_for_leaderships_and_the_active_brokers() -> None:
    manager = BrokerHeartbeatManager()
    for broker in (1, 2, 3):
        manager.register(broker, 0)
    manager.enter_controlled_shutdown(1, 40)
    assert manager.in_controlled_shutdown(1)
    assert decide(manager, CONTROLLED, want_shut_down=True, leads=True) is CONTROLLED
    manager.touch(2, 1, 45)
    manager.touch(3, 1, 39)
    assert decide(manager, CONTROLLED, want_shut_down=True, active=(2, 3)) is CONTROLLED
    manager.touch(3, 2, 40)
    assert decide(manager, CONTROLLED, want_shut_down=True, active=(2, 3)) is NOW
    assert decide(manager, CONTROLLED, want_shut_down=True, active=()) is NOW
    manager.leave_controlled_shutdown(1)
    assert not manager.in_controlled_shutdown(1)


def test_state_flags() -> None:
    assert (FENCED.fenced, FENCED.in_controlled_shutdown, FENCED.should_shut_down) == (True, False, False)
    assert (CONTROLLED.fenced, CONTROLLED.in_controlled_shutdown) == (False, True)
    assert NOW.fenced and NOW.should_shut_down
    assert not UNFENCED.fenced
