"""SCRAM credentials in the metadata log: UserScramCredentialRecord (11) and RemoveUserScramCredentialRecord (22).

Kafka's records (3.5+, KIP-900), built and read here so that the controller (which writes them),
`quorum storage format --add-scram` (which bootstraps them), the image (which replays them and writes
them into snapshots) and the tests agree on one mapping between a record and a `ScramCredential`.
A credential is keyed by (user name, mechanism name): a user may have one per mechanism. The log
holds only what a server needs to check a proof (salt, StoredKey, ServerKey, iterations), never a
password nor the salted password.
"""

from __future__ import annotations

from typing import Any

from quorum.security.scram import MECHANISM_TYPES, ScramCredential
from quorum.wire import metadata_records as mr

MECHANISM_NAMES = {code: name for name, code in MECHANISM_TYPES.items()}
"""Kafka's ScramMechanism type id -> mechanism name (1: SCRAM-SHA-256, 2: SCRAM-SHA-512)."""

ScramKey = tuple[str, str]
"""(user name, mechanism name): what one credential is stored under."""


def scram_record(user: str, mechanism: str, credential: ScramCredential) -> Any:
    """The UserScramCredentialRecord v0 that sets `user`'s `mechanism` credential."""
    return mr.UserScramCredentialRecord(
        version=0, name=user, mechanism=MECHANISM_TYPES[mechanism], salt=credential.salt,
        stored_key=credential.stored_key, server_key=credential.server_key, iterations=credential.iterations)


def encode_scram(user: str, mechanism: str, credential: ScramCredential) -> bytes:
    return mr.encode_metadata_record(scram_record(user, mechanism, credential))


def encode_scram_removal(user: str, mechanism: str) -> bytes:
    """The RemoveUserScramCredentialRecord v0 that deletes `user`'s `mechanism` credential."""
    return mr.encode_metadata_record(
        mr.RemoveUserScramCredentialRecord(version=0, name=user, mechanism=MECHANISM_TYPES[mechanism]))


def scram_key(record: Any) -> ScramKey:
    """(user, mechanism name) of either record; MetadataRecordError for a mechanism Kafka does not have
    or an empty user name (the controller never writes either)."""
    mechanism = MECHANISM_NAMES.get(record.mechanism)
    kind = type(record).__name__
    if mechanism is None:
        raise mr.MetadataRecordError(f"{kind}.Mechanism {record.mechanism} is not a SCRAM mechanism "
                                     f"(1: SCRAM-SHA-256, 2: SCRAM-SHA-512)")
    if not record.name:
        raise mr.MetadataRecordError(f"{kind}.Name is empty")
    return record.name, mechanism


def credential_of(record: Any) -> tuple[ScramKey, ScramCredential]:
    """The key and credential a UserScramCredentialRecord holds (MetadataRecordError as `scram_key`)."""
    return scram_key(record), ScramCredential(bytes(record.salt or b""), bytes(record.stored_key or b""),
                                              bytes(record.server_key or b""), record.iterations)
