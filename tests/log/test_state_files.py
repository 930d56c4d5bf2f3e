"""quorum-state and meta.properties in Kafka's layouts, and the atomic replacement under them."""

from __future__ import annotations

import contextlib
import json
import os
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from quorum.log import (
    CorruptFileError,
    MetaProperties,
    QuorumState,
    atomic_write,
    random_kafka_uuid,
    read_meta_properties,
    read_quorum_state,
    write_meta_properties,
    write_quorum_state,
)
from quorum.log.meta_properties import is_kafka_uuid
from quorum.wire.properties import format_properties, parse_properties

# -- atomic_write ------------------------------------------------------------------------------


def test_atomic_write_replaces_and_leaves_no_tmp(tmp_path: Path) -> None:
    path = tmp_path / "state"
    atomic_write(path, b"one")
    atomic_write(path, b"two")
    assert path.read_bytes() == b"two"
    assert os.listdir(tmp_path) == ["state"]


def test_a_failed_atomic_write_keeps_the_old_content(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "state"
    atomic_write(path, b"old")

    def failing_fsync(fd: int) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "fsync", failing_fsync)
    with pytest.raises(OSError):
        atomic_write(path, b"new")
    monkeypatch.undo()
    assert path.read_bytes() == b"old"
    assert os.listdir(tmp_path) == ["state"]


def test_atomic_write_fsyncs_the_file_before_the_rename_and_the_directory_after(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    events: list[str] = []
    real_fsync, real_replace = os.fsync, os.replace

    def fsync(fd: int) -> None:
        events.append("fsync-dir" if os.path.isdir(f"/proc/self/fd/{fd}") else "fsync-file")
        real_fsync(fd)

    def replace(src: str, dst: str) -> None:
        events.append("rename")
        real_replace(src, dst)

    monkeypatch.setattr(os, "fsync", fsync)
    monkeypatch.setattr(os, "replace", replace)
    atomic_write(tmp_path / "state", b"x")
    assert events == ["fsync-file", "rename", "fsync-dir"]


# -- quorum-state ------------------------------------------------------------------------------


def test_quorum_state_is_written_as_kafka_writes_version_0(tmp_path: Path) -> None:
    path = tmp_path / "quorum-state"
    state = QuorumState(leader_epoch=2, leader_id=1, voted_id=-1, current_voters=(1, 2, 3))
    write_quorum_state(path, state)
    assert path.read_text() == (
        '{"clusterId":"","leaderId":1,"leaderEpoch":2,"votedId":-1,"appliedOffset":0,'
        '"currentVoters":[{"voterId":1},{"voterId":2},{"voterId":3}],"data_version":0}'
    )
    assert read_quorum_state(path) == state
    assert os.listdir(tmp_path) == ["quorum-state"]
    assert read_quorum_state(tmp_path / "nothing") is None


def test_quorum_state_reads_what_kafka_wrote() -> None:
    # FileQuorumStateStore's documented examples, version 0 and 1 (KIP-853)
    v0 = QuorumState.from_json(
        '{"clusterId":"","leaderId":1,"leaderEpoch":2,"votedId":-1,"appliedOffset":0,"currentVoters":[],'
        '"data_version":0}'
    )
    assert v0 == QuorumState(2, 1, -1, (), 0, "", None, 0)
    v1 = QuorumState.from_json(
        '{"leaderId":-1,"leaderEpoch":2,"votedId":1,"votedDirectoryId":"J8aAPcfLQt2bqs1JT_rMgQ","data_version":1}\n'
    )
    assert (v1.leader_epoch, v1.leader_id, v1.voted_id, v1.voted_directory_id) == (2, -1, 1, "J8aAPcfLQt2bqs1JT_rMgQ")
    assert QuorumState.from_json(v1.to_json()) == v1
    # currentVoters may be null (nullableVersions 0+), clusterId absent in newer writers
    nulls = QuorumState.from_json(
        '{"leaderId":-1,"leaderEpoch":0,"votedId":-1,"appliedOffset":0,"currentVoters":null,"data_version":0}'
    )
    assert nulls.current_voters is None
    assert QuorumState.from_json(nulls.to_json()) == nulls


GOOD = {"clusterId": "", "leaderId": 1, "leaderEpoch": 2, "votedId": -1, "appliedOffset": 0,
        "currentVoters": [{"voterId": 1}], "data_version": 0}  # fmt: skip


@pytest.mark.parametrize(
    "content, reason",
    [
        ("", "empty"),
        ('{"leaderId": 1', "not JSON"),
        ("[1, 2]", "not a JSON object"),
        (json.dumps({k: v for k, v in GOOD.items() if k != "data_version"}), "'data_version' is missing"),
        (json.dumps({**GOOD, "data_version": 7}), "data_version 7 is not one of"),
        (json.dumps({k: v for k, v in GOOD.items() if k != "votedId"}), "'votedId' is missing"),
        (json.dumps({**GOOD, "leaderEpoch": "2"}), "'leaderEpoch' is '2', not an integer"),
        (json.dumps({**GOOD, "leaderEpoch": True}), "not an integer"),
        (json.dumps({**GOOD, "leaderId": 2**31}), "out of range"),
        (json.dumps({k: v for k, v in GOOD.items() if k != "currentVoters"}), "'currentVoters' is missing"),
        (json.dumps({**GOOD, "currentVoters": [1]}), "not an object with a voterId"),
        (json.dumps({**GOOD, "currentVoters": {"voterId": 1}}), "is not a list"),
        (json.dumps({**GOOD, "clusterId": 5}), "clusterId 5 is not a string"),
    ],
)
def test_a_corrupt_quorum_state_is_refused_with_its_path(tmp_path: Path, content: str, reason: str) -> None:
    path = tmp_path / "quorum-state"
    path.write_text(content)
    with pytest.raises(CorruptFileError, match=reason) as caught:
        read_quorum_state(path)
    assert caught.value.path == path


def test_quorum_state_that_is_not_text_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "quorum-state"
    path.write_bytes(b"\xff\xfe{}")
    with pytest.raises(CorruptFileError, match="not UTF-8"):
        read_quorum_state(path)


int32 = st.integers(-(2**31), 2**31 - 1)


@settings(max_examples=200, deadline=None)
@given(int32, int32, int32, st.none() | st.lists(int32, max_size=5).map(tuple), st.integers(0, 2**63 - 1))
def test_quorum_state_round_trip(epoch: int, leader: int, voted: int, voters, applied: int) -> None:  # noqa: ANN001
    state = QuorumState(epoch, leader, voted, voters, applied)
    assert QuorumState.from_json(state.to_json()) == state


@settings(max_examples=300, deadline=None)
@given(st.text(max_size=80))
def test_quorum_state_garbage_gives_a_clean_error(text: str) -> None:
    with contextlib.suppress(CorruptFileError):
        QuorumState.from_json(text)


# -- meta.properties ---------------------------------------------------------------------------


def test_meta_properties_round_trip_in_kafka_layout(tmp_path: Path) -> None:
    path = tmp_path / "meta.properties"
    meta = MetaProperties(node_id=3, cluster_id="MkU3OEVBNTcwNTJENDM2Qk", directory_id="J8aAPcfLQt2bqs1JT_rMgQ")
    write_meta_properties(path, meta)
    lines = path.read_text().splitlines()
    assert lines[0] == "#" and lines[1].startswith("#")  # Properties.store's comment and date
    assert lines[2:] == [
        "version=1", "node.id=3", "cluster.id=MkU3OEVBNTcwNTJENDM2Qk", "directory.id=J8aAPcfLQt2bqs1JT_rMgQ",
    ]  # fmt: skip
    assert read_meta_properties(path) == meta
    assert read_meta_properties(tmp_path / "none") is None
    assert os.listdir(tmp_path) == ["meta.properties"]


def test_meta_properties_reads_java_properties_syntax(tmp_path: Path) -> None:
    path = tmp_path / "meta.properties"
    path.write_text(
        "#\n#Tue Nov 18 10:00:00 UTC 2025\n! another comment\n"
        "cluster.id : abc\\\n   def\nnode.id   7\n  version=1\ndirectory.id=J8aAPcfLQt2bqs1JT_rMgQ\n"
    )
    assert read_meta_properties(path) == MetaProperties(7, "abcdef", "J8aAPcfLQt2bqs1JT_rMgQ", 1)
    # ZooKeeper-era version 0 names the node broker.id
    path.write_text("version=0\nbroker.id=5\ncluster.id=xyz\n")
    assert read_meta_properties(path) == MetaProperties(5, "xyz", None, 0)


@pytest.mark.parametrize(
    "content, reason",
    [
        ("version=2\nnode.id=1\ncluster.id=x\n", "version '2' is not 0 or 1"),
        ("version=1\ncluster.id=x\n", "node.id was not found"),
        ("version=1\nnode.id=one\ncluster.id=x\n", "node.id 'one' is not an integer"),
        ("version=1\nnode.id=1\n", "cluster.id was not found"),
        ("version=1\nnode.id=1\ncluster.id=x\ndirectory.id=short\n", "directory.id 'short' is not a Kafka Uuid"),
        ("version=1\nnode.id=1\ncluster.id=\\u12\n", "malformed unicode escape"),
        ("version=1\nnode.id=1\ncluster.id=\\uD800\n", "unpaired surrogate"),
    ],
)
def test_a_corrupt_meta_properties_is_refused_with_its_path(tmp_path: Path, content: str, reason: str) -> None:
    path = tmp_path / "meta.properties"
    path.write_text(content)
    with pytest.raises(CorruptFileError, match=reason) as caught:
        read_meta_properties(path)
    assert caught.value.path == path


def test_random_kafka_uuids() -> None:
    ids = {random_kafka_uuid() for _ in range(200)}
    assert len(ids) == 200
    assert all(is_kafka_uuid(i) and not i.startswith("-") for i in ids)


@settings(max_examples=300, deadline=None)
@given(st.dictionaries(st.text(min_size=1, max_size=10), st.text(max_size=20), max_size=5))
def test_properties_round_trip(props: dict[str, str]) -> None:
    assert parse_properties(format_properties(props, "comment")) == props
