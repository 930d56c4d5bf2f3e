"""A follower appends what it fetched and fsyncs it on its event loop before its next Fetch leaves
(quorum.server.node.RaftNode._append_durably_on_the_loop, issue 37), as Kafka's
KafkaRaftClient.appendAsFollower flushes on its one thread: the leader counts a voter's fetch
offset as durable, so no Fetch may claim an offset the follower's disk does not hold yet.

Two voters run in this process on one loop; the follower's `Log.flush` and `_send` are wrapped to
record which thread fsyncs and what each Fetch claims against what is durable when it leaves.
"""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path

from quorum.launcher import LocalCluster
from quorum.raft import interface as raft
from quorum.raft.state import Role
from quorum.server.config import node_config
from quorum.server.node import RaftNode
from tests.support.async_waits import DEADLINE_S, until

WRITES = 40


def test_a_follower_fsyncs_fetched_batches_on_its_loop_before_its_next_fetch_claims_them(tmp_path: Path) -> None:
    cluster = LocalCluster(tmp_path, controllers=2)
    cluster.format_storage()
    nodes = [RaftNode(node_config(cluster.properties(spec))) for spec in cluster.specs.values()]

    async def test() -> None:
        running = [asyncio.create_task(node.run()) for node in nodes]
        try:
            await until(lambda: any(n.core.role is Role.LEADER and n.core.leader_committed for n in nodes),
                         "one of the two voters leads and has committed its LeaderChange record")
            leader = next(n for n in nodes if n.core.role is Role.LEADER)
            follower = next(n for n in nodes if n is not leader)
            flush_threads: set[str] = set()
            claims: list[tuple[int, int]] = []  # (a Fetch's offset, the follower's durable end as it left)
            real_flush, real_send = follower.log.flush, follower._send

            def flush() -> int:
                flush_threads.add(threading.current_thread().name)
                return real_flush()

            async def send(destination: int, message: raft.Message) -> None:
                if isinstance(message, raft.FetchRequest):
                    claims.append((message.fetch_offset, follower.log.flushed_offset))
                await real_send(destination, message)

            follower.log.flush = flush  # type: ignore[method-assign]
            follower._send = send  # type: ignore[method-assign]
            for i in range(WRITES):
                await leader.commit([f"write {i}".encode()], DEADLINE_S)
            end = leader.log.end_offset
            await until(lambda: follower.log.flushed_offset == end and follower.core.high_watermark == end,
                         f"the follower holds offset {end} durably and knows it is committed")
            assert flush_threads == {threading.current_thread().name}, (
                f"the follower fsynced on {flush_threads}, not only on its event loop's thread")
            fetched_past = [(offset, durable) for offset, durable in claims if offset > durable]
            assert not fetched_past, f"Fetches claimed offsets the follower had not fsynced: {fetched_past[:5]}"
            assert max(offset for offset, _ in claims) >= end - 1, "the follower's Fetches never moved with the writes"
        finally:
            for node in nodes:
                node._stopped.set()
            assert await asyncio.wait_for(asyncio.gather(*running), DEADLINE_S) == [0, 0]
    asyncio.run(test())
