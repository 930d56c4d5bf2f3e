"""Kafka's StandardAuthorizer, sans-IO: may this principal, from this host, do this on this resource?

The rules (org.apache.kafka.metadata.authorizer.StandardAuthorizerData):

* a principal in `super.users` may do anything;
* the ACLs that apply to a resource are the LITERAL ones of its exact name, the LITERAL `*` ones of
  its type, and the PREFIXED ones whose name starts its name; of those, an entry counts when its
  principal is the request's or `User:*`, its host is the client's address or `*`, and its
  operation is the one asked, or ALL, or (ALLOW entries only) one that implies it: READ, WRITE,
  DELETE and ALTER imply DESCRIBE, ALTER_CONFIGS implies DESCRIBE_CONFIGS;
* a DENY that counts wins over any ALLOW; an ALLOW that counts allows;
* when no ACL at all applies to the resource (whoever it names), `allow.everyone.if.no.acl.found`
  decides (default false: denied); when some do but none counts, denied.

Lookups read an index by resource (`AclIndex`): one dict lookup for the literal name, one for
`*`, and one per prefix length that some PREFIXED ACL of the type has, never a scan of every ACL.
The index is rebuilt when the image's ACL mapping changes (a new mapping object: the image is
immutable), so the broker authorizes against the ACLs of the image it serves.

Configured as Kafka's: `authorizer.class.name` (Kafka's StandardAuthorizer class name; empty or
absent: no authorization, every request allowed), `super.users` (`User:a;User:b`),
`allow.everyone.if.no.acl.found`.
"""

from __future__ import annotations

import uuid
from collections import defaultdict
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field

from quorum.security.acl import (
    WILDCARD_HOST,
    WILDCARD_PRINCIPAL,
    WILDCARD_RESOURCE,
    AccessControlEntry,
    AclBinding,
    AclOperation,
    AclPermissionType,
    PatternType,
    ResourceType,
)
from quorum.security.principal import KafkaPrincipal

STANDARD_AUTHORIZER = "org.apache.kafka.metadata.authorizer.StandardAuthorizer"
"""The `authorizer.class.name` that turns authorization on (Kafka's KRaft authorizer)."""
AUTHORIZER_NAMES = frozenset({STANDARD_AUTHORIZER, "StandardAuthorizer"})

_ALL = AclOperation.ALL
_ALLOW = AclPermissionType.ALLOW
_DENY = AclPermissionType.DENY
_IMPLIED_BY = {
    AclOperation.DESCRIBE: frozenset({AclOperation.DESCRIBE, AclOperation.READ, AclOperation.WRITE,
                                      AclOperation.DELETE, AclOperation.ALTER}),
    AclOperation.DESCRIBE_CONFIGS: frozenset({AclOperation.DESCRIBE_CONFIGS, AclOperation.ALTER_CONFIGS}),
}
"""Operations an ALLOW entry of which also allows the key operation."""


class AuthorizerConfigError(ValueError):
    """A malformed authorizer setting; the message names the key."""


def entry_result(entry: AccessControlEntry, principals: tuple[str, ...], host: str,
                 operation: AclOperation) -> AclPermissionType | None:
    """ALLOW or DENY when the entry counts for this request, None when it does not (Kafka's findResult)."""
    if entry.principal not in principals:
        return None
    if entry.host != WILDCARD_HOST and entry.host != host:
        return None
    if entry.operation is not _ALL and entry.operation != operation:
        if entry.permission is not _ALLOW:
            return None
        implied = _IMPLIED_BY.get(operation)
        if implied is None or entry.operation not in implied:
            return None
    return entry.permission


class AclIndex:
    """The ACLs of an image (id -> binding) by resource, for `Authorizer` lookups."""

    def __init__(self, acls: Mapping[uuid.UUID, AclBinding]) -> None:
        self.source = acls
        self._literal: dict[tuple[ResourceType, str], list[AccessControlEntry]] = defaultdict(list)
        self._prefixed: dict[tuple[ResourceType, str], list[AccessControlEntry]] = defaultdict(list)
        lengths: dict[ResourceType, set[int]] = defaultdict(set)
        for binding in acls.values():
            pattern = binding.pattern
            key = (pattern.resource_type, pattern.name)
            if pattern.pattern_type is PatternType.PREFIXED:
                self._prefixed[key].append(binding.entry)
                lengths[pattern.resource_type].add(len(pattern.name))
            else:
                self._literal[key].append(binding.entry)
        self._prefix_lengths = {kind: sorted(found) for kind, found in lengths.items()}
        self._literal.default_factory = self._prefixed.default_factory = None  # lookups must not add keys

    def applying(self, resource_type: ResourceType, name: str) -> Iterator[AccessControlEntry]:
        """The entries of every ACL that applies to the resource: its literal name, `*`, its prefixes."""
        literal, prefixed = self._literal, self._prefixed
        yield from literal.get((resource_type, name), ())
        if name != WILDCARD_RESOURCE:
            yield from literal.get((resource_type, WILDCARD_RESOURCE), ())
        for length in self._prefix_lengths.get(resource_type, ()):
            if length > len(name):
                break
            yield from prefixed.get((resource_type, name[:length]), ())

    def entries_of_type(self, resource_type: ResourceType) -> Iterator[tuple[PatternType, str, AccessControlEntry]]:
        """Every (pattern type, name, entry) of one resource type (`authorize_any_resource`)."""
        for table, kind in ((self._literal, PatternType.LITERAL), (self._prefixed, PatternType.PREFIXED)):
            for (of_type, name), entries in table.items():
                if of_type is resource_type:
                    for entry in entries:
                        yield kind, name, entry


@dataclass(slots=True)
class Authorizer:
    """Kafka's StandardAuthorizer over the ACLs `update` was last given (see the module docstring)."""

    super_users: frozenset[str] = frozenset()
    allow_everyone_if_no_acl_found: bool = False
    _index: AclIndex = field(default_factory=lambda: AclIndex({}))

    def update(self, acls: Mapping[uuid.UUID, AclBinding]) -> None:
        """Authorize against `acls` from now on (nothing is rebuilt when it is the mapping already held)."""
        if acls is not self._index.source:
            self._index = AclIndex(acls)

    def is_super_user(self, principal: KafkaPrincipal | str) -> bool:
        return str(principal) in self.super_users

    def authorize(self, principal: KafkaPrincipal | str, host: str, operation: AclOperation,
                  resource_type: ResourceType, name: str) -> bool:
        """Whether the principal, from `host` (the client's address), may do `operation` on the resource."""
        who = str(principal)
        if who in self.super_users:
            return True
        principals = (who, WILDCARD_PRINCIPAL)
        found = allowed = False
        for entry in self._index.applying(resource_type, name):
            found = True
            result = entry_result(entry, principals, host, operation)
            if result is _DENY:
                return False
            allowed = allowed or result is _ALLOW
        return allowed or (not found and self.allow_everyone_if_no_acl_found)

    def authorize_any_resource(self, principal: KafkaPrincipal | str, host: str, operation: AclOperation,
                               resource_type: ResourceType) -> bool:
        """Whether some resource of the type exists that the principal may do `operation` on (Kafka's
        Authorizer.authorizeByResourceType, used for idempotent producers: WRITE on any topic): an
        ALLOW of the operation (or ALL) on a name or prefix that no DENY of it covers."""
        who = str(principal)
        if who in self.super_users:
            return True
        principals = (who, WILDCARD_PRINCIPAL)
        deny_literal: set[str] = set()
        deny_prefix: set[str] = set()
        allow: list[tuple[PatternType, str]] = []
        for kind, name, entry in self._index.entries_of_type(resource_type):
            if entry.principal not in principals or (entry.host != WILDCARD_HOST and entry.host != host):
                continue
            if entry.operation is not _ALL and entry.operation != operation:
                continue
            if entry.permission is _DENY:
                if kind is PatternType.LITERAL and name == WILDCARD_RESOURCE:
                    return False
                (deny_prefix if kind is PatternType.PREFIXED else deny_literal).add(name)
            else:
                allow.append((kind, name))
        for kind, name in allow:
            covered = any(name.startswith(prefix) for prefix in deny_prefix)
            if kind is PatternType.LITERAL:
                if name == WILDCARD_RESOURCE or not (covered or name in deny_literal):
                    return True
            elif not covered:
                return True
        return False


def authorizer_from_properties(props: Mapping[str, str]) -> Authorizer | None:
    """The authorizer a node's properties ask for, or None when `authorizer.class.name` is unset
    (no authorization, as Kafka without an authorizer)."""
    name = (props.get("authorizer.class.name") or "").strip()
    if not name:
        return None
    if name not in AUTHORIZER_NAMES:
        raise AuthorizerConfigError(
            f"authorizer.class.name: only {STANDARD_AUTHORIZER} is supported, got {name!r}")
    return Authorizer(super_users=parse_super_users(props.get("super.users", "")),
                      allow_everyone_if_no_acl_found=_flag(props, "allow.everyone.if.no.acl.found"))


def parse_super_users(text: str) -> frozenset[str]:
    """`super.users`: principals separated by `;`, each TYPE:NAME (Kafka's format)."""
    users = [part.strip() for part in text.split(";") if part.strip()]
    for user in users:
        kind, sep, name = user.partition(":")
        if not sep or not kind or not name:
            raise AuthorizerConfigError(f"super.users: {user!r} is not a principal TYPE:NAME (such as User:admin)")
    return frozenset(users)


def _flag(props: Mapping[str, str], key: str) -> bool:
    value = (props.get(key) or "false").strip().lower()
    if value not in ("true", "false"):
        raise AuthorizerConfigError(f"{key} must be true or false, got {props.get(key)!r}")
    return value == "true"

