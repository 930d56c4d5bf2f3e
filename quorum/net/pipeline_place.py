"""A pipelined request's place on its connection: the earlier requests still unanswered, and the
connection's turn to decide.

Kafka mutes a connection while one of its requests is processed, so each request is decided on
the state the broker is in once every earlier one is answered. A pipelined handler starts sooner
(Produce: an acks=all request waiting for its followers no longer holds back the appends behind
it). Deciding early is the same as deciding late only when nothing the earlier answers wait for
can change the decision. A Produce refused early because the ISR is under min.insync.replicas or
the partition is not led here, followed by one decided after the ISR grew back, is answered
OUT_OF_ORDER_SEQUENCE_NUMBER, which Kafka never answers there: librdkafka then bumps the
producer's epoch and writes again, under the new epoch, records it had already had written
(confluentinc/librdkafka#4953). So such a handler waits for `earlier_answered` and decides then,
holding `turn` meanwhile so that the requests behind it are decided after it, in request order.

The listener sets the place (`set_pipeline_place`) just before it starts each pipelined handler,
whose task keeps a copy of the context; outside a listener the place is empty.
"""

from __future__ import annotations

import asyncio
from contextvars import ContextVar
from dataclasses import dataclass, field


@dataclass(frozen=True, slots=True)
class PipelinePlace:
    earlier: tuple[asyncio.Future[object], ...] = ()
    """The handlers of the same API on this connection started before this one and unanswered then."""
    turn: asyncio.Lock = field(default_factory=asyncio.Lock)
    """One per connection and API: held while a request is decided (FIFO, so in request order)."""
    closed: asyncio.Event = field(default_factory=asyncio.Event)
    """Set when the connection ended: a request still waiting to be decided is dropped, as Kafka
    never reads the requests behind a muted connection that closes."""

    @property
    def earlier_pending(self) -> bool:
        return any(not answered.done() for answered in self.earlier)

    async def earlier_answered(self) -> bool:
        """Until every earlier request is answered (however: an error counts as an answer); False
        when the connection ended first."""
        ended = asyncio.ensure_future(self.closed.wait())
        try:
            while self.earlier_pending and not ended.done():
                pending = [answered for answered in self.earlier if not answered.done()]
                await asyncio.wait((*pending, ended), return_when=asyncio.FIRST_COMPLETED)
        finally:
            ended.cancel()
        return not self.closed.is_set()


_CURRENT: ContextVar[PipelinePlace | None] = ContextVar("quorum_pipeline_place", default=None)


def pipeline_place() -> PipelinePlace:
    """The place of the request being handled; an empty one (nothing earlier, a turn of its own)
    outside a listener."""
    return _CURRENT.get() or PipelinePlace()


def set_pipeline_place(place: PipelinePlace) -> None:
    _CURRENT.set(place)
