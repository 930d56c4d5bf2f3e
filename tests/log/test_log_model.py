"""The log against an in-memory model: random appends, refused appends, flushes, truncations,
clean reopens and crashes that tear away unflushed bytes, checked after every step; and, for
KIP-630, advances of the log start offset, snapshot boundaries and full truncations to a snapshot."""

from __future__ import annotations

import random
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from quorum.log import InvalidAppendError, Log
from quorum.log.epoch_cache import EpochEntry, LeaderEpochCache
from quorum.raft.interface import OffsetAndEpoch
from quorum.wire.records import iter_batches
from tests.log.helpers import make_batch

SEGMENT_BYTES = 900
INDEX_INTERVAL = 200


@dataclass(frozen=True)
class ModelBatch:
    base: int
    count: int
    epoch: int
    raw: bytes

    @property
    def next(self) -> int:
        return self.base + self.count


def model_end_offset_for(batches: list[ModelBatch], epoch: int) -> OffsetAndEpoch:
    """KIP-595's answer derived from the batches themselves, not from an epoch cache."""
    end = batches[-1].next if batches else 0
    epochs = [b.epoch for b in batches if b.epoch >= 0]
    if epoch < 0:
        return OffsetAndEpoch(-1, -1)
    if not epochs:
        return OffsetAndEpoch(end, 0)
    if epoch >= epochs[-1]:
        return OffsetAndEpoch(end, epochs[-1])
    below = [e for e in epochs if e <= epoch]
    if not below:
        return OffsetAndEpoch(-1, -1)
    found = max(below)
    return OffsetAndEpoch(max(b.next for b in batches if b.epoch == found), found)


def model_answer_with_snapshot(
    entries: list[EpochEntry], end: int, boundary: OffsetAndEpoch | None, epoch: int
) -> OffsetAndEpoch:
    """The answer once the log's start moved or a snapshot bounds it: from the epoch entries,
    with the snapshot standing for the epochs before the first one (see Log.end_offset_for_epoch)."""
    cache = LeaderEpochCache(entries)
    undefined = OffsetAndEpoch(-1, -1)
    if not entries:
        if boundary is None:
            return cache.end_offset_for(epoch, end)
        return OffsetAndEpoch(end, boundary.epoch) if epoch >= boundary.epoch else undefined
    found = cache.end_offset_for(epoch, end)
    if found == undefined and boundary is not None and 0 <= boundary.epoch <= epoch:
        return boundary
    return found


class LogModel(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.directory = Path(tempfile.mkdtemp(prefix="log-model-"))
        self.log = self._open(True)
        self.batches: list[ModelBatch] = []  # every batch still on disk, some maybe below the start
        self.flushed = 0
        self.start = 0
        self.boundary: OffsetAndEpoch | None = None

    def _open(self, verify_all: bool) -> Log:
        return Log(self.directory, segment_bytes=SEGMENT_BYTES, index_interval_bytes=INDEX_INTERVAL,
                   verify_all_segments=verify_all)  # fmt: skip

    @property
    def end(self) -> int:
        return self.batches[-1].next if self.batches else self.start

    @property
    def last_epoch(self) -> int:
        return self.batches[-1].epoch if self.batches else -1

    @property
    def epoch_floor(self) -> int:
        """Epochs only grow, past a snapshot's too."""
        return max(self.last_epoch, self.boundary.epoch if self.boundary else -1)

    @property
    def truncation_floor(self) -> int:
        return max(self.start, self.boundary.offset if self.boundary else 0)

    @property
    def visible(self) -> list[ModelBatch]:
        return [b for b in self.batches if b.next > self.start]

    def teardown(self) -> None:
        self.log.close()
        shutil.rmtree(self.directory, ignore_errors=True)

    # -- rules -------------------------------------------------------------------------------

    @rule(
        shapes=st.lists(st.tuples(st.integers(1, 4), st.integers(0, 2), st.integers(0, 300)), min_size=1, max_size=3),
        unstamped=st.booleans(),
    )
    def append(self, shapes: list[tuple[int, int, int]], unstamped: bool) -> None:
        new = []
        offset, epoch = self.end, self.epoch_floor
        for count, bump, value_size in shapes:
            epoch = -1 if unstamped and epoch == -1 and bump == 0 else max(epoch, 0) + bump
            new.append(ModelBatch(offset, count, epoch, make_batch(offset, count, epoch, value_size)))
            offset += count
        assert self.log.append(b"".join(b.raw for b in new)) == offset
        self.batches += new

    @rule(gap=st.sampled_from([-2, -1, 1, 2]), drop_epoch=st.booleans())
    def refused_append(self, gap: int, drop_epoch: bool) -> None:
        """A good batch followed by one that leaves a gap, overlaps, or lowers the epoch."""
        epoch = max(self.last_epoch, 1)
        good = make_batch(self.end, 1, epoch)
        bad = make_batch(self.end + 1, 1, epoch - 1) if drop_epoch else make_batch(self.end + 1 + gap, 1, epoch)
        before = self.log.end_offset
        try:
            self.log.append(good + bad)
        except InvalidAppendError:
            pass
        else:
            raise AssertionError("a bad append was accepted")
        assert self.log.end_offset == before

    @rule()
    def flush(self) -> None:
        assert self.log.flush() == self.end
        self.flushed = self.end

    @precondition(lambda self: any(b.base >= self.truncation_floor for b in self.batches))
    @rule(data=st.data())
    def truncate(self, data: st.DataObject) -> None:
        first = min(i for i, b in enumerate(self.batches) if b.base >= self.truncation_floor)
        keep = data.draw(st.integers(first, len(self.batches) - 1))
        offset = self.batches[keep].base
        self.log.truncate_to(offset)
        del self.batches[keep:]
        self.flushed = min(self.flushed, offset)

    @precondition(lambda self: self.end > self.start and (self.boundary is None or self.boundary.offset > self.start))
    @rule(data=st.data())
    def advance_start(self, data: st.DataObject) -> None:
        """To a snapshot's end offset when there is one (never past it), else anywhere in the log."""
        limit = self.end if self.boundary is None else self.boundary.offset
        offset = data.draw(st.integers(self.start + 1, limit))
        if offset > self.log.flushed_offset:
            self.flushed = self.end  # the log flushes before it records a start offset
        assert self.log.advance_start_offset(offset)
        self.start = offset
        first_base = self.log.segment_base_offsets[0]
        self.batches = [b for b in self.batches if b.base >= first_base]

    @precondition(lambda self: any(b.next > self.truncation_floor for b in self.batches))
    @rule(data=st.data())
    def snapshot_inside_the_log(self, data: st.DataObject) -> None:
        """The state machine snapshotted at the end of a batch: the log keeps its records."""
        candidates = [b for b in self.batches if b.next > self.truncation_floor]
        batch = data.draw(st.sampled_from(candidates))
        self.boundary = OffsetAndEpoch(batch.next, max(batch.epoch, 0))
        assert not self.log.set_snapshot_boundary(self.boundary)

    @rule(gap=st.integers(0, 5), bump=st.integers(0, 2), via_boundary=st.booleans())
    def snapshot_ahead_of_the_log(self, gap: int, bump: int, via_boundary: bool) -> None:
        """A fetched snapshot beyond the log: the log is replaced by an empty one starting there."""
        snapshot = OffsetAndEpoch(self.end + gap, max(self.epoch_floor, 0) + bump)
        if via_boundary:
            self._tell_boundary(snapshot)
        else:
            self.log.truncate_fully_and_start_at(snapshot.offset, snapshot.epoch)
            self._emptied_at(snapshot)

    def _emptied_at(self, snapshot: OffsetAndEpoch) -> None:
        self.batches = []
        self.start = self.flushed = snapshot.offset
        self.boundary = snapshot

    def _tell_boundary(self, snapshot: OffsetAndEpoch | None = None) -> None:
        """Give the log its latest snapshot, as the owner does at start-up and after a fetch:
        the log is emptied at the snapshot when the snapshot is ahead of it (Kafka's rule), which
        after a crash also happens to a snapshot taken above records that were not flushed."""
        snapshot = snapshot or self.boundary
        if snapshot is None:
            return
        entries = self.expected_epoch_entries()
        latest = max(entries[-1].epoch if entries else -1, 0)
        empty_there = self.start == self.end == snapshot.offset
        ahead = not empty_there and (
            snapshot.epoch > latest or (snapshot.epoch == latest and snapshot.offset > self.end)
        )
        assert self.log.set_snapshot_boundary(snapshot) == ahead
        if ahead:
            self._emptied_at(snapshot)
        else:
            self.boundary = snapshot

    @rule(verify_all=st.booleans())
    def reopen(self, verify_all: bool) -> None:
        self.log.close()
        self.log = self._open(verify_all)
        self.flushed = self.end
        self._tell_boundary()

    @rule(verify_all=st.booleans(), data=st.data())
    def crash_tearing_unflushed_bytes(self, verify_all: bool, data: st.DataObject) -> None:
        """The process dies and the machine loses some of what was not fsynced: the last
        segment is cut (or overwritten with garbage) somewhere after its flushed bytes."""
        last_base = self.log.segment_base_offsets[-1]
        for segment in self.log._segments:  # die without flushing or closing cleanly
            segment.close()
        path = self.directory / f"{last_base:020d}.log"
        content = path.read_bytes()
        durable = sum(len(b.raw) for b in self.batches if last_base <= b.base and b.next <= self.flushed)
        cut = data.draw(st.integers(durable, len(content)))
        garbage = data.draw(st.booleans())
        tail = random.Random(cut).randbytes(len(content) - cut) if garbage else b""
        path.write_bytes(content[:cut] + tail)
        self.log = self._open(verify_all)
        position = 0
        kept = [b for b in self.batches if b.base < last_base]
        for batch in self.batches[len(kept) :]:
            position += len(batch.raw)
            if position > cut:
                break
            kept.append(batch)
        assert len(kept) >= len([b for b in self.batches if b.next <= self.flushed])
        self.batches = kept
        assert self.end >= self.start, "records below a recorded start offset were not durable"
        self.flushed = self.end
        self._tell_boundary()

    # -- invariants --------------------------------------------------------------------------

    @invariant()
    def offsets_agree(self) -> None:
        assert self.log.start_offset == self.start
        assert self.log.end_offset == self.end
        assert self.flushed <= self.log.flushed_offset <= self.end

    @invariant()
    def content_agrees(self) -> None:
        stored = b"".join(bytes(batch.raw) for batch in self.log.iter_batches())
        assert stored == b"".join(b.raw for b in self.visible)
        readable = [b for b in self.batches if b.base >= self.start]
        if readable:
            batch = readable[len(readable) // 2]
            first = next(iter_batches(self.log.read(batch.base, 1)))
            assert bytes(first.raw) == batch.raw

    def expected_epoch_entries(self) -> list[EpochEntry]:
        cache = LeaderEpochCache()
        for batch in self.batches:
            if batch.epoch >= 0 and (not len(cache) or batch.epoch > cache.latest_epoch):
                cache.assign(batch.epoch, batch.base)
        cache.truncate_from_start(self.start)
        cache.truncate_from_end(self.end)  # no entry for an epoch without a record at or above the start
        return list(cache.entries)

    @invariant()
    def epochs_agree(self) -> None:
        expected = self.expected_epoch_entries()
        assert list(self.log.epoch_entries) == expected
        if expected:
            assert self.log.last_fetched_epoch() == expected[-1].epoch
        elif self.boundary is not None and self.boundary.offset == self.end:
            assert self.log.last_fetched_epoch() == self.boundary.epoch
        else:
            assert self.log.last_fetched_epoch() == 0
        for epoch in range(-1, max(self.epoch_floor, 0) + 2):
            if self.start == 0 and self.boundary is None:
                # the plain log: answers derived from the batches themselves
                assert self.log.end_offset_for_epoch(epoch) == model_end_offset_for(self.batches, epoch)
            else:
                assert self.log.end_offset_for_epoch(epoch) == model_answer_with_snapshot(
                    expected, self.end, self.boundary, epoch
                )


LogModel.TestCase.settings = settings(
    max_examples=60, stateful_step_count=25, deadline=None, suppress_health_check=[HealthCheck.too_slow]
)
test_log_against_model = LogModel.TestCase
