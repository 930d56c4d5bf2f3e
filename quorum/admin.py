"""Client side of the quorum tools: `quorum describe`, as `kafka-metadata-quorum.sh` does it.

DescribeQuorum is answered by the leader only; a follower answers NOT_LEADER_OR_FOLLOWER with
the leader's id and the voters' endpoints (the Nodes field of v2), and the tool asks again there.
"""

from __future__ import annotations

import asyncio
import itertools
import time
from collections.abc import Callable
from dataclasses import dataclass

from quorum.net.client_security import ClientSecurity
from quorum.net.peer_client import PeerClient, PeerUnavailable
from quorum.server.quorum_handlers import METADATA_WRITES_PRODUCE_VERSION, PRODUCE, metadata_write_request
from quorum.server.raft_rpc import METADATA_PARTITION, METADATA_TOPIC
from quorum.wire.errors import ErrorCode, error_name
from quorum.wire.protocol import APIS
from quorum.wire.records import Record, build_batch

DESCRIBE_QUORUM, DESCRIBE_CLUSTER = 55, 60
DESCRIBE_QUORUM_VERSION, DESCRIBE_CLUSTER_VERSION = 2, 0


class QuorumToolError(RuntimeError):
    """The quorum could not be described; the message says why."""


@dataclass(frozen=True)
class ReplicaStatus:
    node_id: int
    log_end_offset: int
    last_fetch_timestamp: int
    last_caught_up_timestamp: int
    status: str  # Leader, Follower or Observer


@dataclass(frozen=True)
class QuorumStatus:
    cluster_id: str | None
    leader_id: int
    leader_epoch: int
    high_watermark: int
    replicas: tuple[ReplicaStatus, ...]
    now_ms: int

    @property
    def voters(self) -> list[int]:
        return [r.node_id for r in self.replicas if r.status != "Observer"]

    @property
    def observers(self) -> list[int]:
        return [r.node_id for r in self.replicas if r.status == "Observer"]

    def _leader(self) -> ReplicaStatus | None:
        return next((r for r in self.replicas if r.status == "Leader"), None)

    def lag(self, replica: ReplicaStatus) -> int:
        leader = self._leader()
        return max(0, (leader.log_end_offset if leader else self.high_watermark) - replica.log_end_offset)

    @property
    def max_follower_lag(self) -> int:
        return max((self.lag(r) for r in self.replicas if r.status == "Follower"), default=0)

    @property
    def max_follower_lag_time_ms(self) -> int:
        leader = self._leader()
        followers = [r for r in self.replicas if r.status == "Follower"]
        if leader is None or not followers:
            return 0
        # A follower that never caught up lags by as long as the leader has been caught up.
        return max(0, max(leader.last_caught_up_timestamp - max(r.last_caught_up_timestamp, 0) for r in followers))


async def _describe_once(host: str, port: int, timeout_ms: int,
                         security: ClientSecurity | None = None) -> tuple[object, object]:
    client = PeerClient(host, port, "quorum-describe", timeout_ms, security=security)
    try:
        api = APIS[DESCRIBE_QUORUM]
        request = api.request(topics=[api.request.TopicData(
            topic_name=METADATA_TOPIC, partitions=[api.request.TopicData.PartitionData(
                partition_index=METADATA_PARTITION)])])
        quorum = await client.request(api, DESCRIBE_QUORUM_VERSION, request)
        cluster_api = APIS[DESCRIBE_CLUSTER]
        cluster = await client.request(cluster_api, DESCRIBE_CLUSTER_VERSION,
                                       cluster_api.request(include_cluster_authorized_operations=False))
        return quorum, cluster
    finally:
        await client.close()


async def describe_quorum(bootstrap: str, timeout_ms: int = 10_000,
                          security: ClientSecurity | None = None) -> QuorumStatus:
    """Ask `bootstrap` (HOST:PORT of any controller) and, if it is not the leader, the leader
    (`security`: TLS and SASL for a secured controller listener)."""
    host, _, port = bootstrap.rpartition(":")
    target = (host, int(port))
    for _ in range(3):
        quorum, cluster = await _describe_once(*target, timeout_ms, security)
        partition = quorum.topics[0].partitions[0] if quorum.topics else None
        error = quorum.error_code or (partition.error_code if partition else ErrorCode.UNKNOWN_SERVER_ERROR)
        if error == ErrorCode.NOT_LEADER_OR_FOLLOWER and partition is not None and partition.leader_id >= 0:
            endpoint = next((n.listeners[0] for n in quorum.nodes or () if n.node_id == partition.leader_id
                             and n.listeners), None)
            if endpoint is None:
                raise QuorumToolError(f"{bootstrap} says node {partition.leader_id} leads but gave no address")
            target = (endpoint.host, endpoint.port)
            continue
        if error != ErrorCode.NONE:
            raise QuorumToolError(f"DescribeQuorum to {target[0]}:{target[1]} failed: {error_name(error)} "
                                  f"{getattr(quorum, 'error_message', '') or ''}".rstrip())
        replicas = [ReplicaStatus(v.replica_id, v.log_end_offset, v.last_fetch_timestamp, v.last_caught_up_timestamp,
                                  "Leader" if v.replica_id == partition.leader_id else "Follower")
                    for v in partition.current_voters]
        replicas += [ReplicaStatus(o.replica_id, o.log_end_offset, o.last_fetch_timestamp,
                                   o.last_caught_up_timestamp, "Observer") for o in partition.observers]
        return QuorumStatus(cluster.cluster_id, partition.leader_id, partition.leader_epoch,
                            partition.high_watermark, tuple(replicas), int(time.time() * 1000))
    raise QuorumToolError(f"no leader found from {bootstrap}")


def format_status(status: QuorumStatus) -> str:
    """The `--status` block, laid out as kafka-metadata-quorum.sh prints it."""
    rows = [
        ("ClusterId", status.cluster_id or ""),
        ("LeaderId", status.leader_id),
        ("LeaderEpoch", status.leader_epoch),
        ("HighWatermark", status.high_watermark),
        ("MaxFollowerLag", status.max_follower_lag),
        ("MaxFollowerLagTimeMs", status.max_follower_lag_time_ms),
        ("CurrentVoters", "[" + ",".join(map(str, status.voters)) + "]"),
        ("CurrentObservers", "[" + ",".join(map(str, status.observers)) + "]"),
    ]
    return "\n".join(f"{name + ':':<24}{value}" for name, value in rows)


def format_replication(status: QuorumStatus) -> str:
    """The `--replication` table: one row per replica, leader first, then followers, then observers."""
    order = {"Leader": 0, "Follower": 1, "Observer": 2}
    header = ("NodeId", "LogEndOffset", "Lag", "LastFetchTimestamp", "LastCaughtUpTimestamp", "Status")
    rows = [header] + [
        (str(r.node_id), str(r.log_end_offset), str(status.lag(r)), str(r.last_fetch_timestamp),
         str(r.last_caught_up_timestamp), r.status)
        for r in sorted(status.replicas, key=lambda r: (order[r.status], r.node_id))
    ]
    widths = [max(len(row[i]) for row in rows) for i in range(len(header))]
    return "\n".join("  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip() for row in rows)


# ---------------------------------------------------------------------------------------------
# Committing records through the quorum (tests, benchmarks, tools)

PRODUCE_VERSION = METADATA_WRITES_PRODUCE_VERSION
API_VERSIONS, API_VERSIONS_VERSION = 18, 0

METADATA_WRITES_FOR_TESTS = {"quorum.test.metadata.writes.enable": "true"}
"""The controllers' setting QuorumWriter needs (tests and benchmarks only): without it a controller
serves no Produce, as Kafka's does not (`quorum.server.quorum_handlers`)."""


class QuorumWriter:
    """Commits batches of values to `__cluster_metadata` through whichever controller leads.

    Each call returns once the batch is committed (the leader answers only then); on
    NOT_LEADER_OR_FOLLOWER or an unreachable node it tries the next controller. The controllers
    must run with METADATA_WRITES_FOR_TESTS: one that does not serve Produce ends the call at once
    with a QuorumToolError saying so, rather than retrying until the deadline.
    """

    def __init__(self, controllers: list[str], timeout_ms: int = 10_000) -> None:
        self._clients = [PeerClient(h, int(p), "quorum-writer", timeout_ms)
                         for h, _, p in (c.rpartition(":") for c in controllers)]
        self._preferred = 0
        self._timeout_ms = timeout_ms

    async def commit(self, values: list[bytes], within_s: float = 30.0, backoff_s: float = 0.1) -> int:
        """The base offset of the committed batch; retries (across a failover) for up to `within_s`."""
        api = APIS[PRODUCE]
        now = int(time.time() * 1000)
        records = build_batch([Record(offset=i, timestamp=now, value=v) for i, v in enumerate(values)])
        body = metadata_write_request(records, self._timeout_ms)
        last_error = "no attempt"
        deadline = time.monotonic() + within_s
        for attempt in itertools.count():
            if time.monotonic() > deadline:
                break
            client = self._clients[(self._preferred + attempt) % len(self._clients)]
            try:
                response = await client.request(api, PRODUCE_VERSION, body)
            except PeerUnavailable as exc:
                last_error = str(exc)
                await self._check_serves_produce(client)
                continue
            partition = response.responses[0].partition_responses[0]
            if partition.error_code == ErrorCode.NONE:
                self._preferred = self._clients.index(client)
                return partition.base_offset
            last_error = f"{error_name(partition.error_code)}: {partition.error_message}"
            tried_everyone = attempt % len(self._clients) == len(self._clients) - 1
            if partition.error_code != ErrorCode.NOT_LEADER_OR_FOLLOWER or tried_everyone:
                await asyncio.sleep(backoff_s)
        raise QuorumToolError(f"could not commit within {within_s} s: {last_error}")

    @staticmethod
    async def _check_serves_produce(client: PeerClient) -> None:
        """Raise QuorumToolError when `client`'s controller answers ApiVersions without Produce (it
        closes a connection that sends one); an unreachable controller is left to the retries."""
        api = APIS[API_VERSIONS]
        try:
            answer = await client.request(api, API_VERSIONS_VERSION, api.request())
        except PeerUnavailable:
            return
        if all(key.api_key != PRODUCE for key in answer.api_keys):
            raise QuorumToolError(f"controller {client.host}:{client.port} takes no writes to {METADATA_TOPIC}: "
                                  "start it with quorum.test.metadata.writes.enable=true (tests only)")

    async def close(self) -> None:
        for client in self._clients:
            await client.close()


# ---------------------------------------------------------------------------------------------
# Blocking helpers for scripts, demos and tests


def wait_for_leader(addresses: Callable[[], list[str]], not_node: int | None = None, timeout_s: float = 60.0,
                    min_high_watermark: int = 0) -> QuorumStatus:
    """Poll the controllers at `addresses()` until one reports a leader (other than `not_node`) whose
    cluster id is committed and whose high watermark has reached `min_high_watermark`."""
    deadline = time.monotonic() + timeout_s
    last_error: Exception | None = None
    while time.monotonic() < deadline:
        for address in addresses():
            try:
                status = asyncio.run(describe_quorum(address, timeout_ms=2000))
            except (QuorumToolError, PeerUnavailable, OSError) as exc:  # not up, or no leader yet
                last_error = exc
                continue
            if (status.leader_id >= 0 and status.leader_id != not_node and status.cluster_id
                    and status.high_watermark >= min_high_watermark):
                return status
        time.sleep(0.2)
    raise QuorumToolError(f"no leader within {timeout_s} s: {last_error!r}")


def commit_values(controllers: list[str], values: list[bytes], within_s: float = 30.0) -> int:
    """Commit `values` as one batch through whichever controller leads; its base offset."""
    async def go() -> int:
        writer = QuorumWriter(controllers)
        try:
            return await writer.commit(values, within_s)
        finally:
            await writer.close()

    return asyncio.run(go())
