"""Issue 17: writes pending on a leader that stops leading are answered at once.

`bench_quorum`'s 100-records-per-commit row hung: a leader stopped leading while writers waited
for commits that its successor would never make (their entries were not on a majority), and each
writer waited out its whole 30 s timeout; worse, a waiter released by the high watermark alone
would have been told "committed" once the new leader's records passed its offsets.

Here three real voters; both followers are stopped (SIGSTOP) so that the leader's writes cannot
commit; the leader's check-quorum timer makes it step down; every pending write must be answered
NOT_LEADER_OR_FOLLOWER naming the epoch it was proposed in, not REQUEST_TIMED_OUT after 30 s. Once
the followers run again a new leader commits, and none of the refused values is in its log.
"""

from __future__ import annotations

import asyncio
import signal

import pytest

from quorum.admin import METADATA_WRITES_FOR_TESTS, commit_values, wait_for_leader
from quorum.launcher import LocalCluster
from quorum.log.log import Log
from quorum.net.peer_client import PeerClient
from quorum.server.config import node_config
from quorum.server.quorum_handlers import metadata_write_request
from quorum.wire.errors import ErrorCode
from quorum.wire.protocol import APIS
from quorum.wire.records import Record, build_batch

pytestmark = pytest.mark.timeout(240)

PRODUCE = APIS[0]
WRITES = 4
RECORDS_PER_WRITE = 100
WRITE_TIMEOUT_MS = 30_000


def produce_body(values: list[bytes]) -> object:
    records = build_batch([Record(offset=i, timestamp=0, value=value) for i, value in enumerate(values)])
    return metadata_write_request(records, WRITE_TIMEOUT_MS)


async def write_once(port: int, values: list[bytes]) -> tuple[str, str]:
    """One Produce of `values` to the node at `port`: its error name and message."""
    client = PeerClient("127.0.0.1", port, "pending-writer", WRITE_TIMEOUT_MS + 10_000)
    try:
        response = await client.request(PRODUCE, 9, produce_body(values))
    finally:
        await client.close()
    partition = response.responses[0].partition_responses[0]
    return ErrorCode(partition.error_code).name, partition.error_message or ""


def test_writes_pending_on_a_leader_that_steps_down_are_answered_at_once_and_never_committed(tmp_path):
    cluster = LocalCluster(tmp_path, controllers=3, settings=METADATA_WRITES_FOR_TESTS)
    cluster.format_storage()
    cluster.start()
    addresses = cluster.bootstrap_controllers.split(",")
    stopped: list[int] = []
    try:
        first = wait_for_leader(lambda: addresses, None, 60.0)
        commit_values(addresses, [b"before"])
        stopped = [n for n in cluster.specs if n != first.leader_id]
        for node_id in stopped:
            cluster.processes[node_id].send_signal(signal.SIGSTOP)
        refused = [[f"refused-{w}-{i}".encode() for i in range(RECORDS_PER_WRITE)] for w in range(WRITES)]

        async def write_all() -> list[tuple[str, str]]:
            port = cluster.specs[first.leader_id].port
            return await asyncio.gather(*(write_once(port, values) for values in refused))

        answers = asyncio.run(write_all())
        assert [name for name, _ in answers] == ["NOT_LEADER_OR_FOLLOWER"] * WRITES, answers
        assert all(f"stopped leading epoch {first.leader_epoch}" in message for _, message in answers), answers

        for node_id in stopped:
            cluster.processes[node_id].send_signal(signal.SIGCONT)
        stopped = []
        after = commit_values(addresses, [b"after"])
        later = wait_for_leader(lambda: addresses, None, 60.0, min_high_watermark=after + 1)
        assert later.leader_epoch > first.leader_epoch
    finally:
        for node_id in stopped:
            cluster.processes[node_id].send_signal(signal.SIGCONT)
        cluster.stop()
    for node_id in cluster.specs:  # a log that holds the new leader's write holds none of the refused ones
        with Log(node_config(cluster.properties(cluster.specs[node_id])).metadata_log_dir) as log:
            values = {r.value for batch in log.iter_batches(0, log.end_offset) if not batch.is_control for r in batch}
        assert b"after" in values or node_id != later.leader_id
        if b"after" in values:
            assert not any(v.startswith(b"refused-") for v in values if v is not None), f"node {node_id} kept one"
