"""When a node snapshots its metadata state: KIP-630's "When to Snapshot", as a pure rule.

Snapshotting too often wears the disk; too rarely, and loading takes longer and the log (which
can only be truncated up to a snapshot) grows. KIP-630 gives two settings, and BOTH must be
satisfied before the controller or metadata cache writes a new snapshot:

* ``metadata.snapshot.min.changed_records.ratio`` (default 0.5): the share of the latest
  snapshot's records that have changed (been modified or deleted) in the in-memory state since
  it was taken. How records are counted is `MetadataRecordsState.changed_records`.
* ``metadata.log.max.record.bytes.between.snapshots`` (default 20 MiB): the minimum size of the
  log records between the latest snapshot and the high watermark. Despite the "max" in its
  name, the KIP defines it as a minimum: fewer bytes than this never trigger a snapshot.

The policy only decides; `quorum.image.replay.MetadataReplayer` counts and writes.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

MIN_CHANGED_RECORDS_RATIO_CONFIG = "metadata.snapshot.min.changed_records.ratio"
MAX_RECORD_BYTES_BETWEEN_SNAPSHOTS_CONFIG = "metadata.log.max.record.bytes.between.snapshots"
DEFAULT_MIN_CHANGED_RECORDS_RATIO = 0.5
DEFAULT_MAX_RECORD_BYTES_BETWEEN_SNAPSHOTS = 20 * 1024 * 1024


@dataclass(frozen=True, slots=True)
class SnapshotPolicy:
    """KIP-630's two snapshot conditions; see the module docstring.

    `min_changed_records_ratio` is ``metadata.snapshot.min.changed_records.ratio`` and
    `max_record_bytes_between_snapshots` is ``metadata.log.max.record.bytes.between.snapshots``.
    """

    min_changed_records_ratio: float = DEFAULT_MIN_CHANGED_RECORDS_RATIO
    max_record_bytes_between_snapshots: int = DEFAULT_MAX_RECORD_BYTES_BETWEEN_SNAPSHOTS

    def __post_init__(self) -> None:
        if not self.min_changed_records_ratio >= 0:  # also refuses NaN
            raise ValueError(f"{MIN_CHANGED_RECORDS_RATIO_CONFIG} must be at least 0, "
                             f"not {self.min_changed_records_ratio}")  # fmt: skip
        if self.max_record_bytes_between_snapshots < 0:
            raise ValueError(f"{MAX_RECORD_BYTES_BETWEEN_SNAPSHOTS_CONFIG} must be at least 0, "
                             f"not {self.max_record_bytes_between_snapshots}")  # fmt: skip

    @classmethod
    def from_config(cls, config: Mapping[str, str]) -> SnapshotPolicy:
        """The policy from a node's properties, Kafka's defaults for the settings it lacks."""
        ratio = config.get(MIN_CHANGED_RECORDS_RATIO_CONFIG)
        size = config.get(MAX_RECORD_BYTES_BETWEEN_SNAPSHOTS_CONFIG)
        try:
            return cls(DEFAULT_MIN_CHANGED_RECORDS_RATIO if ratio is None else float(ratio),
                       DEFAULT_MAX_RECORD_BYTES_BETWEEN_SNAPSHOTS if size is None else int(size))  # fmt: skip
        except ValueError as exc:
            raise ValueError(f"bad snapshot setting: {exc}") from None

    def should_snapshot(self, changed_records: int, records_in_snapshot: int, bytes_since_snapshot: int) -> bool:
        """Whether both KIP-630 conditions hold.

        `changed_records` and `records_in_snapshot` are the state's counts (changed since, and
        records in, the latest snapshot); `bytes_since_snapshot` is the size of the log records
        applied since it. Without a previous snapshot (`records_in_snapshot == 0`) the ratio
        counts as met: nothing can have changed in a snapshot that does not exist, so a state
        that only grows would otherwise never get its first snapshot, and the log, which can only
        be truncated up to a snapshot, would grow forever. The byte condition still applies.
        """
        if bytes_since_snapshot < self.max_record_bytes_between_snapshots:
            return False
        if records_in_snapshot <= 0:
            return True
        return changed_records >= self.min_changed_records_ratio * records_in_snapshot
