"""A `__consumer_offsets` partition loads without holding the broker's event loop (issue 19's soak: a
partition of 71,800 commit records replayed in 12 s on the loop; the broker missed its heartbeats, was
fenced, led the partition again once unfenced, loaded again, and so on for ever)."""

from __future__ import annotations

import asyncio

from quorum.broker.groups.config import GroupConfig
from quorum.broker.groups.coordinator import GroupCoordinator
from quorum.broker.groups.find_coordinator import CoordinatorNode
from quorum.broker.groups.offsets_log import InMemoryOffsetsLog
from quorum.broker.groups.shell import LOAD_STEP_RECORDS, GroupCoordinatorShell
from quorum.wire.consumer_offsets import OffsetKey, OffsetValue, encode_record

CONFIG = GroupConfig(group_initial_rebalance_delay_ms=0, offsets_topic_num_partitions=1)
RECORDS = 20_000


def test_a_big_partition_loads_while_the_event_loop_keeps_turning() -> None:
    async def run() -> tuple[bool, int]:
        log = InMemoryOffsetsLog()
        log.partitions[0] = [encode_record(OffsetKey("g", "t", n % 3), OffsetValue(n, 0, "", 1_000 + n))
                             for n in range(RECORDS)]
        shell = GroupCoordinatorShell(GroupCoordinator(CONFIG), log, lambda p: CoordinatorNode(7, "broker-7", 9097))
        turns = 0

        async def other_work() -> None:  # a heartbeat, a Raft fetch, a request: anything else on the loop
            nonlocal turns
            while True:
                turns += 1
                await asyncio.sleep(0)

        beside = asyncio.create_task(other_work())
        await asyncio.sleep(0)
        before = turns
        loaded = await shell.become_leader(0)
        during = turns - before
        beside.cancel()
        await shell.close()
        return loaded, during

    loaded, during = asyncio.run(run())
    assert loaded
    assert during >= RECORDS // LOAD_STEP_RECORDS - 1, f"the loop turned {during} times during the load"
