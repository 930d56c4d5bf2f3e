"""ACLs on a real cluster (one controller, one broker; one cluster for the whole module): created,
described and deleted with confluent-kafka's and kafka-python's admin clients through the broker
(which forwards CreateAcls and DeleteAcls to the controller and answers DescribeAcls from its image),
and at work: every PLAINTEXT client is User:ANONYMOUS, so the tests put ACLs for other principals
on a resource (which takes it out of allow.everyone.if.no.acl.found) and grant and revoke
ANONYMOUS's own in turn: producing, consuming in a group, committing, creating and deleting topics
are refused with Kafka's error codes and allowed once CreateAcls allows them.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator

import kafka.errors
import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import (
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    AdminClient,
    NewTopic,
    ResourcePatternType,
    ResourceType,
)
from kafka import KafkaConsumer, KafkaProducer
from kafka.admin import (
    ACL,
    ACLFilter,
    ACLOperation,
    ACLPermissionType,
    ACLResourcePatternType,
    KafkaAdminClient,
    ResourcePattern,
)
from kafka.admin import ResourceType as KResourceType

from client_epochs import MetadataClient
from tests.test_broker_processes import QUIET, one_broker
from tests.test_controller_processes import create, wait_until

pytestmark = pytest.mark.timeout(300)

AUTHORIZER = {"authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
              "allow.everyone.if.no.acl.found": "true", "super.users": "User:admin"}
ANONYMOUS = "User:ANONYMOUS"
CLUSTER = "kafka-cluster"
TIMEOUT_S = 60


class Cluster:
    def __init__(self, address: str) -> None:
        self.address = address
        self.admin = AdminClient({"bootstrap.servers": address, **QUIET})

    def create_acls(self, *bindings: AclBinding) -> None:
        for future in self.admin.create_acls(list(bindings), request_timeout=TIMEOUT_S).values():
            future.result(timeout=TIMEOUT_S)

    def describe(self, wanted: AclBindingFilter) -> set[AclBinding]:
        return set(self.admin.describe_acls(wanted, request_timeout=TIMEOUT_S).result(timeout=TIMEOUT_S))

    def delete_acls(self, *filters: AclBindingFilter) -> list[set[AclBinding]]:
        futures = self.admin.delete_acls(list(filters), request_timeout=TIMEOUT_S)
        return [set(futures[wanted].result(timeout=TIMEOUT_S)) for wanted in filters]

    def wait_described(self, wanted: AclBindingFilter, expected: set[AclBinding], what: str) -> None:
        """Until the broker's image shows `expected` for `wanted` (the broker replays after the controller commits)."""
        wait_until(f"the broker to describe {what}", lambda: self.describe(wanted) == expected, timeout_s=TIMEOUT_S)

    def wait_listed(self, present: set[AclBinding], absent: set[AclBinding], what: str) -> None:
        """Until DescribeAcls (every ACL) lists each of `present` and none of `absent`."""
        def listed() -> bool:
            found = self.describe(_on(None))
            return present <= found and not absent & found
        wait_until(f"the broker to describe {what}", listed, timeout_s=TIMEOUT_S)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory) -> Iterator[Cluster]:
    with one_broker(tmp_path_factory.mktemp("acls"), AUTHORIZER) as (_, address):
        yield Cluster(address)


def _binding(name: str, operation: AclOperation, pattern=ResourcePatternType.LITERAL,
             permission=AclPermissionType.ALLOW, principal: str = ANONYMOUS, host: str = "*",
             kind=ResourceType.TOPIC) -> AclBinding:
    return AclBinding(kind, name, pattern, principal, host, operation, permission)


def _on(name: str | None, pattern=ResourcePatternType.ANY, kind=ResourceType.ANY) -> AclBindingFilter:
    return AclBindingFilter(kind, name, pattern, None, None, AclOperation.ANY, AclPermissionType.ANY)


def test_confluent_admin_creates_describes_and_deletes_acls(cluster) -> None:
    prefix = f"crud-{uuid.uuid4().hex[:6]}"
    read = _binding(f"{prefix}-orders", AclOperation.READ)
    write = _binding(f"{prefix}-pay", AclOperation.WRITE, ResourcePatternType.PREFIXED, principal="User:bob")
    deny = _binding(f"{prefix}-orders", AclOperation.ALL, permission=AclPermissionType.DENY, host="10.0.0.9")
    group = _binding(f"{prefix}-group", AclOperation.READ, kind=ResourceType.GROUP)
    cluster.create_acls(read, write, deny, group)
    cluster.create_acls(read)  # the same ACL again: accepted, still one
    cluster.wait_listed({read, write, deny, group}, set(), "the four new ACLs")
    # MATCH: every ACL that applies to a resource (its literal name and the prefixes of it)
    assert cluster.describe(_on(f"{prefix}-payments", ResourcePatternType.MATCH, ResourceType.TOPIC)) == {write}
    orders = cluster.admin.describe_acls(_on(f"{prefix}-orders", ResourcePatternType.LITERAL, ResourceType.TOPIC),
                                         request_timeout=TIMEOUT_S).result(timeout=TIMEOUT_S)
    assert sorted(orders, key=str) == sorted([read, deny], key=str)  # `read` created twice is there once
    deleted = cluster.delete_acls(_on(f"{prefix}-orders", ResourcePatternType.LITERAL, ResourceType.TOPIC),
                                  _on(f"{prefix}-group", ResourcePatternType.ANY, ResourceType.GROUP))
    assert deleted == [{read, deny}, {group}]
    cluster.wait_listed({write}, {read, deny, group}, "only the prefixed ACL left")
    assert cluster.delete_acls(_on(f"{prefix}-pay", ResourcePatternType.PREFIXED, ResourceType.TOPIC)) == [{write}]


def test_a_bad_acl_is_refused_by_name_and_the_others_are_created(cluster) -> None:
    name = f"bad-{uuid.uuid4().hex[:6]}"
    good = _binding(name, AclOperation.READ)
    bad = _binding("not-kafka-cluster", AclOperation.ALTER, kind=ResourceType.BROKER)
    futures = cluster.admin.create_acls([good, bad], request_timeout=TIMEOUT_S)
    futures[good].result(timeout=TIMEOUT_S)
    with pytest.raises(Exception, match="kafka-cluster"):
        futures[bad].result(timeout=TIMEOUT_S)
    cluster.wait_described(_on(name, ResourcePatternType.LITERAL, ResourceType.TOPIC), {good}, name)
    cluster.delete_acls(_on(name, ResourcePatternType.LITERAL, ResourceType.TOPIC))


def test_kafka_python_admin_creates_describes_and_deletes_acls(cluster) -> None:
    name = f"kp-{uuid.uuid4().hex[:6]}"
    pattern = ResourcePattern(KResourceType.TOPIC, name, ACLResourcePatternType.LITERAL)
    acl = ACL(ANONYMOUS, "*", ACLOperation.WRITE, ACLPermissionType.ALLOW, pattern)
    admin = KafkaAdminClient(bootstrap_servers=cluster.address, request_timeout_ms=TIMEOUT_S * 1000)
    try:
        created = admin.create_acls([acl])
        assert created["succeeded"] == [acl] and not created["failed"]
        wanted = ACLFilter(None, None, ACLOperation.ANY, ACLPermissionType.ANY,
                           ResourcePattern(KResourceType.TOPIC, name, ACLResourcePatternType.LITERAL))

        def described() -> bool:
            found, error = admin.describe_acls(wanted)
            return error.errno == 0 and [(a.principal, a.operation, a.resource_pattern.resource_name)
                                         for a in found] == [(ANONYMOUS, ACLOperation.WRITE, name)]

        wait_until(f"kafka-python to describe the ACL on {name}", described, timeout_s=TIMEOUT_S)
        [(_, removed, error)] = admin.delete_acls([wanted])
        assert error.errno == 0 and [a.operation for a in removed] == [ACLOperation.WRITE]
    finally:
        admin.close()


# -- authorization: User:ANONYMOUS (every PLAINTEXT client) refused, then allowed by CreateAcls ----------


def _produce(address: str, topic: str, count: int = 5) -> list:
    """Produce `count` records; the delivery errors (None each for a delivered record)."""
    producer = Producer({"bootstrap.servers": address, "message.timeout.ms": 20_000, **QUIET})
    errors: list = []
    for n in range(count):
        producer.produce(topic, f"{topic}-{n}".encode(), on_delivery=lambda error, _: errors.append(error))
    assert producer.flush(TIMEOUT_S) == 0
    return errors


def consumer_error(settings: dict, topic: str, timeout_s: float = TIMEOUT_S) -> int | None:
    """The first error a group consumer (librdkafka `settings`, group.id included) of `topic` meets,
    or None once it got a record."""
    consumer = Consumer({"auto.offset.reset": "earliest", "enable.auto.commit": False, **QUIET, **settings})
    consumer.subscribe([topic])
    try:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            message = consumer.poll(0.5)
            if message is None:
                continue
            if message.error() is not None:
                if message.error().code() in (KafkaError._PARTITION_EOF,):
                    continue
                return message.error().code()
            return None
        raise AssertionError(f"the consumer of {topic} got neither a record nor an error")
    finally:
        consumer.close()


def _consumer_error(address: str, topic: str, group: str) -> int | None:
    return consumer_error({"bootstrap.servers": address, "group.id": group}, topic)


def admin_error(futures) -> int | None:
    """The error code the first refused future of an admin call raised, None when none was."""
    try:
        for future in futures.values():
            future.result(timeout=TIMEOUT_S)
    except KafkaException as exc:
        return exc.args[0].code()
    return None


def test_produce_consume_commit_refused_until_acls_allow_them(cluster) -> None:
    topic, group = f"guarded-{uuid.uuid4().hex[:6]}", f"readers-{uuid.uuid4().hex[:6]}"
    create(cluster.admin, NewTopic(topic, 1, 1))
    assert _produce(cluster.address, topic) == [None] * 5  # no ACL on the topic: allow.everyone.if.no.acl.found
    bob = _binding(topic, AclOperation.ALL, principal="User:bob")
    cluster.create_acls(bob)  # now the topic has an ACL, none for ANONYMOUS
    cluster.wait_listed({bob}, set(), "bob's ACL")
    assert {e.code() for e in _produce(cluster.address, topic)} == {KafkaError.TOPIC_AUTHORIZATION_FAILED}
    assert _consumer_error(cluster.address, topic, group) == KafkaError.TOPIC_AUTHORIZATION_FAILED
    with MetadataClient(cluster.address) as client:  # an all-topics Metadata answer hides it
        assert topic not in {tp.topic for tp in client.fetch(None).partitions}

    write, read = _binding(topic, AclOperation.WRITE), _binding(topic, AclOperation.READ)
    group_read = _binding(group, AclOperation.READ, kind=ResourceType.GROUP)
    locked = _binding(group, AclOperation.READ, kind=ResourceType.GROUP, principal="User:bob")
    cluster.create_acls(write, locked)
    cluster.wait_listed({write, locked}, set(), "ANONYMOUS's WRITE")
    assert _produce(cluster.address, topic) == [None] * 5
    cluster.create_acls(read)  # READ on the topic, but the group has ACLs only for bob
    cluster.wait_listed({read}, set(), "ANONYMOUS's READ on the topic")
    assert _consumer_error(cluster.address, topic, group) == KafkaError.GROUP_AUTHORIZATION_FAILED
    cluster.create_acls(group_read)
    cluster.wait_listed({group_read}, set(), "ANONYMOUS's READ on the group")
    assert _consumer_error(cluster.address, topic, group) is None

    consumer = Consumer({"bootstrap.servers": cluster.address, "group.id": group, **QUIET})
    try:
        [committed] = consumer.commit(offsets=[TopicPartition(topic, 0, 3)], asynchronous=False)
        assert committed.error is None and committed.offset == 3
        cluster.delete_acls(AclBindingFilter(ResourceType.TOPIC, topic, ResourcePatternType.LITERAL, ANONYMOUS, "*",
                                             AclOperation.READ, AclPermissionType.ALLOW))
        cluster.wait_listed(set(), {read}, "ANONYMOUS's READ on the topic revoked")
        with pytest.raises(KafkaException) as refused:
            consumer.commit(offsets=[TopicPartition(topic, 0, 4)], asynchronous=False)
        assert "TOPIC_AUTHORIZATION_FAILED" in str(refused.value)
    finally:
        consumer.close()


def test_create_and_delete_topics_refused_until_acls_allow_them(cluster) -> None:
    name = f"forbidden-{uuid.uuid4().hex[:6]}"
    # ACLs on the cluster: the nodes' own requests (ANONYMOUS too, over PLAINTEXT) keep CLUSTER_ACTION,
    # the admin keeps ALTER (CreateAcls) and DESCRIBE; CREATE on the cluster is no longer everyone's
    on_cluster = [_binding(CLUSTER, op, kind=ResourceType.BROKER) for op in (AclOperation.CLUSTER_ACTION,
                                                                              AclOperation.ALTER)]
    deny_create = _binding("forbidden-", AclOperation.CREATE, ResourcePatternType.PREFIXED,
                           permission=AclPermissionType.DENY)
    cluster.create_acls(*on_cluster, deny_create)
    try:
        cluster.wait_listed({*on_cluster, deny_create}, set(), "the cluster ACLs")
        assert admin_error(cluster.admin.create_topics([NewTopic(name, 1, 1)], request_timeout=TIMEOUT_S)) == \
            KafkaError.TOPIC_AUTHORIZATION_FAILED
        cluster.delete_acls(AclBindingFilter(ResourceType.TOPIC, "forbidden-", ResourcePatternType.PREFIXED, None,
                                             None, AclOperation.ANY, AclPermissionType.ANY))
        cluster.wait_listed(set(), {deny_create}, "the DENY revoked")
        create(cluster.admin, NewTopic(name, 1, 1))  # no ACL on the name: allow.everyone.if.no.acl.found

        deny_delete = _binding(name, AclOperation.DELETE, permission=AclPermissionType.DENY)
        cluster.create_acls(deny_delete)
        cluster.wait_listed({deny_delete}, set(), "the DENY of DELETE")
        assert admin_error(cluster.admin.delete_topics([name], request_timeout=TIMEOUT_S)) == \
            KafkaError.TOPIC_AUTHORIZATION_FAILED
        cluster.delete_acls(AclBindingFilter(ResourceType.TOPIC, name, ResourcePatternType.LITERAL, None, None,
                                             AclOperation.ANY, AclPermissionType.ANY))
        cluster.wait_listed(set(), {deny_delete}, "the DENY of DELETE revoked")
        assert admin_error(cluster.admin.delete_topics([name], request_timeout=TIMEOUT_S)) is None
    finally:
        cluster.delete_acls(AclBindingFilter(ResourceType.BROKER, CLUSTER, ResourcePatternType.ANY, None, None,
                                             AclOperation.ANY, AclPermissionType.ANY))


def test_kafka_python_producer_refused_then_allowed_and_its_group_consumer_reads(cluster) -> None:
    topic, group = f"kp-guarded-{uuid.uuid4().hex[:6]}", f"kp-readers-{uuid.uuid4().hex[:6]}"
    create(cluster.admin, NewTopic(topic, 1, 1))
    bob = _binding(topic, AclOperation.ALL, principal="User:bob")
    cluster.create_acls(bob)
    cluster.wait_listed({bob}, set(), "bob's ACL")
    producer = KafkaProducer(bootstrap_servers=cluster.address, max_block_ms=TIMEOUT_S * 1000)
    try:
        with pytest.raises(kafka.errors.TopicAuthorizationFailedError):
            producer.send(topic, b"refused").get(timeout=TIMEOUT_S)
        granted = [_binding(topic, AclOperation.WRITE), _binding(topic, AclOperation.READ),
                   _binding(group, AclOperation.READ, kind=ResourceType.GROUP)]
        cluster.create_acls(*granted)
        cluster.wait_listed(set(granted), set(), "ANONYMOUS's WRITE, READ and group READ")
        wait_until(f"kafka-python to produce to {topic}", lambda: _sent(producer, topic), timeout_s=TIMEOUT_S)
    finally:
        producer.close()
    consumer = KafkaConsumer(topic, bootstrap_servers=cluster.address, group_id=group, auto_offset_reset="earliest",
                             consumer_timeout_ms=TIMEOUT_S * 1000)
    try:
        assert next(iter(consumer)).value == b"allowed"
        consumer.commit()
    finally:
        consumer.close()


def _sent(producer, topic: str) -> bool:
    """One record "allowed" sent (False while the producer's metadata still says it may not)."""
    try:
        producer.send(topic, b"allowed").get(timeout=TIMEOUT_S)
    except kafka.errors.TopicAuthorizationFailedError:
        return False
    return True
