"""KIP-232 internal metadata, and how it shares a committed offset's one metadata string with the user's.

The KIP gives the internal metadata as JSON: `{"version": 1, "topic_epoch": int, "leader_epoch": int}`.
This project adds an optional `"topic_id"`: the topic's id as Kafka prints it (URL-safe base64 of the
16 bytes, unpadded), so an offset says which incarnation of its topic it belongs to. A topic epoch
alone cannot tell a recreated topic from one that gained partitions; the id can, with certainty.
The key is optional within version 1 rather than a version 2 because readers ignore keys they do
not know: an older SDK or broker reads a new string and keeps its epoch checks, where a version 2
would make it refuse every commit a newer consumer makes (INVALID_INTERNAL_METADATA); and a
string without the key (older commits, clusters without topic ids) still parses.

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

import base64
import binascii
import json
import uuid
from dataclasses import dataclass
from functools import total_ordering

PREFIX = "kip232:"
"""Marks a metadata string that starts with internal metadata."""
VERSION = 1
"""The only internal metadata version (KIP-232)."""
_INT32 = range(-(2**31), 2**31)
_ZERO_UUID = uuid.UUID(int=0)


def topic_id_text(topic_id: uuid.UUID) -> str:
    """A topic id as Kafka prints it (Uuid.toString): URL-safe base64 of its 16 bytes, unpadded."""
    return base64.urlsafe_b64encode(topic_id.bytes).rstrip(b"=").decode("ascii")


def parse_topic_id(text: object) -> uuid.UUID:
    """The topic id Kafka's text names; InvalidInternalMetadataError for anything else."""
    if not isinstance(text, str) or len(text) != 22:
        raise InvalidInternalMetadataError(f"internal metadata topic_id {text!r} is not a 22-character "
                                           f"base64 topic id")
    try:
        raw = base64.urlsafe_b64decode(text + "==")
    except (binascii.Error, ValueError):
        raw = b""
    if len(raw) != 16 or topic_id_text(uuid.UUID(bytes=raw)) != text:
        raise InvalidInternalMetadataError(f"internal metadata topic_id {text!r} is not a base64 topic id")
    return uuid.UUID(bytes=raw)


class InvalidInternalMetadataError(ValueError):
    """A metadata string that claims internal metadata (it has the prefix) but does not hold a valid one."""


@total_ordering
@dataclass(frozen=True, slots=True)
class InternalMetadata:
    """The epochs a committed offset was read under; ordered as KIP-232 compares them.

    Older means a smaller topic_epoch, or the same topic_epoch and a smaller leader_epoch. The
    topic id (None: unknown) is not part of that order: a different id is another topic altogether.
    """

    topic_epoch: int
    leader_epoch: int
    topic_id: uuid.UUID | None = None

    def __post_init__(self) -> None:
        if self.topic_id == _ZERO_UUID:  # Kafka's "no topic id"
            object.__setattr__(self, "topic_id", None)

    @property
    def is_unknown(self) -> bool:
        """No epoch and no topic id: metadata that names nothing to wait for or to compare with,
        which KIP-232 treats as no internal metadata at all."""
        return self.topic_epoch < 0 and self.leader_epoch < 0 and self.topic_id is None

    def __lt__(self, other: object) -> bool:
        if not isinstance(other, InternalMetadata):
            return NotImplemented
        return (self.topic_epoch, self.leader_epoch) < (other.topic_epoch, other.leader_epoch)

    def to_json(self) -> str:
        data: dict[str, object] = {"version": VERSION, "topic_epoch": self.topic_epoch,
                                   "leader_epoch": self.leader_epoch}
        if self.topic_id is not None:
            data["topic_id"] = topic_id_text(self.topic_id)
        return json.dumps(data, separators=(",", ":"))

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
        topic_id = data.get("topic_id")
        return cls(*epochs, None if topic_id is None else parse_topic_id(topic_id))


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
