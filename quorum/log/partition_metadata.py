"""`partition.metadata`: the topic id a partition directory belongs to, in Kafka's layout::

    version: 0
    topic_id: <topic id, Kafka's URL-safe base64 without padding>

Directory names carry only the topic's name, which a deleted and re-created topic shares with
its predecessor; the id in this file is how a broker tells the old topic's log (delete it) from
the new one's (keep it) after a restart, as Kafka's LogManager does. Written atomically.
"""

from __future__ import annotations

import base64
import binascii
import uuid
from pathlib import Path

from quorum.log.atomic import atomic_write, read_text_file
from quorum.log.errors import CorruptFileError

PARTITION_METADATA_NAME = "partition.metadata"
PARTITION_METADATA_VERSION = 0


def kafka_uuid_string(value: uuid.UUID) -> str:
    """Kafka's text form of a Uuid (its `toString`)."""
    return base64.urlsafe_b64encode(value.bytes).decode("ascii").rstrip("=")


def parse_kafka_uuid(text: str) -> uuid.UUID:
    """The Uuid of Kafka's text form; ValueError when it is not one."""
    try:
        raw = base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))
    except (binascii.Error, ValueError):
        raise ValueError(f"{text!r} is not base64") from None
    if len(raw) != 16:
        raise ValueError(f"{text!r} is {len(raw)} bytes, not 16")
    return uuid.UUID(bytes=raw)


def read_partition_metadata(directory: Path | str) -> uuid.UUID | None:
    """The topic id recorded in `directory`, None when no file was written; CorruptFileError names
    the file when it does not parse."""
    path = Path(directory) / PARTITION_METADATA_NAME
    text = read_text_file(path)
    if text is None:
        return None
    fields: dict[str, str] = {}
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        key, sep, value = line.partition(":")
        if not sep:
            raise CorruptFileError(path, f"line {number}: {line!r} is not 'key: value'")
        fields[key.strip()] = value.strip()
    if fields.get("version") != str(PARTITION_METADATA_VERSION):
        raise CorruptFileError(path, f"unrecognised version {fields.get('version')!r}")
    if "topic_id" not in fields:
        raise CorruptFileError(path, "no topic_id")
    try:
        return parse_kafka_uuid(fields["topic_id"])
    except ValueError as exc:
        raise CorruptFileError(path, f"topic_id: {exc}") from None


def write_partition_metadata(directory: Path | str, topic_id: uuid.UUID) -> None:
    """Durably record `topic_id` in `directory`."""
    text = f"version: {PARTITION_METADATA_VERSION}\ntopic_id: {kafka_uuid_string(topic_id)}\n"
    atomic_write(Path(directory) / PARTITION_METADATA_NAME, text.encode("ascii"))
