"""A controller that does not lead passes a metadata write (the test-only Produce to
`__cluster_metadata`) on to the leader, as etcd's followers forward proposals: the client is answered
by whichever controller it asked (quorum.server.quorum_handlers). A write passed on once is never
passed on again, and a write sent to the survivors as the leader hands over (SIGTERM) is committed
without the client's retry. Three `quorum start` controllers."""

from __future__ import annotations

import asyncio
import signal

import pytest

from quorum.admin import METADATA_WRITES_FOR_TESTS, wait_for_leader
from quorum.launcher import LocalCluster
from quorum.net.peer_client import PeerClient
from quorum.server.quorum_handlers import FORWARDED_CLIENT_ID
from quorum.wire.errors import ErrorCode
from tests.server.test_pending_writes_processes import PRODUCE, WRITE_TIMEOUT_MS, produce_body
from tests.test_quorum_processes import committed_values

pytestmark = pytest.mark.timeout(180)


async def write(port: int, value: bytes, client_id: str | None = None) -> tuple[str, int, str]:
    """One Produce of `value`: its error name, base offset and message."""
    client = PeerClient("127.0.0.1", port, "forwarding-test", WRITE_TIMEOUT_MS + 10_000)
    try:
        response = await client.request(PRODUCE, 9, produce_body([value]), client_id=client_id)
    finally:
        await client.close()
    partition = response.responses[0].partition_responses[0]
    return ErrorCode(partition.error_code).name, partition.base_offset, partition.error_message or ""


def test_a_follower_passes_writes_on_to_the_leader_and_survivors_take_writes_through_a_handover(tmp_path) -> None:
    cluster = LocalCluster(tmp_path, controllers=3, settings=METADATA_WRITES_FOR_TESTS)
    cluster.format_storage()
    cluster.start()
    addresses = cluster.bootstrap_controllers.split(",")
    try:
        first = wait_for_leader(lambda: addresses, None, 60.0)
        follower = next(n for n in cluster.specs if n != first.leader_id)
        port = cluster.specs[follower].port

        name, offset, message = asyncio.run(write(port, b"via-a-follower"))
        assert (name, message) == ("NONE", "") and offset >= 0
        name, _, message = asyncio.run(write(port, b"passed-on-already", FORWARDED_CLIENT_ID))
        assert name == "NOT_LEADER_OR_FOLLOWER", (name, message)

        survivors = [n for n in cluster.specs if n != first.leader_id]

        async def handover() -> list[tuple[str, int, str]]:
            cluster.processes[first.leader_id].send_signal(signal.SIGTERM)
            return await asyncio.gather(*(write(cluster.specs[n].port, f"at-handover-{n}".encode())
                                          for n in survivors))

        answers = asyncio.run(handover())
        assert [name for name, _, _ in answers] == ["NONE", "NONE"], answers
        second = wait_for_leader(lambda: [cluster.specs[n].address for n in survivors], first.leader_id, 60.0)
        assert second.leader_epoch > first.leader_epoch
        upto = max(offset for _, offset, _ in answers) + 1
        cluster.stop()
        values = committed_values(cluster, second.leader_id, upto)
        assert b"via-a-follower" in values and b"passed-on-already" not in values
        assert {f"at-handover-{n}".encode() for n in survivors} <= set(values)
    finally:
        cluster.stop()
