"""The test setting `quorum.test.verify.image=true`: after each catch-up, a node's image must equal
the one a replay of its snapshot plus log gives (issue 21).

A node builds its image incrementally, one delta per catch-up, and serves it; a restart (or any
other replica) builds it from the latest snapshot and the log after it. The two must agree, or a
client trusts metadata that the log does not hold, as when a broker served a topic with no
partitions until it restarted. With the setting on, `ImageVerifier.check` replays the snapshot
and the log up to the applied offset into a fresh `ImageState` and compares it with the node's
image field by field (`quorum.image.compare`); a difference raises `ImageDivergenceError`
naming the node, the offset and the first field that differs, and the node stops on it.

Cost matters only in tests, but a chaos test runs thousands of catch-ups: each check advances a
reference state by the new log records and compares, and a full replay of snapshot plus log
comes back as often as keeps it under a tenth of the time (`ImageVerifier`). Setting
`QUORUM_TEST_VERIFY_IMAGE=true` in the environment turns it on for every node that does not set
the property, which is how the test suite turns it on in every process it starts
(`tests/conftest.py`). Never set either in production.

What is compared: everything but `offset`, which is the offset of the last data record applied
and so depends on where the snapshot was cut (a snapshot ending in control batches), not on
what the metadata is.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable, Mapping
from pathlib import Path

from quorum.image.compare import image_difference
from quorum.image.image import MetadataImage
from quorum.image.image_state import ImageState
from quorum.image.replay import ReplayLog
from quorum.log.snapshot import SnapshotDirectory, SnapshotReader

logger = logging.getLogger(__name__)

VERIFY_IMAGE_KEY = "quorum.test.verify.image"
VERIFY_IMAGE_ENV = "QUORUM_TEST_VERIFY_IMAGE"


class ImageDivergenceError(Exception):
    """The incremental image and a replay of the snapshot plus log differ."""


def verify_image_enabled(props: Mapping[str, str], environ: Mapping[str, str] = os.environ) -> bool:
    """`quorum.test.verify.image`, else the QUORUM_TEST_VERIFY_IMAGE environment variable; off by default."""
    value = props.get(VERIFY_IMAGE_KEY)
    source = VERIFY_IMAGE_KEY
    if value is None:
        value, source = environ.get(VERIFY_IMAGE_ENV, "false"), VERIFY_IMAGE_ENV
    flag = value.strip().lower()
    if flag not in ("true", "false"):
        raise ValueError(f"{source} must be true or false, not {value!r}")
    return flag == "true"


def replayed_state(directory: Path, log: ReplayLog, snapshots: SnapshotDirectory, upto: int,
                   like: MetadataImage) -> tuple[ImageState, int] | None:
    """The state of the latest snapshot at or below `upto` plus the log's whole batches up to
    `upto`, with `like`'s identity and listener, and the next offset it would apply; None when
    the log no longer holds the records between that snapshot (or the log start, without one)
    and `upto`."""
    snapshot = next((s for s in reversed(snapshots.snapshots) if s.offset <= upto), None)
    start = 0 if snapshot is None else snapshot.offset
    if log.start_offset > start:
        return None
    # lazy=False: the reference decodes every record with the schema engine and builds every
    # partition, so each check also compares the node's undecoded partitions and specialised
    # decoders (issue 17) with the engine's eager reading.
    state = ImageState(listener=like.listener, cluster_id=like.cluster_id, controller_id=like.controller_id,
                       lazy=False)  # fmt: skip
    if snapshot is not None:
        with SnapshotReader.open(directory, snapshot) as reader:
            state.load(reader.values(), snapshot.offset - 1)
    return state, replay_batches(state, log, start, upto)


def replay_batches(state: ImageState, log: ReplayLog, start: int, upto: int) -> int:
    """Apply the data records of the log's whole batches from `start` below `upto`; the next offset."""
    for batch in log.iter_batches(start, upto):
        if batch.next_offset > upto:
            break
        if not batch.is_control:
            for record in batch.records():
                if record.value is not None and record.offset >= start:
                    state.apply(record.offset, record.value)
        start = batch.next_offset
    return start


class ImageVerifier:
    """Compares a node's image with a replay of its snapshot plus log (see the module docstring).

    The reference it compares with is its own state, read from the files: a full replay of the
    latest snapshot plus the log, advanced from there by the log records each later check finds
    (read from the log, not handed over by the node's replay). A full replay again happens when
    the log no longer holds what the reference needs, and otherwise as often as keeps its cost
    under a tenth of the time (`FULL_REPLAY_SHARE`): in a long chaos test a replay of thousands of
    records after every catch-up would take more CPU than the test.
    """

    FULL_REPLAY_SHARE = 0.1

    def __init__(self, node_id: int, directory: Path, log: ReplayLog, snapshots: SnapshotDirectory,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.node_id = node_id
        self.directory = directory
        self.log = log
        self.snapshots = snapshots
        self.checks = 0
        self.full_replays = 0
        self.skipped = 0
        self._clock = clock
        self._reference: ImageState | None = None
        self._next = 0  # the next offset the reference applies
        self._full_due = 0.0  # clock time from which the next check replays in full

    def check(self, image: MetadataImage, applied_offset: int) -> None:
        """Raise ImageDivergenceError when `image` (everything below `applied_offset` applied)
        differs from the reference; a check the log cannot support (its start moved past the
        snapshot) is skipped and counted."""
        reference = self._reference
        now = self._clock()
        if (reference is None or now > self._full_due or self._next > applied_offset
                or self.log.start_offset > self._next):
            replayed = replayed_state(self.directory, self.log, self.snapshots, applied_offset, image)
            if replayed is None:
                self._reference = None
                self.skipped += 1
                logger.debug("node %d: image check at offset %d skipped: the log starts at %d", self.node_id,
                             applied_offset, self.log.start_offset)
                return
            reference, self._next = replayed
            self._reference = reference
            self.full_replays += 1
            self._full_due = now + (self._clock() - now) / self.FULL_REPLAY_SHARE
            how = "a replay of snapshot plus log"
        else:
            self._next = replay_batches(reference, self.log, self._next, applied_offset)
            how = "the snapshot plus log read by the check"
        self.checks += 1
        difference = image_difference(image, reference.image, ignore=frozenset({"offset"}))
        if difference is not None:
            raise ImageDivergenceError(
                f"node {self.node_id}: the image replayed incrementally up to offset {applied_offset} differs from "
                f"{how} (latest snapshot {self.snapshots.latest_snapshot()}; incremental != replayed): "
                f"{difference}")
