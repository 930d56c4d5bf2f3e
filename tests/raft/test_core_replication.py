"""Pull replication: Fetch validation, DivergingEpoch and truncation, the high watermark, long polls."""

from __future__ import annotations

import pytest

from quorum.raft.interface import (
    AppendBatches,
    BeginQuorumEpochRequest,
    Fatal,
    FetchRequest,
    FetchResponse,
    HighWatermarkAdvanced,
    OffsetAndEpoch,
    PersistState,
    Reply,
    Truncate,
)
from quorum.raft.state import Role
from quorum.sim.memory_log import MemoryLog
from quorum.wire.errors import ErrorCode
from quorum.wire.records import iter_batches
from tests.raft.harness import Node, batch, elect, log_with, of_type, replied, sent


def leader_with(epochs: list[int], epoch: int, voters: tuple[int, ...] = (1, 2, 3)) -> Node:
    """Node 1 leading `epoch` over a log whose batches carry `epochs`, its LeaderChange flushed."""
    node = Node(1, voters=voters, log=log_with(epochs), persisted=PersistState(epoch - 1, -1, -1))
    node.start()
    elect(node)
    node.flush()
    assert node.core.epoch == epoch
    return node


def fetch(node: Node, replica: int, offset: int, last_epoch: int, max_wait: int = 0) -> FetchResponse | None:
    request = FetchRequest(None, replica, node.core.epoch, offset, last_epoch, max_wait_ms=max_wait)
    responses = replied(node.request(replica, request), FetchResponse)
    return responses[0] if responses else None


def follower(log: MemoryLog, leader: int = 1, epoch: int = 4, node_id: int = 2,
             **config: int) -> tuple[Node, FetchRequest]:
    node = Node(node_id, log=log, persisted=PersistState(epoch - 1, -1, -1), **config)
    node.start()
    (request,) = sent(node.request(leader, BeginQuorumEpochRequest(None, leader, epoch)), FetchRequest)
    return node, request.message


# -- the leader's side --------------------------------------------------------------------------


@pytest.mark.parametrize(("offset", "last_epoch", "diverging"), [
    (0, 0, None),                      # an empty follower
    (2, 1, None),                      # inside epoch 1
    (3, 2, None),                      # inside epoch 2
    (4, 2, None),                      # exactly at the end of epoch 2
    (5, 4, None),                      # at our end
    (5, 2, OffsetAndEpoch(4, 2)),      # past the end of epoch 2
    (6, 3, OffsetAndEpoch(4, 2)),      # an epoch we never had: the largest below it, and its end
    (9, 4, OffsetAndEpoch(5, 4)),      # past our end in our own epoch
])
def test_the_leader_answers_diverging_epoch_exactly(offset: int, last_epoch: int,
                                                    diverging: OffsetAndEpoch | None) -> None:
    node = leader_with([1, 1, 2, 2], epoch=4)  # log: 1 1 2 2 4(LeaderChange)
    response = fetch(node, 2, offset, last_epoch)
    assert response.error == ErrorCode.NONE
    assert response.diverging_epoch == diverging
    if diverging is None and offset < 5:
        assert response.records  # data from the fetch offset on


def test_the_high_watermark_waits_for_a_record_of_the_leaders_own_epoch() -> None:
    node = leader_with([1, 1, 1], epoch=2)  # entries 0-2 of epoch 1, LeaderChange at 3
    assert fetch(node, 2, 3, 1).diverging_epoch is None
    assert node.core.high_watermark == 0  # a majority has 0-2, but they are not known committed yet
    actions = node.request(2, FetchRequest(None, 2, 2, 4, 2, max_wait_ms=0))
    assert HighWatermarkAdvanced(4) in actions
    assert node.core.high_watermark == 4


def test_the_high_watermark_is_what_a_majority_of_voters_durably_holds() -> None:
    node = leader_with([], epoch=1, voters=(1, 2, 3, 4, 5))
    for _ in range(9):
        node.propose(b"x")
    node.flush()  # leader end 10
    fetch(node, 2, 10, 1)
    fetch(node, 3, 7, 1)
    assert node.core.high_watermark == 7  # leader 10, node 2 10, node 3 7: the third best
    fetch(node, 4, 3, 1)
    assert node.core.high_watermark == 7
    fetch(node, 5, 9, 1)
    assert node.core.high_watermark == 9
    fetch(node, 2, 2, 1)  # a stale fetch does not take it back
    assert node.core.high_watermark == 9


def test_the_leaders_unflushed_records_do_not_count() -> None:
    node = leader_with([], epoch=1)
    node.propose(b"a")  # offset 1, not flushed on the leader
    fetch(node, 2, 2, 1)
    assert node.core.high_watermark == 1
    node.flush()
    assert node.core.high_watermark == 2


def test_observer_fetches_do_not_count_toward_the_high_watermark() -> None:
    node = leader_with([], epoch=1)
    fetch(node, 9, 1, 1)
    assert node.core.high_watermark == 0
    fetch(node, 2, 1, 1)
    assert node.core.high_watermark == 1


def test_a_fetch_with_nothing_new_waits_for_data_then_gets_it() -> None:
    node = leader_with([], epoch=1)
    fetch(node, 2, 1, 1)  # HW 1 sent to node 2
    assert fetch(node, 2, 1, 1, max_wait=500) is None  # parked
    base, actions = node.propose(b"new")
    assert base == 1 and not of_type(actions, Reply)
    (response,) = replied(node.flush(), FetchResponse)
    assert response.records and response.error == ErrorCode.NONE


def test_a_parked_fetch_is_answered_empty_at_its_deadline() -> None:
    node = leader_with([], epoch=1)
    fetch(node, 2, 1, 1)
    start = node.now
    assert fetch(node, 2, 1, 1, max_wait=500) is None
    assert node.core.next_deadline_ms() <= start + 500
    assert replied(node.tick(start + 499), FetchResponse) == []
    (response,) = replied(node.tick(start + 500), FetchResponse)
    assert response.records == b"" and response.high_watermark == 1


def test_a_new_high_watermark_answers_parked_fetches() -> None:
    node = leader_with([], epoch=1, voters=(1, 2, 3, 4, 5))
    node.propose(b"x")
    node.flush()  # leader end 2
    assert fetch(node, 2, 2, 1, max_wait=500).high_watermark == 0  # a new HW for node 2: answered at once
    assert fetch(node, 2, 2, 1, max_wait=500) is None  # nothing new: parked
    actions = node.request(3, FetchRequest(None, 3, 1, 2, 1, max_wait_ms=500))  # a majority has 2 now
    assert node.core.high_watermark == 2
    responses = replied(actions, FetchResponse)
    assert len(responses) == 2 and all(r.high_watermark == 2 for r in responses)


def test_fetches_for_another_epoch_are_fenced() -> None:
    node = leader_with([], epoch=3)
    (old,) = replied(node.request(2, FetchRequest(None, 2, 2, 0, 0)))
    (new,) = replied(node.request(2, FetchRequest(None, 2, 4, 0, 0)))
    assert old.error == ErrorCode.FENCED_LEADER_EPOCH and (old.leader_id, old.leader_epoch) == (1, 3)
    assert new.error == ErrorCode.UNKNOWN_LEADER_EPOCH


def test_a_non_leader_points_fetchers_at_the_leader() -> None:
    node, _ = follower(log_with([]), leader=1, epoch=2, node_id=3)
    (response,) = replied(node.request(9, FetchRequest(None, 9, 2, 0, 0)))
    assert response.error == ErrorCode.NOT_LEADER_OR_FOLLOWER and (response.leader_id, response.leader_epoch) == (1, 2)


# -- the follower's side ------------------------------------------------------------------------


def test_a_follower_appends_fetched_batches_as_they_are_and_fetches_again_once_durable() -> None:
    node, request = follower(log_with([1, 1]), epoch=2)
    assert (request.fetch_offset, request.last_fetched_epoch, request.current_leader_epoch) == (2, 1, 2)
    records = batch(2, 2, count=3) + batch(5, 2)
    actions = node.response(1, FetchResponse(0, 1, 2, 0, 0, records), request)
    (append,) = of_type(actions, AppendBatches)
    assert append.batches == records and append.end_offset == 6
    assert sent(actions, FetchRequest) == []  # not before the append is durable
    assert sent(node.tick(node.now + 50), FetchRequest) == []
    (next_fetch,) = sent(node.flush(), FetchRequest)
    assert (next_fetch.message.fetch_offset, next_fetch.message.last_fetched_epoch) == (6, 2)


def test_records_that_do_not_continue_the_log_are_not_appended() -> None:
    node, request = follower(log_with([1, 1]), epoch=2)
    actions = node.response(1, FetchResponse(0, 1, 2, 0, 0, batch(3, 2)), request)
    assert of_type(actions, AppendBatches) == []


def test_a_duplicated_or_late_response_is_ignored() -> None:
    node, request = follower(log_with([]), epoch=2)
    response = FetchResponse(0, 1, 2, 0, 0, batch(0, 2))
    assert of_type(node.response(1, response, request), AppendBatches)
    assert of_type(node.response(1, response, request), AppendBatches) == []


def test_the_follower_truncates_exactly_at_the_diverging_epoch() -> None:
    node, request = follower(log_with([1, 1, 2, 2, 3, 3]), epoch=4)
    actions = node.response(1, FetchResponse(0, 1, 4, 0, 0, diverging_epoch=OffsetAndEpoch(4, 2)), request)
    assert of_type(actions, Truncate) == [Truncate(4)]
    assert sent(actions, FetchRequest) == []  # the next fetch reads the truncated log
    (again,) = sent(node.tick(node.now), FetchRequest)
    assert (again.message.fetch_offset, again.message.last_fetched_epoch) == (4, 2)


def test_truncation_when_the_follower_never_had_the_diverging_epoch() -> None:
    # Ours: 1 1 3 3; the leader has epoch 2 up to offset 5 and no 3: keep only what epoch 1 wrote.
    node, request = follower(log_with([1, 1, 3, 3]), epoch=4)
    actions = node.response(1, FetchResponse(0, 1, 4, 0, 0, diverging_epoch=OffsetAndEpoch(5, 2)), request)
    assert of_type(actions, Truncate) == [Truncate(2)]


def test_truncation_stays_on_our_batch_boundaries_when_the_epochs_differ() -> None:
    # Ours: epoch 1 in one batch of offsets 0-3, then epoch 3. The leader's epoch 2 ends at 2, a
    # boundary of its log but inside our batch: we keep epoch 1 whole, the next fetch trims it.
    log = MemoryLog()
    log.append(batch(0, 1, count=4) + batch(4, 3))
    log.flush()
    node, request = follower(log, epoch=4)
    actions = node.response(1, FetchResponse(0, 1, 4, 0, 0, diverging_epoch=OffsetAndEpoch(2, 2)), request)
    assert of_type(actions, Truncate) == [Truncate(4)]
    (again,) = sent(node.tick(node.now), FetchRequest)
    actions = node.response(1, FetchResponse(0, 1, 4, 0, 0, diverging_epoch=OffsetAndEpoch(0, 0)), again.message)
    assert of_type(actions, Truncate) == [Truncate(0)]


def test_truncation_never_goes_below_the_high_watermark() -> None:
    node, request = follower(log_with([1, 1, 1, 1]), epoch=2)
    (again,) = sent(node.response(1, FetchResponse(0, 1, 2, 4, 0), request), FetchRequest)  # nothing to wait for
    assert node.core.high_watermark == 4
    actions = node.response(1, FetchResponse(0, 1, 2, 4, 0, diverging_epoch=OffsetAndEpoch(2, 1)), again.message)
    assert of_type(actions, Truncate) == []
    assert of_type(actions, Fatal)


def test_the_follower_high_watermark_is_bounded_by_its_own_flushed_log() -> None:
    node, request = follower(log_with([1, 1]), epoch=2)
    node.response(1, FetchResponse(0, 1, 2, 5, 0, batch(2, 2, count=3)), request)
    assert node.core.high_watermark == 2  # the leader says 5, but 2-4 are not durable here yet
    assert HighWatermarkAdvanced(5) in node.flush()


def test_a_follower_whose_leader_stops_answering_campaigns_after_the_fetch_timeout() -> None:
    node, request = follower(log_with([]), epoch=2)
    node.response(1, FetchResponse(0, 1, 2, 0, 0), request)
    start = node.now
    node.tick(start + 1999)
    assert node.core.role is Role.FOLLOWER
    node.tick(start + 2000)
    assert node.core.role is Role.PROSPECTIVE and node.core.epoch == 2


def test_a_lost_fetch_is_retried_after_the_request_timeout_and_its_late_answer_ignored() -> None:
    node, request = follower(log_with([]), epoch=2, request_timeout_ms=1000)
    start = node.now
    assert sent(node.tick(start + 999), FetchRequest) == []
    (retry,) = sent(node.tick(start + 1000), FetchRequest)
    assert retry.message is not request
    assert of_type(node.response(1, FetchResponse(0, 1, 2, 0, 0, batch(0, 2)), request), AppendBatches) == []
    assert of_type(node.response(1, FetchResponse(0, 1, 2, 0, 0, batch(0, 2)), retry.message), AppendBatches)


def test_a_parked_fetch_gets_new_data_once_it_is_appended_before_the_leaders_fsync():
    """Issue 17: the follower's append and fsync overlap the leader's fsync; the high watermark
    still waits for the leader's own durable log."""
    node = leader_with([1, 1], epoch=2)
    end = node.log.end_offset
    for replica in (2, 3):  # both followers caught up: the high watermark is the end
        fetch(node, replica, end, 2)
    assert fetch(node, 2, end, 2, max_wait=500) is None  # parked: nothing new yet
    hw = node.core.high_watermark
    base, _ = node.propose(b"new")  # the harness appends; nothing is flushed yet
    assert node.log.flushed_offset == base
    (answer,) = replied(node.core.on_appended(node.now), FetchResponse)
    assert [r.value for batch in iter_batches(answer.records) for r in batch] == [b"new"]
    assert node.core.high_watermark == hw  # the leader's copy is not durable yet
    fetch(node, 2, base + 1, 2)  # the follower has it durably
    assert node.core.high_watermark == hw
    node.flush()
    assert node.core.high_watermark == base + 1
