"""Cluster id bootstrapping as KIP-595's last revision has it.

The first leader generates the id and writes it in its LeaderChangeMessage; later leaders repeat
it; a node caches it once committed and only then sends it. A mismatch is a vote rejection on
Vote, and fatal on Fetch or on BeginQuorumEpoch from an elected leader.
"""

from __future__ import annotations

import base64
import random
import uuid

from quorum.raft.control import build_leader_change_batch, generate_cluster_id, scan_batches
from quorum.raft.interface import (
    AppendBatches,
    BeginQuorumEpochRequest,
    BeginQuorumEpochResponse,
    ClusterIdCommitted,
    Fatal,
    FetchRequest,
    FetchResponse,
    FetchSnapshotRequest,
    FetchSnapshotResponse,
    HighWatermarkAdvanced,
    InstallSnapshot,
    OffsetAndEpoch,
    PersistState,
    VoteRequest,
    VoteResponse,
)
from quorum.raft.state import Role
from quorum.sim.memory_log import MemoryLog
from quorum.wire.errors import ErrorCode
from tests.raft.harness import MemorySnapshots, Node, backing_off, elect, grant, log_with, of_type, replied, sent

ID = "MkU3OEVBNTcwNTJENDM2Qk"
OTHER = "AAAAAAAAAAAAAAAAAAAAAA"


def leader_change_cluster_id(actions: list) -> str | None:
    (append,) = of_type(actions, AppendBatches)
    (info,) = scan_batches(append.batches)
    assert info.leader_change is not None
    return info.leader_change.cluster_id


def test_cluster_ids_look_like_kafkas_and_come_from_the_injected_generator() -> None:
    cluster_id = generate_cluster_id(random.Random(1))
    assert len(cluster_id) == 22 and not cluster_id.startswith("-")
    raw = base64.urlsafe_b64decode(cluster_id + "==")
    assert uuid.UUID(bytes=raw).version == 4
    assert generate_cluster_id(random.Random(1)) == cluster_id != generate_cluster_id(random.Random(2))


def test_the_first_leader_generates_the_id_and_sends_it_only_once_committed() -> None:
    node = Node(1, log=log_with([]))
    node.start()
    actions = elect(node)
    generated = leader_change_cluster_id(actions)
    assert generated is not None and len(generated) == 22
    assert node.core.cluster_id is None
    assert all(s.message.cluster_id is None for s in sent(actions, BeginQuorumEpochRequest))
    node.flush()
    actions = node.request(2, FetchRequest(None, 2, 1, 1, 1, max_wait_ms=0))  # a majority has the LeaderChange
    assert ClusterIdCommitted(generated) in actions
    assert node.core.cluster_id == generated
    node.apply(node.core.resign(node.now))
    node.tick(node.now + 5000)
    assert all(s.message.cluster_id == generated for s in sent(node.run_until_campaign(), VoteRequest))


def test_a_later_leader_repeats_the_id_found_in_its_log() -> None:
    first = Node(1, log=log_with([]))
    first.start()
    generated = leader_change_cluster_id(elect(first))
    # Node 2 restarts with that log (no meta.properties yet) and is elected in epoch 2.
    second = Node(2, log=first.log, persisted=PersistState(1, -1, 1))
    second.start()
    actions = elect(second)
    assert leader_change_cluster_id(actions) == generated


def test_a_follower_commits_the_id_once_its_high_watermark_passes_the_leader_change() -> None:
    leader = Node(1, log=log_with([]))
    leader.start()
    elect(leader)
    leader.flush()
    follower = Node(2)
    follower.start()
    (fetch,) = sent(follower.request(1, BeginQuorumEpochRequest(None, 1, 1)), FetchRequest)
    (response,) = replied(leader.request(2, fetch.message), FetchResponse)
    follower.response(1, response, fetch.message)
    assert follower.core.cluster_id is None
    (fetch,) = sent(follower.flush(), FetchRequest)
    (response,) = replied(leader.request(2, fetch.message), FetchResponse)
    assert response.high_watermark == 1
    actions = follower.response(1, response, fetch.message)
    assert ClusterIdCommitted(leader.core.cluster_id) in actions


def test_a_vote_with_another_cluster_id_is_a_rejection_not_a_death() -> None:
    node = Node(2, cluster_id=ID)
    node.start()
    (response,) = replied(node.request(3, VoteRequest(OTHER, 1, 3, 0, 0)))
    assert response.error == ErrorCode.INCONSISTENT_CLUSTER_ID and not response.vote_granted
    assert node.core.fatal is None
    # An unknown (null) id is not checked.
    (response,) = replied(node.request(3, VoteRequest(None, 1, 3, 0, 0)))
    assert response.error == ErrorCode.NONE and response.vote_granted


def test_a_candidate_counts_inconsistent_cluster_id_as_a_rejection() -> None:
    node = Node(1, cluster_id=ID)
    node.start()
    actions = grant(node, node.run_until_campaign())
    assert node.core.role is Role.CANDIDATE
    for send in sent(actions, VoteRequest):
        assert send.message.cluster_id == ID
        out = node.response(send.destination, VoteResponse(ErrorCode.INCONSISTENT_CLUSTER_ID, -1, 1, False),
                            send.message)
        assert of_type(out, Fatal) == []
    assert backing_off(node) and node.core.fatal is None


def test_begin_quorum_epoch_from_a_leader_with_another_cluster_id_is_refused_not_fatal() -> None:
    # Kafka refuses it and goes on: a leader of another cluster that reaches this node through a
    # reused port (test clusters on one machine) must neither stop it nor be followed.
    node = Node(2, cluster_id=ID)
    node.start()
    actions = node.request(1, BeginQuorumEpochRequest(OTHER, 1, 1))
    (response,) = replied(actions, BeginQuorumEpochResponse)
    assert response.error == ErrorCode.INCONSISTENT_CLUSTER_ID
    assert not of_type(actions, Fatal) and node.core.fatal is None
    assert node.core.leader_id == -1 and node.core.epoch == 0


def test_begin_quorum_epoch_with_another_cluster_id_from_no_elected_leader_is_refused_not_fatal() -> None:
    """A non-voter, this node itself, or an epoch below ours cannot be an elected leader: the protocol
    fuzzer stopped a controller with BeginQuorumEpoch(leader 9, epoch -32768, a garbage cluster id)."""
    node = Node(2, cluster_id=ID)
    node.start()
    for leader_id, epoch in ((9, 1), (2, 1), (1, -32768)):
        actions = node.request(1, BeginQuorumEpochRequest(OTHER, leader_id, epoch))
        (response,) = replied(actions, BeginQuorumEpochResponse)
        assert response.error == ErrorCode.INCONSISTENT_CLUSTER_ID
        assert not of_type(actions, Fatal) and node.core.fatal is None


def test_the_leader_refuses_a_fetch_with_another_cluster_id_and_the_fetcher_tries_another_voter() -> None:
    leader = Node(1, log=log_with([]))
    leader.start()
    elect(leader)
    (response,) = replied(leader.request(9, FetchRequest(OTHER, 9, 1, 0, 0)))
    assert response.error == ErrorCode.INCONSISTENT_CLUSTER_ID
    assert leader.core.role is Role.LEADER and leader.core.fatal is None

    fetcher = Node(9, cluster_id=OTHER)
    (fetch,) = sent(fetcher.start(), FetchRequest)
    assert fetch.message.cluster_id == OTHER
    actions = fetcher.response(fetch.destination, response, fetch.message)
    assert not of_type(actions, Fatal) and fetcher.core.fatal is None  # Kafka logs it and fetches again
    assert fetcher.core.leader_id == -1 and fetcher.core.epoch == 0  # nothing learnt from another cluster
    again = []
    while not again:
        again = sent(fetcher.tick(fetcher.now + 20), FetchRequest)
    assert again[0].message.cluster_id == OTHER


def test_a_fetch_with_the_right_or_no_cluster_id_is_served() -> None:
    leader = Node(1, log=log_with([]), cluster_id=None)
    leader.start()
    generated = leader_change_cluster_id(elect(leader))
    leader.flush()
    for cluster_id in (None, generated):
        (response,) = replied(leader.request(2, FetchRequest(cluster_id, 2, 1, 0, 0, max_wait_ms=0)))
        assert response.error == ErrorCode.NONE


def test_a_restarted_node_finds_the_id_in_its_log_and_commits_it() -> None:
    leader = Node(1, log=log_with([]))
    leader.start()
    generated = leader_change_cluster_id(elect(leader))
    leader.flush()
    restarted = Node(1, log=leader.log, persisted=leader.persisted)  # crashed before the commit
    restarted.start()
    assert restarted.core.cluster_id is None
    # Re-elected, it repeats the id, and commits it with the next majority.
    actions = elect(restarted)
    assert leader_change_cluster_id(actions) == generated
    restarted.flush()
    actions = restarted.request(2, FetchRequest(None, 2, 2, 2, 2, max_wait_ms=0))
    assert ClusterIdCommitted(generated) in actions


def test_a_log_that_contradicts_meta_properties_stops_the_node() -> None:
    leader = Node(1, log=log_with([]))
    leader.start()
    elect(leader)
    node = Node(1, log=leader.log, cluster_id=OTHER)
    assert of_type(node.start(), Fatal)


# -- quorum/raft/cluster_id.py's rule: what chaos seeds 1520, 1765, 1929, 3284 and 3839 broke ---------


def test_the_id_is_committed_before_the_high_watermark_that_commits_it_is_announced() -> None:
    # A snapshot taken at HighWatermarkAdvanced must carry the id in its header: a header without it
    # left a replica that installed it with no id, and as leader it generated a second one.
    leader = Node(1, log=log_with([]))
    leader.start()
    generated = leader_change_cluster_id(elect(leader))
    leader.flush()
    actions = leader.request(2, FetchRequest(None, 2, 1, 1, 1, max_wait_ms=0))
    kinds = [type(a) for a in actions]
    assert ClusterIdCommitted(generated) in actions
    assert kinds.index(ClusterIdCommitted) < kinds.index(HighWatermarkAdvanced)


def own_leader_change_log(cluster_id: str, epoch: int = 1) -> MemoryLog:
    """Node 2's log when it led `epoch` alone: its LeaderChange (carrying `cluster_id`) at offset 0,
    never committed."""
    log = MemoryLog()
    log.append(build_leader_change_batch(0, epoch, 2, (1, 2, 3), (2,), cluster_id, 0))
    log.flush()
    return log


def install(node: Node, snapshot_id: OffsetAndEpoch, header_id: str | None) -> list:
    """Node follows 1 in epoch 3; the leader answers its Fetch with `snapshot_id`, which it pulls
    whole and installs; `header_id` is the cluster id of the snapshot's header."""
    (fetch,) = sent(node.started, FetchRequest)
    actions = node.response(1, FetchResponse(ErrorCode.NONE, 1, 3, 40, snapshot_id.offset, snapshot_id=snapshot_id),
                            fetch.message)
    request = next(s.message for s in sent(actions + node.tick(node.now + 50), FetchSnapshotRequest))
    node.response(1, FetchSnapshotResponse(ErrorCode.NONE, 1, 3, snapshot_id, 10, 0, b"0123456789"), request)
    return node.apply(node.core.on_snapshot_fetched(snapshot_id, None, node.now, header_id))


def following(log: MemoryLog) -> Node:
    node = Node(2, log=log, persisted=PersistState(3, -1, 1))
    node.started = node.start()
    return node


def test_an_installed_snapshot_does_not_commit_the_uncommitted_id_of_the_log_it_replaces() -> None:
    # Seed 3284: node 2's own LeaderChange of epoch 1 (never committed) was below the high watermark
    # the snapshot brought, and its id was recorded as committed beside the leader's.
    for snapshot_id in (OffsetAndEpoch(34, 3), OffsetAndEpoch(34, 1)):  # replaces the log; or not, ends past it
        node = following(own_leader_change_log(OTHER))
        actions = install(node, snapshot_id, None)
        assert InstallSnapshot(snapshot_id) in actions and node.core.high_watermark == 34
        assert not of_type(actions, ClusterIdCommitted) and node.core.cluster_id is None
        # The header's id is the committed one.
        node = following(own_leader_change_log(OTHER))
        actions = install(node, snapshot_id, ID)
        assert of_type(actions, ClusterIdCommitted) == [ClusterIdCommitted(ID)] and node.core.cluster_id == ID
        assert node.core.fatal is None


def test_a_leader_whose_history_starts_at_a_snapshot_never_generates_an_id() -> None:
    snapshots = MemorySnapshots({OffsetAndEpoch(5, 1): b"snapshot"})
    log = MemoryLog(start_offset=5)
    log.set_snapshot_boundary(OffsetAndEpoch(5, 1))
    node = Node(1, log=log, persisted=PersistState(1, -1, -1), snapshots=snapshots)
    node.start()
    assert leader_change_cluster_id(elect(node)) is None  # unknown: written as such, not invented
    log = MemoryLog(start_offset=5)
    log.set_snapshot_boundary(OffsetAndEpoch(5, 1))
    node = Node(1, log=log, persisted=PersistState(1, -1, -1), snapshots=snapshots, cluster_id=ID)
    node.start()
    assert leader_change_cluster_id(elect(node)) == ID


def test_at_start_a_leader_change_below_the_latest_snapshot_does_not_speak_for_the_log() -> None:
    snapshots = MemorySnapshots({OffsetAndEpoch(1, 3): b"snapshot"})
    node = Node(2, log=own_leader_change_log(OTHER), persisted=PersistState(3, -1, 1), cluster_id=ID,
                snapshots=snapshots)
    assert not of_type(node.start(), Fatal) and node.core.cluster_id == ID
    # Above the snapshot it does: a log that contradicts meta.properties stops the node.
    node = Node(2, log=own_leader_change_log(OTHER), persisted=PersistState(3, -1, 1), cluster_id=ID)
    assert of_type(node.start(), Fatal)
