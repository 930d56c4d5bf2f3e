"""ACLs on a real cluster (one controller, one broker; one cluster for the whole module): created,
described and deleted with confluent-kafka's and kafka-python's admin clients through the broker
(which forwards CreateAcls and DeleteAcls to the controller and answers DescribeAcls from its image).
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest
from confluent_kafka.admin import (
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    AdminClient,
    ResourcePatternType,
    ResourceType,
)
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

from tests.test_broker_processes import QUIET, one_broker
from tests.test_controller_processes import wait_until

pytestmark = pytest.mark.timeout(300)

AUTHORIZER = {"authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
              "allow.everyone.if.no.acl.found": "true", "super.users": "User:admin"}
ANONYMOUS = "User:ANONYMOUS"
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
