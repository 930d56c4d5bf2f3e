"""What a waiting replicator and a waiting wrapped consumer say they wait for (no cluster needed)."""

from __future__ import annotations

import logging
from types import SimpleNamespace

from client_epochs.consumer_guard import EpochGuard
from client_epochs.metadata_client import MetadataUnavailableError, StaleMetadataError
from client_epochs.mirror_waits import Wait, WaitTimer, diagnose
from client_epochs.model import PartitionMetadata, TopicPartition
from client_epochs.offset_fetch import OffsetFetchError
from quorum.wire.errors import ErrorCode
from quorum.wire.internal_metadata import InternalMetadata

COORDINATOR = Wait('group coordinator for "client-epochs-mirror" unavailable (COORDINATOR_NOT_AVAILABLE)')


def test_the_status_line_names_the_wait_and_how_long_it_lasts():
    timer = WaitTimer()
    timer.observe(None, 100.0)
    assert timer.line(100.0) is None
    timer.observe(COORDINATOR, 100.0)
    timer.observe(COORDINATOR, 145.0)
    assert timer.line(145.0) == ('waiting: group coordinator for "client-epochs-mirror" unavailable '
                                 '(COORDINATOR_NOT_AVAILABLE) for 45 s')


def test_a_fault_gives_up_after_the_limit_and_a_recovery_starts_the_count_again():
    timer = WaitTimer()
    timer.observe(COORDINATOR, 0.0)
    assert timer.expired(59.0, 60.0) is None
    timer.observe(None, 59.5)
    timer.observe(COORDINATOR, 60.0)
    assert timer.expired(100.0, 60.0) is None
    leaderless = Wait("a leader for partition(s) orders-1 (LEADER_NOT_AVAILABLE)")
    timer.observe(leaderless, 120.0)  # one outage that changed its face: the count goes on
    assert timer.expired(120.0, 60.0) == ("gave up after waiting 60 s for a leader for partition(s) orders-1 "
                                          "(LEADER_NOT_AVAILABLE)")


def test_a_group_still_assigning_never_gives_up():
    timer = WaitTimer()
    joining = Wait('group "client-epochs-mirror" to assign partitions', fault=False)
    timer.observe(joining, 0.0)
    timer.observe(joining, 1000.0)
    assert timer.line(1000.0) == 'waiting: group "client-epochs-mirror" to assign partitions for 1000 s'
    assert timer.expired(1000.0, 60.0) is None


class _Unavailable:
    """A metadata client whose brokers never answer."""

    def refresh_until_current(self, *_args, **_kwargs):
        raise MetadataUnavailableError([])


def test_a_wrapped_consumer_logs_the_partition_and_epochs_it_waits_for_at_a_slow_pace(caplog):
    guard = EpochGuard(_Unavailable(), log_bounds=object())  # type: ignore[arg-type]
    guard.expect({TopicPartition("orders", 2): InternalMetadata(7, 3)})
    with caplog.at_level(logging.WARNING, logger="client_epochs.consumer_guard"):
        for _ in range(5):  # every poll settles: one line, not five
            assert guard.settle(timeout=0.01).ready == ()
    lines = [r.getMessage() for r in caplog.records]
    assert len(lines) == 1, lines
    assert "orders-2 (topic_epoch 7, leader_epoch 3)" in lines[0] and "no broker answered Metadata" in lines[0]


# --- diagnose(): what the source says, with stand-ins for its clients --------------------------------------

ORDERS_0, ORDERS_1 = TopicPartition("orders", 0), TopicPartition("orders", 1)


class _Metadata:
    """A metadata client answering with these leaders, or raising `error`."""

    def __init__(self, leaders: dict[TopicPartition, int], error: Exception | None = None) -> None:
        self.leaders, self.error, self.asked = leaders, error, 0

    def refresh_until_current(self, topics, floors=None, timeout=0.0):
        self.asked += 1
        if self.error is not None:
            raise self.error
        return SimpleNamespace(partitions={tp: PartitionMetadata(leader, 1, None, 1)
                                           for tp, leader in self.leaders.items()})


class _Offsets:
    def __init__(self, code: int | None = None) -> None:
        self.code = code

    def fetch(self, group, partitions, timeout=0.0):
        if self.code is not None:
            raise OffsetFetchError("127.0.0.1:9092", f"FindCoordinator for group {group!r}", self.code)
        return {}


def test_no_partitions_and_no_coordinator():
    wait = diagnose(_Metadata({ORDERS_0: 101}), _Offsets(ErrorCode.COORDINATOR_NOT_AVAILABLE), "mirror", ["orders"],
                    [], {}, copying=False)
    assert wait == Wait('group coordinator for "mirror" unavailable (COORDINATOR_NOT_AVAILABLE)')


def test_no_partitions_with_a_coordinator_and_leaders_is_a_group_still_assigning():
    wait = diagnose(_Metadata({ORDERS_0: 101}), _Offsets(), "mirror", ["orders"], [], {}, copying=False)
    assert wait == Wait('group "mirror" to assign partitions', fault=False)


def test_an_idle_assigned_partition_without_a_leader():
    wait = diagnose(_Metadata({ORDERS_0: 101, ORDERS_1: -1}), _Offsets(), "mirror", ["orders"],
                    [ORDERS_0, ORDERS_1], {}, copying=False)
    assert wait == Wait("a leader for partition(s) orders-1 (LEADER_NOT_AVAILABLE)")


def test_copying_asks_nothing():
    metadata = _Metadata({ORDERS_0: -1})
    assert diagnose(metadata, _Offsets(), "mirror", ["orders"], [ORDERS_0], {}, copying=True) is None
    assert metadata.asked == 0


def test_metadata_refused_as_stale_names_the_partition_and_its_epochs():
    stale = StaleMetadataError(SimpleNamespace(describe=lambda: "orders-0: leader_epoch 2 < 3"), "127.0.0.1:9093", 4)
    wait = diagnose(_Metadata({}, stale), _Offsets(), "mirror", ["orders"], [ORDERS_0],
                    {ORDERS_0: InternalMetadata(7, 3)}, copying=False)
    assert wait is not None and wait.fault
    assert wait.reason == ("metadata as new as the committed epochs (orders-0: topic_epoch 7, leader_epoch 3): "
                           "refused as stale 4 time(s), last from broker 127.0.0.1:9093: orders-0: leader_epoch 2 < 3")
