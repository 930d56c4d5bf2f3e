"""A metadata write (the test-only Produce to `__cluster_metadata`) that reaches a voter while the
quorum elects a leader waits for the outcome instead of answering NOT_LEADER at once: committed if
this voter won (passed on to the winner otherwise: tests/server/test_metadata_writes_forwarding_processes.py),
and NOT_LEADER once the election timeout has passed without a leader (quorum.server.quorum_handlers;
bench_quorum's graceful failover).

The node runs in this process; `_commit` is the Produce handler's write path."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

from quorum.admin import METADATA_WRITES_FOR_TESTS
from quorum.launcher import LocalCluster
from quorum.raft.state import Role
from quorum.server.config import node_config
from quorum.server.node import RaftNode
from quorum.server.quorum_handlers import _commit
from quorum.wire.errors import ErrorCode
from quorum.wire.records import Record, build_batch
from tests.support.async_waits import DEADLINE_S

ELECTION_TIMEOUT_MS = 300


def first_node(tmp_path: Path, controllers: int) -> RaftNode:
    settings = {**METADATA_WRITES_FOR_TESTS, "quorum.election.timeout.ms": str(ELECTION_TIMEOUT_MS)}
    cluster = LocalCluster(tmp_path, controllers=controllers, settings=settings)
    cluster.format_storage()
    return RaftNode(node_config(cluster.properties(cluster.specs[1])))


def records(value: bytes) -> bytes:
    return build_batch([Record(offset=0, timestamp=0, value=value)])


def test_a_write_sent_before_the_voter_has_won_its_election_is_committed_once_it_has(tmp_path: Path) -> None:
    node = first_node(tmp_path, controllers=1)

    async def test() -> None:
        assert node.core.leader_id == -1 and node.core.role is not Role.LEADER
        write = asyncio.create_task(_commit(node, records(b"early"), int(DEADLINE_S * 1000)))
        await asyncio.sleep(0.05)
        assert not write.done(), f"answered before any election: {write.result()}"
        running = asyncio.create_task(node.run())
        try:
            code, base_offset, message = await asyncio.wait_for(write, DEADLINE_S)
            assert (code, message) == (ErrorCode.NONE, None)
            assert node.core.role is Role.LEADER and node.core.high_watermark > base_offset >= 0
        finally:
            node._stopped.set()
            assert await asyncio.wait_for(running, DEADLINE_S) == 0
    asyncio.run(test())


def test_a_write_waits_no_longer_than_the_election_timeout_for_a_leader(tmp_path: Path) -> None:
    """Node 1 of three, alone: no election can end. The write is answered NOT_LEADER after about
    the election timeout, not the request's 30 s."""
    node = first_node(tmp_path, controllers=3)

    async def test() -> None:
        running = asyncio.create_task(node.run())
        try:
            started = time.monotonic()
            code, _, _ = await asyncio.wait_for(_commit(node, records(b"nobody leads"), 30_000), DEADLINE_S)
            waited = time.monotonic() - started
            assert code == ErrorCode.NOT_LEADER_OR_FOLLOWER
            assert ELECTION_TIMEOUT_MS / 1000 * 0.9 <= waited < 10, f"answered after {waited:.2f} s"
        finally:
            node._stopped.set()
            assert await asyncio.wait_for(running, DEADLINE_S) == 0
    asyncio.run(test())
