"""What the replayer asks of a state machine (KIP-630, "Interaction with the Kafka Controller and
Metadata Cache"), and the snapshot bookkeeping every state machine shares.

`MetadataReplayer` drives any `ReplayedState`: it applies committed records, loads a snapshot,
asks for the state as snapshot records, and reads the two counts KIP-630's "When to Snapshot"
needs. `SnapshotCounts` holds those counts and the digest the simulator and tests compare, so a
state machine only says what counts as a change (its `apply`) and how many records it would write.
"""

from __future__ import annotations

import contextlib
import hashlib
import struct
from collections.abc import Iterable, Sequence
from contextlib import AbstractContextManager
from typing import Protocol

_LENGTH = struct.Struct(">I")


class ReplayedState(Protocol):
    def apply(self, offset: int, value: bytes) -> None: ...

    def load(self, values: Iterable[bytes]) -> None: ...

    def replaying(self) -> AbstractContextManager[None]: ...

    def snapshot_values(self) -> Sequence[bytes]: ...

    def mark_snapshot(self) -> None: ...

    @property
    def records_in_snapshot(self) -> int: ...

    @property
    def changed_records(self) -> int: ...

    def digest(self) -> str: ...

    def __len__(self) -> int: ...


class SnapshotCounts:
    """The change accounting of "When to Snapshot" and the snapshot digest, for a state machine
    that adds to `_changed` as records change and says how many records it holds (`__len__`)."""

    _records_in_snapshot: int = 0
    _changed: int = 0

    def __len__(self) -> int:
        raise NotImplementedError

    def snapshot_values(self) -> Iterable[bytes]:
        raise NotImplementedError

    def replaying(self) -> AbstractContextManager[None]:
        """Around a catch-up: the records applied inside it are one step for readers on other
        threads (see `quorum.image.image_state.ImageState.replaying`); nothing to do for a state
        that only the replaying thread reads."""
        return contextlib.nullcontext()

    def mark_snapshot(self) -> None:
        """The state was just written to a snapshot (or loaded from one): restart the change counts."""
        self._records_in_snapshot = len(self)
        self._changed = 0

    @property
    def records_in_snapshot(self) -> int:
        """How many records the state had at the last `load` or `mark_snapshot`."""
        return self._records_in_snapshot

    @property
    def changed_records(self) -> int:
        """How many records have changed since the last `load` or `mark_snapshot` (see the class docstring)."""
        return self._changed

    def digest(self) -> str:
        """SHA-256 of `snapshot_values()` in order: equal digests mean identical snapshots."""
        hasher = hashlib.sha256()
        for value in self.snapshot_values():
            hasher.update(_LENGTH.pack(len(value)))
            hasher.update(value)
        return hasher.hexdigest()
