"""Producer ids for InitProducerId: unique across the cluster's brokers and across restarts.

Apache Kafka's brokers take blocks of 1000 ids from the controller (AllocateProducerIds, KIP-730,
recorded in the metadata log). Until this cluster's controller does that, each broker owns a
disjoint share of the id space and persists how far it has handed ids out:

* id = (n << 31) | broker id, for n = 0, 1, 2, ... Broker ids are non-negative int32s, so two
  brokers never make the same id, and n < 2^32 keeps ids positive int64s.
* n is handed out in blocks of `BLOCK_SIZE`: before the first id of a block is returned, the end
  of the block is written to `producer-id-block` in the broker's first log dir (Kafka's
  checkpoint text layout: a version line, then the next unreserved n), atomically and durably.
  After a restart, allocation resumes at the recorded end, so an id handed out before the crash
  is never handed out again; at most one block of ids is skipped.
"""

from __future__ import annotations

import logging
from pathlib import Path

from quorum.log.atomic import atomic_write, read_text_file
from quorum.log.errors import CorruptFileError

logger = logging.getLogger(__name__)

PRODUCER_ID_BLOCK_NAME = "producer-id-block"
BLOCK_SIZE = 1000
_VERSION = 0
_BROKER_BITS = 31
_MAX_COUNTER = 2**32 - 1


class ProducerIdsExhausted(Exception):
    """This broker handed out every id of its share (4 billion): a fatal condition to report."""


def _read_next(path: Path) -> int:
    text = read_text_file(path)
    if text is None:
        return 0
    lines = text.split()
    if len(lines) != 2 or lines[0] != str(_VERSION) or not lines[1].isdigit():
        raise CorruptFileError(path, f"expected a version line '{_VERSION}' and a counter line, found {text!r}")
    return int(lines[1])


class ProducerIdAllocator:
    """Hands out this broker's producer ids; see the module docstring for the scheme."""

    def __init__(self, broker_id: int, directory: Path | str, block_size: int = BLOCK_SIZE) -> None:
        """Raises CorruptFileError when `producer-id-block` exists but does not parse: guessing could
        hand out ids twice."""
        if not 0 <= broker_id < 2**_BROKER_BITS:
            raise ValueError(f"broker id {broker_id} is outside 0..{2**_BROKER_BITS - 1}")
        self.broker_id = broker_id
        self.path = Path(directory) / PRODUCER_ID_BLOCK_NAME
        self.block_size = block_size
        self._next = self._reserved = _read_next(self.path)

    def allocate(self) -> int:
        """The next producer id, durable before it is returned (a block at a time)."""
        if self._next >= self._reserved:
            end = self._next + self.block_size
            if end > _MAX_COUNTER:
                raise ProducerIdsExhausted(f"broker {self.broker_id} has handed out all of its producer ids")
            self.path.parent.mkdir(parents=True, exist_ok=True)
            atomic_write(self.path, f"{_VERSION}\n{end}\n".encode("ascii"))
            self._reserved = end
            logger.debug("%s: reserved producer id block up to %d", self.path, end)
        counter = self._next
        self._next += 1
        return (counter << _BROKER_BITS) | self.broker_id
