"""The test image check (`quorum.test.verify.image`, on in every test process) runs off the Raft
lock: a slow check no longer holds up commits, fetches or votes (issue 38's stalls), and a
difference it finds still stops the node naming it (quorum.server.image_check).

One single-voter node runs in this process; its image check is held at a gate.
"""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path

import pytest

from quorum.image.verify import ImageDivergenceError
from quorum.launcher import LocalCluster
from quorum.raft.state import Role
from quorum.server.config import node_config
from quorum.server.node import RaftNode
from tests.support.async_waits import DEADLINE_S, until


@pytest.fixture
def node(tmp_path: Path) -> RaftNode:
    cluster = LocalCluster(tmp_path, controllers=1, settings={"quorum.test.verify.image": "true"})
    cluster.format_storage()
    spec = next(iter(cluster.specs.values()))
    return RaftNode(node_config(cluster.properties(spec)))


async def _leading(node: RaftNode) -> asyncio.Task[int]:
    running = asyncio.create_task(node.run())
    await until(lambda: node.core.role is Role.LEADER and node.core.leader_committed,
                "the single voter leads and has committed its LeaderChange record")
    return running


def test_commits_go_on_while_an_image_check_is_held(node: RaftNode) -> None:
    assert node.verifier is not None
    gate, held = threading.Event(), threading.Event()
    check = node.verifier.check

    def gated(*args: object) -> None:
        held.set()
        if not gate.wait(DEADLINE_S):
            raise AssertionError("the test never opened the gate")
        check(*args)

    async def test() -> None:
        running = await _leading(node)
        try:
            node.verifier.check = gated  # type: ignore[method-assign]
            first = await node.commit([b"first"], DEADLINE_S)
            await until(held.is_set, "the image check of the first commit started")
            # While that check is held, the core commits more: it does not wait for the check.
            second = await node.commit([b"second"], DEADLINE_S)
            assert second == first + 1 and node.core.high_watermark >= second + 1
            gate.set()
            await until(lambda: node.image_check is not None and node.image_check.checked >= 2,
                        "the held check and the one after it ran")
        finally:
            gate.set()
            node._stopped.set()
            assert await asyncio.wait_for(running, DEADLINE_S) == 0
    asyncio.run(test())


def test_a_difference_found_off_the_lock_stops_the_node_naming_it(node: RaftNode) -> None:
    assert node.verifier is not None

    def diverging(image: object, applied_offset: int) -> None:
        raise ImageDivergenceError(f"node 1: differs at offset {applied_offset}: image.topics['t']")

    async def test() -> None:
        running = await _leading(node)
        node.verifier.check = diverging  # type: ignore[method-assign]
        writing = asyncio.create_task(node.commit([b"value"], DEADLINE_S))  # a check is pending, or comes
        assert await asyncio.wait_for(running, DEADLINE_S) == 1
        writing.cancel()
        await asyncio.gather(writing, return_exceptions=True)
        assert node._fatal is not None and "image.topics['t']" in node._fatal
    asyncio.run(test())
