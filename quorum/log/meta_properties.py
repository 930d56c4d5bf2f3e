"""`meta.properties`: which cluster and node a log directory belongs to, in Kafka's layout.

Kafka refuses to start on a directory whose cluster.id or node.id disagrees with its own, which
is what stops a disk moved between machines, or a node pointed at another cluster's quorum, from
mixing histories. The file is a Java properties file; version 1 (KRaft) holds::

    #
    #<date>
    version=1
    node.id=1
    cluster.id=MkU3OEVBNTcwNTJENDM2Qk
    directory.id=J8aAPcfLQt2bqs1JT_rMgQ

Java's properties syntax (comments, `=`/`:`/space separators, backslash escapes and line
continuations) is read and written here, because Kafka's tools write it with
java.util.Properties.store. Version 0 (ZooKeeper-era: broker.id) is read for completeness.
"""

from __future__ import annotations

import base64
import binascii
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

from quorum.log.atomic import atomic_write, read_text_file
from quorum.log.errors import CorruptFileError
from quorum.wire.properties import PropertiesError, format_properties, parse_properties

META_PROPERTIES_NAME = "meta.properties"


@dataclass(frozen=True, slots=True)
class MetaProperties:
    node_id: int
    cluster_id: str
    directory_id: str | None = None
    version: int = 1

    def to_properties(self) -> dict[str, str]:
        props = {"version": str(self.version)}
        props["node.id" if self.version == 1 else "broker.id"] = str(self.node_id)
        props["cluster.id"] = self.cluster_id
        if self.directory_id is not None:
            props["directory.id"] = self.directory_id
        return props

    @classmethod
    def from_properties(cls, props: dict[str, str], path: Path | str = META_PROPERTIES_NAME) -> MetaProperties:
        """As Kafka's MetaProperties.Builder: version 1 needs node.id and cluster.id."""
        version_text = props.get("version", "0")
        if version_text not in ("0", "1"):
            raise CorruptFileError(path, f"version {version_text!r} is not 0 or 1")
        version = int(version_text)
        id_key = "node.id" if version == 1 else "broker.id"
        if id_key not in props:
            raise CorruptFileError(path, f"{id_key} was not found")
        try:
            node_id = int(props[id_key])
        except ValueError:
            raise CorruptFileError(path, f"{id_key} {props[id_key]!r} is not an integer") from None
        if not -(2**31) <= node_id < 2**31:
            raise CorruptFileError(path, f"{id_key} {node_id} does not fit int32")
        cluster_id = props.get("cluster.id")
        if cluster_id is None:
            raise CorruptFileError(path, "cluster.id was not found")
        directory_id = props.get("directory.id")
        if directory_id is not None and not is_kafka_uuid(directory_id):
            raise CorruptFileError(path, f"directory.id {directory_id!r} is not a Kafka Uuid")
        return cls(node_id, cluster_id, directory_id, version)


def read_meta_properties(path: Path | str) -> MetaProperties | None:
    """The file's content, None when there is none (a directory not formatted yet)."""
    text = read_text_file(path)
    if text is None:
        return None
    try:
        props = parse_properties(text)
    except PropertiesError as exc:
        raise CorruptFileError(path, str(exc)) from None
    return MetaProperties.from_properties(props, path)


def write_meta_properties(path: Path | str, meta: MetaProperties) -> None:
    """Durably replace `path` (tmp, fsync, rename, fsync the directory), as Kafka's tools write it."""
    stamp = time.strftime("%a %b %d %H:%M:%S UTC %Y", time.gmtime())
    atomic_write(path, format_properties(meta.to_properties(), f"\n{stamp}").encode("utf-8"))


# ---------------------------------------------------------------------------------------------
# Kafka Uuid strings


def is_kafka_uuid(text: str) -> bool:
    """Whether `text` is a Kafka Uuid: 16 bytes in URL-safe base64 without padding (22 chars)."""
    if len(text) != 22:
        return False
    try:
        return len(base64.urlsafe_b64decode(text + "==")) == 16
    except (binascii.Error, ValueError):
        return False


def random_kafka_uuid() -> str:
    """A new id as Kafka's Uuid.randomUuid makes them (what `kafka-storage random-uuid` prints):
    never one of the reserved ids below 100, never starting with '-' (it would read as an option)."""
    while True:
        value = uuid.uuid4().bytes
        if value[:8] == bytes(8) and int.from_bytes(value[8:], "big") < 100:
            continue
        text = base64.urlsafe_b64encode(value).decode("ascii").rstrip("=")
        if not text.startswith("-"):
            return text
