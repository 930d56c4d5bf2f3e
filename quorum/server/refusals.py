"""One answer for a whole admin or controller request that cannot be served: every resource it
names gets the same error (NOT_CONTROLLER on a node that is not the active controller,
REQUEST_TIMED_OUT when a broker cannot reach one), in the response shape of that API.

Clients act on these per resource: confluent-kafka and kafka-python refresh their metadata and
retry on NOT_CONTROLLER, so the answer has to name each topic or config resource they asked for.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from typing import Any

from quorum.wire.errors import ErrorCode
from quorum.wire.protocol import APIS, Request

_ZERO_UUID = uuid.UUID(int=0)


def _create_topics(body: Any, error: int, message: str) -> Any:
    schema = APIS[19].response
    return schema(throttle_time_ms=0, topics=[
        schema.CreatableTopicResult(name=topic.name, topic_id=_ZERO_UUID, error_code=error, error_message=message,
                                    topic_config_error_code=0, num_partitions=-1, replication_factor=-1, configs=None)
        for topic in body.topics or ()])


def _delete_topics(body: Any, error: int, message: str) -> Any:
    schema = APIS[20].response
    named = [(t.name, getattr(t, "topic_id", _ZERO_UUID) or _ZERO_UUID) for t in getattr(body, "topics", None) or ()]
    named += [(name, _ZERO_UUID) for name in getattr(body, "topic_names", None) or ()]
    return schema(throttle_time_ms=0, responses=[
        schema.DeletableTopicResult(name=name, topic_id=topic_id, error_code=error, error_message=message)
        for name, topic_id in named])


def _describe_configs(body: Any, error: int, message: str) -> Any:
    schema = APIS[32].response
    return schema(throttle_time_ms=0, results=[
        schema.DescribeConfigsResult(error_code=error, error_message=message, resource_type=r.resource_type,
                                     resource_name=r.resource_name, configs=[])
        for r in body.resources or ()])


def _create_partitions(body: Any, error: int, message: str) -> Any:
    schema = APIS[37].response
    return schema(throttle_time_ms=0, results=[
        schema.CreatePartitionsTopicResult(name=t.name, error_code=error, error_message=message)
        for t in body.topics or ()])


def _alter_configs(api_key: int) -> Callable[[Any, int, str], Any]:
    """AlterConfigs (33) and IncrementalAlterConfigs (44): their responses have the same shape."""
    def build(body: Any, error: int, message: str) -> Any:
        schema = APIS[api_key].response
        return schema(throttle_time_ms=0, responses=[
            schema.AlterConfigsResourceResponse(error_code=error, error_message=message,
                                                resource_type=r.resource_type, resource_name=r.resource_name)
            for r in body.resources or ()])
    return build


def _alter_partition_reassignments(body: Any, error: int, message: str) -> Any:
    schema = APIS[45].response
    topic = schema.ReassignableTopicResponse
    return schema(throttle_time_ms=0, allow_replication_factor_change=True, error_code=error, error_message=message,
                  responses=[topic(name=t.name, partitions=[
                      topic.ReassignablePartitionResponse(partition_index=p.partition_index, error_code=error,
                                                          error_message=message) for p in t.partitions])
                             for t in body.topics or ()])


def _list_partition_reassignments(body: Any, error: int, message: str) -> Any:
    return APIS[46].response(throttle_time_ms=0, error_code=error, error_message=message, topics=[])


def _alter_partition(body: Any, error: int, message: str) -> Any:
    return APIS[56].response(throttle_time_ms=0, error_code=error, topics=[])


def _broker_registration(body: Any, error: int, message: str) -> Any:
    return APIS[62].response(throttle_time_ms=0, error_code=error, broker_epoch=-1)


def _broker_heartbeat(body: Any, error: int, message: str) -> Any:
    return APIS[63].response(throttle_time_ms=0, error_code=error, is_caught_up=False, is_fenced=True,
                             should_shut_down=False)


def _create_acls(body: Any, error: int, message: str) -> Any:
    schema = APIS[30].response
    return schema(throttle_time_ms=0, results=[schema.AclCreationResult(error_code=error, error_message=message)
                                               for _ in body.creations or ()])


def _delete_acls(body: Any, error: int, message: str) -> Any:
    schema = APIS[31].response
    return schema(throttle_time_ms=0, filter_results=[
        schema.DeleteAclsFilterResult(error_code=error, error_message=message, matching_acls=[])
        for _ in body.filters or ()])


def _describe_user_scram_credentials(body: Any, error: int, message: str) -> Any:
    return APIS[50].response(throttle_time_ms=0, error_code=error, error_message=message, results=[])


def _alter_user_scram_credentials(body: Any, error: int, message: str) -> Any:
    """Every user the request names, once, as Kafka answers a refused AlterUserScramCredentials."""
    schema = APIS[51].response
    users = dict.fromkeys(change.name for change in [*(body.deletions or ()), *(body.upsertions or ())])
    return schema(throttle_time_ms=0, results=[
        schema.AlterUserScramCredentialsResult(user=user, error_code=error, error_message=message) for user in users])


def _allocate_producer_ids(body: Any, error: int, message: str) -> Any:
    return APIS[67].response(throttle_time_ms=0, error_code=error, producer_id_start=-1, producer_id_len=0)


_BUILDERS: dict[int, Callable[[Any, int, str], Any]] = {
    19: _create_topics, 20: _delete_topics, 32: _describe_configs, 33: _alter_configs(33), 37: _create_partitions,
    30: _create_acls, 31: _delete_acls, 50: _describe_user_scram_credentials, 51: _alter_user_scram_credentials,
    44: _alter_configs(44), 45: _alter_partition_reassignments, 46: _list_partition_reassignments,
    56: _alter_partition, 62: _broker_registration, 63: _broker_heartbeat, 67: _allocate_producer_ids,
}
REFUSABLE = tuple(_BUILDERS)


def refuse(request: Request, error: int, message: str | None = None) -> Any:
    """The response to `request` with `error` for everything it names."""
    builder = _BUILDERS.get(request.api.key)
    if builder is None:
        raise KeyError(f"no refusal for {request.api.name}")
    return builder(request.body, int(error), message if message is not None else ErrorCode(error).name)
