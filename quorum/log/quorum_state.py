"""The `quorum-state` file: the election state a KRaft voter must never forget (KIP-595).

A voter that granted its vote in an epoch must still know it after `kill -9`, or it could vote
twice and let two leaders be elected in one epoch; hence the atomic, fsynced replacement. The
layout is Kafka's (FileQuorumStateStore): the JSON form of QuorumStateData on one line, plus a
`data_version` field. Version 0, which Kafka writes with a static voter set and this project
writes::

    {"clusterId":"","leaderId":1,"leaderEpoch":2,"votedId":-1,"appliedOffset":0,
     "currentVoters":[{"voterId":1},{"voterId":2},{"voterId":3}],"data_version":0}

Version 1 (KIP-853 dynamic voters: `votedDirectoryId`, no clusterId / appliedOffset /
currentVoters) is read too, so a directory Kafka wrote can be opened. A file that does not parse
is refused with its path: guessing an election state could break the one-vote-per-epoch rule.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from quorum.log.atomic import atomic_write, read_text_file
from quorum.log.errors import CorruptFileError

QUORUM_STATE_NAME = "quorum-state"
SUPPORTED_VERSIONS = (0, 1)
_INT32 = (-(2**31), 2**31 - 1)
_INT64 = (-(2**63), 2**63 - 1)


@dataclass(frozen=True, slots=True)
class QuorumState:
    """One election state. -1 means none for `leader_id` and `voted_id`, as in Kafka."""

    leader_epoch: int
    leader_id: int = -1
    voted_id: int = -1
    current_voters: tuple[int, ...] | None = ()
    applied_offset: int = 0
    #: Version 0 only; Kafka writes "" (the cluster id lives in meta.properties).
    cluster_id: str = ""
    #: Version 1 only: the voted replica's directory id (a Kafka Uuid string).
    voted_directory_id: str | None = None
    data_version: int = 0

    def to_json(self) -> str:
        """The file's content: compact JSON in Kafka's field order, as Jackson writes it."""
        if self.data_version == 0:
            voters = None if self.current_voters is None else [{"voterId": v} for v in self.current_voters]
            fields: dict[str, object] = {
                "clusterId": self.cluster_id,
                "leaderId": self.leader_id,
                "leaderEpoch": self.leader_epoch,
                "votedId": self.voted_id,
                "appliedOffset": self.applied_offset,
                "currentVoters": voters,
            }
        elif self.data_version == 1:
            fields = {
                "leaderId": self.leader_id,
                "leaderEpoch": self.leader_epoch,
                "votedId": self.voted_id,
                "votedDirectoryId": self.voted_directory_id or "AAAAAAAAAAAAAAAAAAAAAA",
            }
        else:
            raise ValueError(f"quorum-state data_version {self.data_version} is not one of {SUPPORTED_VERSIONS}")
        fields["data_version"] = self.data_version
        return json.dumps(fields, separators=(",", ":"))

    @classmethod
    def from_json(cls, text: str, path: Path | str = QUORUM_STATE_NAME) -> QuorumState:
        """Parse the first line of a quorum-state file, as Kafka does; CorruptFileError names `path`."""
        line = text.split("\n", 1)[0]
        if not line.strip():
            raise CorruptFileError(path, "empty quorum-state file")
        try:
            node = json.loads(line)
        except json.JSONDecodeError as exc:
            raise CorruptFileError(path, f"not JSON: {exc}") from None
        if not isinstance(node, dict):
            raise CorruptFileError(path, f"not a JSON object: {line[:80]!r}")
        version = _field(node, "data_version", int, path, _INT32)
        if version not in SUPPORTED_VERSIONS:
            raise CorruptFileError(path, f"data_version {version} is not one of the supported {SUPPORTED_VERSIONS}")
        leader_id = _field(node, "leaderId", int, path, _INT32)
        leader_epoch = _field(node, "leaderEpoch", int, path, _INT32)
        voted_id = _field(node, "votedId", int, path, _INT32)
        if version == 1:
            directory = _field(node, "votedDirectoryId", str, path)
            return cls(leader_epoch, leader_id, voted_id, None, 0, "", directory, 1)
        cluster_id = node.get("clusterId", "")
        if not isinstance(cluster_id, str):
            raise CorruptFileError(path, f"clusterId {cluster_id!r} is not a string")
        applied_offset = _field(node, "appliedOffset", int, path, _INT64)
        if "currentVoters" not in node:
            raise CorruptFileError(path, "field 'currentVoters' is missing (mandatory in version 0)")
        raw_voters = node["currentVoters"]
        voters: tuple[int, ...] | None = None
        if raw_voters is not None:
            if not isinstance(raw_voters, list):
                raise CorruptFileError(path, f"currentVoters {raw_voters!r} is not a list")
            voters = tuple(
                _field(voter, "voterId", int, path, _INT32) if isinstance(voter, dict) else _not_voter(voter, path)
                for voter in raw_voters
            )
        return cls(leader_epoch, leader_id, voted_id, voters, applied_offset, cluster_id, None, 0)


def _field(node: dict, name: str, kind: type, path: Path | str, bounds: tuple[int, int] | None = None):  # noqa: ANN202
    if name not in node:
        raise CorruptFileError(path, f"field {name!r} is missing")
    value = node[name]
    if not isinstance(value, kind) or isinstance(value, bool):
        raise CorruptFileError(path, f"field {name!r} is {value!r}, not {'an integer' if kind is int else 'a string'}")
    if bounds is not None and not bounds[0] <= value <= bounds[1]:
        raise CorruptFileError(path, f"field {name!r} = {value} is out of range")
    return value


def _not_voter(voter: object, path: Path | str) -> int:
    raise CorruptFileError(path, f"currentVoters entry {voter!r} is not an object with a voterId")


def read_quorum_state(path: Path | str) -> QuorumState | None:
    """The state in `path`, None when the file does not exist (a node that never voted)."""
    text = read_text_file(path)
    if text is None:
        return None
    return QuorumState.from_json(text, path)


def write_quorum_state(path: Path | str, state: QuorumState) -> None:
    """Durably replace `path` with `state` (tmp, fsync, rename, fsync the directory)."""
    atomic_write(path, state.to_json().encode("utf-8"))
