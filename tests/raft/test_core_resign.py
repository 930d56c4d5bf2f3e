"""Leaders stepping down: the zombie check (KIP-595's leader progress timeout) and graceful resign."""

from __future__ import annotations

from quorum.raft.interface import (
    BeginQuorumEpochRequest,
    EndQuorumEpochRequest,
    EndQuorumEpochResponse,
    FetchRequest,
    FetchResponse,
    PersistState,
    Reply,
    Send,
    VoteRequest,
    VoteResponse,
)
from quorum.raft.state import Role
from quorum.wire.errors import ErrorCode
from tests.raft.harness import Node, elect, log_with, replied, sent


def leader(voters: tuple[int, ...] = (1, 2, 3)) -> Node:
    node = Node(1, voters=voters, log=log_with([]))
    node.start()
    elect(node)
    node.flush()
    return node


def test_a_leader_that_hears_no_fetch_from_a_majority_resigns_and_campaigns() -> None:
    node = leader()
    start = node.now
    node.tick(start + 1999)
    assert node.core.role is Role.LEADER
    actions = node.tick(start + 2000)
    assert node.core.role is Role.RESIGNED and node.core.epoch == 1 and node.core.leader_id == -1
    ends = sent(actions, EndQuorumEpochRequest)
    assert sorted(e.destination for e in ends) == [2, 3]
    # Nobody answers: it keeps trying to learn the quorum, by pre-vote, without raising its epoch.
    campaign = node.run_until_campaign()
    assert node.core.role is Role.PROSPECTIVE
    assert all(r.message.pre_vote and r.message.candidate_epoch == 2 for r in sent(campaign, VoteRequest))
    # An answer naming a newer leader ends the campaign.
    request = sent(campaign, VoteRequest)[0]
    node.response(request.destination, VoteResponse(0, 3, 5, False, True), request.message)
    assert node.core.role is Role.FOLLOWER and node.core.leader_id == 3 and node.core.epoch == 5


def test_a_leader_fetched_from_by_a_majority_stays() -> None:
    node = leader()
    for now in range(node.now, node.now + 10_000, 500):
        node.request(2, FetchRequest(None, 2, 1, 1, 1, max_wait_ms=0), now=now)
        node.tick(now)
    assert node.core.role is Role.LEADER


def test_a_single_voter_leader_never_resigns_for_lack_of_fetches() -> None:
    node = Node(1, voters=(1,))
    node.start()
    node.tick(1_000_000)
    assert node.core.role is Role.LEADER


def test_graceful_resign_names_successors_by_log_end_offset() -> None:
    node = leader(voters=(1, 2, 3, 4))
    for _ in range(3):
        node.propose(b"x")
    node.flush()  # end 4
    node.request(2, FetchRequest(None, 2, 1, 2, 1, max_wait_ms=0))
    node.request(3, FetchRequest(None, 3, 1, 4, 1, max_wait_ms=0))
    node.request(4, FetchRequest(None, 4, 1, 1, 1, max_wait_ms=0))
    actions = node.apply(node.core.resign(node.now))
    assert node.core.role is Role.RESIGNED
    ends = sent(actions, EndQuorumEpochRequest)
    assert sorted(e.destination for e in ends) == [2, 3, 4]
    assert {e.message.preferred_successors for e in ends} == {(3, 2, 4)}
    assert node.core.propose([b"no"], node.now)[0] is None  # a resigned leader writes nothing


def test_the_first_preferred_successor_campaigns_at_once_skipping_pre_vote() -> None:
    node = Node(3, log=log_with([1]))
    node.start()
    node.request(1, BeginQuorumEpochRequest(None, 1, 1))
    actions = node.request(1, EndQuorumEpochRequest(None, 1, 1, (3, 2)))
    assert node.core.role is Role.CANDIDATE and node.core.epoch == 2
    assert PersistState(2, 3, -1) in actions
    votes = sent(actions, VoteRequest)
    assert sorted(v.destination for v in votes) == [1, 2]
    assert all(not v.message.pre_vote and v.message.candidate_epoch == 2 for v in votes)
    (answer,) = replied(actions, EndQuorumEpochResponse)
    assert answer.error == ErrorCode.NONE


def test_later_successors_wait_their_turn() -> None:
    node = Node(2, log=log_with([1]))
    node.start()
    node.request(1, BeginQuorumEpochRequest(None, 1, 1))
    actions = node.request(1, EndQuorumEpochRequest(None, 1, 1, (3, 2)))
    assert sent(actions, VoteRequest) == []
    assert node.core.role is Role.UNATTACHED and node.core.epoch == 1
    start = node.now
    node.run_until_campaign()
    assert node.now - start <= 1000  # election.backoff.max.ms bounds the wait of the last successor


def test_a_resigned_leader_grants_the_successors_vote() -> None:
    node = leader()
    node.apply(node.core.resign(node.now))
    (response,) = replied(node.request(2, VoteRequest(None, 2, 2, 1, 1)))
    assert response.vote_granted
    assert node.core.epoch == 2 and node.core.role is Role.VOTED


def test_a_restarted_leader_comes_back_resigned_and_tells_the_voters() -> None:
    node = Node(1, log=log_with([1]), persisted=PersistState(1, 1, 1))
    actions = node.start()
    assert node.core.role is Role.RESIGNED and node.core.epoch == 1
    assert sorted(e.destination for e in sent(actions, EndQuorumEpochRequest)) == [2, 3]
    (answer,) = replied(node.request(2, FetchRequest(None, 2, 1, 1, 1)))
    assert answer.error == ErrorCode.NOT_LEADER_OR_FOLLOWER and answer.leader_id == -1


def test_a_follower_told_by_its_leader_that_it_no_longer_leads_stops_following() -> None:
    node = Node(2, log=log_with([1]))
    node.start()
    (fetch,) = sent(node.request(1, BeginQuorumEpochRequest(None, 1, 1)), FetchRequest)
    node.response(1, FetchResponse(ErrorCode.NOT_LEADER_OR_FOLLOWER, -1, 1, 0, 0), fetch.message)
    assert node.core.role is Role.UNATTACHED and node.core.epoch == 1
    # A stale BeginQuorumEpoch from that leader does not bring it back.
    node.request(1, BeginQuorumEpochRequest(None, 1, 1))
    assert node.core.role is Role.UNATTACHED


def test_a_resigning_leader_sends_end_quorum_epoch_before_it_answers_its_parked_fetches() -> None:
    """The followers' parked Fetches get NOT_LEADER_OR_FOLLOWER only after EndQuorumEpoch has left,
    so the first successor hears of the resignation first and campaigns at once (a Fetch error
    first made it persist "no leader" before it read the EndQuorumEpoch)."""
    node = leader()
    node.propose(b"x")
    node.flush()
    end = node.log.end_offset
    for follower in (2, 3):
        for _ in range(2):  # the first is answered (a new high watermark), the second parks: nothing new
            node.request(follower, FetchRequest(None, follower, 1, end, 1, max_wait_ms=500))
    actions = node.apply(node.core.resign(node.now))
    ends = [i for i, a in enumerate(actions) if isinstance(a, Send) and isinstance(a.message, EndQuorumEpochRequest)]
    answers = [i for i, a in enumerate(actions) if isinstance(a, Reply) and isinstance(a.message, FetchResponse)]
    assert len(ends) == 2 and len(answers) == 2
    assert max(ends) < min(answers)
    assert all(actions[i].message.error == ErrorCode.NOT_LEADER_OR_FOLLOWER for i in answers)


def test_the_first_successor_sends_its_votes_before_answering_and_nothing_between_its_two_state_changes() -> None:
    """Unattached then Candidate with nothing leaving the node between, so the driver writes
    quorum-state once; the votes go out before the EndQuorumEpoch answer."""
    node = Node(3, log=log_with([1]))
    node.start()
    node.request(1, BeginQuorumEpochRequest(None, 1, 1))
    actions = node.request(1, EndQuorumEpochRequest(None, 1, 1, (3, 2)))
    persists = [i for i, a in enumerate(actions) if isinstance(a, PersistState)]
    assert [actions[i] for i in persists] == [PersistState(1, -1, -1), PersistState(2, 3, -1)]
    assert not any(isinstance(a, (Send, Reply)) for a in actions[persists[0]:persists[1]])
    votes = [i for i, a in enumerate(actions) if isinstance(a, Send) and isinstance(a.message, VoteRequest)]
    answer = next(i for i, a in enumerate(actions) if isinstance(a, Reply))
    assert len(votes) == 2 and max(votes) < answer


def test_the_first_successors_answer_names_the_resigned_epoch_not_its_campaign() -> None:
    node = Node(3, log=log_with([1]))
    node.start()
    node.request(1, BeginQuorumEpochRequest(None, 1, 1))
    (answer,) = replied(node.request(1, EndQuorumEpochRequest(None, 1, 1, (3, 2))), EndQuorumEpochResponse)
    assert (answer.error, answer.leader_id, answer.leader_epoch) == (ErrorCode.NONE, -1, 1)
    assert node.core.epoch == 2
