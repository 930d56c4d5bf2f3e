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


class ShutdownController:
    """A PeerClient stand-in for a controlled shutdown: answers `in_shutdown` heartbeats in
    CONTROLLED_SHUTDOWN (still leading), then ShouldShutDown and fenced; records WantShutDown."""

    host, port = "127.0.0.1", 9093

    def __init__(self, in_shutdown: int, error: ErrorCode = ErrorCode.NONE) -> None:
        self.want_shut_down: list[bool] = []
        self._in_shutdown = in_shutdown
        self._error = error

    async def request(self, api: Any, version: int, body: Any) -> Any:
        assert api is HEARTBEAT
        self.want_shut_down.append(body.want_shut_down)
        done = len(self.want_shut_down) > self._in_shutdown
        return api.response(throttle_time_ms=0, error_code=self._error, is_caught_up=True, is_fenced=done,
                            should_shut_down=done)


class Unreachable:
    async def request(self, api: Any, version: int, body: Any) -> Any:
        raise broker_lifecycle.PeerUnavailable("connection refused")


def _unfenced(controller: Any) -> BrokerLifecycle:
    lifecycle = BrokerLifecycle(5, (), None, lambda: "cluster", lambda: controller, lambda: 42)
    lifecycle.state.broker_epoch, lifecycle.state.fenced = 7, False
    return lifecycle


def test_controlled_shutdown_heartbeats_want_shut_down_until_should_shut_down() -> None:
    controller = ShutdownController(in_shutdown=3)
    assert asyncio.run(_unfenced(controller).controlled_shutdown()) is True
    assert controller.want_shut_down == [True] * 4


def test_controlled_shutdown_gives_up_at_once_without_a_controller(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level("INFO", logger=broker_lifecycle.__name__):
        assert asyncio.run(_unfenced(None).controlled_shutdown()) is False
        assert asyncio.run(_unfenced(Unreachable()).controlled_shutdown()) is False
    assert "abandoned: no active controller known" in caplog.text
    assert "abandoned: the controller did not answer" in caplog.text


def test_controlled_shutdown_gives_up_on_an_error_answer() -> None:
    controller = ShutdownController(in_shutdown=0, error=ErrorCode.STALE_BROKER_EPOCH)
    assert asyncio.run(_unfenced(controller).controlled_shutdown()) is False
    assert controller.want_shut_down == [True]


def test_controlled_shutdown_gives_up_at_its_deadline(caplog: pytest.LogCaptureFixture) -> None:
    controller = ShutdownController(in_shutdown=10**9)  # never answers ShouldShutDown
    with caplog.at_level("WARNING", logger=broker_lifecycle.__name__):
        assert asyncio.run(_unfenced(controller).controlled_shutdown(deadline_s=0.2)) is False
    assert controller.want_shut_down and all(controller.want_shut_down)
    assert "waiting for the controller" in caplog.text and "broker epoch 7" in caplog.text
    assert "should_shut_down False" in caplog.text and "127.0.0.1:9093" in caplog.text


def test_a_fenced_or_unregistered_broker_skips_controlled_shutdown() -> None:
    controller = ShutdownController(in_shutdown=0)
    lifecycle = _unfenced(controller)
    lifecycle.state.fenced = True
    assert asyncio.run(lifecycle.controlled_shutdown()) is False
    assert asyncio.run(BrokerLifecycle(5, (), None, lambda: "c", lambda: controller, lambda: 0).controlled_shutdown()) \
        is False
    assert controller.want_shut_down == []
