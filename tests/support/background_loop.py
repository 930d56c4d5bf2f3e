"""An asyncio server run on its own thread, so synchronous clients (kafka-python, confluent-kafka,
kcat) can talk to it from the test's thread."""

from __future__ import annotations

import asyncio
import concurrent.futures
import threading
from collections.abc import Callable
from typing import Any, Self


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


class BackgroundLoop:
    """An event loop on a thread of its own, so a test's thread can drive async clients (the async
    wrappers of client_epochs) with plain calls: `run(coroutine)` waits for its result, with a deadline.
    `close()` (or leaving the context) stops the loop and joins the thread."""

    def __init__(self, name: str = "test-loop") -> None:
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self.loop.run_forever, name=name, daemon=True)
        self._thread.start()

    def run(self, coroutine: Any, timeout_s: float = 60.0, what: str | None = None) -> Any:
        """The result of `coroutine`, run on the loop; TimeoutError naming `what` after `timeout_s`."""
        future = asyncio.run_coroutine_threadsafe(coroutine, self.loop)
        try:
            return future.result(timeout_s)
        except concurrent.futures.TimeoutError:
            future.cancel()
            raise TimeoutError(f"{what or coroutine!r} did not finish within {timeout_s} s") from None

    def call(self, function: Callable[..., Any], *args: Any, timeout_s: float = 30.0) -> Any:
        """`function(*args)` called on the loop's thread (a client whose plain methods touch the loop)."""

        async def called() -> Any:
            return function(*args)

        return self.run(called(), timeout_s, what=getattr(function, "__qualname__", repr(function)))

    def close(self) -> None:
        if self.loop.is_closed():
            return
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(10)
        assert not self._thread.is_alive(), "the background event loop did not stop within 10 s"
        self.loop.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
