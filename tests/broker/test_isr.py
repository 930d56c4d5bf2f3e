"""The leader's ISR tracker: follower progress, ISR shrink/expand, the high watermark, acks=all."""

from __future__ import annotations

import uuid

import pytest

from quorum.broker.isr import (
    INVALID_UPDATE_VERSION,
    OPERATION_NOT_ATTEMPTED,
    AlterPartitionResponse,
    HighWatermarkAdvanced,
    IsrConfig,
    IsrTracker,
    LeaderAndIsr,
    ProduceCompleted,
    ReplicaRefused,
    SendAlterPartition,
)
from quorum.wire.errors import ErrorCode

LAG = 30_000


def tracker(isr=(1, 2, 3), replicas=(1, 2, 3), leo=0, hw=0, now=0, **config) -> IsrTracker:
    t = IsrTracker(IsrConfig(1, broker_epoch=10, **config), uuid.UUID(int=1), 0)
    t.become_leader(LeaderAndIsr(1, 1, replicas, isr), leo, hw, now)
    return t


def hws(actions: list) -> list[int]:
    return [a.high_watermark for a in actions if isinstance(a, HighWatermarkAdvanced)]


def alter(actions: list):
    [send] = [a for a in actions if isinstance(a, SendAlterPartition)]
    return send.request


def test_an_isr_of_the_leader_alone_follows_the_log_end() -> None:
    t = tracker(isr=(1,), replicas=(1,))
    assert hws(t.on_leader_append(3, 1)) == [3]
    assert t.high_watermark == 3


def test_high_watermark_is_the_smallest_isr_end_offset_and_waits_for_every_member() -> None:
    t = tracker(leo=0)
    t.on_leader_append(10, 1)
    assert t.high_watermark == 0  # a new leader knows no follower's end offset yet
    assert hws(t.on_follower_fetch(2, 6, 0, -1, 10, 2)) == []
    assert hws(t.on_follower_fetch(3, 4, 0, -1, 10, 3)) == [4]
    assert hws(t.on_follower_fetch(3, 10, 0, -1, 10, 4)) == [6]
    assert hws(t.on_follower_fetch(2, 10, 0, -1, 10, 5)) == [10]
    assert t.on_follower_fetch(2, 10, 0, -1, 10, 6) == []


def test_isr_shrinks_after_replica_lag_time_max_and_not_before() -> None:
    t = tracker(leo=0)
    t.on_leader_append(5, 0)
    t.on_follower_fetch(2, 5, 0, -1, 5, 0)
    t.on_follower_fetch(3, 5, 0, -1, 5, 0)
    t.on_leader_append(8, 100)  # 3 never fetches again; 2 keeps up
    t.on_follower_fetch(2, 8, 0, -1, 8, 20_000)
    assert t.next_deadline_ms() == LAG + 1
    assert t.tick(LAG) == []  # caught up at 0, lag exactly 30000: still in sync
    request = alter(t.tick(LAG + 1))
    assert [r for r, _ in request.new_isr] == [1, 2] and request.partition_epoch == 1 and request.leader_epoch == 1
    assert dict(request.new_isr) == {1: 10, 2: -1}


def test_a_follower_behind_but_reaching_the_previous_fetch_log_end_stays_in_sync() -> None:
    """Kafka's lastCaughtUpTime: a fetch that reaches the leader's log end as it was at the
    previous fetch counts as caught up at the time of that previous fetch."""
    t = tracker(isr=(1, 2), replicas=(1, 2))
    leo = 0
    for now in range(0, 100_001, 10_000):
        fetch_offset = leo  # it always reaches where the leader was at its previous fetch...
        leo += 5  # ...while the leader keeps growing
        t.on_leader_append(leo, now)
        t.on_follower_fetch(2, fetch_offset, 0, -1, leo, now)
        assert t.tick(now) == []
    t2 = tracker(isr=(1, 2), replicas=(1, 2))
    t2.on_follower_fetch(2, 0, 0, -1, 0, 0)
    for now in range(10_000, 100_001, 10_000):  # always 5 behind where the leader was
        t2.on_leader_append(now // 1000 + 10, now)
        t2.on_follower_fetch(2, now // 1000 - 5, 0, -1, now // 1000 + 10, now)
        t2.tick(now)
        assert (t2.pending_isr == (1,)) is (now > LAG)


def test_shrink_pending_keeps_counting_the_old_members_for_the_high_watermark() -> None:
    t = tracker(leo=0)
    t.on_leader_append(10, 0)
    t.on_follower_fetch(2, 10, 0, -1, 10, 0)
    t.on_follower_fetch(3, 4, 0, -1, 10, 0)
    assert t.high_watermark == 4
    request = alter(t.tick(LAG + 1))
    assert t.pending_isr == (1, 2) and t.maximal_isr == {1, 2, 3}
    t.on_leader_append(12, LAG + 2)
    assert hws(t.on_follower_fetch(2, 12, 0, -1, 12, LAG + 3)) == []  # 3 still counts: HW stays at 4
    out = t.on_alter_partition_response(request, AlterPartitionResponse(0, 1, 1, 2, (1, 2)), LAG + 4)
    assert hws(out) == [12] and t.isr == (1, 2) and t.partition_epoch == 2 and t.pending_isr is None


def test_expand_needs_the_high_watermark_and_the_epoch_start_and_counts_the_new_member_while_pending() -> None:
    t = tracker(isr=(1,), leo=10, hw=10)
    t.become_leader(LeaderAndIsr(2, 2, (1, 2, 3), (1,)), 10, 10, 0)  # epoch 2 starts at 10
    assert t.epoch_start_offset == 10
    assert t.on_follower_fetch(2, 8, 0, -1, 10, 1) == []  # below the HW: not in sync
    out = t.on_follower_fetch(2, 10, 0, 5, 10, 2)
    request = alter(out)
    assert dict(request.new_isr) == {1: 10, 2: 5} and t.maximal_isr == {1, 2}
    t.on_leader_append(15, 3)
    assert t.high_watermark == 10  # the pending member holds it
    assert t.on_follower_fetch(3, 12, 0, -1, 15, 4) == []  # never caught up: it does not hold the HW
    assert hws(t.on_follower_fetch(2, 13, 0, 5, 15, 5)) == [13]
    assert t.on_follower_fetch(3, 15, 0, -1, 15, 6) == []  # caught up now, but one AlterPartition at a time
    t.on_leader_append(20, 7)
    assert hws(t.on_follower_fetch(2, 20, 0, 5, 20, 8)) == [15]  # a caught-up outsider holds the HW too
    t.on_alter_partition_response(request, AlterPartitionResponse(0, 1, 2, 3, (1, 2)), 9)
    assert t.isr == (1, 2) and t.partition_epoch == 3


def test_an_image_with_a_newer_partition_epoch_settles_a_pending_change() -> None:
    t = tracker(leo=5)
    t.on_follower_fetch(2, 5, 0, -1, 5, 0)
    request = alter(t.tick(LAG + 1))  # 3 never fetched
    t.become_leader(LeaderAndIsr(1, 2, (1, 2, 3), (1, 2)), 5, 5, LAG + 2)
    assert t.pending_isr is None and t.isr == (1, 2)
    assert t.on_alter_partition_response(request, AlterPartitionResponse(0, 1, 1, 2, (1, 2)), LAG + 3) == []
    t.become_leader(LeaderAndIsr(1, 1, (1, 2, 3), (1, 2, 3)), 5, 5, LAG + 4)  # older: ignored
    assert t.isr == (1, 2)


@pytest.mark.parametrize("error", [INVALID_UPDATE_VERSION, ErrorCode.FENCED_LEADER_EPOCH, ErrorCode.NEW_LEADER_ELECTED])
def test_alter_partition_refusals_that_mean_stale_metadata_wait_for_the_image(error: int) -> None:
    t = tracker(leo=5)
    t.on_follower_fetch(2, 5, 0, -1, 5, 0)
    request = alter(t.tick(LAG + 1))
    assert t.on_alter_partition_response(request, AlterPartitionResponse(error), LAG + 2) == []
    assert t.pending_isr == (1, 2) and t.tick(LAG * 3) == []  # nothing until a newer image
    t.become_leader(LeaderAndIsr(1, 2, (1, 2, 3), (1, 2, 3)), 5, 5, LAG * 3 + 1)
    assert t.pending_isr is None


def test_operation_not_attempted_reverts_and_other_errors_retry_the_same_request() -> None:
    t = tracker(leo=5)
    t.on_follower_fetch(2, 5, 0, -1, 5, 0)
    request = alter(t.tick(LAG + 1))
    assert t.on_alter_partition_response(request, AlterPartitionResponse(ErrorCode.UNKNOWN_SERVER_ERROR), LAG + 2) == []
    assert t.next_deadline_ms() == LAG + 102
    assert alter(t.tick(LAG + 102)) is request
    assert t.on_alter_partition_failed(request, LAG + 103) == []
    assert alter(t.tick(LAG + 203)) is request
    t.on_alter_partition_response(request, AlterPartitionResponse(OPERATION_NOT_ATTEMPTED), LAG + 204)
    assert t.pending_isr is None and t.isr == (1, 2, 3)
    assert alter(t.tick(LAG + 205)).partition_epoch == 1  # still out of sync: proposed again


def test_stale_broker_epochs_and_ineligible_brokers() -> None:
    t = tracker(isr=(1,), leo=5, hw=5)
    t.update_brokers({1: 10, 2: 7, 3: 8}, {3}, 0)
    with pytest.raises(ReplicaRefused) as refused:
        t.on_follower_fetch(2, 5, 0, 6, 5, 1)
    assert refused.value.code == ErrorCode.NOT_LEADER_OR_FOLLOWER
    with pytest.raises(ReplicaRefused):
        t.on_follower_fetch(4, 5, 0, -1, 5, 1)  # not a replica
    assert t.on_follower_fetch(3, 5, 0, 8, 5, 2) == []  # in controlled shutdown: not added
    assert alter(t.on_follower_fetch(2, 5, 0, 7, 5, 3)).new_isr == ((1, 10), (2, 7))


def test_min_insync_replicas_before_and_after_the_append() -> None:
    t = tracker(isr=(1,), min_insync_replicas=2)
    assert t.check_append(-1) == ErrorCode.NOT_ENOUGH_REPLICAS
    assert t.check_append(1) == ErrorCode.NONE
    assert tracker(isr=(1,), replicas=(1,), min_insync_replicas=2).check_append(-1) == ErrorCode.NONE  # capped at RF

    # Kafka 3 rule (the HW may move under min ISR): the shrink lets the HW through, too few replicas
    t = tracker(isr=(1, 2), replicas=(1, 2), min_insync_replicas=2, hw_requires_min_isr=False)
    t.on_follower_fetch(2, 0, 0, -1, 0, 0)
    assert t.check_append(-1) == ErrorCode.NONE
    t.on_leader_append(3, 1)
    assert t.await_replication("p1", 3, LAG * 2, 1) == []
    request = alter(t.tick(LAG + 1))
    out = t.on_alter_partition_response(request, AlterPartitionResponse(0, 1, 1, 2, (1,)), LAG + 2)
    assert ProduceCompleted("p1", ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND) in out

    # Kafka 4 (KIP-966): under min ISR the HW stands still, so the produce times out
    t = tracker(isr=(1, 2), replicas=(1, 2), min_insync_replicas=2)
    t.on_follower_fetch(2, 0, 0, -1, 0, 0)
    t.on_leader_append(3, 1)
    t.await_replication("p2", 3, LAG * 2, 1)
    request = alter(t.tick(LAG + 1))
    out = t.on_alter_partition_response(request, AlterPartitionResponse(0, 1, 1, 2, (1,)), LAG + 2)
    assert hws(out) == [] and t.high_watermark == 0
    assert t.next_deadline_ms() == LAG * 2
    assert t.tick(LAG * 2) == [ProduceCompleted("p2", ErrorCode.REQUEST_TIMED_OUT)]


def test_acks_all_completes_when_the_isr_has_the_batch_and_resigning_answers_the_rest() -> None:
    t = tracker(isr=(1, 2), replicas=(1, 2))
    t.on_follower_fetch(2, 0, 0, -1, 0, 0)
    t.on_leader_append(2, 1)
    assert t.await_replication("a", 2, 10_000, 1) == []
    t.on_leader_append(4, 2)
    assert t.await_replication("b", 4, 10_000, 2) == []
    out = t.on_follower_fetch(2, 2, 0, -1, 4, 3)
    assert out == [HighWatermarkAdvanced(2), ProduceCompleted("a", ErrorCode.NONE)]
    assert t.resign(4) == [ProduceCompleted("b", ErrorCode.NOT_LEADER_OR_FOLLOWER)]
    assert t.check_append(-1) == ErrorCode.NOT_LEADER_OR_FOLLOWER


def test_a_new_leader_epoch_resets_followers_and_keeps_the_high_watermark() -> None:
    t = tracker(leo=5)
    for r in (2, 3):
        t.on_follower_fetch(r, 5, 0, -1, 5, 0)
    assert t.high_watermark == 5
    t.on_leader_append(8, 1)
    t.become_leader(LeaderAndIsr(2, 2, (1, 2, 3), (1, 2)), 8, 5, 100)
    assert t.epoch_start_offset == 8 and t.high_watermark == 5
    # 2 (in the ISR) counts as caught up from now; 3 (out) as never: only 2 holds the HW
    assert hws(t.on_follower_fetch(2, 8, 0, -1, 8, 101)) == [8]
    assert t.replica(3).last_caught_up_ms < 0
    assert t.tick(100 + LAG) == []
