"""The async wrapper's calls stay serialized when a caller gives up: the call goes on running on its
thread (librdkafka cannot take it back), so the next call must wait for it, not only for its caller."""

from __future__ import annotations

import asyncio
import threading
import time

import pytest

from client_epochs.aio import AIOConsumer


def test_a_call_whose_caller_was_cancelled_still_holds_back_the_next_call() -> None:
    inside: list[str] = []
    overlaps: list[str] = []
    busy = threading.Lock()

    def blocking(name: str, seconds: float) -> str:
        if not busy.acquire(blocking=False):
            overlaps.append(name)
            busy.acquire()
        try:
            inside.append(name)
            time.sleep(seconds)
            return name
        finally:
            busy.release()

    async def scenario() -> str:
        consumer = AIOConsumer({"bootstrap.servers": "127.0.0.1:1", "group.id": "serial"}, max_workers=4)
        try:
            with pytest.raises(TimeoutError):
                await asyncio.wait_for(consumer._call(blocking, "cut", 0.5), 0.05)  # as a user's timeout does
            return await consumer._call(blocking, "next", 0.0)
        finally:
            await consumer.close()

    assert asyncio.run(scenario()) == "next"
    assert inside == ["cut", "next"] and overlaps == []
