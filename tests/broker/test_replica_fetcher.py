"""The sans-IO replica fetcher, driven against an in-memory leader (tests/broker/replication_model.py)."""

from __future__ import annotations

import pytest

from quorum.broker import replica_fetcher_events as ev
from quorum.broker.replica_fetcher import FetchPhase
from quorum.broker.replica_fetcher_out_of_range import (
    EARLIEST_LOCAL_TIMESTAMP,
    EARLIEST_PENDING_UPLOAD_TIMESTAMP,
    AskLeaderOffset,
    Defer,
    LeaderOffset,
    OutOfRange,
    Retry,
    StartAt,
    Step,
    TruncateTo,
)
from quorum.wire.errors import ErrorCode
from quorum.wire.records import Record, build_batch, empty_batch, iter_batches
from tests.broker.replication_model import (
    TOPIC_ID,
    TP,
    Cluster,
    LeaderSide,
    MemoryLog,
    apply_follower_actions,
    log_with,
    new_fetcher,
    replicate,
    serve_fetch,
    serve_list_offsets,
)


def follow(fetcher, log: MemoryLog, epoch: int, now: int = 0) -> list:
    return fetcher.add_partitions([ev.AddPartition(TP, TOPIC_ID, epoch, log)], now)


def only_send(actions: list) -> ev.Request:
    sends = [a for a in actions if isinstance(a, ev.Send)]
    assert len(sends) == 1, actions
    return sends[0].request


def prefix_of(log: MemoryLog, end: int, name: str) -> MemoryLog:
    """A replica that copied `log` below `end`."""
    copy = MemoryLog(name)
    for batch in log.batches:
        if batch.next_offset <= end:
            copy.append_bytes(batch.data)
    return copy


def truncations(actions: list) -> list[int]:
    return [a.offset for a in actions if isinstance(a, ev.Truncate)]


def replicate_recording(fetcher, follower, leader, actions, **kw) -> list:
    seen: list = []
    original = fetcher.on_fetch_response, fetcher.on_offsets_for_leader_epoch_response, fetcher.on_list_offsets_response

    def wrap(fn):
        def inner(*args):
            out = fn(*args)
            seen.extend(out)
            return out
        return inner

    fetcher.on_fetch_response, fetcher.on_offsets_for_leader_epoch_response, fetcher.on_list_offsets_response = (
        wrap(f) for f in original)
    seen.extend(actions)
    replicate(fetcher, follower, leader, actions, **kw)
    return seen


# ---------------------------------------------------------------------------------------------
# Fetching


def test_empty_follower_fetches_everything_and_follows_the_high_watermark() -> None:
    leader = LeaderSide(log_with("L", (1, 5), hw=3), epoch=1)
    follower = MemoryLog("F")
    fetcher = new_fetcher(2, 1)
    actions = follow(fetcher, follower, 1)
    request = only_send(actions)
    assert isinstance(request, ev.FetchRequest)
    assert (request.replica_id, request.max_wait_ms, request.min_bytes, request.max_bytes) == (2, 500, 1, 10 << 20)
    part = request.partitions[0]
    assert (part.fetch_offset, part.last_fetched_epoch, part.current_leader_epoch, part.partition_max_bytes) == (
        0, -1, 1, 1 << 20)
    response, _ = serve_fetch(leader, request)
    out = fetcher.on_fetch_response(request, response, 0)
    assert [type(a) for a in out] == [ev.AppendAsFollower, ev.UpdateHighWatermark, ev.Send]
    apply_follower_actions(follower, out)
    assert follower.history() == leader.log.history() and follower.hw == 3
    nxt = out[-1].request.partitions[0]
    assert (nxt.fetch_offset, nxt.last_fetched_epoch) == (5, 1)


def test_a_follower_far_behind_asks_for_a_whole_response_until_it_is_near_the_leader() -> None:
    leader = LeaderSide(log_with("L", (1, 60), hw=60), epoch=1)
    follower = MemoryLog("F")
    fetcher = new_fetcher(2, 1, fetch_max_bytes=200, fetch_response_max_bytes=4000)
    request = only_send(follow(fetcher, follower, 1))
    asked = []
    while True:
        asked.append(request.partitions[0].partition_max_bytes)
        response, _ = serve_fetch(leader, request)
        out = fetcher.on_fetch_response(request, response, 0)
        apply_follower_actions(follower, out)
        request = only_send(out)
        if follower.log_end_offset == 60:
            break
    assert asked[0] == 200 and set(asked[1:]) == {4000}, "full fetches while behind ask for a whole response"
    assert follower.history() == leader.log.history()
    response, _ = serve_fetch(leader, request)  # nothing more: the answer is empty
    request = only_send(fetcher.on_fetch_response(request, response, 0))
    assert request.partitions[0].partition_max_bytes == 200, "back to replica.fetch.max.bytes once caught up"


def test_a_full_answer_under_acks_all_asks_for_a_whole_response_though_the_high_watermark_waits() -> None:
    """Under acks=all the leader's high watermark waits for this follower, so it is never past the
    fetch offset; a full answer still says the leader holds more (pipelined Produce requests appended
    several client batches), and the next fetch takes them all in one round trip (issue 37)."""
    leader = LeaderSide(log_with("L", (1, 60), hw=0), epoch=1)
    follower = MemoryLog("F")
    fetcher = new_fetcher(2, 1, fetch_max_bytes=200, fetch_response_max_bytes=4000)
    request = only_send(follow(fetcher, follower, 1))
    response, _ = serve_fetch(leader, request)
    assert response.partitions[0].high_watermark <= request.partitions[0].fetch_offset
    out = fetcher.on_fetch_response(request, response, 0)
    apply_follower_actions(follower, out)
    assert 0 < follower.log_end_offset < 60
    assert only_send(out).partitions[0].partition_max_bytes == 4000


def test_follower_log_start_follows_the_leader_but_not_past_its_high_watermark() -> None:
    leader = LeaderSide(log_with("L", (1, 6), hw=6), epoch=1)
    follower = MemoryLog("F")
    fetcher = new_fetcher(2, 1)
    request = only_send(follow(fetcher, follower, 1))
    response = ev.FetchResponse(0, (ev.FetchedPartition(TP, 0, 3, 5, leader.log.read(0, 1 << 20)),))
    out = fetcher.on_fetch_response(request, response, 0)
    assert [a for a in out if not isinstance(a, ev.Send | ev.AppendAsFollower)] == [
        ev.UpdateHighWatermark(TP, 3), ev.IncrementLogStartOffset(TP, 3)]
    apply_follower_actions(follower, out)
    request = only_send(out)
    assert request.partitions[0].log_start_offset == 3
    # an answer to a request that is not in flight changes nothing
    stale = ev.FetchRequest(2, -1, 500, 1, 1 << 20, request.partitions)
    assert fetcher.on_fetch_response(stale, serve_fetch(leader, stale)[0], 0) == []


def test_a_partial_last_batch_is_left_for_the_next_fetch_and_bad_records_back_off() -> None:
    leader = LeaderSide(log_with("L", (1, 3), hw=3), epoch=1)
    follower = MemoryLog("F")
    fetcher = new_fetcher(2, 1)
    request = only_send(follow(fetcher, follower, 1))
    response, _ = serve_fetch(leader, request)
    data = response.partitions[0]
    cut = ev.FetchResponse(0, (ev.FetchedPartition(TP, 0, 3, 0, data.records[:-5]),))
    out = fetcher.on_fetch_response(request, cut, 0)
    apply_follower_actions(follower, out)
    assert follower.log_end_offset == 2 and only_send(out).partitions[0].fetch_offset == 2
    request = only_send(out)
    corrupt = bytearray(leader.log.read(2, 1 << 20))
    corrupt[-1] ^= 0xFF
    bad = ev.FetchResponse(0, (ev.FetchedPartition(TP, 0, 3, 0, bytes(corrupt)),))
    out = fetcher.on_fetch_response(request, bad, 0)
    assert out == [] and fetcher.state(TP).delayed_until_ms == 1000 and "CRC" in fetcher.state(TP).reason
    assert fetcher.tick(999) == []
    assert only_send(fetcher.tick(1000)).partitions[0].fetch_offset == 2


def test_an_empty_batch_the_leaders_cleaner_merged_is_taken_from_the_follower_end() -> None:
    """The leader's log cleaner writes a run of emptied batches as one empty batch; a follower whose
    copy ends inside it appends the part from its end, and refuses any other batch starting below."""
    follower = log_with("F", (1, 4), hw=4)
    fetcher = new_fetcher(2, 1)
    request = only_send(follow(fetcher, follower, 1))
    assert request.partitions[0].fetch_offset == 4
    merged = empty_batch(0, 9, 1, 0, 1_000)
    after = build_batch([Record(10, 2_000, b"k", b"v")], base_offset=10, partition_leader_epoch=1)
    answer = ev.FetchResponse(0, (ev.FetchedPartition(TP, 0, 11, 0, merged + after),))
    out = fetcher.on_fetch_response(request, answer, 0)
    appended = next(a for a in out if isinstance(a, ev.AppendAsFollower))
    head, tail = list(iter_batches(appended.records))
    assert (head.base_offset, head.last_offset, head.records_count, head.partition_leader_epoch) == (4, 9, 0, 1)
    assert bytes(tail.raw) == after
    assert only_send(out).partitions[0].fetch_offset == 11
    fetcher = new_fetcher(2, 1)  # again at offset 4, answered by a batch with records from offset 2
    request = only_send(follow(fetcher, log_with("F", (1, 4), hw=4), 1))
    below = build_batch([Record(2, 0, b"k", b"v"), Record(5, 0, b"k", b"w")], base_offset=2, partition_leader_epoch=1)
    refused = fetcher.on_fetch_response(request, ev.FetchResponse(0, (ev.FetchedPartition(TP, 0, 6, 0, below),)), 0)
    assert refused == [] and "starts at 2" in fetcher.state(TP).reason


# ---------------------------------------------------------------------------------------------
# Divergence


def test_divergence_after_back_to_back_leader_changes() -> None:
    """A leads epoch 1 and writes 0..7, of which 0..4 reached B. B leads epoch 2 with the
    shorter log and writes 5..8; C, which copied B up to 7, leads epoch 3 and writes 7..9.
    A and B then follow C, each truncating exactly where its log leaves C's."""
    a = log_with("A", (1, 8), hw=5)
    b = prefix_of(a, 5, "B")
    for _ in range(4):
        b.append_leader(2, b"B2")
    c = prefix_of(b, 7, "C")
    c.hw = 5
    leader_c = LeaderSide(c, epoch=3)
    leader_c.become_leader()
    for _ in range(3):
        c.append_leader(3, b"C3")
    b.hw = 5

    fetch_a = new_fetcher(1, 3)
    seen = replicate_recording(fetch_a, a, leader_c, follow(fetch_a, a, 3))
    assert truncations(seen) == [5]  # A's epoch 1 ends at 5 in C's log
    assert a.history() == c.history()

    fetch_b = new_fetcher(2, 3)
    seen = replicate_recording(fetch_b, b, leader_c, follow(fetch_b, b, 3))
    assert truncations(seen) == [7]  # B's epoch 2 ends at 7 in C's log
    assert b.history() == c.history()
    assert a.hw == b.hw == c.hw == 5


def test_follower_offline_across_several_epochs_walks_the_divergence_down() -> None:
    """F saw epochs 1, 2 and a doomed epoch 4; the leader (epoch 6) has 1, a shorter 2, 3, 5, 6.
    Fetch: epoch 4 is unknown to the leader (its floor is 3, ending at 7); F has no epoch 3, so
    it cuts to the end of its epoch 2 (6) and asks again; the leader's epoch 2 ends at 5: cut there."""
    leader_log = log_with("L", (1, 3), (2, 2), (3, 2), (5, 3), (6, 2), hw=9)
    leader = LeaderSide(leader_log, epoch=6)
    for truncate_on_fetch in (True, False):
        follower = prefix_of(leader_log, 5, "F")
        follower.append_leader(2, b"F2")
        for _ in range(3):
            follower.append_leader(4, b"F4")
        follower.hw = 3
        assert follower.log_end_offset == 9
        fetcher = new_fetcher(2, 6, truncate_on_fetch=truncate_on_fetch)
        seen = replicate_recording(fetcher, follower, leader, follow(fetcher, follower, 6))
        assert truncations(seen) == [6, 5], truncate_on_fetch
        assert follower.history() == leader_log.history()
        assert follower.hw == 9
        kinds = {type(a.request) for a in seen if isinstance(a, ev.Send)}
        assert (ev.OffsetsForLeaderEpochRequest in kinds) is not truncate_on_fetch


def test_no_truncation_below_the_high_watermark_without_divergence() -> None:
    """A follower whose log is a prefix of the leader's never truncates, whatever its HW."""
    leader = LeaderSide(log_with("L", (1, 4), (2, 4), hw=8), epoch=3)
    leader.become_leader()
    follower = prefix_of(leader.log, 6, "F")
    follower.hw = 6
    fetcher = new_fetcher(2, 1)
    seen = replicate_recording(fetcher, follower, leader, follow(fetcher, follower, 3))
    assert truncations(seen) == []
    assert follower.history() == leader.log.history() and follower.hw == 8


def test_a_log_without_epochs_is_cut_to_its_high_watermark() -> None:
    """Kafka's truncateToHighWatermark: with no epoch to compare, only the HW is known good."""
    follower = MemoryLog("F")
    follower.batches = list(log_with("X", (1, 5)).batches)
    follower.hw = 3
    fetcher = new_fetcher(2, 1)
    actions = follow(fetcher, follower, 1)
    assert truncations(actions) == [3]


# ---------------------------------------------------------------------------------------------
# Out of range


def test_out_of_range_above_the_leader_end_truncates_to_it() -> None:
    """An unclean election let a shorter log lead: the default handler cuts to its end."""
    leader = LeaderSide(log_with("L", (1, 6), hw=6), epoch=2)
    follower = prefix_of(leader.log, 6, "F")
    follower.hw = 6
    for _ in range(4):
        follower.append_leader(1, b"lost")
    fetcher = new_fetcher(2, 1)
    actions = follow(fetcher, follower, 2)
    request = only_send(actions)
    oor = ev.FetchResponse(0, (ev.FetchedPartition(TP, ErrorCode.OFFSET_OUT_OF_RANGE),))
    out = fetcher.on_fetch_response(request, oor, 0)
    query = only_send(out)
    assert isinstance(query, ev.ListOffsetsRequest) and query.partitions[0].timestamp == -1
    assert fetcher.state(TP).phase is FetchPhase.RESOLVING
    out = fetcher.on_list_offsets_response(query, serve_list_offsets(leader, query), 0)
    assert truncations(out) == [6]
    apply_follower_actions(follower, out)
    assert fetcher.state(TP).phase is FetchPhase.FETCHING
    replicate(fetcher, follower, leader, fetcher.tick(0))
    assert follower.history() == leader.log.history()


def test_out_of_range_below_the_leader_start_starts_over_at_it() -> None:
    leader_log = log_with("L", (1, 10), hw=10)
    leader_log.advance_start(7)
    leader = LeaderSide(leader_log, epoch=1)
    follower = prefix_of(leader_log, 3, "F")
    follower.hw = 3
    fetcher = new_fetcher(2, 1)
    seen = replicate_recording(fetcher, follower, leader, follow(fetcher, follower, 1))
    queries = [a.request.partitions[0].timestamp for a in seen if isinstance(a, ev.Send)
               and isinstance(a.request, ev.ListOffsetsRequest)]
    assert queries == [-1, -2]
    assert [a for a in seen if isinstance(a, ev.TruncateFullyAndStartAt)] == [ev.TruncateFullyAndStartAt(TP, 7)]
    assert follower.start == 7 and follower.history() == leader_log.history() and follower.hw == 10


def test_out_of_range_when_the_offset_is_in_range_by_now_backs_off() -> None:
    leader = LeaderSide(log_with("L", (1, 5), hw=5), epoch=1)
    follower = prefix_of(leader.log, 3, "F")
    fetcher = new_fetcher(2, 1)
    request = only_send(follow(fetcher, follower, 1))
    out = fetcher.on_fetch_response(request, ev.FetchResponse(0, (ev.FetchedPartition(TP, 1),)), 10)
    for _ in range(2):
        query = only_send(out)
        out = fetcher.on_list_offsets_response(query, serve_list_offsets(leader, query), 10)
    assert out == [] and fetcher.state(TP).delayed_until_ms == 1010
    assert isinstance(only_send(fetcher.tick(1010)), ev.FetchRequest)


def test_offset_moved_to_tiered_storage_stops_with_a_reason_by_default() -> None:
    fetcher = new_fetcher(2, 1)
    request = only_send(follow(fetcher, MemoryLog("F"), 1))
    out = fetcher.on_fetch_response(request, ev.FetchResponse(0, (
        ev.FetchedPartition(TP, ErrorCode.OFFSET_MOVED_TO_TIERED_STORAGE),)), 0)
    [failed] = out
    assert isinstance(failed, ev.PartitionFailed) and "tiered storage" in failed.reason
    assert fetcher.state(TP).phase is FetchPhase.FAILED and fetcher.tick(10_000) == []
    # a new leader epoch starts over
    assert isinstance(only_send(follow(fetcher, MemoryLog("F"), 2)), ev.FetchRequest)


class TieredHandler:
    """A stand-in for the tiered follower: start at the leader's earliest local offset with the
    leader epochs a remote tier would give (the work is deferred to the shell)."""

    def __init__(self) -> None:
        self.seen: list[OutOfRange] = []

    def next_step(self, situation: OutOfRange) -> Step:
        self.seen.append(situation)
        if situation.error == ErrorCode.NONE:
            return TruncateTo(situation.log_end_offset)  # an empty replica: KIP-405 waits for the leader's answer
        local = situation.leader_offsets.get(EARLIEST_LOCAL_TIMESTAMP)
        if local is None:
            return AskLeaderOffset(EARLIEST_LOCAL_TIMESTAMP)
        return Defer(("rebuild aux state at", local.offset))


def test_a_custom_handler_plugs_in_for_tiered_offsets() -> None:
    leader_log = log_with("L", (1, 4), (3, 6), hw=10)
    leader_log.advance_start(6)
    leader = LeaderSide(leader_log, epoch=3)
    follower = MemoryLog("F")
    handler = TieredHandler()
    fetcher = new_fetcher(2, 3, handler)
    request = only_send(follow(fetcher, follower, 3))
    assert [s.error for s in handler.seen] == [ErrorCode.NONE]  # consulted once before the first fetch
    assert isinstance(request, ev.FetchRequest) and request.partitions[0].fetch_offset == 0
    out = fetcher.on_fetch_response(request, ev.FetchResponse(0, (
        ev.FetchedPartition(TP, ErrorCode.OFFSET_MOVED_TO_TIERED_STORAGE),)), 0)
    query = only_send(out)
    assert query.partitions[0].timestamp == EARLIEST_LOCAL_TIMESTAMP
    out = fetcher.on_list_offsets_response(query, serve_list_offsets(leader, query, {EARLIEST_LOCAL_TIMESTAMP: 6}), 0)
    [work] = out
    assert work == ev.OutOfRangeWork(TP, 3, ("rebuild aux state at", 6))
    assert handler.seen[-1].error == ErrorCode.OFFSET_MOVED_TO_TIERED_STORAGE
    # a resolution for an older leader epoch is ignored
    assert fetcher.resolve_out_of_range(TP, 2, StartAt(6), 0) == []
    epochs = (ev.EpochStart(1, 0), ev.EpochStart(3, 4))
    out = fetcher.resolve_out_of_range(TP, 3, StartAt(6, epochs), 0)
    assert out[0] == ev.TruncateFullyAndStartAt(TP, 6, epochs)
    nxt = only_send(out).partitions[0]
    assert (nxt.fetch_offset, nxt.last_fetched_epoch) == (6, 3)
    replicate(fetcher, follower, leader, out)
    assert follower.history() == leader_log.history()


# ---------------------------------------------------------------------------------------------
# Errors and leadership


@pytest.mark.parametrize("error", [ErrorCode.UNKNOWN_LEADER_EPOCH, ErrorCode.NOT_LEADER_OR_FOLLOWER,
                                   ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, ErrorCode.KAFKA_STORAGE_ERROR])
def test_retriable_errors_back_off(error: int) -> None:
    fetcher = new_fetcher(2, 1)
    request = only_send(follow(fetcher, MemoryLog("F"), 1, now=100))
    assert fetcher.on_fetch_response(request, ev.FetchResponse(0, (ev.FetchedPartition(TP, error),)), 100) == []
    assert fetcher.next_deadline_ms() == 1100 and fetcher.tick(1099) == []
    assert isinstance(only_send(fetcher.tick(1100)), ev.FetchRequest)


def test_fenced_leader_epoch_waits_for_a_newer_epoch_from_the_image() -> None:
    fetcher = new_fetcher(2, 1)
    log = MemoryLog("F")
    request = only_send(follow(fetcher, log, 1))
    fenced = ev.FetchResponse(0, (ev.FetchedPartition(TP, ErrorCode.FENCED_LEADER_EPOCH),))
    assert fetcher.on_fetch_response(request, fenced, 0) == []
    assert fetcher.state(TP).phase is FetchPhase.FENCED
    assert fetcher.tick(60_000) == [] and fetcher.next_deadline_ms() is None
    assert follow(fetcher, log, 0) == []  # an older image changes nothing
    assert only_send(follow(fetcher, log, 2)).partitions[0].current_leader_epoch == 2


def test_send_failure_and_late_answers() -> None:
    leader = LeaderSide(log_with("L", (1, 3), hw=3), epoch=1)
    fetcher = new_fetcher(2, 1)
    log = MemoryLog("F")
    request = only_send(follow(fetcher, log, 1))
    assert fetcher.on_send_failed(request, 5) == []
    assert fetcher.state(TP).delayed_until_ms == 1005
    # the late answer to the failed request is dropped
    assert fetcher.on_fetch_response(request, serve_fetch(leader, request)[0], 6) == []
    request = only_send(fetcher.tick(1005))
    # re-added with a newer epoch while the fetch is in flight: its answer is stale
    assert follow(fetcher, log, 2, now=1006) == []
    out = fetcher.on_fetch_response(request, serve_fetch(leader, request)[0], 1007)
    assert not [a for a in out if isinstance(a, ev.AppendAsFollower)]
    assert only_send(out).partitions[0].current_leader_epoch == 2
    fetcher.remove_partitions([TP], 1008)
    assert fetcher.partitions() == () and fetcher.on_send_failed(only_send(out), 1009) == []


def test_one_fetch_in_flight_carries_every_ready_partition() -> None:
    fetcher = new_fetcher(2, 1)
    logs = {("t", i): MemoryLog(f"F{i}") for i in range(3)}
    out = fetcher.add_partitions([ev.AddPartition(tp, TOPIC_ID, 1, log) for tp, log in logs.items()], 0)
    request = only_send(out)
    assert [p.topic_partition for p in request.partitions] == list(logs)
    assert fetcher.add_partitions([ev.AddPartition(("u", 0), TOPIC_ID, 1, MemoryLog("G"))], 1) == []
    response = ev.FetchResponse(0, tuple(ev.FetchedPartition(tp, 0, 0, 0) for tp in logs))
    nxt = only_send(fetcher.on_fetch_response(request, response, 2))
    assert len(nxt.partitions) == 4


# ---------------------------------------------------------------------------------------------
# The whole loop: both cores, a controller, crashes


def test_follower_offline_across_several_epochs_in_the_cluster() -> None:
    cluster = Cluster(3, seed=5)
    cluster.run_until(100)
    for _ in range(5):
        cluster.produce()
    cluster.run_until(2_000)
    cluster.crash(3)
    for _ in range(4):
        cluster.elect()
        cluster.run_until(cluster.now + 500)
        for _ in range(3):
            cluster.produce()
        cluster.run_until(cluster.now + 1_000)
    cluster.restart(3)
    cluster.run_until(cluster.now + 60_000)
    assert cluster.epoch >= 4
    histories = {b.id: b.log.history() for b in cluster.brokers.values()}
    assert histories[1] == histories[2] == histories[3]
    assert cluster.isr == (1, 2, 3)


@pytest.mark.parametrize("seed", range(40))
def test_random_leader_changes_crashes_and_appends_keep_replicas_consistent(seed: int) -> None:
    """Kafka's replica invariant after every event: below its high watermark every replica holds
    exactly the committed records, which never change, and acknowledged (acks=all) records are
    committed and on the leader. At the end, with everyone back, all logs converge."""
    cluster = Cluster(3, seed=seed, min_isr=1 + seed % 2, lag_ms=2_000, drop_rate=0.05)
    rng = cluster.rng
    try:
        for _ in range(120):
            roll = rng.random()
            if roll < 0.45:
                cluster.produce(acks_all=rng.random() < 0.7)
            elif roll < 0.55:
                live = [b for b in cluster.ids if cluster.brokers[b].alive]
                if len(live) > 1:
                    cluster.crash(rng.choice(live))
            elif roll < 0.7:
                dead = [b for b in cluster.ids if not cluster.brokers[b].alive]
                if dead:
                    cluster.restart(rng.choice(dead))
            elif roll < 0.8:
                cluster.elect()
            elif roll < 0.85:
                cluster.checkpoint_hw()
            cluster.run_until(cluster.now + rng.choice((1, 10, 100, 1_000, 5_000)))
        for b in cluster.ids:
            if not cluster.brokers[b].alive:
                cluster.restart(b)
        cluster.run_until(cluster.now + 120_000)
    except AssertionError as exc:
        raise AssertionError(f"seed {seed}: {exc}") from exc
    leader = cluster.brokers[cluster.leader].log
    for b in cluster.brokers.values():
        assert b.log.history() == leader.history(), f"seed {seed}: broker {b.id} {b.log} vs leader {leader}"
        assert b.log.hw == leader.log_end_offset, f"seed {seed}: {b.log}"
        assert not b.failures, f"seed {seed}: {b.failures}"
    assert cluster.isr == cluster.ids, f"seed {seed}"


# ---------------------------------------------------------------------------------------------
# KIP-1023: an empty replica consults the handler before its first fetch; ListOffsets -6


class PendingUploadHandler:
    """A stand-in for KIP-1023's handler: an empty eligible replica asks -6 and starts there with
    the remote tier's history; a leader without -6 sends it down the plain path."""

    def __init__(self) -> None:
        self.seen: list[OutOfRange] = []

    def next_step(self, situation: OutOfRange) -> Step:
        self.seen.append(situation)
        if not situation.fetch_from_tiered_offset or not situation.remote_storage_enabled or situation.compacted:
            return TruncateTo(situation.log_end_offset)
        pending = situation.leader_offsets.get(EARLIEST_PENDING_UPLOAD_TIMESTAMP)
        if pending is None:
            return AskLeaderOffset(EARLIEST_PENDING_UPLOAD_TIMESTAMP)
        if pending.error == ErrorCode.UNSUPPORTED_VERSION:
            return TruncateTo(situation.log_end_offset)
        return Defer(("aux state below", pending.offset))


FLAG_ON = ev.TieringFacts(remote_storage_enabled=True, fetch_from_tiered_offset=True)


def follow_with(fetcher, log: MemoryLog, epoch: int, facts: ev.TieringFacts) -> list:
    return fetcher.add_partitions([ev.AddPartition(TP, TOPIC_ID, epoch, log, lambda: facts)], 0)


@pytest.mark.parametrize("facts", [ev.TieringFacts(), ev.TieringFacts(remote_storage_enabled=True),
                                   ev.TieringFacts(True, True, True), ev.TieringFacts(False, False, True)])
def test_an_empty_replica_not_eligible_fetches_from_zero_after_one_consultation(facts: ev.TieringFacts) -> None:
    handler = PendingUploadHandler()
    fetcher = new_fetcher(2, 1, handler)
    request = only_send(follow_with(fetcher, MemoryLog("F"), 1, facts))
    assert isinstance(request, ev.FetchRequest) and request.partitions[0].fetch_offset == 0
    [situation] = handler.seen
    assert situation.error == ErrorCode.NONE and (situation.log_start_offset, situation.log_end_offset) == (0, 0)
    assert (situation.remote_storage_enabled, situation.compacted, situation.fetch_from_tiered_offset) == (
        facts.remote_storage_enabled, facts.compacted, facts.fetch_from_tiered_offset)


def test_only_an_empty_replica_with_a_plug_in_is_consulted_before_fetching() -> None:
    handler = PendingUploadHandler()
    fetcher = new_fetcher(2, 1, handler)
    only_send(follow_with(fetcher, log_with("F", (1, 3), hw=3), 1, FLAG_ON))  # not empty: fetches at once
    assert handler.seen == []
    kafka = new_fetcher(2, 1)  # no plug-in: Kafka's fetcher, which never asks
    assert isinstance(only_send(follow_with(kafka, MemoryLog("F"), 1, FLAG_ON)), ev.FetchRequest)


def test_an_empty_eligible_replica_starts_at_the_pending_upload_offset_with_the_remote_history() -> None:
    leader_log = log_with("L", (1, 4), (3, 6), (5, 4), hw=14)
    leader = LeaderSide(leader_log, epoch=5)
    follower = MemoryLog("F")
    handler = PendingUploadHandler()
    fetcher = new_fetcher(2, 5, handler)
    query = only_send(follow_with(fetcher, follower, 5, FLAG_ON))
    assert isinstance(query, ev.ListOffsetsRequest) and query.partitions[0].timestamp == -6
    assert fetcher.state(TP).phase is FetchPhase.RESOLVING
    out = fetcher.on_list_offsets_response(query, serve_list_offsets(leader, query, {-6: 10}), 0)
    assert out == [ev.OutOfRangeWork(TP, 5, ("aux state below", 10))]
    assert handler.seen[-1].leader_offsets[-6] == LeaderOffset(10, 3)
    epochs = (ev.EpochStart(1, 0), ev.EpochStart(3, 4))
    out = fetcher.resolve_out_of_range(TP, 5, StartAt(10, epochs, b"producers"), 0)
    assert out[0] == ev.TruncateFullyAndStartAt(TP, 10, epochs, b"producers")
    first = only_send(out).partitions[0]
    assert (first.fetch_offset, first.last_fetched_epoch) == (10, 3)  # the divergence check has its epoch
    replicate(fetcher, follower, leader, out)
    assert follower.start == 10 and follower.log_end_offset == 14
    assert follower.history() == [h for h in leader_log.history() if h[0] >= 10]


def test_a_leader_without_pending_upload_offsets_hands_unsupported_version_to_the_handler() -> None:
    handler = PendingUploadHandler()
    fetcher = new_fetcher(2, 1, handler)
    query = only_send(follow_with(fetcher, MemoryLog("F"), 1, FLAG_ON))
    refused = ev.ListOffsetsResponse(0, (ev.ListedOffset(TP, ErrorCode.UNSUPPORTED_VERSION),))
    request = only_send(fetcher.on_list_offsets_response(query, refused, 0))
    assert handler.seen[-1].leader_offsets[-6] == LeaderOffset(-1, -1, ErrorCode.UNSUPPORTED_VERSION)
    assert isinstance(request, ev.FetchRequest) and request.partitions[0].fetch_offset == 0


def test_an_empty_replica_undecided_is_consulted_again_after_the_backoff_not_fetched() -> None:
    handler = PendingUploadHandler()
    fetcher = new_fetcher(2, 1, handler)
    query = only_send(follow_with(fetcher, MemoryLog("F"), 1, FLAG_ON))
    refused = ev.ListOffsetsResponse(0, (ev.ListedOffset(TP, ErrorCode.NOT_LEADER_OR_FOLLOWER),))
    assert fetcher.on_list_offsets_response(query, refused, 5) == []  # an error ends this resolution
    assert len(handler.seen) == 1 and fetcher.state(TP).phase is FetchPhase.FETCHING
    assert fetcher.state(TP).delayed_until_ms == 1005 and "NOT_LEADER_OR_FOLLOWER" in fetcher.state(TP).reason
    assert fetcher.next_deadline_ms() == 1005 and fetcher.tick(1004) == []
    again = only_send(fetcher.tick(1005))  # not a Fetch from 0, which would fill the log
    assert isinstance(again, ev.ListOffsetsRequest) and again.partitions[0].timestamp == -6
    assert [s.error for s in handler.seen] == [ErrorCode.NONE, ErrorCode.NONE]
    # the handler defers, the work says Retry (the remote metadata is not read yet): the same again
    out = fetcher.on_list_offsets_response(again, ev.ListOffsetsResponse(0, (ev.ListedOffset(TP, 0, 10, 3),)), 1005)
    assert out == [ev.OutOfRangeWork(TP, 1, ("aux state below", 10))]
    assert fetcher.resolve_out_of_range(TP, 1, Retry("metadata not read yet"), 1010) == []
    assert fetcher.state(TP).reason == "metadata not read yet"
    third = only_send(fetcher.tick(2010))
    assert isinstance(third, ev.ListOffsetsRequest) and len(handler.seen) == 4
    # a decision ends it: TruncateTo(0) fetches from 0, and a failed fetch then does not ask again
    handler.next_step = lambda situation: TruncateTo(0)  # type: ignore[method-assign]
    fetch = only_send(fetcher.on_list_offsets_response(
        third, ev.ListOffsetsResponse(0, (ev.ListedOffset(TP, 0, 10, 3),)), 2010))
    assert isinstance(fetch, ev.FetchRequest) and fetch.partitions[0].fetch_offset == 0
    assert fetcher.on_send_failed(fetch, 2010) == []
    assert isinstance(only_send(fetcher.tick(3010)), ev.FetchRequest)
