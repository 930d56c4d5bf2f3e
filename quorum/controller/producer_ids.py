"""KIP-730: the active controller hands brokers blocks of producer ids, recorded in the metadata log.

A broker asks with AllocateProducerIds (its id and broker epoch); the controller, as Kafka's
ProducerIdControlManager does, checks that the broker is registered with that epoch
(STALE_BROKER_EPOCH otherwise, Kafka's ClusterControlManager.checkBrokerEpoch), takes the block of
`BLOCK_SIZE` ids that starts at the image's `next_producer_id`, and writes a ProducerIdsRecord
whose NextProducerId is the end of that block. The broker is answered once the record is
committed, so a block it was given is durable in the quorum: a restarted controller, one that
loaded a snapshot (which carries the next producer id), or a new active controller starts from
the end of the last committed block and never hands a block out twice. A broker restarted with
an empty disk gets a fresh block like any other: producer ids no longer depend on the broker's
own files.

Where the first block starts. Kafka's first block starts at 0. Before KIP-730 came to this
project, each broker made its ids itself as `(n << 31) | broker id` with n counted on its own
disk, so producer state in data dirs written then holds such ids, and a block from 0 would hand
out ids like 102 that broker 102 had used (its first id). The rule chosen is the simplest safe
one: the first block starts at `FIRST_PRODUCER_ID` = 2^62. The old ids are below 2^62 unless a
broker handed out more than 2^31 of them (n >= 2^31, far beyond any real history), and
2^63 - 2^62 ids remain for blocks, which no cluster exhausts.
"""

from __future__ import annotations

import logging
from typing import Any

from quorum.controller import records as rec
from quorum.controller.results import ControllerResult
from quorum.controller.view import ControllerView
from quorum.wire.errors import ErrorCode
from quorum.wire.protocol import APIS

log = logging.getLogger(__name__)

ALLOCATE_PRODUCER_IDS = 67
BLOCK_SIZE = 1000
"""Kafka's ProducerIdsBlock.PRODUCER_ID_BLOCK_SIZE."""
FIRST_PRODUCER_ID = 1 << 62
"""Where the first block starts: above every id the per-broker scheme made (module docstring)."""
MAX_PRODUCER_ID = (1 << 63) - 1


def next_block_start(view: ControllerView) -> int:
    """The first id of the next block: the image's next producer id, never below FIRST_PRODUCER_ID."""
    return max(view.next_producer_id, FIRST_PRODUCER_ID)


def allocate_producer_ids(request: Any, view: ControllerView) -> ControllerResult:
    """AllocateProducerIds: the next block for a registered broker, and its ProducerIdsRecord."""
    response = APIS[ALLOCATE_PRODUCER_IDS].response
    broker, epoch = request.broker_id, request.broker_epoch
    registration = view.registrations.get(broker)
    if registration is None or registration.broker_epoch != epoch:
        log.info("AllocateProducerIds from broker %d with broker epoch %d refused: %s", broker, epoch,
                 "it is not registered" if registration is None
                 else f"its registered broker epoch is {registration.broker_epoch}")  # fmt: skip
        return ControllerResult((), response(throttle_time_ms=0, error_code=ErrorCode.STALE_BROKER_EPOCH,
                                             producer_id_start=-1, producer_id_len=0))  # fmt: skip
    start = next_block_start(view)
    if start > MAX_PRODUCER_ID - BLOCK_SIZE:
        log.error("AllocateProducerIds from broker %d: every producer id has been handed out (next %d)",
                  broker, start)  # fmt: skip
        return ControllerResult((), response(throttle_time_ms=0, error_code=ErrorCode.UNKNOWN_SERVER_ERROR,
                                             producer_id_start=-1, producer_id_len=0))  # fmt: skip
    record = rec.encode(rec.producer_ids(broker, epoch, start + BLOCK_SIZE))
    return ControllerResult((record,), response(throttle_time_ms=0, error_code=ErrorCode.NONE,
                                                producer_id_start=start, producer_id_len=BLOCK_SIZE))  # fmt: skip


__all__ = ["ALLOCATE_PRODUCER_IDS", "BLOCK_SIZE", "FIRST_PRODUCER_ID", "allocate_producer_ids", "next_block_start"]
