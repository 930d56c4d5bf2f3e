"""The image a broker answers Metadata from, with the test-only KAFKA-6262 knob.

A test-only knob (KAFKA-6262, a broker answering with old metadata): brokers answer Metadata from
`ServedImage`, which is the replayed image unless
  * `quorum.test.metadata.delay.ms` is above 0 (default 0): answers come from the newest image the
    broker replayed at least that long ago (in its first moments, the image it started with);
  * a file named `PAUSE_METADATA` exists in the broker's metadata log dir
    (`<log.dirs[0]>/__cluster_metadata-0/PAUSE_METADATA`): answers stay those of the moment the
    file appeared (checked on each Metadata request and every 100 ms), until it is removed.
Only the answers lag: replay, snapshots, heartbeats (with the replayed offset, so the broker
stays unfenced), Raft and MetadataLag go on as usual. Never set either in production.
"""

from __future__ import annotations

import logging
import os
import time
from collections import deque
from collections.abc import Callable
from pathlib import Path

from quorum.image.image import MetadataImage

log = logging.getLogger(__name__)


class ServedImage:
    """The image a broker answers Metadata from: the replayed one, or an older one when the
    KAFKA-6262 test knob says so (see the module docstring).

    `current` reads the replayed image; the driver calls `replayed()` each time replay moved on,
    which, with a delay, remembers the new image and when it was replayed. Images are immutable,
    so holding on to old ones is safe; those older than the newest one past the delay are dropped.
    """

    def __init__(self, current: Callable[[], MetadataImage], delay_ms: int, pause_path: Path,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self._current = current
        self._delay_s = delay_ms / 1000
        self._pause_path = pause_path
        self._clock = clock
        self._history: deque[tuple[float, MetadataImage]] = deque()
        self._paused: MetadataImage | None = None
        if delay_ms > 0:
            self._history.append((clock(), current()))
            log.warning("test knob quorum.test.metadata.delay.ms=%d: Metadata answers are delayed", delay_ms)

    @property
    def paused(self) -> bool:
        return self._paused is not None

    def replayed(self) -> None:
        """Replay moved on (a catch-up, a snapshot installed): with a delay, remember the image now."""
        if self._delay_s <= 0:
            return
        image = self._current()
        if not self._history or self._history[-1][1] is not image:
            self._history.append((self._clock(), image))
        self._prune()

    def check_pause(self) -> bool:
        """Look for the pause file (one stat); the image is frozen when it appears, released when it goes."""
        exists = os.path.exists(self._pause_path)
        if exists and self._paused is None:
            self._paused = self._delayed()
            log.warning("%s exists: Metadata answers paused at the image of offset %d", self._pause_path,
                        self._paused.offset)
        elif not exists and self._paused is not None:
            self._paused = None
            log.warning("%s removed: Metadata answers resume", self._pause_path)
        return exists

    @property
    def image(self) -> MetadataImage:
        """What a Metadata request is answered from now."""
        self.check_pause()
        return self._paused if self._paused is not None else self._delayed()

    def _delayed(self) -> MetadataImage:
        if self._delay_s <= 0:
            return self._current()
        self._prune()
        return self._history[0][1]

    def _prune(self) -> None:
        """Keep the newest image replayed at least the delay ago, and every newer one."""
        cutoff = self._clock() - self._delay_s
        history = self._history
        while len(history) > 1 and history[1][0] <= cutoff:
            history.popleft()
