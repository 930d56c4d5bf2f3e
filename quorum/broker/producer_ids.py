"""Producer ids for InitProducerId: blocks handed out by the active controller (KIP-730).

A producer id must never be handed out twice in a cluster's life: a partition that knows an id
with higher sequences refuses a new producer that got it again (OUT_OF_ORDER_SEQUENCE_NUMBER,
fatal for the producer), and one whose sequences happen to match takes its batches for
duplicates, acknowledged and never written. So, as Apache Kafka's brokers do (RPCProducerIdManager),
a broker takes its ids in blocks from the active controller (AllocateProducerIds), which records
each block in the metadata log before answering (`quorum.controller.producer_ids`): the cluster,
not the broker's disk, remembers which ids are gone, and a broker restarted with an empty disk and
the same id gets a fresh block like any other.

This replaces the earlier per-broker scheme (`(n << 31) | broker id`, n counted in a
`producer-id-block` file in the broker's first log dir), which started again at n = 0 on a wiped
disk. That file is no longer read or written; one left in an old log dir is ignored, and the
controller's first block starts above every id the old scheme made (see
`quorum.controller.producer_ids`).

The rules are Kafka's: the next block is asked for once 90% of the current one is handed out
(`PREFETCH_THRESHOLD`), so InitProducerId rarely waits; with no id left, InitProducerId waits
for a block at most `wait_s` and then answers COORDINATOR_LOAD_IN_PROGRESS, which clients retry
(Kafka's broker answers it at once while it has no block). One request for a block is in flight
at a time; a failed one (no controller known, the broker not registered yet, STALE_BROKER_EPOCH,
NOT_CONTROLLER, no answer) is logged and retried after a growing backoff while someone waits.

`ProducerIdBlocks` is the sans-IO part (which id is next, when to prefetch, refusing a block that
goes backwards); `ProducerIdManager` drives it on the event loop with a `BlockSource`: the
controller channel (`quorum.broker.allocate_producer_ids_rpc`), or `InProcessBlocks` for a broker
that has no controller (in-process test brokers), whose ids are unique within the process only.
"""

from __future__ import annotations

import asyncio
import logging
import threading
from dataclasses import dataclass
from typing import Protocol

logger = logging.getLogger(__name__)

PREFETCH_THRESHOLD = 0.9
"""Kafka's RPCProducerIdManager.PID_PREFETCH_THRESHOLD: ask for the next block once this share
of the current one is handed out."""
DEFAULT_WAIT_S = 10.0
"""How long InitProducerId waits for a block before answering COORDINATOR_LOAD_IN_PROGRESS."""
RETRY_BACKOFF_S = 0.1
MAX_RETRY_BACKOFF_S = 2.0


@dataclass(frozen=True, slots=True)
class ProducerIdBlock:
    """The ids [first, first + size) given to this broker."""

    first: int
    size: int

    @property
    def end(self) -> int:
        return self.first + self.size

    @property
    def prefetch_at(self) -> int:
        """Handing out this id (or a later one) asks for the next block."""
        return self.first + int(self.size * PREFETCH_THRESHOLD)


class BlockUnavailable(Exception):
    """A request for a block failed; the message says why (which controller, which broker epoch)."""


class ProducerIdsUnavailable(Exception):
    """No block came within the wait: InitProducerId answers COORDINATOR_LOAD_IN_PROGRESS."""


class BlockSource(Protocol):
    """Where blocks come from."""

    async def fetch(self) -> ProducerIdBlock:
        """The next block; BlockUnavailable saying why when there is none now."""
        ...

    def describe(self) -> str:
        """Whom `fetch` asks, for log lines: "the active controller (node 1) as broker 102 at broker epoch 45"."""
        ...


class ProducerIdBlocks:
    """The blocks this broker holds and the next id, sans-IO: `claim` an id, `add` a block that came."""

    def __init__(self) -> None:
        self._current: ProducerIdBlock | None = None
        self._next_id = 0
        self._prefetched: ProducerIdBlock | None = None
        self._highest_end = -1

    @property
    def prefetch_due(self) -> bool:
        """Whether to ask for a block now: none is prefetched and the current one is past the
        threshold, used up, or there is none."""
        if self._prefetched is not None:
            return False
        current = self._current
        return current is None or self._next_id > current.prefetch_at

    def claim(self) -> int | None:
        """The next id, or None when every id held is handed out (a block must come first)."""
        current = self._current
        if current is None or self._next_id >= current.end:
            if self._prefetched is None:
                return None
            current = self._current = self._prefetched
            self._prefetched = None
            self._next_id = current.first
        claimed = self._next_id
        self._next_id += 1
        return claimed

    def add(self, block: ProducerIdBlock) -> None:
        """Take a block that came. ValueError (nothing changes) for an empty or negative block, or
        one that starts below the end of a block already taken: its ids may have been handed out."""
        if block.size <= 0 or block.first < 0:
            raise ValueError(f"producer id block {block.first}+{block.size} is empty or negative")
        if block.first < self._highest_end:
            raise ValueError(f"producer id block {block.first}-{block.end - 1} starts below the end of a block "
                             f"already taken ({self._highest_end}): its ids may have been handed out")
        self._highest_end = block.end
        if self._current is None or self._next_id >= self._current.end:
            self._current, self._next_id = block, block.first
        else:
            self._prefetched = block


class ProducerIdManager:
    """Hands out producer ids from blocks that `source` gives; see the module docstring."""

    def __init__(self, broker_id: int, source: BlockSource, wait_s: float = DEFAULT_WAIT_S) -> None:
        self.broker_id = broker_id
        self.source = source
        self.wait_s = wait_s
        self.blocks = ProducerIdBlocks()
        self.last_error: str | None = None
        """Why the last request for a block failed (None after one succeeded)."""
        self._fetching: asyncio.Task[None] | None = None
        self._backoff_s = 0.0

    async def allocate(self) -> int:
        """The next producer id, waiting for a block at most `wait_s`; ProducerIdsUnavailable
        (saying what it waited for) after that."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.wait_s
        while True:
            claimed = self.blocks.claim()
            if claimed is not None:
                if self.blocks.prefetch_due:
                    self._fetch_soon()
                return claimed
            fetching = self._fetch_soon()
            remaining = deadline - loop.time()
            try:
                if remaining <= 0:
                    raise TimeoutError
                await asyncio.wait_for(asyncio.shield(fetching), remaining)
            except TimeoutError:
                why = f": {self.last_error}" if self.last_error else ": no answer yet"
                message = (f"broker {self.broker_id} has no producer id left and no block came from "
                           f"{self.source.describe()} within {self.wait_s:g} s{why}")  # fmt: skip
                logger.warning("%s", message)
                raise ProducerIdsUnavailable(message) from None

    def _fetch_soon(self) -> asyncio.Task[None]:
        """The request for a block in flight, started if there is none."""
        if self._fetching is None or self._fetching.done():
            self._fetching = asyncio.get_running_loop().create_task(self._fetch())
        return self._fetching

    async def _fetch(self) -> None:
        """Ask for one block (after the backoff a failure left); the outcome goes to `blocks` or `last_error`."""
        if self._backoff_s:
            await asyncio.sleep(self._backoff_s)
        try:
            block = await self.source.fetch()
            self.blocks.add(block)
        except (BlockUnavailable, ValueError) as exc:
            self.last_error = str(exc)
            self._backoff_s = min(max(self._backoff_s * 2, RETRY_BACKOFF_S), MAX_RETRY_BACKOFF_S)
            logger.info("broker %d: no producer id block from %s: %s (next try in %.1f s)", self.broker_id,
                        self.source.describe(), exc, self._backoff_s)  # fmt: skip
            return
        self.last_error = None
        self._backoff_s = 0.0
        logger.info("broker %d: producer id block %d-%d from %s", self.broker_id, block.first, block.end - 1,
                    self.source.describe())  # fmt: skip

    def close(self) -> None:
        """Stop a request for a block in flight (the broker is shutting down)."""
        if self._fetching is not None and not self._fetching.done():
            self._fetching.cancel()


class InProcessBlocks:
    """Blocks from a counter in this process, for a broker without a controller (in-process test
    brokers): unique within the process only, so never a cluster's source."""

    _next_first = 0  # shared by every instance: one process, one id space
    _lock = threading.Lock()  # in-process brokers may run on their own threads' loops

    def __init__(self, block_size: int = 1000) -> None:
        self.block_size = block_size

    async def fetch(self) -> ProducerIdBlock:
        with InProcessBlocks._lock:
            first = InProcessBlocks._next_first
            InProcessBlocks._next_first = first + self.block_size
        return ProducerIdBlock(first, self.block_size)

    def describe(self) -> str:
        return "this process (no controller)"


__all__ = [
    "DEFAULT_WAIT_S", "PREFETCH_THRESHOLD", "BlockSource", "BlockUnavailable", "InProcessBlocks", "ProducerIdBlock",
    "ProducerIdBlocks", "ProducerIdManager", "ProducerIdsUnavailable",
]
