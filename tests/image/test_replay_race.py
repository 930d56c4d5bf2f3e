"""Issue 21: a broker served an auto-created topic with 0 partitions until it restarted.

The node replays committed batches on a worker thread (`asyncio.to_thread(catch_up)`) while its
event loop answers Metadata from `ImageState.image`. Before the fix a reader built the pending
delta into an image while the worker was still replaying into that delta: a TopicRecord already
in it, the PartitionRecord of the same batch decoded but not yet added. The image went out with
the topic and no partition, and the PartitionRecord landed in a delta that was never applied
again: lost for good, while a replay of the log (a restart) had it.

The test stops the worker inside the PartitionRecord's replay, in the second batch of the
catch-up (the value's `__bytes__` is called after the delta's "applied?" check and before the
record changes anything), reads the image and the applied offset (what the broker's heartbeat
reports) as the event loop would, then lets the worker finish. Deterministic: no sleeps, no
timeouts.
"""

from __future__ import annotations

import threading
from pathlib import Path

from quorum.image.compare import image_difference
from quorum.image.image_state import ImageState
from quorum.image.replay import MetadataReplayer
from quorum.image.snapshot_policy import SnapshotPolicy
from quorum.sim.memory_log import MemoryLog
from quorum.wire.records import Record, build_batch
from tests.image.records import TOPIC_IDS, partition, register, topic, unfence

T1 = TOPIC_IDS[0]
NEVER = SnapshotPolicy(1.0, 1 << 62)
WAIT_S = 30.0  # a deadline for the handshakes below, never reached when the code is right


class Handshake:
    """Two events: the worker says where it stopped, the reader lets it go on."""

    def __init__(self) -> None:
        self.reached = threading.Event()
        self.release = threading.Event()

    def stop_here(self) -> None:
        self.reached.set()
        if not self.release.wait(WAIT_S):
            raise AssertionError("the reader never released the replaying thread")


class StopsInReplay:
    """A record value that stops the replaying thread when the delta turns it into bytes."""

    def __init__(self, value: bytes, handshake: Handshake) -> None:
        self.value = value
        self.handshake = handshake

    def __bytes__(self) -> bytes:
        self.handshake.stop_here()
        return self.value


class StoppingLog(MemoryLog):
    """A memory log of the given batches whose last record comes out as a `StopsInReplay` value."""

    def __init__(self, batches: list[list[bytes]], handshake: Handshake) -> None:
        super().__init__()
        base = 0
        for values in batches:
            records = [Record(base + i, 0, None, value, []) for i, value in enumerate(values)]
            self.append(build_batch(records, base_offset=base, partition_leader_epoch=1))
            base += len(values)
        self._handshake = handshake
        self._stop_at = base - 1

    def iter_batches(self, from_offset=None, upto=None):
        for batch in super().iter_batches(from_offset, upto):
            yield _Stopping(batch, self._stop_at, self._handshake)


class _Stopping:
    def __init__(self, batch, stop_at: int, handshake: Handshake) -> None:
        self._batch = batch
        self._stop_at = stop_at
        self._handshake = handshake

    def __getattr__(self, name):
        return getattr(self._batch, name)

    def records(self):
        for record in self._batch.records():
            if record.offset == self._stop_at:
                record = Record(record.offset, record.timestamp, record.key,
                                StopsInReplay(record.value, self._handshake), record.headers)  # type: ignore[arg-type]
            yield record


def replayed_from_scratch(values: list[bytes]) -> ImageState:
    state = ImageState()
    for offset, value in enumerate(values):
        state.apply(offset, value)
    return state


def test_a_reader_during_replay_never_sees_half_a_batch_and_never_loses_a_record(tmp_path: Path) -> None:
    batches = [[register(1), unfence(1)], [topic(T1, "fz-live"), partition(T1, 0)]]
    values = [value for batch in batches for value in batch]
    handshake = Handshake()
    state = ImageState()
    replayer = MetadataReplayer(tmp_path, StoppingLog(batches, handshake), state, NEVER)
    failure: list[BaseException] = []

    def replay() -> None:
        try:
            replayer.catch_up(len(values))
        except BaseException as exc:  # handed to the test thread
            failure.append(exc)
            handshake.reached.set()

    worker = threading.Thread(target=replay, name="catch-up")
    worker.start()
    try:
        assert handshake.reached.wait(WAIT_S), "the replaying thread never reached the PartitionRecord"
        seen = state.image  # what a Metadata request answered from, mid-batch
        reported = replayer.applied_offset  # what a broker's heartbeat reported meanwhile
    finally:
        handshake.release.set()
        worker.join(WAIT_S)
    assert not worker.is_alive() and not failure, failure
    assert "fz-live" not in seen.topics, (
        f"a reader saw half a batch: fz-live with {len(seen.topics['fz-live'].partitions)} partitions")
    assert reported == 0 and not seen.registrations, (
        f"the heartbeat offset {reported} is ahead of the image readers see: the controller would unfence the "
        "broker on an image without its registration")
    assert replayer.applied_offset == len(values)
    image = state.image
    assert image_difference(image, replayed_from_scratch(values).image) is None
    assert [p.partition for p in image.topics["fz-live"].partitions] == [0]


def test_the_reader_after_the_batch_sees_all_of_it() -> None:
    """Single-threaded use (the simulator, tests): the image holds every record applied."""
    values = [register(1), unfence(1), topic(T1, "fz-live"), partition(T1, 0)]
    state = replayed_from_scratch(values)
    assert [p.partition for p in state.image.topics["fz-live"].partitions] == [0]
