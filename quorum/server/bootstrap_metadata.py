"""Bootstrap metadata: records `quorum storage format` puts in `bootstrap.checkpoint` for the first
active controller to write into the metadata log, as kafka-storage.sh does (`--add-scram`, KIP-900).

The file sits in the node's metadata log dir (the first of `log.dirs`), beside
`__cluster_metadata-0`, in the snapshot file format (header, the records, footer; CRC-checked on
reading). It starts with a FeatureLevelRecord `metadata.version` 11 (Kafka's 3.5-IV2, the first
level with SCRAM in KRaft): an active controller whose image has no `metadata.version` has never
had the bootstrap records committed, and appends them before anything else (Kafka appends its
bootstrap records when the log is empty); once they are in the log, later leaders and restarts
leave them alone, so a credential deleted afterwards is never brought back.

`--add-scram` takes Kafka's syntax, `MECHANISM=[name=NAME,password=PASSWORD]`, or with
`salt=BASE64,saltedpassword=BASE64` instead of the password; `iterations=` (4096 by default,
at most 16384) in either form; values may be quoted ("...").
"""

from __future__ import annotations

import base64
import binascii
import os
import re
import shutil
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

from quorum.image.delta import MetadataDelta
from quorum.image.image import MetadataImage
from quorum.log.snapshot import SnapshotWriter
from quorum.log.snapshot_format import check_batch, validate_snapshot, walk_file
from quorum.raft.interface import OffsetAndEpoch
from quorum.security.scram import (
    MAX_ITERATIONS,
    MECHANISMS,
    MIN_ITERATIONS,
    ScramCredential,
    credential_of_salted,
    make_credential,
)
from quorum.security.scram_records import encode_scram
from quorum.wire import metadata_records as mr

BOOTSTRAP_FILE = "bootstrap.checkpoint"
METADATA_VERSION = "metadata.version"
SCRAM_METADATA_VERSION = 11
"""Kafka's MetadataVersion 3.5-IV2 ("KRaft support for SCRAM")."""

_ADD_SCRAM = re.compile(r"^\s*(?P<mechanism>[^=\s\[]+)\s*=\s*\[(?P<fields>.*)\]\s*$", re.DOTALL)
_FIELD = re.compile(r'\s*(?P<key>[A-Za-z]+)\s*=\s*(?:"(?P<quoted>[^"]*)"|(?P<bare>[^,"]*))\s*(?:,|$)')
_KEYS = ("name", "password", "salt", "saltedpassword", "iterations")


class BootstrapError(ValueError):
    """A bad `--add-scram` argument or a bootstrap file that cannot be read; says which part."""


def parse_add_scram(text: str) -> bytes:
    """The UserScramCredentialRecord one `--add-scram` argument asks for (BootstrapError naming the
    bad part otherwise)."""
    match = _ADD_SCRAM.match(text)
    if match is None:
        raise BootstrapError(f"--add-scram {text!r}: expected MECHANISM=[name=NAME,password=PASSWORD] "
                             f"(or salt=...,saltedpassword=... instead of password)")
    mechanism = match["mechanism"].upper()
    if mechanism not in MECHANISMS:
        raise BootstrapError(f"--add-scram {text!r}: unknown SCRAM mechanism {match['mechanism']!r} "
                             f"(known: {', '.join(MECHANISMS)})")
    fields: dict[str, str] = {}
    rest = match["fields"]
    while rest.strip():
        field = _FIELD.match(rest)
        if field is None or field.end() == 0:
            raise BootstrapError(f"--add-scram {text!r}: cannot read {rest.strip()[:40]!r} (key=value, ...)")
        key = field["key"].lower()
        if key not in _KEYS:
            raise BootstrapError(f"--add-scram {text!r}: unknown key {field['key']!r} (known: {', '.join(_KEYS)})")
        if key in fields:
            raise BootstrapError(f"--add-scram {text!r}: {key} given twice")
        fields[key] = field["quoted"] if field["quoted"] is not None else field["bare"].strip()
        rest = rest[field.end():]
    name = fields.get("name", "")
    if not name:
        raise BootstrapError(f"--add-scram {text!r}: name= is missing or empty")
    iterations = _iterations(text, fields.get("iterations"))
    if "password" in fields:
        if "saltedpassword" in fields:
            raise BootstrapError(f"--add-scram {text!r}: give password or saltedpassword, not both")
        salt = _base64(text, "salt", fields["salt"]) if "salt" in fields else None
        credential = make_credential(mechanism, fields["password"], iterations, salt)
    elif "saltedpassword" in fields:
        if "salt" not in fields:
            raise BootstrapError(f"--add-scram {text!r}: saltedpassword needs salt=")
        credential = credential_of_salted(mechanism, _base64(text, "salt", fields["salt"]),
                                          _base64(text, "saltedpassword", fields["saltedpassword"]), iterations)
    else:
        raise BootstrapError(f"--add-scram {text!r}: password= (or salt= and saltedpassword=) is missing")
    return encode_scram(name, mechanism, credential)


def _iterations(text: str, given: str | None) -> int:
    if given is None:
        return MIN_ITERATIONS
    if not given.isdigit() or not MIN_ITERATIONS <= int(given) <= MAX_ITERATIONS:
        raise BootstrapError(f"--add-scram {text!r}: iterations={given} is not a number from {MIN_ITERATIONS} "
                             f"to {MAX_ITERATIONS}")
    return int(given)


def _base64(text: str, key: str, value: str) -> bytes:
    try:
        decoded = base64.b64decode(value, validate=True)
    except (binascii.Error, ValueError):
        decoded = b""
    if not decoded:
        raise BootstrapError(f"--add-scram {text!r}: {key}={value} is not base64")
    return decoded


def bootstrap_records(scram: Sequence[bytes]) -> list[bytes]:
    """What the bootstrap file holds: metadata.version first, then the SCRAM credentials."""
    version = mr.FeatureLevelRecord(version=0, name=METADATA_VERSION, feature_level=SCRAM_METADATA_VERSION)
    return [mr.encode_metadata_record(version), *scram]


def write_bootstrap(directory: Path, records: Sequence[bytes]) -> Path:
    """Write `records` as `directory/bootstrap.checkpoint` (durable, replacing any earlier one)."""
    staging = directory / ".bootstrap.tmp"
    shutil.rmtree(staging, ignore_errors=True)
    staging.mkdir(parents=True)
    with SnapshotWriter(staging, OffsetAndEpoch(0, 0), 0) as writer:
        writer.append(records)
        writer.freeze()
    path = directory / BOOTSTRAP_FILE
    os.replace(writer.path, path)
    staging.rmdir()
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
    return path


def read_bootstrap(directory: Path) -> tuple[bytes, ...]:
    """The records of `directory/bootstrap.checkpoint`; () when there is none. A damaged file raises
    (CorruptSnapshotError naming the path and offset)."""
    path = directory / BOOTSTRAP_FILE
    try:
        fd = os.open(path, os.O_RDONLY)
    except FileNotFoundError:
        return ()
    try:
        size = os.fstat(fd).st_size
        validate_snapshot(fd, size, path)
        values: list[bytes] = []
        for batch in walk_file(fd, size, path):
            check_batch(batch, path)
            if not batch.is_control:
                values += [value for value in batch.values() if value is not None]
        return tuple(values)
    finally:
        os.close(fd)


def bootstrap_due(image: MetadataImage) -> bool:
    """Whether an active controller with this image must append the bootstrap records first."""
    return METADATA_VERSION not in image.features


class NodeScramCredentials:
    """The SCRAM users a node's SASL listeners authenticate: its latest image's; until that image
    holds the bootstrap records (a controller before the first leader committed them, which its
    Raft peers may need to log in to elect that leader), those of its own bootstrap.checkpoint."""

    def __init__(self, image: Callable[[], MetadataImage], directory: Path) -> None:
        self._image = image
        self._directory = directory
        self._bootstrap: Mapping[tuple[str, str], ScramCredential] | None = None

    def __call__(self) -> Mapping[tuple[str, str], ScramCredential]:
        image = self._image()
        if image.scram or not bootstrap_due(image):
            return image.scram
        if self._bootstrap is None:
            self._bootstrap = scram_credentials(read_bootstrap(self._directory))
        return self._bootstrap


def scram_credentials(values: Sequence[bytes]) -> Mapping[tuple[str, str], ScramCredential]:
    """The SCRAM credentials metadata records `values` leave, replayed into an empty image."""
    delta = MetadataDelta(MetadataImage("", -1))
    for offset, value in enumerate(values):
        delta.replay(value, offset)
    return delta.apply().scram
