"""The broker's registration and heartbeat pace (Kafka's BrokerLifecycleManager): a restarted broker
heartbeats at once after registering and every 10 ms until it has replayed the metadata up to its
registration, so it is unfenced (and its followers fetch) moments after it starts, not a heartbeat
interval later."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from quorum.server import broker_lifecycle
from quorum.server.broker_lifecycle import STARTING_HEARTBEAT_S, BrokerLifecycle
from quorum.wire.errors import ErrorCode

REGISTRATION = broker_lifecycle.BROKER_REGISTRATION
HEARTBEAT = broker_lifecycle.BROKER_HEARTBEAT


class ScriptedController:
    """A PeerClient stand-in: refuses the first registration (the old incarnation's session is alive),
    then accepts; heartbeats answer not caught up twice, then caught up and unfenced."""

    def __init__(self) -> None:
        self.calls: list[str] = []
        self.heartbeats = 0

    async def request(self, api: Any, version: int, body: Any) -> Any:
        if api is REGISTRATION:
            refused = not self.calls
            self.calls.append("register")
            return api.response(throttle_time_ms=0, broker_epoch=-1 if refused else 7,
                                error_code=ErrorCode.DUPLICATE_BROKER_REGISTRATION if refused else ErrorCode.NONE)
        self.heartbeats += 1
        self.calls.append("heartbeat")
        caught_up = self.heartbeats > 2
        return api.response(throttle_time_ms=0, error_code=0, is_caught_up=caught_up, is_fenced=not caught_up,
                            should_shut_down=False)


def test_a_registered_broker_heartbeats_at_once_then_every_10_ms_until_caught_up(
        monkeypatch: pytest.MonkeyPatch) -> None:
    controller = ScriptedController()
    lifecycle = BrokerLifecycle(5, (), None, lambda: "cluster", lambda: controller, lambda: 0,  # type: ignore[arg-type, return-value]
                                heartbeat_interval_ms=2000)
    waits: list[tuple[int, float]] = []  # (calls made so far, the wait before the next one)

    async def sleep(seconds: float) -> None:
        waits.append((len(controller.calls), seconds))
        if len(controller.calls) >= 6:
            raise asyncio.CancelledError

    monkeypatch.setattr(broker_lifecycle.asyncio, "sleep", sleep)
    with pytest.raises(asyncio.CancelledError):
        asyncio.run(lifecycle.run())
    assert controller.calls == ["register", "register", "heartbeat", "heartbeat", "heartbeat", "heartbeat"]
    # refused: 0.2 s; registered: no wait; fenced and not caught up: 10 ms twice; unfenced: the interval
    assert waits == [(1, 0.2), (3, STARTING_HEARTBEAT_S), (4, STARTING_HEARTBEAT_S), (5, 2.0), (6, 2.0)]
    assert not lifecycle.state.fenced and lifecycle.ready.is_set()
