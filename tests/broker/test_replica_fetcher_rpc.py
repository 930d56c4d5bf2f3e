"""The replica fetcher's ListOffsets on the wire: the version each timestamp spec needs, and a
leader whose ApiVersions does not carry it (the spec is answered UNSUPPORTED_VERSION unsent)."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace
from typing import Any

import pytest

from quorum.broker import replica_fetcher_events as ev
from quorum.broker import replica_fetcher_rpc as rpc
from quorum.wire.errors import ErrorCode
from quorum.wire.framing import RequestHeader
from quorum.wire.protocol import Api, encode_request

A, B = ("tiered", 0), ("tiered", 1)


class FakeLeader:
    """A peer that checks each request encodes at its version and answers offset 10 in epoch 3."""

    def __init__(self, list_offsets_max: int) -> None:
        self.list_offsets_max = list_offsets_max
        self.sent: list[tuple[str, int, Any]] = []

    async def request(self, api: Api, version: int, body: Any) -> Any:
        encode_request(api, RequestHeader(api.key, version, 1, "test"), body)
        self.sent.append((api.name, version, body))
        if api.name == "ApiVersions":
            served = SimpleNamespace(api_key=2, max_version=self.list_offsets_max)
            return SimpleNamespace(error_code=0, api_keys=[served])
        assert version <= self.list_offsets_max
        return SimpleNamespace(topics=[SimpleNamespace(name=t.name, partitions=[
            SimpleNamespace(partition_index=p.partition_index, error_code=0, offset=10, leader_epoch=3, timestamp=-1)
            for p in t.partitions]) for t in body.topics])


def list_offsets(leader: FakeLeader, *queries: tuple[tuple[str, int], int],
                 versions: rpc.LeaderVersions | None = None) -> dict[tuple[str, int], ev.ListedOffset]:
    request = ev.ListOffsetsRequest(2, tuple(ev.OffsetQuery(tp, 5, ts) for tp, ts in queries))
    response = asyncio.run(rpc.send(leader, request, versions))  # type: ignore[arg-type]
    return {answer.topic_partition: answer for answer in response.partitions}


@pytest.mark.parametrize(("timestamp", "version"), [(-1, 7), (-2, 7), (-4, 8), (-5, 9), (-6, 11)])
def test_each_timestamp_goes_at_the_version_that_carries_it(timestamp: int, version: int) -> None:
    leader = FakeLeader(11)
    answers = list_offsets(leader, (A, timestamp))
    assert answers[A] == ev.ListedOffset(A, ErrorCode.NONE, 10, 3, -1)
    assert [(name, v) for name, v, _ in leader.sent if name == "ListOffsets"] == [("ListOffsets", version)]
    assert [name for name, _, _ in leader.sent].count("ApiVersions") == (1 if version > 7 else 0)


def test_a_leader_without_v11_answers_minus_6_unsupported_without_being_asked() -> None:
    leader = FakeLeader(10)
    versions = rpc.LeaderVersions()
    answers = list_offsets(leader, (A, -6), (B, -2), versions=versions)
    assert answers[A] == ev.ListedOffset(A, ErrorCode.UNSUPPORTED_VERSION)
    assert answers[B].error == ErrorCode.NONE and answers[B].offset == 10
    [(_, _, asked)] = [s for s in leader.sent if s[0] == "ListOffsets"]
    assert [p.timestamp for t in asked.topics for p in t.partitions] == [-2]
    leader.sent.clear()
    assert list_offsets(leader, (A, -6), versions=versions)[A].error == ErrorCode.UNSUPPORTED_VERSION
    assert leader.sent == []  # ApiVersions was asked once per leader
