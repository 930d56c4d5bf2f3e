"""A node's side of KIP-631 snapshot turns: it writes a snapshot only in a turn it was given."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from quorum.controller.snapshot_coordinator import OwnSnapshot, SnapshotReport
from quorum.server.snapshot_turns import SnapshotTurns, degraded_min_bytes

FETCH_TIMEOUT = 2000


def replayer(due: bool = True, writing: bool = False, latest: int | None = None, since: int = 5000):
    snapshots = SimpleNamespace(latest_snapshot=lambda: None if latest is None else SimpleNamespace(offset=latest))
    return SimpleNamespace(snapshots=snapshots, bytes_since_snapshot=since, snapshot_due=due,
                           snapshot_in_progress=writing)


def turns(node_id: int, voters=(1, 2, 3), **state) -> SnapshotTurns:
    return SnapshotTurns(node_id, voters, FETCH_TIMEOUT, 100_000, replayer(**state))  # type: ignore[arg-type]


def test_report_says_what_the_replayer_knows() -> None:
    assert turns(2, latest=40, since=7, due=False, writing=True).report() == SnapshotReport(40, 7, False, True)
    assert turns(2).report().latest_snapshot_offset == -1


def test_a_follower_snapshots_only_while_its_last_grant_holds() -> None:
    follower = turns(2)
    assert follower.decide(None, 0) is OwnSnapshot.WAIT, "no turn given yet"
    follower.on_fetch_answer(True, 100)
    assert follower.decide(None, 150) is OwnSnapshot.SNAPSHOT
    assert follower.decide(None, 100 + FETCH_TIMEOUT + 1) is OwnSnapshot.WAIT, "a grant not renewed lapses"
    follower.on_fetch_answer(False, 200)
    assert follower.decide(None, 250) is OwnSnapshot.WAIT


def test_the_leader_grants_by_the_rules_and_forgets_them_with_its_epoch() -> None:
    leader = turns(1, due=False)
    idle = SnapshotReport(-1, 0, False, False)
    due = SnapshotReport(-1, 5000, True, False)
    leader.answer_fetch(3, idle, 7, 0)
    assert leader.answer_fetch(2, due, 7, 10)
    assert not leader.answer_fetch(3, due, 7, 20), "one voter at a time"
    assert not leader.answer_fetch(3, due, None, 30), "a node that does not lead grants nothing"
    assert not leader.answer_fetch(3, None, 7, 40), "nor to a replica that reports nothing"
    leader.answer_fetch(2, idle, 8, 50)
    assert leader.answer_fetch(3, due, 8, 60), "a new leadership starts from nothing"


def test_the_leader_resigns_once_then_snapshots_in_place_if_elected_again() -> None:
    leader = turns(1)
    idle = SnapshotReport(-1, 0, False, False)
    for follower in (2, 3):
        leader.answer_fetch(follower, idle, 7, 0)
    assert leader.decide(7, 10) is OwnSnapshot.RESIGN
    for follower in (2, 3):
        leader.answer_fetch(follower, idle, 9, 1000)
    assert leader.decide(9, 1010) is OwnSnapshot.SNAPSHOT


def test_degraded_threshold_setting() -> None:
    assert degraded_min_bytes({}, 1000) == 4000
    assert degraded_min_bytes({"metadata.log.max.record.bytes.between.snapshots.degraded": "50"}, 1000) == 50
    with pytest.raises(ValueError, match="degraded"):
        degraded_min_bytes({"metadata.log.max.record.bytes.between.snapshots.degraded": "lots"}, 1000)
