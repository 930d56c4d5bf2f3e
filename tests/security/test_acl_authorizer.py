"""The authorizer against a brute-force model of Kafka's StandardAuthorizer rules, and its settings.

The model scans every ACL and states each rule the way Kafka's documentation does; the
authorizer answers from its index. Hypothesis draws ACL sets over a small alphabet of names,
principals and hosts so that literal, wildcard and prefix matches, DENY/ALLOW conflicts and the
implied operations all occur often.
"""

from __future__ import annotations

import uuid

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from quorum.security.acl import (
    AccessControlEntry,
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    InvalidAclError,
    PatternType,
    ResourcePattern,
    ResourceType,
    new_binding,
)
from quorum.security.authorizer import (
    STANDARD_AUTHORIZER,
    Authorizer,
    AuthorizerConfigError,
    authorizer_from_properties,
)

TYPES = [ResourceType.TOPIC, ResourceType.GROUP, ResourceType.CLUSTER, ResourceType.TRANSACTIONAL_ID]
OPERATIONS = [op for op in AclOperation if op not in (AclOperation.UNKNOWN, AclOperation.ANY)]
NAMES = st.sampled_from(["", "a", "ab", "abc", "abd", "b", "ba", "*"])
PRINCIPALS = st.sampled_from(["User:alice", "User:bob", "User:*", "Group:alice"])
HOSTS = st.sampled_from(["*", "10.0.0.1", "10.0.0.2"])

IMPLIES = {AclOperation.DESCRIBE: {AclOperation.READ, AclOperation.WRITE, AclOperation.DELETE, AclOperation.ALTER},
           AclOperation.DESCRIBE_CONFIGS: {AclOperation.ALTER_CONFIGS}}


@st.composite
def bindings(draw) -> AclBinding:
    name = draw(NAMES.filter(bool))
    pattern = ResourcePattern(draw(st.sampled_from(TYPES)), name,
                              draw(st.sampled_from([PatternType.LITERAL, PatternType.PREFIXED])))
    entry = AccessControlEntry(draw(PRINCIPALS), draw(HOSTS), draw(st.sampled_from(OPERATIONS)),
                               draw(st.sampled_from([AclPermissionType.ALLOW, AclPermissionType.DENY])))
    return AclBinding(pattern, entry)


def model(acls, super_users, allow_if_none, principal, host, operation, resource_type, name) -> bool:
    """Kafka's rules, by a scan of every ACL."""
    if principal in super_users:
        return True

    def applies(b: AclBinding) -> bool:
        p = b.pattern
        if p.resource_type != resource_type:
            return False
        if p.pattern_type is PatternType.LITERAL:
            return p.name == name or p.name == "*"
        return name.startswith(p.name)

    def counts(e: AccessControlEntry) -> bool:
        if e.principal not in (principal, "User:*") or e.host not in ("*", host):
            return False
        if e.operation in (AclOperation.ALL, operation):
            return True
        return e.permission is AclPermissionType.ALLOW and e.operation in IMPLIES.get(operation, ())

    relevant = [b for b in acls if applies(b)]
    if not relevant:
        return allow_if_none
    counting = [b.entry.permission for b in relevant if counts(b.entry)]
    return AclPermissionType.DENY not in counting and AclPermissionType.ALLOW in counting


@settings(max_examples=250, deadline=None)
@given(acls=st.lists(bindings(), max_size=12), super_user=st.booleans(), allow_if_none=st.booleans(),
       principal=PRINCIPALS.filter(lambda p: p != "User:*"), host=HOSTS.filter(lambda h: h != "*"),
       operation=st.sampled_from([op for op in OPERATIONS if op is not AclOperation.ALL]),
       resource_type=st.sampled_from(TYPES), name=NAMES.filter(lambda n: n not in ("", "*")))
def test_authorizer_agrees_with_the_model(acls, super_user, allow_if_none, principal, host, operation,
                                          resource_type, name) -> None:
    super_users = frozenset({"User:bob"} if super_user else set())
    authorizer = Authorizer(super_users=super_users, allow_everyone_if_no_acl_found=allow_if_none)
    authorizer.update({uuid.uuid4(): binding for binding in acls})
    expected = model(acls, super_users, allow_if_none, principal, host, operation, resource_type, name)
    assert authorizer.authorize(principal, host, operation, resource_type, name) is expected


def _acl(name: str, op: AclOperation, allow: bool = True, pattern: PatternType = PatternType.LITERAL,
         principal: str = "User:alice", host: str = "*", kind: ResourceType = ResourceType.TOPIC) -> AclBinding:
    permission = AclPermissionType.ALLOW if allow else AclPermissionType.DENY
    return AclBinding(ResourcePattern(kind, name, pattern), AccessControlEntry(principal, host, op, permission))


def _authorizer(*acls: AclBinding, **kwargs) -> Authorizer:
    authorizer = Authorizer(**kwargs)
    authorizer.update({uuid.uuid4(): acl for acl in acls})
    return authorizer


def test_named_rules() -> None:
    auth = _authorizer(_acl("orders", AclOperation.READ), _acl("pay", AclOperation.WRITE, pattern=PatternType.PREFIXED),
                       _acl("payroll", AclOperation.ALL, allow=False))
    read = lambda name, op=AclOperation.READ: auth.authorize("User:alice", "10.0.0.1", op, ResourceType.TOPIC, name)  # noqa: E731
    assert read("orders") and read("orders", AclOperation.DESCRIBE)  # READ implies DESCRIBE
    assert not read("orders", AclOperation.WRITE)
    assert read("payments", AclOperation.WRITE) and read("payments", AclOperation.DESCRIBE)
    assert not read("payroll", AclOperation.WRITE)  # DENY wins over the prefix's ALLOW
    assert not read("other")  # no ACL at all: allow.everyone.if.no.acl.found is false by default
    assert not auth.authorize("User:bob", "10.0.0.1", AclOperation.READ, ResourceType.TOPIC, "orders")


def test_deny_of_an_operation_does_not_deny_what_it_implies() -> None:
    auth = _authorizer(_acl("t", AclOperation.DESCRIBE), _acl("t", AclOperation.READ, allow=False))
    assert auth.authorize("User:alice", "h", AclOperation.DESCRIBE, ResourceType.TOPIC, "t")
    assert not auth.authorize("User:alice", "h", AclOperation.READ, ResourceType.TOPIC, "t")


def test_super_users_and_no_acl_found() -> None:
    auth = _authorizer(_acl("t", AclOperation.ALL, allow=False, principal="User:*"),
                       super_users=frozenset({"User:root"}), allow_everyone_if_no_acl_found=True)
    assert auth.authorize("User:root", "h", AclOperation.WRITE, ResourceType.TOPIC, "t")
    assert not auth.authorize("User:alice", "h", AclOperation.WRITE, ResourceType.TOPIC, "t")
    assert auth.authorize("User:alice", "h", AclOperation.WRITE, ResourceType.TOPIC, "u")  # no ACL on u
    # an ACL on the resource for someone else: no longer "no ACL found"
    other = _authorizer(_acl("t", AclOperation.READ, principal="User:bob"), allow_everyone_if_no_acl_found=True)
    assert not other.authorize("User:alice", "h", AclOperation.READ, ResourceType.TOPIC, "t")


def test_host_must_match() -> None:
    auth = _authorizer(_acl("t", AclOperation.READ, host="10.0.0.1"))
    assert auth.authorize("User:alice", "10.0.0.1", AclOperation.READ, ResourceType.TOPIC, "t")
    assert not auth.authorize("User:alice", "10.0.0.2", AclOperation.READ, ResourceType.TOPIC, "t")


def test_authorize_any_resource() -> None:
    write = AclOperation.WRITE
    assert not _authorizer().authorize_any_resource("User:alice", "h", write, ResourceType.TOPIC)
    assert _authorizer(_acl("t", write)).authorize_any_resource("User:alice", "h", write, ResourceType.TOPIC)
    assert not _authorizer(_acl("t", write), _acl("t", write, allow=False)).authorize_any_resource(
        "User:alice", "h", write, ResourceType.TOPIC)
    assert not _authorizer(_acl("tx", write), _acl("t", write, allow=False, pattern=PatternType.PREFIXED)
                           ).authorize_any_resource("User:alice", "h", write, ResourceType.TOPIC)
    assert _authorizer(_acl("a", write, pattern=PatternType.PREFIXED), _acl("ab", write, allow=False)
                       ).authorize_any_resource("User:alice", "h", write, ResourceType.TOPIC)
    assert not _authorizer(_acl("*", write), _acl("*", write, allow=False)).authorize_any_resource(
        "User:alice", "h", write, ResourceType.TOPIC)
    assert not _authorizer(_acl("t", AclOperation.READ)).authorize_any_resource("User:alice", "h", write,
                                                                                  ResourceType.TOPIC)


@settings(max_examples=200, deadline=None)
@given(binding=bindings(), resource_type=st.sampled_from([ResourceType.ANY, *TYPES]), name=st.none() | NAMES,
       pattern_type=st.sampled_from([PatternType.ANY, PatternType.MATCH, PatternType.LITERAL, PatternType.PREFIXED]))
def test_filter_match_finds_what_applies(binding, resource_type, name, pattern_type) -> None:
    """MATCH finds exactly the bindings that apply to the named resource; ANY and exact types the
    binding of that very name."""
    found = AclBindingFilter(resource_type, name, pattern_type).matches(binding)
    p = binding.pattern
    type_ok = resource_type in (ResourceType.ANY, p.resource_type)
    if pattern_type is PatternType.MATCH and name is not None and p.pattern_type is not PatternType.LITERAL:
        expected = type_ok and name.startswith(p.name)
    elif pattern_type is PatternType.MATCH and name is not None:
        expected = type_ok and p.name in (name, "*")
    else:
        expected = (type_ok and pattern_type in (PatternType.ANY, PatternType.MATCH, p.pattern_type)
                    and (name is None or name == p.name))
    assert found is expected


def test_new_binding_refusals_name_the_field() -> None:
    ok = dict(resource_type=2, name="t", pattern_type=3, principal="User:a", host="*", operation=3, permission=3)
    assert new_binding(**ok).pattern == ResourcePattern(ResourceType.TOPIC, "t", PatternType.LITERAL)
    for change, message in [({"resource_type": 1}, "resourceType"), ({"pattern_type": 2}, "patternType"),
                            ({"operation": 1}, "operation"), ({"permission": 0}, "permissionType"),
                            ({"name": ""}, "empty"), ({"resource_type": 4, "name": "x"}, "kafka-cluster"),
                            ({"principal": "alice"}, "principal"), ({"host": None}, "host"),
                            ({"operation": 99}, "unknown operation")]:
        with pytest.raises(InvalidAclError, match=message):
            new_binding(**{**ok, **change})
    with pytest.raises(InvalidAclError, match="patternFilter"):
        AclBindingFilter.of(2, None, 0, None, None, 1, 1)


def test_settings() -> None:
    assert authorizer_from_properties({}) is None
    auth = authorizer_from_properties({"authorizer.class.name": STANDARD_AUTHORIZER,
                                       "super.users": "User:admin; User:ops", "allow.everyone.if.no.acl.found": "true"})
    assert auth is not None and auth.super_users == {"User:admin", "User:ops"} and auth.allow_everyone_if_no_acl_found
    with pytest.raises(AuthorizerConfigError, match="authorizer.class.name"):
        authorizer_from_properties({"authorizer.class.name": "kafka.security.authorizer.AclAuthorizer"})
    with pytest.raises(AuthorizerConfigError, match="super.users"):
        authorizer_from_properties({"authorizer.class.name": STANDARD_AUTHORIZER, "super.users": "admin"})
