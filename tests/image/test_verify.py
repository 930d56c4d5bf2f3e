"""image_difference names the first field where two images part; ImageVerifier compares a node's
image with a replay of its snapshot plus log (`quorum.test.verify.image`, issue 21)."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from quorum.image.compare import image_difference
from quorum.image.image_state import ImageState
from quorum.image.replay import MetadataReplayer
from quorum.image.snapshot_policy import SnapshotPolicy
from quorum.image.verify import ImageDivergenceError, ImageVerifier, replayed_state, verify_image_enabled
from quorum.log import Log
from quorum.log.snapshot import SnapshotDirectory
from quorum.wire.records import Record, build_batch
from tests.image.records import TOPIC_IDS, change, config, partition, register, remove_topic, topic, unfence

T1, T2, T3 = TOPIC_IDS
NEVER = SnapshotPolicy(1.0, 1 << 62)
BATCHES = [
    [register(1), register(2), unfence(1), unfence(2)],
    [topic(T1, "fz-live"), partition(T1, 0), partition(T1, 1)],
    [config("fz-live", "retention.ms", "1000"), change(T1, 1, 2)],
    [topic(T2, "other"), partition(T2, 0)],
    [remove_topic(T1), topic(T3, "fz-live"), partition(T3, 0)],
]


def image_of(values: list[bytes]) -> ImageState:
    state = ImageState()
    for offset, value in enumerate(values):
        state.apply(offset, value)
    return state


def write_log(directory: Path, batches: list[list[bytes]]) -> Log:
    log = Log(directory)
    offset = 0
    for values in batches:
        records = [Record(offset + i, 0, None, value, []) for i, value in enumerate(values)]
        log.append(build_batch(records, base_offset=offset, partition_leader_epoch=1))
        offset += len(values)
    log.flush()
    return log


def flat(batches: list[list[bytes]]) -> list[bytes]:
    return [value for values in batches for value in values]


def test_equal_images_have_no_difference() -> None:
    values = flat(BATCHES)
    assert image_difference(image_of(values).image, image_of(values).image) is None


def test_a_missing_partition_is_named() -> None:
    whole = image_of(flat(BATCHES[:2])).image
    without = image_of(flat(BATCHES[:2])[:-1]).image
    assert image_difference(whole, without, ignore=frozenset({"offset"})) == (
        "image.topics['fz-live'].partitions: 2 items != 1 items")


def test_a_changed_field_is_named_with_its_path() -> None:
    image = image_of(flat(BATCHES[:3])).image
    topic_info = image.topics["fz-live"]
    changed = dataclasses.replace(topic_info.partitions[1], isr=(1,))
    other = dataclasses.replace(topic_info, partitions=(topic_info.partitions[0], changed))
    altered = dataclasses.replace(image, topics={"fz-live": other}, topics_by_id={T1: other})
    assert image_difference(image, altered) == "image.topics['fz-live'].partitions[1].isr: (1, 2) != (1,)"


def test_topics_by_id_and_order_are_compared() -> None:
    image = image_of(flat(BATCHES[:4])).image
    swapped = dataclasses.replace(image, topics=dict(reversed(list(image.topics.items()))))
    assert image_difference(image, swapped) == "image.topics order at position 0: 'fz-live' != 'other'"
    stale_index = dataclasses.replace(image, topics_by_id={})
    assert image_difference(image, stale_index).startswith("image.topics_by_id[UUID(")


@pytest.mark.parametrize(("step_s", "full_replays"), [(0.0, 1), (1e9, len(BATCHES))])
def test_replay_from_the_log_and_from_a_snapshot_equals_the_incremental_image(tmp_path: Path, step_s: float,
                                                                               full_replays: int) -> None:
    """A clock that stands still: one full replay, then the reference advances by the log; one that
    races: a full replay (from the snapshot once there is one) at every check."""
    now = [0.0]
    with write_log(tmp_path, BATCHES) as log:
        state = ImageState()
        replayer = MetadataReplayer(tmp_path, log, state, NEVER)
        replayer.boot()
        verifier = ImageVerifier(1, tmp_path, log, replayer.snapshots, clock=lambda: now[0])
        end = 0
        for values in BATCHES:
            end += len(values)
            replayer.catch_up(end)
            now[0] += step_s
            verifier.check(state.image, replayer.applied_offset)
            if end == 9:
                replayer.snapshot_now()  # later checks load it and replay the rest of the log
        assert (verifier.checks, verifier.full_replays, verifier.skipped) == (len(BATCHES), full_replays, 0)
        assert replayer.snapshots.latest_snapshot() is not None


def test_the_reference_advanced_by_the_log_still_finds_a_lost_record(tmp_path: Path) -> None:
    with write_log(tmp_path, BATCHES[:2]) as log:
        verifier = ImageVerifier(101, tmp_path, log, SnapshotDirectory(tmp_path), clock=lambda: 0.0)
        verifier.check(image_of(flat(BATCHES[:1])).image, 4)  # the full replay, up to offset 4
        lost = image_of(flat(BATCHES[:2])[:-1]).image
        with pytest.raises(ImageDivergenceError, match=r"read by the check .*partitions: 1 items != 2 items"):
            verifier.check(lost, 7)
    assert verifier.full_replays == 1


def test_a_divergence_names_node_offset_and_field(tmp_path: Path) -> None:
    with write_log(tmp_path, BATCHES[:2]) as log:
        verifier = ImageVerifier(101, tmp_path, log, SnapshotDirectory(tmp_path))
        lost = image_of(flat(BATCHES[:2])[:-1]).image  # the node lost the last PartitionRecord
        with pytest.raises(ImageDivergenceError) as caught:
            verifier.check(lost, 7)
    message = str(caught.value)
    assert "node 101" in message and "offset 7" in message
    assert message.endswith("image.topics['fz-live'].partitions: 1 items != 2 items")


def test_a_log_that_starts_past_the_snapshot_is_not_checked(tmp_path: Path) -> None:
    with write_log(tmp_path, BATCHES) as log:
        log.advance_start_offset(4)
        assert replayed_state(tmp_path, log, SnapshotDirectory(tmp_path), 9, ImageState().image) is None


@pytest.mark.parametrize(("props", "environ", "expected"), [
    ({}, {}, False),
    ({}, {"QUORUM_TEST_VERIFY_IMAGE": "true"}, True),
    ({"quorum.test.verify.image": "false"}, {"QUORUM_TEST_VERIFY_IMAGE": "true"}, False),
    ({"quorum.test.verify.image": " TRUE "}, {}, True),
])
def test_the_setting_and_its_environment_default(props, environ, expected) -> None:
    assert verify_image_enabled(props, environ) is expected


def test_a_malformed_setting_names_its_source() -> None:
    with pytest.raises(ValueError, match="quorum.test.verify.image must be true or false, not 'yes'"):
        verify_image_enabled({"quorum.test.verify.image": "yes"}, {})
    with pytest.raises(ValueError, match="QUORUM_TEST_VERIFY_IMAGE must be true or false, not '1'"):
        verify_image_enabled({}, {"QUORUM_TEST_VERIFY_IMAGE": "1"})
