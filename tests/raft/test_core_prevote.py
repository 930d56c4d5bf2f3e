"""KIP-996 pre-vote: a partitioned node that comes back does not disrupt a healthy quorum."""

from __future__ import annotations

from quorum.raft.interface import (
    BeginQuorumEpochRequest,
    FetchRequest,
    FetchResponse,
    PersistState,
    VoteRequest,
    VoteResponse,
)
from quorum.raft.state import Role
from tests.raft.harness import Node, batch, elect, of_type, replied, sent


def follower_that_fetched(node_id: int = 2, leader: int = 1, epoch: int = 1) -> Node:
    node = Node(node_id)
    node.start()
    (fetch,) = sent(node.request(leader, BeginQuorumEpochRequest(None, leader, epoch)), FetchRequest)
    node.response(leader, FetchResponse(0, leader, epoch, 0, 0), fetch.message)
    assert node.core.role is Role.FOLLOWER
    return node


def test_a_follower_with_a_live_leader_refuses_pre_votes_and_changes_nothing() -> None:
    node = follower_that_fetched()
    before = node.persisted
    actions = node.request(3, VoteRequest(None, 57, 3, 40, 1000, pre_vote=True))
    (response,) = replied(actions, VoteResponse)
    assert not response.vote_granted and response.pre_vote
    assert (response.leader_id, response.leader_epoch) == (1, 1)
    assert node.core.epoch == 1 and node.core.role is Role.FOLLOWER
    assert of_type(actions, PersistState) == [] and node.persisted == before


def test_a_leader_refuses_pre_votes_and_keeps_leading_whatever_epoch_they_carry() -> None:
    node = Node(1)
    node.start()
    elect(node)
    (response,) = replied(node.request(3, VoteRequest(None, 50, 3, 49, 500, pre_vote=True)))
    assert not response.vote_granted
    assert node.core.role is Role.LEADER and node.core.epoch == 1


def test_pre_votes_are_granted_by_a_voter_without_a_leader_without_changing_its_state() -> None:
    node = Node(2)
    node.start()
    actions = node.request(3, VoteRequest(None, 1, 3, 0, 0, pre_vote=True))
    (response,) = replied(actions)
    assert response.vote_granted and response.pre_vote
    assert node.core.epoch == 0 and node.core.role is Role.UNATTACHED and of_type(actions, PersistState) == []
    # ...and the log comparison still applies.
    other = Node(2)
    other.start()
    other.log.append(batch(0, 1))
    (refused,) = replied(other.request(3, VoteRequest(None, 1, 3, 0, 0, pre_vote=True)))
    assert not refused.vote_granted


def test_an_isolated_follower_campaigns_in_vain_without_raising_its_epoch_and_rejoins() -> None:
    node = follower_that_fetched(node_id=2, leader=1, epoch=1)
    # The leader goes silent for this node: after the fetch timeout it asks for pre-votes...
    for _ in range(5):
        actions = node.run_until_campaign()
        requests = sent(actions, VoteRequest)
        assert requests and all(r.message.pre_vote and r.message.candidate_epoch == 2 for r in requests)
        # ...and the others, still fetching from the leader, refuse (but the answers may be lost).
        third = next(r for r in requests if r.destination == 3)
        node.response(3, VoteResponse(0, -1, 1, False, True), third.message)
        assert node.core.epoch == 1 and node.core.role is Role.PROSPECTIVE
    assert node.persisted == PersistState(1, -1, 1)
    # Back in touch: the leader and node 3 both refuse, naming the leader of epoch 1. The pre-vote
    # is lost, and it follows that leader again, epoch unchanged.
    actions = node.run_until_campaign()
    requests = sent(actions, VoteRequest)
    node.response(requests[0].destination, VoteResponse(0, 1, 1, False, True), requests[0].message)
    assert node.core.role is Role.PROSPECTIVE and node.core.leader_id == 1  # one refusal is not a majority
    actions = node.response(requests[1].destination, VoteResponse(0, 1, 1, False, True), requests[1].message)
    assert node.core.role is Role.FOLLOWER and node.core.leader_id == 1 and node.core.epoch == 1
    assert [f.destination for f in sent(actions, FetchRequest)] == [1]
    assert node.persisted == PersistState(1, -1, 1)


def test_a_follower_that_never_reached_its_leader_grants_pre_votes() -> None:
    node = Node(2)
    node.start()
    node.request(1, BeginQuorumEpochRequest(None, 1, 1))
    (response,) = replied(node.request(3, VoteRequest(None, 2, 3, 0, 0, pre_vote=True)))
    assert response.vote_granted
