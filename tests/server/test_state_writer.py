"""quorum-state writes (quorum.server.state_writer): a new epoch or vote is durable before
`persist` returns; a state that only names a new leader is written LATER_S after, unless a newer
state is written first, and only the last of several; the file never goes back to an older state."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Awaitable
from pathlib import Path

import pytest

from quorum.log.quorum_state import QuorumState, read_quorum_state
from quorum.server import state_writer
from quorum.server.state_writer import QuorumStateWriter
from tests.support.async_waits import DEADLINE_S, until

LATER_S = 0.02


class RecordedWrites:
    """`write_quorum_state`, recording each state written; one state can be held at a gate."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.written: list[tuple[int, int, int]] = []
        self.hold_leader: int | None = None
        self.gate = threading.Event()
        self.holding = threading.Event()
        real = state_writer.write_quorum_state

        def write(path: Path, state: QuorumState) -> None:
            if state.leader_id == self.hold_leader:
                self.holding.set()
                if not self.gate.wait(DEADLINE_S):
                    raise AssertionError("the test never opened the gate")
            real(path, state)
            self.written.append((state.leader_epoch, state.voted_id, state.leader_id))

        monkeypatch.setattr(state_writer, "write_quorum_state", write)

    async def held_back(self, work: Awaitable[None], what: str) -> None:
        """Start `work` while the held write is on disk: it must not finish (nor write beside it)
        until the gate opens; then it must."""
        await until(self.holding.is_set, "the held write started", DEADLINE_S)
        task = asyncio.ensure_future(work)
        await asyncio.sleep(0.05)
        assert not task.done(), what
        self.gate.set()
        await asyncio.wait_for(task, DEADLINE_S)


def stored(path: Path) -> tuple[int, int, int]:
    state = read_quorum_state(path)
    assert state is not None
    return state.leader_epoch, state.voted_id, state.leader_id


def test_a_vote_is_durable_on_return_and_a_leader_alone_is_written_a_moment_later(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    writes = RecordedWrites(monkeypatch)
    path = tmp_path / "quorum-state"

    async def test() -> None:
        writer = QuorumStateWriter(path, None, failed=pytest.fail, later_s=LATER_S)
        await writer.persist(QuorumState(5, -1, 2))  # a vote: on disk when persist returns
        assert stored(path) == (5, 2, -1)
        await writer.persist(QuorumState(5, 2, 2))  # the leader's id alone: not yet
        assert stored(path) == (5, 2, -1)
        await until(lambda: len(writes.written) == 2, "the leader's id written in the background", DEADLINE_S)
        assert writes.written == [(5, 2, -1), (5, 2, 2)] and stored(path) == (5, 2, 2)
    asyncio.run(test())


def test_only_the_last_leader_alone_is_written_and_none_a_newer_vote_supersedes(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A handover's states: the resigned leader's "no leader", then its vote for the successor
    (durable), then the successor as leader. The first never reaches the disk."""
    writes = RecordedWrites(monkeypatch)
    path = tmp_path / "quorum-state"

    async def test() -> None:
        writer = QuorumStateWriter(path, (4, 1), failed=pytest.fail, later_s=LATER_S)
        await writer.persist(QuorumState(4, -1, 1))  # resigned: no leader, same vote
        await writer.persist(QuorumState(5, -1, 2))  # a vote in the next epoch: durable, supersedes it
        await writer.persist(QuorumState(5, 3, 2))  # leader 3 ...
        await writer.persist(QuorumState(5, 2, 2))  # ... no, 2: only this one is written
        await until(lambda: len(writes.written) == 2, "the last leader's id written", DEADLINE_S)
        await asyncio.sleep(3 * LATER_S)  # nothing else comes
        assert writes.written == [(5, 2, -1), (5, 2, 2)] and stored(path) == (5, 2, 2)
    asyncio.run(test())


def test_a_vote_waits_for_a_background_write_under_way_and_the_file_never_goes_back(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    writes = RecordedWrites(monkeypatch)
    writes.hold_leader = 7
    path = tmp_path / "quorum-state"

    async def test() -> None:
        writer = QuorumStateWriter(path, (6, 7), failed=pytest.fail, later_s=0)
        await writer.persist(QuorumState(6, 7, 7))  # the leader's id alone, held at the gate once started
        await writes.held_back(writer.persist(QuorumState(7, -1, 1)),
                               "a vote was written beside (or before) an older state's write")
        assert writes.written == [(6, 7, 7), (7, 1, -1)]
        assert stored(path) == (7, 1, -1)
    asyncio.run(test())


def test_flush_writes_the_waiting_state_at_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A stopping node writes what waits, rather than losing its leader's id for nothing."""
    writes = RecordedWrites(monkeypatch)
    path = tmp_path / "quorum-state"

    async def test() -> None:
        writer = QuorumStateWriter(path, (3, 1), failed=pytest.fail, later_s=60)
        await writer.persist(QuorumState(3, 1, 1))
        assert writes.written == []
        await writer.flush()
        assert stored(path) == (3, 1, 1)
    asyncio.run(test())


def test_a_failed_background_write_is_reported(tmp_path: Path) -> None:
    """The node stops on it, as on any failed metadata write (`RaftNode._stop_on_disk_failure`)."""
    failures: list[OSError] = []
    missing = tmp_path / "gone" / "quorum-state"  # its directory does not exist: the write fails

    async def test() -> None:
        writer = QuorumStateWriter(missing, (3, 1), failed=failures.append, later_s=0)
        await writer.persist(QuorumState(3, 2, 1))
        await until(lambda: bool(failures), "the failed write reported", DEADLINE_S)
        assert isinstance(failures[0], OSError) and "gone" in str(failures[0])
    asyncio.run(test())


def test_flush_waits_for_a_delayed_write_under_way_and_writes_the_newer_state_after_it(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A node stopping while its delayed write is on disk: the two never overlap (one tmp file)."""
    writes = RecordedWrites(monkeypatch)
    writes.hold_leader = 2
    path = tmp_path / "quorum-state"

    async def test() -> None:
        writer = QuorumStateWriter(path, (8, 2), failed=pytest.fail, later_s=0)
        await writer.persist(QuorumState(8, 2, 2))  # leader 2, held at the gate once its write starts
        await until(writes.holding.is_set, "the delayed write started", DEADLINE_S)
        await writer.persist(QuorumState(8, 3, 2))  # then leader 3, waiting
        await writes.held_back(writer.flush(), "flush wrote beside the delayed write under way")
        assert writes.written == [(8, 2, 2), (8, 2, 3)]
        assert stored(path) == (8, 2, 3)
    asyncio.run(test())
