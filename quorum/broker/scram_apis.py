"""DescribeUserScramCredentials on a broker: answered from the broker's own metadata image, as Kafka's
brokers answer it from their metadata cache's ScramImage (AlterUserScramCredentials is forwarded to the
active controller: `quorum.broker.forwarding`). Only mechanisms and iterations are told.
"""

from __future__ import annotations

from collections.abc import Callable

from quorum.controller.scram import DESCRIBE_USER_SCRAM_CREDENTIALS, describe_user_scram_credentials
from quorum.image.image import MetadataImage
from quorum.net.dispatch import Dispatcher, Reply
from quorum.wire.protocol import Request


def register_scram_apis(dispatcher: Dispatcher, image: Callable[[], MetadataImage]) -> None:
    """Serve DescribeUserScramCredentials on `dispatcher` from `image()` (the broker's latest replayed image)."""

    async def describe(request: Request) -> Reply:
        return Reply(describe_user_scram_credentials(request.body, image().scram), request.version)

    dispatcher.register(DESCRIBE_USER_SCRAM_CREDENTIALS, describe)
