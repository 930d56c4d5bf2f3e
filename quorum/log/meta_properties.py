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

from quorum.log.atomic import atomic_write
from quorum.log.errors import CorruptFileError

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
    try:
        data = Path(path).read_bytes()
    except FileNotFoundError:
        return None
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise CorruptFileError(path, f"not UTF-8 text (byte {exc.start})") from None
    return MetaProperties.from_properties(parse_properties(text, path), path)


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


# ---------------------------------------------------------------------------------------------
# java.util.Properties text


_ESCAPES = {"t": "\t", "n": "\n", "r": "\r", "f": "\f"}
_SEPARATORS = "=:"
_WHITESPACE = " \t\f"


def _logical_lines(text: str) -> list[str]:
    """Join continued lines (an odd number of trailing backslashes), dropping comments and blanks."""
    lines: list[str] = []
    pending: str | None = None
    for raw in text.replace("\r\n", "\n").replace("\r", "\n").split("\n"):
        line = raw.lstrip(_WHITESPACE)
        if pending is None:
            if not line or line[0] in "#!":
                continue
        else:
            line = pending + line
        trailing = len(line) - len(line.rstrip("\\"))
        if trailing % 2:
            pending = line[:-1]
            continue
        pending = None
        lines.append(line)
    if pending is not None:
        lines.append(pending)
    return lines


def _unescape(text: str, path: Path | str) -> str:
    out = []
    i = 0
    while i < len(text):
        char = text[i]
        i += 1
        if char != "\\" or i == len(text):
            out.append(char)
            continue
        char = text[i]
        i += 1
        if char == "u":
            digits = text[i : i + 4]
            if len(digits) != 4 or any(d not in "0123456789abcdefABCDEF" for d in digits):
                raise CorruptFileError(path, f"malformed unicode escape {text[i - 2 : i + 4]!r}")
            out.append(chr(int(digits, 16)))
            i += 4
        else:
            out.append(_ESCAPES.get(char, char))
    # Java writes characters beyond the BMP as two \u escapes (a surrogate pair): join them.
    try:
        return "".join(out).encode("utf-16", "surrogatepass").decode("utf-16")
    except UnicodeError:
        raise CorruptFileError(path, f"unpaired surrogate in the escapes of {text!r}") from None


def parse_properties(text: str, path: Path | str = META_PROPERTIES_NAME) -> dict[str, str]:
    """Parse a Java properties file (java.util.Properties.load's rules)."""
    props: dict[str, str] = {}
    for line in _logical_lines(text):
        i = 0
        while i < len(line) and not (line[i] in _SEPARATORS or line[i] in _WHITESPACE):
            i += 2 if line[i] == "\\" else 1
        key = line[: min(i, len(line))]
        rest = line[min(i, len(line)) :].lstrip(_WHITESPACE)
        if rest[:1] and rest[0] in _SEPARATORS:
            rest = rest[1:].lstrip(_WHITESPACE)
        props[_unescape(key, path)] = _unescape(rest, path)
    return props


def _escape(text: str, is_key: bool) -> str:
    out = []
    for position, char in enumerate(text):
        if char == " " and (is_key or position == 0):
            out.append("\\ ")
        elif char in "\\=:#!":
            out.append("\\" + char)
        elif char in "\t\n\r\f":
            out.append("\\" + {"\t": "t", "\n": "n", "\r": "r", "\f": "f"}[char])
        elif ord(char) < 0x20 or ord(char) == 0x7F:
            out.append(f"\\u{ord(char):04X}")
        else:
            out.append(char)
    return "".join(out)


def format_properties(props: dict[str, str], comment: str | None = None) -> str:
    """Properties text as java.util.Properties.store(Writer) writes it (comment lines first):
    non-ASCII stays as it is (the file is UTF-8), control characters are escaped."""
    lines = [f"#{line}" for line in comment.split("\n")] if comment is not None else []
    lines += [f"{_escape(key, True)}={_escape(value, False)}" for key, value in props.items()]
    return "\n".join(lines) + "\n"
