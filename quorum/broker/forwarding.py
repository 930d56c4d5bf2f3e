"""A broker forwards admin requests to the active controller (KIP-590's forwarding, as KRaft brokers do).

Clients send CreateTopics, DeleteTopics, CreatePartitions, IncrementalAlterConfigs, AlterConfigs,
DescribeConfigs, AlterPartitionReassignments, ListPartitionReassignments, CreateAcls,
DeleteAcls and AlterUserScramCredentials to the node that Metadata names as controller, which on
a KRaft cluster is a broker:
the broker passes the request, unchanged and at the client's version and under the client's client
id (which the controller's mutation quota counts by), to the quorum leader, and the answer back.
While no controller answers, or the one asked answers NOT_CONTROLLER (it resigned, for instance
to take its snapshot turn, before the broker learned of the new leader), the request is retried
until the client's own timeout is near, then answered with REQUEST_TIMED_OUT for every resource
it named. As Kafka's NodeToControllerChannelManager: clients never see NOT_CONTROLLER from a
broker (librdkafka's admin client does not retry it). With its `node_id`, a broker answers the
BROKER resources of AlterConfigs and IncrementalAlterConfigs that name another broker itself, as
Kafka's broker does (`quorum.broker.config_preprocess`), and forwards the rest.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from typing import Any

from quorum.broker import config_preprocess
from quorum.net.dispatch import Dispatcher, Reply
from quorum.net.peer_client import PeerClient, PeerUnavailable
from quorum.wire.errors import ErrorCode
from quorum.wire.protocol import Request

log = logging.getLogger(__name__)

CREATE_TOPICS, DELETE_TOPICS, DESCRIBE_CONFIGS, CREATE_PARTITIONS, INCREMENTAL_ALTER_CONFIGS = 19, 20, 32, 37, 44
ALTER_CONFIGS = 33
ALTER_PARTITION_REASSIGNMENTS, LIST_PARTITION_REASSIGNMENTS = 45, 46
CREATE_ACLS, DELETE_ACLS, ALTER_USER_SCRAM_CREDENTIALS = 30, 31, 51
FORWARDED = (CREATE_TOPICS, DELETE_TOPICS, DESCRIBE_CONFIGS, CREATE_PARTITIONS, INCREMENTAL_ALTER_CONFIGS,
             ALTER_CONFIGS, ALTER_PARTITION_REASSIGNMENTS, LIST_PARTITION_REASSIGNMENTS, CREATE_ACLS, DELETE_ACLS,
             ALTER_USER_SCRAM_CREDENTIALS)
RETRY_SECONDS = 0.1


def register_forwarding(dispatcher: Dispatcher, controller: Callable[[], PeerClient | None],
                        refuse: Callable[[Request, int], Any], timeout_s: float = 30.0,
                        node_id: int | None = None) -> None:
    """Serve the forwarded APIs on `dispatcher`; `controller()` is the active controller's client
    (None while unknown); `refuse(request, error)` builds the answer naming every resource;
    `node_id`, this broker's id (None: no config resource is answered here)."""

    async def forward(request: Request) -> Reply:
        deadline = time.monotonic() + min(timeout_s, _client_timeout_s(request.body, timeout_s))
        while True:
            peer = controller()
            if peer is not None:
                try:
                    response = await peer.request(request.api, request.version, request.body,
                                                  client_id=request.header.client_id)
                except PeerUnavailable as exc:
                    log.info("forwarding %s: %s", request.api.name, exc)
                else:
                    if not _not_controller(response.to_dict()):
                        return Reply(response, request.version)
                    log.info("forwarding %s: %s:%d is no longer the active controller", request.api.name,
                             peer.host, peer.port)
            if time.monotonic() + RETRY_SECONDS >= deadline:
                return Reply(refuse(request, ErrorCode.REQUEST_TIMED_OUT), request.version)
            await asyncio.sleep(RETRY_SECONDS)

    async def alter_configs(request: Request) -> Reply:
        """The resources this broker refuses itself answered here, the others forwarded."""
        resources = list(request.body.resources or ())
        errors = config_preprocess.refusals(resources, node_id) if node_id is not None else []
        if not any(errors):
            return await forward(request)
        kept = [resource for resource, error in zip(resources, errors, strict=True) if error is None]
        forwarded = None
        if kept:
            request.body.resources = kept
            forwarded = (await forward(request)).body
        return Reply(config_preprocess.reassemble(request.api.response, resources, errors, forwarded),
                     request.version)

    for api_key in FORWARDED:
        handler = alter_configs if api_key in config_preprocess.CHECKED_APIS else forward
        dispatcher.register(api_key, handler, pipelined=True)  # answers in order; see quorum.server.listener


def _not_controller(answer: Any) -> bool:
    """Whether any error code in the answer (a response's to_dict()) is NOT_CONTROLLER."""
    if isinstance(answer, dict):
        return answer.get("error_code") == ErrorCode.NOT_CONTROLLER or any(
            _not_controller(v) for v in answer.values() if isinstance(v, dict | list))
    return isinstance(answer, list) and any(_not_controller(item) for item in answer)


def _client_timeout_s(body: Any, default: float) -> float:
    """The request's own TimeoutMs (CreateTopics, DeleteTopics, CreatePartitions), a little less."""
    timeout_ms = getattr(body, "timeout_ms", None)
    return default if not timeout_ms or timeout_ms <= 0 else max(timeout_ms / 1000 - 0.5, 0.5)
