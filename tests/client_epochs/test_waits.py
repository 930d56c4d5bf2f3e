"""What a waiting replicator and a waiting wrapped consumer say they wait for (no cluster needed)."""

from __future__ import annotations

import logging
import time
from types import SimpleNamespace

import pytest

from client_epochs.connection import BrokerError
from client_epochs.consumer_guard import EpochGuard, PartitionsWatch
from client_epochs.metadata_client import MetadataUnavailableError, StaleMetadataError
from client_epochs.model import PartitionMetadata, TopicPartition
from client_epochs.offset_fetch import OffsetFetcher, OffsetFetchError
from client_epochs.waits import NoPartitionsWatch, Said, Wait, WaitTimer, diagnose
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


# --- a wrapped consumer without partitions: when it looks why, and what it says -----------------------------


def test_no_partitions_is_looked_at_after_the_grace_then_at_a_slow_pace_and_counted_from_the_start():
    watch = NoPartitionsWatch("orders-readers", after_s=5.0, interval_s=15.0)
    assert not watch.due(False, 100.0)
    assert not watch.due(False, 104.0)
    assert watch.due(False, 105.0)
    said = watch.found(Wait('group coordinator for "orders-readers" unavailable (COORDINATOR_NOT_AVAILABLE)'), 106.0)
    assert said == Said('waiting: group coordinator for "orders-readers" unavailable (COORDINATOR_NOT_AVAILABLE) '
                        'for 6 s', warning=True)
    assert not any(watch.due(False, t) for t in (107.0, 115.0, 120.9))  # every poll asks: one look per interval
    assert watch.due(False, 121.0)
    assert watch.found(None, 121.0) is None and watch.line(121.0) is None
    assert watch.due(False, 136.0)
    assert watch.found(Wait("a leader for partition(s) orders-0 (LEADER_NOT_AVAILABLE)"), 136.0).text == (
        "waiting: a leader for partition(s) orders-0 (LEADER_NOT_AVAILABLE) for 36 s")
    assert watch.assigned(140.0) == Said('group "orders-readers" assigned partitions after 40 s without', False)
    assert watch.line(141.0) is None and watch.waited(141.0) == 0.0
    assert not watch.due(True, 200.0)
    assert not watch.due(False, 200.0) and watch.due(False, 205.0)  # a new spell without partitions: a new grace


def test_a_group_still_assigning_is_a_note_and_a_quick_assignment_says_nothing():
    watch = NoPartitionsWatch("g", after_s=1.0)
    assert watch.assigned(0.5) is None
    watch.due(False, 0.0)
    assert watch.due(False, 1.0)
    assert watch.found(Wait('group "g" to assign partitions', fault=False), 1.0) == Said(
        'waiting: group "g" to assign partitions for 1 s', warning=False)
    watch.reset()
    assert watch.assigned(2.0) is None


def test_no_partitions_watch_refuses_intervals_that_are_not_positive():
    with pytest.raises(ValueError, match="after_s and interval_s must be positive"):
        NoPartitionsWatch("g", after_s=0.0)


class _Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_a_wrapped_consumer_without_a_coordinator_warns_naming_the_group_at_a_slow_pace(caplog, monkeypatch):
    clock = _Clock()
    monkeypatch.setattr("client_epochs.consumer_guard.time.monotonic", clock)
    offsets = _Offsets(ErrorCode.COORDINATOR_NOT_AVAILABLE)
    watch = PartitionsWatch("127.0.0.1:9092", "readers", after_s=5.0, offsets=offsets,  # type: ignore[arg-type]
                            metadata=_Metadata({ORDERS_0: 101}))  # type: ignore[arg-type]
    with caplog.at_level(logging.INFO, logger="client_epochs.consumer_guard"):
        for _ in range(60):  # a minute of polls, one a second
            watch.check(["orders", "^pattern.*"], assigned=False)
            clock.now += 1.0
        reason = watch.reason
        offsets.code = None
        watch.check(["orders"], assigned=True)
    lines = [(r.levelno, r.getMessage()) for r in caplog.records]
    coordinator = 'group coordinator for "readers" unavailable (COORDINATOR_NOT_AVAILABLE)'
    warned = [(logging.WARNING, f'consumer of group "readers" has no partitions, waiting: {coordinator} for {n} s')
              for n in (5, 20, 35, 50)]
    assert lines == [*warned, (logging.INFO, 'group "readers" assigned partitions after 60 s without')]
    assert reason == f"waiting: {coordinator} for 60 s"
    assert watch.reason is None


def test_a_probe_cut_short_by_its_deadline_reports_the_coordinators_last_answer(monkeypatch):
    """Every try answered COORDINATOR_NOT_AVAILABLE; the last one still waited for its answer when the deadline
    came (a busy machine): the error is the cluster's answer, not "no answer in time"."""
    fetcher = OffsetFetcher("127.0.0.1:1", retry_backoff_s=0.01)
    tries = []

    def fetch_once(group, wanted, deadline):
        tries.append(group)
        if len(tries) < 3:
            raise OffsetFetchError("127.0.0.1:1", f"FindCoordinator for group {group!r}",
                                   ErrorCode.COORDINATOR_NOT_AVAILABLE)
        time.sleep(max(0.0, deadline - time.monotonic()))
        raise BrokerError("127.0.0.1:1", "FindCoordinator v3 got no answer in time")

    monkeypatch.setattr(fetcher, "_fetch_once", fetch_once)
    wait = diagnose(_Metadata({ORDERS_0: 101}), fetcher, "mirror", ["orders"], [], {}, copying=False)
    assert wait == Wait('group coordinator for "mirror" unavailable (COORDINATOR_NOT_AVAILABLE)')
    assert len(tries) == 3
