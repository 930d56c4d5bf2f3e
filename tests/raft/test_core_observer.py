"""Observers (non-voters): they find the leader, replicate the log, and never vote or campaign."""

from __future__ import annotations

from quorum.raft.interface import (
    AppendBatches,
    FetchRequest,
    FetchResponse,
    PersistState,
    Send,
    VoteRequest,
)
from quorum.raft.state import Role
from quorum.wire.errors import ErrorCode
from tests.raft.harness import Node, batch, elect, log_with, of_type, replied, sent


def observer(**config: int) -> Node:
    return Node(9, voters=(1, 2, 3), seed=3, **config)


def test_an_observer_looks_for_the_leader_by_fetching_from_a_voter() -> None:
    node = observer()
    (fetch,) = sent(node.start(), FetchRequest)
    assert fetch.destination in (1, 2, 3) and fetch.message.replica_id == 9
    hint = FetchResponse(ErrorCode.NOT_LEADER_OR_FOLLOWER, 2, 4, 0, 0)
    actions = node.response(fetch.destination, hint, fetch.message)
    assert node.core.role is Role.FOLLOWER and node.core.leader_id == 2 and node.core.epoch == 4
    assert PersistState(4, -1, 2) in actions
    (to_leader,) = sent(actions, FetchRequest)
    assert to_leader.destination == 2 and to_leader.message.current_leader_epoch == 4
    appended = node.response(2, FetchResponse(0, 2, 4, 1, 0, batch(0, 4)), to_leader.message)
    assert of_type(appended, AppendBatches)
    node.flush()
    assert node.core.high_watermark == 1


def test_an_observer_asks_another_voter_when_one_does_not_know() -> None:
    node = observer()
    destinations = set()
    actions = node.start()
    for _ in range(30):
        (fetch,) = sent(actions, FetchRequest)
        destinations.add(fetch.destination)
        node.response(fetch.destination, FetchResponse(ErrorCode.NOT_LEADER_OR_FOLLOWER, -1, 0, 0, 0), fetch.message)
        actions = node.tick(node.now + 100)
    assert destinations == {1, 2, 3}
    assert node.core.role is Role.UNATTACHED


def test_an_observer_never_votes_and_never_campaigns() -> None:
    node = observer()
    node.start()
    (response,) = replied(node.request(1, VoteRequest(None, 5, 1, 9, 9)))
    assert not response.vote_granted
    (pre,) = replied(node.request(1, VoteRequest(None, 5, 1, 9, 9, pre_vote=True)))
    assert not pre.vote_granted
    for now in range(0, 60_000, 250):
        actions = node.tick(now)
        assert sent(actions, VoteRequest) == []
    assert node.core.role in (Role.UNATTACHED, Role.FOLLOWER)


def test_an_observer_that_loses_its_leader_looks_for_the_new_one() -> None:
    node = observer()
    (fetch,) = sent(node.start(), FetchRequest)
    actions = node.response(fetch.destination, FetchResponse(ErrorCode.NOT_LEADER_OR_FOLLOWER, 2, 4, 0, 0),
                            fetch.message)
    assert node.core.role is Role.FOLLOWER
    node.tick(node.now + 2000)
    assert node.core.role is Role.UNATTACHED and node.core.epoch == 4
    assert actions  # keeps fetching from voters, never campaigns


def test_the_leader_reports_observers_apart_from_voters() -> None:
    node = Node(1, log=log_with([]))
    node.start()
    elect(node)
    node.flush()
    node.request(9, FetchRequest(None, 9, 1, 1, 1, max_wait_ms=0))
    node.request(2, FetchRequest(None, 2, 1, 0, 0, max_wait_ms=0))
    description = node.core.describe(node.now)
    assert (description.leader_id, description.leader_epoch) == (1, 1)
    assert [v.replica_id for v in description.voters] == [1, 2, 3]
    assert [o.replica_id for o in description.observers] == [9]
    observer_9 = description.observers[0]
    assert observer_9.log_end_offset == 1 and observer_9.last_fetch_timestamp == node.now
    assert observer_9.last_caught_up_timestamp == node.now
    voter_3 = description.voters[2]
    assert voter_3.log_end_offset == -1 and voter_3.last_fetch_timestamp == -1


def observer_fetching_from_its_leader() -> tuple[Node, Send]:
    """An observer told by a voter that node 1 leads epoch 4, and its first Fetch to node 1."""
    node = observer()
    (fetch,) = sent(node.start(), FetchRequest)
    actions = node.response(fetch.destination, FetchResponse(ErrorCode.NOT_LEADER_OR_FOLLOWER, 1, 4, 0, 0),
                            fetch.message)
    (to_leader,) = sent(actions, FetchRequest)
    assert to_leader.destination == 1
    return node, to_leader


def test_an_observer_whose_leader_is_gone_asks_the_other_voters_at_once() -> None:
    # Issue 38's broker stall after a controller failover: the observer retried its dead leader every
    # 20 ms until the 2 s fetch timeout. As Kafka's observer, it asks another voter while the
    # leader's connection backs off, and follows the new leader that voter names.
    node, to_leader = observer_fetching_from_its_leader()
    actions = node.apply(node.core.on_send_failed(1, to_leader.message, node.now, peer_gone=True))
    (elsewhere,) = sent(actions, FetchRequest)
    assert elsewhere.destination in (2, 3) and node.core.leader_id == 1
    fenced = FetchResponse(ErrorCode.FENCED_LEADER_EPOCH, elsewhere.destination, 5, 0, 0)
    actions = node.response(elsewhere.destination, fenced, elsewhere.message)
    assert node.core.role is Role.FOLLOWER and node.core.leader_id == elsewhere.destination and node.core.epoch == 5
    (to_new,) = sent(actions, FetchRequest)
    assert to_new.destination == elsewhere.destination and to_new.message.current_leader_epoch == 5


def test_an_observer_goes_back_to_its_leader_after_the_backoff() -> None:
    node, to_leader = observer_fetching_from_its_leader()
    (elsewhere,) = sent(node.apply(node.core.on_send_failed(1, to_leader.message, node.now)), FetchRequest)
    actions = node.response(elsewhere.destination, FetchResponse(ErrorCode.NOT_LEADER_OR_FOLLOWER, 1, 4, 0, 0),
                            elsewhere.message)  # that voter still knows the same leader
    assert sent(actions, FetchRequest) == []
    (again,) = sent(node.tick(node.now + 20), FetchRequest)
    assert again.destination == 1 and node.core.leader_id == 1


def test_an_observer_appends_the_data_of_the_answer_that_names_the_leader() -> None:
    # Kafka's maybeHandleCommonResponse: "an observer [can] discover the leader and append to the log
    # in the same Fetch request". Dropped, the data had to be fetched again, and where a round trip
    # outlasts the request timeout (the simulator's 300-1500 ms delays) the observer never caught up.
    node = observer()
    (fetch,) = sent(node.start(), FetchRequest)
    hint = FetchResponse(ErrorCode.NOT_LEADER_OR_FOLLOWER, -1, 4, 0, 0)  # a voter of epoch 4 knows no leader
    (ask_again,) = sent(node.response(fetch.destination, hint, fetch.message), FetchRequest)
    assert node.core.role is Role.UNATTACHED and node.core.epoch == 4
    leader = ask_again.destination
    actions = node.response(leader, FetchResponse(0, leader, 4, 1, 0, batch(0, 4)), ask_again.message)
    assert node.core.role is Role.FOLLOWER and node.core.leader_id == leader
    assert of_type(actions, AppendBatches)
    node.flush()
    assert node.core.high_watermark == 1


def test_an_observer_of_a_single_controller_that_is_gone_waits_out_the_backoff_before_fetching_again() -> None:
    # The CI run's stopped broker: its one controller killed, each refused Fetch was followed by the next
    # at once (about one a millisecond) since there was no other voter to ask while the leader backed
    # off. Kafka's maybeSendAnyVoterFetch backs off until a voter is ready (quorum.retry.backoff.ms).
    node = Node(9, voters=(1,), seed=3)
    (fetch,) = sent(node.start(), FetchRequest)
    actions = node.response(1, FetchResponse(ErrorCode.NOT_LEADER_OR_FOLLOWER, 1, 4, 0, 0), fetch.message)
    (to_leader,) = sent(actions, FetchRequest)
    failed_at = node.now
    assert sent(node.apply(node.core.on_send_failed(1, to_leader.message, failed_at, peer_gone=True)),
                FetchRequest) == []
    assert sent(node.tick(failed_at + 19), FetchRequest) == []
    assert node.core.next_deadline_ms() == failed_at + 20  # the driver's tick wakes for the retry
    (again,) = sent(node.tick(failed_at + 20), FetchRequest)
    assert again.destination == 1 and node.core.leader_id == 1
