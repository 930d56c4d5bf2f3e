"""DescribeAcls on a broker: answered from the broker's own metadata image, as Kafka's brokers answer
it from their authorizer's ACL cache (CreateAcls and DeleteAcls are forwarded to the controller:
`quorum.broker.forwarding`).

A broker without `authorizer.class.name` answers all three SECURITY_DISABLED ("No Authorizer is
configured."), as Kafka's do: ACLs it would store could never be enforced.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from quorum.controller.acls import CREATE_ACLS, DELETE_ACLS, DESCRIBE_ACLS, describe_acls
from quorum.image.image import MetadataImage
from quorum.net.dispatch import Dispatcher, Reply
from quorum.wire.errors import ErrorCode
from quorum.wire.protocol import APIS, Request

NO_AUTHORIZER = "No Authorizer is configured."


def register_acl_apis(dispatcher: Dispatcher, image: Callable[[], MetadataImage],
                      refuse: Callable[[Request, int, str], Any], authorizer: bool) -> None:
    """Serve DescribeAcls on `dispatcher` from `image()` (the broker's latest replayed image); without
    an `authorizer`, answer the three ACL APIs SECURITY_DISABLED instead (registered after forwarding;
    `refuse(request, error, message)` names every ACL or filter of the request)."""

    async def describe(request: Request) -> Reply:
        return Reply(describe_acls(request.body, image().acls), request.version)

    async def disabled(request: Request) -> Reply:
        if request.api.key == DESCRIBE_ACLS:
            body = APIS[DESCRIBE_ACLS].response(throttle_time_ms=0, error_code=ErrorCode.SECURITY_DISABLED,
                                                error_message=NO_AUTHORIZER, resources=[])
        else:
            body = refuse(request, ErrorCode.SECURITY_DISABLED, NO_AUTHORIZER)
        return Reply(body, request.version)

    if authorizer:
        dispatcher.register(DESCRIBE_ACLS, describe)
        return
    for key in (DESCRIBE_ACLS, CREATE_ACLS, DELETE_ACLS):
        dispatcher.register(key, disabled)
