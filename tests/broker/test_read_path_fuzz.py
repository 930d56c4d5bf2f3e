"""Any well-formed Fetch, ListOffsets or OffsetForLeaderEpoch body, at any served version, gets an
answer that encodes and decodes: odd offsets, sizes, epochs, session ids and isolation levels
included (garbage bytes are the wire layer's fuzz tests)."""

from __future__ import annotations

import asyncio

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from quorum.broker.fetch import FetchHandler
from quorum.broker.list_offsets import ListOffsetsHandler
from quorum.broker.partition_view import AppendNotifier
from quorum.image.image import single_node_image
from quorum.wire.protocol import APIS
from tests.broker.fake_partitions import FakeLookup, FakePartition
from tests.broker.wire_calls import call
from tests.wire.schema_strategies import message_values

IMAGE = single_node_image(1, "127.0.0.1", 9092, {"a": 2}, cluster_id="c")
FUZZ = settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.too_slow])
CASES = [(key, version) for key in (1, 2, 23) for version in range(APIS[key].min_version, APIS[key].max_version + 1)]


def handlers():
    topic_id = IMAGE.topics["a"].topic_id
    p0 = FakePartition("a", 0, topic_id, leader_epoch=2)
    p0.append(3)
    p0.append(2, epoch=2)
    lookup = FakeLookup(p0, FakePartition("a", 1, topic_id, is_leader=False))
    fetch = FetchHandler(lookup, AppendNotifier(), lambda: IMAGE)
    offsets = ListOffsetsHandler(lookup, lambda: IMAGE)
    return {1: fetch.handle, 2: offsets.list_offsets, 23: offsets.offset_for_leader_epoch}


def aim_at_real_partitions(key: int, version: int, body) -> None:
    """Point the first topic at "a", so that the partition paths run, not only the unknown-topic one."""
    topics = body.topics or []
    if not topics:
        return
    if key == 1:
        body.max_wait_ms = 0  # no long waits in a fuzz run
        if version >= 13:
            topics[0].topic_id = IMAGE.topics["a"].topic_id
        else:
            topics[0].topic = "a"
    elif key == 2:
        topics[0].name = "a"
    else:
        topics[0].topic = "a"


@pytest.mark.parametrize(("key", "version"), CASES)
@FUZZ
@given(data=st.data())
def test_every_body_gets_an_answer(key, version, data):
    body = data.draw(message_values(APIS[key].request, version))
    if key == 1:
        body.max_wait_ms = 0
    if data.draw(st.booleans()):
        aim_at_real_partitions(key, version, body)
    response = asyncio.run(call(handlers()[key], key, version, body))
    assert response is not None
