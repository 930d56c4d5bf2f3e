"""The server's side of SCRAM-SHA-256/512 (RFC 5802, RFC 7677) as Kafka runs it: the credentials a
server keeps and the sans-IO exchange that verifies a client against them. The messages, the math
and the client's side are `quorum.wire.scram` (re-exported here for the node's code).

The server stores only what Kafka's UserScramCredentialRecord holds (salt, StoredKey, ServerKey,
iterations), never the password. Keys and proofs are compared in constant time
(`hmac.compare_digest`); every parse failure is a `ScramError`, which the server turns into
SASL_AUTHENTICATION_FAILED.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import secrets
from dataclasses import dataclass

from quorum.wire.scram import (
    MAX_ITERATIONS,
    MECHANISMS,
    MIN_ITERATIONS,
    ClientFirst,
    ScramClient,
    ScramError,
    decode_b64,
    decode_name,
    encode_name,
    hmac_digest,
    mechanism_hash,
    parse_client_final,
    parse_client_first,
    salted_password,
)

__all__ = ["MAX_ITERATIONS", "MECHANISMS", "MECHANISM_TYPES", "MIN_ITERATIONS", "ScramClient", "ScramCredential",
           "ScramError", "ScramServer", "credential_of_salted", "decode_name", "encode_name", "make_credential",
           "parse_client_final", "parse_client_first", "salted_password"]

MECHANISM_TYPES = {"SCRAM-SHA-256": 1, "SCRAM-SHA-512": 2}
"""Kafka's ScramMechanism type ids."""


@dataclass(frozen=True, slots=True)
class ScramCredential:
    """What a server keeps of a SCRAM user (UserScramCredentialRecord's fields)."""

    salt: bytes
    stored_key: bytes
    server_key: bytes
    iterations: int


def make_credential(mechanism: str, password: str, iterations: int = MIN_ITERATIONS,
                    salt: bytes | None = None) -> ScramCredential:
    """The credential a server stores for `password` (a random 32-byte salt unless given)."""
    if not MIN_ITERATIONS <= iterations <= MAX_ITERATIONS:
        raise ScramError(f"iterations must be between {MIN_ITERATIONS} and {MAX_ITERATIONS}, got {iterations}")
    salt = secrets.token_bytes(32) if salt is None else salt
    return credential_of_salted(mechanism, salt, salted_password(mechanism, password, salt, iterations), iterations)


def credential_of_salted(mechanism: str, salt: bytes, salted: bytes, iterations: int) -> ScramCredential:
    """The credential for a salted password (what AlterUserScramCredentials and `--add-scram
    saltedpassword=` give): StoredKey = H(HMAC(salted, "Client Key")), ServerKey = HMAC(salted, "Server Key")."""
    name = mechanism_hash(mechanism)
    client_key = hmac_digest(name, salted, b"Client Key")
    return ScramCredential(salt, hashlib.new(name, client_key).digest(), hmac_digest(name, salted, b"Server Key"),
                           iterations)


class ScramServer:
    """The server's side of one SCRAM exchange: `first(message)` then `final(message)`; each returns
    the bytes to send, or raises ScramError (authentication failed). `user` is set once verified."""

    def __init__(self, mechanism: str, lookup, nonce: str | None = None) -> None:
        """`lookup(user)`: the user's ScramCredential for this mechanism, or None."""
        self.mechanism = mechanism
        self._hash = mechanism_hash(mechanism)
        self._lookup = lookup
        self._server_nonce = nonce or secrets.token_urlsafe(24)
        self._first: ClientFirst | None = None
        self._server_first = ""
        self._credential: ScramCredential | None = None
        self.user: str | None = None

    def first(self, data: bytes) -> bytes:
        if self._first is not None:
            raise ScramError("a second client-first message")
        first = parse_client_first(data)
        credential = self._lookup(first.user)
        if credential is None:
            raise ScramError(f"unknown user {first.user!r}")
        self._first, self._credential = first, credential
        self._server_first = (f"r={first.nonce}{self._server_nonce},"
                              f"s={base64.b64encode(credential.salt).decode()},i={credential.iterations}")
        return self._server_first.encode()

    def final(self, data: bytes) -> bytes:
        first, credential = self._first, self._credential
        if first is None or credential is None or self.user is not None:
            raise ScramError("client-final message out of order")
        final = parse_client_final(data)
        # Kafka (3.8.1+, its fix of CVE-2024-56128) checks that the nonce ENDS with the server-first
        # one: librdkafka before 2.6.1 sends its own nonce once more in front (librdkafka PR 4895).
        expected = first.nonce + self._server_nonce
        if not hmac.compare_digest(final.nonce[-len(expected):].encode(), expected.encode()):
            raise ScramError("nonce does not match the server-first message")
        if decode_b64(final.channel_binding, "channel binding") != first.gs2_header.encode():
            raise ScramError("channel binding (c=) does not match the client-first gs2 header")
        auth_message = f"{first.bare},{self._server_first},{final.without_proof}".encode()
        signature = hmac_digest(self._hash, credential.stored_key, auth_message)
        if len(final.proof) != len(signature):
            raise ScramError("client proof has the wrong length")
        client_key = bytes(a ^ b for a, b in zip(final.proof, signature, strict=True))
        if not hmac.compare_digest(hashlib.new(self._hash, client_key).digest(), credential.stored_key):
            raise ScramError(f"invalid credentials for user {first.user!r}")
        self.user = first.user
        server_signature = hmac_digest(self._hash, credential.server_key, auth_message)
        return b"v=" + base64.b64encode(server_signature)
