"""SCRAM-SHA-256 and SCRAM-SHA-512 (RFC 5802, RFC 7677) as Kafka runs them: the math, the messages,
and the server's and the client's side of the exchange as sans-IO objects.

The exchange is client-first (`n,,n=<user>,r=<client nonce>`), server-first (`r=<nonces>,s=<salt>,
i=<iterations>`), client-final (`c=biws,r=<nonces>,p=<proof>`), server-final (`v=<signature>` or
`e=<error>`). The server stores only what Kafka's UserScramCredentialRecord holds (salt, StoredKey,
ServerKey, iterations), never the password. Like Kafka: no channel binding (`n` only), no SASLprep
of names or passwords, names with `=2C`/`=3D` for `,`/`=`, at least 4096 iterations. Keys and
proofs are compared in constant time (`hmac.compare_digest`); every parse failure is a
`ScramError`, which the server turns into SASL_AUTHENTICATION_FAILED.
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
MECHANISM_TYPES = {"SCRAM-SHA-256": 1, "SCRAM-SHA-512": 2}

_NONCE = re.compile(r"^[\x21-\x2b\x2d-\x7e]+$")  # printable ASCII without ','
_EXTENSIONS = re.compile(r"^(,[a-zA-Z]+=[^,]*)*$")


class ScramError(ValueError):
    """A SCRAM message that does not parse or does not verify; the text says which."""


@dataclass(frozen=True, slots=True)
class ScramCredential:
    """What a server keeps of a SCRAM user (UserScramCredentialRecord's fields)."""

    salt: bytes
    stored_key: bytes
    server_key: bytes
    iterations: int


def _hash(mechanism: str) -> str:
    try:
        return MECHANISMS[mechanism]
    except KeyError:
        raise ScramError(f"unknown SCRAM mechanism {mechanism!r} (known: {', '.join(MECHANISMS)})") from None


def _hmac(name: str, key: bytes, message: bytes) -> bytes:
    return hmac.new(key, message, name).digest()


def salted_password(mechanism: str, password: str, salt: bytes, iterations: int) -> bytes:
    """Hi(password, salt, i) of RFC 5802: PBKDF2 with HMAC of the mechanism's hash."""
    return hashlib.pbkdf2_hmac(_hash(mechanism), password.encode("utf-8"), salt, iterations)


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
    name = _hash(mechanism)
    client_key = _hmac(name, salted, b"Client Key")
    return ScramCredential(salt, hashlib.new(name, client_key).digest(), _hmac(name, salted, b"Server Key"),
                           iterations)


def _fields(message: str, what: str) -> list[tuple[str, str]]:
    pairs = []
    for part in message.split(","):
        key, sep, value = part.partition("=")
        if not sep or len(key) != 1:
            raise ScramError(f"{what}: {part!r} is not an attribute=value pair")
        pairs.append((key, value))
    return pairs


def _text(data: bytes, encoding: str, what: str) -> str:
    try:
        return data.decode(encoding)
    except UnicodeDecodeError:
        raise ScramError(f"{what} is not {encoding}") from None


def _b64(value: str, what: str) -> bytes:
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
    text = _text(data, "utf-8", "client-first message")
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
    text = _text(data, "ascii", "client-final message")
    without_proof, sep, proof = text.rpartition(",p=")
    if not sep:
        raise ScramError("client-final message has no proof (p=)")
    pairs = _fields(without_proof, "client-final message")
    if len(pairs) < 2 or pairs[0][0] != "c" or pairs[1][0] != "r":
        raise ScramError("client-final message does not start c=...,r=...")
    return ClientFinal(pairs[0][1], pairs[1][1], _b64(proof, "client proof"), without_proof)


class ScramServer:
    """The server's side of one SCRAM exchange: `first(message)` then `final(message)`; each returns
    the bytes to send, or raises ScramError (authentication failed). `user` is set once verified."""

    def __init__(self, mechanism: str, lookup, nonce: str | None = None) -> None:
        """`lookup(user)`: the user's ScramCredential for this mechanism, or None."""
        self.mechanism = mechanism
        self._hash = _hash(mechanism)
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
        if _b64(final.channel_binding, "channel binding") != first.gs2_header.encode():
            raise ScramError("channel binding (c=) does not match the client-first gs2 header")
        auth_message = f"{first.bare},{self._server_first},{final.without_proof}".encode()
        signature = _hmac(self._hash, credential.stored_key, auth_message)
        if len(final.proof) != len(signature):
            raise ScramError("client proof has the wrong length")
        client_key = bytes(a ^ b for a, b in zip(final.proof, signature, strict=True))
        if not hmac.compare_digest(hashlib.new(self._hash, client_key).digest(), credential.stored_key):
            raise ScramError(f"invalid credentials for user {first.user!r}")
        self.user = first.user
        server_signature = _hmac(self._hash, credential.server_key, auth_message)
        return b"v=" + base64.b64encode(server_signature)


class ScramClient:
    """The client's side (the node's own SASL connections and the tests): `first()`, `final(server_first)`,
    `verify(server_final)`; ScramError when the server's messages do not parse or do not verify."""

    def __init__(self, mechanism: str, user: str, password: str, nonce: str | None = None) -> None:
        self._hash = _hash(mechanism)
        self.mechanism = mechanism
        self._user = user
        self._password = password
        self._nonce = nonce or secrets.token_urlsafe(24)
        self._bare = f"n={encode_name(user)},r={self._nonce}"
        self._server_signature = b""

    def first(self) -> bytes:
        return f"n,,{self._bare}".encode()

    def final(self, server_first: bytes) -> bytes:
        text = _text(server_first, "ascii", "server-first message")
        pairs = dict(_fields(text, "server-first message"))
        nonce, salt, iterations = pairs.get("r", ""), pairs.get("s"), pairs.get("i", "")
        if not nonce.startswith(self._nonce) or len(nonce) == len(self._nonce) or salt is None:
            raise ScramError("server-first message has a bad nonce or no salt")
        if not iterations.isdigit() or int(iterations) < MIN_ITERATIONS:
            raise ScramError(f"server asks for {iterations!r} iterations (at least {MIN_ITERATIONS})")
        salted = salted_password(self.mechanism, self._password, _b64(salt, "salt"), int(iterations))
        client_key = _hmac(self._hash, salted, b"Client Key")
        stored_key = hashlib.new(self._hash, client_key).digest()
        without_proof = f"c={base64.b64encode(b'n,,').decode()},r={nonce}"
        auth_message = f"{self._bare},{text},{without_proof}".encode()
        proof = bytes(a ^ b for a, b in zip(client_key, _hmac(self._hash, stored_key, auth_message), strict=True))
        self._server_signature = _hmac(self._hash, _hmac(self._hash, salted, b"Server Key"), auth_message)
        return f"{without_proof},p={base64.b64encode(proof).decode()}".encode()

    def verify(self, server_final: bytes) -> None:
        text = server_final.decode("ascii", errors="replace")
        if text.startswith("e="):
            raise ScramError(f"server refused: {text[2:]}")
        if not text.startswith("v=") or not hmac.compare_digest(_b64(text[2:], "server signature"),
                                                                 self._server_signature):
            raise ScramError("server signature does not verify")
