"""Authorization of every API a node serves: which resource and operation each one needs, as Kafka's
KafkaApis (brokers) and ControllerApis (controllers) check them, and the answers a refusal gets.

A node with an authorizer (`authorizer.class.name`, see `quorum.security.authorizer`) installs a
`RequestGuard` on its dispatcher; without one nothing here runs and every request is allowed, as
in Kafka. The guard decides, before the handler runs, by the table below:

=============================  ===============================================  ==============================
API                            needs                                            refused with
=============================  ===============================================  ==============================
Produce (0)                    WRITE topic (each); WRITE transactional id       TOPIC_ (29) per topic; 53
Fetch (1), consumer            READ topic (each, in the handler: `refused`)     29 per partition
Fetch (1), follower            CLUSTER_ACTION cluster                           CLUSTER_ (31)
ListOffsets (2)                DESCRIBE topic (each)                            29 per partition
Metadata (3)                   DESCRIBE topic (hidden from all-topics answers); 29 per named topic
                               auto-creation: CREATE cluster or CREATE topic
OffsetCommit (8)               READ group, then READ topic (each)               GROUP_ (30) all; 29 per topic
OffsetFetch (9)                DESCRIBE group, DESCRIBE topic (each)            30; 29 per topic (named)
FindCoordinator (10)           DESCRIBE group / transactional id                30 / 53
Join/Heartbeat/Leave/SyncGroup READ group                                       30
DescribeGroups (15)            DESCRIBE group (each)                            30 per group
ListGroups (16)                DESCRIBE cluster, else only groups it may        (filtered)
                               DESCRIBE
CreateTopics (19)              CREATE cluster, else CREATE topic (each)         29 per topic
DeleteTopics (20)              DELETE topic (each)                              29 per topic
DeleteRecords (21)             DELETE topic (each)                              29 per partition
InitProducerId (22)            WRITE transactional id; without one:             53; 31
                               IDEMPOTENT_WRITE cluster or WRITE on any topic
OffsetForLeaderEpoch (23)      DESCRIBE topic (each); follower: CLUSTER_ACTION  29 per partition; 31
DescribeAcls (29)              DESCRIBE cluster                                 31
CreateAcls (30), DeleteAcls    ALTER cluster                                    31 per ACL / filter
DescribeConfigs (32)           DESCRIBE_CONFIGS topic / cluster (brokers)       29 / 31 per resource
CreatePartitions (37)          ALTER topic (each)                               29 per topic
IncrementalAlterConfigs (44)   ALTER_CONFIGS topic / cluster (brokers)          29 / 31 per resource
AlterConfigs (33)              ALTER_CONFIGS topic / cluster (brokers); other   29 / 31 per resource
                               types unchecked (refused INVALID_REQUEST)
Alter/ListPartitionReassign.   ALTER / DESCRIBE cluster                         31
DescribeUserScramCredentials   DESCRIBE cluster                                 31
AlterUserScramCredentials      ALTER cluster                                    31 per user
controller listener: any API   CLUSTER_ACTION cluster (Raft, registrations,     31, logged, never counted
                               heartbeats, forwarded requests)
=============================  ===============================================  ==============================

ApiVersions, SaslHandshake and SaslAuthenticate need nothing. The per-topic checks split the
request: the handler sees only the topics the principal may use, and the refused ones are added to
its answer with their error, so one refused topic never fails the others (as Kafka answers).
Handlers that answer from their own loops (Fetch, Metadata) ask `refused` / `metadata_refusals`
themselves, which read the guard of the request being handled from a context variable.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Awaitable, Callable, Iterable, Mapping
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any

from quorum.net.dispatch import Reply
from quorum.security.acl import CLUSTER_NAME, AclBinding, AclOperation, ResourceType
from quorum.security.authorizer import Authorizer, authorizer_from_properties
from quorum.security.principal import request_context
from quorum.wire.errors import ErrorCode

log = logging.getLogger(__name__)

TOPIC, GROUP, CLUSTER, TXN = ResourceType.TOPIC, ResourceType.GROUP, ResourceType.CLUSTER, ResourceType.TRANSACTIONAL_ID
TOPIC_DENIED = ErrorCode.TOPIC_AUTHORIZATION_FAILED
GROUP_DENIED = ErrorCode.GROUP_AUTHORIZATION_FAILED
CLUSTER_DENIED = ErrorCode.CLUSTER_AUTHORIZATION_FAILED
TXN_DENIED = ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
FREE_APIS = frozenset({17, 18, 36})
"""SaslHandshake, ApiVersions, SaslAuthenticate: answered before and during authentication."""
_BROKER_CONFIGS = (4, 8)  # ConfigResource types BROKER and BROKER_LOGGER: cluster-level
_LEGACY_CHECKED = (2, 4)  # the ConfigResource types (TOPIC, BROKER) whose AlterConfigs asks for ALTER_CONFIGS

Handler = Callable[[Any], Awaitable[Any]]
Refuse = Callable[[Any, int], Any]
"""(request, error code) -> the response naming every resource of the request (quorum.server.refusals)."""


class RequestAuthorizer:
    """The node's authorizer over the ACLs of its latest image, asked for the request being handled."""

    def __init__(self, authorizer: Authorizer, image: Callable[[], Any]) -> None:
        self.authorizer = authorizer
        self._image = image

    def allowed(self, operation: AclOperation, resource_type: ResourceType, name: str, log_denied: bool = True) -> bool:
        context = request_context()
        acls: Mapping[uuid.UUID, AclBinding] = self._image().acls
        self.authorizer.update(acls)
        if self.authorizer.authorize(context.principal, context.client_host, operation, resource_type, name):
            return True
        if log_denied:  # Kafka's authorizer audit log says this at INFO
            log.info("Principal = %s is Denied operation = %s from host = %s on resource = %s:%s",
                     context.principal, operation.name, context.client_host or "?", resource_type.name, name)
        return False

    def allowed_any(self, operation: AclOperation, resource_type: ResourceType) -> bool:
        context = request_context()
        self.authorizer.update(self._image().acls)
        return self.authorizer.authorize_any_resource(context.principal, context.client_host, operation,
                                                      resource_type)

    def topic_name(self, topic: str | uuid.UUID | None) -> str | None:
        """A topic's name from a name or an id (None for an id the image does not know)."""
        if isinstance(topic, uuid.UUID):
            found = self._image().topics_by_id.get(topic)
            return None if found is None else found.name
        return topic


_CURRENT: ContextVar[RequestAuthorizer | None] = ContextVar("quorum_request_authorizer", default=None)


def allowed(operation: AclOperation, resource_type: ResourceType, name: str) -> bool:
    """Whether the request being handled may do `operation` on the resource (True without an authorizer)."""
    current = _CURRENT.get()
    return current is None or current.allowed(operation, resource_type, name)


def refused(operation: AclOperation, topics: Iterable[str | uuid.UUID]) -> set[str | uuid.UUID]:
    """The topics (names or ids) of `topics` the request being handled may not do `operation` on."""
    current = _CURRENT.get()
    if current is None:
        return set()
    out = set()
    for topic in set(topics):
        name = current.topic_name(topic)
        if name is not None and not current.allowed(operation, TOPIC, name):
            out.add(topic)
    return out


def metadata_refusals(image: Any, named: bool, auto_create: bool) -> Callable[[str], bool] | None:
    """For a Metadata request: which topic names to answer TOPIC_AUTHORIZATION_FAILED (named ones)
    or leave out (all-topics requests): those it may not DESCRIBE, and the missing topics it would
    auto-create without CREATE on the cluster or the topic. `named`: the request names its topics
    (refusals of an all-topics request are not logged). None without an authorizer."""
    current = _CURRENT.get()
    if current is None:
        return None
    may_create_all = auto_create and current.allowed(AclOperation.CREATE, CLUSTER, CLUSTER_NAME, log_denied=False)

    def refuse(name: str) -> bool:
        if not current.allowed(AclOperation.DESCRIBE, TOPIC, name, log_denied=named):
            return True
        if auto_create and not may_create_all and name not in image.topics:
            return not current.allowed(AclOperation.CREATE, TOPIC, name)
        return False

    return refuse


# ---------------------------------------------------------------------------------------------
# The whole-request checks: (request body, version) -> an error code to refuse with, or None.


def _group(operation: AclOperation) -> Callable[[RequestAuthorizer, Any, int], int | None]:
    return lambda auth, body, version: None if auth.allowed(operation, GROUP, body.group_id) else GROUP_DENIED


def _cluster(operation: AclOperation) -> Callable[[RequestAuthorizer, Any, int], int | None]:
    return lambda auth, body, version: None if auth.allowed(operation, CLUSTER, CLUSTER_NAME) else CLUSTER_DENIED


def _follower(body: Any, version: int) -> bool:
    state = getattr(body, "replica_state", None)
    replica = state.replica_id if version >= 15 and state is not None else getattr(body, "replica_id", -1)
    return replica is not None and replica >= 0


def _fetch(auth: RequestAuthorizer, body: Any, version: int) -> int | None:
    if _follower(body, version):
        return None if auth.allowed(AclOperation.CLUSTER_ACTION, CLUSTER, CLUSTER_NAME) else CLUSTER_DENIED
    return None  # a consumer's topics: in the handler


def _offset_for_leader_epoch(auth: RequestAuthorizer, body: Any, version: int) -> int | None:
    if getattr(body, "replica_id", -1) >= 0 and not auth.allowed(AclOperation.CLUSTER_ACTION, CLUSTER, CLUSTER_NAME):
        return CLUSTER_DENIED
    return None


def _produce(auth: RequestAuthorizer, body: Any, version: int) -> int | None:
    txn = getattr(body, "transactional_id", None)
    return TXN_DENIED if txn and not auth.allowed(AclOperation.WRITE, TXN, txn) else None


def _init_producer_id(auth: RequestAuthorizer, body: Any, version: int) -> int | None:
    txn = body.transactional_id
    if txn:
        return None if auth.allowed(AclOperation.WRITE, TXN, txn) else TXN_DENIED
    if auth.allowed(AclOperation.IDEMPOTENT_WRITE, CLUSTER, CLUSTER_NAME, log_denied=False):
        return None
    return None if auth.allowed_any(AclOperation.WRITE, TOPIC) else CLUSTER_DENIED


def _find_coordinator(auth: RequestAuthorizer, body: Any, version: int) -> int | None:
    keys = body.coordinator_keys if version >= 4 else [body.key]
    kind, code = (TXN, TXN_DENIED) if body.key_type == 1 else (GROUP, GROUP_DENIED)
    return None if all(auth.allowed(AclOperation.DESCRIBE, kind, key) for key in keys) else code


def _offset_fetch(auth: RequestAuthorizer, body: Any, version: int) -> int | None:
    groups = [g.group_id for g in body.groups] if version >= 8 else [body.group_id]
    return None if all(auth.allowed(AclOperation.DESCRIBE, GROUP, g) for g in groups) else GROUP_DENIED


_WHOLE: dict[int, Callable[[RequestAuthorizer, Any, int], int | None]] = {
    0: _produce, 1: _fetch, 8: _group(AclOperation.READ), 9: _offset_fetch, 10: _find_coordinator,
    11: _group(AclOperation.READ), 12: _group(AclOperation.READ), 13: _group(AclOperation.READ),
    14: _group(AclOperation.READ), 22: _init_producer_id, 23: _offset_for_leader_epoch, 68: _group(AclOperation.READ),
    29: _cluster(AclOperation.DESCRIBE), 30: _cluster(AclOperation.ALTER), 31: _cluster(AclOperation.ALTER),
    45: _cluster(AclOperation.ALTER), 46: _cluster(AclOperation.DESCRIBE),
    50: _cluster(AclOperation.DESCRIBE), 51: _cluster(AclOperation.ALTER),
}


def whole_refusal(request: Any, code: int, refuse: Refuse) -> Any:
    """The answer to a request refused as a whole: every resource it names gets `code`."""
    key, body, schema = request.api.key, request.body, request.api.response
    if key == 10 and request.version >= 4:
        item = schema.Coordinator
        return schema(coordinators=[item(key=k, node_id=-1, host="", port=-1, error_code=code, error_message=None)
                                    for k in body.coordinator_keys])
    if key == 9 and request.version >= 8:
        return schema(groups=[schema.OffsetFetchResponseGroup(group_id=g.group_id, error_code=code, topics=[])
                              for g in body.groups])
    if key in (0, 8, 23):  # Produce (a transactional id refused), OffsetCommit (the group), OffsetForLeaderEpoch
        return _with_topics(request, schema(), getattr(body, _PER_TOPIC[key].request_field), code)  # (a follower)
    try:
        return refuse(request, code)
    except KeyError:  # no per-resource shape: the top-level error code
        return schema(error_code=code)


# ---------------------------------------------------------------------------------------------
# The per-topic checks: split the request, answer the refused topics beside the handler's answer.


@dataclass(frozen=True, slots=True)
class _Topics:
    """Where an API's request lists topics, and how its answer names a refused one."""

    operation: AclOperation
    request_field: str
    response_field: str
    answer: Callable[[Any, Any, int], Any]  # (response schema, request entry, code) -> response entry
    name_field: str = "name"


def _partitioned(topic_class: str, partition_class: str, partitions_field: str, partition_key: str,
                 request_partitions: str, request_key: str, name_field: str = "name",
                 ) -> Callable[[Any, Any, int], Any]:
    def answer(schema: Any, entry: Any, code: int) -> Any:
        topic = getattr(schema, topic_class)
        partition = getattr(topic, partition_class)
        return topic(**{name_field: getattr(entry, name_field), partitions_field: [
            partition(**{partition_key: getattr(p, request_key), "error_code": code})
            for p in getattr(entry, request_partitions)]})
    return answer


def _named(result_class: str, **extra: Any) -> Callable[[Any, Any, int], Any]:
    def answer(schema: Any, entry: Any, code: int) -> Any:
        return getattr(schema, result_class)(name=entry.name, error_code=code, error_message=None, **extra)
    return answer


_PRODUCE = _Topics(AclOperation.WRITE, "topic_data", "responses", _partitioned(
    "TopicProduceResponse", "PartitionProduceResponse", "partition_responses", "index", "partition_data", "index"))
_PER_TOPIC: dict[int, _Topics] = {
    0: _PRODUCE,
    2: _Topics(AclOperation.DESCRIBE, "topics", "topics", _partitioned(
        "ListOffsetsTopicResponse", "ListOffsetsPartitionResponse", "partitions", "partition_index", "partitions",
        "partition_index")),
    8: _Topics(AclOperation.READ, "topics", "topics", _partitioned(
        "OffsetCommitResponseTopic", "OffsetCommitResponsePartition", "partitions", "partition_index", "partitions",
        "partition_index")),
    21: _Topics(AclOperation.DELETE, "topics", "topics", _partitioned(
        "DeleteRecordsTopicResult", "DeleteRecordsPartitionResult", "partitions", "partition_index", "partitions",
        "partition_index")),
    23: _Topics(AclOperation.DESCRIBE, "topics", "topics", _partitioned(
        "OffsetForLeaderTopicResult", "EpochEndOffset", "partitions", "partition", "partitions", "partition",
        name_field="topic"), name_field="topic"),
    19: _Topics(AclOperation.CREATE, "topics", "topics", _named("CreatableTopicResult", num_partitions=-1,
                                                                 replication_factor=-1, configs=None)),
    20: _Topics(AclOperation.DELETE, "topics", "responses", _named("DeletableTopicResult")),
    37: _Topics(AclOperation.ALTER, "topics", "results", _named("CreatePartitionsTopicResult")),
}


def _with_topics(request: Any, response: Any, refused_entries: list[Any], code: int) -> Any:
    spec = _PER_TOPIC[request.api.key]
    answers = [spec.answer(request.api.response, entry, code) for entry in refused_entries]
    setattr(response, spec.response_field, list(getattr(response, spec.response_field) or []) + answers)
    return response


class RequestGuard:
    """Installed on a node's dispatcher (`Dispatcher.guard`): see the module docstring."""

    def __init__(self, authorizer: RequestAuthorizer, refuse: Refuse, controller_listener: bool) -> None:
        self.authorizer = authorizer
        self._refuse = refuse
        self._controller_listener = controller_listener

    async def __call__(self, request: Any, handler: Handler) -> Any:
        _CURRENT.set(self.authorizer)
        key, auth = request.api.key, self.authorizer
        if key in FREE_APIS or request.body is None:
            return await handler(request)
        if self._controller_listener:
            operation = AclOperation.DESCRIBE if key == 55 else AclOperation.CLUSTER_ACTION
            if auth.allowed(operation, CLUSTER, CLUSTER_NAME):
                return await handler(request)
            context = request_context()
            log.warning("refused %s from %s (%s): %s on the cluster is not allowed: not counted", request.api.name,
                        context.principal, context.client_host or "?", operation.name)
            return Reply(whole_refusal(request, CLUSTER_DENIED, self._refuse), request.version)
        check = _WHOLE.get(key)
        code = None if check is None else check(auth, request.body, request.version)
        if code is not None:
            return Reply(whole_refusal(request, code, self._refuse), request.version)
        if key == 19 and auth.allowed(AclOperation.CREATE, CLUSTER, CLUSTER_NAME, log_denied=False):
            return await handler(request)
        if key in (32, 33, 44):
            return await self._configs(request, handler)
        spec = _PER_TOPIC.get(key)
        if spec is None:
            reply = await handler(request)
            if key == 16 and reply is not None:
                self._filter_groups(reply.body)
            if key == 15 and reply is not None:
                self._describe_groups(reply.body)
            if key == 9 and reply is not None and not isinstance(reply.body, bytes | bytearray):
                self._offset_fetch_topics(request, reply.body)
            return reply
        return await self._split(request, handler, spec)

    async def _split(self, request: Any, handler: Handler, spec: _Topics) -> Any:
        body = request.body
        field = spec.request_field
        if request.api.key == 20 and request.version < 6:  # DeleteTopics by plain names
            field = "topic_names"
        entries = list(getattr(body, field, None) or [])
        names = [entry if isinstance(entry, str) else
                 getattr(entry, spec.name_field, None) or getattr(entry, "topic_id", None) for entry in entries]
        denied = refused(spec.operation, [n for n in names if n is not None])
        if not denied:
            return await handler(request)
        kept = [entry for entry, name in zip(entries, names, strict=True) if name not in denied]
        dropped = [entry for entry, name in zip(entries, names, strict=True) if name in denied]
        setattr(body, field, kept)
        if field == "topic_names":
            dropped = [_Named(name) for name in dropped]
        if kept:
            reply = await handler(request)
            if reply is None or not hasattr(reply.body, spec.response_field):
                return reply
            return Reply(_with_topics(request, reply.body, dropped, TOPIC_DENIED), reply.version)
        if request.api.key == 0 and body.acks == 0:
            return None
        return Reply(_with_topics(request, request.api.response(), dropped, TOPIC_DENIED), request.version)

    async def _configs(self, request: Any, handler: Handler) -> Any:
        """DescribeConfigs / AlterConfigs / IncrementalAlterConfigs: each resource checked on its own.
        AlterConfigs resources of a type other than TOPIC and BROKER go on unchecked: Kafka's broker
        refuses them (INVALID_REQUEST, BROKER_LOGGER included) before any ACL is asked, and so does the
        controller here."""
        body, schema = request.body, request.api.response
        describe = request.api.key == 32
        operation = AclOperation.DESCRIBE_CONFIGS if describe else AclOperation.ALTER_CONFIGS
        kept, answers = [], []
        for resource in body.resources or ():
            cluster = resource.resource_type in _BROKER_CONFIGS
            unchecked = request.api.key == 33 and resource.resource_type not in _LEGACY_CHECKED
            if auth_ok := unchecked or self.authorizer.allowed(operation, CLUSTER if cluster else TOPIC,
                                                               CLUSTER_NAME if cluster else resource.resource_name):
                kept.append(resource)
            if not auth_ok:
                code = CLUSTER_DENIED if cluster else TOPIC_DENIED
                fields = dict(error_code=code, error_message=None, resource_type=resource.resource_type,
                              resource_name=resource.resource_name)
                answers.append(schema.DescribeConfigsResult(configs=[], **fields) if describe
                               else schema.AlterConfigsResourceResponse(**fields))
        if not answers:
            return await handler(request)
        body.resources = kept
        response = schema()
        if kept:
            reply = await handler(request)
            response = reply.body
        field = "results" if describe else "responses"
        setattr(response, field, list(getattr(response, field) or []) + answers)
        return Reply(response, request.version)

    def _offset_fetch_topics(self, request: Any, response: Any) -> None:
        """OffsetFetch: the offsets of a topic the principal may not DESCRIBE are answered
        TOPIC_AUTHORIZATION_FAILED when the request named the topic, and left out of an all-topics answer."""
        if request.version >= 8:
            named = {group.group_id: group.topics is not None for group in request.body.groups}
            for group in response.groups or ():
                group.topics = self._visible_offsets(group.topics, named.get(group.group_id, False))
        else:
            response.topics = self._visible_offsets(response.topics, request.body.topics is not None)

    def _visible_offsets(self, topics: Any, named: bool) -> list[Any]:
        auth = self.authorizer
        out = []
        for topic in topics or ():
            name = auth.topic_name(getattr(topic, "name", None) or getattr(topic, "topic_id", None))
            if name is None or auth.allowed(AclOperation.DESCRIBE, TOPIC, name, log_denied=named):
                out.append(topic)
            elif named:
                for partition in topic.partitions:
                    partition.error_code, partition.committed_offset, partition.metadata = TOPIC_DENIED, -1, ""
                out.append(topic)
        return out

    def _filter_groups(self, response: Any) -> None:
        """ListGroups: without DESCRIBE on the cluster, only the groups the principal may DESCRIBE."""
        auth = self.authorizer
        if not auth.allowed(AclOperation.DESCRIBE, CLUSTER, CLUSTER_NAME, log_denied=False):
            response.groups = [g for g in response.groups or ()
                               if auth.allowed(AclOperation.DESCRIBE, GROUP, g.group_id, log_denied=False)]

    def _describe_groups(self, response: Any) -> None:
        """DescribeGroups: a group the principal may not DESCRIBE is answered GROUP_AUTHORIZATION_FAILED only."""
        schema = type(response).DescribedGroup
        response.groups = [g if self.authorizer.allowed(AclOperation.DESCRIBE, GROUP, g.group_id) else schema(
            group_id=g.group_id, error_code=GROUP_DENIED, members=[]) for g in response.groups or ()]


@dataclass(frozen=True, slots=True)
class _Named:
    """A DeleteTopics v0-5 topic name as the answer builder reads entries."""

    name: str


def install_authorization(dispatcher: Any, properties: Mapping[str, str], image: Callable[[], Any],
                          refuse: Refuse, controller_listener: bool) -> RequestGuard | None:
    """Guard `dispatcher` when the node's properties configure an authorizer; None (nothing installed) otherwise."""
    authorizer = authorizer_from_properties(properties)
    if authorizer is None:
        return None
    guard = RequestGuard(RequestAuthorizer(authorizer, image), refuse, controller_listener)
    dispatcher.guard = guard
    return guard
