"""The request guard, fed by hand: the API table's checks and refusals, the request context set as the
listener sets it (TLS/SASL principals), handlers that record what reaches them."""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import uuid

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from quorum.broker.acl_apis import register_acl_apis
from quorum.broker.metadata import encoded_metadata_response
from quorum.image.image import empty_image, single_node_image
from quorum.net.dispatch import Dispatcher, Reply
from quorum.security.acl import new_binding
from quorum.security.authorization import install_authorization, metadata_refusals, whole_refusal
from quorum.security.authorizer import STANDARD_AUTHORIZER
from quorum.security.principal import KafkaPrincipal, RequestContext, set_request_context
from quorum.server.refusals import refuse
from quorum.wire.errors import ErrorCode
from quorum.wire.framing import RequestHeader
from quorum.wire.protocol import APIS, Request
from tests.wire.schema_strategies import message_values

SETTINGS = {"authorizer.class.name": STANDARD_AUTHORIZER, "super.users": "User:controller-2"}
TOPIC, GROUP, CLUSTER, TXN = 2, 3, 4, 5
READ, WRITE, DESCRIBE, CLUSTER_ACTION, IDEMPOTENT_WRITE = 3, 4, 8, 9, 12


def allow(kind: int, name: str, operation: int, principal: str = "User:alice"):
    return new_binding(kind, name, 3, principal, "*", operation, 3)


class Node:
    """A dispatcher with a guard over an image holding `acls`; handlers record the bodies they get."""

    def __init__(self, *acls, controller: bool = False) -> None:
        self.image = dataclasses.replace(empty_image(), acls={uuid.uuid4(): acl for acl in acls})
        self.dispatcher = Dispatcher()
        self.seen: list = []
        for key in (0, 1, 8, 22, 32, 52):
            self.dispatcher.register(key, self._handler)
        assert install_authorization(self.dispatcher, SETTINGS, lambda: self.image, refuse, controller) is not None

    async def _handler(self, request: Request) -> Reply:
        self.seen.append(request.body)
        return Reply(request.api.response(), request.version)

    def ask(self, key: int, version: int, body, principal: str = "User:alice"):
        async def run():
            set_request_context(RequestContext(KafkaPrincipal.parse(principal), "CLIENT", "SASL_SSL", "10.0.0.1"))
            return await self.dispatcher.dispatch(Request(RequestHeader(key, version, 1, "t"), APIS[key], body))
        reply = asyncio.run(run())
        return None if reply is None else reply.body


def test_a_vote_from_a_node_that_is_not_a_super_user_is_refused_logged_and_never_counted(caplog) -> None:
    node = Node(controller=True)
    vote = APIS[52].request(version=2)
    with caplog.at_level(logging.WARNING, "quorum.security.authorization"):
        answer = node.ask(52, 2, vote, principal="User:intruder")
    assert answer.error_code == ErrorCode.CLUSTER_AUTHORIZATION_FAILED and node.seen == []
    assert "refused Vote from User:intruder" in caplog.text
    node.ask(52, 2, vote, principal="User:controller-2")  # a configured super user (the voters' principals)
    assert node.seen == [vote]
    granted = Node(allow(CLUSTER, "kafka-cluster", CLUSTER_ACTION, "User:broker-101"), controller=True)
    granted.ask(52, 2, vote, principal="User:broker-101")
    assert granted.seen == [vote]


def test_produce_answers_refused_topics_beside_the_allowed_ones() -> None:
    node = Node(allow(TOPIC, "open", WRITE))
    schema = APIS[0].request
    body = schema(version=9, acks=-1, timeout_ms=1000, topic_data=[
        schema.TopicProduceData(name=name, partition_data=[schema.TopicProduceData.PartitionProduceData(index=0)])
        for name in ("open", "closed")])
    answer = node.ask(0, 9, body)
    assert [t.name for t in node.seen[0].topic_data] == ["open"]
    assert [(t.name, [p.error_code for p in t.partition_responses]) for t in answer.responses] == [
        ("closed", [ErrorCode.TOPIC_AUTHORIZATION_FAILED])]


def test_offset_commit_of_a_group_it_may_not_read_is_refused_for_every_partition() -> None:
    node = Node(allow(TOPIC, "t", READ))
    schema = APIS[8].request
    topic = schema.OffsetCommitRequestTopic
    body = schema(version=8, group_id="g", topics=[topic(name="t", partitions=[
        topic.OffsetCommitRequestPartition(partition_index=i, committed_offset=1) for i in (0, 1)])])
    answer = node.ask(8, 8, body)
    assert node.seen == []
    assert [p.error_code for t in answer.topics for p in t.partitions] == [ErrorCode.GROUP_AUTHORIZATION_FAILED] * 2


@pytest.mark.parametrize("acls, transactional_id, expected", [
    ((), None, ErrorCode.CLUSTER_AUTHORIZATION_FAILED),
    ((allow(TOPIC, "any", WRITE),), None, None),  # WRITE on any topic is enough (Kafka 3.0+)
    ((allow(CLUSTER, "kafka-cluster", IDEMPOTENT_WRITE),), None, None),
    ((allow(TOPIC, "any", WRITE),), "tx-1", ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED),
    ((allow(TXN, "tx-1", WRITE),), "tx-1", None),
])
def test_init_producer_id(acls, transactional_id, expected) -> None:
    node = Node(*acls)
    answer = node.ask(22, 4, APIS[22].request(version=4, transactional_id=transactional_id))
    assert (answer.error_code if not node.seen else None) == expected


def test_describe_configs_checks_each_resource() -> None:
    node = Node(allow(TOPIC, "mine", DESCRIBE + 2))  # ALTER_CONFIGS implies DESCRIBE_CONFIGS
    schema = APIS[32].request
    body = schema(version=4, resources=[schema.DescribeConfigsResource(resource_type=t, resource_name=n)
                                        for t, n in ((2, "mine"), (2, "theirs"), (4, "1"))])
    answer = node.ask(32, 4, body)
    assert [r.resource_name for r in node.seen[0].resources] == ["mine"]
    assert [(r.resource_name, r.error_code) for r in answer.results] == [
        ("theirs", ErrorCode.TOPIC_AUTHORIZATION_FAILED), ("1", ErrorCode.CLUSTER_AUTHORIZATION_FAILED)]


def test_legacy_alter_configs_needs_alter_configs_on_each_topic_or_the_cluster() -> None:
    """AlterConfigs (33) as IncrementalAlterConfigs: ALTER_CONFIGS on the topic, or on the cluster for a
    broker; a BROKER_LOGGER (or unknown) resource goes on unchecked, to be refused INVALID_REQUEST as
    Kafka's broker refuses it before asking any ACL."""
    node = Node(allow(TOPIC, "mine", 11))  # ALTER_CONFIGS
    node.dispatcher.register(33, node._handler)
    schema = APIS[33].request
    body = schema(version=2, validate_only=False, resources=[
        schema.AlterConfigsResource(resource_type=t, resource_name=n, configs=[])
        for t, n in ((2, "mine"), (2, "theirs"), (4, "1"), (8, "1"))])
    answer = node.ask(33, 2, body)
    assert [(r.resource_type, r.resource_name) for r in node.seen[0].resources] == [(2, "mine"), (8, "1")]
    assert [(r.resource_name, r.error_code) for r in answer.responses] == [
        ("theirs", ErrorCode.TOPIC_AUTHORIZATION_FAILED), ("1", ErrorCode.CLUSTER_AUTHORIZATION_FAILED)]


def test_scram_credentials_need_describe_or_alter_on_the_cluster() -> None:
    """Kafka's rules: DescribeUserScramCredentials needs DESCRIBE on the cluster, AlterUserScramCredentials
    ALTER (which implies DESCRIBE); refused as a whole with CLUSTER_AUTHORIZATION_FAILED, each user named."""
    alter, describe = APIS[51].request, APIS[50].request
    alter_body = alter(deletions=[alter.ScramCredentialDeletion(name="bob", mechanism=2)], upsertions=[
        alter.ScramCredentialUpsertion(name="carol", mechanism=2, iterations=4096, salt=b"s", salted_password=b"p")])
    describe_body = describe(users=None)

    def node_with(*acls) -> Node:
        node = Node(*acls)
        for key in (50, 51):
            node.dispatcher.register(key, node._handler)
        return node

    node = node_with(allow(CLUSTER, "kafka-cluster", DESCRIBE))
    assert node.ask(50, 0, describe_body) is not None and node.seen == [describe_body]
    refused = node.ask(51, 0, alter_body)
    assert [(r.user, r.error_code) for r in refused.results] == [
        ("bob", ErrorCode.CLUSTER_AUTHORIZATION_FAILED), ("carol", ErrorCode.CLUSTER_AUTHORIZATION_FAILED)]
    nobody = node_with()
    assert nobody.ask(50, 0, describe_body).error_code == ErrorCode.CLUSTER_AUTHORIZATION_FAILED and not nobody.seen
    admin = node_with(allow(CLUSTER, "kafka-cluster", DESCRIBE - 1))  # ALTER
    admin.ask(50, 0, describe_body)
    admin.ask(51, 0, alter_body)
    assert admin.seen == [describe_body, alter_body]


def test_a_follower_fetch_needs_cluster_action() -> None:
    node = Node(allow(TOPIC, "t", READ))
    body = APIS[1].request(version=12, replica_id=102, max_wait_ms=0, min_bytes=1, topics=[])
    assert node.ask(1, 12, body).error_code == ErrorCode.CLUSTER_AUTHORIZATION_FAILED and node.seen == []


def test_without_an_authorizer_nothing_is_installed() -> None:
    dispatcher = Dispatcher()
    assert install_authorization(dispatcher, {}, empty_image, refuse, False) is None and dispatcher.guard is None


def test_a_broker_without_an_authorizer_answers_the_acl_apis_security_disabled() -> None:
    dispatcher = Dispatcher()
    register_acl_apis(dispatcher, empty_image, refuse, authorizer=False)
    describe = APIS[29].request(version=3, resource_type_filter=1, resource_name_filter=None, pattern_type_filter=1,
                                principal_filter=None, host_filter=None, operation=1, permission_type=1)
    create = APIS[30].request(version=3, creations=[APIS[30].request.AclCreation(
        resource_type=2, resource_name="t", resource_pattern_type=3, principal="User:a", host="*", operation=3,
        permission_type=3)])

    def ask(key: int, body):
        request = Request(RequestHeader(key, 3, 1, "t"), APIS[key], body)
        return asyncio.run(dispatcher.dispatch(request)).body

    answer = ask(29, describe)
    assert (answer.error_code, answer.error_message) == (ErrorCode.SECURITY_DISABLED, "No Authorizer is configured.")
    assert [r.error_code for r in ask(30, create).results] == [ErrorCode.SECURITY_DISABLED]


def test_offset_fetch_hides_or_refuses_the_topics_it_may_not_describe() -> None:
    node = Node(allow(GROUP, "g", READ), allow(TOPIC, "mine", READ))
    response = APIS[9].response
    topic, partition = response.OffsetFetchResponseTopic, response.OffsetFetchResponseTopic.OffsetFetchResponsePartition

    async def committed(request: Request) -> Reply:
        return Reply(response(topics=[topic(name=n, partitions=[partition(partition_index=0, committed_offset=7,
                                                                          metadata="m", error_code=0)])
                                      for n in ("mine", "theirs")], error_code=0), request.version)

    node.dispatcher.register(9, committed)
    request = APIS[9].request
    named = request(version=7, group_id="g", topics=[request.OffsetFetchRequestTopic(name=n, partition_indexes=[0])
                                                     for n in ("mine", "theirs")])
    answer = node.ask(9, 7, named)
    assert [(t.name, t.partitions[0].committed_offset, t.partitions[0].error_code) for t in answer.topics] == [
        ("mine", 7, 0), ("theirs", -1, ErrorCode.TOPIC_AUTHORIZATION_FAILED)]
    every = node.ask(9, 7, request(version=7, group_id="g", topics=None))
    assert [t.name for t in every.topics] == ["mine"]
    assert node.ask(9, 7, request(version=7, group_id="other", topics=None)).error_code == \
        ErrorCode.GROUP_AUTHORIZATION_FAILED


def test_metadata_hides_what_it_may_not_describe_and_refuses_it_by_name() -> None:
    image = single_node_image(101, "127.0.0.1", 9092, {"mine": 1, "theirs": 1})
    image = dataclasses.replace(image, acls={uuid.uuid4(): allow(TOPIC, "mine", READ)})
    node = Node()
    node.image = image
    seen = {}

    async def metadata(request: Request) -> Reply:
        refusals = metadata_refusals(image, request.body.topics is not None, auto_create=False)
        seen["body"] = metadata_response_body(image, request, refusals)
        return Reply(APIS[3].response(), request.version)

    node.dispatcher.register(3, metadata)
    request = APIS[3].request
    node.ask(3, 12, request(version=12, topics=None))
    assert [t.name for t in seen["body"].topics] == ["mine"]
    node.ask(3, 12, request(version=12, topics=[request.MetadataRequestTopic(name=n) for n in ("theirs", "nope")]))
    assert [(t.name, t.error_code) for t in seen["body"].topics] == [
        ("theirs", ErrorCode.TOPIC_AUTHORIZATION_FAILED), ("nope", ErrorCode.TOPIC_AUTHORIZATION_FAILED)]


def metadata_response_body(image, request: Request, refusals):
    """The Metadata answer encoded as a broker sends it, decoded back."""
    from quorum.wire.protocol import decode_body

    encoded = encoded_metadata_response(image, request.body, request.version, refusals)
    return decode_body(APIS[3].response, encoded, 0, request.version)


WHOLE_REFUSALS = [(key, version) for key in (0, 1, 8, 9, 10, 11, 12, 13, 14, 22, 23, 29, 30, 31, 45, 46, 50, 51, 52,
                                             53, 54, 55, 56, 59, 62, 63, 68)
                  for version in range(APIS[key].min_version, APIS[key].max_version + 1)]


@pytest.mark.parametrize("case", WHOLE_REFUSALS, ids=lambda c: f"{APIS[c[0]].name}-v{c[1]}")
@settings(max_examples=3, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_every_whole_refusal_encodes_at_the_clients_version(case, data) -> None:
    """A refused request of any API the guard refuses as a whole is answered in a response that
    encodes at the request's version (a failure would close the client's connection instead)."""
    key, version = case
    body = data.draw(message_values(APIS[key].request, version))
    request = Request(RequestHeader(key, version, 1, "t"), APIS[key], body)
    for code in (ErrorCode.CLUSTER_AUTHORIZATION_FAILED, ErrorCode.GROUP_AUTHORIZATION_FAILED):
        whole_refusal(request, code, refuse).encode(version=version)
    for controller in (False, True):  # the guard's checks read any body without failing
        node = Node(controller=controller)
        node.dispatcher.register(key, node._handler)
        answer = node.ask(key, version, body)
        if answer is not None:
            answer.encode(version=version)


SPLIT_REFUSALS = [(key, version) for key in (0, 2, 8, 19, 20, 21, 23, 32, 33, 37, 44)
                  for version in range(APIS[key].min_version, APIS[key].max_version + 1)]


@pytest.mark.parametrize("case", SPLIT_REFUSALS, ids=lambda c: f"{APIS[c[0]].name}-v{c[1]}")
@settings(max_examples=3, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_every_per_topic_refusal_encodes_at_the_clients_version(case, data) -> None:
    """Nothing allowed: whatever topics or resources a request names are answered refused, in a
    response that encodes at the request's version."""
    key, version = case
    node = Node()
    node.dispatcher.register(key, node._handler)
    body = data.draw(message_values(APIS[key].request, version))
    answer = node.ask(key, version, body)
    if answer is not None:
        answer.encode(version=version)


def test_a_kip848_heartbeat_needs_read_on_its_group() -> None:
    """Kafka's ConsumerGroupHeartbeat check: READ on the group, else GROUP_AUTHORIZATION_FAILED."""
    node = Node(allow(GROUP, "g", READ))
    node.dispatcher.register(68, node._handler)
    request = APIS[68].request
    refused = node.ask(68, 1, request(version=1, group_id="other", member_id="m", member_epoch=0))
    assert refused.error_code == ErrorCode.GROUP_AUTHORIZATION_FAILED and node.seen == []
    allowed = request(version=1, group_id="g", member_id="m", member_epoch=0)
    node.ask(68, 1, allowed)
    assert node.seen == [allowed]
