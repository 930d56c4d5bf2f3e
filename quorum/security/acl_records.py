"""ACLs in the metadata log: AccessControlEntryRecord (18) and RemoveAccessControlEntryRecord (19).

Kafka's records, built and read here so that the controller (which writes them), the image
(which replays them and writes them into snapshots) and the tests agree on one mapping between a
record and an `AclBinding`. Every ACL has an id (a random UUID the controller picks), which is
what DeleteAcls removes.
"""

from __future__ import annotations

import uuid
from typing import Any

from quorum.security.acl import (
    AccessControlEntry,
    AclBinding,
    AclOperation,
    AclPermissionType,
    PatternType,
    ResourcePattern,
    ResourceType,
)
from quorum.wire import metadata_records as mr


def acl_record(acl_id: uuid.UUID, binding: AclBinding) -> Any:
    """The AccessControlEntryRecord v0 that creates `binding` under `acl_id`."""
    pattern, entry = binding.pattern, binding.entry
    return mr.AccessControlEntryRecord(
        version=0, id=acl_id, resource_type=int(pattern.resource_type), resource_name=pattern.name,
        pattern_type=int(pattern.pattern_type), principal=entry.principal, host=entry.host,
        operation=int(entry.operation), permission_type=int(entry.permission))


def remove_acl_record(acl_id: uuid.UUID) -> Any:
    return mr.RemoveAccessControlEntryRecord(version=0, id=acl_id)


def encode_acl(acl_id: uuid.UUID, binding: AclBinding) -> bytes:
    return mr.encode_metadata_record(acl_record(acl_id, binding))


def binding_of(record: Any) -> AclBinding:
    """The binding an AccessControlEntryRecord holds; MetadataRecordError when a code is not one of
    Kafka's or not one a stored ACL may have (ANY, MATCH, UNKNOWN)."""
    return AclBinding(
        ResourcePattern(_code(ResourceType, record.resource_type, "ResourceType", ResourceType.ANY),
                        record.resource_name,
                        _code(PatternType, record.pattern_type, "PatternType", PatternType.MATCH, PatternType.ANY)),
        AccessControlEntry(record.principal, record.host,
                           _code(AclOperation, record.operation, "Operation", AclOperation.ANY),
                           _code(AclPermissionType, record.permission_type, "PermissionType",
                                 AclPermissionType.ANY)))


def _code(enum: Any, value: int, field: str, *refused: Any) -> Any:
    try:
        member = enum(value)
    except ValueError:
        member = None
    if member is None or member in refused or member.name == "UNKNOWN":
        raise mr.MetadataRecordError(f"AccessControlEntryRecord.{field} {value} is not a code a stored ACL may have")
    return member
