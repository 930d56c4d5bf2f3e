"""The demo's waits: each has a deadline, and past it the demo stops naming what it waited for.

A demo that waits without a deadline is a demo that hangs in front of a new user (it once printed
`partitions=0` for eight minutes). Every step that waits goes through `wait_for`, which raises
`DemoFailure` with what was awaited and the node logs that say why; `examples.demo.main` prints it
and exits non-zero.
"""

from __future__ import annotations

import shutil
import tempfile
import time
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TypeVar

T = TypeVar("T")


class DemoFailure(RuntimeError):
    """A step of the demo did not happen in time, or failed; the message says which and where to look."""

    def __init__(self, what: str, logs: Iterable[Path] = ()) -> None:
        logs = list(logs)
        super().__init__(what + (f" (read {', '.join(map(str, logs))})" if logs else ""))


def wait_for(what: str, condition: Callable[[], T | None], timeout_s: float, logs: Iterable[Path] = (),
             interval_s: float = 0.2) -> T:
    """The first truthy value of `condition()` within `timeout_s`; DemoFailure naming `what` and `logs`
    otherwise. An exception from `condition` counts as not yet (the last one is quoted)."""
    deadline = time.monotonic() + timeout_s
    last: Exception | None = None
    while True:
        try:
            result = condition()
        except Exception as exc:  # a client that cannot connect yet, a broker still electing
            result, last = None, exc
        if result:
            return result
        if time.monotonic() >= deadline:
            detail = f"; last error: {last}" if last is not None else ""
            raise DemoFailure(f"waited {timeout_s:g} s for {what}{detail}", logs)
        time.sleep(interval_s)


@contextmanager
def scratch_directory(prefix: str) -> Iterator[str]:
    """A temporary directory for a cluster, removed when the block succeeds and kept when it fails,
    so that the node logs a failure message names are still there to read."""
    directory = tempfile.mkdtemp(prefix=prefix)
    try:
        yield directory
    except BaseException:
        print(f"(kept {directory} with the nodes' configs, data and logs)", flush=True)
        raise
    shutil.rmtree(directory, ignore_errors=True)
