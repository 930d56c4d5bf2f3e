"""AllocateProducerIds (API 67, KIP-730) from the broker to the active controller: a `BlockSource`.

The request goes over the broker's controller channel, as heartbeats and AlterPartition do
(`NodeServices.controller_peer`), with the broker epoch of its current registration. Every
failure is a `BlockUnavailable` naming the controller and the broker epoch: no controller known,
the broker not registered yet (epoch -1), no answer, or an error answer (STALE_BROKER_EPOCH
while the broker registers again, NOT_CONTROLLER while leadership moves), all of which the
`ProducerIdManager` retries.
"""

from __future__ import annotations

from collections.abc import Callable

from quorum.broker.producer_ids import BlockUnavailable, ProducerIdBlock
from quorum.net.peer_client import PeerClient, PeerUnavailable
from quorum.wire.errors import ErrorCode, error_name
from quorum.wire.protocol import APIS

ALLOCATE_PRODUCER_IDS = APIS[67]
ALLOCATE_PRODUCER_IDS_VERSION = 0


class ControllerBlocks:
    """Blocks of producer ids from the active controller, for broker `broker_id`."""

    def __init__(self, broker_id: int, controller: Callable[[], PeerClient | None],
                 controller_id: Callable[[], int | None], broker_epoch: Callable[[], int]) -> None:
        """`controller()`: the channel to the active controller (None when none is known);
        `controller_id()`: its node id, for log lines; `broker_epoch()`: this broker's current one
        (-1 while it is not registered)."""
        self.broker_id = broker_id
        self._controller = controller
        self._controller_id = controller_id
        self._broker_epoch = broker_epoch

    def describe(self) -> str:
        controller = self._controller_id()
        who = "no active controller known" if controller is None or controller < 0 else \
            f"the active controller (node {controller})"
        return f"{who} as broker {self.broker_id} at broker epoch {self._broker_epoch()}"

    async def fetch(self) -> ProducerIdBlock:
        peer = self._controller()
        epoch = self._broker_epoch()
        if peer is None:
            raise BlockUnavailable("no active controller is known yet")
        if epoch < 0:
            raise BlockUnavailable(f"broker {self.broker_id} is not registered with the controller yet")
        request = ALLOCATE_PRODUCER_IDS.request(broker_id=self.broker_id, broker_epoch=epoch)
        try:
            response = await peer.request(ALLOCATE_PRODUCER_IDS, ALLOCATE_PRODUCER_IDS_VERSION, request)
        except PeerUnavailable as exc:
            raise BlockUnavailable(f"the controller did not answer: {exc}") from None
        if response.error_code != ErrorCode.NONE:
            raise BlockUnavailable(f"the controller answered {error_name(response.error_code)} to broker epoch {epoch}")
        return ProducerIdBlock(response.producer_id_start, response.producer_id_len)


__all__ = ["ALLOCATE_PRODUCER_IDS", "ControllerBlocks"]
