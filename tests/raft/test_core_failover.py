"""Failover after kill -9 of the leader: survivors that lost it at different moments elect another.

The real-process bug this pins down (3 voters, leader SIGKILLed): survivor A's fetch timeout ran
out first and it asked for pre-votes; survivor B, still within its own fetch timeout, refused and
named the dead leader of the same epoch; A took that as news of a leader and went back to
following it, and so did B when its turn came, for ever. A prospective replica knows the leader
it lost touch with (Kafka's ProspectiveState does), so hearing that same leader named changes
nothing; it only follows again once it has lost the pre-vote.
"""

from __future__ import annotations

from quorum.raft.interface import (
    Action,
    EndQuorumEpochRequest,
    FetchRequest,
    FetchResponse,
    PersistState,
    Reply,
    Send,
    VoteRequest,
    VoteResponse,
)
from quorum.raft.state import Role
from tests.raft.harness import Node, elect, log_with, replied, sent

DEAD_LEADER, EPOCH = 1, 2


def follower_of_dead_leader(node_id: int, last_fetch_ms: int) -> Node:
    """A voter that follows node 1 in epoch 2 and last fetched from it at `last_fetch_ms`."""
    node = Node(node_id, log=log_with([1, 2]), persisted=PersistState(EPOCH, -1, DEAD_LEADER), now=0)
    (fetch,) = sent(node.start(), FetchRequest)
    assert fetch.destination == DEAD_LEADER
    node.response(DEAD_LEADER, FetchResponse(0, DEAD_LEADER, EPOCH, 2, 0), fetch.message, now=last_fetch_ms)
    assert node.core.role is Role.FOLLOWER and node.core.leader_id == DEAD_LEADER
    return node


def deliver(nodes: dict[int, Node], source: Node, actions: list[Action], now: int) -> None:
    """Carry `source`'s Sends to the live nodes and the answers back, until nothing is left to send.

    Requests to a node not in `nodes` (the dead leader) fail at once, as a refused connection does.
    """
    queue: list[tuple[Node, list[Action]]] = [(source, actions)]
    while queue:
        node, batch = queue.pop(0)
        for send in sent(batch):
            target = nodes.get(send.destination)
            if target is None:
                queue.append((node, node.apply(node.core.on_send_failed(send.destination, send.message, now))))
                continue
            answer = target.request(node.id, send.message, now=now)
            for reply in (a for a in answer if isinstance(a, Reply)):
                queue.append((node, node.response(target.id, reply.message, send.message, now=now)))
            queue.append((target, [a for a in answer if isinstance(a, Send)]))


def answer(node: Node, request: VoteRequest, now: int) -> VoteResponse:
    (response,) = replied(node.request(request.candidate_id, request, now=now), VoteResponse)
    return response


def test_two_survivors_out_of_step_elect_a_leader_after_the_leader_is_killed() -> None:
    # Node 1 leads epoch 2 and is killed -9. Node 2 last fetched at 100 ms, node 3 at 600 ms: their
    # fetch timeouts (2000 ms) run out half a second apart.
    a, b = follower_of_dead_leader(2, 100), follower_of_dead_leader(3, 600)

    # 2100 ms: A gives up on the leader and asks for pre-votes; B still follows it.
    actions = a.tick(2100)
    assert a.core.role is Role.PROSPECTIVE and a.core.epoch == EPOCH
    pre_votes = {s.destination: s.message for s in sent(actions, VoteRequest)}
    to_b = pre_votes[3]
    assert to_b.pre_vote and to_b.candidate_epoch == EPOCH + 1
    a.apply(a.core.on_send_failed(DEAD_LEADER, pre_votes[DEAD_LEADER], 2101))  # connection refused

    # B heard from its leader less than a fetch timeout ago: it refuses, naming node 1 in epoch 2.
    refusal = answer(b, to_b, 2101)
    assert not refusal.vote_granted and (refusal.leader_id, refusal.leader_epoch) == (DEAD_LEADER, EPOCH)
    assert b.core.role is Role.FOLLOWER

    # The bug: A took that as news of a leader, followed node 1 again and restarted its fetch
    # timeout. It must not: node 1 is the leader it already knew, and one refusal of three is no loss.
    a.response(3, refusal, to_b, now=2102)
    assert a.core.role is Role.PROSPECTIVE and a.core.epoch == EPOCH

    # 2600 ms: B's fetch timeout runs out. A, prospective itself, grants B's pre-vote (naming the
    # leader it still knows), B counts it, and the vote round that follows elects B in epoch 3.
    nodes = {2: a, 3: b}
    deliver(nodes, b, b.tick(2600), 2600)
    assert b.core.role is Role.LEADER and b.core.epoch == EPOCH + 1
    assert a.core.role is Role.FOLLOWER and (a.core.leader_id, a.core.epoch) == (3, EPOCH + 1)
    assert a.persisted == PersistState(EPOCH + 1, 3, 3)


def test_a_prospective_replica_grants_pre_votes_and_names_the_leader_it_lost() -> None:
    a = follower_of_dead_leader(2, 100)
    a.tick(2100)
    assert a.core.role is Role.PROSPECTIVE
    response = answer(a, VoteRequest(None, EPOCH + 1, 3, 2, 2, pre_vote=True), 2200)
    assert response.vote_granted and (response.leader_id, response.leader_epoch) == (DEAD_LEADER, EPOCH)
    assert a.core.role is Role.PROSPECTIVE  # a pre-vote changes nothing
    # A real vote in its own epoch, which has a leader, is still refused; a shorter log gets no pre-vote.
    assert not answer(a, VoteRequest(None, EPOCH, 3, 2, 2), 2201).vote_granted
    assert not answer(a, VoteRequest(None, EPOCH + 1, 3, 2, 1, pre_vote=True), 2202).vote_granted


def test_a_follower_whose_fetch_timeout_ran_out_grants_pre_votes_before_any_tick() -> None:
    b = follower_of_dead_leader(3, 600)
    pre_vote = VoteRequest(None, EPOCH + 1, 2, 2, 2, pre_vote=True)
    assert not answer(b, pre_vote, 2599).vote_granted  # heard from its leader 1999 ms ago
    # 2600 ms: nothing has ticked the core since, but the leader has been silent for a fetch timeout.
    response = answer(b, pre_vote, 2600)
    assert response.vote_granted and b.core.epoch == EPOCH


def test_a_lost_pre_vote_sends_a_prospective_replica_back_to_the_leader_it_knew() -> None:
    # Refused by a majority: the others still hear from the leader, so it follows it again.
    a = follower_of_dead_leader(2, 100)
    requests = sent(a.tick(2100), VoteRequest)
    a.response(1, VoteResponse(0, DEAD_LEADER, EPOCH, False, True), requests[0].message)
    assert a.core.role is Role.PROSPECTIVE
    actions = a.response(3, VoteResponse(0, DEAD_LEADER, EPOCH, False, True), requests[1].message)
    assert a.core.role is Role.FOLLOWER and a.core.leader_id == DEAD_LEADER and a.core.epoch == EPOCH
    assert [s.destination for s in sent(actions, FetchRequest)] == [DEAD_LEADER]
    # Nobody answers at all: the pre-vote times out, with the same outcome.
    lonely = follower_of_dead_leader(2, 100)
    lonely.tick(2100)
    deadline = lonely.core.next_deadline_ms()
    assert deadline is not None and 2100 + 1000 <= deadline <= 2100 + 2000  # the election timeout
    lonely.tick(deadline)
    assert lonely.core.role is Role.FOLLOWER and lonely.core.leader_id == DEAD_LEADER


def test_a_prospective_replica_that_was_the_leader_knows_no_leader_and_never_follows_itself() -> None:
    node = Node(1, log=log_with([]))
    node.start()
    elect(node)
    node.flush()
    actions = node.tick(node.now + 2000)  # nobody fetches: the zombie check makes it resign
    assert node.core.role is Role.RESIGNED and sent(actions, EndQuorumEpochRequest)
    campaign = node.run_until_campaign()
    assert node.core.role is Role.PROSPECTIVE and node.core.leader_id == -1
    for request in sent(campaign, VoteRequest):
        node.response(request.destination, VoteResponse(0, -1, 1, False, True), request.message)
    assert node.core.role is Role.PROSPECTIVE and node.core.leader_id == -1  # tries again, after a backoff
    assert node.persisted == PersistState(1, 1, 1)
