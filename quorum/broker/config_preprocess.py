"""The part of AlterConfigs and IncrementalAlterConfigs a broker answers itself, before forwarding the rest.

Kafka's broker (ConfigAdminManager.preprocess) answers, without asking the controller, every entry
of a resource named more than once, and a BROKER resource that names another broker: a broker's own
dynamic configs are sent to, and validated by, that broker (librdkafka and kafka-python send each
BROKER resource to the broker it names), so a resource must name this broker or the cluster-wide
default (""). Both are INVALID_REQUEST, with Kafka's messages. The other resources are forwarded
(the controller checks their keys and values); `reassemble` puts the two answers together in the
request's order, as Kafka's reassembleLegacyResponse / reassembleIncrementalResponse do.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from typing import Any

from quorum.controller.results import ApiError
from quorum.wire.errors import ErrorCode

ALTER_CONFIGS, INCREMENTAL_ALTER_CONFIGS = 33, 44
CHECKED_APIS = (ALTER_CONFIGS, INCREMENTAL_ALTER_CONFIGS)
BROKER = 4


def refusals(resources: Sequence[Any], node_id: int) -> list[ApiError | None]:
    """Per resource of the request, in order: the error this broker answers it with, or None to forward it."""
    counts = Counter((resource.resource_type, resource.resource_name) for resource in resources)
    return [ApiError(ErrorCode.INVALID_REQUEST, "Each resource must appear at most once.")
            if counts[(resource.resource_type, resource.resource_name)] > 1 else _refusal(resource, node_id)
            for resource in resources]


def _refusal(resource: Any, node_id: int) -> ApiError | None:
    name = resource.resource_name
    if resource.resource_type != BROKER or not name:
        return None
    try:
        named = int(name)
    except ValueError:
        return ApiError(ErrorCode.INVALID_REQUEST, f"Node id must be an integer, but it is: {name}")
    if named != node_id:
        return ApiError(ErrorCode.INVALID_REQUEST, f"Unexpected broker id, expected {node_id}, but received {name}")
    return None


def reassemble(schema: Any, resources: Sequence[Any], errors: Sequence[ApiError | None],
               forwarded: Any | None) -> Any:
    """The response to the whole request: each resource's answer, from `errors` or from the forwarded
    answer (None when nothing was forwarded), in the request's order. A forwarded resource the answer
    does not name gets UNKNOWN_SERVER_ERROR, as Kafka answers it."""
    result = schema.AlterConfigsResourceResponse
    answered = {(r.resource_type, r.resource_name): r for r in getattr(forwarded, "responses", None) or ()}
    responses = []
    for resource, error in zip(resources, errors, strict=True):
        key = (resource.resource_type, resource.resource_name)
        if error is None and key in answered:
            responses.append(answered[key])
            continue
        error = error or ApiError(ErrorCode.UNKNOWN_SERVER_ERROR, "The controller returned no answer for it.")
        responses.append(result(error_code=error.code, error_message=error.message, resource_type=key[0],
                                resource_name=key[1]))
    return schema(throttle_time_ms=getattr(forwarded, "throttle_time_ms", 0) or 0, responses=responses)
