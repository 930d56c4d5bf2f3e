"""Elections: timeouts, pre-vote then vote, persistence before sending, the new leader's first record."""

from __future__ import annotations

from quorum.raft.control import scan_batches
from quorum.raft.interface import (
    AppendBatches,
    BeginQuorumEpochRequest,
    LeaderChanged,
    PersistState,
    Send,
    VoteRequest,
    VoteResponse,
)
from quorum.raft.state import Role
from quorum.raft.timing import randomized_election_timeout
from tests.raft.harness import Node, backing_off, elect, grant, log_with, of_type, sent


def test_a_new_voter_waits_an_election_timeout_then_asks_for_pre_votes_without_bumping_its_epoch() -> None:
    node = Node(1)
    assert of_type(node.start(), LeaderChanged) == [LeaderChanged(-1, 0)]
    assert node.core.role is Role.UNATTACHED
    assert node.tick(999) == []  # the timeout is at least quorum.election.timeout.ms
    actions = node.run_until_campaign()
    assert 1000 <= node.now < 2000 + 10
    requests = sent(actions, VoteRequest)
    assert sorted(s.destination for s in requests) == [2, 3]
    assert all(s.message.pre_vote and s.message.candidate_epoch == 1 for s in requests)
    assert node.core.role is Role.PROSPECTIVE and node.core.epoch == 0
    assert of_type(actions, PersistState) == []


def test_pre_vote_majority_makes_a_candidate_that_persists_its_vote_before_asking() -> None:
    node = Node(1)
    node.start()
    actions = grant(node, node.run_until_campaign(), voters=[2])
    assert node.core.role is Role.CANDIDATE and node.core.epoch == 1
    persist = actions.index(PersistState(1, 1, -1))
    votes = [i for i, a in enumerate(actions) if isinstance(a, Send) and isinstance(a.message, VoteRequest)]
    assert votes and all(i > persist for i in votes)
    assert all(not actions[i].message.pre_vote and actions[i].message.candidate_epoch == 1 for i in votes)


def test_vote_majority_makes_a_leader_that_writes_leader_change_first() -> None:
    node = Node(1, log=log_with([]))
    node.start()
    actions = elect(node)
    assert node.core.role is Role.LEADER and node.core.leader_id == 1 and node.core.epoch == 1
    assert PersistState(1, 1, 1) in actions
    assert LeaderChanged(1, 1) in actions
    begins = sent(actions, BeginQuorumEpochRequest)
    assert sorted(s.destination for s in begins) == [2, 3]
    assert all(s.message.leader_epoch == 1 and s.message.leader_id == 1 for s in begins)
    append = of_type(actions, AppendBatches)
    assert len(append) == 1 and append[0].end_offset == 1
    (info,) = scan_batches(append[0].batches)
    assert (info.base_offset, info.epoch) == (0, 1)
    assert info.leader_change is not None and info.leader_change.leader_id == 1
    assert [v.voter_id for v in info.leader_change.voters] == [1, 2, 3]
    assert sorted(v.voter_id for v in info.leader_change.granting_voters) == [1, 2]  # elected at a majority


def test_a_single_voter_elects_itself_at_start_and_commits_alone() -> None:
    node = Node(1, voters=(1,))
    actions = node.start()
    assert node.core.role is Role.LEADER and node.core.epoch == 1
    assert of_type(actions, AppendBatches)
    node.flush()
    assert node.core.high_watermark == 1
    base, _ = node.propose(b"a", b"b")
    assert base == 1
    node.flush()
    assert node.core.high_watermark == 3


def test_rejected_pre_votes_retry_after_a_backoff_and_never_raise_the_epoch() -> None:
    node = Node(1)
    node.start()
    actions = node.run_until_campaign()
    for send in sent(actions, VoteRequest):
        node.response(send.destination, VoteResponse(0, -1, 0, False, True), send.message)
    assert node.core.role is Role.PROSPECTIVE and node.core.epoch == 0
    again = node.run_until_campaign()
    assert all(s.message.pre_vote and s.message.candidate_epoch == 1 for s in sent(again, VoteRequest))
    assert node.core.epoch == 0


def test_a_candidate_that_loses_goes_back_to_pre_vote_after_a_backoff() -> None:
    node = Node(1)
    node.start()
    actions = grant(node, node.run_until_campaign())
    assert node.core.role is Role.CANDIDATE
    for send in sent(actions, VoteRequest):
        node.response(send.destination, VoteResponse(0, -1, 1, False, False), send.message)
    assert backing_off(node) and node.core.epoch == 1  # a candidate of epoch 1 until its backoff ends
    again = node.run_until_campaign()
    assert all(s.message.pre_vote and s.message.candidate_epoch == 2 for s in sent(again, VoteRequest))


def test_a_candidate_that_hears_of_a_leader_in_its_epoch_follows_it() -> None:
    node = Node(1)
    node.start()
    actions = grant(node, node.run_until_campaign())
    request = sent(actions, VoteRequest)[0]
    node.response(request.destination, VoteResponse(0, 3, 1, False, False), request.message)
    assert node.core.role is Role.FOLLOWER and node.core.leader_id == 3 and node.core.epoch == 1


def test_a_late_vote_response_from_an_earlier_round_is_not_counted() -> None:
    node = Node(1, voters=(1, 2, 3, 4, 5))
    node.start()
    first = node.run_until_campaign()
    old = sent(first, VoteRequest)[0]
    node.tick(node.now + 5000)  # the round times out, another starts later
    node.run_until_campaign()
    node.response(old.destination, VoteResponse(0, -1, 0, True, True), old.message)
    assert node.core.role is Role.PROSPECTIVE


def test_election_timeouts_are_randomized_by_the_injected_generator() -> None:
    import random

    from quorum.raft.interface import QuorumConfig

    config = QuorumConfig(node_id=1, voters=(1, 2, 3))
    draws = {randomized_election_timeout(config, random.Random(seed)) for seed in range(20)}
    assert len(draws) > 10 and all(1000 <= d < 2000 for d in draws)
    assert randomized_election_timeout(config, random.Random(7)) == randomized_election_timeout(config,
                                                                                                random.Random(7))


def test_a_restarted_candidate_keeps_its_vote_and_epoch() -> None:
    node = Node(1, persisted=PersistState(4, 1, -1))
    node.start()
    assert node.core.role is Role.VOTED and node.core.epoch == 4
    # It does not vote for someone else in the epoch it voted for itself.
    actions = node.request(2, VoteRequest(None, 4, 2, 0, 0))
    assert actions[-1].message.vote_granted is False
