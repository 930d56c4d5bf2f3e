"""KIP-630 in the core: Fetch answered with a SnapshotId, FetchSnapshot served and pulled in
chunks, installing a fetched snapshot, the log start offset, elections that count snapshots."""

from __future__ import annotations

from quorum.raft.interface import (
    AbandonSnapshotFetch,
    AdvanceLogStartOffset,
    FetchRequest,
    FetchResponse,
    FetchSnapshotRequest,
    FetchSnapshotResponse,
    HighWatermarkAdvanced,
    InstallSnapshot,
    OffsetAndEpoch,
    PersistState,
    VoteRequest,
    VoteResponse,
    WriteSnapshotChunk,
)
from quorum.raft.state import Role
from quorum.sim.memory_log import MemoryLog
from quorum.wire.errors import ErrorCode
from tests.raft.harness import MemorySnapshots, Node, batch, elect, log_with, of_type, replied, sent

SNAPSHOT = OffsetAndEpoch(5, 1)
SNAPSHOT_BYTES = bytes(range(100))


def log_from(start: int, end: int, epoch: int) -> MemoryLog:
    """A flushed log holding single-record batches of `epoch` at offsets [start, end)."""
    log = MemoryLog(start_offset=start)
    for offset in range(start, end):
        log.append(batch(offset, epoch))
    log.flush()
    return log


def leader_above_snapshot(**config: int) -> Node:
    """Node 1 leading epoch 2 over a log [5, 10) of epoch 1 that starts at snapshot (5, 1)."""
    node = Node(1, log=log_from(5, 10, 1), persisted=PersistState(1, -1, -1),
                snapshots=MemorySnapshots({SNAPSHOT: SNAPSHOT_BYTES}), **config)
    node.start()
    elect(node)
    node.flush()
    assert node.core.epoch == 2 and node.log.start_offset == 5
    return node


def fetch(node: Node, replica: int, offset: int, last_epoch: int) -> FetchResponse:
    [response] = replied(node.request(replica, FetchRequest(None, replica, node.core.epoch, offset, last_epoch,
                                                            max_wait_ms=0)), FetchResponse)
    return response


def fetch_snapshot(node: Node, snapshot_id: OffsetAndEpoch, position: int, max_bytes: int = 1 << 20,
                   epoch: int | None = None) -> FetchSnapshotResponse:
    request = FetchSnapshotRequest(None, 2, node.core.epoch if epoch is None else epoch, snapshot_id, position,
                                   max_bytes)
    [response] = replied(node.request(2, request), FetchSnapshotResponse)
    return response


# -- the leader ---------------------------------------------------------------------------------


def test_fetch_below_the_log_start_offset_is_answered_with_the_latest_snapshot():
    node = leader_above_snapshot()
    below = fetch(node, 2, 0, 0)
    assert below.error == ErrorCode.NONE and below.snapshot_id == SNAPSHOT and not below.records
    assert below.log_start_offset == 5


def test_fetch_at_the_log_start_needs_the_snapshot_epoch():
    node = leader_above_snapshot()
    at_start = fetch(node, 2, 5, 1)
    assert at_start.snapshot_id is None and at_start.diverging_epoch is None and at_start.records
    assert fetch(node, 2, 5, 0).snapshot_id == SNAPSHOT  # same offset, another history


def test_fetch_snapshot_serves_chunks_bounded_by_max_bytes_and_the_leader_limit():
    node = leader_above_snapshot(snapshot_fetch_max_bytes=40)
    first = fetch_snapshot(node, SNAPSHOT, 0, max_bytes=30)
    assert (first.error, first.size, first.position, first.data) == (ErrorCode.NONE, 100, 0, SNAPSHOT_BYTES[:30])
    capped = fetch_snapshot(node, SNAPSHOT, 30, max_bytes=1000)
    assert capped.data == SNAPSHOT_BYTES[30:70]  # replica.fetch.response.max.bytes wins
    last = fetch_snapshot(node, SNAPSHOT, 90)
    assert last.data == SNAPSHOT_BYTES[90:]


def test_fetch_snapshot_errors():
    node = leader_above_snapshot()
    assert fetch_snapshot(node, OffsetAndEpoch(6, 1), 0).error == ErrorCode.SNAPSHOT_NOT_FOUND
    assert fetch_snapshot(node, SNAPSHOT, 100).error == ErrorCode.POSITION_OUT_OF_RANGE
    assert fetch_snapshot(node, SNAPSHOT, -1).error == ErrorCode.POSITION_OUT_OF_RANGE
    assert fetch_snapshot(node, SNAPSHOT, 0, epoch=1).error == ErrorCode.FENCED_LEADER_EPOCH
    follower = Node(2, persisted=PersistState(2, -1, 1), snapshots=MemorySnapshots({SNAPSHOT: SNAPSHOT_BYTES}))
    follower.start()
    assert fetch_snapshot(follower, SNAPSHOT, 0).error == ErrorCode.NOT_LEADER_OR_FOLLOWER


def caught_up_leader(**config: int) -> Node:
    """Leader of epoch 2 over [0, 10) of epoch 1 plus its LeaderChange at 10; both followers at 11."""
    node = Node(1, log=log_with([1] * 10), persisted=PersistState(1, -1, -1), **config)
    node.start()
    elect(node)
    node.flush()
    return node


def test_leader_moves_its_log_start_to_a_snapshot_every_live_replica_has():
    node = caught_up_leader()
    fetch(node, 2, 11, 2)
    fetch(node, 3, 11, 2)
    assert node.core.high_watermark == 11
    node.snapshots.complete[OffsetAndEpoch(10, 1)] = b"s"
    actions = node.apply(node.core.on_snapshot_created(OffsetAndEpoch(10, 1), node.now))
    assert of_type(actions, AdvanceLogStartOffset) == [AdvanceLogStartOffset(10)]
    assert node.log.start_offset == 10
    assert fetch(node, 2, 3, 1).snapshot_id == OffsetAndEpoch(10, 1)


def test_a_live_lagging_replica_holds_the_log_start_back_until_the_lag_time():
    node = caught_up_leader(start_offset_lag_time_max_ms=5000, fetch_timeout_ms=100_000)
    fetch(node, 2, 11, 2)
    fetch(node, 3, 3, 1)  # alive, behind the snapshot
    node.snapshots.complete[OffsetAndEpoch(10, 1)] = b"s"
    created = node.now
    assert not of_type(node.apply(node.core.on_snapshot_created(OffsetAndEpoch(10, 1), created)),
                       AdvanceLogStartOffset)
    assert not of_type(node.tick(created + 4999), AdvanceLogStartOffset)
    assert node.core.next_deadline_ms() <= created + 5000
    assert of_type(node.tick(created + 5000), AdvanceLogStartOffset) == [AdvanceLogStartOffset(10)]


def test_a_replica_that_stopped_fetching_does_not_hold_the_log_start_back():
    node = caught_up_leader(fetch_timeout_ms=1000)
    fetch(node, 2, 11, 2)
    fetch(node, 3, 11, 2)
    node.at(node.now + 500)
    fetch(node, 2, 11, 2)
    node.at(node.now + 800)  # node 3 last fetched 1,300 ms ago: not live
    fetch(node, 2, 11, 2)
    node.snapshots.complete[OffsetAndEpoch(10, 1)] = b"s"
    actions = node.apply(node.core.on_snapshot_created(OffsetAndEpoch(10, 1), node.now))
    assert of_type(actions, AdvanceLogStartOffset) == [AdvanceLogStartOffset(10)]


def test_a_snapshot_past_the_high_watermark_is_refused():
    node = caught_up_leader()
    try:
        node.core.on_snapshot_created(OffsetAndEpoch(11, 2), node.now)
    except ValueError as exc:
        assert "high watermark" in str(exc)
    else:
        raise AssertionError("a snapshot of uncommitted records was accepted")


# -- followers and observers ---------------------------------------------------------------------


def following_node(node_id: int = 2, voters: tuple[int, ...] = (1, 2, 3), **kwargs) -> Node:
    node = Node(node_id, voters=voters, persisted=PersistState(2, -1, 1), **kwargs)
    node.started = node.start()
    return node


def next_request(node: Node, kind: type, after: list | None = None):
    """The request of `kind` the node sends next: in `after` (the actions of the last event), or at a tick."""
    actions = list(after or []) + node.tick(node.now + 1) + node.tick(node.now + 25)
    requests = [s.message for s in sent(actions, kind)]
    return requests[0] if requests else None


def first_fetch(node: Node) -> FetchRequest:
    [request] = [s.message for s in sent(node.started, FetchRequest)]
    return request


def answer_with_snapshot(node: Node, request: FetchRequest) -> list:
    return node.response(1, FetchResponse(ErrorCode.NONE, 1, 2, 12, 5, snapshot_id=SNAPSHOT), request)


def test_follower_pulls_the_snapshot_in_chunks_installs_it_and_resumes_from_its_end():
    node = following_node()
    request = next_request(node, FetchSnapshotRequest, answer_with_snapshot(node, first_fetch(node)))
    assert (request.snapshot_id, request.position) == (SNAPSHOT, 0)
    written = node.response(1, FetchSnapshotResponse(ErrorCode.NONE, 1, 2, SNAPSHOT, 100, 0, SNAPSHOT_BYTES[:60]),
                            request)
    assert of_type(written, WriteSnapshotChunk) == [WriteSnapshotChunk(SNAPSHOT, 0, SNAPSHOT_BYTES[:60], 100)]
    request = next_request(node, FetchSnapshotRequest, written)
    assert request.position == 60
    last = node.response(1, FetchSnapshotResponse(ErrorCode.NONE, 1, 2, SNAPSHOT, 100, 60, SNAPSHOT_BYTES[60:]),
                         request)
    assert node.completed == [SNAPSHOT]
    assert next_request(node, FetchSnapshotRequest, last) is None and next_request(node, FetchRequest) is None
    actions = node.apply(node.core.on_snapshot_fetched(SNAPSHOT, None, node.now))
    assert of_type(actions, InstallSnapshot) == [InstallSnapshot(SNAPSHOT)]
    assert HighWatermarkAdvanced(5) in actions and node.core.high_watermark == 5
    assert (node.log.start_offset, node.log.end_offset, node.log.last_fetched_epoch()) == (5, 5, 1)
    resumed = next_request(node, FetchRequest, actions)
    assert (resumed.fetch_offset, resumed.last_fetched_epoch) == (5, 1)


def test_snapshot_not_found_sends_the_follower_back_to_fetch():
    for error in (ErrorCode.SNAPSHOT_NOT_FOUND, ErrorCode.POSITION_OUT_OF_RANGE, ErrorCode.NOT_LEADER_OR_FOLLOWER):
        node = following_node()
        request = next_request(node, FetchSnapshotRequest, answer_with_snapshot(node, first_fetch(node)))
        actions = node.response(1, FetchSnapshotResponse(int(error), 1, 2, SNAPSHOT), request)
        assert of_type(actions, AbandonSnapshotFetch) == [AbandonSnapshotFetch(SNAPSHOT)]
        assert next_request(node, FetchRequest, actions).fetch_offset == 0


def test_a_refused_snapshot_file_is_fetched_again():
    node = following_node()
    request = next_request(node, FetchSnapshotRequest, answer_with_snapshot(node, first_fetch(node)))
    node.response(1, FetchSnapshotResponse(ErrorCode.NONE, 1, 2, SNAPSHOT, 100, 0, SNAPSHOT_BYTES), request)
    actions = node.apply(node.core.on_snapshot_fetched(SNAPSHOT, "CRC mismatch at byte 61", node.now))
    assert not of_type(actions, InstallSnapshot)
    assert next_request(node, FetchRequest, actions).fetch_offset == 0


def test_a_chunk_that_does_not_continue_the_file_abandons_the_fetch():
    node = following_node()
    request = next_request(node, FetchSnapshotRequest, answer_with_snapshot(node, first_fetch(node)))
    actions = node.response(1, FetchSnapshotResponse(ErrorCode.NONE, 1, 2, SNAPSHOT, 100, 40, b"x"), request)
    assert of_type(actions, AbandonSnapshotFetch) and not of_type(actions, WriteSnapshotChunk)


def test_a_new_leader_abandons_the_fetch_in_progress():
    node = following_node()
    next_request(node, FetchSnapshotRequest, answer_with_snapshot(node, first_fetch(node)))
    actions = node.response(1, FetchResponse(ErrorCode.FENCED_LEADER_EPOCH, 3, 3, -1, -1), first_fetch_or_none(node))
    actions += node.apply(node.core.on_request(99, 3, _begin(3, 3), node.now))
    assert of_type(actions, AbandonSnapshotFetch) == [AbandonSnapshotFetch(SNAPSHOT)]
    assert node.core.leader_id == 3


def first_fetch_or_none(node: Node):
    return FetchRequest(None, 2, 2, 0, 0)  # not the outstanding request: ignored


def _begin(leader: int, epoch: int):
    from quorum.raft.interface import BeginQuorumEpochRequest

    return BeginQuorumEpochRequest(None, leader, epoch)


def test_the_leader_never_loads_a_fetched_snapshot():
    node = following_node(fetch_timeout_ms=500)
    request = next_request(node, FetchSnapshotRequest, answer_with_snapshot(node, first_fetch(node)))
    node.response(1, FetchSnapshotResponse(ErrorCode.NONE, 1, 2, SNAPSHOT, 100, 0, SNAPSHOT_BYTES), request)
    elect(node)  # the leader went quiet while the file was being validated
    assert node.core.role is Role.LEADER
    actions = node.apply(node.core.on_snapshot_fetched(SNAPSHOT, None, node.now))
    assert not of_type(actions, InstallSnapshot)


def test_follower_moves_its_log_start_no_further_than_its_own_snapshot():
    node = following_node(log=log_with([1] * 10), snapshots=MemorySnapshots({OffsetAndEpoch(8, 1): b"s"}))
    request = first_fetch(node)
    actions = node.response(1, FetchResponse(ErrorCode.NONE, 1, 2, 10, 10), request)
    assert of_type(actions, AdvanceLogStartOffset) == [AdvanceLogStartOffset(8)]
    plain = following_node(log=log_with([1] * 10))
    request = first_fetch(plain)
    assert not of_type(plain.response(1, FetchResponse(ErrorCode.NONE, 1, 2, 10, 10), request),
                       AdvanceLogStartOffset)


def test_follower_moves_its_log_start_no_further_than_the_leaders():
    node = following_node(log=log_with([1] * 10), snapshots=MemorySnapshots({OffsetAndEpoch(8, 1): b"s"}))
    request = first_fetch(node)
    actions = node.response(1, FetchResponse(ErrorCode.NONE, 1, 2, 10, 6), request)
    assert not of_type(actions, AdvanceLogStartOffset)  # its only snapshot lies past the leader's start


# -- elections -------------------------------------------------------------------------------------


def test_a_snapshot_newer_than_the_log_counts_in_elections():
    snapshots = MemorySnapshots({OffsetAndEpoch(10, 3): b"s"})
    voter = Node(2, log=MemoryLog(), persisted=PersistState(3, -1, -1), snapshots=snapshots)
    voter.start()

    def vote(epoch: int, offset: int) -> bool:
        request = VoteRequest(None, 4, 1, epoch, offset)
        [response] = replied(voter.request(1, request), VoteResponse)
        return response.vote_granted

    assert not vote(2, 20)  # a longer log of an older epoch is behind the snapshot
    assert vote(3, 10)
    campaign = voter.run_until_campaign()
    [request, *_] = [s.message for s in sent(campaign, VoteRequest)]
    assert (request.last_epoch, request.last_offset) == (3, 10)


def test_follower_log_start_lands_on_a_snapshot_of_its_own():
    snapshots = MemorySnapshots({OffsetAndEpoch(4, 1): b"s", OffsetAndEpoch(9, 1): b"s"})
    node = following_node(log=log_with([1] * 10), snapshots=snapshots)
    request = first_fetch(node)
    actions = node.response(1, FetchResponse(ErrorCode.NONE, 1, 2, 10, 7), request)  # leader starts at 7
    assert of_type(actions, AdvanceLogStartOffset) == [AdvanceLogStartOffset(4)]  # not 7: no snapshot there


def test_an_epoch_older_than_the_leaders_log_diverges_at_its_start_in_that_epoch():
    node = leader_above_snapshot()
    fetch(node, 2, 11, 2)
    fetch(node, 3, 11, 2)
    node.snapshots.complete[OffsetAndEpoch(10, 1)] = b"s"
    node.apply(node.core.on_snapshot_created(OffsetAndEpoch(10, 1), node.now))
    assert node.log.start_offset == 10 and node.log.end_offset == 11  # only the LeaderChange of epoch 2 left
    at_start = fetch(node, 3, 10, 1)
    assert at_start.snapshot_id is None and at_start.diverging_epoch is None
    # A tail of epoch 1 past the start diverges; the leader no longer holds epoch 1, so (like Kafka's
    # LeaderEpochFileCache) it answers the start in that epoch, never epoch 0, which would send the
    # follower below its high watermark.
    assert fetch(node, 3, 12, 1).diverging_epoch == OffsetAndEpoch(10, 1)
