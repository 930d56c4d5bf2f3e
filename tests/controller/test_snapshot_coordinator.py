"""KIP-631: the active controller lets one replica snapshot at a time, and resigns for its own."""

from __future__ import annotations

from quorum.controller.snapshot_coordinator import OwnSnapshot, SnapshotCoordinator, SnapshotReport

LEADER, A, B = 1, 2, 3
BROKER_X, BROKER_Y = 101, 102
FETCH_TIMEOUT = 2000
DEGRADED = 1000

DUE = SnapshotReport(latest_snapshot_offset=-1, bytes_since_snapshot=500, due=True, in_progress=False)
IDLE = SnapshotReport(latest_snapshot_offset=-1, bytes_since_snapshot=10, due=False, in_progress=False)
WRITING = SnapshotReport(latest_snapshot_offset=-1, bytes_since_snapshot=0, due=False, in_progress=True)
DONE = SnapshotReport(latest_snapshot_offset=900, bytes_since_snapshot=0, due=False, in_progress=False)


def coordinator(**kwargs: object) -> SnapshotCoordinator:
    return SnapshotCoordinator(LEADER, (LEADER, A, B), FETCH_TIMEOUT, DEGRADED, **kwargs)  # type: ignore[arg-type]


def healthy(c: SnapshotCoordinator, now: int = 0) -> None:
    c.on_report(A, IDLE, now)
    c.on_report(B, IDLE, now)


def test_one_voter_at_a_time_and_the_next_once_the_first_is_done() -> None:
    c = coordinator()
    healthy(c)
    assert c.on_report(A, DUE, 10)
    assert not c.on_report(B, DUE, 20), "A holds the voters' turn"
    assert c.on_report(A, DUE, 30), "a grant repeats to its holder until it starts"
    assert c.on_report(A, WRITING, 40)
    assert not c.on_report(B, DUE, 50)
    assert not c.on_report(A, DONE, 60), "a finished snapshot gives the turn back"
    assert c.on_report(B, DUE, 70)
    assert c.snapshotting(70) == {"voters": B}


def test_a_voter_that_is_unavailable_holds_back_the_others() -> None:
    c = coordinator()
    c.on_report(A, IDLE, 0)  # B never heard from
    assert not c.on_report(A, DUE, 10), "losing A now would leave the leader alone with a dead B"
    past_degraded = SnapshotReport(-1, DEGRADED, True, False)
    assert c.on_report(A, past_degraded, 20), "past the degraded threshold the log must still shrink"


def test_a_silent_voter_becomes_unavailable_after_the_fetch_timeout() -> None:
    c = coordinator()
    healthy(c, now=0)
    assert not c.on_report(A, DUE, FETCH_TIMEOUT + 1), "B went quiet"
    c.on_report(B, IDLE, FETCH_TIMEOUT + 2)
    assert c.on_report(A, DUE, FETCH_TIMEOUT + 3)


def test_a_grant_lapses_when_its_holder_goes_quiet_or_never_starts() -> None:
    c = coordinator()
    healthy(c)
    assert c.on_report(A, DUE, 10)
    c.on_report(B, DUE, 20)
    assert c.on_report(B, DUE, 10 + 2 * FETCH_TIMEOUT + 1) is False, "A's silence makes it unavailable"
    c.on_report(A, IDLE, 10 + 2 * FETCH_TIMEOUT + 2)
    assert c.on_report(B, DUE, 10 + 2 * FETCH_TIMEOUT + 3)


def test_a_grant_not_started_in_time_goes_to_another() -> None:
    c = coordinator(start_timeout_ms=100)
    healthy(c)
    assert c.on_report(A, DUE, 10)
    assert not c.on_report(B, DUE, 50)
    c.on_report(A, DUE, 105)  # still fetching, never started
    assert c.on_report(B, DUE, 120)


def test_a_voter_that_stops_being_due_gives_its_turn_back() -> None:
    c = coordinator()
    healthy(c)
    assert c.on_report(A, DUE, 10)
    c.on_report(A, IDLE, 20)  # installed a fetched snapshot, say
    assert c.on_report(B, DUE, 30)


def test_the_active_controller_resigns_for_its_own_snapshot() -> None:
    c = coordinator()
    healthy(c)
    assert c.own_turn(DUE, 10) is OwnSnapshot.RESIGN
    assert c.own_turn(IDLE, 20) is OwnSnapshot.WAIT


def test_the_active_controller_waits_while_a_follower_snapshots() -> None:
    c = coordinator()
    healthy(c)
    assert c.on_report(A, DUE, 10)
    assert c.own_turn(DUE, 20) is OwnSnapshot.WAIT


def test_the_only_voter_snapshots_in_place() -> None:
    alone = SnapshotCoordinator(LEADER, (LEADER,), FETCH_TIMEOUT, DEGRADED)
    assert alone.own_turn(DUE, 0) is OwnSnapshot.SNAPSHOT
    assert alone.own_turn(WRITING, 10) is OwnSnapshot.WAIT
    assert alone.own_turn(DONE, 20) is OwnSnapshot.WAIT
    assert alone.snapshotting(20) == {}


def test_re_elected_soon_after_resigning_it_snapshots_in_place() -> None:
    c = coordinator(resigned_recently=True)
    healthy(c)
    assert c.own_turn(DUE, 10) is OwnSnapshot.SNAPSHOT
    assert not c.on_report(A, DUE, 20), "the leader's own snapshot holds the voters' turn"


def test_with_every_follower_down_the_leader_snapshots_in_place_only_when_degraded_threshold_met() -> None:
    c = coordinator()
    assert c.own_turn(DUE, 0) is OwnSnapshot.WAIT, "2 of 3 voters down: no majority to spare"
    big = SnapshotReport(-1, DEGRADED, True, False)
    assert c.own_turn(big, 10) is OwnSnapshot.WAIT, "and no majority available at all"


def test_observers_take_turns_in_their_own_lane() -> None:
    c = coordinator()
    healthy(c)
    assert c.on_report(A, DUE, 10)
    assert c.on_report(BROKER_X, DUE, 10), "a broker cannot cost the quorum its majority"
    assert not c.on_report(BROKER_Y, DUE, 20)
    c.on_report(BROKER_X, WRITING, 30)
    c.on_report(BROKER_X, DONE, 40)
    assert c.on_report(BROKER_Y, DUE, 50)
    assert c.snapshotting(50) == {"voters": A, "observers": BROKER_Y}
