"""CreateAcls, DeleteAcls and DescribeAcls decided against the metadata's ACLs (Kafka's AclControlManager).

CreateAcls: each creation is validated on its own (`quorum.security.acl.new_binding`: a bad one
gets INVALID_REQUEST with Kafka's message, the others go on); a valid binding gets an
AccessControlEntryRecord with a fresh random id, unless the very same binding exists already or
came earlier in the request (then it succeeds without a record, as creating an ACL twice is
idempotent). DeleteAcls: each filter lists every ACL it matches (an ACL matched by two filters is
listed by both) and each matched ACL gets one RemoveAccessControlEntryRecord. DescribeAcls (read
only, answered by brokers from their image as Kafka's do): the ACLs a filter matches, grouped by
resource pattern.

Sans-IO: the view is the (pending) image, the ids come from the controller's random source.
"""

from __future__ import annotations

import random
import uuid
from collections.abc import Mapping
from typing import Any, Protocol

from quorum.controller.results import ControllerResult
from quorum.security.acl import AclBinding, AclBindingFilter, InvalidAclError, new_binding
from quorum.security.acl_records import encode_acl, remove_acl_record
from quorum.wire import metadata_records as mr
from quorum.wire.errors import ErrorCode
from quorum.wire.protocol import APIS

DESCRIBE_ACLS, CREATE_ACLS, DELETE_ACLS = 29, 30, 31
_ZERO_UUID = uuid.UUID(int=0)


class AclView(Protocol):
    """What these operations read of the metadata: the ACLs by id (`MetadataImage.acls`)."""

    @property
    def acls(self) -> Mapping[uuid.UUID, AclBinding]: ...


def create_acls(request: Any, view: AclView, rng: random.Random) -> ControllerResult:
    schema = APIS[CREATE_ACLS].response
    existing = set(view.acls.values())
    records: list[bytes] = []
    results = []
    for creation in request.creations or ():
        try:
            binding = new_binding(creation.resource_type, creation.resource_name,
                                  getattr(creation, "resource_pattern_type", 3), creation.principal, creation.host,
                                  creation.operation, creation.permission_type)  # fmt: skip
        except InvalidAclError as exc:
            results.append(schema.AclCreationResult(error_code=ErrorCode.INVALID_REQUEST, error_message=str(exc)))
            continue
        if binding not in existing:
            existing.add(binding)
            records.append(encode_acl(_new_acl_id(view, rng), binding))
        results.append(schema.AclCreationResult(error_code=ErrorCode.NONE, error_message=None))
    return ControllerResult(tuple(records), schema(throttle_time_ms=0, results=results))


def delete_acls(request: Any, view: AclView) -> ControllerResult:
    schema = APIS[DELETE_ACLS].response
    result_schema = schema.DeleteAclsFilterResult
    matching_schema = result_schema.DeleteAclsMatchingAcl
    removed: set[uuid.UUID] = set()
    records: list[bytes] = []
    results = []
    for given in request.filters or ():
        try:
            wanted = _filter(given)
        except InvalidAclError as exc:
            results.append(result_schema(error_code=ErrorCode.INVALID_REQUEST, error_message=str(exc),
                                         matching_acls=[]))
            continue
        matching = []
        for acl_id, binding in view.acls.items():
            if not wanted.matches(binding):
                continue
            if acl_id not in removed:
                removed.add(acl_id)
                records.append(mr.encode_metadata_record(remove_acl_record(acl_id)))
            pattern, entry = binding.pattern, binding.entry
            matching.append(matching_schema(
                error_code=ErrorCode.NONE, error_message=None, resource_type=int(pattern.resource_type),
                resource_name=pattern.name, pattern_type=int(pattern.pattern_type), principal=entry.principal,
                host=entry.host, operation=int(entry.operation), permission_type=int(entry.permission)))
        results.append(result_schema(error_code=ErrorCode.NONE, error_message=None, matching_acls=matching))
    return ControllerResult(tuple(records), schema(throttle_time_ms=0, filter_results=results))


def describe_acls(request: Any, acls: Mapping[uuid.UUID, AclBinding]) -> Any:
    """The DescribeAcls response for `request` over `acls` (a broker's image's)."""
    schema = APIS[DESCRIBE_ACLS].response
    try:
        wanted = _filter(request)
    except InvalidAclError as exc:
        return schema(throttle_time_ms=0, error_code=ErrorCode.INVALID_REQUEST, error_message=str(exc), resources=[])
    grouped: dict[Any, list[Any]] = {}
    description = schema.DescribeAclsResource.AclDescription
    for binding in acls.values():
        if wanted.matches(binding):
            entry = binding.entry
            grouped.setdefault(binding.pattern, []).append(description(
                principal=entry.principal, host=entry.host, operation=int(entry.operation),
                permission_type=int(entry.permission)))
    resources = [schema.DescribeAclsResource(resource_type=int(pattern.resource_type), resource_name=pattern.name,
                                             pattern_type=int(pattern.pattern_type), acls=described)
                 for pattern, described in grouped.items()]
    return schema(throttle_time_ms=0, error_code=ErrorCode.NONE, error_message=None, resources=resources)


def _filter(given: Any) -> AclBindingFilter:
    """The filter of a DescribeAcls request or a DeleteAcls filter entry (the same field names)."""
    return AclBindingFilter.of(given.resource_type_filter, given.resource_name_filter,
                               getattr(given, "pattern_type_filter", 3), given.principal_filter, given.host_filter,
                               given.operation, given.permission_type)  # fmt: skip


def _new_acl_id(view: AclView, rng: random.Random) -> uuid.UUID:
    """A random version-4 id no ACL has (and never the zero id)."""
    while True:
        acl_id = uuid.UUID(int=rng.getrandbits(128), version=4)
        if acl_id != _ZERO_UUID and acl_id not in view.acls:
            return acl_id
