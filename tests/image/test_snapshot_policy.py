"""SnapshotPolicy: KIP-630's "When to Snapshot", both conditions at once."""

from __future__ import annotations

import pytest

from quorum.image.snapshot_policy import (
    MAX_RECORD_BYTES_BETWEEN_SNAPSHOTS_CONFIG,
    MIN_CHANGED_RECORDS_RATIO_CONFIG,
    SnapshotPolicy,
)

MIB = 1024 * 1024


def test_kafkas_defaults() -> None:
    policy = SnapshotPolicy()
    assert policy.min_changed_records_ratio == 0.5
    assert policy.max_record_bytes_between_snapshots == 20 * MIB


@pytest.mark.parametrize(("changed", "in_snapshot", "size", "expected"), [
    (50, 100, 20 * MIB, True),        # both at their thresholds
    (100, 100, 64 * MIB, True),
    (49, 100, 64 * MIB, False),       # the ratio alone is not met
    (50, 100, 20 * MIB - 1, False),   # the bytes alone are not met
    (0, 100, 0, False),
    (200, 100, 20 * MIB, True),       # records added after the snapshot and then changed count too
])
def test_both_conditions_must_hold(changed: int, in_snapshot: int, size: int, expected: bool) -> None:
    assert SnapshotPolicy().should_snapshot(changed, in_snapshot, size) is expected


def test_without_a_previous_snapshot_only_the_bytes_decide() -> None:
    policy = SnapshotPolicy()
    assert policy.should_snapshot(0, 0, 20 * MIB)
    assert not policy.should_snapshot(0, 0, 20 * MIB - 1)


def test_thresholds_of_zero_snapshot_at_every_chance() -> None:
    assert SnapshotPolicy(0.0, 0).should_snapshot(0, 10, 0)


def test_from_config_reads_kafkas_names() -> None:
    policy = SnapshotPolicy.from_config({MIN_CHANGED_RECORDS_RATIO_CONFIG: "0.25",
                                         MAX_RECORD_BYTES_BETWEEN_SNAPSHOTS_CONFIG: "1024"})
    assert policy == SnapshotPolicy(0.25, 1024)
    assert SnapshotPolicy.from_config({}) == SnapshotPolicy()
    with pytest.raises(ValueError, match="bad snapshot setting"):
        SnapshotPolicy.from_config({MAX_RECORD_BYTES_BETWEEN_SNAPSHOTS_CONFIG: "lots"})


@pytest.mark.parametrize("arguments", [(-0.1, 1), (float("nan"), 1), (0.5, -1)])
def test_bad_settings_are_refused_by_name(arguments: tuple[float, int]) -> None:
    with pytest.raises(ValueError, match=r"metadata\."):
        SnapshotPolicy(*arguments)
