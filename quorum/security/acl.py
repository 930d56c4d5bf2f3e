"""ACLs as Kafka defines them: resource patterns, entries, bindings, and the filters that find them.

The codes are Kafka's (org.apache.kafka.common.resource / acl), as they travel in CreateAcls,
DescribeAcls and DeleteAcls and in AccessControlEntryRecord. A binding is what is stored (a
LITERAL or PREFIXED pattern plus one entry); a filter is what DescribeAcls and DeleteAcls send
(ANY and MATCH pattern types, ANY operation and permission, null fields matching anything).
Plain data and pure functions: the authorizer (`quorum.security.authorizer`), the controller and
the broker handlers share them.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import IntEnum

WILDCARD_RESOURCE = "*"
"""A LITERAL pattern of this name matches every resource of its type (Kafka's ResourcePattern.WILDCARD_RESOURCE)."""
WILDCARD_PRINCIPAL = "User:*"
"""An entry of this principal matches every principal (Kafka's Acl.WILDCARD_PRINCIPAL)."""
WILDCARD_HOST = "*"
CLUSTER_NAME = "kafka-cluster"
"""The only name of the CLUSTER resource (Kafka's Resource.CLUSTER_NAME)."""


class ResourceType(IntEnum):
    UNKNOWN = 0
    ANY = 1
    TOPIC = 2
    GROUP = 3
    CLUSTER = 4
    TRANSACTIONAL_ID = 5
    DELEGATION_TOKEN = 6
    USER = 7


class PatternType(IntEnum):
    UNKNOWN = 0
    ANY = 1
    MATCH = 2
    LITERAL = 3
    PREFIXED = 4


class AclOperation(IntEnum):
    UNKNOWN = 0
    ANY = 1
    ALL = 2
    READ = 3
    WRITE = 4
    CREATE = 5
    DELETE = 6
    ALTER = 7
    DESCRIBE = 8
    CLUSTER_ACTION = 9
    DESCRIBE_CONFIGS = 10
    ALTER_CONFIGS = 11
    IDEMPOTENT_WRITE = 12
    CREATE_TOKENS = 13
    DESCRIBE_TOKENS = 14


class AclPermissionType(IntEnum):
    UNKNOWN = 0
    ANY = 1
    DENY = 2
    ALLOW = 3


class InvalidAclError(ValueError):
    """An ACL or filter a request may not name; answered INVALID_REQUEST with this message."""


def _known(enum: type[IntEnum], code: int, what: str) -> IntEnum:
    try:
        return enum(code)
    except ValueError:
        raise InvalidAclError(f"unknown {what} {code}") from None


@dataclass(frozen=True, slots=True)
class ResourcePattern:
    """What an ACL is on: every resource of `resource_type` named `name` (LITERAL; `*` is every
    name) or whose name starts with `name` (PREFIXED)."""

    resource_type: ResourceType
    name: str
    pattern_type: PatternType

    def __str__(self) -> str:
        return f"{self.resource_type.name}:{self.pattern_type.name}:{self.name}"


@dataclass(frozen=True, slots=True)
class AccessControlEntry:
    """Who (`User:alice`, or `User:*`) from where (an address, or `*`) may or may not do what."""

    principal: str
    host: str
    operation: AclOperation
    permission: AclPermissionType


@dataclass(frozen=True, slots=True)
class AclBinding:
    pattern: ResourcePattern
    entry: AccessControlEntry

    def __str__(self) -> str:
        e = self.entry
        return f"({self.pattern}, {e.principal} from {e.host}: {e.permission.name} {e.operation.name})"


def new_binding(resource_type: int, name: str | None, pattern_type: int, principal: str | None, host: str | None,
                operation: int, permission: int) -> AclBinding:
    """A binding CreateAcls may store, from the request's codes; InvalidAclError says what is wrong,
    with Kafka's messages (AclControlManager.validateNewAcl and the broker's CreateAcls checks)."""
    kind = _known(ResourceType, resource_type, "resource type")
    if kind in (ResourceType.UNKNOWN, ResourceType.ANY):
        raise InvalidAclError(f"Invalid resourceType {kind.name}")
    pattern = _known(PatternType, pattern_type, "pattern type")
    if pattern not in (PatternType.LITERAL, PatternType.PREFIXED):
        raise InvalidAclError(f"Invalid patternType {pattern.name}")
    op = _known(AclOperation, operation, "operation")
    if op in (AclOperation.UNKNOWN, AclOperation.ANY):
        raise InvalidAclError(f"Invalid operation {op.name}")
    allow = _known(AclPermissionType, permission, "permission type")
    if allow in (AclPermissionType.UNKNOWN, AclPermissionType.ANY):
        raise InvalidAclError(f"Invalid permissionType {allow.name}")
    if not name:
        raise InvalidAclError("Resource name should not be empty")
    if kind is ResourceType.CLUSTER and name != CLUSTER_NAME:
        raise InvalidAclError(f"The only valid name for the CLUSTER resource is {CLUSTER_NAME}")
    if host is None:
        raise InvalidAclError("Invalid null host")
    kind_, sep, who = (principal or "").partition(":")
    if not sep or not kind_ or not who:
        raise InvalidAclError(f"Invalid principal {principal!r}: a principal is TYPE:NAME, such as User:alice")
    return AclBinding(ResourcePattern(kind, name, pattern), AccessControlEntry(principal or "", host, op, allow))


@dataclass(frozen=True, slots=True)
class AclBindingFilter:
    """DescribeAcls' and DeleteAcls' filter: None fields match anything, ANY codes any value;
    pattern type MATCH finds every binding that would apply to the resource `name` (the literal
    name, the `*` wildcard, and the prefixes of `name`)."""

    resource_type: ResourceType = ResourceType.ANY
    name: str | None = None
    pattern_type: PatternType = PatternType.ANY
    principal: str | None = None
    host: str | None = None
    operation: AclOperation = AclOperation.ANY
    permission: AclPermissionType = AclPermissionType.ANY

    @classmethod
    def of(cls, resource_type: int, name: str | None, pattern_type: int, principal: str | None, host: str | None,
           operation: int, permission: int) -> AclBindingFilter:
        """From a request's codes; InvalidAclError for a code Kafka does not define or an UNKNOWN one."""
        made = cls(_known(ResourceType, resource_type, "resource type"), name,  # type: ignore[arg-type]
                   _known(PatternType, pattern_type, "pattern type"), principal, host,  # type: ignore[arg-type]
                   _known(AclOperation, operation, "operation"),  # type: ignore[arg-type]
                   _known(AclPermissionType, permission, "permission type"))  # type: ignore[arg-type]
        if made.resource_type is ResourceType.UNKNOWN or made.pattern_type is PatternType.UNKNOWN:
            raise InvalidAclError("Unknown patternFilter.")
        if made.operation is AclOperation.UNKNOWN or made.permission is AclPermissionType.UNKNOWN:
            raise InvalidAclError("Unknown entryFilter.")
        return made

    def matches(self, binding: AclBinding) -> bool:
        return self.matches_pattern(binding.pattern) and self.matches_entry(binding.entry)

    def matches_pattern(self, pattern: ResourcePattern) -> bool:
        """Kafka's ResourcePatternFilter.matches."""
        if self.resource_type is not ResourceType.ANY and self.resource_type != pattern.resource_type:
            return False
        wanted = self.pattern_type
        if wanted not in (PatternType.ANY, PatternType.MATCH) and wanted != pattern.pattern_type:
            return False
        if self.name is None:
            return True
        if wanted is PatternType.ANY or wanted == pattern.pattern_type:
            return self.name == pattern.name
        if pattern.pattern_type is PatternType.LITERAL:  # MATCH
            return self.name == pattern.name or pattern.name == WILDCARD_RESOURCE
        return self.name.startswith(pattern.name)

    def matches_entry(self, entry: AccessControlEntry) -> bool:
        """Kafka's AccessControlEntryFilter.matches."""
        return ((self.principal is None or self.principal == entry.principal)
                and (self.host is None or self.host == entry.host)
                and (self.operation is AclOperation.ANY or self.operation == entry.operation)
                and (self.permission is AclPermissionType.ANY or self.permission == entry.permission))


__all__ = [
    "CLUSTER_NAME", "WILDCARD_HOST", "WILDCARD_PRINCIPAL", "WILDCARD_RESOURCE", "AccessControlEntry", "AclBinding",
    "AclBindingFilter", "AclOperation", "AclPermissionType", "InvalidAclError", "PatternType", "ResourcePattern",
    "ResourceType", "new_binding",
]
