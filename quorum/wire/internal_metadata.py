"""KIP-232 internal metadata, and how it shares a committed offset's one metadata string with the user's.

The KIP gives the internal metadata as JSON: `{"version": 1, "topic_epoch": int, "leader_epoch": int}`.
Real clients (confluent-kafka, kafka-python) commit one metadata string per offset, so the SDK stores
both in it:

    "kip232:" + compact JSON + "\\n" + user metadata

A string without the `kip232:` prefix carries no internal metadata and is all user metadata, so
offsets committed by any other client read back unchanged. The JSON never contains a newline
(compact encoding escapes them), so the first newline ends it and the user's metadata may hold
anything, newlines and the prefix included.

Both the broker (which refuses commits whose epochs go backwards) and `client_epochs` (which writes
and reads these strings) use this module, so the format lives in exactly one place.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from functools import total_ordering

PREFIX = "kip232:"
"""Marks a metadata string that starts with internal metadata."""
VERSION = 1
"""The only internal metadata version (KIP-232)."""
_INT32 = range(-(2**31), 2**31)


class InvalidInternalMetadataError(ValueError):
    """A metadata string that claims internal metadata (it has the prefix) but does not hold a valid one."""


@total_ordering
@dataclass(frozen=True, slots=True)
class InternalMetadata:
    """The epochs a committed offset was read under; ordered as KIP-232 compares them.

    Older means a smaller topic_epoch, or the same topic_epoch and a smaller leader_epoch.
    """

    topic_epoch: int
    leader_epoch: int

    def __lt__(self, other: object) -> bool:
        if not isinstance(other, InternalMetadata):
            return NotImplemented
        return (self.topic_epoch, self.leader_epoch) < (other.topic_epoch, other.leader_epoch)

    def to_json(self) -> str:
        return json.dumps({"version": VERSION, "topic_epoch": self.topic_epoch, "leader_epoch": self.leader_epoch},
                          separators=(",", ":"))

    @classmethod
    def from_json(cls, text: str) -> InternalMetadata:
        """Parse the KIP's JSON; InvalidInternalMetadataError says what is wrong."""
        try:
            data = json.loads(text)
        except (ValueError, RecursionError) as exc:
            raise InvalidInternalMetadataError(f"internal metadata is not JSON: {exc}") from None
        if not isinstance(data, dict):
            raise InvalidInternalMetadataError(f"internal metadata is a JSON {type(data).__name__}, not an object")
        version = data.get("version")
        if type(version) is not int:
            raise InvalidInternalMetadataError(f"internal metadata version {version!r} is not an integer")
        if version != VERSION:
            raise InvalidInternalMetadataError(f"unknown internal metadata version {version} (only {VERSION} is known)")
        epochs = []
        for name in ("topic_epoch", "leader_epoch"):
            value = data.get(name)
            if type(value) is not int or value not in _INT32:
                raise InvalidInternalMetadataError(f"internal metadata {name} {value!r} is not an int32")
            epochs.append(value)
        return cls(*epochs)


def encode(user_metadata: str | None, internal: InternalMetadata | None) -> str:
    """The metadata string to commit: the user's alone without internal metadata, else both."""
    user = user_metadata or ""
    if internal is None:
        return user
    return f"{PREFIX}{internal.to_json()}\n{user}"


def decode(metadata: str | None) -> tuple[str, InternalMetadata | None]:
    """(user metadata, internal metadata or None) from a committed metadata string.

    Raises InvalidInternalMetadataError when the prefix is there but what follows is not valid.
    """
    if metadata is None or not metadata.startswith(PREFIX):
        return metadata or "", None
    head, newline, user = metadata[len(PREFIX):].partition("\n")
    if not newline:
        raise InvalidInternalMetadataError("internal metadata is not ended by a newline before the user metadata")
    return user, InternalMetadata.from_json(head)
