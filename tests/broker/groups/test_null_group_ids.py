"""A null group id (the schemas do not allow one, but the engine decodes a -1 length as null) is
INVALID_GROUP_ID on every group API, as Kafka's GroupCoordinator.isValidGroupId answers, even on
a coordinator that leads every offsets partition (issue 21: it reached java_string_hash(None))."""

from __future__ import annotations

import asyncio

import pytest

from quorum.wire.errors import ErrorCode as E
from quorum.wire.protocol import APIS
from tests.broker.groups.test_handlers import versions, with_shell

MEMBERSHIP = {  # api key -> the request's other fields
    11: {"session_timeout_ms": 10_000, "rebalance_timeout_ms": 10_000, "member_id": "", "protocol_type": "consumer",
         "protocols": []},
    12: {"generation_id": 1, "member_id": "m"},
    14: {"generation_id": 1, "member_id": "m", "assignments": []},
}


@pytest.mark.parametrize(("api_key", "version"), [(key, v) for key in MEMBERSHIP for v in versions(key)])
def test_membership_apis(api_key: int, version: int) -> None:
    async def test(wire, shell):
        answer = await wire.call(api_key, version, group_id=None, **MEMBERSHIP[api_key])
        assert answer.error_code == E.INVALID_GROUP_ID

    asyncio.run(with_shell(test))


@pytest.mark.parametrize("version", versions(13))
def test_leave_group(version: int) -> None:
    Member = APIS[13].request.MemberIdentity

    async def test(wire, shell):
        fields = {"members": [Member(member_id="m", group_instance_id=None)]} if version >= 3 else {"member_id": "m"}
        answer = await wire.call(13, version, group_id=None, **fields)
        assert answer.error_code == E.INVALID_GROUP_ID

    asyncio.run(with_shell(test))


@pytest.mark.parametrize("version", [v for v in versions(9, 9) if v >= 2])
def test_offset_fetch(version: int) -> None:
    """v2+ (v0 and v1 have no group-level error; v8+ asks for several groups)."""
    Group = APIS[9].request.OffsetFetchRequestGroup

    async def test(wire, shell):
        if version >= 8:
            answer = await wire.call(9, version, groups=[Group(group_id=None, topics=None)])
            assert [g.error_code for g in answer.groups] == [E.INVALID_GROUP_ID]
        else:
            answer = await wire.call(9, version, group_id=None, topics=None)
            assert answer.error_code == E.INVALID_GROUP_ID

    asyncio.run(with_shell(test))


@pytest.mark.parametrize("version", versions(15))
def test_describe_groups(version: int) -> None:
    async def test(wire, shell):
        answer = await wire.call(15, version, groups=[None, "g"])
        assert [(g.group_id, g.error_code) for g in answer.groups] == [("", E.INVALID_GROUP_ID), ("g", E.NONE)]

    asyncio.run(with_shell(test))


def test_a_null_in_a_list_groups_filter_matches_no_group() -> None:
    async def test(wire, shell):
        answer = await wire.call(16, 4, states_filter=[None])
        assert (answer.error_code, answer.groups) == (E.NONE, [])

    asyncio.run(with_shell(test))
