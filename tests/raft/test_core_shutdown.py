"""A stopping replica never starts an election (Kafka's graceful shutdown, KafkaRaftClient.shutdown).

Seen under load (issue 37's graceful failover at 1.5 % of a core): the SIGTERMed leader resigned,
granted its successor's vote, heard nothing more within an election timeout, campaigned in the
next epoch, won, became the active controller, and then exited as the leader when its 5 s wait
for a successor ran out: a graceful hand-over turned into an unplanned failover 5 s later.
"""

from __future__ import annotations

from quorum.raft.interface import (
    BeginQuorumEpochRequest,
    EndQuorumEpochRequest,
    EndQuorumEpochResponse,
    FetchRequest,
    VoteRequest,
)
from quorum.raft.state import Role
from tests.raft.harness import Node, elect, grant, log_with, replied, sent

TEN_ELECTION_TIMEOUTS_MS = 20_000


def leader() -> Node:
    node = Node(1, log=log_with([]))
    node.start()
    elect(node)
    node.flush()
    return node


def ticks(node: Node, span_ms: int) -> list:
    """Every action of ticking `node` every 10 ms for `span_ms`, with the core's own deadlines."""
    actions: list = []
    for now in range(node.now, node.now + span_ms, 10):
        actions += node.tick(now)
    return actions


def test_a_stopping_leader_that_voted_for_its_successor_never_campaigns() -> None:
    node = leader()
    actions = node.apply(node.core.shutdown(node.now))
    assert node.core.role is Role.RESIGNED
    assert sorted(e.destination for e in sent(actions, EndQuorumEpochRequest)) == [2, 3]
    (granted,) = replied(node.request(2, VoteRequest(None, 2, 2, 1, 1)))
    assert granted.vote_granted and node.core.role is Role.VOTED
    # The successor's BeginQuorumEpoch is slow to come: the stopping node waits, it does not campaign.
    later = ticks(node, TEN_ELECTION_TIMEOUTS_MS)
    assert sent(later, VoteRequest) == []
    assert node.core.epoch == 2 and node.core.role is Role.VOTED
    node.request(2, BeginQuorumEpochRequest(None, 2, 2))
    assert node.core.role is Role.FOLLOWER and node.core.leader_id == 2


def test_a_resigned_leader_that_is_not_stopping_still_campaigns() -> None:
    """`resign` alone (the snapshot turn's hand-over, the zombie check) keeps the old rule."""
    node = leader()
    node.apply(node.core.resign(node.now))
    node.request(2, VoteRequest(None, 2, 2, 1, 1))
    assert sent(ticks(node, TEN_ELECTION_TIMEOUTS_MS), VoteRequest) != []


def test_a_stopping_resigned_leader_whose_voters_never_answer_waits_without_campaigning() -> None:
    node = leader()
    node.apply(node.core.shutdown(node.now))
    later = ticks(node, TEN_ELECTION_TIMEOUTS_MS)
    assert sent(later, VoteRequest) == []
    assert node.core.role is Role.RESIGNED and node.core.epoch == 1
    # EndQuorumEpoch is still resent to the voters that have not acknowledged it.
    assert {e.destination for e in sent(later, EndQuorumEpochRequest)} == {2, 3}
    # The driver is not woken for an election timer it will not act on.
    deadline = node.core.next_deadline_ms()
    assert deadline is None or deadline > node.now


def test_a_stopping_follower_whose_leader_dies_does_not_campaign() -> None:
    node = Node(2, log=log_with([1]))
    node.start()
    (fetch,) = sent(node.request(1, BeginQuorumEpochRequest(None, 1, 1)), FetchRequest)
    node.apply(node.core.shutdown(node.now))
    # The leader's connection is refused: normally a pre-vote at once (issue 17), not while stopping.
    actions = node.apply(node.core.on_send_failed(1, fetch.message, node.now, peer_gone=True))
    actions += ticks(node, TEN_ELECTION_TIMEOUTS_MS)
    assert sent(actions, VoteRequest) == []
    assert node.core.role is Role.FOLLOWER


def test_a_stopping_first_successor_does_not_campaign_on_end_quorum_epoch() -> None:
    node = Node(3, log=log_with([1]))
    node.start()
    node.request(1, BeginQuorumEpochRequest(None, 1, 1))
    node.apply(node.core.shutdown(node.now))
    actions = node.request(1, EndQuorumEpochRequest(None, 1, 1, (3, 2)))
    (answer,) = replied(actions, EndQuorumEpochResponse)
    assert answer.error == 0
    assert sent(actions + ticks(node, TEN_ELECTION_TIMEOUTS_MS), VoteRequest) == []
    assert node.core.role is Role.UNATTACHED and node.core.epoch == 1


def test_a_stopping_prospective_drops_its_pre_vote() -> None:
    node = Node(1, log=log_with([]))
    node.start()
    campaign = node.run_until_campaign()
    assert node.core.role is Role.PROSPECTIVE
    node.apply(node.core.shutdown(node.now))
    assert node.core.role is Role.UNATTACHED
    grant(node, campaign)  # the pre-vote's grants arrive after: no candidate, no new epoch
    assert node.core.role is Role.UNATTACHED and node.core.epoch == 0
    assert sent(ticks(node, TEN_ELECTION_TIMEOUTS_MS), VoteRequest) == []


def test_a_candidate_that_wins_while_stopping_resigns_at_once() -> None:
    """Kafka lets a campaign under way finish (pollCandidate while shutting down) and a leader that
    is shutting down resigns at its next poll (pollLeader)."""
    node = Node(1, log=log_with([]))
    node.start()
    campaign = grant(node, node.run_until_campaign())  # pre-vote won: the real vote is out
    assert node.core.role is Role.CANDIDATE
    node.apply(node.core.shutdown(node.now))
    actions = grant(node, campaign)
    assert node.core.role is Role.RESIGNED and node.core.epoch == 1
    assert sorted(e.destination for e in sent(actions, EndQuorumEpochRequest)) == [2, 3]
