"""SCRAM-SHA-256 and SCRAM-SHA-512 (RFC 5802, RFC 7677) on the wire: the math, the messages and the
client's side of the exchange, sans-IO. The server's side, which holds users' credentials, is
`quorum.security.scram`; the SDK (`client_epochs`) logs in with `ScramClient` through
`quorum.wire.sasl_client`, so neither imports more of `quorum` than its wire layer.

The exchange is client-first (`n,,n=<user>,r=<client nonce>`), server-first (`r=<nonces>,s=<salt>,
i=<iterations>`), client-final (`c=biws,r=<nonces>,p=<proof>`), server-final (`v=<signature>` or
`e=<error>`). Like Kafka: no channel binding (`n` only), no SASLprep of names or passwords, names
with `=2C`/`=3D` for `,`/`=`, at least 4096 iterations. Signatures are compared in constant time
(`hmac.compare_digest`); every parse failure is a `ScramError`.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import re
import secrets
from dataclasses import dataclass

MIN_ITERATIONS = 4096
"""Kafka's ScramMechanism minimum (and the iteration count credentials are made with by default)."""
MAX_ITERATIONS = 16384
"""Kafka's maximum for AlterUserScramCredentials."""

MECHANISMS = {"SCRAM-SHA-256": "sha256", "SCRAM-SHA-512": "sha512"}
"""Kafka's mechanism names and the hash each uses; Kafka's ScramMechanism type ids are 1 and 2."""

_NONCE = re.compile(r"^[\x21-\x2b\x2d-\x7e]+$")  # printable ASCII without ','
_EXTENSIONS = re.compile(r"^(,[a-zA-Z]+=[^,]*)*$")


class ScramError(ValueError):
    """A SCRAM message that does not parse or does not verify; the text says which."""


def mechanism_hash(mechanism: str) -> str:
    """hashlib's name of the mechanism's hash; ScramError for a mechanism that is not SCRAM."""
    try:
        return MECHANISMS[mechanism]
    except KeyError:
        raise ScramError(f"unknown SCRAM mechanism {mechanism!r} (known: {', '.join(MECHANISMS)})") from None


def hmac_digest(name: str, key: bytes, message: bytes) -> bytes:
    return hmac.new(key, message, name).digest()


def salted_password(mechanism: str, password: str, salt: bytes, iterations: int) -> bytes:
    """Hi(password, salt, i) of RFC 5802: PBKDF2 with HMAC of the mechanism's hash."""
    return hashlib.pbkdf2_hmac(mechanism_hash(mechanism), password.encode("utf-8"), salt, iterations)


def attribute_pairs(message: str, what: str) -> list[tuple[str, str]]:
    pairs = []
    for part in message.split(","):
        key, sep, value = part.partition("=")
        if not sep or len(key) != 1:
            raise ScramError(f"{what}: {part!r} is not an attribute=value pair")
        pairs.append((key, value))
    return pairs


def decode_text(data: bytes, encoding: str, what: str) -> str:
    try:
        return data.decode(encoding)
    except UnicodeDecodeError:
        raise ScramError(f"{what} is not {encoding}") from None


def decode_b64(value: str, what: str) -> bytes:
    try:
        return base64.b64decode(value.encode("ascii"), validate=True)
    except (binascii.Error, UnicodeEncodeError, ValueError):
        raise ScramError(f"{what} is not base64") from None


def encode_name(name: str) -> str:
    return name.replace("=", "=3D").replace(",", "=2C")


def decode_name(saslname: str) -> str:
    """RFC 5802's saslname: '=2C' is ',', '=3D' is '=', any other '=' is refused."""
    if re.search(r"=(?!2C|3D)", saslname):
        raise ScramError(f"user name {saslname!r} has an '=' that is not =2C or =3D")
    name = saslname.replace("=2C", ",").replace("=3D", "=")
    if not name:
        raise ScramError("empty user name")
    return name


@dataclass(frozen=True, slots=True)
class ClientFirst:
    user: str
    nonce: str
    bare: str
    gs2_header: str
    authzid: str


def parse_client_first(data: bytes) -> ClientFirst:
    """`n,[a=authzid],n=user,r=nonce[,extensions]` (Kafka accepts extensions such as tokenauth)."""
    text = decode_text(data, "utf-8", "client-first message")
    match = re.fullmatch(r"(?P<gs2>n,(?:a=(?P<authzid>[^,]*))?,)(?P<bare>n=(?P<user>[^,]*),r=(?P<nonce>[^,]*)"
                         r"(?P<extensions>.*))", text, re.DOTALL)
    if match is None:
        raise ScramError("client-first message is not n,[a=authzid],n=user,r=nonce (channel binding is not "
                         "supported)")
    if not _NONCE.match(match["nonce"]):
        raise ScramError("client nonce is empty or not printable ASCII")
    if not _EXTENSIONS.match(match["extensions"]):
        raise ScramError("client-first extensions are not ,key=value pairs")
    user = decode_name(match["user"])
    authzid = match["authzid"] or ""
    if authzid and decode_name(authzid) != user:
        raise ScramError("authorization id differs from the user name")
    return ClientFirst(user, match["nonce"], match["bare"], match["gs2"], authzid)


@dataclass(frozen=True, slots=True)
class ClientFinal:
    channel_binding: str
    nonce: str
    proof: bytes
    without_proof: str


def parse_client_final(data: bytes) -> ClientFinal:
    """`c=<base64 gs2 header>,r=<nonce>[,extensions],p=<base64 proof>`."""
    text = decode_text(data, "ascii", "client-final message")
    without_proof, sep, proof = text.rpartition(",p=")
    if not sep:
        raise ScramError("client-final message has no proof (p=)")
    pairs = attribute_pairs(without_proof, "client-final message")
    if len(pairs) < 2 or pairs[0][0] != "c" or pairs[1][0] != "r":
        raise ScramError("client-final message does not start c=...,r=...")
    return ClientFinal(pairs[0][1], pairs[1][1], decode_b64(proof, "client proof"), without_proof)


class ScramClient:
    """The client's side (the node's own SASL connections and the tests): `first()`, `final(server_first)`,
    `verify(server_final)`; ScramError when the server's messages do not parse or do not verify."""

    def __init__(self, mechanism: str, user: str, password: str, nonce: str | None = None) -> None:
        self._hash = mechanism_hash(mechanism)
        self.mechanism = mechanism
        self._user = user
        self._password = password
        self._nonce = nonce or secrets.token_urlsafe(24)
        self._bare = f"n={encode_name(user)},r={self._nonce}"
        self._server_signature = b""

    def first(self) -> bytes:
        return f"n,,{self._bare}".encode()

    def final(self, server_first: bytes) -> bytes:
        text = decode_text(server_first, "ascii", "server-first message")
        pairs = dict(attribute_pairs(text, "server-first message"))
        nonce, salt, iterations = pairs.get("r", ""), pairs.get("s"), pairs.get("i", "")
        if not nonce.startswith(self._nonce) or len(nonce) == len(self._nonce) or salt is None:
            raise ScramError("server-first message has a bad nonce or no salt")
        if not iterations.isdigit() or int(iterations) < MIN_ITERATIONS:
            raise ScramError(f"server asks for {iterations!r} iterations (at least {MIN_ITERATIONS})")
        salted = salted_password(self.mechanism, self._password, decode_b64(salt, "salt"), int(iterations))
        client_key = hmac_digest(self._hash, salted, b"Client Key")
        stored_key = hashlib.new(self._hash, client_key).digest()
        without_proof = f"c={base64.b64encode(b'n,,').decode()},r={nonce}"
        auth_message = f"{self._bare},{text},{without_proof}".encode()
        proof = bytes(a ^ b for a, b in zip(client_key, hmac_digest(self._hash, stored_key, auth_message), strict=True))
        self._server_signature = hmac_digest(self._hash, hmac_digest(self._hash, salted, b"Server Key"), auth_message)
        return f"{without_proof},p={base64.b64encode(proof).decode()}".encode()

    def verify(self, server_final: bytes) -> None:
        text = server_final.decode("ascii", errors="replace")
        if text.startswith("e="):
            raise ScramError(f"server refused: {text[2:]}")
        if not text.startswith("v=") or not hmac.compare_digest(decode_b64(text[2:], "server signature"),
                                                                 self._server_signature):
            raise ScramError("server signature does not verify")
