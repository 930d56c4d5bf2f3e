"""DescribeAcls on a broker: answered from the broker's own metadata image, as Kafka's brokers answer
it from their authorizer's ACL cache (CreateAcls and DeleteAcls are forwarded to the controller:
`quorum.broker.forwarding`)."""

from __future__ import annotations

from collections.abc import Callable

from quorum.controller.acls import DESCRIBE_ACLS, describe_acls
from quorum.image.image import MetadataImage
from quorum.net.dispatch import Dispatcher, Reply
from quorum.wire.protocol import Request


def register_acl_apis(dispatcher: Dispatcher, image: Callable[[], MetadataImage]) -> None:
    """Serve DescribeAcls on `dispatcher` from `image()` (the broker's latest replayed image)."""

    async def describe(request: Request) -> Reply:
        return Reply(describe_acls(request.body, image().acls), request.version)

    dispatcher.register(DESCRIBE_ACLS, describe)
