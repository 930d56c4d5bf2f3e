"""The replicator's sans-IO bookkeeping (client_epochs.mirror.progress), fed by hand: provenance
headers, the offset it may commit as the target acknowledges copies in any order, and where a
newly assigned partition resumes given its commit and the target's last copy."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from client_epochs.mirror.progress import (
    EPOCHS_HEADER,
    PROVENANCE_HEADER,
    CopiedRecord,
    MirrorCounts,
    PartitionProgress,
    Provenance,
    ProvenanceError,
    copy_headers,
    decide_resume,
    last_copied,
    newest,
    read_provenance,
    total_lag,
)
from client_epochs.model import TopicPartition
from quorum.wire.internal_metadata import InternalMetadata

TP = TopicPartition("orders.eu-1_x", 2)
EPOCHS = InternalMetadata(topic_epoch=4, leader_epoch=7)


def copy_of(offset: int, tp: TopicPartition = TP, epochs: InternalMetadata | None = EPOCHS) -> list:
    return copy_headers([("trace", b"abc")], Provenance(tp.topic, tp.partition, offset), epochs)


# --- provenance ---------------------------------------------------------------------------------------


@given(topic=st.from_regex(r"[a-zA-Z0-9._-]{1,249}", fullmatch=True), partition=st.integers(0, 2**31 - 1),
       offset=st.integers(0, 2**63 - 1))
def test_provenance_round_trips_for_every_legal_topic_name(topic, partition, offset):
    source = Provenance(topic, partition, offset)
    assert source.encode() == f"{topic}/{partition}/{offset}".encode()
    assert Provenance.parse(source.encode()) == source
    assert Provenance.parse(source.encode().decode()) == source


@pytest.mark.parametrize("garbage", [None, b"", b"orders", b"orders/1", b"/1/2", b"orders/-1/2", b"orders/1/-2",
                                     b"orders/a/2", b"orders/1/2.0", b"\xff\xfe/1/2", 42])
def test_unreadable_provenance_is_an_error_quoting_the_value(garbage):
    with pytest.raises(ProvenanceError) as caught:
        Provenance.parse(garbage)
    assert PROVENANCE_HEADER in str(caught.value) and repr(garbage) in str(caught.value)


def test_copy_headers_keep_the_sources_and_replace_an_earlier_provenance():
    mirrored_before = [("a", b"1"), (PROVENANCE_HEADER, b"upstream/0/5"), ("b", None), (EPOCHS_HEADER, b"{}")]
    headers = copy_headers(mirrored_before, Provenance("orders", 1, 9), EPOCHS)
    assert headers == [("a", b"1"), ("b", None), (PROVENANCE_HEADER, b"orders/1/9"),
                       (EPOCHS_HEADER, EPOCHS.to_json().encode())]
    assert copy_headers(None, Provenance("orders", 1, 9), None) == [(PROVENANCE_HEADER, b"orders/1/9")]


def test_read_provenance():
    assert read_provenance(None) is None
    assert read_provenance([("trace", b"x")]) is None  # another writer's record
    assert read_provenance(copy_of(12)) == CopiedRecord(Provenance(TP.topic, TP.partition, 12), EPOCHS)
    # Unreadable epochs only weaken the metadata wait; an unreadable provenance is an error.
    assert read_provenance([(PROVENANCE_HEADER, b"t/0/1"), (EPOCHS_HEADER, b"not json")]).epochs is None
    assert read_provenance([(PROVENANCE_HEADER, "t/0/1"), (EPOCHS_HEADER, EPOCHS.to_json())]).epochs == EPOCHS
    with pytest.raises(ProvenanceError):
        read_provenance([(PROVENANCE_HEADER, b"t/zero/1")])


def test_last_copied_finds_the_partitions_highest_copy_among_other_writers():
    other = TopicPartition(TP.topic, TP.partition + 1)
    tail = [copy_of(40), [("foreign", b"1")], None, copy_of(41), copy_of(99, other), [("foreign", b"2")]]
    assert last_copied(tail, TP) == CopiedRecord(Provenance(TP.topic, TP.partition, 41), EPOCHS)
    assert last_copied(tail, TopicPartition("elsewhere", 0)) is None
    assert last_copied([], TP) is None


# --- resume decisions ---------------------------------------------------------------------------------


def copied(offset: int, epochs: InternalMetadata | None = EPOCHS) -> CopiedRecord:
    return CopiedRecord(Provenance(TP.topic, TP.partition, offset), epochs)


def test_resume_skips_what_the_target_holds_beyond_the_commit_waiting_for_the_newer_epochs():
    older = InternalMetadata(4, 6)
    resume = decide_resume(TP, committed=100, committed_epochs=older, copied=copied(129))
    assert (resume.seek_to, resume.skipped, resume.floor) == (130, 30, EPOCHS)
    assert "100..129" in resume.note and str(TP) in resume.note
    # The commit's epochs win when they are the newer ones (or the copy carries none).
    newer = InternalMetadata(5, 0)
    assert decide_resume(TP, 100, newer, copied(129)).floor == newer
    assert decide_resume(TP, 100, None, copied(129, None)).floor is None


def test_resume_from_the_commit_when_the_target_is_level_with_it_or_has_nothing():
    for copy in (copied(99), None):
        resume = decide_resume(TP, committed=100, committed_epochs=EPOCHS, copied=copy)
        assert (resume.seek_to, resume.skipped, resume.floor) == (None, 0, None)


def test_a_target_behind_the_commit_is_reported_and_never_rewound_to():
    resume = decide_resume(TP, committed=100, committed_epochs=EPOCHS, copied=copied(49))
    assert (resume.seek_to, resume.skipped) == (None, 0)
    assert "not rewinding" in resume.note and "49" in resume.note


def test_without_a_commit_the_skip_counts_from_the_log_start():
    resume = decide_resume(TP, committed=None, committed_epochs=None, copied=copied(9), source_start=3)
    assert (resume.seek_to, resume.skipped, resume.floor) == (10, 7, EPOCHS)
    assert decide_resume(TP, None, None, None, source_start=3).seek_to is None


def test_newest_orders_epochs_as_kip_232_does():
    assert newest(None, None) is None
    assert newest(InternalMetadata(3, 9), InternalMetadata(4, 0), None) == InternalMetadata(4, 0)
    assert newest(InternalMetadata(4, 1), InternalMetadata(4, 2)) == InternalMetadata(4, 2)


# --- acknowledged offsets -----------------------------------------------------------------------------


def test_commit_moves_over_contiguous_acknowledgements_only():
    progress = PartitionProgress.resumed(10, decide_resume(TP, 10, None, None))
    assert [progress.admit(o) for o in (10, 11, 12, 13)] == ["copy"] * 4
    assert progress.to_commit() is None and progress.in_flight == 4
    progress.acknowledged(12, leader_epoch=3)  # out of order: 10 and 11 are still in flight
    assert progress.to_commit() is None
    progress.acknowledged(10, leader_epoch=3)
    assert progress.to_commit() == (11, 3)
    progress.acknowledged(11, leader_epoch=4)
    assert progress.to_commit() == (13, 3)  # 12 was read under epoch 3
    progress.committed = 13
    assert progress.to_commit() is None
    progress.acknowledged(13, leader_epoch=4)
    assert progress.to_commit() == (14, 4) and progress.in_flight == 0


def test_gaps_in_source_offsets_do_not_hold_the_commit_back():
    progress = PartitionProgress()  # nothing committed: starts with the first record
    for offset in (5, 8, 9):  # compacted away or transaction markers in between
        assert progress.admit(offset) == "copy"
    for offset in (9, 5, 8):
        progress.acknowledged(offset)
    assert progress.to_commit() == (10, None)


def test_a_failed_delivery_stops_commits_before_it_for_good():
    progress = PartitionProgress()
    for offset in range(4):
        progress.admit(offset)
    progress.acknowledged(0)
    progress.failed(1, "Local: Message timed out")
    progress.acknowledged(2)
    progress.acknowledged(3)
    assert progress.to_commit() == (1, None)
    assert progress.failure == "offset 1: Local: Message timed out"
    progress.failed(3, "later")
    assert progress.failure == "offset 1: Local: Message timed out"


def test_records_below_the_position_are_never_copied_again():
    resume = decide_resume(TP, 100, None, copied(129))
    progress = PartitionProgress.resumed(100, resume)
    assert progress.to_commit() == (130, None)  # the skip itself is worth committing
    assert progress.admit(100) == "skipped"  # fetched from before the resume seek: counted already
    assert progress.admit(129) == "skipped"
    assert progress.admit(99) == "rewound"  # below the commit: the consumer went back
    assert progress.admit(130) == "copy"
    assert progress.admit(130) == "rewound"  # delivered twice: never copied twice
    assert progress.position == 131


def test_lag_from_the_high_watermark():
    progress = PartitionProgress.resumed(10, decide_resume(TP, 10, None, None))
    assert progress.lag(25) == 15
    assert progress.lag(None) is None and progress.lag(-1001) is None
    assert PartitionProgress().lag(25) is None  # no position yet, no log start known


def test_a_partition_before_its_first_record_lags_from_the_log_start_or_is_unknown():
    fresh = PartitionProgress()  # nothing committed: the consumer starts at the log start
    assert fresh.lag(12, 0) == 12 and fresh.lag(30, 18) == 12
    assert fresh.lag(0, 0) == 0  # fetched, empty: caught up
    assert fresh.lag(-1001, -1001) is None and fresh.lag(None, None) is None  # never fetched: unknown


def test_the_flows_lag_is_unknown_while_any_partition_is():
    # One partition assigned and never fetched, the others caught up: not 0.
    assert total_lag([0, 0, 0, 0, None]) is None
    assert total_lag([0, 3, 4]) == 7
    assert total_lag([]) is None


# --- figures ------------------------------------------------------------------------------------------


def test_status_line_and_summary_name_every_figure():
    counts = MirrorCounts(stale_metadata_refused=3, resets=1, lag=None, in_flight=2, assigned=2)
    counts.of(TopicPartition("orders", 0)).replicated = 120
    counts.of(TopicPartition("orders", 1)).replicated = 80
    counts.of(TopicPartition("orders", 1)).skipped_already_copied = 7
    counts.of(TopicPartition("orders", 1)).committed = 95
    assert counts.status_line() == (
        "client-epochs-mirror status: replicated=200 skipped_already_copied=7 stale_metadata_refused=3 resets=1 "
        "rewind_refused=0 lag=? in_flight=2 partitions=2")
    summary = counts.summary("SIGTERM").splitlines()
    assert summary[0] == "client-epochs-mirror summary (SIGTERM)"
    assert summary[1].split() == ["partition", "replicated", "skipped_already_copied", "rewind_refused", "committed"]
    assert summary[2].split() == ["orders-0", "120", "0", "0", "-"]
    assert summary[3].split() == ["orders-1", "80", "7", "0", "95"]
    assert summary[4].split() == ["total", "200", "7", "0"]
    assert [line.split() for line in summary[5:]] == [["stale_metadata_refused", "3"], ["resets", "1"], ["lag", "?"]]
