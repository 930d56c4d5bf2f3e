"""What a waiting replicator and a waiting wrapped consumer say they wait for (no cluster needed)."""

from __future__ import annotations

import logging

from client_epochs.consumer_guard import EpochGuard
from client_epochs.metadata_client import MetadataUnavailableError
from client_epochs.mirror_waits import Wait, WaitTimer
from client_epochs.model import TopicPartition
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
