"""A null group id (the schemas do not allow one; the engine decodes a -1 length as null) is refused
by the request parser on every group API, as Kafka's generated readers refuse it ("non-nullable
field groupId was serialized as null"): the request never reaches the coordinator (issue 21: it
reached java_string_hash(None)), and the listener closes that connection only."""

from __future__ import annotations

import asyncio

import pytest

from quorum.wire.errors import MalformedRequestError
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
        with pytest.raises(MalformedRequestError, match="non-nullable field group_id is null"):
            await wire.call(api_key, version, group_id=None, **MEMBERSHIP[api_key])

    asyncio.run(with_shell(test))


@pytest.mark.parametrize("version", versions(13))
def test_leave_group(version: int) -> None:
    Member = APIS[13].request.MemberIdentity

    async def test(wire, shell):
        fields = {"members": [Member(member_id="m", group_instance_id=None)]} if version >= 3 else {"member_id": "m"}
        with pytest.raises(MalformedRequestError, match="non-nullable field group_id is null"):
            await wire.call(13, version, group_id=None, **fields)

    asyncio.run(with_shell(test))


@pytest.mark.parametrize("version", [v for v in versions(9, 9) if v >= 2])
def test_offset_fetch(version: int) -> None:
    """v2+ (v0 and v1 have no group-level error; v8+ asks for several groups)."""
    Group = APIS[9].request.OffsetFetchRequestGroup

    async def test(wire, shell):
        with pytest.raises(MalformedRequestError, match="non-nullable field (groups.)?group_id is null"):
            if version >= 8:
                await wire.call(9, version, groups=[Group(group_id=None, topics=None)])
            else:
                await wire.call(9, version, group_id=None, topics=None)

    asyncio.run(with_shell(test))


@pytest.mark.parametrize("version", versions(15))
def test_describe_groups(version: int) -> None:
    async def test(wire, shell):
        with pytest.raises(MalformedRequestError, match="non-nullable field groups"):
            await wire.call(15, version, groups=[None, "g"])

    asyncio.run(with_shell(test))


def test_a_null_in_a_list_groups_filter_is_refused() -> None:
    async def test(wire, shell):
        with pytest.raises(MalformedRequestError, match="non-nullable field states_filter"):
            await wire.call(16, 4, states_filter=[None])

    asyncio.run(with_shell(test))
