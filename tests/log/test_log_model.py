"""The log against an in-memory model: random appends, refused appends, flushes, truncations,
clean reopens and crashes that tear away unflushed bytes, checked after every step."""

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
from quorum.log.epoch_cache import EpochEntry
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


class LogModel(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.directory = Path(tempfile.mkdtemp(prefix="log-model-"))
        self.log = self._open(True)
        self.batches: list[ModelBatch] = []
        self.flushed = 0

    def _open(self, verify_all: bool) -> Log:
        return Log(self.directory, segment_bytes=SEGMENT_BYTES, index_interval_bytes=INDEX_INTERVAL,
                   verify_all_segments=verify_all)  # fmt: skip

    @property
    def end(self) -> int:
        return self.batches[-1].next if self.batches else 0

    @property
    def last_epoch(self) -> int:
        return self.batches[-1].epoch if self.batches else -1

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
        offset, epoch = self.end, self.last_epoch
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

    @precondition(lambda self: self.batches)
    @rule(data=st.data())
    def truncate(self, data: st.DataObject) -> None:
        keep = data.draw(st.integers(0, len(self.batches) - 1))
        offset = self.batches[keep].base
        self.log.truncate_to(offset)
        del self.batches[keep:]
        self.flushed = min(self.flushed, offset)

    @rule(verify_all=st.booleans())
    def reopen(self, verify_all: bool) -> None:
        self.log.close()
        self.log = self._open(verify_all)
        self.flushed = self.end

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
        self.flushed = self.end

    # -- invariants --------------------------------------------------------------------------

    @invariant()
    def offsets_agree(self) -> None:
        assert self.log.start_offset == 0
        assert self.log.end_offset == self.end
        assert self.flushed <= self.log.flushed_offset <= self.end

    @invariant()
    def content_agrees(self) -> None:
        stored = b"".join(bytes(batch.raw) for batch in self.log.iter_batches())
        assert stored == b"".join(b.raw for b in self.batches)
        if self.batches:
            batch = self.batches[len(self.batches) // 2]
            first = next(iter_batches(self.log.read(batch.base, 1)))
            assert bytes(first.raw) == batch.raw

    @invariant()
    def epochs_agree(self) -> None:
        expected = []
        for batch in self.batches:
            if batch.epoch >= 0 and (not expected or batch.epoch > expected[-1].epoch):
                expected.append(EpochEntry(batch.epoch, batch.base))
        assert list(self.log.epoch_entries) == expected
        assert self.log.last_fetched_epoch() == max(self.last_epoch, 0)
        for epoch in range(-1, max(self.last_epoch, 0) + 2):
            assert self.log.end_offset_for_epoch(epoch) == model_end_offset_for(self.batches, epoch)


LogModel.TestCase.settings = settings(
    max_examples=60, stateful_step_count=25, deadline=None, suppress_health_check=[HealthCheck.too_slow]
)
test_log_against_model = LogModel.TestCase
