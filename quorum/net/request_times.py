"""The moments of one request's life, as Kafka's `RequestChannel.Request` keeps them, for its
request metrics (`quorum.server.request_metrics`).

The listener makes a `RequestTimes` when a request's frame has been read and sets it as the
handler's context (`handling`); a handler whose answer waits for other brokers or for data calls
`mark_local_complete` when its own work is done and the wait begins (a Produce's append before
its acks=all wait, a Fetch going into its long poll), as Kafka's handler sets
`apiLocalCompleteTimeNanos` when it parks a request in a purgatory. Outside a listener (tests
calling a handler directly) there is no context and the marks are no-ops.
"""

from __future__ import annotations

import time
from contextvars import ContextVar
from dataclasses import dataclass


@dataclass(slots=True)
class RequestTimes:
    """`time.perf_counter()` seconds; 0.0 until reached (local_done stays 0.0 when never marked)."""

    received: float
    """The whole frame read (Kafka's startTimeNanos)."""
    started: float = 0.0
    """The handler began (requestDequeueTimeNanos)."""
    local_done: float = 0.0
    """The handler's own work done, a wait on others beginning (apiLocalCompleteTimeNanos)."""
    answered: float = 0.0
    """The handler returned its answer (responseCompleteTimeNanos)."""
    send_started: float = 0.0
    """The answer's turn to be written came (responseDequeueTimeNanos)."""
    sent: float = 0.0
    """The transport took the whole answer (endTimeNanos)."""


_CURRENT: ContextVar[RequestTimes | None] = ContextVar("quorum_request_times", default=None)


def handling(times: RequestTimes) -> None:
    """Make `times` the context of the handler about to run (in the task that runs it)."""
    _CURRENT.set(times)


def current_request_times() -> RequestTimes | None:
    return _CURRENT.get()


def mark_local_complete() -> None:
    """The handler's own work is done; what follows is a wait on other brokers or on data."""
    times = _CURRENT.get()
    if times is not None and not times.local_done:
        times.local_done = time.perf_counter()
