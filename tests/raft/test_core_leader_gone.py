"""Issue 17: a follower whose leader's connection is refused or reset starts a pre-vote at once.

After `kill -9` of the leader the kernel answers a follower's next Fetch with a reset or a refused
connection at once; waiting out `quorum.fetch.timeout.ms` on top was most of the 2 s failover.
A timeout is not such evidence (a slow leader is still a leader), and a false alarm stays
harmless: the other voters, still fetching, refuse the pre-vote and the node follows again.
"""

from __future__ import annotations

from quorum.raft.core import GONE_LEADER_JITTER_MS
from quorum.raft.interface import BeginQuorumEpochRequest, FetchRequest, FetchResponse, VoteRequest, VoteResponse
from quorum.raft.state import Role
from tests.raft.harness import Node, sent


def follower_fetching(node_id: int = 2, leader: int = 1, epoch: int = 1) -> tuple[Node, FetchRequest]:
    """A follower that fetched once and has its next Fetch to `leader` outstanding."""
    node = Node(node_id)
    node.start()
    (fetch,) = sent(node.request(leader, BeginQuorumEpochRequest(None, leader, epoch)), FetchRequest)
    (again,) = sent(node.response(leader, FetchResponse(0, leader, epoch, 0, 0), fetch.message), FetchRequest)
    assert node.core.role is Role.FOLLOWER
    return node, again.message


def pre_vote_after_gone_leader(node: Node, fetch: FetchRequest) -> list:
    """The leader's connection is refused: prospective at once, its pre-vote within the jitter."""
    actions = node.apply(node.core.on_send_failed(1, fetch, node.now, peer_gone=True))
    assert node.core.role is Role.PROSPECTIVE
    return sent(actions + node.tick(node.now + GONE_LEADER_JITTER_MS), VoteRequest)


def test_a_refused_or_reset_fetch_to_the_leader_starts_a_pre_vote_at_once():
    node, fetch = follower_fetching()
    requests = pre_vote_after_gone_leader(node, fetch)
    assert sorted(r.destination for r in requests) == [1, 3]
    assert all(r.message.pre_vote and r.message.candidate_epoch == 2 for r in requests)
    assert node.core.epoch == 1  # a pre-vote raises no epoch


def test_a_timed_out_fetch_is_retried_and_the_follower_keeps_following():
    node, fetch = follower_fetching()
    actions = node.apply(node.core.on_send_failed(1, fetch, node.now, peer_gone=False))
    assert sent(actions, VoteRequest) == []
    assert node.core.role is Role.FOLLOWER and node.core.leader_id == 1


def test_a_false_alarm_is_harmless_the_others_refuse_and_it_follows_the_same_leader_again():
    node, fetch = follower_fetching()
    requests = pre_vote_after_gone_leader(node, fetch)
    for request in requests:  # the leader and node 3 are alive and refuse, naming the leader of epoch 1
        node.response(request.destination, VoteResponse(0, 1, 1, False, True), request.message)
    assert node.core.role is Role.FOLLOWER and node.core.leader_id == 1 and node.core.epoch == 1


def test_a_gone_peer_that_is_not_the_leader_changes_nothing():
    node, fetch = follower_fetching()
    actions = node.apply(node.core.on_send_failed(3, fetch, node.now, peer_gone=True))
    assert sent(actions, VoteRequest) == [] and node.core.role is Role.FOLLOWER
