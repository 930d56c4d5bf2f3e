"""The Vote rules: one vote per epoch, the last epoch/offset comparison, epochs learned from votes."""

from __future__ import annotations

import pytest

from quorum.raft.interface import PersistState, Reply, VoteRequest, VoteResponse
from quorum.raft.state import Role
from quorum.wire.errors import ErrorCode
from tests.raft.harness import Node, elect, log_with, of_type, replied


def vote(node: Node, candidate: int, epoch: int, last_epoch: int, last_offset: int) -> VoteResponse:
    (response,) = replied(node.request(candidate, VoteRequest(None, epoch, candidate, last_epoch, last_offset)))
    return response


# Our log: epochs [1, 1, 2, 2] -> last epoch 2, end offset 4.
@pytest.mark.parametrize(("last_epoch", "last_offset", "granted"), [
    (2, 4, True),    # identical
    (2, 5, True),    # same epoch, longer
    (3, 1, True),    # later epoch wins even when shorter
    (2, 3, False),   # same epoch, shorter
    (1, 9, False),   # earlier epoch loses even when longer
    (0, 0, False),   # empty
])
def test_votes_go_only_to_logs_at_least_as_up_to_date(last_epoch: int, last_offset: int, granted: bool) -> None:
    node = Node(1, log=log_with([1, 1, 2, 2]), persisted=PersistState(2, -1, -1))
    node.start()
    response = vote(node, 2, 3, last_epoch, last_offset)
    assert response.vote_granted is granted
    assert node.core.epoch == 3 and response.leader_epoch == 3  # the epoch is adopted either way
    assert node.core.role is (Role.VOTED if granted else Role.UNATTACHED)


def test_one_vote_per_epoch_and_the_same_answer_when_asked_again() -> None:
    node = Node(1)
    node.start()
    assert vote(node, 2, 1, 0, 0).vote_granted
    assert not vote(node, 3, 1, 0, 0).vote_granted
    assert vote(node, 2, 1, 0, 0).vote_granted
    assert node.persisted == PersistState(1, 2, -1)


def test_the_vote_is_persisted_before_the_reply() -> None:
    node = Node(1)
    node.start()
    actions = node.request(2, VoteRequest(None, 1, 2, 0, 0))
    kinds = [type(a) for a in actions if isinstance(a, PersistState | Reply)]
    assert kinds == [PersistState, PersistState, Reply]  # the new epoch, the vote, then the answer
    assert of_type(actions, PersistState)[-1] == PersistState(1, 2, -1)


def test_a_vote_request_from_an_older_epoch_is_refused_with_ours() -> None:
    node = Node(1, persisted=PersistState(5, -1, -1))
    node.start()
    response = vote(node, 2, 4, 9, 9)
    assert not response.vote_granted and response.leader_epoch == 5
    assert node.core.epoch == 5


def test_a_leader_steps_down_for_a_higher_epoch_vote() -> None:
    node = Node(1)
    node.start()
    elect(node)
    node.flush()
    response = vote(node, 2, 2, 1, 1)
    assert response.vote_granted
    assert node.core.role is Role.VOTED and node.core.epoch == 2


def test_a_leader_refuses_a_vote_in_its_own_epoch() -> None:
    node = Node(1)
    node.start()
    elect(node)
    assert not vote(node, 2, 1, 9, 9).vote_granted
    assert node.core.role is Role.LEADER


def test_a_follower_does_not_vote_in_the_epoch_of_its_leader() -> None:
    from quorum.raft.interface import BeginQuorumEpochRequest

    node = Node(1)
    node.start()
    node.request(3, BeginQuorumEpochRequest(None, 3, 1))
    assert node.core.role is Role.FOLLOWER
    assert not vote(node, 2, 1, 9, 9).vote_granted


def test_votes_from_non_voters_are_refused() -> None:
    node = Node(1)
    node.start()
    assert not vote(node, 7, 1, 0, 0).vote_granted
    assert node.core.epoch == 0


def test_a_vote_from_a_node_that_is_not_a_voter_is_answered_inconsistent_voter_set() -> None:
    """Issue 38, as Kafka's validateVoterOnlyRequest (3.x, static voters): the sender learns why."""
    node = Node(1)
    node.start()
    response = vote(node, 9, 1, 0, 0)
    assert not response.vote_granted and response.error == ErrorCode.INCONSISTENT_VOTER_SET
    assert node.core.epoch == 0 and node.core.role is Role.UNATTACHED, "a non-voter changes nothing"


def test_a_vote_from_an_older_epoch_is_fenced_and_a_negative_candidate_is_invalid() -> None:
    node = Node(1, persisted=PersistState(5, -1, -1))
    node.start()
    assert vote(node, 2, 4, 3, 9).error == ErrorCode.FENCED_LEADER_EPOCH
    assert vote(node, -1, 6, 3, 9).error == ErrorCode.INVALID_REQUEST
    assert node.core.epoch == 5
