"""The controller's CreateAcls and DeleteAcls decisions and DescribeAcls answers, fed by hand."""

from __future__ import annotations

import random

from hypothesis import given, settings
from hypothesis import strategies as st

from quorum.controller.acls import CREATE_ACLS, DELETE_ACLS, DESCRIBE_ACLS, create_acls, delete_acls, describe_acls
from quorum.image.delta import MetadataDelta
from quorum.image.image import MetadataImage, empty_image
from quorum.security.acl import new_binding
from quorum.wire import metadata_records as mr
from quorum.wire.errors import ErrorCode
from quorum.wire.protocol import APIS
from tests.wire.schema_strategies import message_values

CREATE, DELETE, DESCRIBE = APIS[CREATE_ACLS].request, APIS[DELETE_ACLS].request, APIS[DESCRIBE_ACLS].request


def creation(name: str, op: int = 3, kind: int = 2, pattern: int = 3, principal: str = "User:a"):
    return CREATE.AclCreation(resource_type=kind, resource_name=name, resource_pattern_type=pattern,
                              principal=principal, host="*", operation=op, permission_type=3)


def delete_filter(name: str | None, kind: int = 1, pattern: int = 1):
    return DELETE.DeleteAclsFilter(resource_type_filter=kind, resource_name_filter=name, pattern_type_filter=pattern,
                                   principal_filter=None, host_filter=None, operation=1, permission_type=1)


def replayed(image: MetadataImage, records) -> MetadataImage:
    delta = MetadataDelta(image)
    for offset, value in enumerate(records, image.offset + 1):
        delta.replay(value, offset)
    return delta.apply()


def test_create_validates_each_and_skips_duplicates() -> None:
    result = create_acls(CREATE(version=3, creations=[creation("t"), creation("t"), creation("x", kind=4),
                                                      creation("u", op=1)]), empty_image(), random.Random(1))
    assert [(r.error_code, r.error_message) for r in result.response.results] == [
        (0, None), (0, None),
        (ErrorCode.INVALID_REQUEST, "The only valid name for the CLUSTER resource is kafka-cluster"),
        (ErrorCode.INVALID_REQUEST, "Invalid operation ANY")]
    image = replayed(empty_image(), result.records)
    assert list(image.acls.values()) == [new_binding(2, "t", 3, "User:a", "*", 3, 3)]
    again = create_acls(CREATE(version=3, creations=[creation("t")]), image, random.Random(2))
    assert again.records == () and again.response.results[0].error_code == 0


def test_delete_lists_each_match_per_filter_and_removes_it_once() -> None:
    made = create_acls(CREATE(version=3, creations=[creation("t"), creation("t", op=4), creation("p", pattern=4)]),
                       empty_image(), random.Random(3))
    image = replayed(empty_image(), made.records)
    result = delete_acls(DELETE(version=3, filters=[delete_filter("t"), delete_filter(None, kind=2, pattern=3),
                                                    delete_filter("t", pattern=0)]), image)
    first, second, bad = result.response.filter_results
    assert sorted(m.operation for m in first.matching_acls) == [3, 4]
    assert sorted(m.resource_name for m in second.matching_acls) == ["t", "t"]
    assert bad.error_code == ErrorCode.INVALID_REQUEST and bad.error_message == "Unknown patternFilter."
    assert len(result.records) == 2
    assert all(mr.decode_metadata_record(value).id in image.acls for value in result.records)
    assert list(replayed(image, result.records).acls.values()) == [new_binding(2, "p", 4, "User:a", "*", 3, 3)]


def test_describe_groups_by_resource_and_refuses_a_bad_filter() -> None:
    made = create_acls(CREATE(version=3, creations=[creation("t"), creation("t", op=4), creation("g", kind=3)]),
                       empty_image(), random.Random(4))
    image = replayed(empty_image(), made.records)
    every = DESCRIBE(version=3, resource_type_filter=1, resource_name_filter=None, pattern_type_filter=1,
                     principal_filter="User:a", host_filter=None, operation=1, permission_type=1)
    answer = describe_acls(every, image.acls)
    assert answer.error_code == 0
    assert [(r.resource_type, r.resource_name, [a.operation for a in r.acls]) for r in answer.resources] == [
        (2, "t", [3, 4]), (3, "g", [3])]
    every.operation = 0
    assert describe_acls(every, image.acls).error_code == ErrorCode.INVALID_REQUEST


@settings(max_examples=60, deadline=None)
@given(data=st.data(), key=st.sampled_from([CREATE_ACLS, DELETE_ACLS, DESCRIBE_ACLS]), version=st.integers(1, 3))
def test_any_request_body_gets_an_answer_that_encodes(data, key, version) -> None:
    """Garbage codes, nulls and odd names: every creation or filter answered (INVALID_REQUEST where
    bad), never an exception; what is stored replays."""
    body = data.draw(message_values(APIS[key].request, version))
    image = replayed(empty_image(), create_acls(CREATE(version=3, creations=[creation("t")]), empty_image(),
                                                random.Random(5)).records)
    if key == DESCRIBE_ACLS:
        response, records = describe_acls(body, image.acls), ()
    else:
        result = (create_acls(body, image, random.Random(6)) if key == CREATE_ACLS else delete_acls(body, image))
        response, records = result.response, result.records
    response.encode(version=version)
    replayed(image, records)
