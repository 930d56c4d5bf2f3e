"""An asyncio server run on its own thread, so synchronous clients (kafka-python, confluent-kafka,
kcat) can talk to it from the test's thread."""

from __future__ import annotations

import asyncio
import threading
from typing import Self


class BackgroundServer:
    """Subclasses implement `_serve()`: start listening, set `self.port`, then await `self._stop`
    and close. Used as a context manager; `address` is where clients connect."""

    def __init__(self) -> None:
        self._loop = asyncio.new_event_loop()
        self._ready = threading.Event()
        self._thread = threading.Thread(target=self._loop.run_until_complete, args=(self._main(),), daemon=True)
        self.port = 0

    def __enter__(self) -> Self:
        self._thread.start()
        assert self._ready.wait(10), f"{type(self).__name__} did not start"
        return self

    def __exit__(self, *exc: object) -> None:
        self._loop.call_soon_threadsafe(self._stop.set)
        self._thread.join(10)

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    async def _main(self) -> None:
        self._stop = asyncio.Event()
        await self._serve()

    async def _serve(self) -> None:
        raise NotImplementedError

    def _started(self, port: int) -> None:
        self.port = port
        self._ready.set()
