"""The node shell pipelines its appends with the fsync in flight, and still acknowledges only
what is durable; consecutive quorum-state writes coalesce (quorum.server.node.RaftNode, issue 17;
how a state that only names the leader is written: tests/server/test_state_writer.py).

One single-voter node runs in this process; its log's fsync is held at a gate, so the test sees
the moment between "appended" and "durable" without depending on the disk's speed.
"""

from __future__ import annotations

import asyncio
import threading
from collections import deque
from collections.abc import Callable
from pathlib import Path

import pytest

from quorum.launcher import LocalCluster
from quorum.raft import interface as raft
from quorum.raft.state import Role
from quorum.server.config import node_config
from quorum.server.node import RaftNode, _superseded
from tests.support.async_waits import DEADLINE_S, until


class GatedFlush:
    """Wraps `Log.flush`: while closed, a flush waits (on its worker thread) until opened."""

    def __init__(self, flush: Callable[[], int]) -> None:
        self._flush = flush
        self.open = threading.Event()
        self.open.set()
        self.waiting = threading.Event()

    def __call__(self) -> int:
        if not self.open.is_set():
            self.waiting.set()
            if not self.open.wait(DEADLINE_S):
                raise AssertionError("the test never opened the fsync gate")
        return self._flush()


@pytest.fixture
def node(tmp_path: Path) -> RaftNode:
    cluster = LocalCluster(tmp_path, controllers=1)
    cluster.format_storage()
    spec = next(iter(cluster.specs.values()))
    return RaftNode(node_config(cluster.properties(spec)))


def test_a_leader_appends_the_next_write_while_an_fsync_is_in_flight_and_acknowledges_only_durable_writes(
        node: RaftNode) -> None:
    async def test() -> None:
        running = asyncio.create_task(node.run())
        try:
            await until(lambda: node.core.role is Role.LEADER and node.core.leader_committed
                        and node.log.flushed_offset == node.log.end_offset,
                        "the single voter leads and has committed its LeaderChange record")
            gate = GatedFlush(node.log.flush)
            node.log.flush = gate  # type: ignore[method-assign]
            gate.open.clear()
            start = node.log.end_offset
            first = asyncio.create_task(node.commit([b"first"], DEADLINE_S))
            await until(lambda: gate.waiting.is_set() and node.log.end_offset == start + 1,
                        f"the first write appended at offset {start} and its fsync started")
            second = asyncio.create_task(node.commit([b"second", b"third"], DEADLINE_S))
            await until(lambda: node.log.end_offset == start + 3,
                        f"the second write appended at offset {start + 1} while the first fsync is held")
            assert node.log.flushed_offset <= start
            assert not first.done() and not second.done(), "a write was acknowledged before it was durable"
            gate.open.set()
            assert await first == start and await second == start + 1
            assert node.log.flushed_offset >= start + 3
            assert node.core.high_watermark >= start + 3
        finally:
            node._stopped.set()
            assert await asyncio.wait_for(running, DEADLINE_S) == 0
    asyncio.run(test())


def test_consecutive_state_changes_with_nothing_sent_between_are_written_once() -> None:
    """A successor told to campaign goes Unattached then Candidate in one call: only the last
    quorum-state is written, since nothing left the node in between (issue 17's failover path)."""
    candidate = raft.PersistState(2, 3, -1)
    vote = raft.Send(1, raft.VoteRequest(None, 2, 3, 1, 5, False))
    assert _superseded(deque([raft.LeaderChanged(-1, 1), candidate, raft.LeaderChanged(-1, 2), vote]))
    assert not _superseded(deque([vote, candidate]))  # the first state was seen by a peer: it is written
    assert not _superseded(deque([raft.AppendBatches(b"", 1), candidate]))
    assert not _superseded(deque([raft.LeaderChanged(-1, 1)]))


def test_a_failed_background_fsync_stops_the_node_naming_it_and_the_write_is_not_acknowledged(node: RaftNode) -> None:
    async def test() -> None:
        running = asyncio.create_task(node.run())
        await until(lambda: node.core.role is Role.LEADER and node.core.leader_committed
                    and node.log.flushed_offset == node.log.end_offset,
                    "the single voter leads and has committed its LeaderChange record")

        def broken() -> int:
            raise OSError(5, "Input/output error")

        node.log.flush = broken  # type: ignore[method-assign]
        write = asyncio.create_task(node.commit([b"lost"], DEADLINE_S))
        assert await asyncio.wait_for(running, DEADLINE_S) == 1
        assert node._fatal is not None and "fsync failed" in node._fatal and "Input/output error" in node._fatal
        assert not write.done() or write.exception() is not None  # never acknowledged
        write.cancel()
        await asyncio.gather(write, return_exceptions=True)
    asyncio.run(test())


def test_a_failed_append_stops_the_node_naming_the_disk_error_and_the_write_is_not_acknowledged(
        node: RaftNode, caplog: pytest.LogCaptureFixture) -> None:
    """Issue 19's soak: a broker's metadata log filled its disk; the append raised out of a response
    task, the node's Raft stopped fetching for good, and the broker stayed fenced, out of every ISR,
    until it was killed. As Kafka halts when its metadata log dir fails, the node stops (exit 1),
    saying why in one line, and its restart recovers the log."""
    async def test() -> None:
        running = asyncio.create_task(node.run())
        await until(lambda: node.core.role is Role.LEADER and node.core.leader_committed,
                    "the single voter leads and has committed its LeaderChange record")

        def full(data: bytes) -> None:
            raise OSError(28, "No space left on device")

        node.log.append = full  # type: ignore[method-assign]
        write = asyncio.create_task(node.commit([b"lost"], DEADLINE_S))
        assert await asyncio.wait_for(running, DEADLINE_S) == 1
        assert node._fatal is not None and "No space left on device" in node._fatal
        assert not write.done() or write.exception() is not None  # never acknowledged
        write.cancel()
        await asyncio.gather(write, return_exceptions=True)
    with caplog.at_level("INFO"):
        asyncio.run(test())
    fatal = [r for r in caplog.records if r.levelname == "CRITICAL"]
    assert fatal and "metadata log dir fails" in fatal[0].getMessage() and fatal[0].exc_info is None
    assert not any(r.exc_info for r in caplog.records), "a traceback was logged"


def test_a_failed_partition_log_dir_stops_the_node_from_the_thread_that_failed(
        node: RaftNode, caplog: pytest.LogCaptureFixture) -> None:
    """A broker's partition log fails on a worker thread (a roll's fsync): the node stops (exit 1)
    naming the log, as Kafka halts when its only log dir fails, whichever thread reported it."""
    async def test() -> None:
        running = asyncio.create_task(node.run())
        await until(lambda: node.core.role is Role.LEADER, "the single voter leads")
        await asyncio.to_thread(node.stop_on_failed_log_dir, "the log of orders-0 in /data refuses writes: full")
        assert await asyncio.wait_for(running, DEADLINE_S) == 1
        assert node._fatal == "the log of orders-0 in /data refuses writes: full"
    with caplog.at_level("INFO"):
        asyncio.run(test())
    fatal = [r.getMessage() for r in caplog.records if r.levelname == "CRITICAL"]
    assert fatal == ["fatal: the log of orders-0 in /data refuses writes: full; stopping, as Kafka halts when "
                     "its only log dir fails"]


def test_a_metadata_log_that_cannot_flush_as_it_closes_stops_the_node_with_one_line(
        node: RaftNode, caplog: pytest.LogCaptureFixture) -> None:
    """The soak (seed 54): a broker stopped on a failed partition log dir, then its metadata log's
    last flush hit the same full disk as it closed, and the node died with a traceback. It exits 1
    with one line instead; the next start recovers the log's tail."""
    async def test() -> None:
        running = asyncio.create_task(node.run())
        await until(lambda: node.core.role is Role.LEADER, "the single voter leads")
        close = node.log.close

        def full() -> None:
            close()
            raise OSError(28, "No space left on device")

        node.log.close = full  # type: ignore[method-assign]
        node._stopped.set()
        assert await asyncio.wait_for(running, DEADLINE_S) == 1
    with caplog.at_level("INFO"):
        asyncio.run(test())
    errors = [r.getMessage() for r in caplog.records if r.levelname == "ERROR"]
    assert errors == ["the metadata log could not be flushed as it closed: [Errno 28] No space left on device"]
    assert not any(r.exc_info for r in caplog.records), "a traceback was logged"
