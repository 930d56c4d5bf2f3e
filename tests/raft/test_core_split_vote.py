"""Issue 38: after kill -9 of the leader of 3 voters, a split vote between the two survivors ends at once.

Both survivors learn of the death from the same connection reset and pre-vote for each other in
the same moment (on a loaded machine the 0-50 ms head start is shorter than a round trip); each
grants the other's pre-vote, both become candidates of the same epoch and refuse each other. The
dead voter never answers: its Vote fails to be delivered. Before, each candidate then waited out
its whole election timeout (1-2 s) with no chance left of winning ("leader of epoch 3" after most
failovers of the process test under load). The round is lost as soon as the refusal and the
failure make a majority unreachable, and the randomized backoff that follows separates the two,
as Kafka's candidate backs off at once when its vote is rejected.
"""

from __future__ import annotations

import random

from quorum.raft.interface import QuorumConfig, VoteRequest, VoteResponse
from quorum.raft.state import Role
from quorum.raft.timing import RETRY_BACKOFF_BASE_MS, binary_exponential_backoff
from tests.raft.harness import Node, backing_off, replied, sent
from tests.raft.test_core_leader_gone import follower_fetching, pre_vote_after_gone_leader

DEAD, SURVIVOR = 1, 3


def candidate_after_the_leaders_death() -> tuple[Node, list]:
    """Node 2 lost leader 1 of epoch 1 to a reset, won node 3's pre-vote and asks for votes in epoch 2."""
    node, fetch = follower_fetching(node_id=2, leader=DEAD)
    pre_votes = {s.destination: s.message for s in pre_vote_after_gone_leader(node, fetch)}
    node.apply(node.core.on_send_failed(DEAD, pre_votes[DEAD], node.now, peer_gone=True))
    actions = node.response(SURVIVOR, VoteResponse(0, DEAD, 1, True, True), pre_votes[SURVIVOR])
    assert node.core.role is Role.CANDIDATE and node.core.epoch == 2
    return node, sent(actions, VoteRequest)


def test_a_refusal_plus_an_undeliverable_vote_loses_the_round_at_once():
    node, votes = candidate_after_the_leaders_death()
    by_voter = {s.destination: s.message for s in votes}
    assert sorted(by_voter) == [DEAD, SURVIVOR] and not by_voter[SURVIVOR].pre_vote
    node.apply(node.core.on_send_failed(DEAD, by_voter[DEAD], node.now, peer_gone=True))
    assert node.core.role is Role.CANDIDATE  # one voter out of reach: node 3 alone can still make it win
    lost_at = node.now
    node.response(SURVIVOR, VoteResponse(0, -1, 2, False, False), by_voter[SURVIVOR])  # node 3 voted for itself
    assert backing_off(node) and node.core.epoch == 2

    # Its next pre-vote leaves within the first retry's backoff window, not an election timeout later.
    again = []
    for now in range(lost_at, lost_at + RETRY_BACKOFF_BASE_MS + 1, 10):
        again = sent(node.tick(now), VoteRequest)
        if again:
            break
    assert sorted(s.destination for s in again) == [DEAD, SURVIVOR]
    assert all(s.message.pre_vote and s.message.candidate_epoch == 3 for s in again)


def test_a_grant_still_wins_when_only_the_dead_voter_failed():
    node, votes = candidate_after_the_leaders_death()
    by_voter = {s.destination: s.message for s in votes}
    node.apply(node.core.on_send_failed(DEAD, by_voter[DEAD], node.now, peer_gone=True))
    node.response(SURVIVOR, VoteResponse(0, -1, 2, True, False), by_voter[SURVIVOR])
    assert node.core.role is Role.LEADER and node.core.epoch == 2


def test_a_failure_reported_for_an_earlier_round_changes_nothing():
    node, votes = candidate_after_the_leaders_death()
    by_voter = {s.destination: s.message for s in votes}
    stale = VoteRequest(None, 2, 2, 0, 0, False)  # not the request of this round
    node.apply(node.core.on_send_failed(SURVIVOR, stale, node.now, peer_gone=True))
    node.apply(node.core.on_send_failed(DEAD, by_voter[DEAD], node.now, peer_gone=True))
    assert node.core.role is Role.CANDIDATE


def test_a_grant_that_arrives_while_the_candidate_backs_off_still_wins():
    # Issue 37: where a round trip is as long as the election timeout (the simulator's 300-1500 ms
    # one-way delays), the grant of a round arrived just after the candidate gave up on it and was
    # dropped; Kafka's CandidateState records votes while it backs off, and so does this one.
    node, votes = candidate_after_the_leaders_death()
    by_voter = {s.destination: s.message for s in votes}
    node.tick(node.core.next_deadline_ms())  # the election timeout runs out with no answer
    assert backing_off(node) and node.core.epoch == 2
    node.response(SURVIVOR, VoteResponse(0, -1, 2, True, False), by_voter[SURVIVOR])
    assert node.core.role is Role.LEADER and node.core.epoch == 2


def test_a_candidate_that_backed_off_pre_votes_again_without_counting_later_answers():
    node, votes = candidate_after_the_leaders_death()
    by_voter = {s.destination: s.message for s in votes}
    node.tick(node.core.next_deadline_ms())
    again = []
    while not again:
        again = sent(node.tick(node.core.next_deadline_ms()), VoteRequest)
    assert node.core.role is Role.PROSPECTIVE and all(s.message.pre_vote for s in again)
    node.response(SURVIVOR, VoteResponse(0, -1, 2, True, False), by_voter[SURVIVOR])  # the old round's
    assert node.core.role is Role.PROSPECTIVE


def test_survivors_that_split_the_vote_draw_backoffs_more_than_a_round_trip_apart():
    # Kafka draws 0 or 100 ms after the first split: two survivors tie half the time, and tied
    # again after that (issue 37's 0.675 s failover). Any millisecond of the same window: they
    # rarely come within 10 ms of each other.
    config = QuorumConfig(1, (1, 2, 3))
    first, second = random.Random(1), random.Random(2)
    draws = [(binary_exponential_backoff(config, first, 1), binary_exponential_backoff(config, second, 1))
             for _ in range(1000)]
    assert all(0 <= a <= RETRY_BACKOFF_BASE_MS and 0 <= b <= RETRY_BACKOFF_BASE_MS for a, b in draws)
    assert sum(abs(a - b) <= 10 for a, b in draws) < 250


def test_a_candidate_refuses_the_pre_vote_of_the_other_survivor_for_its_own_epoch():
    # The other survivor's pre-vote for epoch 2 came after node 2 had voted for itself in epoch 2:
    # granted, both were candidates of epoch 2 and split the vote. Refused, the other survivor
    # waits, node 2's Vote reaches it, and it grants that instead.
    node, _ = candidate_after_the_leaders_death()
    pre_vote = VoteRequest(None, 2, SURVIVOR, 1, node.core.high_watermark, True)
    [answer] = replied(node.request(SURVIVOR, pre_vote))
    assert not answer.vote_granted and node.core.role is Role.CANDIDATE
    later = VoteRequest(None, 3, SURVIVOR, 1, node.core.high_watermark, True)  # a later epoch's is another matter
    [answer] = replied(node.request(SURVIVOR, later))
    assert answer.vote_granted
